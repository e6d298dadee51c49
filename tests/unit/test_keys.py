"""The key schema: hostile thread ids get injective, brace-free tags, every key a thread's
scripts touch (its 9 keys and its 2 slot-index keys) shares one slot, and key components
encode so that they sort like the tuples they stand for and decode uniquely."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from redis_saver.keys import KeySchema, dec_first, dec_str, enc, thread_tag

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


@given(st.text())
@settings(max_examples=500, deadline=None)
def test_dec_str_inverts_enc(s):
    assert dec_str(enc(s)) == s
