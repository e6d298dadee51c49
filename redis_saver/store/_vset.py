"""Semantic search from Redis 8's vector sets: VSIM finds candidates, the client scores them exactly.

On a server with vector sets (``VADD``; the store probes the command once), every namespace
keeps its items' vectors also in a vector set (``lua/_store_lib.lua`` "vector sets"; written in
the same ``store_write`` / ``store_delete`` call as the items), one element per (item, path),
stored FP32 without quantisation. A semantic search without a filter whose prefix lies in one
shard and covers at most ``VS_NAMESPACES`` namespaces then runs:

1. a ``store_read`` "V" read: the namespaces under the prefix, if each is kept in a complete
   set (its element count, kept in the same script calls, equals ``VCARD``: an evicted,
   deleted or never-made set is not complete) -- else the search scans as before;
2. one ``VSIM ... FP32 <query> WITHSCORES COUNT <window> TRUTH`` per namespace, sent by the client
   (not from Lua: the server runs a client's VSIM in a thread, a script's on its main thread):
   an exact float32 linear scan's best ``window`` elements (an HNSW search, without ``TRUTH``,
   gives no bound on what it missed);
3. a ``store_read`` "C" read: the candidates' records and stored vectors (absent ones, expired
   or evicted, dropped as a scan drops them), if every set is still complete (writes between
   the reads count as writes between a scan's pages: each item is as it is when read); the
   client scores them as a scan's page does (``_semantics.best_scores``: float64 on the stored
   float32 values, max over an item's vectors) and ranks them as a scan does (score, then
   search order).

Why it is exact: VSIM's similarity ``s`` is ``(1 + cos) / 2`` in float32 over vectors it
normalised in float32; ``2 s - 1`` is within ``delta`` of the float64 cosine (``_vcache``'s
bound ``(dims + 2) * 2**-24`` for the dot, a few ulps for the normalisations and for ``s``;
``delta`` takes ``(dims + 32) * 2**-21``, more than 4x that). An element outside a namespace's
window scores at most its window's last ``s``, so an item none of whose elements is in the
window scores at most ``2 s_last - 1 + delta`` exactly. Once the ``offset + limit``-th best
exact score is above that for every namespace whose window was full, no item outside can
enter (nor tie: a tie would need the same exact score). Else the windows that could still
hold one grow (x4, up to ``WINDOW_MAX``), and past that the search scans. The write scripts
keep only vectors VSIM scores within that bound in a set (finite, a squared norm 0 or in
[1e-30, 1e30]); a namespace that gets another vector leaves vector sets (it scans).

InMemoryStore fills a page with unscored items when fewer than ``offset + limit`` are scored:
the sets hold no unscored item, so that case (few items) scans.

Approximate search (opt-in: the index's ``ann_index_config``, ``ann_config``): the sets a
store makes get VADD ``M m EF ef_construction`` (marked "h<M>:<EF>:" in their count), and a
namespace whose set was made with ``M m`` is searched in its HNSW graph: one ``VSIM ... COUNT
<keep + slack> EF max(ef_search, COUNT)`` without ``TRUTH``, whose candidates are scored and
ranked exactly as above (the scores and order are exact; which items are found is not: no
bound, no second round). That search is one round trip: a ``store_read`` "A" read lists the
sets, runs each one's VSIM inside the script (on the server's main thread: an HNSW search at
``ef_search`` is short) and returns the records and vectors of the items found; the client
scores them (float64 over the few candidates' float32 values, ``_semantics.best_scores``). A
namespace whose set has another M (made before, by a store in exact mode) makes the "A" read
answer as "V" does, and the search goes on exactly as above.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from typing import Any

from ..core.engine import Pipe
from ..core.replies import StoreSets
from ..errors import MalformedReplyError
from ..keys import dec_first
from . import _semantics as sem
from ._keys import StoreKeys

VS_NAMESPACES = 16  # lua/store_read.lua VS_NAMESPACES: namespaces a search from sets covers
WINDOW_MIN = 64  # elements VSIM returns per namespace at first (at least 2 (offset + limit) + 16)
WINDOW_MAX = 4096  # lua/store_read.lua VS_ITEMS: beyond, the search scans


ANN_KEYS = {"kind", "m", "ef_construction", "ef_search", "vector_type"}
# name -> (default, least, most): M 4 is the exact mode's graph; lua/_store_lib.lua st_check
ANN_BOUNDS = {"m": (16, 5, 100), "ef_construction": (64, 4, 1000), "ef_search": (100, 1, 1000)}
ANN_CACHE_ITEMS = 30_000  # in approximate mode, a cached prefix of more items goes to the graph


def ann_config(raw: Any) -> tuple[int, int, int] | None:
    """``index["ann_index_config"]`` checked: (m, ef_construction, ef_search), or None for kind
    ``"flat"`` (an exact search: the default); else ValueError / TypeError (before anything is
    written)."""
    if not isinstance(raw, Mapping):
        raise TypeError(f"ann_index_config must be a dict, got {type(raw).__name__}")
    unknown = set(raw) - ANN_KEYS
    if unknown:
        raise ValueError(f"unknown ann_index_config option(s): {sorted(unknown)}")
    if raw.get("vector_type", "vector") != "vector":
        raise ValueError(f"ann_index_config vector_type {raw.get('vector_type')!r}: only 'vector' (FP32)")
    if raw.get("kind", "hnsw") == "flat":
        if set(raw) - {"kind", "vector_type"}:
            raise ValueError(
                f"ann_index_config kind 'flat' takes no option(s) {sorted(set(raw) - {'kind', 'vector_type'})}"
            )
        return None
    if raw.get("kind", "hnsw") != "hnsw":
        raise ValueError(f"ann_index_config kind {raw.get('kind')!r}: only 'hnsw' (Redis 8 vector sets) or 'flat'")
    out = []
    for name, (default, lo, hi) in ANN_BOUNDS.items():
        v = raw.get(name, default)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ValueError(f"ann_index_config {name} must be an int from {lo} to {hi}, got {v!r}")
        out.append(v)
    return out[0], out[1], out[2]


def set_m(count: bytes) -> int:
    """The M a set was made with, from its count in "c" (lua/_store_lib.lua): "h<M>:<EF>:<n>",
    or 4."""
    if count[:1] == b"h":
        return int(count[1 : count.index(b":")])
    return 4


def set_size(count: bytes) -> int:
    """The number of elements of a complete set, from its count in "c" (``set_m``)."""
    return int(count.rsplit(b":", 1)[-1])


def usable_query(qv: list[float]) -> bool:
    """A query VSIM scores within the bound: finite, squared norm in float32's comfortable range."""
    n2 = math.fsum(x * x for x in qv)
    return bool(qv) and math.isfinite(n2) and 1e-30 < n2 < 1e30


