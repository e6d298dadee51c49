"""The metadata fast paths of format 5: the filter record stands in for the metadata only when
every value reads back exactly, and the check that decides it never parses JSON."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from redis_saver.core import codec as _codec


def _same(a: Any, b: Any) -> bool:
    """Equal with the same types and dict key order, throughout (what a read must give back)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is float and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def _value(rng: random.Random, depth: int = 0) -> Any:
    leaves = [
        lambda: rng.choice(["", "a", "ü", "x\\y", '"q"', "\x00", "\ud800"]),
        lambda: rng.choice([0, -1, 7, 2**70, True, False]),
        lambda: rng.choice([0.5, -2.25, 1.0, -0.0, 1e16, 1e-7, float("inf"), float("nan")]),
        lambda: None,
        lambda: rng.choice([(1, 2), b"x", {1, 2}]),
    ]
    if depth < 3 and rng.random() < 0.4:
        if rng.random() < 0.5:
            return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
        keys = rng.sample(["a", "b", "c", "z", "Z", "é", "1", 1, 2.5, None], rng.randrange(4))
        return {k: _value(rng, depth + 1) for k in keys}
    return rng.choice(leaves)()


def test_the_fast_check_agrees_with_a_round_trip() -> None:
    rng = random.Random(1)
    seen = {True: 0, False: 0}
    for _ in range(20_000):
        md = {"k": _value(rng)}
        flt, holds = _codec.filter_parts(md)
        cj = _codec.canonical_json(md["k"])
        reads_back = cj is not None and len(cj) <= _codec.FILTER_DIGEST_OVER and _same(json.loads(cj), md["k"])
        assert holds == reads_back, md
        if holds:
            assert _same(_codec.metadata_from_filter(flt), md), md
        seen[holds] += 1
    assert min(seen.values()) > 1000, seen  # both answers were exercised


def test_unchecked_filter_parts_are_the_same() -> None:
    md = {"source": "loop", "step": 3, "parents": {"": "1f0"}, "score": 0.5}
    parts = _codec.filter_parts(md)[0]
    assert _codec.filter_parts(md, check=False) == (parts, False)
    assert _codec.filter_parts(md) == (parts, True)
    # the same metadata as formats 3-5 framed it and as format 6 stores it reads back the same
    assert _codec.metadata_from_filter(_codec.pack(parts)) == _codec.metadata_from_filter(
        _codec.filter_parts(md)[0]
    ) == {k: v for k, v in md.items()}


def test_text_records_read_as_their_parts_do() -> None:
    import pytest

    from redis_saver.errors import MalformedReplyError

    for parts in ([], [""], ["a", "1", "b", ""], ["ü", "€x", "", "\x00;,"], ["messages", "17.abcdef"] * 9):
        rec = _codec.pack(parts)
        assert _codec.unpack_text(rec) == parts
        assert [p.decode() for p in _codec.unpack(rec)] == parts
    assert _codec.str_pairs(_codec.pack(["a", "1", "b", "2"])) == {"a": "1", "b": "2"}
    with pytest.raises(MalformedReplyError):
        _codec.str_pairs(_codec.pack(["a", "1", "b"]))
    for bad in (b"", b"1;", b"2;a", b";x", b"1,x;ab", b"2;\xff\xfe"):
        with pytest.raises(MalformedReplyError):
            _codec.unpack_text(bad)


def test_checkpoint_records_of_both_encodings_read_the_same() -> None:
    md = {"source": "loop", "step": 3, "parents": {}}
    flt = _codec.filter_parts(md)[0]
    parts = ["1f0-parent", b"msgpack", b"\x00\xff serde", _codec.MD_IN_FILTER, b"",
             ["messages", "2.ab", "a:b", "1.x"], flt, "run-1", ["messages"], ["", "1f0"]]
    new = _codec.checkpoint_record(parts)
    framed = _codec.pack([p if not isinstance(p, list) else _codec.pack(p) for p in parts])
    assert new[0] == _codec.CP_MSGPACK and framed[:1].isdigit()
    for raw in (new, framed):
        head = _codec.checkpoint_head(raw)
        assert head[0] == b"1f0-parent" and head[2] == b"\x00\xff serde"
        assert _codec.str_pairs(head[5]) == {"messages": "2.ab", "a:b": "1.x"}
        assert _codec.metadata_from_filter(head[6]) == md


@pytest.mark.parametrize(
    "raw",
    [
        b"\x9a",  # cut short
        _codec.checkpoint_record([b"x"] * 10) + b"\xc0",  # something after it
        b"\x9a" + b"\xa1x" * 9 + b"\x01",  # an array of 10, but its versions part is no array
    ],
)
def test_a_malformed_format_6_record_is_a_malformed_reply(raw: bytes) -> None:
    with pytest.raises(_codec.MalformedReplyError):
        head = _codec.checkpoint_head(raw)
        _codec.str_pairs(head[5])


@pytest.mark.parametrize("nested", [[b"a"], [b"a", 1], [b"a", b"\xff"], {b"a": b"b"}, 7])
def test_a_malformed_nested_part_is_a_malformed_reply(nested: object) -> None:
    for read in (_codec.str_pairs, _codec.metadata_from_filter):
        with pytest.raises(_codec.MalformedReplyError):
            read(nested)  # type: ignore[arg-type]
