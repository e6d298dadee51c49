"""The client-side cache of a store's vectors: a repeated semantic search scores locally.

Per (shard, namespace prefix) searched, the cache keeps the vectors of every item under the
prefix, as a full scan read them, in search order, with the shard's version token at that scan
(``lua/_store_lib.lua`` ``st_bump``: every call that puts or deletes items on the shard changes
it; a token key that goes missing starts a new incarnation, which never matches an old one).

A search with a cached entry ranks every item locally (a float32 matrix product finds the
candidates, a float64 one scores them as a scan's page does, ``_semantics.best_scores``: see
``Entry.ranking``), then sends ONE read: the token, the prefix and the best candidates (offset
+ limit, and a margin). The script answers with each candidate's record when the token is
current; when it moved and the shard's change log (``lua/_store_lib.lua`` ``st_bump``) still
covers it, with the new token and the items under the prefix changed since (records, places,
vectors): the search patches the entry (``Entry.patch``) and ranks again; else "not current"
(also when an unchanged candidate's vectors alone are gone): the search scans as without a
cache, and refills. A candidate gone without a bump (expiry, eviction) is dropped from the
entry, and the search goes on down its ranking (another read) until it has offset + limit
present items. So the answer is what a full scan of what Redis holds gives, never bytes Redis
no longer holds.

Memory: items x dims x 4 bytes (float32, as stored) per cached (shard, prefix), bounded
by ``vector_cache_bytes`` (least recently used entries go first; an entry larger than the bound
is not kept).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from . import _semantics as sem

# a ranking: the live scored items best first, their scores, the live items without vectors in
# order, and whether it is whole (else its head)
Ranking = tuple[list[int], list[float], list[int], bool]
MARGIN = 8  # candidates asked beyond what is needed, for the ones that vanished
CHANGE_BUDGET = 256  # changed items under the prefix one cached read brings (more: a scan)
CHANGE_LOG = 2048  # items a shard's change log keeps (lua/_store_lib.lua CHANGE_LOG)
PATCHES = 8  # change sets one search applies at most (writes racing it: then it scans)
ASKED = 4096  # prefixes remembered as searched once from vector sets (``VectorCache.repeated``)


class Entry:
    """A full scan's vectors under one prefix of one shard, valid at one version token, and
    patched forward with the changes the shard's log reports (``patch``).

    Items are numbered as they enter (a scan's in search order, a patch's after them); a changed
    item's old number dies and it enters again. Search order is (namespace sequence, item
    sequence), kept per item (``nsid``, ``iseq``) and per namespace (``nsseq``). Rows of the
    float32 matrix (``nrows`` of its capacity) hold each scored item's vectors, contiguous."""

    __slots__ = (
        "token", "keys", "index", "dims", "matrix", "nrows", "norms", "starts", "counts", "scored",
        "scoreless", "alive", "nsid", "iseq", "nsseq", "nsids", "nbytes", "keybytes", "lock", "_cos",
    )  # fmt: skip

    def __init__(
        self,
        token: bytes,
        keys: list[tuple[bytes, bytes]],
        vectors: list[list[bytes]],
        dims: int,
        seqs: list[tuple[int, int]] | None = None,
    ) -> None:
        np = sem._np
        self.token, self.dims = token, dims
        self.lock = threading.Lock()
        self.keys: list[tuple[bytes, bytes]] = []  # (e(ns), e(key)) of each item
        self.index: dict[tuple[bytes, bytes], int] = {}  # the live number of each (e(ns), e(key))
        self.nsids: dict[bytes, int] = {}
        self.nsseq = np.zeros(0, dtype=np.int64)  # namespace id -> its sequence
        self.nsid = np.zeros(0, dtype=np.int64)
        self.iseq = np.zeros(0, dtype=np.int64)
        self.alive = np.zeros(0, dtype=bool)
        self.scored = np.zeros(0, dtype=np.int64)  # the items with vectors, by number
        self.starts = np.zeros(0, dtype=np.int64)  # first row of each scored item
        self.counts = np.zeros(0, dtype=np.int64)  # its rows
        self.scoreless: list[int] = []
        self.matrix = np.zeros((0, dims), dtype=np.float32)  # float32, as stored
        self.norms = np.zeros(0)
        self.nrows = self.keybytes = self.nbytes = 0
        self._cos: tuple[Any, Any, bool] | None = None  # ``_cosine_rows``, made on first use
        if seqs is None:
            seqs = [(0, i) for i in range(len(keys))]
        self._add([(k[0], k[1], s[0], s[1], v) for k, s, v in zip(keys, seqs, vectors, strict=True)])

    @classmethod
    def from_pages(cls, token: bytes, dims: int, pages: list[tuple[list[Any], list[int], Any]]) -> Entry:
        """An entry of a scan's pages as ``_search`` read them: (the reply's flat items, each
        item's count of vectors, the page's float32 matrix or None), without a second copy."""
        np = sem._np
        e = cls(token, [], [], dims)
        flats = [f for f, _, _ in pages]
        mats = [m for _, _, m in pages if m is not None]
        rows = np.concatenate(mats) if mats else np.zeros((0, dims), dtype=np.float32)  # a copy of its own
        e._add_columns(
            [x for f in flats for x in f[0::6]],
            [x for f in flats for x in f[1::6]],
            [x for f in flats for x in f[2::6]],
            [x for f in flats for x in f[3::6]],
            [c for _, cs, _ in pages for c in cs],
            rows,
        )
        if len(e.index) < len(e.keys):  # pages read at several tokens: an item read twice (moved
            # meanwhile) lives once, at its last place; it changed after the first page's token,
            # so the first cached read brings it again (``keep_pages``)
            for i, k in enumerate(e.keys):
                if e.index[k] != i:
                    e.alive[i] = False
        return e

    def _add(self, items: list[tuple[bytes, bytes, int, int, list[bytes]]]) -> None:
        """Number the items (e(ns), e(key), ns_seq, item_seq, vectors) after the others."""
        np = sem._np
        raw = b"".join(b for it in items for b in it[4])
        self._add_columns(
            [it[0] for it in items],
            [it[1] for it in items],
            [it[2] for it in items],
            [it[3] for it in items],
            [len(it[4]) for it in items],
            np.frombuffer(raw, dtype="<f4").reshape(-1, self.dims),
        )

    def _add_columns(
        self, enss: list[bytes], ekeys: list[bytes], nsqs: list[Any], isqs: list[Any], counts: list[int], new: Any
    ) -> None:
        """Number items after the others, by columns: e(ns), e(key), ns_seq, item_seq (ints, or
        the reply's digits), each one's count of vectors, and their float32 rows, contiguous."""
        np = sem._np
        first = len(self.keys)
        keys = list(zip(enss, ekeys, strict=True))
        self.keys += keys
        self.index.update(zip(keys, range(first, first + len(keys)), strict=True))
        seqs = self.nsseq.tolist()
        nsid, nsids, last, at = [], self.nsids, None, -1
        for ens, nsq in zip(enss, nsqs, strict=True):
            if (ens, nsq) != last:  # a scan's items come namespace by namespace
                at = nsids.get(ens, -1)
                if at < 0:
                    at = nsids[ens] = len(seqs)
                    seqs.append(int(nsq))
                if seqs[at] != int(nsq):  # the namespace was made again (its q entry lost): all its items move
                    seqs[at] = int(nsq)
                last = (ens, nsq)
            nsid.append(at)
        self.nsseq = np.asarray(seqs, dtype=np.int64)
        self.nsid = np.concatenate((self.nsid, np.asarray(nsid, dtype=np.int64)))
        self.iseq = np.concatenate((self.iseq, np.asarray(list(map(int, isqs)), dtype=np.int64)))
        self.alive = np.concatenate((self.alive, np.ones(len(keys), dtype=bool)))
        c = np.asarray(counts, dtype=np.int64)
        scored = np.flatnonzero(c)
        self.scoreless += (first + np.flatnonzero(c == 0)).tolist()
        counts_s = c[scored]
        starts = counts_s
        if len(scored):
            starts = self.nrows + np.concatenate(([0], np.cumsum(counts_s)[:-1])).astype(np.int64)
        rows = int(counts_s.sum())
        assert len(new) == rows
        if not first and rows and new.flags.writeable and new.flags.c_contiguous and new.dtype == np.float32:
            self.matrix, self.norms = new, np.empty(rows)  # the first rows: a matrix of their own, kept
        elif self.nrows + rows > len(self.matrix):  # grow by a quarter (a patch adds a few rows)
            cap = max(self.nrows + rows, len(self.matrix) + len(self.matrix) // 4 + 64) if first else rows
            m = np.empty((cap, self.dims), dtype=np.float32)
            m[: self.nrows] = self.matrix[: self.nrows]
            nm = np.empty(cap)
            nm[: self.nrows] = self.norms[: self.nrows]
            self.matrix, self.norms = m, nm
        if rows:
            if self.matrix is not new:
                self.matrix[self.nrows : self.nrows + rows] = new
            for a in range(0, rows, 4096):  # as a page's norms (bounded temporaries)
                m64 = new[a : a + 4096].astype(np.float64)
                self.norms[self.nrows + a : self.nrows + a + len(m64)] = np.sqrt(np.einsum("ij,ij->i", m64, m64))
        self.nrows += rows
        self.scored = np.concatenate((self.scored, first + scored.astype(np.int64)))
        self.starts = np.concatenate((self.starts, starts))
        self.counts = np.concatenate((self.counts, counts_s))
        self.keybytes += sum(map(len, enss)) + sum(map(len, ekeys)) + 240 * len(keys)  # names, tuples, index
        self.nbytes = self.matrix.nbytes + self.norms.nbytes + 4 * len(self.matrix) + self.keybytes
        self._cos = None

    def patch(self, token: bytes, flat: list[Any]) -> bool:
        """Apply the changes a cached read brought (a "s" page's items: a changed item that a
        scan does not find has no record) and move to ``token``; False (the entry unchanged) when
        a vector is not of the entry's dims. Call with ``lock`` held.

        An entry valid at token T (every item not changed after T is as it was at T) is valid at
        any earlier token of its incarnation; changes since T0 <= T, applied, make it valid at
        the token they were read at: so two searches may patch one entry in any order."""
        if any(len(b) != 4 * self.dims for i in range(5, len(flat), 6) for b in flat[i][1::2]):
            return False
        add = []
        for i in range(0, len(flat), 6):
            ens, ekey, nsq, isq, rec, vecs = flat[i : i + 6]
            old = self.index.pop((ens, ekey), None)
            if old is not None:
                self.alive[old] = False
            if rec is not None:
                add.append((ens, ekey, int(nsq), int(isq), list(vecs[1::2])))
        self._add(add)
        self.token = token
        return True

    def wasted(self) -> bool:
        """Whether more items are dead than live (``compacted`` then takes less memory)."""
        return len(self.keys) - len(self.index) > max(1024, len(self.index))

    def compacted(self) -> Entry:
        """A new entry of the live items only (searches holding this one go on with it)."""
        at = {int(item): j for j, item in enumerate(self.scored)}
        keys, seqs, vectors = [], [], []
        for (ens, ekey), i in sorted(self.index.items(), key=lambda kv: kv[1]):
            j = at.get(i)
            rows = [] if j is None else self.matrix[self.starts[j] : self.starts[j] + self.counts[j]]
            keys.append((ens, ekey))
            seqs.append((int(self.nsseq[self.nsid[i]]), int(self.iseq[i])))
            vectors.append([r.tobytes() for r in rows])
        return Entry(self.token, keys, vectors, self.dims, seqs)

    def _order(self, items: Any) -> tuple[Any, Any]:
        """Sort keys of ``items`` (numbers) in search order, for ``np.lexsort``: item sequence,
        then namespace sequence."""
        return self.iseq[items], self.nsseq[self.nsid[items]]

    def _exact(self, items: Any, q: Any, qn: float, metric: str) -> Any:
        """The best score of each of ``items`` (positions among the scored), float64 arithmetic
        on the stored float32 values: the scores a scan's page gives (``sem.row_scores``)."""
        np = sem._np
        if not len(items):
            return np.empty(0)
        counts = self.counts[items]
        if bool((counts == 1).all()):
            rows = self.starts[items]
        else:
            rows = np.repeat(self.starts[items] - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        scores = np.empty(len(rows))
        for at in range(0, len(rows), 4096):  # bounded temporaries
            part = rows[at : at + 4096]
            m64 = self.matrix[part].astype(np.float64)
            scores[at : at + 4096] = sem.row_scores(m64, q, qn, self.norms[part], metric)
        return np.maximum.reduceat(scores, np.concatenate(([0], np.cumsum(counts)[:-1])))

    def _scoreless(self) -> list[int]:
        """The live items without vectors, in search order."""
        np = sem._np
        sl = [i for i in self.scoreless if self.alive[i]]
        if len(sl) > 1:
            sl = [sl[j] for j in np.lexsort(self._order(np.asarray(sl, dtype=np.int64)))]
        return sl

    def reranked(
        self,
        query: list[float],
        ranked: list[int],
        scores: list[float],
        whole: bool,
        first: int,
        metric: str = "cosine",
    ) -> Ranking:
        """``ranking`` after a patch that numbered its items from ``first`` on, from the ranking
        before it (``ranked`` best first, exact, ``whole`` or the head of the whole): the items
        of it still live, and the patch's live items scored exactly, merged. Every item outside
        ``ranked`` ranks below each of it, so the merge is exact up to its last item still live
        (past it, an item outside ``ranked`` may beat a new one): the result stops there, unless
        ``ranked`` was whole. The new items only are scored: no product over the whole matrix."""
        np = sem._np
        sl = self._scoreless()
        kept = [(i, sc) for i, sc in zip(ranked, scores, strict=True) if i < first and self.alive[i]]
        at = int(np.searchsorted(self.scored, first))  # the patch's scored items: the tail of scored
        pos = at + np.nonzero(self.alive[self.scored[at:]])[0]
        q = np.asarray(query, dtype=np.float64)
        qn = float(np.sqrt(q @ q))
        new = self._exact(pos, q, qn, metric).tolist() if len(pos) else []
        items = np.asarray([i for i, _ in kept] + self.scored[pos].tolist(), dtype=np.int64)
        best = np.asarray([sc for _, sc in kept] + new)
        if not len(items):
            return [], [], sl, whole
        order = np.lexsort((*self._order(items), -best))
        out, out_scores = items[order].tolist(), best[order].tolist()
        if not whole:
            if not kept:
                return [], [], sl, False
            old = {i for i, _ in kept}
            end = max(j for j, i in enumerate(out) if i in old) + 1
            out, out_scores = out[:end], out_scores[:end]
        return out, out_scores, sl, whole

    def _cosine_rows(self) -> tuple[Any, Any, bool]:
        """For the cosine first pass: each row's 1 / norm in float32 (0 where the norm is not
        sure: zero, under 2**-30, over 2**30 or not finite, as ``_semantics.rough_scores``
        says), those rows, and whether every scored item has one row (rows are items)."""
        np = sem._np
        if self._cos is None:
            norms = self.norms[: self.nrows]
            with np.errstate(all="ignore"):
                sure = (norms >= 2.0**-30) & (norms <= 2.0**30)
                inv = np.where(sure, 1.0 / np.where(sure, norms, 1.0), 0.0).astype(np.float32)
            self._cos = (inv, np.flatnonzero(~sure), len(self.starts) == self.nrows)
        return self._cos

    def _cosine_head(self, q: Any, qn: float, k: int) -> tuple[Any, Any] | None:
        """The best ``k`` live scored items by exact cosine (positions among the scored, best
        first, and their scores), with the first pass all in float32: one product with the
        unit query, times each row's float32 1 / norm (``_cosine_rows``). That rough cosine is
        within ``rough_delta`` of the exact one, as ``rough_scores``' float64 division is, plus
        the two float32 roundings (each under 2**-24 of a value at most 1 + delta in size: the
        bound adds 2**-21 a side), so every item whose rough cosine reaches the k-th best minus
        twice that is a candidate, and the candidates' exact ranking's first ``k`` are the
        exact first ``k``. Rows of a norm that is not sure are always candidates (and set no
        line). None: fewer than ``k`` live items with a sure rough score (the caller ranks all)."""
        np = sem._np
        inv, unsure, one = self._cosine_rows()
        r = np.einsum("ij,j->i", self.matrix[: self.nrows], (q / qn).astype(np.float32))
        r *= inv
        line_r = r
        if len(unsure):
            line_r = r.copy()
            line_r[unsure] = -np.inf
            r[unsure] = np.inf
        if not one:
            r = np.maximum.reduceat(r, self.starts)
            line_r = r if line_r is r else np.maximum.reduceat(line_r, self.starts)
        dead = None if self.alive.all() else np.flatnonzero(~self.alive[self.scored])
        if dead is not None and len(dead):  # (r and line_r are arrays of this call's own)
            r[dead] = -np.inf
            line_r[dead] = -np.inf
        if k > len(line_r):
            return None
        kth = kth_largest(line_r, k)
        if not np.isfinite(kth):
            return None
        line = kth - 2 * sem.rough_delta(self.dims) - 2.0**-20
        cand = np.flatnonzero(r >= line)
        best = self._exact(cand, q, qn, "cosine")
        order = np.lexsort((*self._order(self.scored[cand]), -best))[:k]
        return cand[order], best[order]

    def ranking(self, query: list[float], k: int | None, metric: str = "cosine") -> Ranking:
        """The live scored items best first (ties: search order), their scores, the live items
        without vectors in order, and whether the ranking is whole: with ``k``, it may hold the
        best ``k`` only.

        The best ``k`` are found in float32 (half the memory traffic of float64), then scored
        exactly (``metric``: ``_semantics.row_scores``): the float32 pass
        (``_semantics.rough_scores``: a unit query) bounds each item's exact score (a cosine
        within ``rough_delta``: rounding of each product and sum is at most ``(dims + 2) *
        2**-24`` relative to ``|x| |q|``, by Cauchy-Schwarz, and the bound takes 4x that; a dot
        product or a distance within what that makes of them), so an item whose upper bound is
        under the k-th best lower bound scores under the k-th best exactly. The candidates above
        that line are ranked exactly; their first ``k`` are the exact first ``k``. An item with a
        vector of a tiny, huge or non-finite norm, where float32 rounding is not relative, is
        always a candidate."""
        np = sem._np
        sl = self._scoreless()
        if not len(self.scored):
            return [], [], sl, True
        q = np.asarray(query, dtype=np.float64)
        qn = float(np.sqrt(q @ q))
        if metric == "cosine" and k is not None and qn > 0 and np.isfinite(qn) and k < len(self.scored):
            head = self._cosine_head(q, qn, k)
            if head is not None:
                return self.scored[head[0]].tolist(), head[1].tolist(), sl, False
        pos = np.nonzero(self.alive[self.scored])[0]
        if k is not None and k < len(pos) and qn > 0 and np.isfinite(qn):
            low, high, sure = sem.rough_scores(self.matrix[: self.nrows], q, qn, self.norms[: self.nrows], metric)
            if len(low) != len(self.starts):  # each item's best, sure if all its rows are
                low = np.maximum.reduceat(low, self.starts)
                high = np.maximum.reduceat(high, self.starts)
                sure = np.logical_and.reduceat(sure, self.starts)
            lsure = sure[pos]
            known = low[pos][lsure]
            if k < len(known):
                kth = known[np.argpartition(-known, k - 1)[k - 1]]
                cand = pos[~lsure | (high[pos] >= kth)]
                best = self._exact(cand, q, qn, metric)
                order = np.lexsort((*self._order(self.scored[cand]), -best))[:k]
                return self.scored[cand[order]].tolist(), best[order].tolist(), sl, False
        best = self._exact(pos, q, qn, metric)
        order = np.lexsort((*self._order(self.scored[pos]), -best))
        return self.scored[pos[order]].tolist(), best[order].tolist(), sl, True


def kth_largest(values: Any, k: int) -> float:
    """The ``k``-th largest of ``values`` (a 1-d float array, 1 <= k <= its length), as
    ``np.partition`` gives it, without partitioning them all: the ``k``-th largest of block
    maxima (each a value of its own element, so at least ``k`` elements reach it) is at most
    the ``k``-th largest, so the elements that reach it hold the ``k``-th largest; they alone
    are partitioned (a few times ``k`` of them, where a partition of all 100k took ~0.6 ms)."""
    np = sem._np
    n = len(values)
    blocks = max(1024, 8 * k)
    width = n // blocks
    if width >= 4:
        maxima = values[: width * blocks].reshape(blocks, width).max(axis=1)
        floor = np.partition(maxima, blocks - k)[blocks - k]
        values = values[~(values < floor)]  # (a NaN, which partition ranks above all, stays)
        n = len(values)
    return float(np.partition(values, n - k)[n - k])


class VectorCache:
    """Entries by (shard, e(prefix)), least recently used first out, within ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.entries: OrderedDict[tuple[int, bytes], Entry] = OrderedDict()
        self.nbytes = 0
        self.lock = threading.Lock()
        self.hits = self.misses = self.fills = 0  # searches answered from it, found it not current, filled it
        self.patches = 0  # change sets applied to entries (searches that found the shard written since)
        self.asked: OrderedDict[tuple[int, bytes], None] = OrderedDict()  # see ``repeated``
        self.filling: set[tuple[int, bytes]] = set()  # keys a background fill is under way for
        self.wanted: list[tuple[tuple[int, bytes], int]] = []  # (key, dims) fills to start (``want_fill``)

    def get(self, key: tuple[int, bytes]) -> Entry | None:
        with self.lock:
            e = self.entries.get(key)
            if e is not None:
                self.entries.move_to_end(key)
            return e

    def repeated(self, key: tuple[int, bytes]) -> bool:
        """Whether a search of ``key`` without an entry came before this one (until the entry
        is filled: ``put``); else this one is remembered (the last ``ASKED`` keys). On a server
        with vector sets, the first search of a prefix is answered from them and the next ones
        fill the cache (a prefix searched once never pays the scan)."""
        with self.lock:
            if key in self.asked:
                self.asked.move_to_end(key)
                return True
            self.asked[key] = None
            if len(self.asked) > ASKED:
                self.asked.popitem(last=False)
            return False

    def want_fill(self, key: tuple[int, bytes], dims: int) -> bool:
        """Ask for a background fill of ``key`` (the store's shell starts it after the call:
        ``take_wanted``), unless one is under way or its entry is in (a search that started
        before a fill ended); True when asked."""
        with self.lock:
            if key in self.filling or key in self.entries:
                return False
            self.filling.add(key)
            self.wanted.append((key, dims))
            return True

    def take_wanted(self) -> list[tuple[tuple[int, bytes], int]]:
        with self.lock:
            wanted, self.wanted = self.wanted, []
            return wanted

    def fill_done(self, key: tuple[int, bytes]) -> None:
        with self.lock:
            self.filling.discard(key)

    def drop(self, key: tuple[int, bytes], entry: Entry | None = None) -> None:
        with self.lock:
            e = self.entries.get(key)
            if e is not None and (entry is None or e is entry):
                del self.entries[key]
                self.nbytes -= e.nbytes

    def put(self, key: tuple[int, bytes], entry: Entry) -> None:
        if entry.nbytes > self.max_bytes:
            self.drop(key)
            return
        with self.lock:
            self.asked.pop(key, None)
            old = self.entries.pop(key, None)
            if old is not None:
                self.nbytes -= old.nbytes
            self.entries[key] = entry
            self.nbytes += entry.nbytes
            self.fills += 1
            while self.nbytes > self.max_bytes:
                _, e = self.entries.popitem(last=False)
                self.nbytes -= e.nbytes

    def resized(self, key: tuple[int, bytes], entry: Entry, before: int, new: Entry | None = None) -> None:
        """``entry`` (patched) took ``entry.nbytes`` instead of ``before``; ``new`` replaces it."""
        with self.lock:
            self.patches += 1
            if self.entries.get(key) is not entry:
                return
            self.nbytes += entry.nbytes - before
            if new is not None:
                self.entries[key] = new
                self.nbytes += new.nbytes - entry.nbytes
            while self.nbytes > self.max_bytes and self.entries:
                _, e = self.entries.popitem(last=False)
                self.nbytes -= e.nbytes

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.nbytes = 0


def keep_pages(
    vcache: VectorCache,
    key: tuple[int, bytes],
    dims: int,
    pages: list[tuple[list[Any], list[int], Any]],
    tokens: list[bytes],
) -> bool:
    """Cache a scan's pages under ``key`` (a search's scan, or a background fill), read at the
    shard's version ``tokens`` (one a page, in order); True when kept.

    The entry takes the FIRST page's token: every item not changed after it was read as it was
    then (later pages read it unchanged), and every item changed after it (put, moved, deleted
    between pages, so perhaps read twice, in an older state, or not at all) is in the shard's
    change log since that token: the first cached read that finds the token moved brings those
    items again and patches them in (``Entry.patch``), or finds the log does not cover it (an
    item changed unlogged, another incarnation, too many changes) and drops the entry. So a
    scan that other workers wrote during is kept as safely as one they did not; pages of two
    incarnations (the token key lost meanwhile), or a shard without a token, are not kept."""
    if not dims or not tokens or not tokens[0]:
        return False
    incarnation = tokens[0].split(b":", 1)[0]
    if any(not t or t.split(b":", 1)[0] != incarnation for t in tokens):
        return False
    if sum(len(c) for _, c, _ in pages) * dims * 4 > vcache.max_bytes:
        vcache.drop(key)
        return False
    vcache.put(key, Entry.from_pages(tokens[0], dims, pages))
    return True


def usable(max_bytes: Any) -> bool:
    """Whether a cache can run (numpy present, a positive bound)."""
    return sem._np is not None and max_bytes > 0
