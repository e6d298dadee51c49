"""Value encoding: zstd compression and per-channel streams (storage format 5).

Pure and I/O-free, like the plans that call it. What is stored (see docs/data-model.md):

* A value's serde bytes of fewer than ``MIN_ENCODED`` bytes, or that zstd cannot shrink
  (ciphertext from ``EncryptedSerializer``), are stored as they are, as every earlier format did.
* A write's value is stored as one zstd frame, its serde type marked ``type + "\\x1fz"``; so is
  a checkpoint's own bytes of at least ``CP_MIN_ENCODED`` bytes. Those bytes leave out the id
  and the channel versions, which the record holds (``VERSIONS_MARK``): ~250 bytes are left,
  which zstd shrinks by ~15% for ~4 us a put and as much a read, so it is not asked to.
* A channel value is a *stream record*, type ``type + "\\x1fs"``: a stream id and at most
  ``MAX_OPS`` ops, each a byte range of the stream or a short literal. A stream is the
  append-only raw bytes of one (namespace, channel), stored as at most ``MAX_FRAMES`` zstd
  frames (lua/_lib_values.lua, "Encoded values"). A new version of a list that only grows shares all
  of its predecessor's bytes but the msgpack array header, so it costs a few ops and one frame
  of its new bytes, whatever the list's length: memory grows linearly with a thread's turns.
  Every ``MERGE_AT`` frames the put replaces them with one frame of the whole stream (same raw
  bytes: no record changes), so a read decompresses at most ``MERGE_AT`` frames of one stream
  per channel (with the thread's reused zstd context: ~1.5 us per small frame), whatever the
  history's length.

The client keeps, per (thread, namespace, channel), the stream its last read or write of that
channel used (``StreamCache``, bounded in bytes), so a put finds the shared bytes by comparison
(no zstd dictionary) and sends only the new ones. Without it (another worker's thread, a
restart) a put starts a new stream: one compressed copy of the value, never a second call.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Union

import zstandard

from ..errors import MalformedReplyError
from .codec import blob_record, blob_record_len, unpack

ZSTD_MARK = b"\x1fz"  # type + mark: the bytes are one zstd frame of the serde bytes
# a checkpoint's type + mark (before ZSTD_MARK): its serde bytes leave out channel_versions, which
# the record's versions part holds (str versions only), and its id, which the record's key holds
VERSIONS_MARK, VERSIONS_MARK_B = "\x1fv", b"\x1fv"
STREAM_MARK = b"\x1fs"  # type + mark: the bytes are a stream record
MIN_ENCODED = 256  # smaller serde bytes are stored as they are
CP_MIN_ENCODED = 1024  # the same for a checkpoint's own bytes (see above)
# zstd levels: 1 below SMALL bytes, 3 from SMALL bytes on (whole values and merged streams,
# where the ratio pays). Not -1: it takes a third of level 1's CPU on small frames, but real-text
# messages of ~730 bytes shrink 1.33x at -1 against 1.69x at 1, which puts `python -m bench memory`
# past its target (<= 0.05x the serializer's bytes).
LEVEL_SMALL, LEVEL, SMALL = 1, 3, 32 << 10
MERGE_AT = 16  # a put that would leave a stream with more frames merges them into one
MAX_FRAMES = 32  # lua/_lib_values.lua MAX_FRAMES: what put.lua accepts
MAX_OPS = 8  # ops per stream record
MAX_LITERAL = 16  # bytes of one literal op (a msgpack array header is 1, 3 or 5)
STREAM_REC_MAX = 512  # lua/_lib_values.lua STREAM_REC_MAX
MAX_HELD = 8  # lua/_lib_values.lua MAX_HELD: the held streams a get_tuple names
MAX_SHIFT = 5  # header growth / shrink tried when resynchronising after the first difference

Op = Union[tuple[int, int], bytes]  # noqa: UP007 (runtime alias): a range [a, b) of the stream, or a literal


class Stream(NamedTuple):
    """The client's copy of one stored stream (immutable; a NamedTuple is built in a third of a
    frozen dataclass's time, and puts build one per value they append to)."""

    sid: bytes
    raw: bytes  # its raw (decompressed) bytes
    frames: int  # its number of frames
    hashed: Any = None  # with an integrity key: a BLAKE2b of exactly ``raw`` (``stream_covered``)


