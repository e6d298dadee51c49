"""With an integrity key, no tampering of a real graph's stored thread is read back as state.

Black box: two threads of a real graph (a subgraph's namespace, pending writes beside a pending
interrupt) are written with a key, then each stored field of one thread is flipped, truncated,
replaced by another field's value of the same thread (another checkpoint, channel, version,
task or namespace), replaced by a value of the other thread, or the thread is written on by a
saver without the key carrying a payload that the default serializer would call. After each
change the worker's reads (the list, every checkpoint, each namespace's latest) must return
what they did before or raise (``IntegrityError``; ``MalformedReplyError`` where a record no
longer parses), never changed state, and the planted payload is never called. Each test runs
for RedisSaver and for AsyncRedisSaver (writer and reader of that class).
"""

from __future__ import annotations

import os
import random
from typing import Any

import pytest
import redis

import redis_saver
from tests.integrity import canary
from tests.integrity._graphs import SERDE, Sync, classify, close_sync, reads, restore, run_thread, snapshot

KEY = os.urandom(32)


def _saver(kind: str, r: Any, url: str, **kw: Any) -> Any:
    """A RedisSaver on ``r``, or an AsyncRedisSaver driven from sync code (``Sync``)."""
    if kind == "sync":
        return redis_saver.RedisSaver(r, **kw)
    return Sync(redis_saver.AsyncRedisSaver, url, **kw)


