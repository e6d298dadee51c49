"""Encoded values (storage format 5) against real Redis: compressed writes and checkpoints,
channel values as per-channel streams of zstd frames. Every test reads back what InMemorySaver
returns for the same calls, and ``check_streams`` checks the stored invariants: each stream
record names a stream that exists, each directory counts exactly the records naming it, lists
frames that exist, and no frame or directory is left that nothing names."""

from __future__ import annotations

import asyncio
import pydoc_data.topics
import threading
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from devkit.script_cuts import script_calls
from redis_saver import FORMAT_VERSION
from redis_saver.core import values
from redis_saver.core.codec import unpack_blob
from redis_saver.core.plans.read import _unflatten_tuple
from redis_saver.errors import MalformedReplyError
from tests.lifecycle._util import alist, call, check_stream_hash, is_async

TEXT = " ".join(pydoc_data.topics.topics.values())


def blob_hash(client: Any, saver: Any, thread: str) -> dict[bytes, bytes]:
    return client.hgetall(saver.keys.thread_keys(thread)[4])


def check_streams(client: Any, saver: Any, thread: str) -> dict[str, int]:
    """The stream invariants of one thread's blob hash; returns counts of what it holds."""
    return check_stream_hash(blob_hash(client, saver, thread))


def _thread_memory(client: Any, saver: Any, thread: str) -> int:
    return sum(client.memory_usage(k, samples=0) or 0 for k in saver.keys.thread_keys(thread)[:9])


def _messages(turn: int) -> list[Any]:
    out: list[Any] = []
    for i in range(turn):
        out.append(HumanMessage(TEXT[40000 + i * 150 : 40000 + (i + 1) * 150], id=f"h{i}"))
        out.append(AIMessage(TEXT[i * 900 : (i + 1) * 900], id=f"a{i}"))
    return out


async def _chat(savers: list[Any], turns: int, thread: str = "chat", ns: str = "") -> list[dict]:
    """Store ``turns`` checkpoints of a growing message list (and a counter channel) in each
    saver: the same calls, as LangGraph makes them."""
    configs = [{"configurable": {"thread_id": thread, "checkpoint_ns": ns}} for _ in savers]
    versions = {"messages": None, "n": None}
    for t in range(1, turns + 1):
        cp = empty_checkpoint()
        for ch in versions:
            versions[ch] = savers[0].get_next_version(versions[ch], None)
        cp["channel_versions"] = dict(versions)
        cp["channel_values"] = {"messages": _messages(t), "n": t}
        for i, s in enumerate(savers):
            c = dict(cp)
            configs[i] = await call(s, "put", configs[i], c, {"step": t, "source": "loop"}, dict(versions))
            await call(s, "put_writes", configs[i], [("messages", _messages(t + 1)[-2:]), ("n", t)], f"task{t}")
    return configs


def _same(a: Any, b: Any) -> None:
    assert a.checkpoint["channel_values"] == b.checkpoint["channel_values"]
    assert a.checkpoint["channel_versions"] == b.checkpoint["channel_versions"]
    assert a.metadata == b.metadata
    assert a.pending_writes == b.pending_writes


async def test_a_chat_reads_back_exactly_and_costs_a_fraction(make_saver, sync_client: Any) -> None:
    for kind in ("sync", "async"):
        on, off, ref = make_saver(kind), make_saver(kind, compress=False), InMemorySaver()
        await _chat([on, ref], 30, thread=f"on-{kind}")
        await _chat([off], 30, thread=f"off-{kind}")
        cfg = {"configurable": {"thread_id": f"on-{kind}"}}
        mine = await alist(on, cfg)
        theirs = list(ref.list(cfg))
        assert len(mine) == len(theirs) == 30
        for a, b in zip(mine, theirs, strict=True):
            _same(a, b)
        # a cold reader: another saver, no cache
        cold = make_saver(kind)
        _same(await call(cold, "get_tuple", cfg), ref.get_tuple(cfg))
        got = check_streams(sync_client, on, f"on-{kind}")
        assert got["streams"] >= 1 and got["frames"] <= got["streams"] * values.MERGE_AT
        big, small = _thread_memory(sync_client, off, f"off-{kind}"), _thread_memory(sync_client, on, f"on-{kind}")
        assert small < 0.2 * big, (small, big)


