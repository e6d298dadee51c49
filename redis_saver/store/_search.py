"""Reads that take pages: a search (filtered, or semantic by the vector cache, the vector sets or
the exact scan) and a namespace listing, each a state machine the batch plan feeds with one
shard's reply at a time and asks for its next requests; the shards' pages merged in search order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from langgraph.store.base import (
    Item,
    ListNamespacesOp,
    SearchItem,
    SearchOp,
)

from ..core.replies import StoreCache
from . import _budgets as B
from . import _semantics as sem
from . import _vcache, _vset
from ._keys import dec_ns, enc_ns
from ._records import Config, _dec_key, _decode, _decode_value


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
            self._value = _decode_value(cfg, self.rec, self.ns, self.key)
        return self._value

    def item(self, cfg: Config) -> Item:
        if self._item is None:
            value, created, updated, _ = _decode(cfg, self.rec, self.ns, self.key, self._value)
            self._item = Item(value=value, key=self.key, namespace=self.ns, created_at=created, updated_at=updated)
        return self._item

    def ttl(self) -> int:
        return int(self.rec.split(b" ", 3)[2])


class _Search:
    def __init__(self, cfg: Config, op: SearchOp, query_vector: list[float] | None) -> None:
        self.cfg, self.op, self.qv = cfg, op, query_vector
        self.scored = query_vector is not None
        self.metric: str = cfg.index.get("distance_type", "cosine") if cfg.index else "cosine"
        self.eprefix = enc_ns(op.namespace_prefix)
        # a search stops at offset + limit matches (InMemoryStore filters every item under the
        # prefix first: a comparison that raises on a later item raises there, not here)
        bounded = not self.scored and min(op.offset, op.limit) >= 0
        self.want = op.offset + op.limit if bounded else None
        # pages: the items wanted, or B.PAGE (values to filter), or B.VECTOR_PAGE (vectors to score)
        self.merge = _Merge(cfg.keys.shards_under(op.namespace_prefix))
        self.keep = op.offset + op.limit if min(op.offset, op.limit) >= 0 else None
        # a scored search of one shard takes each page's items best first (``_feed_direct``)
        self.direct = self.scored and sem._np is not None and bool(self.keep) and len(self.merge.buffers) == 1
        if self.scored and (self.direct or not op.filter):
            self.budget = B.VECTOR_PAGE
        else:
            self.budget = max(1, min(self.want or B.PAGE, B.PAGE) if not op.filter else B.PAGE)
        self.found: list[_Found] = []  # unscored: the matches in order
        # scored: the best offset + limit items so far, as a heap of (score, -flat position) (its
        # root the worst), and the first `limit` items without vectors: a query
        # keeps that much whatever the number of candidates
        self.top: list[tuple[float, int]] = []  # (score, -flat position)
        self.top_items: dict[int, _Found] = {}  # -flat position -> item
        self.flat = 0
        self.scoreless: list[_Found] = []
        self.names: dict[bytes, tuple[str, ...]] = {}  # e(ns) -> ns, of the candidates taken
        if self.want == 0:
            self.merge.finished = True
        # the vector cache: a search scored without a filter on one shard
        self.ckey: tuple[int, bytes] | None = None
        self.entry: _vcache.Entry | None = None
        self.fill: list[tuple[list[Any], list[int], Any]] | None = None  # a scan's pages, to cache
        self.tokens: set[bytes] = set()  # the version tokens the scan's pages saw
        self.unversioned: int | None = None  # a shard without a token (a write call makes one)
        shards = self.merge.buffers
        if cfg.vcache is not None and self.scored and not op.filter and self.keep and len(shards) == 1:
            self.ckey = (next(iter(shards)), self.eprefix)
            self.entry = cfg.vcache.get(self.ckey)
            if self.entry is not None and cfg.ann and cfg.vsets and len(self.entry.index) > _vset.ANN_CACHE_ITEMS:
                self.entry = None  # approximate mode: a large prefix goes to the graph (_vset.py)
            self.known: dict[tuple[bytes, bytes], bytes | None] = {}  # records read at the entry's token
            self.patched = 0
            self.checked = False  # a read found the entry current (or brought it up to date)
            if self.entry is not None:
                self._rank(self.entry)
            else:
                self.fill = []
        self.vs: _vset.VsetSearch | None = None  # a search from vector sets (_vset.py)
        self.refill = False  # a repeated search from sets: scan instead, to fill the cache
        if self.entry is None:
            self._vset_search(refill=True)

    # ---- from vector sets ---------------------------------------------------------------
    def _vset_search(self, refill: bool) -> None:
        """Search from vector sets, when they can answer (a server with sets, cosine: VSIM ranks
        by it; scored, no filter, one shard, a query VSIM scores within the bound); in exact
        mode, a repeated search of the prefix fills the cache instead (``refill``: this one may)."""
        cfg, shards, qv = self.cfg, self.merge.buffers, self.qv
        if qv is None or not (cfg.vsets and self.metric == "cosine" and not self.op.filter and self.keep):
            return
        if len(shards) == 1 and _vset.usable_query(qv):
            self.vs = _vset.VsetSearch(cfg.keys, next(iter(shards)), self.eprefix, qv, self.keep, cfg.ann)
            if self.ckey is not None and cfg.vcache is not None and not cfg.ann:
                self.refill = cfg.vcache.repeated(self.ckey) and refill  # ``_vs_to_cache``
            self._vs_check()

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

    def _vs_to_cache(self) -> None:
        """A repeated search, its sets listed: a scan that fills the cache, if their vectors fit."""
        vs, vcache = self.vs, self.cfg.vcache
        assert vs is not None and vcache is not None
        self.refill = False
        vectors = sum(_vset.set_size(count) for _, count in vs.spaces.values())
        if vectors * vs.dims * 4 <= vcache.max_bytes:
            self.vs = None
            self.merge = _Merge([vs.shard])
            self.fill = []

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
                    self.qv, self.keep + 2 * _vcache.MARGIN, self.metric
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
                    self.ranked, self.scores, _, self.whole = entry.ranking(self.qv, None, self.metric)
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
        if ok and reply[0] == StoreCache.CURRENT and len(reply) == n + 1:
            self.checked = True
            self._cached_take(reply[1:])
            return
        if ok and reply[0] == StoreCache.UPDATED and len(reply) == n + 3 and self.patched < _vcache.PATCHES:
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
                    ranking = entry.reranked(self.qv, self.ranked, self.scores, self.whole, first, self.metric)
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
        # not current: scan as without a cache, and cache what the scan reads; on a server with
        # vector sets, they answer (the next search of the prefix fills the cache)
        vcache.drop(ckey, entry)
        vcache.misses += 1
        self.entry, self.fill, self.asked = None, [], []
        self.merge = _Merge([ckey[0]])
        self._vset_search(refill=False)

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
            if self.refill and self.vs.phase == "vsim" and not self.vs.failed:
                self._vs_to_cache()
            self._vs_check()
            return
        if self.entry is not None:
            self._cached_feed(reply)
            return
        flat, c_ns, c_item, token = reply
        if self.fill is not None:
            self.tokens.add(token)
            if not token:
                self.unversioned = shard
        cursor = (c_ns, c_item) if c_ns else False
        if self.direct and self._feed_direct(flat):
            self.merge.feed(shard, [], cursor)  # the page taken: the merge keeps the cursor
            self.merge.run(self._take)
            return
        entries: list[tuple[tuple[int, bytes, int], tuple[bytes, bytes, bytes, float | None]]] = []
        if self.qv is None:
            for i in range(0, len(flat), 6):
                ens, ekey, ns_seq, item_seq, rec, _ = flat[i : i + 6]
                entries.append(((int(ns_seq), ens, int(item_seq)), (ens, ekey, rec, None)))
        else:  # the page scored at once: each item's best score (None: no vectors)
            best = sem.best_scores(self.qv, [flat[i + 5][1::2] for i in range(0, len(flat), 6)], self.metric)
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
        self.merge.feed(shard, entries, cursor)
        self.merge.run(self._take)

    def _decode(self, ens: bytes, ekey: bytes, rec: bytes) -> _Found:
        ns = self.names.get(ens)
        if ns is None:  # decoded once per namespace of the search
            ns = self.names[ens] = dec_ns(ens)
        return _Found(ns, _dec_key(ekey), rec, [])

    def _found(self, flat: list[Any], i: int) -> _Found:
        return self._decode(flat[i], flat[i + 1], flat[i + 4])

    def _keep(self, rank: tuple[float, int], found: _Found) -> None:
        """Into the best ``keep`` (a heap of (score, -position), its root the worst; all of
        them when ``keep`` is None); the caller checked that it enters."""
        if self.keep is None or len(self.top) < self.keep:
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
        assert self.qv is not None and self.keep
        pages = [v[1::2] for v in flat[5::6]]
        mc = sem.page_matrix(len(self.qv), pages)
        if mc is None:
            self.fill = None  # not cached either
            return False
        m32, counts = mc
        if self.fill is not None:  # the page's columns, for the cache (``_cache_fill``)
            self.fill.append((flat, counts, m32))
        floor = self.top[0][0] if len(self.top) >= self.keep else None
        flt = self.op.filter
        idx, scores = sem.page_candidates(self.qv, m32, counts, None if flt else self.keep, floor, self.metric)
        base = self.flat
        self.flat += len(pages)
        limit, cfg = self.op.limit, self.cfg
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
                if len(self.top) < self.keep or rank > self.top[0]:
                    self._keep(rank, self._found(flat, 6 * j))
            return True
        for t in sorted(range(len(idx)), key=lambda t: (-scores[t], idx[t])):
            rank = (scores[t], -(base + idx[t]))
            if len(self.top) >= self.keep and rank < self.top[0]:
                break  # nor can any after it: the worst kept only rises
            f = self._found(flat, 6 * idx[t])
            if sem.matches(f.value(cfg), flt):
                self._keep(rank, f)
        return True

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
        found = self._decode(ens, ekey, rec)
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
        if self.keep is None or len(self.top) < self.keep or (self.keep and rank > self.top[0]):
            self._keep(rank, found)
        return True

    def _cache_fill(self) -> None:
        """Keep the scan's vectors when every page saw one version token, and the vectors fit."""
        fill, vcache, ckey = self.fill, self.cfg.vcache, self.ckey
        self.fill = None
        if fill is None or vcache is None or ckey is None or len(self.tokens) != 1 or not self.merge.finished:
            return
        token = next(iter(self.tokens))
        dims = len(self.qv or ())
        if not token or not dims:
            return
        if sum(len(c) for _, c, _ in fill) * dims * 4 > vcache.max_bytes:
            vcache.drop(ckey)
            return
        vcache.put(ckey, _vcache.Entry.from_pages(token, dims, fill))

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