class Known(NamedTuple):
    """A cache entry: the stream a channel's latest seen value lives in, that value's ops, and
    the value itself (what the next put compares with: kept, not rebuilt from the stream)."""

    stream: Stream
    ops: tuple[Op, ...]
    value: bytes

    @property
    def nbytes(self) -> int:
        return len(self.stream.raw) + (0 if self.value is self.stream.raw else len(self.value))


@dataclass(slots=True)
class StreamAppend:
    """One stream change a put sends (put.lua ARGV, 5 per append)."""

    dir_suffix: bytes  # e(channel) "\0" sid
    mode: bytes  # b"n" new | b"a" append | b"m" merge
    base: int  # the stored raw length it is based on (0 for "n")
    length: int  # the raw length after it
    frame: bytes
    known: Known  # the cache entry once the put succeeded

    def args(self) -> list[bytes | int]:
        return [self.dir_suffix, self.mode, self.base, self.length, self.frame]


# ---- zstd: contexts reused, one set per thread (they are not thread-safe, and LangGraph calls
# put_writes from worker threads); every frame records its content size
_local = threading.local()


def _contexts() -> Any:
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        ctx = _local.ctx = (
            zstandard.ZstdCompressor(level=LEVEL_SMALL),
            zstandard.ZstdCompressor(level=LEVEL),
            zstandard.ZstdDecompressor(),
        )
    return ctx


def compress(data: bytes) -> bytes:
    small, large, _ = _contexts()
    out: bytes = (small if len(data) < SMALL else large).compress(data)
    return out


def decompress(data: bytes) -> bytes:
    try:
        out: bytes = _contexts()[2].decompress(data)
    except zstandard.ZstdError as exc:
        raise MalformedReplyError(f"corrupt zstd data: {exc}") from exc
    return out


def check_type(type_: bytes) -> None:
    """A serializer's type may not hold the byte that marks encoded values."""
    if b"\x1f" in type_:
        name = type_.decode(errors="replace")
        raise ValueError(f"serializer type {name!r} contains \\x1f, which marks encoded values")


def encode_plain(type_: str, data: bytes, on: bool, mark: str = "", least: int = MIN_ENCODED) -> tuple[bytes, bytes]:
    """(type, bytes) as stored for a write or a checkpoint's own bytes (``mark``: VERSIONS_MARK);
    compressed when ``on`` and at least ``least`` bytes long."""
    check_type(type_.encode())
    t = (type_ + mark).encode()
    if on and len(data) >= least:
        z = compress(data)
        if len(z) < len(data) - len(data) // 8:
            return t + ZSTD_MARK, z
    return t, data


# ---- stream records -------------------------------------------------------------------
def _op_bytes(op: Op) -> bytes:
    if isinstance(op, bytes):
        return b"l" + op
    return b"r%d,%d" % op


def stream_payload(sid: bytes, ops: Sequence[Op]) -> bytes:
    parts = [sid, *map(_op_bytes, ops)]
    return b",".join([b"%d" % len(p) for p in parts]) + b";" + b"".join(parts)


def parse_payload(payload: bytes) -> tuple[bytes, list[Op]]:
    parts = unpack(payload)
    if not parts:
        raise MalformedReplyError("empty stream record")
    ops: list[Op] = []
    for p in parts[1:]:
        if p[:1] == b"l":
            ops.append(p[1:])
        elif p[:1] == b"r":
            a, _, b = p[1:].partition(b",")
            ops.append((int(a), int(b)))
        else:
            raise MalformedReplyError("malformed stream op")
    return parts[0], ops


def materialize(raw: bytes, ops: Sequence[Op]) -> bytes:
    if len(ops) == 1 and not isinstance(ops[0], bytes):
        a, b = ops[0]
        return raw[a:b] if (a, b) != (0, len(raw)) else raw
    return b"".join(op if isinstance(op, bytes) else raw[op[0] : op[1]] for op in ops)


