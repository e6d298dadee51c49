"""Memory lab: how many bytes a checkpoint costs under candidate storage encodings.

    python bench/memory_lab.py [--turns 100] [--no-redis] [--no-postgres] [--json out.json]

Builds a realistic chat WITHOUT network: a LangGraph graph whose state is a real ``messages``
channel (HumanMessage / AIMessage from langchain-core, reduced with ``add_messages``), text drawn
without repetition from the Python reference text shipped in the stdlib
(``pydoc_data/topics.py``: prose paragraphs only), serialized with LangGraph's default
``JsonPlusSerializer().dumps_typed`` exactly as the saver stores channel values. The run is
recorded (every put / put_writes LangGraph made) and then:

* replayed into the current release (``RedisSaver``, unique prefix on REDIS_URL, default
  127.0.0.1:6379) to measure the thread's real memory (``MEMORY USAGE`` of each key) and its put
  latency, at ``turns/2`` and ``turns``;
* replayed into ``PostgresSaver`` (temp schema, ``pg_total_relation_size`` deltas of its tables);
* every candidate encoding of the blob hash is simulated in Python on the recorded channel
  versions (each encoding is decoded back and checked byte for byte), and its blob hash is written
  to a scratch Redis hash to measure its real memory; a thread's total under a scheme is the
  current release's total with the blob hash (and optionally the writes hash) swapped.

Timings are medians of repeats (the machine is shared). Nothing under redis_saver/ or lua/ is
changed; this file only measures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import statistics
import struct
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict

if __package__ in (None, ""):  # run as a script: the repository root on the path, as `python -m` has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:  # Python >= 3.14: the same module is in the stdlib
    from compression import zstd  # type: ignore
except ImportError:  # pragma: no cover
    from backports import zstd  # type: ignore

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from bench.workload import Call, RecordingSaver, call_for_thread

SERDE = JsonPlusSerializer()
MIN_COMPRESS = 256  # values shorter than this are stored raw by every compressing scheme
CHANNEL = "messages"


# --------------------------------------------------------------------------- corpus and chat


def corpus_paragraphs() -> list[str]:
    """Prose paragraphs of the Python language reference / library topics shipped with CPython."""
    import pydoc_data.topics as T

    out = []
    for k in sorted(T.topics):
        for p in re.split(r"\n\s*\n", T.topics[k]):
            p = " ".join(p.split())
            if len(p) < 60:
                continue
            letters = sum(c.isalpha() or c in " ,.;:'()-" for c in p)
            if letters / len(p) >= 0.92:  # drops code samples and grammar productions
                out.append(p)
    return out


class TextSource:
    """Draws message texts from the shuffled paragraphs, each paragraph used once (wraps if exhausted)."""

    def __init__(self, seed: int = 7) -> None:
        self.paras = corpus_paragraphs()
        self.rng = random.Random(seed)
        self.rng.shuffle(self.paras)
        self.i = 0
        self.wrapped = 0

    def take(self, n: int) -> str:
        out: list[str] = []
        size = 0
        while size < n:
            if self.i >= len(self.paras):
                self.i, self.wrapped = 0, self.wrapped + 1
            p = self.paras[self.i]
            self.i += 1
            out.append(p)
            size += len(p) + 1
        s = " ".join(out)
        cut = s.rfind(" ", 0, n)
        return s[: cut if cut > n // 2 else n]


def lengths(rng: random.Random, median: float, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, rng.lognormvariate(0, 0.7) * median)))


class ChatState(TypedDict):
    messages: Annotated[list, add_messages]
    turn: int
    summary: str


@dataclass
class Chat:
    calls: list[Call]
    marks: dict[int, int]  # turn -> number of recorded calls at the end of that turn
    user_lens: list[int] = field(default_factory=list)
    ai_lens: list[int] = field(default_factory=list)
    corpus_chars: int = 0
    corpus_wrapped: int = 0
    sample_text: str = ""


def build_chat(turns: int, seed: int = 7, trim: int = 0, fork: int = 0, keep: tuple[str, ...] = ("put", "put_writes")) -> Chat:
    """keep: the recorded operations kept in Chat.calls (bench/memory.py adds "get_tuple", LangGraph's read at
    the start of each turn, so a saver with a client-side cache sees the calls a real run makes)."""
    src = TextSource(seed)
    rng = random.Random(seed + 1)
    ids = random.Random(seed + 2)
    user_lens, ai_lens = [], []

    def assistant(state: dict) -> dict:
        n = lengths(rng, 900, 120, 4000)
        ai_lens.append(n)
        text = src.take(n)
        rid = f"run-{uuid.UUID(int=ids.getrandbits(128))}"
        toks = len(text) // 4
        msg = AIMessage(
            content=text,
            id=rid,
            response_metadata={"model_name": "gpt-4o-2024-08-06", "finish_reason": "stop", "system_fingerprint": "fp_50cad350e4"},
            usage_metadata={"input_tokens": 40 * len(state["messages"]), "output_tokens": toks, "total_tokens": 40 * len(state["messages"]) + toks},
        )
        return {"messages": [msg]}

    def bookkeeping(state: dict) -> dict:
        t = state.get("turn", 0) + 1
        out: dict = {"turn": t, "summary": f"turn {t}: {len(state['messages'])} messages"}
        if trim and t % trim == 0:  # a summarizing agent: drop all but the last 10 messages (not an append)
            out["messages"] = [RemoveMessage(id=m.id) for m in state["messages"][:-10]]
        return out

    g = StateGraph(ChatState)
    g.add_node("assistant", assistant)
    g.add_node("bookkeeping", bookkeeping)
    g.add_edge(START, "assistant")
    g.add_edge("assistant", "bookkeeping")
    g.add_edge("bookkeeping", END)
    rec = RecordingSaver()
    graph = g.compile(checkpointer=rec)
    cfg = {"configurable": {"thread_id": "memlab"}}
    marks, configs = {}, {}
    for t in range(1, turns + fork + 1):
        n = lengths(rng, 160, 20, 1200)
        user_lens.append(n)
        # --fork N: after `turns` turns, go back N turns (time travel) and run N turns on that branch
        at = configs[turns - fork] if fork and t == turns + 1 else cfg
        graph.invoke({"messages": [HumanMessage(content=src.take(n), id=str(uuid.UUID(int=ids.getrandbits(128))))]}, at)
        marks[t] = len(rec.calls)
        configs[t] = graph.get_state(cfg).config
    calls = [c for c in rec.calls if c.op in keep]
    # re-mark on the filtered list
    kept_marks = {}
    for t in range(1, turns + fork + 1):
        kept_marks[t] = sum(1 for c in rec.calls[: marks[t]] if c.op in keep)
    return Chat(calls, kept_marks, user_lens, ai_lens, sum(map(len, src.paras)), src.wrapped,
                " ".join(src.paras[: src.i]))


@dataclass
class Version:
    channel: str
    version: str
    type: str
    data: bytes
    put_index: int  # index of the put (checkpoint) that stored it
    base: str | None = None  # the parent checkpoint's version of this channel


def blob_versions(chat: Chat, upto_calls: int | None = None) -> list[Version]:
    out = []
    k = 0
    cv_by_id: dict[str, dict] = {}
    for c in chat.calls[:upto_calls]:
        if c.op != "put":
            continue
        cp, nv = c.args[1], c.args[3]
        cv_by_id[cp["id"]] = dict(cp.get("channel_versions") or {})
        parent = cv_by_id.get(c.args[0]["configurable"].get("checkpoint_id") or "", {})
        vals = cp.get("channel_values") or {}
        for ch, ver in nv.items():
            if ch in vals:
                t, b = SERDE.dumps_typed(vals[ch])
            else:
                t, b = "empty", b""
            out.append(Version(ch, str(ver), t, b, k, str(parent[ch]) if ch in parent else None))
        k += 1
    return out


def raw_bytes(chat: Chat, upto_calls: int) -> tuple[int, int]:
    """(serde bytes the saver stores, number of checkpoints) over the first calls."""
    total = puts = 0
    for c in chat.calls[:upto_calls]:
        if c.op == "put":
            puts += 1
            cp = dict(c.args[1])
            vals = cp.pop("channel_values", None) or {}
            total += len(SERDE.dumps_typed(cp)[1]) + len(SERDE.dumps_typed(c.args[2])[1])
            for ch in c.args[3]:
                if ch in vals:
                    total += len(SERDE.dumps_typed(vals[ch])[1])
        else:
            for _ch, v in c.args[1]:
                total += len(SERDE.dumps_typed(v)[1])
    return total, puts


# --------------------------------------------------------------------------- timing


def median_us(fn: Callable[[], Any], repeats: int = 15, inner: int = 0) -> float:
    """Median over repeats of the mean time of `inner` calls (auto-sized to >= ~2 ms)."""
    if not inner:
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        inner = max(1, min(200, int(0.002 / max(dt, 1e-7))))
    res = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        res.append((time.perf_counter() - t0) / inner)
    return statistics.median(res) * 1e6


# --------------------------------------------------------------------------- byte helpers


def common_prefix(a: bytes, b: bytes) -> int:
    """Length of the common prefix: 4 KiB chunk compares (memcmp), then a binary search in the chunk."""
    n = min(len(a), len(b))
    lo, step = 0, 4096
    while lo + step <= n and a[lo : lo + step] == b[lo : lo + step]:
        lo += step
    hi = min(lo + step, n)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


RESYNC = [(d, d) for d in range(1, 9)] + [(a, b) for a in range(0, 9) for b in range(0, 9) if a != b]


def splice(prev: bytes, new: bytes) -> tuple[int, int, int, int]:
    """new = prev[:p] + new[p:q] + prev[r:] + new[s:] with prev[r:] == new[q:s].

    The common prefix p ends at the first differing byte (for a msgpack list of messages: the
    array header, whose element count changed); we then try to resynchronise prev's remainder a few
    bytes later (a header may also grow: fixarray 1 byte -> array16 3 bytes). If no resync works,
    the delta is the prefix plus everything after it (q = s = p, r = len(prev))."""
    p = common_prefix(prev, new)
    if p == len(prev):
        return p, p, p, p
    for a, b in RESYNC:
        r, q = p + a, p + b
        n = len(prev) - r
        if n <= 0 or q + n > len(new):
            continue
        if new[q : q + n] == prev[r:]:
            return p, q, r, q + n
    return p, p, len(prev), p


# --------------------------------------------------------------------------- schemes
#
# Every scheme turns the ordered versions of one channel into stored fields {field: value} (the
# value framed like the saver's blob record [type, payload]); decode(field) rebuilds the serde
# bytes from the stored fields only (a cold reader) and counts the decompressions.


def _zc(level: int):
    return zstd.ZstdCompressor(level=level)


def zcompress(data: bytes, level: int = 3, prefix: bytes | None = None) -> bytes:
    if prefix is None:
        return zstd.compress(data, level=level)
    return zstd.compress(data, level=level, zstd_dict=zstd.ZstdDict(prefix, is_raw=True).as_prefix)


def zdecompress(data: bytes, prefix: bytes | None = None) -> bytes:
    if prefix is None:
        return zstd.decompress(data)
    return zstd.decompress(data, zstd_dict=zstd.ZstdDict(prefix, is_raw=True).as_prefix)


class Scheme:
    name = "?"
    note = ""

    def __init__(self) -> None:
        self.fields: dict[str, bytes] = {}  # field -> stored payload (type mark is in the key of meta)
        self.meta: dict[str, str] = {}  # field -> encoding mark stored in the record's type part
        self.order: list[str] = []  # version fields in put order
        self.types: dict[str, str] = {}
        self.cache: tuple[str, bytes] | None = None  # writer's cache: (field, raw) of the latest version
        self.decomp = 0
        self.put_times: list[float] = []
        self.known: dict[str, bytes] = {}

    # writer side
    def put(self, f: str, t: str, raw: bytes, base: str | None = None) -> None:
        """base: the parent checkpoint's version of the channel. The writer's cache holds it when the
        client wrote or read it (LangGraph reads the checkpoint it continues from, a fork included);
        the lab keeps every version, a client an LRU. Without it, the last version written."""
        if base is not None and base in self.known and not isinstance(self, Reverse):
            self.cache = (base, self.known[base])
        self.known[f] = raw
        self.types[f] = t
        self.order.append(f)
        t0 = time.perf_counter()
        self.encode(f, raw)
        self.put_times.append((time.perf_counter() - t0) * 1e6)
        self.cache = (f, raw)

    def encode(self, f: str, raw: bytes) -> None:
        raise NotImplementedError

    def store(self, f: str, mark: str, payload: bytes) -> None:
        self.fields[f], self.meta[f] = payload, mark

    # reader side (cold: stored fields only)
    def read(self, f: str) -> bytes:
        self.decomp = 0
        return self.decode(f)

    def decode(self, f: str) -> bytes:
        raise NotImplementedError

    def chain(self, f: str) -> int:
        """Number of stored fields a cold read of f touches (the Lua script's HGETs)."""
        return 1

    def stored_items(self) -> list[tuple[str, str, bytes]]:
        return [(f, self.meta[f], v) for f, v in self.fields.items()]


class Raw(Scheme):
    name = "raw (current release)"

    def encode(self, f, raw):
        self.store(f, "", raw)

    def decode(self, f):
        return self.fields[f]


class ZstdEach(Scheme):
    def __init__(self, level):
        super().__init__()
        self.level = level
        self.name = f"zstd-{level} per value"
        self.c = _zc(level)

    def encode(self, f, raw):
        if len(raw) < MIN_COMPRESS:
            return self.store(f, "", raw)
        self.store(f, "z", self.c.compress(raw, mode=zstd.ZstdCompressor.FLUSH_FRAME))

    def decode(self, f):
        v = self.fields[f]
        if self.meta[f] == "z":
            self.decomp += 1
            return zstd.decompress(v)
        return v


class FwdDict(Scheme):
    """zstd of each version with the previous version as a raw-content prefix; keyframe every K."""

    def __init__(self, k: int | None):
        super().__init__()
        self.k = k
        self.name = f"fwd zstd-dict, keyframe every {k}" if k else "fwd zstd-dict, no keyframes"
        self.base: dict[str, str] = {}
        self.n = 0

    def encode(self, f, raw):
        key = self.n % self.k == 0 if self.k else self.n == 0
        self.n += 1
        if key or self.cache is None or len(raw) < MIN_COMPRESS:
            return self.store(f, "z" if len(raw) >= MIN_COMPRESS else "", zcompress(raw) if len(raw) >= MIN_COMPRESS else raw)
        bf, braw = self.cache
        self.base[f] = bf
        self.store(f, "d", zcompress(raw, 3, braw))

    def decode(self, f):
        m = self.meta[f]
        if m == "":
            return self.fields[f]
        self.decomp += 1
        if m == "z":
            return zstd.decompress(self.fields[f])
        return zdecompress(self.fields[f], self.decode(self.base[f]))

    def chain(self, f):
        return 1 + (self.chain(self.base[f]) if self.meta[f] == "d" else 0)


class Reverse(Scheme):
    """RCS: newest whole (zstd-3); at each put the previous newest is rewritten as zstd with its successor as prefix."""

    name = "reverse deltas (RCS)"

    def __init__(self):
        super().__init__()
        self.succ: dict[str, str] = {}

    def encode(self, f, raw):
        if self.cache is not None and len(raw) >= MIN_COMPRESS:
            pf, praw = self.cache
            if self.meta.get(pf) == "z":
                self.succ[pf] = f
                self.store(pf, "r", zcompress(praw, 3, raw))
        self.store(f, "z" if len(raw) >= MIN_COMPRESS else "", zcompress(raw) if len(raw) >= MIN_COMPRESS else raw)

    def decode(self, f):
        m = self.meta[f]
        if m == "":
            return self.fields[f]
        self.decomp += 1
        if m == "z":
            return zstd.decompress(self.fields[f])
        return zdecompress(self.fields[f], self.decode(self.succ[f]))

    def chain(self, f):
        return 1 + (self.chain(self.succ[f]) if self.meta[f] == "r" else 0)


DHDR = struct.Struct("<IIII")  # p, q-p (literal length), r, s-q (copied length)


class Append(Scheme):
    """Forward append detection: (base, prefix p, literal, copied range) + zstd(suffix); keyframe every K.

    tail_dict: the suffix is compressed with the base's last 16 KiB as a raw prefix (optional)."""

    TAIL = 16384

    def __init__(self, k: int | None, tail_dict: bool = False):
        super().__init__()
        self.k, self.tail = k, tail_dict
        self.name = ("append-delta" + (" +tail dict" if tail_dict else "")
                     + (f", keyframe every {k}" if k else ", no keyframes"))
        self.base: dict[str, str] = {}
        self.n = 0
        self.c = _zc(3)

    def encode(self, f, raw):
        key = self.n % self.k == 0 if self.k else self.n == 0
        self.n += 1
        if key or self.cache is None or len(raw) < MIN_COMPRESS:
            return self.store(f, "z" if len(raw) >= MIN_COMPRESS else "", zcompress(raw) if len(raw) >= MIN_COMPRESS else raw)
        bf, braw = self.cache
        p, q, r, s = splice(braw, raw)
        if s - q + p < len(raw) // 2:  # shares less than half: a keyframe
            return self.store(f, "z", zcompress(raw))
        suffix = raw[s:]
        if self.tail:
            comp = zcompress(suffix, 3, braw[-self.TAIL:]) if suffix else b""
        else:
            comp = self.c.compress(suffix, mode=zstd.ZstdCompressor.FLUSH_FRAME) if suffix else b""
        self.base[f] = bf
        self.store(f, "a", DHDR.pack(p, q - p, r, s - q) + raw[p:q] + comp)

    def decode(self, f):
        m = self.meta[f]
        v = self.fields[f]
        if m == "":
            return v
        if m == "z":
            self.decomp += 1
            return zstd.decompress(v)
        base = self.decode(self.base[f])
        p, lit, r, n = DHDR.unpack_from(v)
        o = DHDR.size
        comp = v[o + lit :]
        if comp:
            self.decomp += 1
        suffix = (zdecompress(comp, base[-self.TAIL:]) if self.tail else zstd.decompress(comp)) if comp else b""
        return b"".join((base[:p], v[o : o + lit], base[r : r + n], suffix))

    def chain(self, f):
        return 1 + (self.chain(self.base[f]) if self.meta[f] == "a" else 0)


class Stream(Scheme):
    """Proposal: a per-(ns, channel) append-only *stream* of zstd frames plus tiny version records.

    Every version is a short op list over the stream's raw bytes: [literal header][stream range]...
    A put that extends its base (append detection) appends only the new suffix as one more frame
    (stored as its own field: no rewrite of the stream); a put that does not (edit, trim,
    unrelated value) starts a new stream (a keyframe). When a stream has F frames, the put merges
    them into one frame (same raw bytes, same offsets: version records stay valid). A cold read
    of any version = its record + <= F frame fields, one decompress call (frames are
    independent, zstd decodes concatenated frames in one call)."""

    def __init__(self, f: int = 16, level: int = 3, geometric: bool = False):
        super().__init__()
        self.F = f
        self.geo = geometric
        self.name = "stream: append-delta frames, geometric merges" if geometric else f"stream: append-delta frames, merge at {f}"
        self.streams: dict[int, list[str]] = {}  # stream id -> frame fields
        self.raw_len: dict[int, int] = {}  # stream id -> raw length (kept in Lua too)
        self.ops: dict[str, tuple[int, list]] = {}  # version field -> (stream, ops)
        self.nsid = 0
        self.c = _zc(level)
        self.stream_raw: dict[int, list[bytes]] = {}  # writer cache of the stream's raw bytes (for merges)
        self.merges = 0

    def _frame(self, sid: int, data: bytes) -> None:
        name = f"\x00s{sid}\x00{len(self.streams[sid])}"
        self.streams[sid].append(name)
        self.store(name, "zf", self.c.compress(data, mode=zstd.ZstdCompressor.FLUSH_FRAME))
        self.stream_raw.setdefault(sid, []).append(data)
        self.raw_len[sid] = self.raw_len.get(sid, 0) + len(data)
        if self.geo:  # binary-counter merges: frames' raw sizes at least double towards the start
            fr, rw = self.streams[sid], self.stream_raw[sid]
            while len(fr) >= 2 and (len(rw[-2]) <= 2 * len(rw[-1]) or len(fr) > self.F):
                self.merges += 1
                for old in fr[-2:]:
                    del self.fields[old], self.meta[old]
                joined = rw[-2] + rw[-1]
                name = f"\x00s{sid}\x00m{self.merges}"
                fr[-2:] = [name]
                rw[-2:] = [joined]
                self.store(name, "zf", self.c.compress(joined, mode=zstd.ZstdCompressor.FLUSH_FRAME))
        elif len(self.streams[sid]) >= self.F:  # merge: one frame, same raw content and offsets
            self.merges += 1
            for old in self.streams[sid]:
                del self.fields[old], self.meta[old]
            name = f"\x00s{sid}\x00m{self.merges}"
            self.streams[sid] = [name]
            self.stream_raw[sid] = [b"".join(self.stream_raw[sid])]
            self.store(name, "zf", self.c.compress(self.stream_raw[sid][0], mode=zstd.ZstdCompressor.FLUSH_FRAME))

    def _record(self, f: str, sid: int, ops: list) -> None:
        self.ops[f] = (sid, ops)
        enc = [struct.pack("<IB", sid, len(ops))]
        for op in ops:
            enc.append(struct.pack("<BI", 0, len(op)) + op if isinstance(op, bytes) else struct.pack("<BII", 1, *op))
        self.store(f, "s", b"".join(enc))

    def encode(self, f, raw):
        if len(raw) < MIN_COMPRESS:
            return self.store(f, "", raw)
        if self.cache is not None and self.cache[0] in self.ops:
            bf, braw = self.cache
            sid, bops = self.ops[bf]
            p, q, r, s = splice(braw, raw)
            if s - q + p >= len(raw) // 2 and len(bops) <= 6:
                ops = _slice_ops(bops, 0, p) + ([raw[p:q]] if q > p else []) + _slice_ops(bops, r, r + (s - q))
                if s < len(raw):
                    start = self.raw_len[sid]
                    self._frame(sid, raw[s:])
                    ops.append((start, start + len(raw) - s))
                ops = _merge_ops(ops)
                if len(ops) <= 8:
                    return self._record(f, sid, ops)
        sid = self.nsid = self.nsid + 1
        self.streams[sid] = []
        self._frame(sid, raw)
        self._record(f, sid, [(0, len(raw))])

    def decode(self, f):
        if self.meta[f] == "":
            return self.fields[f]
        v = self.fields[f]
        sid, n = struct.unpack_from("<IB", v)
        self.decomp += 1
        stream = zstd.decompress(b"".join(self.fields[x] for x in self.streams[sid]))
        out, o = [], 5
        for _ in range(n):
            kind = v[o]
            if kind == 0:
                (ln,) = struct.unpack_from("<I", v, o + 1)
                out.append(v[o + 5 : o + 5 + ln])
                o += 5 + ln
            else:
                a, b = struct.unpack_from("<II", v, o + 1)
                out.append(stream[a:b])
                o += 9
        return b"".join(out)

    def chain(self, f):
        return 1 + (len(self.streams[self.ops[f][0]]) if f in self.ops else 0)


def _slice_ops(ops: list, a: int, b: int) -> list:
    """The ops producing bytes [a, b) of the value that `ops` produces."""
    out, pos = [], 0
    for op in ops:
        n = len(op) if isinstance(op, bytes) else op[1] - op[0]
        lo, hi = max(a, pos), min(b, pos + n)
        if lo < hi:
            out.append(op[lo - pos : hi - pos] if isinstance(op, bytes) else (op[0] + lo - pos, op[0] + hi - pos))
        pos += n
    return out


def _merge_ops(ops: list) -> list:
    out: list = []
    for op in ops:
        if out and not isinstance(op, bytes) and not isinstance(out[-1], bytes) and out[-1][1] == op[0]:
            out[-1] = (out[-1][0], op[1])
        elif out and isinstance(op, bytes) and isinstance(out[-1], bytes):
            out[-1] = out[-1] + op
        else:
            out.append(op)
    return out


def all_schemes() -> list[Callable[[], Scheme]]:
    return [
        Raw,
        lambda: ZstdEach(1),
        lambda: ZstdEach(3),
        lambda: FwdDict(None),
        lambda: FwdDict(16),
        lambda: FwdDict(64),
        Reverse,
        lambda: Append(None),
        lambda: Append(16),
        lambda: Append(64),
        lambda: Append(16, tail_dict=True),
        lambda: Stream(16),
        lambda: Stream(64),
        lambda: Stream(16, geometric=True),
    ]


# --------------------------------------------------------------------------- redis measurement


def field_name(ch: str, ver: str) -> bytes:
    from redis_saver.keys import enc

    return enc("") + enc(ch) + ver.encode()


def hash_memory(r, key: str, items: list[tuple[bytes, bytes]]) -> int:
    r.delete(key)
    for i in range(0, len(items), 500):
        r.hset(key, mapping=dict(items[i : i + 500]))
    n = r.memory_usage(key, samples=0) or 0
    r.delete(key)
    return n


def scheme_blob_items(s: Scheme, others: list[Version], vmap=lambda v: v) -> list[tuple[bytes, bytes]]:
    """The blob hash a scheme stores: its messages fields plus the other channels' blobs as today."""
    from redis_saver.core.codec import blob_record

    items = []
    for f, mark, payload in s.stored_items():
        t = s.types.get(f, "msgpack")
        items.append(((field_name(CHANNEL, vmap(f)) if not f.startswith("\x00") else field_name(CHANNEL, "") + f.encode()),
                      blob_record(t + ("~" + mark if mark else ""), payload)))
    for v in others:
        items.append((field_name(v.channel, vmap(v.version)), blob_record(v.type, v.data)))
    return items


def thread_keys_memory(r, prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in r.scan_iter(match=f"{prefix}:*", count=1000):
        name = k.decode(errors="replace")
        kind = ("ix:" if ":ix:{" in name else "") + name.rsplit(":", 1)[-1]
        out[kind] = out.get(kind, 0) + (r.memory_usage(k, samples=0) or 0)
    return out


def measure_redis(chat: Chat, url: str, half: int, turns: int, reps: int = 3, transform=None) -> dict:
    import redis

    from redis_saver import RedisSaver

    r = redis.Redis.from_url(url)
    prefix = f"memlab{os.getpid()}x{uuid.uuid4().hex[:6]}"
    saver = RedisSaver(r, prefix=prefix)
    out: dict = {"prefix": prefix}
    put_lat: list[float] = []
    read_lat: list[float] = []
    try:
        for rep in range(reps):
            tid = f"mem-{rep}"
            for i, c in enumerate(chat.calls):
                cc = call_for_thread(c, tid)
                if transform is not None:
                    cc = transform(cc)
                if cc.op == "put":
                    t0 = time.perf_counter()
                    saver.put(*cc.args)
                    dt = time.perf_counter() - t0
                    if i >= chat.marks[turns - 10]:
                        put_lat.append(dt * 1e6)
                else:
                    saver.put_writes(*cc.args)
                if rep == 0 and i + 1 == chat.marks[half]:
                    out["half"] = thread_keys_memory(r, prefix)
                    out["cp_items_half"] = list(r.hgetall(f"{prefix}:{{{tid}}}:cp").items())
            if rep == 0:
                out["full"] = thread_keys_memory(r, prefix)
                wr = f"{prefix}:{{{tid}}}:wr"
                out["wr_items"] = {"half": None, "full": list(r.hgetall(wr).items())}
                out["cp_items_full"] = list(r.hgetall(f"{prefix}:{{{tid}}}:cp").items())
            cfg = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
            for _ in range(10):
                t0 = time.perf_counter()
                saver.get_tuple(cfg)
                read_lat.append((time.perf_counter() - t0) * 1e6)
            if rep == 0:
                # the writes hash at half: replay again to that point into a fresh thread
                tid2 = "mem-half"
                for c in chat.calls[: chat.marks[half]]:
                    cc = call_for_thread(c, tid2)
                    cc = transform(cc) if transform is not None else cc
                    (saver.put if cc.op == "put" else saver.put_writes)(*cc.args)
                out["wr_items"]["half"] = list(r.hgetall(f"{prefix}:{{{tid2}}}:wr").items())
                saver.delete_thread(tid2)
            saver.delete_thread(tid)
        out["put_us"] = statistics.median(put_lat)
        out["get_tuple_us"] = statistics.median(read_lat)
    finally:
        for k in r.scan_iter(match=f"{prefix}:*", count=1000):
            r.delete(k)
        r.close()
    return out


def compressed_writes_memory(r, items, key) -> tuple[int, int]:
    """(memory of the writes hash as stored, memory with each write's serde bytes zstd-3 when >= MIN_COMPRESS)."""
    from redis_saver.core.codec import pack, unpack

    c = _zc(3)
    new = []
    for f, v in items:
        try:
            parts = unpack(v)  # [task_id, channel, type, bytes, task_path, idx]
        except Exception:  # noqa: BLE001 (the lean mark)
            parts = []
        if len(parts) == 6 and len(parts[3]) >= MIN_COMPRESS:
            parts[2] = parts[2] + b"~z"
            parts[3] = c.compress(parts[3], mode=zstd.ZstdCompressor.FLUSH_FRAME)
            v = pack(parts)
        new.append((f, v))
    return hash_memory(r, key, items), hash_memory(r, key, new)


def compressed_cp_memory(r, items, key) -> tuple[int, int, int]:
    """(memory of the cp hash, with the serde parts (checkpoint, metadata) zstd-3 alone, and zstd-3 with the
    parent checkpoint's serde bytes as a raw prefix). The other parts are read by Lua and stay plain."""
    from redis_saver.core.codec import pack, unpack

    recs = {f: unpack(v) for f, v in items}
    by_id = {p_f[1:-1]: parts for p_f, parts in recs.items()}
    c = _zc(3)
    alone, pref = [], []
    for f, parts in recs.items():
        a = list(parts)
        a[2] = c.compress(parts[2], mode=zstd.ZstdCompressor.FLUSH_FRAME)
        alone.append((f, pack(a)))
        b = list(parts)
        par = by_id.get(parts[0])
        b[2] = zcompress(parts[2], 3, par[2]) if par else a[2]
        pref.append((f, pack(b)))
    return hash_memory(r, key, items), hash_memory(r, key, alone), hash_memory(r, key, pref)


def short_versions(call: Call) -> Call:
    """The same call with LangGraph's 50-char channel versions ("%032d.%016f") replaced by 19-char ones
    ("%012d." + 6 chars of a hash of the original: still increasing as strings, still unique per fork).
    A saver can choose its versions (get_next_version); this measures what they cost."""
    import copy
    import hashlib

    def sv(v):
        if not isinstance(v, str) or "." not in v:
            return v
        n, _, _rest = v.partition(".")
        return f"{int(n):012}." + hashlib.sha1(v.encode()).hexdigest()[:6]

    if call.op != "put":
        return call
    cfg, cp, md, nv = call.args
    cp = copy.copy(cp)
    cp["channel_versions"] = {k: sv(v) for k, v in cp.get("channel_versions", {}).items()}
    cp["versions_seen"] = {n: {k: sv(v) for k, v in d.items()} for n, d in cp.get("versions_seen", {}).items()}
    return Call("put", (cfg, cp, md, {k: sv(v) for k, v in nv.items()}), {})


# --------------------------------------------------------------------------- postgres


def measure_postgres(chat: Chat, url: str, half: int) -> dict:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    schema = f"memlab_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{schema}"')
        toast = c.execute("SHOW default_toast_compression").fetchone()[0]
    out: dict = {"schema": schema, "toast_compression": toast}
    try:
        with psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row,
                             options=f"-c search_path={schema}") as conn:
            saver = PostgresSaver(conn)
            saver.setup()
            tables = ["checkpoints", "checkpoint_blobs", "checkpoint_writes"]

            def size() -> dict[str, int]:
                return {t: conn.execute("select pg_total_relation_size(%s::regclass) as n", (f'"{schema}".{t}',)).fetchone()["n"] for t in tables}

            out["empty"] = size()
            for i, c in enumerate(chat.calls):
                cc = call_for_thread(c, "pg")
                (saver.put if cc.op == "put" else saver.put_writes)(*cc.args)
                if i + 1 == chat.marks[half]:
                    out["half"] = size()
            out["full"] = size()
    finally:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return out


# --------------------------------------------------------------------------- main


def run_schemes(versions: list[Version], half_put: int, reps: int) -> list[dict]:
    msgs = [v for v in versions if v.channel == CHANNEL]
    results = []
    for make in all_schemes():
        s = make()
        snap_half = None
        for v in msgs:
            if v.put_index >= half_put and snap_half is None:
                snap_half = (list(s.stored_items()), dict(s.types))
            s.put(v.version, v.type, v.data, v.base)
        if snap_half is None:
            snap_half = (list(s.stored_items()), dict(s.types))
        # correctness: every version decodes to its serde bytes (cold reader)
        for v in msgs:
            assert s.read(v.version) == v.data, (s.name, v.version)
        latest = msgs[-1].version
        old = msgs[len(msgs) // 10].version
        worst = max(msgs, key=lambda v: (s.chain(v.version), v.put_index)).version
        res: dict[str, Any] = {"scheme": s.name}
        s.read(latest)
        res["latest_decomp"] = s.decomp
        res["latest_fields"] = s.chain(latest)
        s.read(worst)
        res["worst_decomp"] = s.decomp
        res["worst_fields"] = s.chain(worst)
        s.read(old)
        res["old_decomp"] = s.decomp
        # (the loop's s and versions bound as defaults; each lambda is timed here, in this iteration)
        res["read_latest_us"] = median_us(lambda s=s, latest=latest: s.read(latest), reps)
        res["read_worst_us"] = median_us(lambda s=s, worst=worst: s.read(worst), reps)
        res["read_old_us"] = median_us(lambda s=s, old=old: s.read(old), reps)
        # put: encode the last version again with the writer's cache holding its predecessor
        res["put_us"] = _stream_put_cost(make, msgs, reps) if isinstance(s, Stream) else median_us(
            lambda s=s: _encode_last(s, msgs), reps)
        # the whole sequence again (3 runs, per-put median): mean and max over the second half, merges included
        runs = [s.put_times]
        for _ in range(2):
            s2 = make()
            for v in msgs:
                s2.put(v.version, v.type, v.data, v.base)
            runs.append(s2.put_times)
        per_put = [statistics.median(x) for x in zip(*runs, strict=True)]  # one time per put of msgs, each run
        tail = [t for t, v in zip(per_put, msgs, strict=True) if v.put_index >= half_put]
        res["seq_put_mean_us"], res["seq_put_max_us"] = statistics.mean(tail), max(tail)
        if isinstance(s, Stream):
            res["frames_max"] = max(len(x) for x in s.streams.values())
            if s.geo:
                res["put_us"] = res["seq_put_mean_us"]
        res["_scheme"] = s
        res["_half"] = snap_half
        results.append(res)
    return results


def _save(s: Scheme) -> dict:
    return {k: (v.copy() if isinstance(v, (dict, list)) else v) for k, v in s.__dict__.items()}


def _encode_last(s: Scheme, msgs: list[Version]) -> None:
    """The steady-state put of the last version, the writer's cache holding its predecessor."""
    prev, last = msgs[-2], msgs[-1]
    saved = _save(s)
    s.cache = (prev.version, prev.data)
    if isinstance(s, (FwdDict, Append)):
        s.n = 1  # never a keyframe: the steady-state delta put
    if isinstance(s, Reverse):
        s.meta[prev.version] = "z"  # the predecessor is the newest, stored whole: rewrite it as a delta
    s.encode(last.version + "#t", last.data)
    s.__dict__.update(saved)


def _stream_put_cost(make, msgs: list[Version], reps: int) -> dict | float:
    """Steady-state cost of a stream put at the end of the chat: append (frame) and, once every F puts, merge."""
    s = make()
    for v in msgs[:-1]:
        s.put(v.version, v.type, v.data, v.base)
    prev, last = msgs[-2], msgs[-1]

    F = s.F

    def one():
        saved = _save(s)
        sid = s.ops[prev.version][0]
        saved_stream = list(s.streams[sid]), list(s.stream_raw[sid])
        s.cache = (prev.version, prev.data)
        s.F = 10**9  # no merge in this measurement
        s.encode(last.version + "#t", last.data)
        s.__dict__.update(saved)
        s.streams[sid], s.stream_raw[sid] = saved_stream

    append_us = median_us(one, reps)
    sid = s.ops[prev.version][0]
    merge_us = median_us(lambda: s.c.compress(b"".join(s.stream_raw[sid]), mode=zstd.ZstdCompressor.FLUSH_FRAME), reps)
    return append_us + merge_us / F


def fmt_b(n: float) -> str:
    return f"{n / 1024:.1f} KB" if n >= 1024 else f"{n:.0f} B"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--redis", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    ap.add_argument("--postgres", default=os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"))
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--fork", type=int, default=0, help="then go back N turns and run N more turns on that branch")
    ap.add_argument("--trim", type=int, default=0, help="every N turns keep only the last 10 messages (a non-append edit)")
    a = ap.parse_args()
    T0 = time.time()
    turns, half = a.turns, a.turns // 2
    chat = build_chat(turns, trim=a.trim, fork=a.fork)
    turns = max(chat.marks)
    versions = blob_versions(chat)
    calls_half = chat.marks[half]
    half_put = sum(1 for c in chat.calls[:calls_half] if c.op == "put")
    raw_full, puts_full = raw_bytes(chat, len(chat.calls))
    raw_half, puts_half = raw_bytes(chat, calls_half)
    msgs = [v for v in versions if v.channel == CHANNEL]
    sample = chat.sample_text.encode()
    rep: dict[str, Any] = {"turns": turns, "half": half}
    print(f"# memory lab: {turns}-turn chat (built in {time.time() - T0:.1f}s)\n")
    print(f"corpus: pydoc_data/topics.py prose paragraphs, {chat.corpus_chars / 1e3:.0f} k chars, "
          f"drawn without repetition (wrapped {chat.corpus_wrapped}x); text used {len(sample) / 1e3:.0f} kB, "
          f"plain zstd-3 ratio {len(sample) / len(zstd.compress(sample, 3)):.2f}x, zstd-19 {len(sample) / len(zstd.compress(sample, 19)):.2f}x")
    print(f"messages: user median {statistics.median(chat.user_lens)} chars (min {min(chat.user_lens)}, max {max(chat.user_lens)}), "
          f"assistant median {statistics.median(chat.ai_lens)} chars (min {min(chat.ai_lens)}, max {max(chat.ai_lens)})")
    last = msgs[-1].data
    print(f"checkpoints: {puts_half} at {half} turns, {puts_full} at {turns}; messages versions {len(msgs)}; "
          f"latest messages value {fmt_b(len(last))} serde bytes, zstd-3 of it {len(last) / len(zstd.compress(last, 3)):.2f}x")
    print(f"serde bytes stored (checkpoint+metadata+new blobs+writes): {fmt_b(raw_half / puts_half)}/checkpoint at {half} turns, "
          f"{fmt_b(raw_full / puts_full)} at {turns}\n")
    # where consecutive versions differ
    diffs = []
    for x, y in itertools.pairwise(msgs):
        p, q, r_, s_ = splice(x.data, y.data)
        diffs.append((p, q - p, r_ - p, len(y.data) - s_, s_ - q == len(x.data) - r_ and p + s_ - q >= len(x.data) - 8))
    pure = sum(1 for d in diffs if d[4])
    print(f"consecutive messages versions: {pure}/{len(diffs)} are 'prefix p, header literal, all of the old remainder, appended suffix'; "
          f"first difference at byte {sorted(set(d[0] for d in diffs))[:6]} (the msgpack array header), "
          f"literal/skip sizes {sorted(set((d[1], d[2]) for d in diffs))}")
    common_us = median_us(lambda: splice(msgs[-2].data, msgs[-1].data), a.reps)
    loads_us = median_us(lambda: SERDE.loads_typed((msgs[-1].type, msgs[-1].data)), a.reps)
    obj = SERDE.loads_typed((msgs[-1].type, msgs[-1].data))
    dumps_us = median_us(lambda: SERDE.dumps_typed(obj), a.reps)
    print(f"for scale: JsonPlusSerializer loads_typed of the latest messages value {loads_us:.0f} us, dumps_typed {dumps_us:.0f} us")
    rep.update(loads_us=loads_us, dumps_us=dumps_us)
    print(f"finding the shared part of the last two versions ({fmt_b(len(msgs[-1].data))}): {common_us:.1f} us\n")
    rep.update(corpus_chars=chat.corpus_chars, zstd3_corpus=len(sample) / len(zstd.compress(sample, 3)),
               user_median=statistics.median(chat.user_lens), ai_median=statistics.median(chat.ai_lens),
               puts_half=puts_half, puts_full=puts_full, raw_half=raw_half, raw_full=raw_full,
               splice_us=common_us, pure_appends=pure, n_diffs=len(diffs))

    R = None
    if not a.no_redis:
        import redis

        R = redis.Redis.from_url(a.redis)
        base = measure_redis(chat, a.redis, half, turns)
        rep["redis_release"] = {k: v for k, v in base.items() if k != "wr_items"}
        print(f"current release in Redis ({a.redis}): put median {base['put_us']:.0f} us (last 10 turns), get_tuple latest {base['get_tuple_us']:.0f} us")
        for which, n_turn, puts in (("half", half, puts_half), ("full", turns, puts_full)):
            m = base[which]
            tot = sum(m.values())
            print(f"  {n_turn} turns: thread memory {fmt_b(tot)} = {fmt_b(tot / puts)}/checkpoint; "
                  + ", ".join(f"{k} {fmt_b(v)}" for k, v in sorted(m.items(), key=lambda kv: -kv[1])))
        wkey = f"memlab{os.getpid()}scratch:wr"
        wr = {w: compressed_writes_memory(R, base["wr_items"][w], wkey) for w in ("half", "full")}
        print(f"  writes hash with zstd-3 per write value: {fmt_b(wr['half'][0])} -> {fmt_b(wr['half'][1])} at {half}, "
              f"{fmt_b(wr['full'][0])} -> {fmt_b(wr['full'][1])} at {turns}\n")
        rep["writes_zstd"] = wr

    pg = None
    if not a.no_postgres:
        try:
            pg = measure_postgres(chat, a.postgres, half)
            ph = sum(pg["half"].values()) - sum(pg["empty"].values())
            pf = sum(pg["full"].values()) - sum(pg["empty"].values())
            pg["bpc_half"], pg["bpc_full"] = ph / puts_half, pf / puts_full
            print(f"PostgresSaver (TOAST {pg['toast_compression']}): {fmt_b(ph)} at {half} turns ({fmt_b(ph / puts_half)}/checkpoint), "
                  f"{fmt_b(pf)} at {turns} ({fmt_b(pf / puts_full)}/checkpoint, {pf / raw_full:.3f}x raw), growth {pf / ph:.2f}x; "
                  + ", ".join(f"{t} {fmt_b(pg['full'][t] - pg['empty'][t])}" for t in pg["full"]) + "\n")
            rep["postgres"] = pg
        except Exception as e:  # noqa: BLE001
            print(f"PostgresSaver: not measured ({type(e).__name__}: {e})\n")

    results = run_schemes(versions, half_put, a.reps)
    others_full = [v for v in versions if v.channel != CHANNEL]
    others_half = [v for v in versions if v.channel != CHANNEL and v.put_index < half_put]
    rows = []
    for res in results:
        s: Scheme = res.pop("_scheme")
        half_items, half_types = res.pop("_half")
        blob_full = sum(len(f) + len(v) for f, _m, v in s.stored_items())
        blob_half = sum(len(f) + len(v) for f, _m, v in half_items)
        res["msg_bytes_half"], res["msg_bytes_full"] = blob_half, blob_full
        if R is not None:
            key = f"memlab{os.getpid()}scratch:blob"
            hs = Scheme()
            hs.fields = {f: v for f, _m, v in half_items}
            hs.meta = {f: m for f, m, _v in half_items}
            hs.types = half_types
            mh = hash_memory(R, key, scheme_blob_items(hs, others_half))
            mf = hash_memory(R, key, scheme_blob_items(s, others_full))
            bh, bf = rep["redis_release"]["half"], rep["redis_release"]["full"]
            th = sum(bh.values()) - bh.get("blob", 0) + mh
            tf = sum(bf.values()) - bf.get("blob", 0) + mf
            wr = rep["writes_zstd"]
            th_w = th - wr["half"][0] + wr["half"][1]
            tf_w = tf - wr["full"][0] + wr["full"][1]
            res.update(blob_mem_half=mh, blob_mem_full=mf, thread_half=th, thread_full=tf, thread_half_wz=th_w, thread_full_wz=tf_w,
                       growth=tf / th, growth_wz=tf_w / th_w, bpc=tf / puts_full, bpc_wz=tf_w / puts_full,
                       x_raw=tf / raw_full, x_raw_wz=tf_w / raw_full)
            if pg:
                res["x_pg"] = res["bpc"] / pg["bpc_full"]
                res["x_pg_wz"] = res["bpc_wz"] / pg["bpc_full"]
        rows.append(res)
        if R is not None and isinstance(s, Stream) and s.F == 16 and not s.geo:
            stream16 = (s, hs, mh, mf)
    rep["schemes"] = rows

    print("## schemes (messages channel encoded; other channels as today)\n")
    print("B/checkpoint = thread memory at the end / checkpoints; x raw = over the serde bytes; x PG = over PostgresSaver's B/checkpoint. "
          "put encode = client CPU per put at the end (cache holds the previous version; the stream includes its merges, amortized). "
          "reads are cold (no cache): decompressions and, for 'worst', the stored fields a script fetches.\n")
    print(f"| scheme | messages fields {half} -> {turns} turns | thread memory {half} -> {turns} (growth) | B/checkpoint (x raw, x PG) | same, writes zstd | put encode us (mean, max over the last half) | read latest us (decomp) | worst latest us (decomp, fields) | read old us (decomp) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r_ in rows:
        mem = (f"{fmt_b(r_['thread_half'])} -> {fmt_b(r_['thread_full'])} ({r_['growth']:.2f}x)" if "thread_full" in r_ else "-")
        bpc = (f"{fmt_b(r_['bpc'])} ({r_['x_raw']:.3f}x, {r_.get('x_pg', float('nan')):.2f}x)" if "bpc" in r_ else "-")
        bpcw = (f"{fmt_b(r_['bpc_wz'])} ({r_['x_raw_wz']:.3f}x, {r_.get('x_pg_wz', float('nan')):.2f}x), {r_['growth_wz']:.2f}x" if "bpc_wz" in r_ else "-")
        print(f"| {r_['scheme']} | {fmt_b(r_['msg_bytes_half'])} -> {fmt_b(r_['msg_bytes_full'])} ({r_['msg_bytes_full'] / max(1, r_['msg_bytes_half']):.2f}x) | {mem} | {bpc} | {bpcw} | "
              f"{r_['put_us']:.0f} ({r_['seq_put_mean_us']:.0f}, {r_['seq_put_max_us']:.0f}) | {r_['read_latest_us']:.0f} ({r_['latest_decomp']}) | {r_['read_worst_us']:.0f} ({r_['worst_decomp']}, {r_['worst_fields']}) | "
              f"{r_['read_old_us']:.0f} ({r_['old_decomp']}) |")
    if "redis_release" in rep:
        print(f"\nput budget: the current release's put is {rep['redis_release']['put_us']:.0f} us at {turns} turns; 1.25x leaves "
              f"{0.25 * rep['redis_release']['put_us']:.0f} us of client CPU for encoding")

    if R is not None:
        beyond(rep, R, a, chat, half, turns, puts_half, puts_full, raw_half, raw_full, base, stream16, versions, half_put, pg)
    enc_report(msgs, a.reps)
    if R is not None:
        R.close()
    print(f"\n(total {time.time() - T0:.0f} s)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rep, fh, indent=1, default=str)


def beyond(rep, R, a, chat, half, turns, puts_half, puts_full, raw_half, raw_full, base, stream16, versions, half_put, pg) -> None:
    """Once the blob hash is small, the rest of the thread dominates: what the other records cost."""
    import hashlib

    s, hs, mh, mf = stream16
    key = f"memlab{os.getpid()}scratch:x"
    cpz = {w: compressed_cp_memory(R, base[f"cp_items_{w}"], key) for w in ("half", "full")}
    sv = measure_redis(chat, a.redis, half, turns, reps=1, transform=short_versions)
    cpz_sv = {w: compressed_cp_memory(R, sv[f"cp_items_{w}"], key) for w in ("half", "full")}
    wr_sv = {w: compressed_writes_memory(R, sv["wr_items"][w], key) for w in ("half", "full")}

    def sv_name(v):
        n, _, _r = v.partition(".")
        return f"{int(n):012}." + hashlib.sha1(v.encode()).hexdigest()[:6]

    others_full = [v for v in versions if v.channel != CHANNEL]
    others_half = [v for v in versions if v.channel != CHANNEL and v.put_index < half_put]
    mh_sv = hash_memory(R, key, scheme_blob_items(hs, others_half, sv_name))
    mf_sv = hash_memory(R, key, scheme_blob_items(s, others_full, sv_name))
    # estimate: values under 64 serde bytes kept inside the checkpoint record instead of a blob field each
    TINY = 64
    inl = []
    for i, oth in enumerate((others_half, others_full)):
        big = [v for v in oth if len(v.data) >= TINY]
        m = hash_memory(R, key, scheme_blob_items(hs if i == 0 else s, big, sv_name))
        inline_bytes = sum(len(v.type) + len(v.data) + 6 for v in oth if len(v.data) < TINY)
        inl.append(m + inline_bytes)
    wr = rep["writes_zstd"]
    rows = []
    for label, w, m_blob, wrz, cpz_ in (
        ("stream (merge at 16): blob hash only", base, (mh, mf), None, None),
        ("+ writes: zstd-3 per value", base, (mh, mf), wr, None),
        ("+ checkpoint serde bytes: zstd-3, parent's as prefix", base, (mh, mf), wr, cpz),
        ("+ 19-char channel versions (get_next_version)", sv, (mh_sv, mf_sv), wr_sv, cpz_sv),
        ("+ values < 64 B inline in the checkpoint record (estimate)", sv, tuple(inl), wr_sv, cpz_sv),
    ):
        tot = []
        for i, which in enumerate(("half", "full")):
            m = w[which]
            t = sum(m.values()) - m.get("blob", 0) + m_blob[i]
            if wrz:
                t += wrz[which][1] - wrz[which][0]
            if cpz_:
                t += cpz_[which][2] - cpz_[which][0]
            tot.append(t)
        row = {"what": label, "half": tot[0], "full": tot[1], "growth": tot[1] / tot[0], "bpc": tot[1] / puts_full,
               "x_raw": tot[1] / raw_full}
        if pg:
            row["x_pg"] = row["bpc"] / pg["bpc_full"]
        rows.append(row)
    rep["beyond"] = rows
    rep["cp_zstd"] = {"plain_half_full": cpz, "short_versions": cpz_sv}
    print("\n## the rest of the thread (stream scheme for the blobs)\n")
    print(f"checkpoint hash: {fmt_b(cpz['full'][0])}; serde parts zstd-3 alone {fmt_b(cpz['full'][1])}, with the parent's as prefix "
          f"{fmt_b(cpz['full'][2])} (at {turns} turns)\n")
    print(f"| thread at {half} -> {turns} turns | memory (growth) | B/checkpoint | x raw | x PostgresSaver |")
    print("|---|---|---|---|---|")
    for r_ in rows:
        print(f"| {r_['what']} | {fmt_b(r_['half'])} -> {fmt_b(r_['full'])} ({r_['growth']:.2f}x) | {fmt_b(r_['bpc'])} | {r_['x_raw']:.3f}x | "
              f"{r_.get('x_pg', float('nan')):.3f}x |")
    parts = dict(sv["full"])
    parts["cp"] += cpz_sv["full"][2] - cpz_sv["full"][0]
    parts["wr"] += wr_sv["full"][1] - wr_sv["full"][0]
    parts["blob"] = inl[1]
    print(f"\nparts at {turns} turns, last row: " + ", ".join(f"{k} {fmt_b(v)}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])))
    rep["beyond_parts"] = parts


def enc_report(msgs: list[Version], reps: int) -> None:
    """EncryptedSerializer (AES-EAX via pycryptodome): what the saver can still compress."""
    try:
        from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
    except ImportError:
        return
    try:
        es = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef0123456789abcdef")
    except ImportError as e:
        print(f"\nEncryptedSerializer: not measured ({e})")
        return
    a, b = msgs[-2].data, msgs[-1].data
    ca = es.cipher.encrypt(a)[1]
    cb = es.cipher.encrypt(b)[1]
    z = len(zstd.compress(cb, 3))
    p = common_prefix(ca, cb)
    # compress-then-encrypt (only if the saver unwraps EncryptedSerializer: es.serde then es.cipher)
    st = Stream(16)
    for v in msgs:
        st.put(v.version, v.type, v.data, v.base)
    enc_stream = sum(len(es.cipher.encrypt(v)[1]) for _f, _m, v in st.stored_items())
    plain_stream = sum(len(v) for _f, _m, v in st.stored_items())
    raw_total = sum(len(v.data) for v in msgs)
    enc_us = median_us(lambda: es.cipher.encrypt(b), reps)
    print(f"\nEncryptedSerializer (AES-EAX): latest messages value {fmt_b(len(cb))} ciphertext; zstd-3 of it {len(cb) / z:.3f}x; "
          f"common prefix with the previous version's ciphertext: {p} bytes (fresh nonce per value) -> neither compression nor deltas work "
          f"on what dumps_typed returns. Compress-then-encrypt (saver unwraps es.serde / es.cipher, encrypts each stored field): "
          f"stream scheme {fmt_b(plain_stream)} plain -> {fmt_b(enc_stream)} encrypted (+32 B nonce+tag per field) vs {fmt_b(raw_total)} raw "
          f"({raw_total / enc_stream:.0f}x); AES-EAX of the latest value costs {enc_us:.0f} us")


if __name__ == "__main__":
    main()
