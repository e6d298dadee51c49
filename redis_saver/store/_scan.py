"""The paged scan (``store_read`` "s"): every shard under the prefix, page by page, merged in
search order. It answers any search, and every other path gives way to it:

- ``Listing``: a search without a query (a filter or none): the matches in order, stopping at
  offset + limit;
- ``ScoredScan``: a search with a query, scored in the client as InMemoryStore scores it; when
  the search has a vector cache key, it keeps the pages' vectors to fill the cache.
"""

from __future__ import annotations

import heapq
from typing import Any

from . import _budgets as B
from . import _semantics as sem
from . import _vcache
from ._keys import dec_ns
from ._pages import Found, Merge, Query
from ._records import _dec_key

# a page's entries for the merge: ((ns_seq, e(ns), item_seq), (e(ns), e(key), record, score))
_Entries = list[tuple[tuple[int, bytes, int], tuple[bytes, bytes, bytes, float | None]]]


class _Scan:
    """What both scans share: the merge over the shards, the page requests, decoding."""

    def __init__(self, q: Query, budget: int) -> None:
        self.q = q
        self.merge = Merge(q.shards)
        self.budget = budget  # items per page
        self.names: dict[bytes, tuple[str, ...]] = {}  # e(ns) -> ns, of the candidates taken
        self.unversioned: int | None = None  # a shard without a version token (a write call makes one)

    def requests(self) -> list[tuple[int, list[bytes]]]:
        out = []
        vec = b"1" if self.q.qv is not None else b"0"
        for s in self.merge.wanted():
            c = self.merge.cursors[s] or (b"", b"")
            out.append((s, [b"s", self.q.eprefix, c[0], c[1], str(self.budget).encode(), vec]))
        return out

    def _decode(self, ens: bytes, ekey: bytes, rec: bytes) -> Found:
        ns = self.names.get(ens)
        if ns is None:  # decoded once per namespace of the search
            ns = self.names[ens] = dec_ns(ens)
        return Found(ns, _dec_key(ekey), rec, [])


class Listing(_Scan):
    """A search without a query: the items under the prefix in order, filtered; the pages hold
    the items wanted (B.PAGE at most), or B.PAGE with a filter."""

    def __init__(self, q: Query) -> None:
        flt = q.op.filter
        super().__init__(q, B.PAGE if flt else max(1, min(q.want or B.PAGE, B.PAGE)))
        self.found: list[Found] = []  # the matches in order
        if q.want == 0:
            self.merge.finished = True

    def feed(self, shard: int, reply: Any) -> bool:
        flat, c_ns, c_item, _ = reply
        entries: _Entries = []
        for i in range(0, len(flat), 6):
            ens, ekey, ns_seq, item_seq, rec, _ = flat[i : i + 6]
            entries.append(((int(ns_seq), ens, int(item_seq)), (ens, ekey, rec, None)))
        self.merge.feed(shard, entries, (c_ns, c_item) if c_ns else False)
        self.merge.run(self._take)
        return False

    def _take(self, entry: tuple[bytes, bytes, bytes, float | None]) -> bool:
        ens, ekey, rec, _ = entry
        found = self._decode(ens, ekey, rec)
        flt = self.q.op.filter
        if flt and not sem.matches(found.value(self.q.cfg), flt):
            return True
        self.found.append(found)
        return self.q.want is None or len(self.found) < self.q.want

    def result(self) -> list[tuple[float | None, Found]]:
        op = self.q.op
        return [(None, f) for f in self.found[op.offset : op.offset + op.limit]]


