"""Keys: rotation (the first key signs, each verifies), copies keep threads readable and bound
to their new place, the asyncio saver checks the same tags, and the option's checks."""

from __future__ import annotations

import os
from typing import Any

import pytest
import redis

import redis_saver
from tests.integrity._graphs import SERDE, run_thread

K1, K2 = os.urandom(32), os.urandom(48)


def _state(saver: Any, thread: str) -> Any:
    items = saver.list({"configurable": {"thread_id": thread}})
    return [(t.checkpoint["channel_values"], t.pending_writes) for t in items]


@pytest.fixture
def client(redis_url: str) -> Any:
    r = redis.Redis.from_url(redis_url)
    yield r
    r.close()


def test_key_rotation(client: Any, prefix: str) -> None:
    old = redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE, integrity_key=K1)
    run_thread(old, "t")
    before = _state(old, "t")
    rotated = redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE, integrity_key=[K2, K1])
    assert _state(rotated, "t") == before  # K1's data reads with [K2, K1]
    run_thread(rotated, "new")  # new data is signed with K2
    only_new = redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE, integrity_key=[K2])
    assert _state(only_new, "new") == _state(rotated, "new")
    with pytest.raises(redis_saver.IntegrityError):
        only_new.get_tuple({"configurable": {"thread_id": "t"}})  # K1's data alone with [K2]
    with pytest.raises(redis_saver.IntegrityError):
        _state(only_new, "t")


def test_signed_data_reads_without_a_key(client: Any, prefix: str) -> None:
    keyed = redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE, integrity_key=K1)
    run_thread(keyed, "t")
    plain = redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE)
    assert _state(plain, "t") == _state(keyed, "t")


def test_a_copy_is_signed_for_its_target(client: Any, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    keyed = redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE, integrity_key=K1, cache_bytes=0)
    run_thread(keyed, "src")
    keyed.copy_thread("src", "dst")
    assert _state(keyed, "dst") == _state(keyed, "src")
    # and in pages (a thread too large for one snapshot call)
    from redis_saver.core.plans import budgets as B

    monkeypatch.setattr(B, "WORK_BUDGET", 2)
    keyed.copy_thread("src", "paged")
    assert _state(keyed, "paged") == _state(keyed, "src")
    # the copy's records are bound to the target: moved back to the source, they are refused
    src_cp, dst_cp = f"{prefix}:{{src}}:cp", f"{prefix}:{{dst}}:cp"
    field = sorted(client.hkeys(dst_cp))[-1]
    client.hset(src_cp, field, client.hget(dst_cp, field))
    with pytest.raises(redis_saver.IntegrityError):
        _state(keyed, "src")


def test_a_copy_refuses_what_fails_its_check(client: Any, prefix: str) -> None:
    plain = redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE)
    run_thread(plain, "src")
    keyed = redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE, integrity_key=K1)
    with pytest.raises(redis_saver.IntegrityError):
        keyed.copy_thread("src", "dst")
    assert not client.exists(f"{prefix}:{{dst}}:cp")


async def test_async_saver_checks_the_same_tags(redis_url: str, prefix: str, client: Any) -> None:
    import redis.asyncio as aredis

    run_thread(redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE, integrity_key=K1), "t")
    run_thread(redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE, integrity_key=K1), "u")
    ac = aredis.Redis.from_url(redis_url)
    saver = redis_saver.AsyncRedisSaver(ac, prefix=prefix, serde=SERDE, integrity_key=[K1])
    got = [t async for t in saver.alist({"configurable": {"thread_id": "t"}})]
    assert len(got) == len(_state(redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE), "t"))
    cp_t, cp_u = f"{prefix}:{{t}}:cp", f"{prefix}:{{u}}:cp"
    # the root namespace's latest (e("") is a NUL, then the id) gets u's latest record
    latest = max(f for f in client.hkeys(cp_t) if f[:1] == b"\0")
    client.hset(cp_t, latest, client.hget(cp_u, max(f for f in client.hkeys(cp_u) if f[:1] == b"\0")))
    with pytest.raises(redis_saver.IntegrityError):
        await saver.aget_tuple({"configurable": {"thread_id": "t"}})
    await ac.aclose()


async def test_from_conn_string_takes_the_key(redis_url: str, prefix: str, client: Any) -> None:
    run_thread(redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE), "plain")
    with redis_saver.RedisSaver.from_conn_string(redis_url, prefix=prefix, integrity_key=K1) as s:
        with pytest.raises(redis_saver.IntegrityError):
            s.get_tuple({"configurable": {"thread_id": "plain"}})
    async with redis_saver.AsyncRedisSaver.from_conn_string(redis_url, prefix=prefix, integrity_key=K1) as a:
        with pytest.raises(redis_saver.IntegrityError):
            await a.aget_tuple({"configurable": {"thread_id": "plain"}})