async def test_uncompressed_threads_and_mixed_threads_read_back(make_saver, sync_client: Any) -> None:
    off, on, ref = make_saver("sync", compress=False), make_saver("sync"), InMemorySaver()
    await _chat([off, ref], 10, thread="mix")
    assert check_streams(sync_client, off, "mix")["streams"] == 0
    assert not any(
        b"\x1f" in unpack_blob(v)[0] for f, v in blob_hash(sync_client, off, "mix").items() if f
    ), "compress=False stores raw values"
    # the same thread continued with compression on: old raw versions and new streams side by side
    cfg = {"configurable": {"thread_id": "mix"}}
    last = off.get_tuple(cfg)
    cp = dict(last.checkpoint)
    cp["id"] = empty_checkpoint()["id"]
    versions = {"messages": on.get_next_version(cp["channel_versions"]["messages"], None)}
    cp["channel_versions"] = {**cp["channel_versions"], **versions}
    cp["channel_values"] = {**cp["channel_values"], "messages": _messages(11)}
    on.put(last.config, cp, {"step": 11}, versions)
    ref.put(ref.get_tuple(cfg).config, cp, {"step": 11}, versions)
    for a, b in zip(on.list(cfg), ref.list(cfg), strict=True):
        _same(a, b)
    assert check_streams(sync_client, on, "mix")["streams"] == 1


async def test_streams_follow_prune_latest_mode_copy_and_delete(make_saver, sync_client: Any) -> None:
    for kind in ("sync", "async"):
        s = make_saver(kind)
        ref = InMemorySaver()
        await _chat([s, ref], 40, thread=f"p-{kind}")
        await call(s, "copy_thread", f"p-{kind}", f"c-{kind}")
        assert check_streams(sync_client, s, f"c-{kind}") == check_streams(sync_client, s, f"p-{kind}")
        for a, b in zip(await alist(s, {"configurable": {"thread_id": f"c-{kind}"}}),
                        list(ref.list({"configurable": {"thread_id": f"p-{kind}"}})), strict=True):
            _same(a, b)
        await call(s, "prune", [f"p-{kind}"], strategy="keep_latest")
        left = check_streams(sync_client, s, f"p-{kind}")
        assert left["streams"] == 1 and left["records"] <= 2
        latest = await call(s, "get_tuple", {"configurable": {"thread_id": f"p-{kind}"}})
        _same(latest, ref.get_tuple({"configurable": {"thread_id": f"p-{kind}"}}))
        # the pruned thread goes on appending to its stream
        await _chat([s], 3, thread=f"p-{kind}")
        check_streams(sync_client, s, f"p-{kind}")
        await call(s, "delete_thread", f"c-{kind}")
        assert blob_hash(sync_client, s, f"c-{kind}") == {}
        # history="latest": one stream, whatever the length
        lat = make_saver(kind, history="latest")
        await _chat([lat], 20, thread=f"l-{kind}")
        got = check_streams(sync_client, lat, f"l-{kind}")
        assert got["streams"] == 1 and got["records"] <= 3


async def test_delta_history_and_ttl_with_streams(make_saver, sync_client: Any) -> None:
    s = make_saver("sync", ttl={"default_ttl": 1})
    await _chat([s], 5, thread="ttl")
    keys = [k for k in s.keys.thread_keys("ttl")[:9] if sync_client.exists(k)]
    assert keys and all(0 < sync_client.pttl(k) <= 60_000 for k in keys)  # every key, streams inside
    cfg = {"configurable": {"thread_id": "ttl"}}
    got = s.get_delta_channel_history(config=cfg, channels=["messages"])
    # the target's own value is excluded: the nearest ancestor's value is the seed
    parent = s.get_tuple(s.get_tuple(cfg).parent_config)
    assert got["messages"]["seed"] == parent.checkpoint["channel_values"]["messages"]


def _next(saver: Any, versions: dict[str, Any], t: int) -> dict:
    cp = empty_checkpoint()
    versions["messages"] = saver.get_next_version(versions["messages"], None)
    cp["channel_versions"] = dict(versions)
    cp["channel_values"] = {"messages": _messages(t)}
    return cp


