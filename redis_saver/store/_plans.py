"""A store batch as a pure plan: ops checked and encoded, script calls per shard, replies read.

``prepare()`` checks every op and encodes every value before anything is sent (bad input
writes nothing); the shell then embeds the texts it lists (sync or async: the only I/O that is
not Redis) and runs ``batch_plan()``, a generator in the saver's plan form (``_plans.py``): it
yields script calls, one per shard (a list is sent as one pipeline, one round trip), and
returns the batch's results.

A batch runs as InMemoryStore's does: its reads see the store as it was before the batch, its
puts apply after them, the last put of an (namespace, key) winning. Reads and writes go in one
round trip when the reads need no second page (gets); searches and namespace listings run
first, a page per shard per round trip (one in the common case), the writes after them.
Searches merge the shards' pages in search order; filters run in the client, on the values
as they were stored (exactly InMemoryStore's comparisons); so does semantic scoring.
"""

from __future__ import annotations

import functools
import heapq
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.store.base import (
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    tokenize_path,
)

from ..core import values as _values
from ..core.plans import Call, Plan
from ..errors import MalformedReplyError
from ..keys import enc
from . import _semantics as sem
from . import _vcache, _vset
from ._keys import STORE_FORMAT, StoreKeys, dec_ns, enc_ns

PAGE = 256  # items of one search page that filters (values go to the client; lua MAX_BUDGET caps it)
CALL_OPS = 256  # ops of one shard per script call (a larger batch: more calls, in the same round trip)
VECTOR_PAGE = 1024  # items of one page of a semantic search without a filter (their vectors)
LIST_PAGE = 1024  # namespaces one list_namespaces page examines (lua MAX_BUDGET caps it)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass
class Embedding:
    """What the shell embeds before the plan runs: texts of puts, and search queries."""

    texts: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # text -> [(put ordinal, path)]
    queries: list[str] = field(default_factory=list)


@dataclass
class Prepared:
    ops: list[Op]
    puts: dict[tuple[tuple[str, ...], str], tuple[int, PutOp, list[bytes]]]  # -> ordinal, op, write args
    embed: Embedding


@dataclass
class Config:
    """The store's settings the plans read."""

    keys: StoreKeys
    serde: SerializerProtocol
    compress: bool
    refresh_in_read: bool  # "G" reads (the +rw variant) rather than "g" and a refresh write when needed
    index: dict[str, Any] | None  # IndexConfig with "__tokenized_fields", or None
    clock: list[int] = field(default_factory=lambda: [0])  # the last base sequence sent
    vcache: _vcache.VectorCache | None = None  # the vectors of the prefixes searched (_vcache.py)
    vsets: bool | None = None  # the server keeps vector sets (_vset.py); None: not asked yet
    vset_stats: dict[str, int] = field(default_factory=lambda: {"hits": 0, "scans": 0})  # searches from sets, fallbacks


# ---- input ----------------------------------------------------------------------------
def _namespace(ns: Any, what: str) -> tuple[str, ...]:
    if not isinstance(ns, tuple):
        raise TypeError(f"{what} must be a tuple of str, got {type(ns).__name__}")
    for label in ns:
        if not isinstance(label, str):
            raise TypeError(f"{what} labels must be str, got {type(label).__name__} in {ns!r}")
    return ns