@pytest.mark.parametrize(
    "key, error",
    [(b"short", ValueError), ("a str key of more than thirty-two chars", TypeError), ([], TypeError),
     ([os.urandom(32), b"x"], ValueError), (12, TypeError)],
)
def test_bad_keys_are_refused(client: Any, key: Any, error: type) -> None:
    with pytest.raises(error):
        redis_saver.RedisSaver(client, integrity_key=key)


def test_prune_and_latest_only_threads_stay_readable(client: Any, prefix: str) -> None:
    """prune clears the parent of the checkpoint it keeps (its tags allow exactly that);
    latest-only puts drop what they replace: both read back under the key."""
    keyed = redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE, integrity_key=K1)
    run_thread(keyed, "p")
    latest = keyed.get_tuple({"configurable": {"thread_id": "p"}})
    assert latest.parent_config is not None
    keyed.prune(["p"])
    kept = keyed.get_tuple({"configurable": {"thread_id": "p"}})
    assert kept.parent_config is None and kept.checkpoint == latest.checkpoint
    lean = redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE, integrity_key=K1, history="latest")
    run_thread(lean, "l")
    assert lean.get_tuple({"configurable": {"thread_id": "l"}}) is not None
    # a parent link set to another checkpoint of the thread is refused (only clearing it is allowed)
    cp = f"{prefix}:{{t}}:cp"
    run_thread(keyed, "t")
    ids = sorted(f for f in client.hkeys(cp) if f[:1] == b"\0")
    raw = client.hget(cp, ids[-1])
    parent = keyed.get_tuple({"configurable": {"thread_id": "t"}}).parent_config["configurable"]["checkpoint_id"]
    other = ids[0][1:-1].decode()
    assert other != parent and len(other) == len(parent)
    client.hset(cp, ids[-1], raw.replace(parent.encode(), other.encode(), 1))
    with pytest.raises(redis_saver.IntegrityError):
        keyed.get_tuple({"configurable": {"thread_id": "t"}})


def test_sign_thread_vouches_for_what_is_stored(client: Any, prefix: str) -> None:
    """Data written without a key (compressed, streams, pending writes, an old thread's records)
    reads with the key once signed; data signed under K1 reads under [K2] once signed with K2."""
    plain = redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE)
    run_thread(plain, "t")
    run_thread(redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE, compress=False), "raw")
    before = {t: _state(plain, t) for t in ("t", "raw")}
    keyed = redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE, integrity_key=[K2, K1])
    for t in ("t", "raw"):
        with pytest.raises(redis_saver.IntegrityError):
            _state(keyed, t)
        assert keyed.sign_thread(t) > 0
        assert _state(keyed, t) == before[t]
        assert keyed.sign_thread(t) == 0  # signed already: nothing to replace
    only_k2 = redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE, integrity_key=K2)
    run_thread(redis_saver.RedisSaver(client, prefix=prefix, serde=SERDE, integrity_key=K1), "k1")
    with pytest.raises(redis_saver.IntegrityError):
        _state(only_k2, "k1")
    assert keyed.sign_thread("k1") > 0
    assert _state(only_k2, "k1") == _state(plain, "k1")
    with pytest.raises(ValueError, match="integrity_key"):
        plain.sign_thread("t")


def test_a_record_cut_inside_its_headers_is_no_record_to_check_in_place():
    """Where a checkpoint record's third part starts, for a record cut anywhere (a str8 header
    without its length byte included): -1, never an IndexError, so the check falls back to the
    record's parts and refuses it with IntegrityError."""
    from redis_saver.core.integrity import _after_type

    whole = b"\x9a" + b"\xd9\x24" + b"p" * 36 + b"\xd9\x05" + b"msgpk" + b"\xc0"
    assert _after_type(whole) == len(whole) - 1
    for cut in range(len(whole) - 1):
        assert _after_type(whole[:cut]) == -1 or _after_type(whole[:cut]) <= cut
    for raw in (b"\x9a\xa0\xd9", b"\x9a\xd9", b"\x9a\xa1x\xd9"):
        assert _after_type(raw) == -1


