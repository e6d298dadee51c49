"""What every search path shares: the query's settings (``Query``), a candidate (``Found``)
and the merge of several shards' sorted pages (``Merge``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import Item, SearchItem, SearchOp

from ._keys import dec_ns, enc_ns
from ._records import Config, _decode, _decode_value


class Merge:
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


class Found:
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


def found(ens: bytes, ekey: bytes, rec: bytes) -> Found:
    """A candidate from its encoded namespace and key (a cache or vector set read)."""
    return Found(dec_ns(ens), dec_ns(ekey)[0], rec, [])


@dataclass(frozen=True)
class Query:
    """One search's settings, fixed when it starts; every path reads them."""

    cfg: Config
    op: SearchOp
    qv: list[float] | None  # the query's vector: a scored search
    metric: str
    eprefix: bytes
    shards: list[int]  # the shards under the prefix
    # a scored search keeps the best offset + limit; an unscored one stops at that many
    # matches (InMemoryStore filters every item under the prefix first: a comparison that
    # raises on a later item raises there, not here)
    keep: int | None
    want: int | None
    ckey: tuple[int, bytes] | None  # the vector cache's key: scored, no filter, one shard

    @classmethod
    def of(cls, cfg: Config, op: SearchOp, qv: list[float] | None) -> Query:
        scored = qv is not None
        bounded = min(op.offset, op.limit) >= 0
        keep = op.offset + op.limit if bounded else None
        shards = cfg.keys.shards_under(op.namespace_prefix)
        eprefix = enc_ns(op.namespace_prefix)
        cached = cfg.state.vcache is not None and scored and not op.filter and bool(keep) and len(shards) == 1
        return cls(
            cfg=cfg,
            op=op,
            qv=qv,
            metric=cfg.index.get("distance_type", "cosine") if cfg.index else "cosine",
            eprefix=eprefix,
            shards=shards,
            keep=keep,
            want=keep if not scored and bounded else None,
            ckey=(shards[0], eprefix) if cached else None,
        )

    def rows(self, kept: list[tuple[float | None, Found]]) -> list[SearchItem]:
        """The kept candidates as SearchItems."""
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
        return out