def _key(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, got {type(key).__name__}")
    return key


def _int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{what} must be an int, got {type(v).__name__}")
    return v


def ttl_ms(ttl: Any) -> int:
    """Minutes (a positive number) as milliseconds; None: no expiry (0)."""
    if ttl is None:
        return 0
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise TypeError(f"ttl must be a number of minutes or None, got {type(ttl).__name__}")
    if not ttl > 0 or ttl == float("inf"):
        raise ValueError(f"ttl must be a positive, finite number of minutes, got {ttl!r}")
    return max(1, round(ttl * 60_000))


def _encode_value(cfg: Config, value: Mapping[str, Any]) -> tuple[bytes, bytes]:
    type_, data = cfg.serde.dumps_typed(dict(value))
    t, d = _values.encode_plain(type_, data, cfg.compress)
    if b" " in t or b"\n" in t:
        raise ValueError(f"serializer type {type_!r} may not contain a space or a newline")
    return t, d


def prepare(cfg: Config, ops: Iterable[Op]) -> Prepared:
    """Check and encode a batch: raises (TypeError, ValueError, the serializer's error) before
    anything is sent."""
    ops = list(ops)
    puts: dict[tuple[tuple[str, ...], str], tuple[int, PutOp, list[bytes]]] = {}
    embed = Embedding()
    paths = cfg.index["__tokenized_fields"] if cfg.index else None
    for op in ops:
        if isinstance(op, GetOp):
            _namespace(op.namespace, "namespace")
            _key(op.key)
        elif isinstance(op, SearchOp):
            _namespace(op.namespace_prefix, "namespace_prefix")
            sem.check_filter(op.filter)
            _int(op.limit, "limit")
            _int(op.offset, "offset")
            if op.query is not None and not isinstance(op.query, str):
                raise TypeError(f"query must be a str, got {type(op.query).__name__}")
            if op.query and cfg.index and op.query not in embed.queries:
                embed.queries.append(op.query)
        elif isinstance(op, ListNamespacesOp):
            for c in op.match_conditions or ():
                if c.match_type not in ("prefix", "suffix"):
                    raise ValueError(f"Unsupported match type: {c.match_type}")
                _namespace(tuple(c.path), "match condition path")
            if op.max_depth is not None:
                _int(op.max_depth, "max_depth")
            _int(op.limit, "limit")
            _int(op.offset, "offset")
        elif isinstance(op, PutOp):
            ns = _namespace(op.namespace, "namespace")
            key = _key(op.key)
            if op.value is None:
                args = [b"d", enc_ns(ns), enc(key)]
            else:
                if not isinstance(op.value, Mapping):
                    raise TypeError(f"value must be a dict (or None to delete), got {type(op.value).__name__}")
                if op.index is not None and op.index is not False:
                    if isinstance(op.index, str) or not all(isinstance(p, str) for p in op.index):
                        raise TypeError("index must be False, None or a list of field paths")
                t, d = _encode_value(cfg, op.value)
                args = [b"p", enc_ns(ns), enc(key), b"", str(ttl_ms(op.ttl)).encode(), t, d]
            old = puts.get((ns, key))
            ordinal = old[0] if old is not None else len(puts)
            puts[(ns, key)] = (ordinal, op, args)
        else:
            raise ValueError(f"Unknown operation type: {type(op)}")
    if paths is not None:
        for ordinal, op, _ in puts.values():
            if op.value is None or op.index is False:
                continue
            p = paths if op.index is None else [(ix, tokenize_path(ix)) for ix in op.index]
            for path, text in sem.texts_to_embed(dict(op.value), p):
                embed.texts.setdefault(text, []).append((ordinal, path))
    return Prepared(ops, puts, embed)


def pack_vector(v: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(v)}f", *v)


# ---- replies --------------------------------------------------------------------------
def _when(us: bytes) -> datetime:
    return _EPOCH + timedelta(microseconds=int(us))


def _decode(
    cfg: Config, rec: bytes, value: dict[str, Any] | None = None
) -> tuple[dict[str, Any], datetime, datetime, int]:
    """An item record: value (``value`` when already decoded), created_at, updated_at, ttl ms."""
    head, sep, data = rec.partition(b"\n")
    parts = head.split(b" ", 3)
    if not sep or len(parts) != 4:
        raise MalformedReplyError(f"malformed store item record {rec[:40]!r}")
    created, updated, ttl, type_ = parts
    if value is None:
        if type_.endswith(_values.ZSTD_MARK):
            type_, data = type_[: -len(_values.ZSTD_MARK)], _values.decompress(data)
        value = cfg.serde.loads_typed((type_.decode(), data))
    return value, _when(created), _when(updated), int(ttl)


def _decode_value(cfg: Config, rec: bytes) -> dict[str, Any]:
    """An item record's value alone (what a filter reads; the times only for the results)."""
    head, sep, data = rec.partition(b"\n")
    parts = head.split(b" ", 3)
    if not sep or len(parts) != 4:
        raise MalformedReplyError(f"malformed store item record {rec[:40]!r}")
    type_ = parts[3]
    if type_.endswith(_values.ZSTD_MARK):
        type_, data = type_[: -len(_values.ZSTD_MARK)], _values.decompress(data)
    value: dict[str, Any] = cfg.serde.loads_typed((type_.decode(), data))
    return value


def _dec_key(e: bytes) -> str:
    """The key of ``enc(key)`` (one label: ``dec_ns`` when it holds an escaped NUL)."""
    return e[:-1].decode() if b"\xff" not in e else dec_ns(e)[0]


def _item(cfg: Config, ns: tuple[str, ...], key: str, rec: bytes) -> tuple[Item, int]:
    value, created, updated, ttl = _decode(cfg, rec)
    return Item(value=value, key=key, namespace=ns, created_at=created, updated_at=updated), ttl


# ---- reads that take pages: searches and namespace listings, merged over shards --------
class _Merge:
    """Sorted pages from several shards, merged: a shard is asked for its next page when its
    buffer runs dry and it may hold more; ``take`` is offered entries in order until it says
    stop."""

    def __init__(self, shards: list[int]) -> None:
        self.buffers: dict[int, list[tuple[Any, Any]]] = {s: [] for s in shards}
        self.cursors: dict[int, Any] = {s: None for s in shards}  # None: the first page; False: done
        self.finished = False

    def wanted(self) -> list[int]:
        if self.finished:
            return []
        return [s for s, c in self.cursors.items() if c is not False and not self.buffers[s]]

    def feed(self, shard: int, entries: list[tuple[Any, Any]], cursor: Any) -> None:
        entries.reverse()  # popped from the end
        self.buffers[shard] = entries
        self.cursors[shard] = cursor

    def run(self, take: Callable[[Any], bool]) -> None:
        """Offer entries in merged order while every shard that may hold more has some."""
        if self.finished or self.wanted():
            return
        buffers = self.buffers
        if len(buffers) == 1:  # one shard: its page in order (the common case)
            s, buf = next(iter(buffers.items()))
            while buf:
                if not take(buf.pop()[1]):
                    self.finished = True
                    return
            if self.cursors[s] is False:
                self.finished = True
            return  # else that shard may hold more: its next page first
        while True:
            heads = [(b[-1][0], s) for s, b in buffers.items() if b]
            s = min(heads)[1] if heads else -1
            buf = buffers.get(s, [])
            if not buf:
                self.finished = True
                return
            if not take(buf.pop()[1]):
                self.finished = True
                return
            if not buf and self.cursors[s] is not False:
                return  # that shard may hold more: its next page first


class _Found:
    """A search candidate; its value is decoded when a filter or the result needs it."""

    __slots__ = ("ns", "key", "rec", "vectors", "_item", "_value")

    def __init__(self, ns: tuple[str, ...], key: str, rec: bytes, vectors: list[list[float]]) -> None:
        self.ns, self.key, self.rec, self.vectors = ns, key, rec, vectors
        self._item: Item | None = None
        self._value: dict[str, Any] | None = None

    def value(self, cfg: Config) -> dict[str, Any]:
        """The value alone (a filter's candidate: most are not returned, their times unread)."""
        if self._item is not None:
            return self._item.value
        if self._value is None:
            self._value = _decode_value(cfg, self.rec)
        return self._value

    def item(self, cfg: Config) -> Item:
        if self._item is None:
            value, created, updated, _ = _decode(cfg, self.rec, self._value)
            self._item = Item(value=value, key=self.key, namespace=self.ns, created_at=created, updated_at=updated)
        return self._item

    def ttl(self) -> int:
        return int(self.rec.split(b" ", 3)[2])


class _Search:
    def __init__(self, cfg: Config, op: SearchOp, query_vector: list[float] | None) -> None:
        self.cfg, self.op, self.qv = cfg, op, query_vector
        self.scored = query_vector is not None
        self.eprefix = enc_ns(op.namespace_prefix)
        # a search stops at offset + limit matches (InMemoryStore filters every item under the
        # prefix first: a comparison that raises on a later item raises there, not here)
        bounded = not self.scored and min(op.offset, op.limit) >= 0
        self.want = op.offset + op.limit if bounded else None
        # pages: the items wanted, or PAGE (values to filter), or VECTOR_PAGE (vectors to score)
        if self.scored and not op.filter:
            self.budget = VECTOR_PAGE
        else:
            self.budget = max(1, min(self.want or PAGE, PAGE) if not op.filter else PAGE)
        self.merge = _Merge(cfg.keys.shards_under(op.namespace_prefix))
        self.found: list[_Found] = []  # unscored: the matches in order
        # scored: the best offset + limit items so far, as a heap of (score, -flat position) (its
        # root the worst), and the first `limit` items without vectors: a query
        # keeps that much whatever the number of candidates
        self.top: list[tuple[float, int]] = []  # (score, -flat position)
        self.top_items: dict[int, _Found] = {}  # -flat position -> item
        self.keep = op.offset + op.limit if min(op.offset, op.limit) >= 0 else None
        self.flat = 0
        self.scoreless: list[_Found] = []
        self.names: dict[bytes, tuple[str, ...]] = {}  # e(ns) -> ns, of the candidates taken
        if self.want == 0:
            self.merge.finished = True
        # the vector cache: a search scored without a filter on one shard
        self.ckey: tuple[int, bytes] | None = None
        self.entry: _vcache.Entry | None = None
        self.fill: list[tuple[bytes, bytes, int, int, list[bytes]]] | None = None  # a scan's items, to cache
        self.tokens: set[bytes] = set()  # the version tokens the scan's pages saw
        self.unversioned: int | None = None  # a shard without a token (a write call makes one)
        shards = self.merge.buffers
        if cfg.vcache is not None and self.scored and not op.filter and self.keep and len(shards) == 1:
            self.ckey = (next(iter(shards)), self.eprefix)
            self.entry = cfg.vcache.get(self.ckey)
            self.known: dict[tuple[bytes, bytes], bytes | None] = {}  # records read at the entry's token
            self.patched = 0
            self.checked = False  # a read found the entry current (or brought it up to date)
            if self.entry is not None:
                self._rank(self.entry)
            else:
                self.fill = []
        self.vs: _vset.VsetSearch | None = None  # a search from vector sets (_vset.py)
        if cfg.vsets and self.entry is None and self.scored and not op.filter and self.keep and len(shards) == 1:
            assert query_vector is not None
            if _vset.usable_query(query_vector):
                self.vs = _vset.VsetSearch(cfg.keys, next(iter(shards)), self.eprefix, query_vector, self.keep)
                self._vs_check()

    # ---- from vector sets ---------------------------------------------------------------
    def _vs_check(self) -> None:
        """A vector set search that cannot answer exactly gives way to a scan (which fills the
        vector cache, when there is one)."""
        vs = self.vs
        if vs is None:
            return
        if vs.failed:
            self.cfg.vset_stats["scans"] += 1
            self.vs = None
            self.merge = _Merge([vs.shard])
            self.fill = [] if self.ckey is not None else None
        else:
            self.merge.finished = True
            self.fill = None

    def vsim_pipe(self) -> Any:
        return self.vs.pipe() if self.vs is not None else None

    def vsim_feed(self, replies: Any) -> None:
        assert self.vs is not None
        self.vs.feed_pipe(replies)
        self._vs_check()

    # ---- from the cache -----------------------------------------------------------------
    def _rank(self, entry: _vcache.Entry, ranking: _vcache.Ranking | None = None) -> None:
        assert self.qv is not None and self.keep is not None
        if ranking is not None:  # made under the lock with the patch: self.token is the one sent
            self.token = entry.token
            self.ranked, self.scores, self.sl_order, self.whole = ranking
        else:
            with entry.lock:  # the ranking and the token it holds for
                self.token = entry.token
                self.ranked, self.scores, self.sl_order, self.whole = entry.ranking(
                    self.qv, self.keep + 2 * _vcache.MARGIN
                )
        self.next_sc = self.next_sl = 0  # the next candidates to ask
        self.kept_sc: list[tuple[float, _Found]] = []
        self.kept_sl: list[_Found] = []
        # (item, its (e(ns), e(key)), score or None) of the read in flight
        self.asked: list[tuple[int, tuple[bytes, bytes], float | None]] = []
        self.merge.finished = True  # no scan unless the cache is not current

    def _cached_request(self) -> list[bytes] | None:
        """The next cached read; candidates whose records this search already read at the
        entry's token (a change set brought them) are taken without one."""
        while True:
            args = self._cached_candidates()
            if args is None or not self.asked or any(k not in self.known for _, k, _ in self.asked):
                return args
            self._cached_take([self.known[k] for _, k, _ in self.asked])

    def _cached_candidates(self) -> list[bytes] | None:
        entry, keep, limit = self.entry, self.keep, self.op.limit
        assert entry is not None and keep is not None
        asked: list[tuple[int, float | None]] = []
        want_sc = keep - len(self.kept_sc)
        if want_sc > 0 and self.next_sc + want_sc > len(self.ranked) and not self.whole:
            assert self.qv is not None  # more vanished than the partial ranking holds: all of it
            # (the ones asked so far lead it: those present, kept; those gone, out of it now)
            with entry.lock:
                current = entry.token == self.token
                if current:
                    self.ranked, self.scores, _, self.whole = entry.ranking(self.qv, None)
            if not current:  # patched by another search meanwhile: start again from what it holds
                self.known = {}
                self._rank(entry)
                return self._cached_candidates()
            self.next_sc = len(self.kept_sc)
        if want_sc > 0 and self.next_sc < len(self.ranked):
            end = min(len(self.ranked), self.next_sc + want_sc + _vcache.MARGIN)
            asked += [(self.ranked[j], self.scores[j]) for j in range(self.next_sc, end)]
            self.next_sc = end
        # items without vectors fill what the scored ones leave of the page (if all asked are present)
        expect = min(keep, len(self.kept_sc) + len(asked))
        want_sl = limit - max(0, expect - self.op.offset) - len(self.kept_sl)
        n_scored = len(asked)
        if want_sl > 0 and self.next_sl < len(self.sl_order):
            end = min(len(self.sl_order), self.next_sl + want_sl + _vcache.MARGIN)
            asked += [(self.sl_order[j], None) for j in range(self.next_sl, end)]
            self.next_sl = end
        if not asked and self.checked:
            self.asked = []
            return None
        self.asked = [(i, entry.keys[i], score) for i, score in asked]
        args = [b"c", self.token, self.eprefix, str(_vcache.CHANGE_BUDGET).encode()]
        args += [str(len(asked)).encode(), str(n_scored).encode()]
        for _, k, _ in self.asked:
            args += k
        return args

    def _cached_take(self, recs: list[Any]) -> None:
        """The records of the candidates asked (None: gone), in order."""
        entry = self.entry
        assert entry is not None
        for (i, (ens, ekey), score), rec in zip(self.asked, recs, strict=True):
            if rec is None:  # gone without a version bump (expired, evicted): never again
                if entry.index.get((ens, ekey)) == i:
                    entry.alive[i] = False
                continue
            found = _Found(dec_ns(ens), dec_ns(ekey)[0], rec, [])
            if score is None:
                if len(self.kept_sl) < self.op.limit:
                    self.kept_sl.append(found)
            elif len(self.kept_sc) < (self.keep or 0):
                self.kept_sc.append((score, found))
        self.asked = []

    def _cached_feed(self, reply: Any) -> None:
        entry, ckey, vcache = self.entry, self.ckey, self.cfg.vcache
        assert entry is not None and ckey is not None and vcache is not None
        n = len(self.asked)
        ok = isinstance(reply, list) and bool(reply)
        if ok and reply[0] == 1 and len(reply) == n + 1:
            self.checked = True
            self._cached_take(reply[1:])
            return
        if ok and reply[0] == 2 and len(reply) == n + 3 and self.patched < _vcache.PATCHES:
            # the shard was written since the entry's token; the log brought what changed
            token, flat, recs = reply[1], reply[2], reply[3:]
            self.patched += 1
            before, new = entry.nbytes, None
            with entry.lock:
                first = len(entry.keys)
                applied = entry.token == self.token and entry.patch(token, flat)
                if applied:
                    assert self.qv is not None
                    # the ranking before the patch, its items that changed out, the new ones in
                    ranking = entry.reranked(self.qv, self.ranked, self.scores, self.whole, first)
                    if entry.wasted():
                        new = entry.compacted()
            if applied or entry.token != self.token:
                if applied:
                    self.checked = True
                    vcache.resized(ckey, entry, before, new)
                    if new is not None:
                        self.entry = entry = new
                    # records now valid at the entry's token: the changed items' and the asked ones'
                    self.known = {k: r for (_, k, _), r in zip(self.asked, recs, strict=True)}
                    self.known.update(((flat[i], flat[i + 1]), flat[i + 4]) for i in range(0, len(flat), 6))
                    if new is None:
                        self._rank(entry, ranking)
                    else:  # compacted: its items are numbered anew
                        self._rank(entry)
                else:  # another search patched it meanwhile: rank what it holds now
                    self.known = {}
                    self._rank(entry)
                return
        # not current: scan as without a cache, and cache what the scan reads
        vcache.drop(ckey, entry)
        vcache.misses += 1
        self.entry, self.fill, self.asked = None, [], []
        self.merge = _Merge([ckey[0]])

    def requests(self) -> list[tuple[int, list[bytes]]]:
        if self.vs is not None:
            vargs = self.vs.request()
            return [(self.vs.shard, vargs)] if vargs is not None else []
        if self.entry is not None and self.ckey is not None:
            args = self._cached_request()
            return [(self.ckey[0], args)] if args is not None else []
        out = []
        for s in self.merge.wanted():
            c = self.merge.cursors[s] or (b"", b"")
            vec = b"1" if self.scored else b"0"
            out.append((s, [b"s", self.eprefix, c[0], c[1], str(self.budget).encode(), vec]))
        return out

    def feed(self, shard: int, reply: Any) -> None:
        if self.vs is not None:
            self.vs.feed(reply)
            self._vs_check()
            return
        if self.entry is not None:
            self._cached_feed(reply)
            return
        flat, c_ns, c_item, token = reply
        if self.fill is not None:
            self.tokens.add(token)
            self.fill += [
                (flat[i], flat[i + 1], int(flat[i + 2]), int(flat[i + 3]), flat[i + 5][1::2])
                for i in range(0, len(flat), 6)
            ]
            if not token:
                self.unversioned = shard
        entries: list[tuple[tuple[int, bytes, int], tuple[bytes, bytes, bytes, float | None]]] = []
        if self.qv is None:
            for i in range(0, len(flat), 6):
                ens, ekey, ns_seq, item_seq, rec, _ = flat[i : i + 6]
                entries.append(((int(ns_seq), ens, int(item_seq)), (ens, ekey, rec, None)))
        else:  # the page scored at once: each item's best score (None: no vectors)
            best = sem.best_scores(self.qv, [flat[i + 5][1::2] for i in range(0, len(flat), 6)])
            # the kept ones only get better: an item scoring at most the worst of them now, when
            # they are full, comes after it and can never enter (dropped before the merge)
            floor = None
            if not self.op.filter and self.keep is not None and len(self.top) >= self.keep:
                floor = self.top[0][0] if self.top else float("inf")
            for i in range(0, len(flat), 6):
                score = best[i // 6]
                if floor is not None and score is not None and score <= floor:
                    continue
                ens, ekey, ns_seq, item_seq, rec, _ = flat[i : i + 6]
                entries.append(((int(ns_seq), ens, int(item_seq)), (ens, ekey, rec, score)))
        self.merge.feed(shard, entries, (c_ns, c_item) if c_ns else False)
        self.merge.run(self._take)

    def _below(self, best: float) -> bool:
        """Whether an item scored ``best`` (next in position) cannot enter the kept ones."""
        if self.keep is None:
            return False
        return self.keep == 0 or (len(self.top) >= self.keep and (best, -self.flat) <= self.top[0])

    def _take(self, entry: tuple[bytes, bytes, bytes, float | None]) -> bool:
        ens, ekey, rec, best = entry
        if self.qv is not None and best is not None and not self.op.filter and self._below(best):
            self.flat += 1  # scored below the kept ones: not decoded
            return True
        ns = self.names.get(ens)
        if ns is None:  # decoded once per namespace of the search
            ns = self.names[ens] = dec_ns(ens)
        found = _Found(ns, _dec_key(ekey), rec, [])
        if self.op.filter and not sem.matches(found.value(self.cfg), self.op.filter):
            return True
        if self.qv is None:
            self.found.append(found)
            return self.want is None or len(self.found) < self.want
        if best is None:
            if self.keep is None or len(self.scoreless) < self.op.limit:
                self.scoreless.append(found)
            return True
        # InMemoryStore sorts every vector by score (stably) and keeps each item's first: its
        # best score; ties go by position, and one item's vectors are contiguous in its order
        rank = (best, -self.flat)
        self.flat += 1
        if self.keep is None or len(self.top) < self.keep:
            heapq.heappush(self.top, rank)
        elif self.keep and rank > self.top[0]:
            del self.top_items[heapq.heapreplace(self.top, rank)[1]]
        else:
            return True
        self.top_items[rank[1]] = found
        return True

    def _cache_fill(self) -> None:
        """Keep the scan's vectors when every page saw one version token, and the vectors fit."""
        fill, vcache, ckey = self.fill, self.cfg.vcache, self.ckey
        self.fill = None
        if fill is None or vcache is None or ckey is None or len(self.tokens) != 1 or not self.merge.finished:
            return
        token = next(iter(self.tokens))
        dims = len(self.qv or ())
        if not token or not dims or any(len(b) != 4 * dims for *_, vs in fill for b in vs):
            return
        if len(fill) * dims * 4 > vcache.max_bytes:
            vcache.drop(ckey)
            return
        keys, seqs, vectors = [(f[0], f[1]) for f in fill], [(f[2], f[3]) for f in fill], [f[4] for f in fill]
        vcache.put(ckey, _vcache.Entry(token, keys, vectors, dims, seqs))

    def result(self) -> tuple[list[SearchItem], list[tuple[tuple[str, ...], str, int]]]:
        """The results, as InMemoryStore ranks them, and the (namespace, key, ttl) returned."""
        op = self.op
        kept: list[tuple[float | None, _Found]]
        self._cache_fill()
        if self.vs is not None:  # from vector sets
            self.cfg.vset_stats["hits"] += 1
            kept = [
                (sc, _Found(dec_ns(ens), dec_ns(ekey)[0], rec, []))
                for sc, _, _, ens, ekey, rec in self.vs.ranked[op.offset : op.offset + op.limit]
            ]
        elif self.entry is not None:  # from the cache
            if self.cfg.vcache is not None:
                self.cfg.vcache.hits += 1
            kept = [(sc, f) for sc, f in self.kept_sc[op.offset : op.offset + op.limit]]
            if len(kept) < op.limit:
                kept.extend((None, f) for f in self.kept_sl[: op.limit - len(kept)])
        elif self.qv is not None:
            if not self.top and not self.scoreless:
                return [], []
            ranked = sorted(self.top, key=lambda e: (-e[0], -e[1]))
            kept = []
            for ix, (score, pos) in enumerate(ranked):  # InMemoryStore's loop over unique items
                f = self.top_items[pos]
                if ix >= op.offset + op.limit:
                    break
                if ix < op.offset:
                    continue
                kept.append((score, f))
            scoreless = self.scoreless
            if scoreless and len(kept) < op.limit:
                kept.extend((None, f) for f in scoreless[: op.limit - len(kept)])
        else:
            if not self.found:
                return [], []
            kept = [(None, f) for f in self.found[op.offset : op.offset + op.limit]]
        out = []
        for sc, f in kept:
            it = f.item(self.cfg)
            out.append(
                SearchItem(
                    namespace=it.namespace,
                    key=it.key,
                    value=it.value,
                    created_at=it.created_at,
                    updated_at=it.updated_at,
                    score=float(sc) if sc is not None else None,
                )
            )
        return out, [(f.ns, f.key, f.ttl()) for _, f in kept]


class _List:
    def __init__(self, cfg: Config, op: ListNamespacesOp) -> None:
        self.op = op
        self.conditions = list(op.match_conditions or ())
        lit: list[str] = []
        for c in self.conditions:  # the labels a prefix condition fixes: one lex range
            if c.match_type == "prefix":
                fixed = []
                for label in c.path:
                    if label == "*":
                        break
                    fixed.append(label)
                if len(fixed) > len(lit):
                    lit = fixed
        e = enc_ns(lit)
        self.lo, self.hi = (b"[" + e, b"(" + e + b"\xff") if lit else (b"-", b"+")
        # a prefix condition without wildcards that lit starts with holds for every namespace
        # of that lex range (e(ns) starts with e(lit), labels self-delimiting): not checked again
        self.conditions = [
            c for c in self.conditions
            if not (c.match_type == "prefix" and "*" not in c.path and tuple(lit[: len(c.path)]) == tuple(c.path))
        ]
        self.want = op.offset + op.limit if min(op.offset, op.limit) >= 0 else None
        self.merge = _Merge(cfg.keys.shards_under(lit))
        self.found: list[tuple[str, ...]] = []
        if self.want == 0:
            self.merge.finished = True

    def requests(self) -> list[tuple[int, list[bytes]]]:
        page = str(LIST_PAGE).encode()
        return [(s, [b"l", self.merge.cursors[s] or self.lo, self.hi, page]) for s in self.merge.wanted()]

    def feed(self, shard: int, reply: Any) -> None:
        names, last = reply
        self.merge.feed(shard, [(e, e) for e in names], b"(" + last if last else False)
        self.merge.run(self._take)

    def _take(self, ens: bytes) -> bool:
        ns = dec_ns(ens)
        if self.conditions and not all(sem.does_match(c, ns) for c in self.conditions):
            return True
        if self.op.max_depth is not None:
            ns = ns[: self.op.max_depth]
        if not self.found or self.found[-1] != ns:  # in order: a repeat follows its first
            self.found.append(ns)
        return self.want is None or len(self.found) < self.want

    def result(self) -> list[tuple[str, ...]]:
        return self.found[self.op.offset : self.op.offset + self.op.limit]


# ---- the plan -------------------------------------------------------------------------
def _base_sequence(cfg: Config, n: int) -> bytes:
    """Microseconds of the client's clock, above the last base this store sent plus its batch:
    sequences follow the order of the calls (and of the puts in one batch) across shards."""
    now = max(time.time_ns() // 1000, cfg.clock[0] + 1)
    cfg.clock[0] = now + n
    return str(now).encode()


def write_format(cfg: Config) -> str:
    """ARGV[1] of store_write / store_delete: the store format, "v" when the server keeps vector sets."""
    return STORE_FORMAT + "v" if cfg.vsets else STORE_FORMAT


def batch_plan(
    cfg: Config, prep: Prepared, doc_vectors: list[list[float]], query_vectors: dict[str, list[float]]
) -> Plan[list[Result]]:
    """Run a prepared batch: ``doc_vectors`` are the embeddings of ``prep.embed.texts`` (one per
    distinct text, in its order), ``query_vectors`` those of its queries."""
    keys = cfg.keys
    ops = prep.ops
    results: list[Result] = [None] * len(ops)

    # the vectors of each put: (ordinal) -> [path, float32 bytes, ...]
    vectors: dict[int, list[bytes]] = {}
    if prep.embed.texts:
        if len(prep.embed.texts) != len(doc_vectors):
            raise ValueError(
                f"Number of embeddings ({len(doc_vectors)}) does not match number of texts ({len(prep.embed.texts)})"
            )
        for places, embedding in zip(prep.embed.texts.values(), doc_vectors, strict=True):
            packed = pack_vector(embedding)
            for ordinal, path in places:
                vectors.setdefault(ordinal, []).extend([path.encode(), packed])

    writes: dict[int, list[list[bytes]]] = {}  # shard -> each write's arguments
    for (ns, _), (ordinal, _, args) in prep.puts.items():
        if args[0] == b"p":
            vec = vectors.get(ordinal, [])
            args = [*args[:3], str(ordinal).encode(), *args[4:], str(len(vec) // 2).encode(), *vec]
        writes.setdefault(keys.shard(ns), []).append(args)

    # reads: gets once, searches and listings until each is done
    gets: list[tuple[int, int, GetOp]] = []  # op index, shard, op
    tasks: dict[int, _Search | _List] = {}
    for i, op in enumerate(ops):
        if isinstance(op, GetOp):
            gets.append((i, keys.shard(op.namespace), op))
        elif isinstance(op, SearchOp):
            qv = query_vectors.get(op.query) if op.query and cfg.index else None
            tasks[i] = _Search(cfg, op, qv)
        elif isinstance(op, ListNamespacesOp):
            tasks[i] = _List(cfg, op)
    refreshes: dict[int, list[list[bytes]]] = {}  # shard -> "r" writes (reads that restart an expiry)

    def add_refresh(ns: tuple[str, ...], key: str) -> None:
        refreshes.setdefault(keys.shard(ns), []).append([b"r", enc_ns(ns), enc(key)])

    def write_calls(per_shard: dict[int, list[list[bytes]]]) -> list[Call]:
        base = _base_sequence(cfg, len(prep.puts))
        fmt = write_format(cfg)
        calls = []
        for s, ws in per_shard.items():
            for j in range(0, max(1, len(ws)), CALL_OPS):  # no writes: a call that makes the version token
                chunk = ws[j : j + CALL_OPS]
                wargs: list[bytes | str | int]
                if chunk and all(w[0] == b"d" for w in chunk):  # deletes only: a script that runs out of memory
                    wargs = [fmt, str(len(chunk)).encode(), *[a for w in chunk for a in w[1:]]]
                    calls.append(Call("store_delete", [keys.index(s)], wargs))
                    continue
                wargs = [fmt, base, str(len(chunk)).encode()]
                wargs += [a for w in chunk for a in w]
                calls.append(Call("store_write", [keys.index(s)], wargs))
        return calls

    first = True
    while True:
        # shard -> each read's (arguments, reply handler)
        reads: dict[int, list[tuple[list[bytes], Callable[[Any], None]]]] = {}
        for task in tasks.values():  # searches from vector sets: their VSIM calls (_vset.py)
            if isinstance(task, _Search) and (pipe := task.vsim_pipe()) is not None:
                task.vsim_feed((yield pipe))
        if first:
            for i, s, op in gets:
                code = b"G" if op.refresh_ttl and cfg.refresh_in_read else b"g"

                def on_get(rec: Any, i: int = i, op: GetOp = op) -> None:
                    if rec is None:
                        return
                    item, ttl = _item(cfg, op.namespace, op.key, rec)
                    results[i] = item
                    if ttl and op.refresh_ttl and not cfg.refresh_in_read:
                        add_refresh(op.namespace, op.key)

                reads.setdefault(s, []).append(([code, enc_ns(op.namespace), enc(op.key)], on_get))
        for task in tasks.values():
            for s, args in task.requests():
                reads.setdefault(s, []).append((args, functools.partial(task.feed, s)))
        calls: list[Call] = []
        handlers: list[list[Callable[[Any], None]]] = []
        for s, rs in reads.items():
            for j in range(0, len(rs), CALL_OPS):
                chunk = rs[j : j + CALL_OPS]
                rw = any(r[0] == b"G" for r, _ in chunk)
                rargs: list[bytes | str | int] = [STORE_FORMAT, b"1" if rw else b"0", str(len(chunk)).encode()]
                rargs += [a for r, _ in chunk for a in r]
                calls.append(Call("store_read+rw" if rw else "store_read", [keys.index(s)], rargs))
                handlers.append([h for _, h in chunk])
        # writes ride with the first reads when no read needs a second page (they see the
        # store before the batch either way: per shard, the reads run first)
        with_writes = first and not tasks and bool(writes)
        if with_writes:
            calls += write_calls(writes)
            writes = {}
        first = False
        if not calls:
            break
        replies = yield (calls[0] if len(calls) == 1 else calls)
        if len(calls) == 1:
            replies = [replies]
        for hs, reply in zip(handlers, replies, strict=False):
            if not isinstance(reply, list) or len(reply) != len(hs):
                raise MalformedReplyError(f"store_read replied {reply!r:.80}")
            for h, r in zip(hs, reply, strict=True):
                h(r)
        if with_writes and not refreshes:
            break
    for i, task in tasks.items():
        if isinstance(task, _Search):
            found, returned = task.result()
            results[i] = found
            if task.unversioned is not None:  # a shard written by an earlier release: its token
                writes.setdefault(task.unversioned, [])
            if task.op.refresh_ttl:
                for ns, key, ttl in returned:
                    if ttl:
                        add_refresh(ns, key)
        else:
            results[i] = task.result()
    # the writes (after reads that took pages), and the expiries reads restart
    for s, r in refreshes.items():
        writes.setdefault(s, []).extend(r)
    if writes:
        calls = write_calls(writes)
        yield (calls[0] if len(calls) == 1 else calls)
    return results