def test_another_writer_in_between_costs_one_more_call_never_a_wrong_value(wire_saver, wire, sync_client) -> None:
    a, b, ref = wire_saver("sync"), wire_saver("sync"), InMemorySaver()
    cfg = ref_cfg = {"configurable": {"thread_id": "race", "checkpoint_ns": ""}}
    versions: dict[str, Any] = {"messages": None}
    for t in (1, 2):
        cp = _next(a, versions, t)
        cfg, ref_cfg = a.put(cfg, cp, {"step": t}, dict(versions)), ref.put(ref_cfg, cp, {"step": t}, dict(versions))
    b.get_tuple(cfg)  # b now knows the stream at its length after turn 2
    cp = _next(a, versions, 3)
    cfg, ref_cfg = a.put(cfg, cp, {"step": 3}, dict(versions)), ref.put(ref_cfg, cp, {"step": 3}, dict(versions))
    # b appends on the stream as it saw it: put.lua refuses (answer 3), b resends a new stream
    cp = _next(b, versions, 4)
    before = wire.count(["FCALL", "EVALSHA", "EVAL"])
    cfg, ref_cfg = b.put(cfg, cp, {"step": 4}, dict(versions)), ref.put(ref_cfg, cp, {"step": 4}, dict(versions))
    assert wire.count(["FCALL", "EVALSHA", "EVAL"]) - before == 2
    assert check_streams(sync_client, a, "race")["streams"] == 2
    # and a, whose stream is still there at the length it knows, appends to it in one call
    cp = _next(a, versions, 5)
    before = wire.count(["FCALL", "EVALSHA", "EVAL"])
    cfg, ref_cfg = a.put(cfg, cp, {"step": 5}, dict(versions)), ref.put(ref_cfg, cp, {"step": 5}, dict(versions))
    assert wire.count(["FCALL", "EVALSHA", "EVAL"]) - before == 1
    for x, y in zip(a.list(cfg), ref.list(ref_cfg), strict=True):
        _same(x, y)
    check_streams(sync_client, a, "race")
    # a stream collected under a writer's cache (delete_thread elsewhere): a new stream
    b.delete_thread("race")
    cp = _next(a, {"messages": None}, 6)
    before = wire.count(["FCALL", "EVALSHA", "EVAL"])
    a.put({"configurable": {"thread_id": "race"}}, cp, {}, dict(cp["channel_versions"]))
    assert wire.count(["FCALL", "EVALSHA", "EVAL"]) - before == 2
    got = a.get_tuple({"configurable": {"thread_id": "race"}})
    assert got.checkpoint["channel_values"]["messages"] == _messages(6)
    check_streams(sync_client, a, "race")


def test_a_read_carries_only_the_frames_the_reader_does_not_hold(make_saver, sync_client, monkeypatch) -> None:
    """get_tuple names the streams its cache holds (id, raw length): the reply leaves out the frames of
    that prefix when it ends where a frame ends (all of them when it is the whole stream), and every
    frame otherwise; what is read back is exactly InMemorySaver's, whoever appended in between."""
    seen: list[list[int]] = []
    decode = values.decode_streams

    def spy(streams, *args):
        seen.append([len(s) - 2 for s in streams])  # the frames each stream entry carries
        return decode(streams, *args)

    monkeypatch.setattr(values, "decode_streams", spy)
    a, b, ref = make_saver("sync"), make_saver("sync"), InMemorySaver()
    cfg = ref_cfg = {"configurable": {"thread_id": "held", "checkpoint_ns": ""}}
    versions: dict[str, Any] = {"messages": None}

    def put(s: Any, t: int) -> None:
        nonlocal cfg, ref_cfg
        cp = _next(s, versions, t)
        cfg, ref_cfg = s.put(cfg, cp, {"step": t}, dict(versions)), ref.put(ref_cfg, cp, {"step": t}, dict(versions))

    def read(s: Any) -> list[int]:
        seen.clear()
        _same(s.get_tuple(cfg), ref.get_tuple(ref_cfg))
        return seen[-1]

    for t in (1, 2, 3):
        put(a, t)
    assert read(a) == [0]  # a wrote it: it holds the whole stream
    assert read(b) == [3]  # b holds nothing: every frame
    put(b, 4)  # b appends one frame to the stream as it read it
    assert read(a) == [1]  # a holds the first 3 frames
    assert read(a) == [0] and read(b) == [0]
    # a held length that is no frame's end: every frame (the script, called as the saver calls it)
    st = next(iter(a._plans.streams.held("held").values()))
    with script_calls(a) as sent:
        a.get_tuple(cfg)
    (fn, *args), = sent
    assert args[-3:] == [1, st.sid, len(st.raw)]
    full = sync_client.fcall(fn, *args[:-1], 7)
    assert [len(s) - 2 for s in _unflatten_tuple(full)[4]] == [4]
    # the thread deleted and written again elsewhere: a's held stream id is gone, the new one read whole
    b.delete_thread("held")
    cfg = ref_cfg = {"configurable": {"thread_id": "held", "checkpoint_ns": ""}}
    ref.delete_thread("held")
    versions["messages"] = None
    put(b, 5)
    assert st.sid in a._plans.streams.held("held") and read(a) == [1]
    check_streams(sync_client, a, "held")