def test_tag_forms_split_as_they_were_joined() -> None:
    """A value's tag as bytes before its type, or (an empty type, which the scripts would take
    the tag's last bytes for marks of) as text after it; a checkpoint record's tags of both
    forms; the earlier value form still split; an untagged type has none."""
    from redis_saver.core.integrity import (
        CP_TAG,
        MARK,
        TAG,
        join_cp,
        join_text,
        join_type,
        join_value,
        split_cp,
        split_text,
        split_value,
    )

    tag = bytes(range(0x1F, 0x1F + TAG))  # holds \x1f and ends with bytes a mark could start with
    for t in (b"msgpack", b"msgpack\x1fs", b"json\x1fz"):
        joined = join_value(t, tag)
        assert joined.endswith(t) and split_value(joined) == (t, tag, True)
        old = join_text(t, tag)  # the earlier form: base64url text after the type name
        got = split_value(old)
        assert got[0] == t and got[1] is not None and not got[2] and split_text(old) == (t, tag)
        assert split_value(t) == (t, None, False)
    empty = join_value(b"", tag)
    assert empty.startswith(MARK) and split_text(empty) == (b"", tag)
    tags = bytes(range(CP_TAG))
    for t in (b"msgpack", b"msgpack\x1fv", b"msgpack\x1fv\x1fz"):
        assert split_cp(join_cp(t, tags)) == (t, tags, True)
        assert split_cp(join_type(t, tags)) == (t, tags, False)
        assert split_cp(t) == (t, None, False)


@pytest.mark.parametrize("reader", ["same", "other"])
def test_a_record_prune_packed_again_reads_and_stays_bound(client: Any, prefix: str, reader: str) -> None:
    """prune's Lua packs the kept record again when it clears its parent (its own string and
    number headers, not this client's): the record still verifies, read by the saver that wrote
    it and by another worker, and a changed byte of it is still refused. (Found by the
    conformance suite run with a key; LangGraph's conformance checkpoints have integer
    versions and float metadata.)"""
    from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

    keyed = redis_saver.RedisSaver(client, prefix=prefix, integrity_key=K1)
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    cp = empty_checkpoint()
    for i in range(3):
        cp = create_checkpoint(cp, None, i)
        cp["channel_values"], cp["channel_versions"] = {"a": f"v{i}"}, {"a": i + 1}
        config = keyed.put(config, cp, {"source": "loop", "step": i, "score": 1.5}, {"a": i + 1})
    key = f"{prefix}:{{t}}:cp"
    field = next(f for f in client.hkeys(key) if cp["id"].encode() in f)
    before = client.hget(key, field)
    keyed.prune(["t"])
    after = client.hget(key, field)
    assert after != before  # the record was packed again (its parent cleared)
    who = keyed if reader == "same" else redis_saver.RedisSaver(client, prefix=prefix, integrity_key=K1)
    kept = who.get_tuple({"configurable": {"thread_id": "t"}})
    assert kept is not None and kept.parent_config is None and kept.checkpoint["id"] == cp["id"]
    assert kept.checkpoint["channel_values"] == {"a": "v2"} and kept.metadata["score"] == 1.5
    # a changed byte of the record prune wrote is refused (in its metadata: "loop" -> "loOp")
    assert after.count(b"loop") == 1
    client.hset(key, field, after.replace(b"loop", b"loOp"))
    with pytest.raises(redis_saver.IntegrityError):
        redis_saver.RedisSaver(client, prefix=prefix, integrity_key=K1).get_tuple({"configurable": {"thread_id": "t"}})


@pytest.mark.parametrize("part", [0, 1])
def test_a_record_whose_parent_or_type_is_no_string_is_refused(client: Any, prefix: str, part: int) -> None:
    """Planted checkpoint records whose parent or type is a number (no record a saver packs):
    IntegrityError for the saver that wrote the thread and for another one, never a TypeError or
    AttributeError from taking the record apart."""
    import msgpack

    keyed = redis_saver.RedisSaver(client, prefix=prefix, integrity_key=K1)
    run_thread(keyed, "t")
    key = f"{prefix}:{{t}}:cp"
    for field, raw in client.hgetall(key).items():
        parts = msgpack.unpackb(raw, raw=True)
        parts[part] = 7
        client.hset(key, field, msgpack.packb(parts, use_bin_type=False))
    for reader in (keyed, redis_saver.RedisSaver(client, prefix=prefix, integrity_key=K1)):
        with pytest.raises(redis_saver.IntegrityError):
            reader.get_tuple({"configurable": {"thread_id": "t"}})