def _sub_ops(ops: Sequence[Op], start: int, end: int) -> list[Op]:
    """The ops of bytes [start, end) of the value ``ops`` describe."""
    out: list[Op] = []
    pos = 0
    for op in ops:
        n = len(op) if isinstance(op, bytes) else op[1] - op[0]
        lo, hi = max(start, pos), min(end, pos + n)
        if lo < hi:
            if isinstance(op, bytes):
                out.append(op[lo - pos : hi - pos])
            else:
                out.append((op[0] + lo - pos, op[0] + hi - pos))
        pos += n
        if pos >= end:
            break
    return out


def _normalize(ops: Sequence[Op]) -> list[Op]:
    out: list[Op] = []
    for op in ops:
        if isinstance(op, bytes):
            if not op:
                continue
            if out and isinstance(out[-1], bytes):
                out[-1] = out[-1] + op
                continue
        elif op[0] == op[1]:
            continue
        elif out and not isinstance(out[-1], bytes) and out[-1][1] == op[0]:
            out[-1] = (out[-1][0], op[1])
            continue
        out.append(op)
    return out


def common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    if n == 0 or a[0] != b[0]:
        return 0  # a list's msgpack header is its first byte: it changes whenever its length does
    i, step = 0, 4096
    while i < n and a[i : i + step] == b[i : i + step]:
        i += step
    if i >= n:
        return n
    lo, hi = i, min(i + step, n)  # a[:lo] == b[:lo], they differ before hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo if a[lo] != b[lo] else hi


# the first byte of a list's serde bytes: a msgpack array (fixarray, array16, array32) or a JSON
# array; lists (of messages) are what grows by appends, version after version
_LIST_HEADS = frozenset([bytes([b]) for b in range(0x90, 0xA0)] + [b"\xdc", b"\xdd", b"["])

_SHIFTS = sorted(((d, k) for d in range(MAX_SHIFT + 1) for k in range(MAX_SHIFT + 1) if d or k), key=sum)


def _array_header(b: bytes) -> int:
    """The length of the msgpack array header ``b`` starts with (fixarray, array16, array32), else 0."""
    h = b[0] if b else 0
    return 1 if 0x90 <= h <= 0x9F else 3 if h == 0xDC else 5 if h == 0xDD else 0


def splice(new: bytes, base: bytes, base_ops: Sequence[Op], stream_len: int) -> tuple[list[Op], bytes] | None:
    """``new`` as ops over a stream whose bytes ``base_ops`` (= ``base``) point into, plus the
    bytes to append to the stream (its raw length is ``stream_len``); None when less than half
    of ``new`` is shared or the record would be too long."""
    if new == base:  # a new version of an unchanged value: the same ops, nothing to append
        return list(base_ops), b""
    hn, hb = _array_header(new), _array_header(base)
    if hn and hb and new[:hn] != base[:hb] and new.startswith(memoryview(base)[hb:], hn):
        # the common case, a msgpack list that grew by appends: a new header, then every item of
        # base, then the new items (one comparison; no search for where they differ)
        tail = hn + len(base) - hb
        last = base_ops[-1] if 0 < len(base_ops) <= 2 else None
        if type(last) is tuple and last[1] == stream_len:
            # and base ends with the stream's last bytes, after a header literal or from the
            # stream's own header on (a list appended to put after put): the items of base
            # are the range that ends the stream, the new ones go on after it
            if len(base_ops) == 1:
                start = last[0] + hb
            else:
                head = base_ops[0]
                start = last[0] if type(head) is bytes and len(head) == hb else -1
            if start >= 0:
                if tail < len(new) // 2 + 1:
                    return None
                suffix = new[tail:]
                return [new[:hn], (start, stream_len + len(suffix))], suffix
        ops: list[Op] = [new[:hn], *_sub_ops(base_ops, hb, len(base))]
        return _finish(new, ops, tail, stream_len)
    n = common_prefix(new, base)
    ops = _sub_ops(base_ops, 0, n)
    tail = n
    if n < len(base) and n < len(new):
        # one short difference (a header that changed size), then the rest of base again?
        for d, k in _SHIFTS:
            i, j = n + d, n + k
            if j > len(base) or i > len(new):
                continue
            if new[i : i + 64] == base[j : j + 64] and new.startswith(memoryview(base)[j:], i):
                ops.append(new[n:i])
                ops += _sub_ops(base_ops, j, len(base))
                tail = i + len(base) - j
                break
    return _finish(new, ops, tail, stream_len)