def test_held_streams_are_bounded_and_follow_the_cache() -> None:
    cache = values.StreamCache(1 << 20)
    for i in range(12):
        st = values.Stream(b"s%d" % i, b"x" * 10, 1)
        cache.put(("t", "", f"c{i}"), values.Known(st, ((0, 10),), st.raw))
    held = cache.held("t")
    assert list(held) == [b"s%d" % i for i in range(12 - values.MAX_HELD, 12)]
    cache.drop(("t", "", "c11"))
    assert b"s11" not in cache.held("t") and cache.held("other") == {}
    cache.drop_thread("t")
    assert cache.held("t") == {} and cache._threads == {}


def test_a_reply_that_leaves_out_frames_is_decoded_only_against_a_held_prefix() -> None:
    """decode_streams: an entry with fewer frames than its directory lists extends the held stream
    named in the call whose length is where the first frame sent starts; anything else is refused."""
    from redis_saver.core.codec import pack

    a, b = b"x" * 300, b"y" * 200
    fa, fb = values.compress(a), values.compress(b)
    d = pack([b"500", b"1", b"2", b"0", b"300", b"1", b"500"])  # 2 frames: raw ends 300, 500
    held = {b"s": values.Stream(b"s", a, 1)}
    st = values.decode_streams([[b"s", d, fb]], None, "t", held)[b"s"]
    assert st.raw == a + b and st.frames == 2
    whole = {b"s": values.Stream(b"s", a + b, 5)}
    assert values.decode_streams([[b"s", d]], None, "t", whole)[b"s"].frames == 2  # the stored count
    assert values.decode_streams([[b"s", d, fa, fb]], None, "t", held)[b"s"].raw == a + b  # all sent
    for bad in ({}, {b"s": values.Stream(b"s", a[:-1], 1)}, {b"s": values.Stream(b"s", a + b, 2)}):
        with pytest.raises(MalformedReplyError):
            values.decode_streams([[b"s", d, fb]], None, "t", bad)
    with pytest.raises(MalformedReplyError):
        values.decode_streams([[b"s", d]], None, "t", held)  # none sent: the held stream must be whole


def test_one_call_per_put_when_the_writer_read_the_thread(wire_saver, wire) -> None:
    s = wire_saver("sync")
    cfg = {"configurable": {"thread_id": "w"}}
    versions: dict[str, Any] = {"messages": None}
    for t in range(1, 20):
        cp = empty_checkpoint()
        versions["messages"] = s.get_next_version(versions["messages"], None)
        cp["channel_versions"] = dict(versions)
        cp["channel_values"] = {"messages": _messages(t)}
        before = wire.count(["FCALL", "EVALSHA", "EVAL"])
        cfg = s.put(cfg, cp, {"step": t}, dict(versions))
        assert wire.count(["FCALL", "EVALSHA", "EVAL"]) - before == 1
    fresh = wire_saver("sync")  # another worker: reads the thread, then writes a delta
    tup = fresh.get_tuple({"configurable": {"thread_id": "w"}})
    cp = dict(tup.checkpoint)
    cp["id"] = empty_checkpoint()["id"]
    versions["messages"] = fresh.get_next_version(versions["messages"], None)
    cp["channel_versions"] = dict(versions)
    cp["channel_values"] = {"messages": _messages(20)}
    before = wire.count(["FCALL", "EVALSHA", "EVAL"])
    fresh.put(tup.config, cp, {"step": 20}, dict(versions))
    assert wire.count(["FCALL", "EVALSHA", "EVAL"]) - before == 1


