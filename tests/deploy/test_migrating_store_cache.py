"""RedisStore and RedisCache calls while their slot moves key by key: refused before they run
(nothing written), or run to their end; never stopped halfway.

A store call names keys it does not declare (items, their indexes), so its scripts refuse to
start while their shard's slot is MIGRATING or IMPORTING (TRYAGAIN, as Redis answers a command
whose keys are partly elsewhere); the cache's set declares every key it writes and runs where
they all are; its clear names entry keys it does not declare and refuses like the store
(docs/architecture.md, "Slots that move"). Each case holds the slot at a stage, calls straight
at the source and then at the target with ASKING, finishes the move, sends a refused call again
and compares with the same calls on a stable prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from redis_saver import RedisCache, RedisStore
from tests.deploy.helpers import new_prefix
from tests.deploy.slotmove import REFUSALS, SlotMove, key_slot
from tests.deploy.test_migrating_slots import STAGES, mclient, mcluster  # noqa: F401 (fixtures)

pytestmark = pytest.mark.cluster

NS = ("users", "a")


def _at_stage(move: SlotMove, stage: str, keys: list[bytes]) -> None:
    move.open()
    if stage == "some_moved":
        move.migrate(keys[::2])
    elif stage == "all_moved":
        move.migrate(move.keys_at(move.src))


def _each_node(move: SlotMove, make: Callable[[Any], Any], op: Callable[[Any], Any]) -> str:
    """``op`` on the source, then (refused there) on the target with ASKING: "done" or "refused",
    a refusal leaving every key of the slot on both nodes as it was."""
    for node, asking in ((move.src, False), (move.dst, True)):
        client = move.client(node, asking)
        try:
            before = move.snapshot()
            try:
                op(make(client))
                return "done"
            except REFUSALS:
                assert move.snapshot() == before
        finally:
            client.close()
    return "refused"


STORE_OPS: dict[str, Callable[[Any], Any]] = {
    "put": lambda s: s.put(NS, "k9", {"v": 9}),
    "put_ttl": lambda s: s.put(NS, "k8", {"v": 8}, ttl=5),
    "delete": lambda s: s.delete(NS, "k0"),
    "get": lambda s: s.get(NS, "k1"),
    "search": lambda s: s.search(NS, filter={"v": 2}),
}


def _store_view(s: Any) -> list[tuple[str, Any]]:
    return sorted((i.key, i.value) for i in s.search(NS, limit=100))


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("op", list(STORE_OPS))
def test_store_call_is_refused_or_completes_while_its_shard_moves(mcluster, mclient, op, stage):  # noqa: F811
    prefix, ref_prefix = new_prefix("mst"), new_prefix("msr")
    stable, ref = RedisStore(mclient, prefix=prefix, shards=1), RedisStore(mclient, prefix=ref_prefix, shards=1)
    for s in (stable, ref):
        s.setup()
        for i in range(6):
            s.put(NS, f"k{i}", {"v": i})
    move = SlotMove(mcluster, key_slot(stable.keys.index(0)))
    _at_stage(move, stage, [k for k in move.keys_at(move.src) if k.startswith(stable.keys.base(0))])
    outcome = _each_node(move, lambda c: RedisStore(c, prefix=prefix, shards=1), STORE_OPS[op])
    move.finish()
    # the store's scripts name undeclared keys: they never start while the slot moves
    assert outcome == "refused"
    STORE_OPS[op](stable)  # sent again once the slot has moved
    STORE_OPS[op](ref)
    assert _store_view(stable) == _store_view(ref)


CACHE_OPS: dict[str, Callable[[Any], Any]] = {
    "set_existing": lambda c: c.set({(NS, "k1"): ("new", None), (NS, "k2"): ("new2", 60)}),
    "set_expired_now": lambda c: c.set({(NS, "k1"): ("gone", 0), (NS, "k2"): ("gone", 0), (NS, "k3"): ("gone", 0)}),
    "clear": lambda c: c.clear([NS]),
}


def _cache_view(c: Any) -> dict[Any, Any]:
    return c.get([(NS, f"k{i}") for i in range(1, 5)])


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("op", list(CACHE_OPS))
def test_cache_call_is_refused_or_completes_while_its_slot_moves(mcluster, mclient, op, stage):  # noqa: F811
    prefix, ref_prefix = new_prefix("mca"), new_prefix("mcr")
    stable, ref = RedisCache(mclient, prefix=prefix), RedisCache(mclient, prefix=ref_prefix)
    for c in (stable, ref):
        c.set({(NS, f"k{i}"): (f"v{i}", None) for i in range(1, 4)})
    move = SlotMove(mcluster, stable.keys.slot(NS))
    _at_stage(move, stage, [k for k in move.keys_at(move.src) if k.startswith(stable.keys.base(NS))])
    outcome = _each_node(move, lambda cl: RedisCache(cl, prefix=prefix), CACHE_OPS[op])
    move.finish()
    if op != "clear" and stage in ("none_moved", "all_moved"):
        assert outcome == "done"  # every key it declares is on the node that ran it
    if outcome == "refused":
        CACHE_OPS[op](stable)
    CACHE_OPS[op](ref)
    assert _cache_view(stable) == _cache_view(ref)
    # the index holds exactly the live entries (nothing left behind by a stopped call)
    ix = [mclient.zrange(c.keys.index(NS), 0, -1) for c in (stable, ref)]
    assert ix[0] == ix[1]
