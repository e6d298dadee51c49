"""Helpers shared by the lifecycle tests: drive sync/async savers and graphs alike, inspect Redis."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from redis_saver import AsyncRedisSaver
from redis_saver.keys import KeySchema, dec_first, thread_tag


def is_async(saver: Any) -> bool:
    return isinstance(saver, AsyncRedisSaver)


async def call(saver: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """``saver.<name>(...)`` for a sync saver, ``await saver.a<name>(...)`` for an async one."""
    if is_async(saver):
        return await getattr(saver, "a" + name)(*args, **kwargs)
    return getattr(saver, name)(*args, **kwargs)


async def alist(saver: Any, config: Any, **kwargs: Any) -> list:
    if is_async(saver):
        return [t async for t in saver.alist(config, **kwargs)]
    return list(saver.list(config, **kwargs))


async def op(saver: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """``call``, with ``list`` collected into a list."""
    if name == "list":
        return await alist(saver, *args, **kwargs)
    return await call(saver, name, *args, **kwargs)


async def base_delta_history(saver: Any, *, config: Any, channels: list[str]) -> Any:
    """The base class's default walk (get_tuple + parent_config), run on ``saver``."""
    if is_async(saver):
        return await BaseCheckpointSaver.aget_delta_channel_history(saver, config=config, channels=channels)
    return BaseCheckpointSaver.get_delta_channel_history(saver, config=config, channels=channels)


async def invoke(graph: Any, saver: Any, inp: Any, config: Any) -> Any:
    if is_async(saver):
        return await graph.ainvoke(inp, config)
    return graph.invoke(inp, config)


async def get_state(graph: Any, saver: Any, config: Any, **kwargs: Any) -> Any:
    if is_async(saver):
        return await graph.aget_state(config, **kwargs)
    return graph.get_state(config, **kwargs)


async def state_history(graph: Any, saver: Any, config: Any) -> list:
    if is_async(saver):
        return [s async for s in graph.aget_state_history(config)]
    return list(graph.get_state_history(config))


def cfg(thread_id: str, **extra: Any) -> dict:
    return {"configurable": {"thread_id": thread_id, **extra}}


def thread_key_prefix(prefix: str, thread_id: str) -> bytes:
    return prefix.encode() + b":{" + thread_tag(thread_id) + b"}:"


def scan_keys(client: Any, prefix: str) -> list[bytes]:
    return sorted(client.scan_iter(match=KeySchema(prefix).scan_pattern(), count=1000))


def thread_keys(client: Any, prefix: str, thread_id: str) -> list[bytes]:
    tp = thread_key_prefix(prefix, thread_id)
    return [k for k in scan_keys(client, prefix) if k.startswith(tp)]


def memory_usage(client: Any, keys: list[bytes]) -> int:
    """Sum of ``MEMORY USAGE key SAMPLES 0`` (every element counted)."""
    return sum(client.memory_usage(k, samples=0) or 0 for k in keys)


def dump_prefix(client: Any, prefix: str, only: bytes | None = None) -> dict[bytes, tuple[bytes | None, int]]:
    """Key -> (DUMP, has-ttl) of every key under ``prefix`` (optionally only keys starting with ``only``)."""
    out = {}
    for k in scan_keys(client, prefix):
        if only is not None and not k.startswith(only):
            continue
        out[k] = (client.dump(k), client.pttl(k) >= 0)
    return out


def view(s: Any) -> tuple:
    """The comparable part of a StateSnapshot (ids, timestamps and parent maps differ between savers)."""
    return (
        s.values,
        s.next,
        tuple(i.value for i in s.interrupts),
        s.metadata.get("step") if s.metadata else None,
        s.metadata.get("source") if s.metadata else None,
    )


def write_count(client: Any, wr_key: bytes) -> int:
    """Pending writes stored in a thread's wr hash (field "" is the lean mark, not a write)."""
    return client.hlen(wr_key) - client.hexists(wr_key, "")


def blob_fields(client: Any, blob_key: bytes) -> set[bytes]:
    """The fields of a thread's blob hash that hold value records (field "" is the blob mark;
    stream directories and frames are not values), after checking its streams' invariants."""
    h = client.hgetall(blob_key)
    check_stream_hash(h)
    return {f for f in h if f and not is_stream_part(f)}


def _after(s: bytes, pos: int) -> int:
    """Position just after the e() component that starts at ``pos``."""
    return dec_first(s, pos)[1]


def is_stream_part(field: bytes) -> bool:
    """A blob field e(ns)e(channel)\\0... : a stream's directory or frame, not a version."""
    return field[_after(field, _after(field, 0)) :].startswith(b"\0")


def check_stream_hash(h: dict[bytes, bytes]) -> dict[str, int]:
    """The stream invariants of one thread's blob hash (see "Encoded values" in lua/_lib.lua):
    every stream record names a directory, each directory counts exactly the records naming it and
    lists frames that exist, and nothing else is left. Returns counts of what it holds."""
    from redis_saver.core import values
    from redis_saver.core.codec import pack, unpack, unpack_blob

    dirs, frames, refs = {}, set(), {}
    records = 0
    for f, v in h.items():
        if f == b"":
            continue  # the blob mark
        p = _after(f, _after(f, 0))
        if f[p:].startswith(b"\0"):
            if b"\0" in f[p + 1 :]:
                frames.add(f)
            else:
                dirs[f] = unpack(v)
                # put.lua rewrites a directory's header in place (no unpack / repack): it must
                # stay the record pack() writes
                assert pack(dirs[f]) == v, f"{f!r}: directory record {v!r} is not well framed"
            continue
        records += 1
        ty, data = unpack_blob(v)
        if ty.endswith(values.STREAM_MARK):
            assert len(v) <= values.STREAM_REC_MAX
            d = f[:p] + b"\0" + unpack(data)[0]
            refs[d] = refs.get(d, 0) + 1
    assert set(refs) == set(dirs), "a record names a missing stream, or a stream nobody names"
    listed = set()
    for d, dir_ in dirs.items():
        assert int(dir_[1]) == refs[d], f"{d!r}: {dir_[1]} references recorded, {refs[d]} records"
        assert 1 <= (len(dir_) - 3) // 2 <= values.MAX_FRAMES
        listed.update(d + b"\0" + dir_[k] for k in range(3, len(dir_) - 1, 2))
        assert int(dir_[-1]) == int(dir_[0])  # the last frame ends where the stream does
    assert listed == frames, "a listed frame is missing, or a frame is not listed"
    return {"records": records, "streams": len(dirs), "frames": len(frames)}


def referenced_blob_fields(client: Any, tp: bytes) -> set[bytes]:
    """Blob fields named by the channel versions of the thread's stored checkpoints
    (``tp`` = the thread's key prefix); decodes the records as the scripts do."""
    from redis_saver.core.codec import checkpoint_head, unpack
    from redis_saver.keys import dec_first, enc

    out: set[bytes] = set()
    for field, raw in client.hgetall(tp + b"cp").items():
        ns, _ = dec_first(field)
        versions = checkpoint_head(raw)[5]
        if isinstance(versions, bytes):  # an earlier format's record
            versions = unpack(versions)
        for ch, ver in zip(versions[0::2], versions[1::2], strict=True):  # a flat list of pairs
            out.add(enc(ns) + enc(ch) + ver)
    return out
