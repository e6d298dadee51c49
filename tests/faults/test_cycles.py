"""Parent cycles: refused where they can be seen (a checkpoint naming itself as parent), and
where they are stored anyway (two puts naming each other), every walk of the chain ends with
ParentCycleError instead of running forever inside Redis (which would block every client).

Each walk is checked both in one call and paged over many calls (budgets of 1-3), where the
cycle is longer than one call's walk and only the client can see it."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

import redis_saver.core.plans.budgets as plans
from redis_saver import ParentCycleError
from tests.lifecycle._util import call

BUDGETS = [None, {"WALK_BUDGET": 1, "WORK_BUDGET": 2}, {"WALK_BUDGET": 3, "WORK_BUDGET": 3}]


def _cfg(thread: str, parent: str | None = None) -> dict:
    conf = {"thread_id": thread, "checkpoint_ns": ""}
    if parent is not None:
        conf["checkpoint_id"] = parent
    return {"configurable": conf}


def _cp(cid: str, step: int) -> dict:
    cp = empty_checkpoint()
    cp["id"] = cid
    v = f"{step + 1:032}.0"
    cp["channel_versions"] = {"d": v, "x": v}
    cp["channel_values"] = {"x": step}
    return cp


async def _put(saver, thread: str, cid: str, parent: str | None, step: int) -> None:
    md = {"step": step, "source": "loop", "counters_since_delta_snapshot": {"d": step}}
    cp = _cp(cid, step)
    await call(saver, "put", _cfg(thread, parent), cp, md, dict(cp["channel_versions"]))
    await call(saver, "put_writes", _cfg(thread, cid), [("d", step)], f"task{step}")


async def test_self_parent_is_refused_and_writes_nothing(saver, sync_client, prefix):
    cp = empty_checkpoint()
    with pytest.raises(ValueError, match="own parent"):
        await call(saver, "put", _cfg("t", cp["id"]), cp, {}, {})
    assert list(sync_client.scan_iter(match=saver.keys.scan_pattern())) == []


@pytest.mark.parametrize("framed", [False, True], ids=["format-6", "framed"])
def test_self_parent_record_is_refused_by_the_script(sync_client, prefix, framed):
    """A client that skips the Python validation (an older or hand-written one) is refused by
    put.lua itself before its first write, whichever encoding its record has."""
    from redis_saver import RedisSaver
    from redis_saver.core import codec

    saver = RedisSaver(sync_client, prefix=prefix)
    cp = empty_checkpoint()
    plan = saver._plans._plan_put(_cfg("t"), cp, {}, {})
    c = next(plan)
    args = list(c.args)
    args[6] = cp["id"]  # ARGV[7] parent id
    # the record's parent (its first part) too: rebuild it with the same id
    parts = codec.checkpoint_head(args[7])
    parts[0] = cp["id"].encode()
    if framed:  # as formats 3-5 framed it
        args[7] = codec.pack([p if isinstance(p, bytes) else codec.pack(p) for p in parts])
    else:
        args[7] = codec.checkpoint_record(parts)
    args[10] = cp["id"].encode() + b"\0" + args[10][1:]  # the chain entry starts with e(parent)
    with pytest.raises(ValueError, match="own parent"):
        saver._driver.call(type(c)(c.script, c.keys, args))
    assert list(sync_client.scan_iter(match=saver.keys.scan_pattern())) == []


@pytest.mark.parametrize("budgets", BUDGETS, ids=["one-call", "budget-1", "budget-3"])
@pytest.mark.parametrize("length", [2, 7])
async def test_stored_cycle_ends_every_walk_with_an_error(saver, sync_client, monkeypatch, budgets, length):
    for name, value in (budgets or {}).items():
        monkeypatch.setattr(plans, name, value)
    root, *ids = sorted(str(uuid6(clock_seq=i)) for i in range(length + 1))
    # a root first (a new thread whose first checkpoint names a parent reads as damaged: its
    # keys were lost), then each names the next as its parent and the last names the first
    await _put(saver, "t", root, None, 0)
    for i, cid in enumerate(ids):
        await _put(saver, "t", cid, ids[(i + 1) % length], i + 1)
    with pytest.raises(ParentCycleError, match="returns to"):
        await call(saver, "get_delta_channel_history", config=_cfg("t"), channels=["d"])
    with pytest.raises(ParentCycleError):
        await call(saver, "get_delta_channel_history", config=_cfg("t", ids[0]), channels=["d", "y"])
    with pytest.raises(ParentCycleError):
        await call(saver, "prune", ["t"])
    # the server was never blocked and the thread is intact: reads still work, the
    # operator can remove it
    tup = await call(saver, "get_tuple", _cfg("t"))
    assert tup.config["configurable"]["checkpoint_id"] == ids[-1]
    assert sync_client.ping()
    await call(saver, "delete_thread", "t")
    assert await call(saver, "get_tuple", _cfg("t")) is None


@pytest.mark.parametrize("budgets", BUDGETS, ids=["one-call", "budget-1", "budget-3"])
async def test_a_long_chain_is_walked_exactly_in_bounded_calls(saver, monkeypatch, budgets):
    """No cycle: paged walks give the same answer as one call (the seed, every write)."""
    for name, value in (budgets or {}).items():
        monkeypatch.setattr(plans, name, value)
    ids = [str(uuid6(clock_seq=i)) for i in range(9)]
    parent = None
    for i, cid in enumerate(ids):
        await _put(saver, "t", cid, parent, i)
        parent = cid
    h = await call(saver, "get_delta_channel_history", config=_cfg("t"), channels=["d", "x"])
    # "d" never holds a value: every ancestor's write, oldest first; "x" is seeded by the parent
    assert h["d"] == {"writes": [(f"task{i}", "d", i) for i in range(8)]}
    assert h["x"] == {"seed": 7, "writes": []}
    # prune keeps the latest and its whole delta chain ("d" is never seeded): nothing goes
    await call(saver, "prune", ["t"])
    assert len([t async for t in _alist(saver)]) == 9


async def _alist(saver):
    from tests.lifecycle._util import alist

    for t in await alist(saver, _cfg("t")):
        yield t


async def test_prune_finds_a_cycle_in_any_namespace_before_writing(saver, sync_client):
    """A thread pruned in one call is walked whole before anything is deleted: a cycle in a
    later namespace leaves the earlier ones as they were, not pruned halfway."""

    async def put(ns: str, cid: str, parent: str | None, step: int) -> None:
        conf = {**_cfg("t", parent)["configurable"], "checkpoint_ns": ns}
        md: dict = {"step": step, "source": "loop"}
        if ns:  # its checkpoints need "d" from their ancestors: the walk goes up the cycle
            md["counters_since_delta_snapshot"] = {"d": step}
        cp = _cp(cid, step)
        await call(saver, "put", {"configurable": conf}, cp, md, dict(cp["channel_versions"]))

    ids = sorted(str(uuid6(clock_seq=i)) for i in range(6))
    for i, cid in enumerate(ids[:3]):  # namespace "" (walked first): prune would drop two
        await put("", cid, ids[i - 1] if i else None, i)
    await put("z", ids[3], None, 0)  # namespace "z": a root, then a cycle above it
    await put("z", ids[4], ids[5], 1)
    await put("z", ids[5], ids[4], 2)
    keys = saver.keys.thread_keys("t")
    before = {k: sync_client.dump(k) for k in keys}
    with pytest.raises(ParentCycleError):
        await call(saver, "prune", ["t"])
    assert {k: sync_client.dump(k) for k in keys} == before