async def test_puts_from_many_threads_share_the_compressors_safely(make_saver) -> None:
    s = make_saver("sync")
    cfg = s.put({"configurable": {"thread_id": "mt"}}, empty_checkpoint(), {}, {})
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for j in range(20):
                s.put_writes(cfg, [(f"c{k}", TEXT[k * 5000 + j * 100 : k * 5000 + j * 100 + 2000])], f"task{k}-{j}")
                s.put({"configurable": {"thread_id": f"mt{k}"}}, _cp(k, j), {}, {"messages": f"{j + 1:012}.0"})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    writes = s.get_tuple(cfg).pending_writes
    assert len(writes) == 6 * 20
    for task, ch, v in writes:
        k, j = (int(x) for x in task[4:].split("-"))
        assert ch == f"c{k}" and v == TEXT[k * 5000 + j * 100 : k * 5000 + j * 100 + 2000]
    for k in range(6):
        got = s.get_tuple({"configurable": {"thread_id": f"mt{k}"}})
        assert got.checkpoint["channel_values"]["messages"] == _messages(19 + k)


def _cp(k: int, j: int) -> dict:
    cp = empty_checkpoint()
    cp["channel_versions"] = {"messages": f"{j + 1:012}.0"}
    cp["channel_values"] = {"messages": _messages(j + k)}
    return cp


async def test_encrypted_values_are_never_stored_in_plaintext(make_saver, sync_client: Any) -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"k" * 16)
    s = make_saver("sync", serde=serde)
    await _chat([s], 6, thread="enc")
    stored = b"".join(k + v for k, v in blob_hash(sync_client, s, "enc").items())
    stored += b"".join(sync_client.hvals(s.keys.thread_keys("enc")[5]))
    for t in range(6):
        assert TEXT[t * 900 : t * 900 + 40].encode() not in stored
    # ciphertext does not compress: stored as it is, no stream
    assert check_streams(sync_client, s, "enc")["streams"] == 0
    assert s.get_tuple({"configurable": {"thread_id": "enc"}}).checkpoint["channel_values"]["messages"] == _messages(6)


def test_a_serializer_type_holding_the_mark_is_refused(make_saver) -> None:
    class Odd:
        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            return "x\x1fz", b"y" * 300

        def loads_typed(self, data: tuple[str, bytes]) -> Any:
            return data

    s = make_saver("sync", serde=Odd())
    with pytest.raises(ValueError, match="x1f"):
        s.put({"configurable": {"thread_id": "odd"}}, empty_checkpoint(), {}, {})


def test_splice_finds_an_appended_list_and_a_grown_header() -> None:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    serde = JsonPlusSerializer()
    known = None
    for t in range(1, 40):
        ty, data = serde.dumps_typed(_messages(t))
        rec, app = values.encode_channel(ty.encode(), data, b"messages\0", known)
        assert app is not None
        if t > 1:
            # the 15 -> 16 and every later header change stay deltas
            assert app.mode in (b"a", b"m"), t
            assert len(app.frame) < 2000 or app.mode == b"m"
        got = values.materialize(app.known.stream.raw, app.known.ops)
        assert got == data
        known = app.known
    assert known is not None and known.stream.frames <= values.MERGE_AT


async def test_async_saver_streams_under_concurrency(make_saver, sync_client: Any) -> None:
    s = make_saver("async")
    assert is_async(s)
    await asyncio.gather(*(_chat([s], 12, thread=f"g{i}") for i in range(6)))
    for i in range(6):
        check_streams(sync_client, s, f"g{i}")
        got = await s.aget_tuple({"configurable": {"thread_id": f"g{i}"}})
        assert got.checkpoint["channel_values"]["messages"] == _messages(12)


async def test_rewrite_values_encodes_raw_threads_in_place(make_saver, sync_client: Any) -> None:
    for kind in ("sync", "async"):
        off, on, ref = make_saver(kind, compress=False), make_saver(kind), InMemorySaver()
        thread = f"rw-{kind}"
        await _chat([off, ref], 25, thread=thread)
        cfg = {"configurable": {"thread_id": thread}}
        blob_key = on.keys.thread_keys(thread)[4]
        before = sync_client.memory_usage(blob_key, samples=0)
        stats = await call(on, "rewrite_values", thread)
        assert stats.values >= 25 and stats.bytes_after < stats.bytes_before / 5
        assert sync_client.memory_usage(blob_key, samples=0) < before / 5
        got = check_streams(sync_client, on, thread)
        assert got["streams"] == 1  # the 25 versions of the message list share one stream
        for a, b in zip(await alist(off, cfg), list(ref.list(cfg)), strict=True):
            _same(a, b)
        assert sync_client.hget(on.keys.thread_keys(thread)[0], "v") == FORMAT_VERSION.encode()
        # again: nothing left to do; and the thread goes on
        again = await call(on, "rewrite_values", thread)
        assert again.values == 0
        await _chat([on], 3, thread=thread)
        check_streams(sync_client, on, thread)


