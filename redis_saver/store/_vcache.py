"""The client-side cache of a store's vectors: a repeated semantic search scores locally.

Per (shard, namespace prefix) searched, the cache keeps the vectors of every item under the
prefix, as a full scan read them, in search order, with the shard's version token at that scan
(``lua/_store_lib.lua`` ``st_bump``: every call that puts or deletes items on the shard changes
it; a token key that goes missing starts a new incarnation, which never matches an old one).

A search with a cached entry ranks every item locally (a float32 matrix product finds the
candidates, a float64 one scores them as a scan's page does, ``_semantics.best_scores``: see
``Entry.ranking``), then sends ONE read: the token and the
best candidates (offset + limit, and a margin). The script answers "not current" (the token
moved, or an item's vectors alone are gone: the search scans as without a cache, and refills),
or each candidate's record: a candidate gone without a bump (expiry, eviction) is dropped from
the entry, and the search goes on down its ranking (another read) until it has offset + limit
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

MARGIN = 8  # candidates asked beyond what is needed, for the ones that vanished


class Entry:
    """A full scan's vectors under one prefix of one shard, at one version token."""

    __slots__ = ("token", "keys", "matrix", "norms", "starts", "counts", "scored", "scoreless", "alive", "nbytes")

    def __init__(self, token: bytes, keys: list[tuple[bytes, bytes]], vectors: list[list[bytes]], dims: int) -> None:
        np = sem._np
        self.token = token
        self.keys = keys  # (e(ns), e(key)) of each item, in search order
        scored = [i for i, v in enumerate(vectors) if v]
        self.scored = np.asarray(scored, dtype=np.int64)  # the items with vectors, in order
        self.scoreless = [i for i, v in enumerate(vectors) if not v]
        self.counts = np.asarray([len(vectors[i]) for i in scored], dtype=np.int64)
        self.starts = np.concatenate(([0], np.cumsum(self.counts)[:-1])).astype(np.int64) if scored else self.counts
        raw = b"".join(b for i in scored for b in vectors[i])
        self.matrix = np.frombuffer(raw, dtype="<f4").reshape(-1, dims)  # float32, as stored
        m64 = self.matrix.astype(np.float64)
        self.norms = np.sqrt(np.einsum("ij,ij->i", m64, m64))  # as a page's (_semantics.best_scores)
        self.alive = np.ones(len(keys), dtype=bool)
        self.nbytes = self.matrix.nbytes + self.norms.nbytes + sum(len(a) + len(b) + 120 for a, b in keys)

    def _exact(self, items: Any, q: Any, qn: float) -> Any:
        """The best score of each of ``items`` (positions among the scored), float64 arithmetic
        on the stored float32 values: the scores a scan's page gives."""
        np = sem._np
        if not len(items):
            return np.empty(0)
        counts = self.counts[items]
        if bool((counts == 1).all()):
            rows = self.starts[items]
        else:
            rows = np.repeat(self.starts[items] - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        dots = np.empty(len(rows))
        for at in range(0, len(rows), 4096):  # bounded temporaries
            dots[at : at + 4096] = sem.row_dots(self.matrix[rows[at : at + 4096]].astype(np.float64), q)
        norms = self.norms[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            scores = np.where((norms > 0) & (qn > 0), dots / (qn * norms), 0.0)
        return np.maximum.reduceat(scores, np.concatenate(([0], np.cumsum(counts)[:-1])))

    def ranking(self, query: list[float], k: int | None) -> tuple[list[int], list[float], list[int], bool]:
        """The live scored items best first (ties: search order), their scores, the live items
        without vectors in order, and whether the ranking is whole: with ``k``, it may hold the
        best ``k`` only.

        The best ``k`` are found in float32 (half the memory traffic of float64), then scored
        exactly: a float32 cosine of ``dims`` terms is within ``delta`` of the float64 one
        (rounding of each product and sum: at most ``(dims + 2) * 2**-24`` relative to
        ``|x| |q|``, by Cauchy-Schwarz; ``delta`` takes 4x that), so every item whose exact
        score reaches the k-th best's scores at least the k-th float32 score minus ``2 delta``,
        and every item below that line scores under the k-th best exactly. The candidates above
        the line are ranked exactly; their first ``k`` are the exact first ``k``."""
        np = sem._np
        sl = [i for i in self.scoreless if self.alive[i]]
        if not len(self.scored):
            return [], [], sl, True
        q = np.asarray(query, dtype=np.float64)
        qn = float(np.sqrt(q @ q))
        pos = np.nonzero(self.alive[self.scored])[0]
        if k is not None and k < len(pos) and qn > 0 and np.isfinite(qn):
            dims = self.matrix.shape[1]
            delta = (dims + 16) * 2.0**-22
            dots = self.matrix @ q.astype(np.float32)
            with np.errstate(divide="ignore", invalid="ignore"):
                rough = np.where(self.norms > 0, dots / (qn * self.norms), 0.0)
            live = (rough if len(rough) == len(self.starts) else np.maximum.reduceat(rough, self.starts))[pos]
            if np.isfinite(live).all():
                kth = live[np.argpartition(-live, k - 1)[k - 1]]
                cand = pos[live >= kth - 2 * delta]
                best = self._exact(cand, q, qn)
                order = np.lexsort((cand, -best))[:k]
                return self.scored[cand[order]].tolist(), best[order].tolist(), sl, False
        best = self._exact(pos, q, qn)
        order = np.lexsort((pos, -best))
        return self.scored[pos[order]].tolist(), best[order].tolist(), sl, True


class VectorCache:
    """Entries by (shard, e(prefix)), least recently used first out, within ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.entries: OrderedDict[tuple[int, bytes], Entry] = OrderedDict()
        self.nbytes = 0
        self.lock = threading.Lock()
        self.hits = self.misses = self.fills = 0  # searches answered from it, found it not current, filled it

    def get(self, key: tuple[int, bytes]) -> Entry | None:
        with self.lock:
            e = self.entries.get(key)
            if e is not None:
                self.entries.move_to_end(key)
            return e

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
            old = self.entries.pop(key, None)
            if old is not None:
                self.nbytes -= old.nbytes
            self.entries[key] = entry
            self.nbytes += entry.nbytes
            self.fills += 1
            while self.nbytes > self.max_bytes:
                _, e = self.entries.popitem(last=False)
                self.nbytes -= e.nbytes

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.nbytes = 0


def usable(max_bytes: Any) -> bool:
    """Whether a cache can run (numpy present, a positive bound)."""
    return sem._np is not None and max_bytes > 0
