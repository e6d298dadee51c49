"""history="latest" at the saver level: which pending writes survive a put."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from redis_saver.core.plans import Plans
from tests.sessions._util import call, cfg, new_tid


def _cp() -> dict:
    c = empty_checkpoint()
    c["channel_values"] = {"x": 1}
    c["channel_versions"] = {"x": "1"}
    return c


async def _scenario(s, tid: str) -> list:
    """langgraph's background executor may store a task's writes before their checkpoint
    (seen with an interrupt() inside a subgraph): the writes of c3 arrive before c2 and c3."""
    base = cfg(tid)
    c1, c2, c3 = _cp(), _cp(), _cp()  # ids increase
    cfg1 = await call(s, "put", base, c1, {"step": 0}, {"x": "1"})
    await call(s, "put_writes", cfg(tid, cid=c3["id"]), [("__interrupt__", "ask")], "task-3")
    cfg2 = await call(s, "put", cfg1, c2, {"step": 1}, {"x": "1"})
    await call(s, "put", cfg2, c3, {"step": 2}, {"x": "1"})
    return (await call(s, "get_tuple", base)).pending_writes


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_writes_before_their_checkpoint_survive(kind, make_saver):
    expected = await _scenario(InMemorySaver(), "ref")
    assert expected == [("task-3", "__interrupt__", "ask")]
    s = make_saver(kind, history="latest")
    assert await _scenario(s, new_tid()) == expected


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_latest_keeps_own_and_parent_writes_only(kind, make_saver, sync_client, prefix):
    s = make_saver(kind, history="latest")
    tid = new_tid()
    c1, c2, c3 = _cp(), _cp(), _cp()
    cfg1 = await call(s, "put", cfg(tid), c1, {"step": 0}, {"x": "1"})
    await call(s, "put_writes", cfg1, [("a", 1)], "t1")
    cfg2 = await call(s, "put", cfg1, c2, {"step": 1}, {"x": "1"})
    await call(s, "put_writes", cfg2, [("b", 2)], "t2")
    cfg3 = await call(s, "put", cfg2, c3, {"step": 2}, {"x": "1"})
    await call(s, "put_writes", cfg3, [("c", 3)], "t3")
    got = await call(s, "get_tuple", cfg(tid))
    assert got.config == cfg3 and got.pending_writes == [("t3", "c", 3)]
    assert [t.config for t in await call(s, "list", cfg(tid))] == [cfg3]
    # c1's writes are gone from storage; c2's (the parent's) are kept for resuming
    from tests.lifecycle._util import write_count
    from tests.sessions._util import thread_key

    wr = write_count(sync_client, thread_key(prefix, tid, "wr"))
    assert wr == 2, wr


async def _sub_scenario(s, tid: str):
    """The subgraph (running under root checkpoint c3) is stored before root c2 and c3 arrive
    (langgraph's background executor; seen ~1 in 1000 turns of an interrupt-in-subgraph graph)."""
    root, sub = cfg(tid), cfg(tid, "review:task1")
    c1, c2, c3, s1 = _cp(), _cp(), _cp(), _cp()  # ids increase
    cfg1 = await call(s, "put", root, c1, {"step": 0, "parents": {}}, {"x": "1"})
    await call(s, "put", sub, s1, {"step": 1, "parents": {"": c3["id"]}}, {"x": "1"})
    await call(s, "put_writes", cfg(tid, "review:task1", s1["id"]), [("__interrupt__", "ask")], "t")
    cfg2 = await call(s, "put", cfg1, c2, {"step": 1, "parents": {}}, {"x": "1"})
    await call(s, "put", cfg2, c3, {"step": 2, "parents": {}}, {"x": "1"})
    t = await call(s, "get_tuple", sub)
    return t and (t.checkpoint["id"] == s1["id"], t.pending_writes)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_subgraph_of_newer_root_checkpoint_survives(kind, make_saver):
    expected = await _sub_scenario(InMemorySaver(), "ref")
    assert expected == (True, [("t", "__interrupt__", "ask")])
    assert await _sub_scenario(make_saver(kind, history="latest"), new_tid()) == expected


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_subgraph_of_older_root_checkpoint_dropped(kind, make_saver):
    """The other side: a subgraph namespace that ran under an older root checkpoint goes."""
    s = make_saver(kind, history="latest")
    tid = new_tid()
    c1, s1, c2, c3 = _cp(), _cp(), _cp(), _cp()
    cfg1 = await call(s, "put", cfg(tid), c1, {"step": 0, "parents": {}}, {"x": "1"})
    await call(s, "put", cfg(tid, "review:old"), s1, {"step": 0, "parents": {"": c1["id"]}}, {"x": "1"})
    cfg2 = await call(s, "put", cfg1, c2, {"step": 1, "parents": {}}, {"x": "1"})
    await call(s, "put", cfg2, c3, {"step": 2, "parents": {}}, {"x": "1"})
    listed = await call(s, "list", {"configurable": {"thread_id": tid}})
    assert [t.config["configurable"]["checkpoint_ns"] for t in listed] == [""]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_latest_on_a_large_full_history_thread_cleans_in_bounded_calls(
    kind, make_saver, sync_client, prefix, monkeypatch
):
    """A thread written with history="full" (300 checkpoints, over put.lua's 256) and then
    continued with history="latest": the put stores the new checkpoint, leaves the old ones to
    a paged prune (each call bounded) instead of dropping 300 in one script, and the thread
    ends latest-only. That one transition follows prune(keep_latest): the latest and its
    delta chain with their writes (here the latest alone, so the parent's writes go too)."""
    full = make_saver("sync")
    tid = new_tid()
    c = cfg(tid)
    for i in range(300):
        c = full.put(c, _cp(), {"step": i}, {"x": "1"})
        full.put_writes(c, [("w", i)], f"t{i}")
    s = make_saver(kind, history="latest")
    paged: list[str] = []
    prune_paged = Plans._plan_prune_paged

    def spy(plans, thread_id):  # the plan the put's reply 2 leads to: bounded steps, not one script
        paged.append(thread_id)
        return prune_paged(plans, thread_id)

    monkeypatch.setattr(Plans, "_plan_prune_paged", spy)
    last = await call(s, "put", c, _cp(), {"step": 300}, {"x": "1"})
    assert paged == [tid]
    got = await call(s, "get_tuple", cfg(tid))
    assert got.config == last and got.pending_writes == []
    assert [t.config for t in await call(s, "list", cfg(tid))] == [last]
    from tests.lifecycle._util import write_count
    from tests.sessions._util import thread_key

    assert write_count(sync_client, thread_key(prefix, tid, "wr")) == 0