async def test_a_copied_thread_diverges_from_its_source_under_one_cache(make_saver, sync_client: Any) -> None:
    """copy_thread copies stream ids verbatim: the saver's cache must tell the source's stream from
    the copy's, even when both then append values of the same length."""
    s = make_saver("sync")
    await _chat([s], 6, thread="src")
    s.copy_thread("src", "dst")
    for thread, word in (("src", "A"), ("dst", "B")):
        cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        tup = s.get_tuple(cfg)
        cp = dict(tup.checkpoint)
        cp["id"] = empty_checkpoint()["id"]
        v = {"messages": s.get_next_version(cp["channel_versions"]["messages"], None)}
        cp["channel_versions"] = {**cp["channel_versions"], **v}
        cp["channel_values"] = {**cp["channel_values"], "messages": [*_messages(6), HumanMessage(word * 500, id="x")]}
        s.put(tup.config, cp, {"step": 7}, v)
    for thread, word in (("src", "A"), ("dst", "B")):
        got = s.get_tuple({"configurable": {"thread_id": thread}}).checkpoint["channel_values"]["messages"]
        assert got[-1].content == word * 500
        check_streams(sync_client, s, thread)


def test_splice_is_exact_for_any_edit_of_a_list() -> None:
    """Random histories of a msgpack list (appends across the fixarray / array16 / array32 header
    sizes, trims, edits in place, replacement): every version the streams describe is exactly
    its bytes, and an append-only step is a delta whatever the header did."""
    import random

    import ormsgpack

    rng = random.Random(7)
    words = [rng.randbytes(rng.randrange(2, 9)) for _ in range(64)]

    def item(most: int) -> bytes:  # compressible, as text is (random bytes are stored raw)
        return b" ".join(rng.choice(words) for _ in range(rng.randrange(1, most)))

    appended = fast = 0
    for _history in range(60):
        items = [item(8) for _ in range(rng.randrange(0, 20))]
        known = None
        for _step in range(40):
            op = rng.random()
            grew = False
            if op < 0.6:
                n = 30 if rng.random() < 0.02 else rng.randrange(1, 3)
                items += [item(80) for _ in range(n)]
                grew = True
            elif op < 0.75 and items:
                del items[rng.randrange(len(items)) :]
            elif op < 0.9 and items:
                items[rng.randrange(len(items))] = item(8)
            else:
                items = [item(8) for _ in range(rng.randrange(0, 20))]
            data = ormsgpack.packb(items)
            if known is not None:
                # the fast path for a list appended at the stream's end gives the general answer
                base, ops, n = known.value, known.ops, len(known.stream.raw)
                hn, hb = values._array_header(data), values._array_header(base)
                if hn and hb and data[:hn] != base[:hb] and data.startswith(base[hb:], hn):
                    head_and_items = [data[:hn], *values._sub_ops(ops, hb, len(base))]
                    general = values._finish(data, head_and_items, hn + len(base) - hb, n)
                    fast += general is not None and len(ops) <= 2 and ops[-1][1] == n
                    assert values.splice(data, base, ops, n) == general
            rec, app = values.encode_channel(b"msgpack", data, b"messages\0", known)
            if app is None:  # small, or zstd could not shrink it: stored as it is
                assert rec == values.blob_record(b"msgpack", data)
                known = None
                continue
            assert values.materialize(app.known.stream.raw, app.known.ops) == data
            if grew and known is not None and app.known.stream.sid == known.stream.sid:
                appended += 1
                assert app.mode in (b"a", b"m", b"-")
            known = app.known
    assert appended > 300 and fast > 200  # the append path and its fast path were exercised
    # array16 -> array32 (65,536 items)
    items = [b"ab"] * 65_535
    first = ormsgpack.packb(items)
    _, app = values.encode_channel(b"msgpack", first, b"messages\0", None)
    assert app is not None
    second = ormsgpack.packb([*items, b"cd"])
    assert second[:1] == b"\xdd" and first[:1] == b"\xdc"
    _, app = values.encode_channel(b"msgpack", second, b"messages\0", app.known)
    assert app is not None and app.mode == b"a" and len(app.frame) < 100
    assert values.materialize(app.known.stream.raw, app.known.ops) == second
