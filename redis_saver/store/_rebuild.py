"""Rebuilding the vector sets of namespaces that are out of them (``lua/store_rebuild.lua``).

A namespace is out of vector sets when its set went incomplete (its set or count evicted or
deleted, a writer with ``vector_sets=False``, a vector the set cannot hold) or when it was made
before sets existed; its semantic searches scan. ``RedisStore.rebuild_vector_sets(prefix)``
(and the CLI's ``redis-saver store reindex``) brings it back: one ``store_rebuild`` call a page
of at most ``budget`` vectors (VADD only, bounded), resumable from the cursor the namespace's
count keeps, while writers keep the set in step. When the last page is in, the count equals
``VCARD`` and searches use the set again. A rebuild that something made incomplete meanwhile
ends with the namespace still out ("ended"); calling again starts a new one.

Who starts it: the caller, explicitly (an operator's command after an eviction or an upgrade, or
a job). Searches do not: a search that falls back to the scan pays seconds at 100k items already,
and pages of a rebuild inside it would make its latency depend on the namespace's size.
"""

from __future__ import annotations

import os
from typing import Any

from ..core.plans import Call, Plan
from ..core.replies import StoreRebuild
from ..errors import MalformedReplyError
from . import _budgets as B
from ._keys import STORE_FORMAT, dec_ns, enc_ns, vset_format
from ._records import Config

BUDGET = 512  # vectors a store_rebuild call adds at most (lua/store_rebuild.lua: 1-4096)


def new_token() -> str:
    return os.urandom(8).hex()


def namespaces_plan(cfg: Config, prefix: tuple[str, ...]) -> Plan[list[tuple[int, bytes]]]:
    """(shard, e(ns)) of every namespace under ``prefix`` (store_read "l" pages)."""
    e = enc_ns(prefix)
    lo, hi = (b"[" + e, b"(" + e + b"\xff") if prefix else (b"-", b"+")
    found: list[tuple[int, bytes]] = []
    for shard in cfg.keys.shards_under(prefix):
        cursor = lo
        while True:
            page = str(B.REBUILD_LIST_PAGE).encode()
            args: list[bytes | str | int] = [STORE_FORMAT, b"0", b"1", b"l", cursor, hi, page]
            reply = yield Call("store_read", [cfg.keys.index(shard)], args)
            names, last = reply[0]
            found += [(shard, ens) for ens in names]
            if not last:
                break
            cursor = b"(" + last
    return found


def page_call(
    cfg: Config, shard: int, ens: bytes, token: str, start: bool, budget: int, hnsw: tuple[int, int] | None = None
) -> Call:
    args: list[bytes | str | int] = [vset_format(hnsw), ens, token, b"1" if start else b"0", str(budget).encode()]
    return Call("store_rebuild", [cfg.keys.index(shard)], args)


def parse_page(reply: Any) -> tuple[str, str, int]:
    """(status, token, elements) of a store_rebuild reply."""
    if not isinstance(reply, list) or len(reply) != 3:
        raise MalformedReplyError(f"store_rebuild replied {reply!r:.80}")
    status, token, n = reply
    return status.decode(), token.decode(), int(n)


def rebuild_plan(
    cfg: Config, prefix: tuple[str, ...], budget: int = BUDGET, hnsw: tuple[int, int] | None = None
) -> Plan[dict[tuple[str, ...], str]]:
    """Rebuild the set of every namespace under ``prefix`` that is out of sets, a page per call;
    returns each namespace's outcome: "done" (its set is complete), "ended" (something made it
    incomplete meanwhile: still out), "none" (no items left). ``hnsw`` (M, ef_construction;
    default: the store's ``ann_index_config``, if any): sets are made with them, and complete
    sets made with others are made again (searches scan them meanwhile)."""
    if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= 4096:
        raise ValueError(f"budget must be an int from 1 to 4096, got {budget!r}")
    if hnsw is None and cfg.ann is not None:
        hnsw = cfg.ann[:2]
    elif hnsw is not None:
        from ._vset import ann_config

        checked = ann_config({"kind": "hnsw", "m": hnsw[0], "ef_construction": hnsw[1]})
        assert checked is not None  # kind "hnsw"
        hnsw = checked[:2]
    out: dict[tuple[str, ...], str] = {}
    for shard, ens in (yield from namespaces_plan(cfg, prefix)):
        token, start = new_token(), True
        while True:
            status, token, _ = parse_page((yield page_call(cfg, shard, ens, token, start, budget, hnsw)))
            start = False
            if status != StoreRebuild.MORE:
                break
        out[dec_ns(ens)] = status
    return out
