"""Key isolation: hostile thread ids and namespaces round-trip exactly, never collide, and
every key a thread's scripts touch (its 9 keys and its 2 slot-index keys) shares one slot."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from redis.crc import key_slot

from redis_saver.keys import KeySchema, dec_first, dec_str, enc, thread_tag


def generate_config(thread_id: str, checkpoint_ns: str = "") -> dict:
    # (the conformance helper replaces an empty thread id with a random one)
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}}


HOSTILE = [
    "",
    "{",
    "}",
    "{}",
    "a{b}c",
    "}{",
    "%",
    "%7B",
    "%25",
    "a:b:c",
    ":",
    "*",
    "?",
    "[a-z]",
    "\\",
    " spaced id ",
    "ünïcödé-🚀",
    "\x00",
    "a\x00b",
    "x" * 5000,
]


def test_thread_tags_are_injective_and_brace_free():
    tags = [thread_tag(t) for t in HOSTILE]
    assert len(set(tags)) == len(tags)
    for t in tags:
        assert b"{" not in t and b"}" not in t and t


@pytest.mark.parametrize("tid", HOSTILE, ids=range(len(HOSTILE)))
def test_all_keys_of_a_thread_share_one_slot(tid):
    keys = KeySchema("app").thread_keys(tid)
    assert len(keys) == 11
    assert len({key_slot(k) for k in keys}) == 1


@given(st.text(), st.text(), st.text(), st.text())
@settings(max_examples=500, deadline=None)
def test_component_encoding_sorts_like_tuples_and_decodes_uniquely(a, b, c, d):
    ea, eb = enc(a), enc(b)
    assert (a.encode() < b.encode()) == (ea < eb)
    assert dec_first(ea + eb) == (a.encode(), len(ea))
    # concatenated components sort exactly like the tuples they encode (UTF-8 never holds
    # 0xff, so a terminator is never followed by it): this is what lex ranges rely on
    t1, t2 = (a.encode(), c.encode()), (b.encode(), d.encode())
    assert (t1 < t2) == (ea + enc(c) < eb + enc(d))
    assert b"\xff" not in a.encode()


def test_prefix_rejects_braces():
    with pytest.raises(ValueError):
        KeySchema("a{b}")
    with pytest.raises(TypeError):
        KeySchema(3)  # type: ignore[arg-type]


async def test_hostile_ids_round_trip_and_stay_apart(saver, sync_client, prefix):
    namespaces = ["", "child:1", "a{b}", "*"]
    tids = HOSTILE[:12] + ["ünïcödé-🚀", "x" * 5000]
    for tid, ns in itertools.product(tids, namespaces):
        cp = generate_checkpoint(channel_values={"who": [tid, ns]}, channel_versions={"who": "1"})
        cfg = await saver.aput(generate_config(tid, checkpoint_ns=ns), cp, generate_metadata(), {"who": "1"})
        await saver.aput_writes(cfg, [("w", (tid, ns))], "task")
    for tid, ns in itertools.product(tids, namespaces):
        tup = await saver.aget_tuple(generate_config(tid, checkpoint_ns=ns))
        assert tup is not None
        assert tup.config["configurable"]["thread_id"] == tid
        assert tup.config["configurable"]["checkpoint_ns"] == ns
        assert tup.checkpoint["channel_values"]["who"] == [tid, ns]
        # msgpack: tuples come back as lists, as in InMemorySaver
        assert tup.pending_writes == [("task", "w", [tid, ns])]
    all_tuples = [t async for t in saver.alist(None)]
    confs = [t.config["configurable"] for t in all_tuples]
    assert sorted((c["thread_id"], c["checkpoint_ns"]) for c in confs) == sorted(itertools.product(tids, namespaces))
    # deleting one hostile thread leaves every other one intact
    await saver.adelete_thread("{")
    assert await saver.aget_tuple(generate_config("{")) is None
    for tid in tids:
        if tid != "{":
            assert await saver.aget_tuple(generate_config(tid, checkpoint_ns="a{b}")) is not None
    # nothing was written outside the prefix, and every key under it belongs to a live thread or the index
    schema = KeySchema(prefix)
    allowed = {k for t in tids if t != "{" for k in schema.thread_keys(t)}
    present = set(sync_client.scan_iter(match=schema.scan_pattern(), count=1000))
    assert present and present <= allowed


@given(st.text())
@settings(max_examples=500, deadline=None)
def test_dec_str_inverts_enc(s):
    assert dec_str(enc(s)) == s