def _finish(new: bytes, ops: list[Op], tail: int, stream_len: int) -> tuple[list[Op], bytes] | None:
    """splice()'s answer once ``ops`` give ``new[:tail]``: ``new[tail:]`` is appended to the stream."""
    suffix = new[tail:]
    if tail < len(new) // 2 + 1:
        return None
    if suffix:
        ops.append((stream_len, stream_len + len(suffix)))
    ops = _normalize(ops)
    if len(ops) > MAX_OPS or any(isinstance(op, bytes) and len(op) > MAX_LITERAL for op in ops):
        return None
    return ops, suffix


class StreamCache:
    """Per (thread, namespace, channel): the latest value's stream, ops and bytes. LRU, bounded by
    the bytes of the streams and values it holds; entries are immutable, replaced under a lock held only
    for the dict operation. A stale entry cannot corrupt anything (stream bytes and records
    never change); it costs put.lua's answer 3 and a new stream."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._d: OrderedDict[tuple[str, str, str], Known] = OrderedDict()
        # the cached streams by (thread, id), for reads: a (thread, id) never comes back with
        # other bytes (copy_thread gives the streams it copies fresh ids: docs/lifecycle.md)
        self._sids: dict[tuple[str, bytes], Stream] = {}
        # the same streams by thread, for held(): what a read tells the script it holds
        self._threads: dict[str, dict[bytes, Stream]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def stream(self, thread_id: str, sid: bytes) -> Stream | None:
        return self._sids.get((thread_id, sid))

    def held(self, thread_id: str) -> dict[bytes, Stream]:
        """The streams of the thread it holds (the latest ``MAX_HELD``): a get_tuple sends their
        ids and raw lengths, and the script leaves out the frames they already hold."""
        with self._lock:
            d = self._threads.get(thread_id)
            if not d:
                return {}
            if len(d) <= MAX_HELD:
                return dict(d)
            return dict(list(d.items())[-MAX_HELD:])

    def get(self, key: tuple[str, str, str]) -> Known | None:
        with self._lock:
            k = self._d.get(key)
            if k is not None:
                self._d.move_to_end(key)
            return k

    def put(self, key: tuple[str, str, str], known: Known) -> None:
        old = self._d.get(key)
        if old is not None and old.stream is known.stream and old.ops == known.ops:
            return  # a read of what the cache holds (no lock: a stale answer only costs a put)
        size = known.nbytes
        if size > self.max_bytes // 4:
            self.drop(key)
            return
        with self._lock:
            old = self._d.pop(key, None)
            if old is not None:
                self._forget(key, old)
            self._d[key] = known
            self._sids[key[0], known.stream.sid] = known.stream
            by_sid = self._threads.setdefault(key[0], {})
            by_sid.pop(known.stream.sid, None)  # the latest last
            by_sid[known.stream.sid] = known.stream
            self._bytes += size
            while self._bytes > self.max_bytes and self._d:
                k, gone = self._d.popitem(last=False)
                self._forget(k, gone)

    def _forget(self, key: tuple[str, str, str], known: Known) -> None:
        self._bytes -= known.nbytes
        if self._sids.get((key[0], known.stream.sid)) is known.stream:
            del self._sids[key[0], known.stream.sid]
            by_sid = self._threads[key[0]]
            del by_sid[known.stream.sid]
            if not by_sid:
                del self._threads[key[0]]

    def drop(self, key: tuple[str, str, str]) -> None:
        with self._lock:
            old = self._d.pop(key, None)
            if old is not None:
                self._forget(key, old)

    def drop_thread(self, thread_id: str) -> None:
        with self._lock:
            for key in [k for k in self._d if k[0] == thread_id]:
                self._forget(key, self._d.pop(key))

    def __len__(self) -> int:
        return len(self._d)

    @property
    def nbytes(self) -> int:
        return self._bytes


def new_sid() -> bytes:
    return os.urandom(6).hex().encode()  # 12 characters, never a NUL; unique per thread in practice


def encode_channel(
    type_: bytes, data: bytes, ch_e: bytes, known: Known | None, extra: int = 0
) -> tuple[bytes, StreamAppend | None]:
    """A channel value's blob record, and the stream change it needs (None: stored raw);
    ``extra``: bytes its type will gain (an integrity tag), counted in the record's bound."""
    t, stored, app = encode_channel_parts(type_, data, ch_e, known, extra)
    return blob_record(t, stored), app