class VsetSearch:
    """One search's state on one shard: "list" (V read), "vsim" (the VSIM pipeline), "fetch" (C
    read), "done"; ``failed`` when the search must scan instead."""

    def __init__(
        self,
        keys: StoreKeys,
        shard: int,
        eprefix: bytes,
        qv: list[float],
        keep: int,
        ann: tuple[int, int, int] | None = None,
    ) -> None:
        self.keys, self.shard, self.eprefix, self.qv, self.keep = keys, shard, eprefix, qv, keep
        self.ann = ann
        self.approx: set[bytes] = set()  # e(ns) searched in the graph (sets made with M ann[0])
        self.ann_count = keep + max(16, keep // 4)  # VSIM COUNT of an approximate search
        self.dims = len(qv)
        self.delta = (self.dims + 32) * 2.0**-21
        self.qblob = struct.pack(f"<{len(qv)}f", *qv)
        self.phase = "list"
        self.failed = False
        self.spaces: dict[bytes, tuple[int, bytes]] = {}  # e(ns) -> (ns_seq, element count)
        self.window: dict[bytes, int] = {}  # e(ns) -> the window asked next (0: none)
        self.last: dict[bytes, int] = {}  # e(ns) -> the window asked last
        self.bound: dict[bytes, float] = {}  # e(ns) -> exact-score bound of what its window left out
        self.pending: list[tuple[bytes, bytes]] = []  # candidates to fetch: (e(ns), e(key))
        self.seen: set[tuple[bytes, bytes]] = set()
        # (e(ns), e(key)) -> (score, ns_seq, item_seq, record): the live scored candidates
        self.scored: dict[tuple[bytes, bytes], tuple[float, int, int, bytes]] = {}
        self.ranked: list[tuple[float, int, int, bytes, bytes, bytes]] = []
        self.rounds = 0
        self.first = max(WINDOW_MIN, 2 * keep + 16)
        if self.first > WINDOW_MAX:
            self.failed = True

    def request(self) -> list[bytes] | None:
        if self.phase == "list":
            if self.ann is not None:  # approximate mode: sets, VSIM and records in one call
                ef = max(self.ann[2], self.ann_count)
                return [b"A", self.eprefix, str(self.dims).encode(), str(self.ann[0]).encode(),
                        str(self.ann_count).encode(), str(ef).encode(), self.qblob]
            return [b"V", self.eprefix, str(self.dims).encode()]
        if self.phase == "fetch":
            args = [b"C", str(len(self.spaces)).encode()]
            args += list(self.spaces)
            args.append(str(len(self.pending)).encode())
            for ens, ekey in self.pending:
                args += [ens, ekey]
            return args
        return None

    def feed(self, reply: Any) -> None:
        if not isinstance(reply, list) or not reply:
            raise MalformedReplyError(f"store_read replied {reply!r:.80}")
        if reply[0] == StoreSets.OK and self.phase == "list" and self.ann is not None:
            self._feed_approx(reply)
            return
        if reply[0] != StoreSets.OK and not (reply[0] == StoreSets.EXACT and self.phase == "list"):
            self.failed = True
            return
        if self.phase == "list":
            for i in range(1, len(reply), 3):
                ens, seq, count = reply[i : i + 3]
                self.spaces[ens] = (int(seq), count)
                self.window[ens] = self.first
                if self.ann is not None and set_m(count) == self.ann[0]:
                    self.approx.add(ens)
                    self.window[ens] = self.ann_count
            self.phase = "vsim" if self.spaces else "done"
            if not self.spaces:
                self.failed = True  # nothing scored under the prefix: a scan's answer (cheap)
            return
        # fetch: each candidate's record, item sequence and vectors
        if len(reply) != 1 + 3 * len(self.pending):
            raise MalformedReplyError(f"store_read replied {len(reply)} entries for {len(self.pending)} items")
        vecs = [reply[2 + 3 * i + 1] or [] for i in range(len(self.pending))]
        best = sem.best_scores(self.qv, [v[1::2] for v in vecs])
        for i, (ens, ekey) in enumerate(self.pending):
            rec, seq = reply[1 + 3 * i], reply[2 + 3 * i]
            if rec and best[i] is not None:
                self.scored[(ens, ekey)] = (float(best[i]), self.spaces[ens][0], int(float(seq)), rec)  # type: ignore[arg-type]
        self.pending = []
        self._decide()

    def _feed_approx(self, reply: list[Any]) -> None:
        """An "A" reply: the namespaces, and the items VSIM found in each (every set made with
        this store's M): scored and ranked as a "C" reply's."""
        nns = int(reply[1])
        at = 2 + 3 * nns
        if len(reply) < at or (len(reply) - at) % 5:
            raise MalformedReplyError(f"store_read replied {len(reply)} entries for {nns} namespaces")
        names = reply[2:at:3]
        for i in range(2, at, 3):
            ens, seq, count = reply[i : i + 3]
            self.spaces[ens] = (int(seq), count)
            self.approx.add(ens)
        if not self.spaces:
            self.failed = True  # nothing scored under the prefix: a scan's answer (cheap)
            self.phase = "done"
            return
        rows = reply[at:]
        best = sem.best_scores(self.qv, [(v or [])[1::2] for v in rows[4::5]])
        for j, ekey, rec, seq, sc in zip(rows[0::5], rows[1::5], rows[2::5], rows[3::5], best, strict=True):
            if sc is not None:
                ens = names[int(j) - 1]
                self.scored[(ens, ekey)] = (float(sc), self.spaces[ens][0], int(float(seq)), rec)
        self.rounds += 1
        self._decide()

    def pipe(self) -> Pipe | None:
        """The VSIM calls of this round (one pipeline, to the shard's node)."""
        if self.phase != "vsim":
            return None
        efs = self.ann[2] if self.ann else 0
        cmds = [
            ("VSIM", self.keys.vset(self.shard, ens), "FP32", self.qblob, "WITHSCORES", "COUNT", w)
            + (("EF", max(efs, w)) if ens in self.approx else ("TRUTH",))
            for ens, w in self.window.items()
            if w
        ]
        self._asked = [ens for ens, w in self.window.items() if w]
        return Pipe(cmds, self.keys.index(self.shard))

    def feed_pipe(self, replies: list[Any]) -> None:
        self.rounds += 1
        for ens, reply in zip(self._asked, replies, strict=True):
            pairs = list(reply.items()) if isinstance(reply, dict) else list(zip(reply[::2], reply[1::2], strict=True))
            w = self.last[ens] = self.window[ens]
            for elem, _ in pairs:
                ekey = elem[: dec_first(elem, 0)[1]]
                if (ens, ekey) not in self.seen:
                    self.seen.add((ens, ekey))
                    self.pending.append((ens, ekey))
            if len(pairs) < w or ens in self.approx:  # the whole set was seen; or no bound (approximate)
                self.bound.pop(ens, None)
            else:
                s = float(pairs[-1][1])
                if not math.isfinite(s):
                    self.failed = True
                    return
                self.bound[ens] = 2 * s - 1 + self.delta
        if len(self.pending) > WINDOW_MAX:
            self.failed = True
            return
        self.phase = "fetch"
        if not self.pending:
            self._decide()

    def _decide(self) -> None:
        ranked = sorted((-sc, ns_seq, item_seq) + k for k, (sc, ns_seq, item_seq, _) in self.scored.items())
        if len(ranked) >= self.keep:
            kth = -ranked[self.keep - 1][0]
            grow = [ens for ens, b in self.bound.items() if b >= kth]
        else:  # fewer scored than offset + limit so far: every window that is not whole grows
            grow = list(self.bound)
            if not grow:  # all seen: the page needs unscored items, which only a scan lists
                self.failed = True
                return
        if not grow:
            self.ranked = [(-r[0], r[1], r[2], r[3], r[4], self.scored[(r[3], r[4])][3]) for r in ranked[: self.keep]]
            self.phase = "done"
            return
        for ens in self.window:
            self.window[ens] = 0
        for ens in grow:
            w = self.window[ens] = 4 * self.last[ens]
            if w > WINDOW_MAX:
                self.failed = True
                return
        self.phase = "vsim"
