"""The client-side cache of a store's vectors: a repeated semantic search scores locally.

Per (shard, namespace prefix) searched, the cache keeps the vectors of every item under the
prefix, as a full scan read them, in search order, with the shard's version token at that scan
(``lua/_store_lib.lua`` ``st_bump``: every call that puts or deletes items on the shard changes
it; a token key that goes missing starts a new incarnation, which never matches an old one).

A search with a cached entry ranks every item locally (one matrix product, the same float64
arithmetic as a scan's page, ``_semantics.best_scores``), then sends ONE read: the token and the
best candidates (offset + limit, and a margin). The script answers "not current" (the token
moved, or an item's vectors alone are gone: the search scans as without a cache, and refills),
or each candidate's record: a candidate gone without a bump (expiry, eviction) is dropped from
the entry, and the search goes on down its ranking (another read) until it has offset + limit
present items. So the answer is what a full scan of what Redis holds gives, never bytes Redis
no longer holds.

Memory: items x dims x 8 bytes (float64, for exact scores) per cached (shard, prefix), bounded
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

    __slots__ = ("token", "keys", "matrix", "norms", "starts", "scored", "scoreless", "alive", "nbytes")

    def __init__(self, token: bytes, keys: list[tuple[bytes, bytes]], vectors: list[list[bytes]], dims: int) -> None:
        np = sem._np
        self.token = token
        self.keys = keys  # (e(ns), e(key)) of each item, in search order
        scored = [i for i, v in enumerate(vectors) if v]
        self.scored = np.asarray(scored, dtype=np.int64)  # the items with vectors, in order
        self.scoreless = [i for i, v in enumerate(vectors) if not v]
        counts = np.asarray([len(vectors[i]) for i in scored], dtype=np.int64)
        self.starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64) if scored else counts
        raw = b"".join(b for i in scored for b in vectors[i])
        self.matrix = np.frombuffer(raw, dtype="<f4").reshape(-1, dims).astype(np.float64)
        self.norms = np.sqrt(np.einsum("ij,ij->i", self.matrix, self.matrix))
        self.alive = np.ones(len(keys), dtype=bool)
        self.nbytes = self.matrix.nbytes + self.norms.nbytes + sum(len(a) + len(b) + 120 for a, b in keys)

    def ranking(self, query: list[float], k: int | None) -> tuple[list[int], list[float], list[int], bool]:
        """The live scored items best first (ties: search order), their scores, the live items
        without vectors in order, and whether the ranking is whole: with ``k``, it may stop
        after the best ``k`` (and the items tied with the ``k``-th)."""
        np = sem._np
        sl = [i for i in self.scoreless if self.alive[i]]
        if not len(self.scored):
            return [], [], sl, True
        q = np.asarray(query, dtype=np.float64)
        qn = float(np.sqrt(q @ q))
        dots = self.matrix @ q
        with np.errstate(divide="ignore", invalid="ignore"):
            scores = np.where((self.norms > 0) & (qn > 0), dots / (qn * self.norms), 0.0)
        best = np.maximum.reduceat(scores, self.starts)
        pos = np.nonzero(self.alive[self.scored])[0]
        whole = k is None or k >= len(pos) or np.isnan(best).any()
        if not whole:
            assert k is not None
            live = best[pos]
            kth = live[np.argpartition(-live, k - 1)[k - 1]]
            pos = pos[live >= kth]  # every item at least as good as the k-th, ties included
        order = pos[np.lexsort((pos, -best[pos]))]
        return self.scored[order].tolist(), best[order].tolist(), sl, whole


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
