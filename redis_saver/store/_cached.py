"""A search from the client's vector cache (``_vcache.py``): it applies to a search scored
without a filter on one shard whose prefix has an entry. The entry ranks the candidates in the
client; one ``store_read`` "c" call per round reads their records and checks the entry's
version token: current, the records answer; written since, the change log patches the entry
(at most ``_vcache.PATCHES`` times) and the search ranks again; not current, the entry is
dropped and the search gives way (to vector sets on a server that has them, else to the scan,
which fills the cache again)."""

from __future__ import annotations

from typing import Any

from ..core.replies import StoreCache
from . import _vcache
from ._pages import Found, Query, found


class CachedSearch:
    def __init__(self, q: Query, entry: _vcache.Entry) -> None:
        assert q.qv is not None and q.keep is not None and q.ckey is not None
        self.q, self.qv, self.keep, self.ckey = q, q.qv, q.keep, q.ckey
        self.entry = entry
        self.unversioned: int | None = None  # (the scan's: this path reads no pages)
        self.known: dict[tuple[bytes, bytes], bytes | None] = {}  # records read at the entry's token
        self.patched = 0
        self.checked = False  # a read found the entry current (or brought it up to date)
        self.token = b""  # the entry's version token the ranking holds for
        self.ranked: list[int] = []  # the scored items best first (entry positions)
        self.scores: list[float] = []
        self.sl_order: list[int] = []  # the items without vectors, in order
        self.whole = False  # whether ``ranked`` holds every scored item (else the best few)
        self.next_sc = self.next_sl = 0  # the next candidates to ask
        self.kept_sc: list[tuple[float, Found]] = []
        self.kept_sl: list[Found] = []
        # (item, its (e(ns), e(key)), score or None) of the read in flight
        self.asked: list[tuple[int, tuple[bytes, bytes], float | None]] = []
        self._rank(entry)

    def _rank(self, entry: _vcache.Entry, ranking: _vcache.Ranking | None = None) -> None:
        if ranking is not None:  # made under the lock with the patch: self.token is the one sent
            self.token = entry.token
            self.ranked, self.scores, self.sl_order, self.whole = ranking
        else:
            with entry.lock:  # the ranking and the token it holds for
                self.token = entry.token
                self.ranked, self.scores, self.sl_order, self.whole = entry.ranking(
                    self.qv, self.keep + 2 * _vcache.MARGIN, self.q.metric
                )
        self.next_sc = self.next_sl = 0
        self.kept_sc = []
        self.kept_sl = []
        self.asked = []

    def requests(self) -> list[tuple[int, list[bytes]]]:
        """The next cached read; candidates whose records this search already read at the
        entry's token (a change set brought them) are taken without one."""
        while True:
            args = self._candidates()
            if args is None or not self.asked or any(k not in self.known for _, k, _ in self.asked):
                return [(self.ckey[0], args)] if args is not None else []
            self._take([self.known[k] for _, k, _ in self.asked])

    def _candidates(self) -> list[bytes] | None:
        entry, keep, limit = self.entry, self.keep, self.q.op.limit
        asked: list[tuple[int, float | None]] = []
        want_sc = keep - len(self.kept_sc)
        if want_sc > 0 and self.next_sc + want_sc > len(self.ranked) and not self.whole:
            # more vanished than the partial ranking holds: all of it (the ones asked so far
            # lead it: those present, kept; those gone, out of it now)
            with entry.lock:
                current = entry.token == self.token
                if current:
                    self.ranked, self.scores, _, self.whole = entry.ranking(self.qv, None, self.q.metric)
            if not current:  # patched by another search meanwhile: start again from what it holds
                self.known = {}
                self._rank(entry)
                return self._candidates()
            self.next_sc = len(self.kept_sc)
        if want_sc > 0 and self.next_sc < len(self.ranked):
            end = min(len(self.ranked), self.next_sc + want_sc + _vcache.MARGIN)
            asked += [(self.ranked[j], self.scores[j]) for j in range(self.next_sc, end)]
            self.next_sc = end
        # items without vectors fill what the scored ones leave of the page (if all asked are present)
        expect = min(keep, len(self.kept_sc) + len(asked))
        want_sl = limit - max(0, expect - self.q.op.offset) - len(self.kept_sl)
        n_scored = len(asked)
        if want_sl > 0 and self.next_sl < len(self.sl_order):
            end = min(len(self.sl_order), self.next_sl + want_sl + _vcache.MARGIN)
            asked += [(self.sl_order[j], None) for j in range(self.next_sl, end)]
            self.next_sl = end
        if not asked and self.checked:
            self.asked = []
            return None
        self.asked = [(i, entry.keys[i], score) for i, score in asked]
        args = [b"c", self.token, self.q.eprefix, str(_vcache.CHANGE_BUDGET).encode()]
        args += [str(len(asked)).encode(), str(n_scored).encode()]
        for _, k, _ in self.asked:
            args += k
        return args

    def _take(self, recs: list[Any]) -> None:
        """The records of the candidates asked (None: gone), in order."""
        entry = self.entry
        for (i, (ens, ekey), score), rec in zip(self.asked, recs, strict=True):
            if rec is None:  # gone without a version bump (expired, evicted): never again
                if entry.index.get((ens, ekey)) == i:
                    entry.alive[i] = False
                continue
            f = found(ens, ekey, rec)
            if score is None:
                if len(self.kept_sl) < self.q.op.limit:
                    self.kept_sl.append(f)
            elif len(self.kept_sc) < self.keep:
                self.kept_sc.append((score, f))
        self.asked = []

    def feed(self, shard: int, reply: Any) -> bool:
        """True: the entry is not current and was dropped; the search gives way."""
        n = len(self.asked)
        ok = isinstance(reply, list) and bool(reply)
        if ok and reply[0] == StoreCache.CURRENT and len(reply) == n + 1:
            self.checked = True
            self._take(reply[1:])
            return False
        if ok and reply[0] == StoreCache.UPDATED and len(reply) == n + 3 and self.patched < _vcache.PATCHES:
            # the shard was written since the entry's token; the log brought what changed
            if self._patch(reply[1], reply[2], reply[3:]):
                return False
        vcache = self.q.cfg.state.vcache
        assert vcache is not None
        vcache.drop(self.ckey, self.entry)
        vcache.misses += 1
        return True

    def _patch(self, token: bytes, flat: list[Any], recs: list[Any]) -> bool:
        """Bring the entry up to ``token`` by the change log ``flat``; False: it cannot be."""
        vcache, entry = self.q.cfg.state.vcache, self.entry
        assert vcache is not None
        self.patched += 1
        before, new = entry.nbytes, None
        with entry.lock:
            first = len(entry.keys)
            applied = entry.token == self.token and entry.patch(token, flat)
            if applied:
                # the ranking before the patch, its items that changed out, the new ones in
                ranking = entry.reranked(self.qv, self.ranked, self.scores, self.whole, first, self.q.metric)
                if entry.wasted():
                    new = entry.compacted()
        if not applied:
            if entry.token == self.token:
                return False
            self.known = {}  # another search patched it meanwhile: rank what it holds now
            self._rank(entry)
            return True
        self.checked = True
        vcache.resized(self.ckey, entry, before, new)
        if new is not None:
            self.entry = entry = new
        # records now valid at the entry's token: the changed items' and the asked ones'
        self.known = {k: r for (_, k, _), r in zip(self.asked, recs, strict=True)}
        self.known.update(((flat[i], flat[i + 1]), flat[i + 4]) for i in range(0, len(flat), 6))
        if new is None:
            self._rank(entry, ranking)
        else:  # compacted: its items are numbered anew
            self._rank(entry)
        return True

    def result(self) -> list[tuple[float | None, Found]]:
        vcache = self.q.cfg.state.vcache
        if vcache is not None:
            vcache.hits += 1
        op = self.q.op
        kept: list[tuple[float | None, Found]] = [(sc, f) for sc, f in self.kept_sc[op.offset : op.offset + op.limit]]
        if len(kept) < op.limit:
            kept.extend((None, f) for f in self.kept_sl[: op.limit - len(kept)])
        return kept
