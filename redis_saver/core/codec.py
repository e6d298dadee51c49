"""Byte framing shared by Python and the Lua scripts.

A *record* is a list of byte strings framed as ``b"<len>,<len>,...;" + parts``: cheap to
build here, cheap to split in Lua (``lua/_lib_records.lua: unpack_rec``), and binary-safe, so serde
bytes are stored as they are (never re-encoded through JSON or base64).

A *checkpoint record* (storage format 6) is a MessagePack array of 10 instead, nested parts
as arrays, every string of the raw (str) family, so the Lua scripts read it with Redis's
``cmsgpack`` (which has no bin family) and this module with ``msgpack`` in C: it is read on
every get_tuple and list item and by most scripts, where splitting the framing above part by
part in Python and in Lua cost more than the rest of the record's decoding. Records of
earlier formats keep their framing and are read as they are (their first byte is a digit;
this one's is ``CP_MSGPACK``).

Records stored by the scripts (their parts are named once: ``CP`` and ``WR`` below, and
``CP_*`` / ``W_*`` in lua/_lib_records.lua):

checkpoint  [parent_id, cp_type, cp_bytes, md_type, md_bytes, versions, filter, run_id, delta,
             parents]
            versions = [channel, version, channel, version, ...]
            filter   = [key, canonical-json, ...] (server-side metadata filters); a JSON
                       longer than FILTER_DIGEST_OVER bytes is kept as its digest
                       (``filter_value``): the metadata itself is stored once, in md_bytes
            delta    = channel names listed in ``counters_since_delta_snapshot``
            parents  = [namespace, checkpoint id, ...] from metadata ``parents`` (latest-only
                       mode drops subgraph namespaces of older checkpoints)
            (formats 3-5: the same parts framed as a record, nested parts as records)
blob        [type, bytes]            (``EMPTY_BLOB`` = the channel had no value)
write       [task_id, channel, type, bytes, task_path, idx]
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgpack

from ..errors import MalformedReplyError

_local = threading.local()


def pack(parts: Iterable[bytes | str]) -> bytes:
    bs = [p if isinstance(p, bytes) else p.encode() for p in parts]
    if not bs:
        return b";"
    return b",".join(map(b"%d".__mod__, map(len, bs))) + b";" + b"".join(bs)


class CP:
    """Parts of a checkpoint record, 0-based (lua/_lib_records.lua spells them CP_*, 1-based;
    tests/scripts/test_scripts.py checks that both agree)."""

    PARENT, TYPE, BYTES, MD_TYPE, MD_BYTES, VERSIONS, FILTER, RUN_ID, DELTA, PARENTS = range(10)
    PARTS = 10


class WR:
    """Parts of a write record, 0-based (lua/_lib_records.lua: W_*, 1-based)."""

    TASK_ID, CHANNEL, TYPE, BYTES, TASK_PATH, IDX = range(6)
    PARTS = 6


CP_MSGPACK = 0x9A  # the first byte of a format-6 checkpoint record: a MessagePack array of 10


def packer() -> msgpack.Packer:
    """This thread's packer of ``checkpoint_record`` (one per thread: a Packer keeps a buffer;
    reused: msgpack.packb builds one per call)."""
    p = getattr(_local, "packer", None)
    if p is None:
        p = _local.packer = msgpack.Packer(use_bin_type=False)
    return p


def checkpoint_record(parts: Sequence[Any]) -> bytes:
    """A format-6 checkpoint record: ``parts`` (CP order; bytes and str, the nested parts lists
    of them) as a MessagePack array, every string of the raw family (lua/_lib_records.lua cp_rec)."""
    p = getattr(_local, "packer", None)
    out: bytes = (p if p is not None else packer()).pack(parts)
    return out


def checkpoint_head(raw: bytes) -> list[Any]:
    """The first 7 parts of a checkpoint record of any format (at least; format 6 gives all 10),
    nested parts (versions, filter) as lists of bytes (format 6) or records (earlier formats):
    ``str_pairs`` and ``metadata_from_filter`` take either."""
    if raw[:1] != b"\x9a":
        return unpack_head(raw, CP.PARTS, CP.FILTER + 1)
    try:
        parts = msgpack.unpackb(raw, raw=True)
    except (ValueError, msgpack.UnpackException) as exc:
        raise MalformedReplyError(f"malformed checkpoint record: {exc}") from exc
    if type(parts) is not list or len(parts) != CP.PARTS:
        raise MalformedReplyError("malformed checkpoint record: expected an array of 10 parts")
    return parts


EMPTY_TYPE = "empty"  # the serde type of a channel without a value
EMPTY_BLOB = b"5,0;empty"  # pack([EMPTY_TYPE, b""]), the whole blob record (lua/_lib_records.lua EMPTY_BLOB)


def blob_record(type_: str | bytes, data: bytes) -> bytes:
    """``pack([type_, data])``, framed directly (put's hot path)."""
    t = type_ if isinstance(type_, bytes) else type_.encode()
    return b"%d,%d;%s%s" % (len(t), len(data), t, data)


def blob_record_len(type_: bytes, data: bytes) -> int:
    """``len(blob_record(type_, data))``, without framing it."""
    return len(type_) + len(data) + len(b"%d,%d;" % (len(type_), len(data)))


def unpack(rec: bytes) -> list[bytes]:
    return unpack_head(rec)


def unpack_head(rec: bytes, parts: int | None = None, want: int | None = None) -> list[bytes]:
    """The first ``want`` parts (default: all) of a record that must have ``parts`` parts
    (default: any number); the others are checked (count and lengths) but not copied (a
    checkpoint's filter and parents records). The body is never copied as a whole."""
    lens, pos = _lengths(rec, parts)
    out: list[bytes] = []
    for n in lens if want is None else lens[:want]:
        out.append(rec[pos : pos + n])
        pos += n
    return out


def _lengths(rec: bytes, parts: int | None = None) -> tuple[list[int], int]:
    """A record's part lengths, checked against its length (and ``parts``), and where its body starts."""
    try:
        semi = rec.find(b";")
        if semi < 0:
            raise ValueError("no header")
        lens = list(map(int, rec[:semi].split(b","))) if semi else []
        if parts is not None and len(lens) != parts:
            raise ValueError(f"expected {parts} parts")
        if semi + 1 + sum(lens) != len(rec):
            raise ValueError("length mismatch")
        return lens, semi + 1
    except (ValueError, TypeError) as exc:
        raise MalformedReplyError(f"malformed record: {exc}") from exc


def unpack_blob(rec: bytes) -> tuple[bytes, bytes]:
    """``unpack`` of a blob record ``[type, bytes]``, the read path's most frequent record."""
    comma, semi = rec.find(b","), rec.find(b";")
    try:
        if not 0 < comma < semi:
            raise ValueError("expected 2 parts")
        start = semi + 1 + int(rec[:comma])
        if start + int(rec[comma + 1 : semi]) != len(rec) or start > len(rec):
            raise ValueError("length mismatch")
    except ValueError as exc:
        raise MalformedReplyError(f"malformed blob record: {exc}") from exc
    return rec[semi + 1 : start], rec[start:]


def write_record(task_id: bytes, channel: bytes, type_: bytes, data: bytes, task_path: bytes, idx: bytes) -> bytes:
    """``pack([task_id, channel, type, data, task_path, idx])``, framed directly (put_writes' hot path)."""
    return b"%d,%d,%d,%d,%d,%d;%s%s%s%s%s%s" % (
        len(task_id), len(channel), len(type_), len(data), len(task_path), len(idx),
        task_id, channel, type_, data, task_path, idx,
    )  # fmt: skip


def _canon(v: Any) -> Any:
    # Python equality semantics (InMemorySaver compares with ==): True == 1, 1.0 == 1.
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        return int(v)
    if isinstance(v, dict):
        return {str(k): _canon(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_canon(x) for x in v]
    return v


# one encoder instance: json.dumps() with options builds a new JSONEncoder on every call
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_encode_str = json.encoder.encode_basestring


def canonical_json(v: Any) -> bytes | None:
    """Canonical JSON of a metadata value, or None when it is not JSON-representable."""
    t = type(v)
    if t is str:
        try:
            return _encode_str(v).encode()
        except UnicodeEncodeError:  # a lone surrogate: no UTF-8 form (the nested case below too)
            return None
    if t is int:
        return b"%d" % v
    if v is None:
        return b"null"
    if t is dict and not v:
        return b"{}"
    try:
        return _ENCODER.encode(_canon(v)).encode()
    except (TypeError, ValueError):
        return None


# A metadata value's canonical JSON longer than this is kept in the filter record as
# DIGEST_MARK + sha256(JSON) (33 bytes), not as a second full copy of the value (the serde
# bytes hold the first). 64: a digest only pays off well above its own 33 bytes, and the
# usual small values (step, source, a uuid run_id, short parents maps) stay readable as
# they are; above it the filter copy costs 33 bytes whatever the value's size.
FILTER_DIGEST_OVER = 64
DIGEST_MARK = b"\x01"  # no JSON text starts with a control character
DIGEST_LEN = 1 + 32


def filter_value(cj: bytes) -> bytes:
    """What the filter record keeps of a value's canonical JSON: itself, or its digest."""
    if len(cj) <= FILTER_DIGEST_OVER:
        return cj
    return DIGEST_MARK + hashlib.sha256(cj).digest()


def filter_parts(metadata: Mapping[str, Any], check: bool = True) -> tuple[list[bytes], bool]:
    """The filter part of metadata ``[key, canonical JSON or its digest, ...]``, and whether it
    holds every value in full, as JSON that reads back to exactly that value (no digest, no bool
    made an int, no float made an int, no tuple, dict keys in the same order), in one pass
    (``check=False``: not asked)."""
    parts: list[bytes] = []
    holds = check
    for k, v in metadata.items():
        cj = canonical_json(v)
        if cj is None:
            holds = False
            continue
        if len(cj) > FILTER_DIGEST_OVER:
            holds = False
            parts += [k.encode(), filter_value(cj)]
            continue
        parts += [k.encode(), cj]
        if holds:
            holds = _reads_back(v)
    return parts, holds


# a checkpoint's metadata type when the metadata is stored only in the filter record (format 5):
# every value's canonical JSON reads back to exactly that value (types, key order), so a read
# rebuilds the metadata from it; a serializer's type never starts with \x1f
MD_IN_FILTER = b"\x1fm"


def _reads_back(v: Any) -> bool:
    """Whether ``json.loads(canonical_json(v))`` is exactly ``v`` (types and dict key order too),
    without parsing: str, int (not bool), None, finite floats that are not whole (their JSON is
    their repr, which reads back exactly; a whole one is written as an int), lists of such, and
    dicts of str keys in sorted order (canonical JSON sorts them) of such."""
    t = type(v)
    if t is str or t is int or v is None:
        return True
    if t is float:
        return math.isfinite(v) and not v.is_integer()
    if t is list:
        return all(_reads_back(x) for x in v)
    if t is dict:
        keys = list(v)
        return (
            all(type(k) is str for k in keys)
            and all(keys[i] < keys[i + 1] for i in range(len(keys) - 1))
            and all(_reads_back(x) for x in v.values())
        )
    return False


def _json_value(v: str) -> Any:
    """``json.loads`` of a canonical JSON value, with LangGraph's usual metadata (a plain string, an
    int, null, an empty object) parsed directly (json.loads costs ~3 us a call)."""
    if v[:1] == '"' and "\\" not in v:
        return v[1:-1]
    if v.isdigit() or (v[:1] == "-" and v[1:].isdigit()):
        return int(v)
    if v == "{}":
        return {}
    if v == "null":
        return None
    return json.loads(v)


def _record_texts(x: Any) -> list[str]:
    """The parts of an earlier format's nested record as str (format 6's are lists: read by the
    callers in C-level loops)."""
    if type(x) is not bytes:
        raise MalformedReplyError("malformed checkpoint record: a nested part is not an array")
    return unpack_text(x)


def metadata_from_filter(flt: bytes | list[Any]) -> dict[str, Any]:
    """The metadata a filter part holds in full (``MD_IN_FILTER``)."""
    if type(flt) is list:
        try:
            it = iter(flt)
            return {k.decode(): _json_value(v.decode()) for k, v in zip(it, it, strict=True)}
        except (AttributeError, UnicodeDecodeError, ValueError) as exc:
            raise MalformedReplyError(f"malformed checkpoint record: {exc}") from exc
    parts = _record_texts(flt)
    return {parts[i]: _json_value(parts[i + 1]) for i in range(0, len(parts) - 1, 2)}


def str_pairs(rec: bytes | list[Any]) -> dict[str, Any]:
    """(key, value) pairs as a dict of str (a checkpoint's channel versions), from a list of
    bytes or a record."""
    parts: list[Any] = rec if type(rec) is list else _record_texts(rec)
    if len(parts) % 2:
        raise MalformedReplyError("malformed record: an odd number of parts where pairs were expected")
    it = iter(parts)
    if parts is not rec:
        return dict(zip(it, it, strict=True))
    try:
        return dict(zip(map(bytes.decode, it), map(bytes.decode, it), strict=True))
    except (TypeError, UnicodeDecodeError) as exc:
        raise MalformedReplyError(f"malformed checkpoint record: {exc}") from exc


def unpack_text(rec: bytes) -> list[str]:
    """``[p.decode() for p in unpack(rec)]``, decoding the body once when it is ASCII (the read
    path's versions and metadata records: one decode instead of one per part)."""
    lens, pos = _lengths(rec)
    out: list[str] = []
    if rec.isascii():
        text = rec.decode("ascii")
        for n in lens:
            out.append(text[pos : pos + n])
            pos += n
        return out
    try:
        for n in lens:
            out.append(rec[pos : pos + n].decode())
            pos += n
    except UnicodeDecodeError as exc:
        raise MalformedReplyError(f"malformed record: {exc}") from exc
    return out


def filter_args(flt: dict[str, Any] | None) -> list[bytes]:
    """``[n, key, want, ...]``; a value that has no JSON form can match nothing.

    ``want`` is the value's canonical JSON, or for a long one its digest followed by the JSON
    (``filter_value(cj) + cj``): list.lua matches the digest (records since digests) or the
    JSON (records of earlier releases, which kept every value in full).
    """
    if not flt:
        return [b"0"]
    out: list[bytes] = [str(len(flt)).encode()]
    for k, v in flt.items():
        if not isinstance(k, str):
            raise TypeError(f"filter keys must be str, got {type(k).__name__}")
        cj = canonical_json(v)
        if cj is None:
            want = b"\x00nomatch"
        elif len(cj) <= FILTER_DIGEST_OVER:
            want = cj
        else:
            want = filter_value(cj) + cj
        out += [k.encode(), want]
    return out


def pairs(items: Sequence[bytes]) -> list[tuple[bytes, bytes]]:
    return [(items[i], items[i + 1]) for i in range(0, len(items) - 1, 2)]