class ScoredScan(_Scan):
    """A search with a query, scored page by page. It keeps the best offset + limit items so
    far, as a heap of (score, -flat position) (its root the worst), and the first ``limit``
    items without vectors: a query keeps that much whatever the number of candidates. One
    shard with numpy takes each page's items best first (``_feed_direct``), else the pages go
    through the merge. With a vector cache key it keeps the pages' vectors, and caches them at
    the end when every page saw one version token and they fit."""

    def __init__(self, q: Query) -> None:
        direct = sem._np is not None and bool(q.keep) and len(q.shards) == 1
        super().__init__(q, B.VECTOR_PAGE if direct or not q.op.filter else B.PAGE)
        self.direct = direct
        self.top: list[tuple[float, int]] = []  # (score, -flat position)
        self.top_items: dict[int, Found] = {}  # -flat position -> item
        self.flat = 0
        self.scoreless: list[Found] = []
        self.fill: list[tuple[list[Any], list[int], Any]] | None = [] if q.ckey is not None else None
        self.tokens: list[bytes] = []  # the version token each page saw, in order

    def feed(self, shard: int, reply: Any) -> bool:
        flat, c_ns, c_item, token = reply
        if self.fill is not None:
            self.tokens.append(token)
            if not token:
                self.unversioned = shard
        cursor = (c_ns, c_item) if c_ns else False
        if self.direct and self._feed_direct(flat):
            self.merge.feed(shard, [], cursor)  # the page taken: the merge keeps the cursor
            self.merge.run(self._take)
            return False
        self.merge.feed(shard, self._scored_entries(flat), cursor)
        self.merge.run(self._take)
        return False

    def _scored_entries(self, flat: list[Any]) -> _Entries:
        """The page scored at once: each item's best score (None: no vectors)."""
        assert self.q.qv is not None
        best = sem.best_scores(self.q.qv, [flat[i + 5][1::2] for i in range(0, len(flat), 6)], self.q.metric)
        # the kept ones only get better: an item scoring at most the worst of them now, when
        # they are full, comes after it and can never enter (dropped before the merge)
        floor = None
        keep = self.q.keep
        if not self.q.op.filter and keep is not None and len(self.top) >= keep:
            floor = self.top[0][0] if self.top else float("inf")
        entries: _Entries = []
        for i in range(0, len(flat), 6):
            score = best[i // 6]
            if floor is not None and score is not None and score <= floor:
                continue
            ens, ekey, ns_seq, item_seq, rec, _ = flat[i : i + 6]
            entries.append(((int(ns_seq), ens, int(item_seq)), (ens, ekey, rec, score)))
        return entries

    def _found(self, flat: list[Any], i: int) -> Found:
        return self._decode(flat[i], flat[i + 1], flat[i + 4])

    def _keep(self, rank: tuple[float, int], found: Found) -> None:
        """Into the best ``keep`` (a heap of (score, -position), its root the worst; all of
        them when ``keep`` is None); the caller checked that it enters."""
        if self.q.keep is None or len(self.top) < self.q.keep:
            heapq.heappush(self.top, rank)
        else:
            del self.top_items[heapq.heapreplace(self.top, rank)[1]]
        self.top_items[rank[1]] = found

    def _feed_direct(self, flat: list[Any]) -> bool:
        """A scored page of one shard (its items after every earlier page's), taken without the
        merge: ``sem.page_candidates`` scores exactly only the items that may enter the best
        ``keep`` (above the worst kept, when they are full; without a filter, also among the
        page's best ``keep``). With a filter, the candidates are taken best first and the filter
        is evaluated only until one cannot enter: an item that cannot enter the result is not
        decoded, nor filtered (a comparison that would raise on it does not). False: not taken
        (no numpy, a vector of other dims), for the merge path."""
        qv, keep = self.q.qv, self.q.keep
        assert qv is not None and keep
        pages = [v[1::2] for v in flat[5::6]]
        mc = sem.page_matrix(len(qv), pages)
        if mc is None:
            self.fill = None  # not cached either
            return False
        m32, counts = mc
        if self.fill is not None:  # the page's columns, for the cache (``_cache_fill``)
            self.fill.append((flat, counts, m32))
        floor = self.top[0][0] if len(self.top) >= keep else None
        flt = self.q.op.filter
        idx, scores = sem.page_candidates(qv, m32, counts, None if flt else keep, floor, self.q.metric)
        base = self.flat
        self.flat += len(pages)
        limit, cfg = self.q.op.limit, self.q.cfg
        for j, p in enumerate(pages):  # the items without vectors: the first `limit` that match
            if not p and len(self.scoreless) < limit:
                f = self._found(flat, 6 * j)
                if not flt or sem.matches(f.value(cfg), flt):
                    self.scoreless.append(f)
        # InMemoryStore sorts every vector by score (stably) and keeps each item's first: its
        # best score; ties go by position, and one item's vectors are contiguous in its order
        if not flt:
            for j, score in zip(idx, scores, strict=True):
                rank = (score, -(base + j))
                if len(self.top) < keep or rank > self.top[0]:
                    self._keep(rank, self._found(flat, 6 * j))
            return True
        for t in sorted(range(len(idx)), key=lambda t: (-scores[t], idx[t])):
            rank = (scores[t], -(base + idx[t]))
            if len(self.top) >= keep and rank < self.top[0]:
                break  # nor can any after it: the worst kept only rises
            f = self._found(flat, 6 * idx[t])
            if sem.matches(f.value(cfg), flt):
                self._keep(rank, f)
        return True

    def _below(self, best: float) -> bool:
        """Whether an item scored ``best`` (next in position) cannot enter the kept ones."""
        keep = self.q.keep
        if keep is None:
            return False
        return keep == 0 or (len(self.top) >= keep and (best, -self.flat) <= self.top[0])

    def _take(self, entry: tuple[bytes, bytes, bytes, float | None]) -> bool:
        ens, ekey, rec, best = entry
        flt, keep = self.q.op.filter, self.q.keep
        if best is not None and not flt and self._below(best):
            self.flat += 1  # scored below the kept ones: not decoded
            return True
        found = self._decode(ens, ekey, rec)
        if flt and not sem.matches(found.value(self.q.cfg), flt):
            return True
        if best is None:
            if keep is None or len(self.scoreless) < self.q.op.limit:
                self.scoreless.append(found)
            return True
        # InMemoryStore sorts every vector by score (stably) and keeps each item's first: its
        # best score; ties go by position, and one item's vectors are contiguous in its order
        rank = (best, -self.flat)
        self.flat += 1
        if keep is None or len(self.top) < keep or (keep and rank > self.top[0]):
            self._keep(rank, found)
        return True

    def _cache_fill(self) -> None:
        """Keep the scan's vectors (``_vcache.keep_pages``: the pages' tokens of one incarnation,
        the vectors within the bound)."""
        fill, vcache, ckey = self.fill, self.q.cfg.state.vcache, self.q.ckey
        self.fill = None
        if fill is None or vcache is None or ckey is None or not self.merge.finished:
            return
        _vcache.keep_pages(vcache, ckey, len(self.q.qv or ()), fill, self.tokens)

    def result(self) -> list[tuple[float | None, Found]]:
        self._cache_fill()
        op = self.q.op
        ranked = sorted(self.top, key=lambda e: (-e[0], -e[1]))
        kept: list[tuple[float | None, Found]] = []
        for ix, (score, pos) in enumerate(ranked):  # InMemoryStore's loop over unique items
            if ix >= op.offset + op.limit:
                break
            if ix < op.offset:
                continue
            kept.append((score, self.top_items[pos]))
        if self.scoreless and len(kept) < op.limit:
            kept.extend((None, f) for f in self.scoreless[: op.limit - len(kept)])
        return kept
