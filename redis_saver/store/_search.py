"""Reads that take pages: a search and a namespace listing, each a state machine the batch plan
feeds with one shard's reply at a time and asks for its next requests.

A search takes one of these paths, each behind the same interface (``_Path``), and a path
that cannot answer gives way to the next one (docs/store.md, "How a search runs"):

- ``Listing`` (``_scan.py``): no query; the paged scan, filtered in the client.
- ``CachedSearch`` (``_cached.py``): a query without a filter on one shard whose prefix the
  client's vector cache holds; gives way to the vector sets, else to the scan, when the
  entry is not current.
- ``VsetPath`` (below): a cosine query without a filter on one shard, on a server with vector
  sets: exact (Redis 8 VSIM, confirmed by exact scores) or approximate (HNSW, with
  ``ann_index_config``); gives way to the scan when the sets cannot answer exactly. In exact
  mode, a repeated search of the prefix asks for a background fill of the cache
  (``_plans.fill_plan``, started by the store's shell after the call) and is answered from the
  sets meanwhile; once the entry is in, ``CachedSearch`` answers.
- ``ScoredScan`` (``_scan.py``): any other query, and every fallback; scored in the client,
  it fills the vector cache when the search has a cache key.
"""

from __future__ import annotations

from typing import Any, Protocol

from langgraph.store.base import ListNamespacesOp, SearchItem, SearchOp

from . import _budgets as B
from . import _semantics as sem
from . import _vset
from ._cached import CachedSearch
from ._keys import dec_ns, enc_ns
from ._pages import Found, Merge, Query, found
from ._records import Config
from ._scan import Listing, ScoredScan


class _Path(Protocol):
    """One way to answer a search: its next requests (shard, ``store_read`` arguments), a
    reply fed back (True: this path cannot answer, the search gives way to its fallback),
    and its kept candidates in result order."""

    unversioned: int | None  # a shard the scan found without a version token

    def requests(self) -> list[tuple[int, list[bytes]]]: ...

    def feed(self, shard: int, reply: Any) -> bool: ...

    def result(self) -> list[tuple[float | None, Found]]: ...


class VsetPath:
    """A search from vector sets (``_vset.VsetSearch``): "V" lists the prefix's sets, a VSIM
    pipeline ranks (``pipe``), "C" fetches the records."""

    def __init__(self, q: Query, refill: bool) -> None:
        cfg, qv = q.cfg, q.qv
        assert qv is not None and q.keep
        self.q = q
        self.vs = _vset.VsetSearch(cfg.keys, q.shards[0], q.eprefix, qv, q.keep, cfg.ann)
        self.unversioned: int | None = None  # (the scan's: this path reads no pages)
        # a repeated search in exact mode: a background fill of the cache (``feed``); the cache
        # remembers this search either way
        self.refill = False
        if q.ckey is not None and cfg.state.vcache is not None and not cfg.ann:
            self.refill = cfg.state.vcache.repeated(q.ckey) and refill

    @staticmethod
    def applies(q: Query) -> bool:
        """A server with sets, cosine (VSIM ranks by it), scored, no filter, one shard, a query
        VSIM scores within the bound."""
        cfg, qv = q.cfg, q.qv
        if qv is None or not (cfg.state.vsets and q.metric == "cosine" and not q.op.filter and q.keep):
            return False
        return len(q.shards) == 1 and _vset.usable_query(qv)

    def failed(self) -> bool:
        """The sets cannot answer exactly: a scan instead (counted)."""
        if self.vs.failed:
            self.q.cfg.state.vset_stats["scans"] += 1
        return self.vs.failed

    def requests(self) -> list[tuple[int, list[bytes]]]:
        vargs = self.vs.request()
        return [(self.vs.shard, vargs)] if vargs is not None else []

    def pipe(self) -> Any:
        return self.vs.pipe()

    def feed_pipe(self, replies: Any) -> bool:
        self.vs.feed_pipe(replies)
        return self.failed()

    def feed(self, shard: int, reply: Any) -> bool:
        vs = self.vs
        vs.feed(reply)
        if self.refill and vs.phase == "vsim" and not vs.failed:
            # a repeated search, its sets listed: the cache filled in the background (this
            # search and the next ones answered from the sets meanwhile), if their vectors fit
            self.refill = False
            vcache = self.q.cfg.state.vcache
            assert vcache is not None and self.q.ckey is not None
            vectors = sum(_vset.set_size(count) for _, count in vs.spaces.values())
            if vectors * vs.dims * 4 <= vcache.max_bytes:
                vcache.want_fill(self.q.ckey, vs.dims)
        return self.failed()

    def result(self) -> list[tuple[float | None, Found]]:
        self.q.cfg.state.vset_stats["hits"] += 1
        op = self.q.op
        ranked = self.vs.ranked[op.offset : op.offset + op.limit]
        return [(sc, found(ens, ekey, rec)) for sc, _, _, ens, ekey, rec in ranked]


class _Search:
    """A search: its first path (``_first``), and the fallbacks when a path gives way."""

    def __init__(self, cfg: Config, op: SearchOp, query_vector: list[float] | None) -> None:
        self.op = op
        self.q = Query.of(cfg, op, query_vector)
        self.path: _Path = self._first()

    def _first(self) -> _Path:
        q = self.q
        if q.qv is None:
            return Listing(q)
        if q.ckey is not None:
            vcache = q.cfg.state.vcache
            assert vcache is not None
            entry = vcache.get(q.ckey)
            if entry is not None and q.cfg.ann and q.cfg.state.vsets and len(entry.index) > _vset.ANN_CACHE_ITEMS:
                entry = None  # approximate mode: a large prefix goes to the graph (_vset.py)
            if entry is not None:
                return CachedSearch(q, entry)
        return self._vsets_or_scan(refill=True)

    def _vsets_or_scan(self, refill: bool) -> _Path:
        if VsetPath.applies(self.q):
            path = VsetPath(self.q, refill)
            if not path.failed():
                return path
        return ScoredScan(self.q)

    def _give_way(self) -> None:
        """The cache not current: the sets, else a scan that fills the cache; the sets unable to
        answer: a scan."""
        if isinstance(self.path, CachedSearch):
            self.path = self._vsets_or_scan(refill=False)
        else:
            self.path = ScoredScan(self.q)

    @property
    def unversioned(self) -> int | None:
        return self.path.unversioned

    def vsim_pipe(self) -> Any:
        return self.path.pipe() if isinstance(self.path, VsetPath) else None

    def vsim_feed(self, replies: Any) -> None:
        assert isinstance(self.path, VsetPath)
        if self.path.feed_pipe(replies):
            self._give_way()

    def requests(self) -> list[tuple[int, list[bytes]]]:
        return self.path.requests()

    def feed(self, shard: int, reply: Any) -> None:
        if self.path.feed(shard, reply):
            self._give_way()

    def result(self) -> tuple[list[SearchItem], list[tuple[tuple[str, ...], str, int]]]:
        """The results, as InMemoryStore ranks them, and the (namespace, key, ttl) returned."""
        kept = self.path.result()
        return self.q.rows(kept), [(f.ns, f.key, f.ttl()) for _, f in kept]


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
        self.merge = Merge(cfg.keys.shards_under(lit))
        self.found: list[tuple[str, ...]] = []
        if self.want == 0:
            self.merge.finished = True

    def requests(self) -> list[tuple[int, list[bytes]]]:
        page = str(B.LIST_PAGE).encode()
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