def encode_channel_parts(
    type_: bytes, data: bytes, ch_e: bytes, known: Known | None, extra: int = 0, hashed: bool = False
) -> tuple[bytes, bytes, StreamAppend | None]:
    """``encode_channel``'s blob record as its parts (type, bytes): a put with an integrity key
    tags them before it frames the record. ``hashed``: the stream it appends to or starts gets
    its running hash (``Stream.hashed``: the base's taken on over the new bytes, as
    ``stream_covered`` would, without building the stream again)."""
    check_type(type_)
    if len(data) < MIN_ENCODED or len(type_) > 128:
        return type_, data, None
    if known is not None:
        st = known.stream
        base = known.value
        spliced = splice(data, base, known.ops, len(st.raw))
        length = len(st.raw) + (len(spliced[1]) if spliced else 0)
        # dead bytes stay bounded: a stream at most twice what its newest value needs
        if spliced is not None and length <= 2 * len(data) + 65536:
            ops, suffix = spliced
            raw = st.raw + suffix
            payload = stream_payload(st.sid, ops)
            t = type_ + STREAM_MARK
            if blob_record_len(t, payload) + extra <= STREAM_REC_MAX:
                if st.frames + (1 if suffix else 0) > MERGE_AT:
                    mode, frame, frames = b"m", compress(raw), 1
                elif suffix:
                    mode, frame, frames = b"a", compress(suffix), st.frames + 1
                else:
                    mode, frame, frames = b"a", b"", st.frames  # nothing new: an empty append
                h = None
                if hashed and st.hashed is not None:
                    h = st.hashed
                    if suffix:
                        h = h.copy()
                        h.update(suffix)
                nk = Known(Stream(st.sid, raw, frames, h), tuple(ops), data)
                if mode == b"a" and not suffix:
                    # no bytes to add: the record only points into what is stored; no append
                    return t, payload, StreamAppend(ch_e + b"\0" + st.sid, b"-", len(st.raw), len(raw), b"", nk)
                return t, payload, StreamAppend(ch_e + b"\0" + st.sid, mode, len(st.raw), len(raw), frame, nk)
    frame = compress(data)
    if len(frame) >= len(data) - len(data) // 8:
        return type_, data, None  # incompressible (ciphertext): as it is
    if data[:1] not in _LIST_HEADS:
        # not a list: a later version is unlikely to extend it, so one zstd frame in one field
        # (a stream costs a directory and a frame field besides its record)
        return type_ + ZSTD_MARK, frame, None
    sid = new_sid()
    ops1: tuple[Op, ...] = ((0, len(data)),)
    nk = Known(Stream(sid, data, 1, hashlib.blake2b(data) if hashed else None), ops1, data)
    app = StreamAppend(ch_e + b"\0" + sid, b"n", 0, len(data), frame, nk)
    return type_ + STREAM_MARK, stream_payload(sid, ops1), app


