"""Hostile prefix pairs: no key of one (prefix, thread) can be a key of another.

Before: with prefix "pa:ix", thread "257" owned "pa:ix:{257}:runs", which is exactly prefix
"pa"'s slot-index key for that slot; deleting the thread emptied "pa"'s index and
delete_for_runs then silently skipped "pa"'s checkpoints. A prefix ending in ":ix" is now
refused, which makes the whole key schema injective (keys.py says why)."""

from __future__ import annotations

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from redis_saver import RedisSaver
from redis_saver.keys import SLOTS, KeySchema, key_slot, slot_tag, thread_tag

PARTS = st.sampled_from(["", "pa", "ix", ":", "lg", "a:b", "*", "[x]", "\\", "é", "257", "schema", "threads"])
PREFIXES = st.lists(PARTS, min_size=1, max_size=4).map(":".join).filter(lambda p: not p.endswith(":ix"))
THREADS = st.one_of(st.sampled_from(["257", "", "%", "%7B", "{", "}", "ix", "a:b"]), st.text(max_size=6))


def _keys(prefix: str, thread: str) -> set[bytes]:
    ks = KeySchema(prefix)
    return set(ks.thread_keys(thread)[:9])


def _index_keys(prefix: str, slots) -> set[bytes]:
    ks = KeySchema(prefix)
    out = {ks.schema_key()}
    for s in slots:
        out.update(ks.index_keys(s))
    return out


def test_prefixes_ending_in_ix_are_refused():
    for p in ("pa:ix", "lg:ix", ":ix", "a:b:ix"):
        with pytest.raises(ValueError, match=":ix"):
            KeySchema(p)
    for p in ("ix", "pa:ixx", "pa:ix:x", "six", ""):
        KeySchema(p)  # allowed: nothing can nest under them as index keys


def test_the_reported_collision_is_gone():
    # the slot whose index key "pa:ix:{257}:runs" was: thread "257" under prefix "pa:ix"
    slot = key_slot(b"257")
    assert KeySchema("pa").index_keys(slot)[1] == b"pa:ix:{" + slot_tag(slot) + b"}:runs"
    thread = _keys("pa:x", "257") | _keys("pa", "257")
    assert not thread & _index_keys("pa", [slot])
    assert not thread & _index_keys("pa:x", [slot])


@settings(max_examples=400, deadline=None)
@given(p1=PREFIXES, t1=THREADS, p2=PREFIXES, t2=THREADS)
def test_no_two_prefix_thread_pairs_share_a_key(p1, t1, p2, t2):
    a, b = _keys(p1, t1), _keys(p2, t2)
    if (p1, t1) == (p2, t2):
        assert a == b
    else:
        assert not a & b, (p1, t1, p2, t2)
    # a thread's keys are never another prefix's (or its own prefix's) index or schema keys,
    # for the slots both threads live in and a few others
    slots = {key_slot(thread_tag(t1)), key_slot(thread_tag(t2)), 0, SLOTS - 1}
    assert not (a | b) & _index_keys(p1, slots)
    assert not (a | b) & _index_keys(p2, slots)
    if p1 != p2:
        assert not _index_keys(p1, slots) & _index_keys(p2, slots)


@settings(max_examples=200, deadline=None)
@given(p1=PREFIXES, t1=THREADS, p2=PREFIXES)
def test_scan_patterns_match_only_their_own_prefix(p1, t1, p2):
    """KeySchema.scan_patterns() (and the ACL key patterns of the same shape) match every key
    of their prefix and none of another's: Redis's glob, as SCAN MATCH and ACL use it."""
    ks1, ks2 = KeySchema(p1), KeySchema(p2)
    own = _keys(p1, t1) | _index_keys(p1, [key_slot(thread_tag(t1))])
    other = _keys(p2, t1) | _index_keys(p2, [key_slot(thread_tag(t1))])
    pats = ks1.scan_patterns()
    assert all(any(_glob(p, k) for p in pats) for k in own)
    if p1 != p2:
        assert not any(_glob(p, k) for p in pats for k in other), (p1, p2)
    # the cross-thread index pattern: exactly this prefix's "threads" index keys
    idx = {ks2.index_keys(key_slot(thread_tag(t1)))[0]}
    assert {k for k in own | other if _glob(ks2.index_pattern(), k)} == idx


def _glob(pattern: bytes, key: bytes) -> bool:
    """Redis's stringmatch for the subset the patterns use: '*', and '\\' escapes."""
    import re

    rx, i = b"", 0
    while i < len(pattern):
        c = pattern[i : i + 1]
        if c == b"\\":
            rx += re.escape(pattern[i + 1 : i + 2])
            i += 2
            continue
        rx += b".*" if c == b"*" else re.escape(c)
        i += 1
    return re.fullmatch(rx, key, re.S) is not None


def _put(saver: RedisSaver, thread: str, run: str) -> dict:
    cp = generate_checkpoint(channel_values={"x": thread}, channel_versions={"x": "1"})
    cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    return saver.put(cfg, cp, generate_metadata(step=0, run_id=run), {"x": "1"})


def test_nested_prefixes_share_a_server_without_touching_each_other(sync_client, prefix):
    """The reported collision, with the nesting a user can still choose (<p> and <p>:x)."""
    outer = RedisSaver(sync_client, prefix=prefix)
    inner = RedisSaver(sync_client, prefix=prefix + ":x")
    with pytest.raises(ValueError):
        RedisSaver(sync_client, prefix=prefix + ":ix")
    for t in ("257", "a", "{257}", ""):
        _put(outer, t, "r1")
        _put(inner, t, "r1")
    inner.delete_thread("257")
    inner.delete_for_runs(["r1"])
    assert list(inner.list(None)) == []
    # the outer prefix's index and data are intact: its cross-thread views see all 4 threads
    assert sorted(t.config["configurable"]["thread_id"] for t in outer.list(None)) == ["", "257", "a", "{257}"]
    outer.delete_for_runs(["r1"])
    assert list(outer.list(None)) == []
    for pat in KeySchema(prefix).scan_patterns():
        assert list(sync_client.scan_iter(match=pat)) == []


def test_acl_patterns_of_a_prefix_do_not_reach_a_nested_one(sync_client, redis_url, prefix):
    """A user given the patterns of prefix P can run the saver on P and cannot read or delete
    prefix P:tenant2 (with ~P:* it could)."""
    import uuid

    owner = RedisSaver(sync_client, prefix=prefix + ":tenant2")
    _put(owner, "t", "r1")
    user, password = "u" + uuid.uuid4().hex[:8], uuid.uuid4().hex
    pats = " ".join("~" + p.decode() for p in KeySchema(prefix).scan_patterns())
    sync_client.execute_command("ACL", "SETUSER", user, *f"reset on >{password} {pats} resetchannels +@all".split())
    try:
        kw = sync_client.connection_pool.connection_kwargs
        host, port = kw["host"], kw["port"]
        c = redis.Redis(host=host, port=port, username=user, password=password)
        mine = RedisSaver(c, prefix=prefix)
        _put(mine, "t", "r1")
        assert mine.get_tuple({"configurable": {"thread_id": "t"}}) is not None
        bad = RedisSaver(c, prefix=prefix + ":tenant2")
        with pytest.raises(redis.exceptions.NoPermissionError):
            bad.get_tuple({"configurable": {"thread_id": "t"}})
        with pytest.raises(redis.exceptions.NoPermissionError):
            bad.delete_thread("t")
        assert owner.get_tuple({"configurable": {"thread_id": "t"}}) is not None
        c.close()
    finally:
        sync_client.execute_command("ACL", "DELUSER", user)