@pytest.fixture(params=["sync", "async"])
def env(request: pytest.FixtureRequest, redis_url: str, prefix: str) -> Any:
    r = redis.Redis.from_url(redis_url)
    kind = request.param
    writer = _saver(kind, r, redis_url, prefix=prefix, serde=SERDE, integrity_key=KEY)
    run_thread(writer, "A")
    run_thread(writer, "B")
    # the tampered thread's reader holds no stream in its cache: every read takes what is stored
    reader = _saver(kind, r, redis_url, prefix=prefix, serde=SERDE, integrity_key=KEY, cache_bytes=0)
    places = [(t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"])
              for t in reader.list({"configurable": {"thread_id": "A"}})]
    assert "" in {ns for ns, _ in places} and len({ns for ns, _ in places}) >= 2, places  # root and subgraph namespaces
    base = reads(reader, "A", places)
    latest = reader.get_tuple({"configurable": {"thread_id": "A"}})
    assert latest is not None
    assert any(w[1] == "__interrupt__" for w in latest.pending_writes)  # the interrupt is pending
    assert any(w[1] != "__interrupt__" for w in latest.pending_writes)  # and another task's writes
    canary.CALLS.clear()
    yield r, prefix, reader, places, base
    close_sync(writer, reader)
    r.close()


def _hash(prefix: str, thread: str, name: str) -> str:
    return f"{prefix}:{{{thread}}}:{name}"


def _run(r: Any, prefix: str, reader: Any, places: list[Any], base: Any, changes: list[Any]) -> dict[str, int]:
    """Apply each change (a function of the client) on a fresh copy of the stored data, read,
    and add up the outcomes."""
    snap = snapshot(r, prefix)
    total = dict.fromkeys(["unchanged", "IntegrityError", "malformed", "absent", "changed"], 0)
    bad = []
    for change in changes:
        restore(r, prefix, snap)
        desc = change(r)
        got = reads(reader, "A", places)
        counts = classify(base, got)
        for k, v in counts.items():
            total[k] += v
        if counts["changed"]:
            bad.append(desc)
    restore(r, prefix, snap)
    assert not bad, f"changed state read back without IntegrityError after: {bad[:5]}"
    assert canary.CALLS == []
    return total


def _fields(r: Any, prefix: str, thread: str) -> list[tuple[str, bytes, bytes]]:
    out = []
    for name in ("cp", "blob", "wr"):
        for f, v in r.hgetall(_hash(prefix, thread, name)).items():
            if v:
                out.append((name, f, v))
    return sorted(out)


def _set(key: str, field: bytes, value: bytes, desc: str) -> Any:
    def change(r: Any) -> str:
        r.hset(key, field, value)
        return desc

    return change


def test_flipped_and_truncated_bytes_are_refused(env: Any) -> None:
    r, prefix, reader, places, base = env
    _flipped_and_truncated(r, prefix, reader, places, base)


def _flipped_and_truncated(r: Any, prefix: str, reader: Any, places: list[Any], base: Any, n: int = 40) -> None:
    changes = []
    for name, f, v in random.Random(3).sample(_fields(r, prefix, "A"), n):
        key = _hash(prefix, "A", name)
        for pos in sorted({0, len(v) // 2, len(v) - 1}):
            if 0 <= pos < len(v):
                flipped = v[:pos] + bytes([v[pos] ^ 0x01]) + v[pos + 1 :]
                changes.append(_set(key, f, flipped, f"flip {name} {f!r} @{pos}"))
        changes.append(_set(key, f, v[: len(v) // 2], f"truncate {name} {f!r} to half"))
    total = _run(r, prefix, reader, places, base, changes)
    print(total)
    assert total["IntegrityError"] > len(changes) // 2, total


def test_values_moved_within_the_thread_are_refused(env: Any) -> None:
    """Another checkpoint's record, another channel's or version's value, another task's or
    index's write, the other namespace's: each moved onto a field of the same kind."""
    _moved_within(*env)


def _moved_within(r: Any, prefix: str, reader: Any, places: list[Any], base: Any, n: int = 40) -> None:
    rng = random.Random(7)
    fields = _fields(r, prefix, "A")
    changes = []
    for name in ("cp", "blob", "wr"):
        same = [(f, v) for n, f, v in fields if n == name]
        pairs = [(a, b) for a in same for b in same if a[1] != b[1]]
        for (fa, _), (fb, vb) in rng.sample(pairs, min(len(pairs), n)):
            changes.append(_set(_hash(prefix, "A", name), fa, vb, f"{name} {fa!r} := {fb!r}"))
    total = _run(r, prefix, reader, places, base, changes)
    assert total["IntegrityError"] > 0 and total["changed"] == 0, total


def test_values_copied_from_another_thread_are_refused(env: Any) -> None:
    _copied_from_another(*env)


def _copied_from_another(r: Any, prefix: str, reader: Any, places: list[Any], base: Any) -> None:
    rng = random.Random(11)
    a, b = _fields(r, prefix, "A"), _fields(r, prefix, "B")
    changes = []
    for name in ("cp", "blob", "wr"):
        mine = [f for n, f, _ in a if n == name]
        theirs = [(f, v) for n, f, v in b if n == name]
        pairs = [(fa, fb, vb) for fa in mine for fb, vb in theirs]
        for fa, fb, vb in rng.sample(pairs, min(len(pairs), 40)):
            changes.append(_set(_hash(prefix, "A", name), fa, vb, f"{name} {fa!r} := B's {fb!r}"))
    # and B's records under B's own field names, where A holds none (a planted checkpoint)
    for fb, vb in [(f, v) for n, f, v in b if n == "cp"][:5]:
        changes.append(_set(_hash(prefix, "A", "cp"), fb, vb, f"B's checkpoint {fb!r} planted in A"))
    total = _run(r, prefix, reader, places, base, changes)
    assert total["IntegrityError"] > 0 and total["changed"] == 0, total


def test_the_writers_own_reads_refuse_the_same_changes(redis_url: str, prefix: str) -> None:
    """The saver that wrote the thread reads it (it remembers what it signed last: its latest
    checkpoint and values read back as signed need no MAC, its streams are held): every change
    above is refused or leaves the read unchanged all the same."""
    r = redis.Redis.from_url(redis_url)
    writer = redis_saver.RedisSaver(r, prefix=prefix, serde=SERDE, integrity_key=KEY)
    run_thread(writer, "B")
    run_thread(writer, "A")
    places = [(t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"])
              for t in writer.list({"configurable": {"thread_id": "A"}})]
    base = reads(writer, "A", places)
    canary.CALLS.clear()
    # every record and value flipped once (those it signed last among them), and values moved
    # within the thread
    changes = []
    for name, f, v in _fields(r, prefix, "A"):
        if name == "wr":
            continue
        flipped = v[: len(v) // 2] + bytes([v[len(v) // 2] ^ 0x01]) + v[len(v) // 2 + 1 :]
        changes.append(_set(_hash(prefix, "A", name), f, flipped, f"flip {name} {f!r}"))
    _run(r, prefix, writer, places, base, changes)
    _moved_within(r, prefix, writer, places, base, 12)
    r.close()


def test_payloads_planted_without_the_key_are_never_deserialized(env: Any, redis_url: str) -> None:
    """A saver without the key writes a checkpoint and pending writes carrying a payload that
    the serializer would call (the canary): the keyed reader refuses them and never calls it;
    the same payload read without a key does call it (the canary is live)."""
    r, prefix, reader, places, base = env
    plain = redis_saver.RedisSaver(r, prefix=prefix, serde=SERDE)
    latest = reader.get_tuple({"configurable": {"thread_id": "A"}})
    cfg = latest.config
    # built here (building one calls it too), before the count starts
    planted = {n: canary.Canary(n) for n in ("checkpoint", "write", "w2", "replaced")}
    canary.CALLS.clear()

    def plant_checkpoint(r: Any) -> str:
        cp = dict(latest.checkpoint)
        cp["id"] = cp["id"][:-4] + "ffff"
        cp["channel_values"] = {**cp["channel_values"], "notes": [planted["checkpoint"]]}
        versions = {"notes": "99.zzzzzz"}
        cp["channel_versions"] = {**cp["channel_versions"], **versions}
        plain.put(cfg, cp, latest.metadata, versions)
        return "planted checkpoint"

    def plant_writes(r: Any) -> str:
        plain.put_writes(cfg, [("notes", planted["write"]), ("__interrupt__", planted["w2"])], "task-x")
        return "planted writes"

    def replace_writes(r: Any) -> str:
        # the planted writes take the places of the stored ones (same task id and index)
        for t, ch, _v in latest.pending_writes:
            plain.put_writes(cfg, [(ch, planted["replaced"])], t)
        return "replaced writes"

    _run(r, prefix, reader, places, base, [plant_checkpoint, plant_writes, replace_writes])
    with pytest.raises(redis_saver.IntegrityError):
        plant_checkpoint(r)
        reader.get_tuple({"configurable": {"thread_id": "A"}})
    assert canary.CALLS == []
    plain.get_tuple({"configurable": {"thread_id": "A"}})
    assert canary.CALLS == ["checkpoint"]  # without the key, the planted payload runs


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_thread_written_without_a_key_is_refused_with_one(kind: str, redis_url: str, prefix: str) -> None:
    r = redis.Redis.from_url(redis_url)
    writer = _saver(kind, r, redis_url, prefix=prefix)
    run_thread(writer, "old")
    keyed = _saver(kind, r, redis_url, prefix=prefix, integrity_key=KEY)
    with pytest.raises(redis_saver.IntegrityError, match="no integrity tag"):
        keyed.get_tuple({"configurable": {"thread_id": "old"}})
    with pytest.raises(redis_saver.IntegrityError):
        list(keyed.list({"configurable": {"thread_id": "old"}}))
    close_sync(writer, keyed)
    r.close()


def test_a_reader_holding_a_stream_checks_the_bytes_appended_since(
    redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another worker's saver holds a growing value's stream from its last read: its next read
    gets only the frames appended since and checks the value over the held bytes and the new
    ones (the held running hash taken on over the new bytes). Read untouched, it is what was
    written; a new frame replaced by another valid frame of as many bytes is refused."""
    from langgraph.checkpoint.base import empty_checkpoint

    from redis_saver.core import values as values_

    r = redis.Redis.from_url(redis_url)
    writer = redis_saver.RedisSaver(r, prefix=prefix, integrity_key=KEY)
    readers = [redis_saver.RedisSaver(r, prefix=prefix, integrity_key=KEY) for _ in range(2)]
    parent = None

    def put(n: int) -> list[str]:
        nonlocal parent
        cp, v = empty_checkpoint(), f"{n:08d}"
        msgs = [f"message {i} " * 20 for i in range(n)]
        cp["channel_values"], cp["channel_versions"] = {"messages": msgs}, {"messages": v}
        conf: dict[str, Any] = {"thread_id": "t", "checkpoint_ns": ""}
        if parent:
            conf["checkpoint_id"] = parent
        writer.put({"configurable": conf}, cp, {"source": "loop", "step": n}, {"messages": v})
        parent = cp["id"]
        return msgs

    cfg = {"configurable": {"thread_id": "t"}}
    for n in range(2, 6):
        msgs = put(n)
    for reader in readers:
        got = reader.get_tuple(cfg)
        assert got is not None and got.checkpoint["channel_values"]["messages"] == msgs
    blob = f"{prefix}:{{t}}:blob"
    # (a frame's field: e(ns) e(channel) "\0" sid "\0" number, each e() ending in a NUL)
    frames = lambda: {f: v for f, v in r.hgetall(blob).items() if f.count(b"\0") == 4}  # noqa: E731
    before = frames()
    msgs = put(6)
    new = {f: v for f, v in frames().items() if f not in before}
    assert len(new) == 1 and len(before) >= 3  # one frame appended to a stream of several
    (f, v), = new.items()
    raw = values_.decompress(v)
    forged = raw.replace(b"message", b"massage", 1)
    assert forged != raw and len(forged) == len(raw)
    r.hset(blob, f, values_.compress(forged))
    with pytest.raises(redis_saver.IntegrityError):
        readers[0].get_tuple(cfg)
    r.hset(blob, f, v)
    calls = []
    real = values_.decompress
    monkeypatch.setattr(values_, "decompress", lambda d: calls.append(d) or real(d))
    got = readers[1].get_tuple(cfg)
    assert got is not None and got.checkpoint["channel_values"]["messages"] == msgs
    assert calls == [v]  # only the new frame was read: the held bytes were not sent again
    r.close()