def test_a_read_that_fails_a_check_loads_nothing(client: Any, prefix: str) -> None:
    """A get_tuple whose checkpoint record verifies but one of whose values or pending writes
    does not: IntegrityError before serde loads anything of it (the checkpoint itself
    included), for the saver that wrote the thread and for another one."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    class Counting(JsonPlusSerializer):
        loads = 0

        def loads_typed(self, data: Any) -> Any:
            Counting.loads += 1
            return super().loads_typed(data)

    keyed = redis_saver.RedisSaver(client, prefix=prefix, integrity_key=K1, serde=Counting())
    run_thread(keyed, "t")
    other = redis_saver.RedisSaver(client, prefix=prefix, integrity_key=K1, serde=Counting())
    Counting.loads = 0
    assert other.get_tuple({"configurable": {"thread_id": "t"}}) is not None and Counting.loads > 0
    for kind, mark in (("blob", b"\x1fb"), ("wr", b"\x1fk")):
        key = f"{prefix}:{{t}}:{kind}"
        saved = client.hgetall(key)
        flipped = 0
        for field, raw in saved.items():  # a byte of every value's (or write's) tag flipped
            i = raw.find(mark)
            if i > 0:
                client.hset(key, field, raw[: i + 4] + bytes([raw[i + 4] ^ 1]) + raw[i + 5 :])
                flipped += 1
        assert flipped > 2, (kind, flipped)
        for reader in (keyed, other):
            Counting.loads = 0
            with pytest.raises(redis_saver.IntegrityError):
                reader.get_tuple({"configurable": {"thread_id": "t"}})
            assert Counting.loads == 0, (kind, Counting.loads)
        client.hset(key, mapping=saved)


@pytest.mark.parametrize(
    "parent,type_,cid",
    [
        ("1f0c4a2e-1111-6000-8000-000000000001", b"msgpack\x1fv", "1f0c4a2e-2222-6000-8000-000000000002"),
        ("", b"msgpack\x1fv\x1fz", "1f0c4a2e-2222-6000-8000-000000000002"),  # no parent: the second tag
        ("p" * 300, b"t" * 300, "c" * 300),  # strings of 256 bytes and more (raw16 headers, no table)
        ("1f0c4a2e-1111-6000-8000-000000000001", b"json", "x"),
    ],
)
def test_a_record_verifies_in_place_and_every_changed_byte_is_refused(parent: str, type_: bytes, cid: str) -> None:
    """A checkpoint record as a put signs it reads back through the in-place check (and packed
    again with str8 headers, as prune's Lua does, through the check of its parts); every byte of
    it changed (but the bytes of the tag its reader does not use), the record cut, or read at
    another checkpoint id: IntegrityError (or a record msgpack cannot read)."""
    import msgpack

    from redis_saver.core import codec
    from redis_saver.core.integrity import Integrity

    integ = Integrity(K1, "pfx")
    rest = [b"cp-bytes" * 9, b"msgpack", b"md" * 30, [b"a", b"00001.0"], [b"source", b'"loop"'], b"run", [], []]
    raw = integ.signed_cp("t", "", cid, [parent, type_, *rest])

    def read(raw_: bytes, at_cid: str = cid) -> list[Any]:
        parts = codec.checkpoint_head(raw_)
        Integrity(K1, "pfx").check_head(Integrity(K1, "pfx").place("t", ""), at_cid, raw_, parts)
        return parts

    assert read(raw)[:3] == [parent.encode(), type_, rest[0]]
    # packed again with str8 headers (what Redis's cmsgpack writes for 32-255 bytes)
    again = msgpack.packb(msgpack.unpackb(raw, raw=False, unicode_errors="surrogateescape"), use_bin_type=True,
                          unicode_errors="surrogateescape")
    if again != raw:
        assert read(again)[1] == type_
    with pytest.raises(redis_saver.IntegrityError):
        read(raw, cid + "x")
    # (a reader checks one of the two tags, by whether the record has a parent: the other one's
    # bytes changed read as the same record, nothing of what it returns changed)
    m = raw.find(b"\x1fj") + 2
    unused = range(m + 16, m + 28) if parent else range(m, m + 16)
    for pos in range(len(raw)):
        changed = raw[:pos] + bytes([raw[pos] ^ 0x01]) + raw[pos + 1 :]
        if pos in unused:
            assert read(changed) == read(raw)
            continue
        with pytest.raises((redis_saver.IntegrityError, redis_saver.errors.MalformedReplyError)):
            read(changed)
    for cut in range(len(raw)):
        with pytest.raises((redis_saver.IntegrityError, redis_saver.errors.MalformedReplyError)):
            read(raw[:cut])
