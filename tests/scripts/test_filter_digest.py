"""Large metadata values are stored once: the filter record keeps a digest of long values.

The checkpoint record holds the serialized metadata (md_bytes) and, for the server-side
``list(filter=...)``, a filter record of canonical JSON per top-level key. A value whose
JSON is longer than ``FILTER_DIGEST_OVER`` bytes is kept there as a 33-byte digest, and
``filter_args`` sends the digest plus the JSON, so filters stay exact on records written
now (digest) and on records written by earlier releases (full JSON).
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base.id import uuid6

from redis_saver.core import codec
from redis_saver.keys import enc
from tests.lifecycle._util import op

BIG = 4 * 1024 * 1024


_call = op  # sync or async, list collected


def _ckpt() -> dict:
    return {"v": 4, "id": str(uuid6()), "ts": "2026-01-01T00:00:00+00:00", "channel_values": {},
            "channel_versions": {}, "versions_seen": {}, "updated_channels": None}


def _cfg(tid: str = "t", cid: str | None = None) -> dict:
    c: dict[str, Any] = {"thread_id": tid, "checkpoint_ns": ""}
    if cid:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def _record(client: Any, saver: Any, tid: str, cid: str) -> bytes:
    return client.hget(saver.keys.thread_keys(tid)[1], enc("") + enc(cid))


async def _ids(saver: Any, flt: dict) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in await _call(saver, "list", _cfg(), filter=flt)]


def test_filter_value_digests_only_long_json() -> None:
    short = codec.canonical_json("x" * 40)
    assert codec.filter_value(short) == short
    edge = b'"' + b"x" * (codec.FILTER_DIGEST_OVER - 2) + b'"'
    assert codec.filter_value(edge) == edge
    long = b'"' + b"x" * (codec.FILTER_DIGEST_OVER - 1) + b'"'
    d = codec.filter_value(long)
    assert len(d) == codec.DIGEST_LEN and d[:1] == codec.DIGEST_MARK
    # the filter sends the digest, then the JSON (to match records of earlier releases)
    long_json = codec.canonical_json("x" * 200)
    assert codec.filter_args({"k": "x" * 200}) == [b"1", b"k", codec.filter_value(long_json) + long_json]
    assert codec.filter_args({"k": None}) == [b"1", b"k", b"null"]


async def test_large_metadata_value_is_stored_once(saver: Any, sync_client: Any) -> None:
    big = "y" * BIG
    stored = await _call(saver, "put", _cfg(), _ckpt(), {"big": big, "step": 1}, {})
    raw = _record(sync_client, saver, "t", stored["configurable"]["checkpoint_id"])
    # was ~2x: serde bytes + canonical JSON; the serde bytes are now also zstd-compressed
    assert len(raw) < BIG // 100, len(raw)
    parts = codec.checkpoint_head(raw)
    assert parts[codec.CP.MD_TYPE].endswith(b"\x1fz")
    flt = parts[codec.CP.FILTER]
    assert flt[0] == b"big" and len(flt[1]) == codec.DIGEST_LEN and flt[2:] == [b"step", b"1"]
    tup = await _call(saver, "get_tuple", stored)
    assert tup.metadata["big"] == big


async def test_filter_on_large_values_is_exact(saver: Any) -> None:
    a, b = "a" * BIG, "a" * (BIG - 1) + "b"
    nested = {"k": ["v" * 100, 1.0, True], "z": None}
    ca = await _call(saver, "put", _cfg(), _ckpt(), {"big": a, "n": nested}, {})
    cb = await _call(saver, "put", ca, _ckpt(), {"big": b, "n": {"z": None, "k": ["v" * 100, 1, 1]}}, {})
    cc = await _call(saver, "put", cb, _ckpt(), {"other": 1}, {})
    ida, idb, idc = (c["configurable"]["checkpoint_id"] for c in (ca, cb, cc))
    assert await _ids(saver, {"big": a}) == [ida]
    assert await _ids(saver, {"big": b}) == [idb]
    assert await _ids(saver, {"big": "a" * (BIG + 1)}) == []
    # Python equality semantics hold through the digest (True == 1 == 1.0, key order)
    assert await _ids(saver, {"n": {"z": None, "k": ["v" * 100, 1, 1]}}) == [idb, ida]
    assert await _ids(saver, {"n": {"k": ["v" * 100, 1.0, False]}}) == []
    assert await _ids(saver, {"big": a, "n": nested}) == [ida]
    assert await _ids(saver, {"big": None}) == [idc]  # null also matches a missing key


async def test_records_of_earlier_releases_still_match(saver: Any, sync_client: Any) -> None:
    """A record whose filter record holds the full JSON of a long value (the previous
    release's format) is matched by a filter on that value, and by nothing else."""
    big, other = "q" * 5000, "r" * 5000
    ca = await _call(saver, "put", _cfg(), _ckpt(), {"big": big, "s": "x"}, {})
    cb = await _call(saver, "put", ca, _ckpt(), {"big": big, "s": "y"}, {})
    key = saver.keys.thread_keys("t")[1]
    cid_a = ca["configurable"]["checkpoint_id"]
    field = enc("") + enc(cid_a)
    parts = codec.checkpoint_head(sync_client.hget(key, field))
    old_filter = [b"big", codec.canonical_json(big), b"s", b'"x"']  # the old way
    assert parts[6] != old_filter
    parts[6] = old_filter
    # as the previous release framed it: nested parts as records too
    sync_client.hset(key, field, codec.pack([p if isinstance(p, bytes) else codec.pack(p) for p in parts]))
    cid_b = cb["configurable"]["checkpoint_id"]
    assert await _ids(saver, {"big": big}) == [cid_b, cid_a]  # new record by digest, old by JSON
    assert await _ids(saver, {"big": big, "s": "x"}) == [cid_a]
    assert await _ids(saver, {"big": other}) == []
    assert await _ids(saver, {"big": None}) == []