def decode_streams(
    streams: Sequence[Any], cache: StreamCache | None = None, thread_id: str = "",
    held: dict[bytes, Stream] | None = None,
) -> dict[bytes, Stream]:
    """A reply's streams ({sid, directory, frame, ...} each) decoded; a stream the cache holds
    at the stored length is not decompressed again (its bytes never change). ``held``: the
    streams the call named as held (``StreamCache.held``, as sent): an entry with fewer frames
    than its directory lists carries only those after the held prefix, which ends where the
    first of them starts (none: the held stream is the whole stream)."""
    out: dict[bytes, Stream] = {}
    for s in streams:
        sid, d, frames = s[0], s[1], s[2:]
        dir_ = unpack(d)
        if not dir_ or not dir_[0].isdigit() or len(dir_) % 2 == 0:
            raise MalformedReplyError(f"stream {sid!r}: malformed directory")
        n = (len(dir_) - 3) // 2
        if len(frames) < n:
            base = held.get(sid) if held else None
            skipped = n - len(frames)
            if base is None or len(base.raw) != int(dir_[2 + 2 * skipped]):
                raise MalformedReplyError(f"stream {sid!r}: {skipped} frames left out of the reply, none held")
            if not frames:
                out[sid] = base if base.frames == n else Stream(sid, base.raw, n, base.hashed)
                continue
            new = b"".join([decompress(f) for f in frames])
            raw = base.raw + new
            if len(raw) != int(dir_[0]):
                raise MalformedReplyError(f"stream {sid!r}: {len(raw)} bytes, directory says otherwise")
            # the held stream's running hash (integrity_key: ``stream_covered``), taken on over
            # the new bytes only: a reader of a growing stream hashes each byte once
            h = base.hashed
            if h is not None:
                h = h.copy()
                h.update(new)
            out[sid] = Stream(sid, raw, n, h)
            continue
        known = cache.stream(thread_id, sid) if cache is not None else None
        if known is not None and len(known.raw) == int(dir_[0]) and known.frames == len(frames):
            out[sid] = known
            continue
        raw = b"".join([decompress(f) for f in frames]) if len(frames) != 1 else decompress(frames[0])
        if len(raw) != int(dir_[0]) or len(frames) != n:
            raise MalformedReplyError(
                f"stream {sid!r}: {len(raw)} bytes in {len(frames)} frames, directory says otherwise"
            )
        out[sid] = Stream(sid, raw, len(frames))
    return out


def stream_covered(
    ops: Sequence[Op], st: Stream, base: Stream | None = None, payload: bytes | None = None
) -> tuple[bytes, Stream]:
    """What the integrity tag of a stream value covers: its ops (the stream id left out: a copy
    gives streams new ids) and a BLAKE2b of the stream bytes they read, ``raw[:end]``; and the
    stream with its running hash when that is the whole stream. A stream that extends ``base``
    (the stream a put appended to) continues ``base``'s hash: a put hashes its new bytes only,
    and a read of a stream this saver holds hashes nothing again. ``payload``: the stored
    record's payload (``stream_payload(st.sid, ops)``), cut to the ops' part instead of
    framing them again (the bytes a reader checks are then those stored)."""
    end = 0
    for op in ops:  # (a loop: a generator into max() costs more than the few ops it reads)
        if not isinstance(op, bytes) and op[1] > end:
            end = op[1]
    if end == len(st.raw):
        h = st.hashed
        if h is None:
            if base is not None and base.hashed is not None and base.sid == st.sid and len(base.raw) <= end:
                h = base.hashed.copy()
                h.update(memoryview(st.raw)[len(base.raw) :])
            else:
                h = hashlib.blake2b(st.raw)
            st = Stream(st.sid, st.raw, st.frames, h)  # not _replace: a third of its time
        digest = h.digest()
    else:
        digest = hashlib.blake2b(memoryview(st.raw)[:end]).digest()
    if payload is None:
        return stream_payload(b"", ops) + digest, st
    # b"<len(sid)>,<op lengths>;" sid ops  ->  b"0,<op lengths>;" ops
    n, semi = len(st.sid), payload.find(b";")
    return b"0" + payload[len(b"%d" % n) : semi + 1] + payload[semi + 1 + n :] + digest, st


def decode_stream_value(payload: bytes, streams: dict[bytes, Stream]) -> tuple[bytes, Known]:
    sid, ops = parse_payload(payload)
    st = streams.get(sid)
    if st is None:
        raise MalformedReplyError(f"stream {sid!r} missing from the reply")
    for op in ops:
        if not isinstance(op, bytes) and not 0 <= op[0] <= op[1] <= len(st.raw):
            raise MalformedReplyError(f"stream {sid!r}: range {op} outside its {len(st.raw)} bytes")
    value = materialize(st.raw, ops)
    return value, Known(st, tuple(ops), value)
