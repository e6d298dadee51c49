"""prune(keep_latest) on real graphs: a DeltaChannel (snapshot every 3 updates), add_messages and a
subgraph (its own checkpoint namespace per call), many turns, on both savers.

What prune must keep, exactly (lua/prune.lua; BaseCheckpointSaver.prune's DeltaChannel note): per
namespace, the latest checkpoint plus its ancestors back to the nearest one whose
``channel_values`` holds a value for every DeltaChannel the latest needs (a channel in its
``counters_since_delta_snapshot`` with a version but no stored value), or the whole chain when no
ancestor holds one. That is not ``snapshot_frequency + 1``: a non-snapshot checkpoint still holds
the channel when its version did not move since a snapshot, and supersteps that do not write the
channel lengthen the walk without counting towards ``snapshot_frequency``. The only general bound
is the metadata counter: kept <= supersteps-since-snapshot + 1. The expected kept set is computed
by that walk on an unpruned InMemorySaver run of the same inputs.
"""

from __future__ import annotations

import uuid
from collections import defaultdict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from tests.lifecycle._util import (
    alist,
    call,
    cfg,
    get_state,
    invoke,
    is_async,
    memory_usage,
    state_history,
    thread_keys,
    view,
)
from tests.lifecycle.graphs import build, turn_input

DELTA = ("items",)


def _by_ns(tuples) -> dict[str, list]:
    out: dict[str, list] = defaultdict(list)
    for t in tuples:
        out[t.config["configurable"]["checkpoint_ns"]].append(t)
    return out


def expected_kept_steps(mem: InMemorySaver, thread_id: str) -> tuple[list[int], list[list[int]]]:
    """The walk prune(keep_latest) must keep, per namespace (as step numbers, newest first),
    on the unpruned reference: (root chain, sorted list of the subgraph namespaces' chains)."""
    root: list[int] = []
    subs: list[list[int]] = []
    for ns in _by_ns(mem.list(cfg(thread_id))):
        latest = mem.get_tuple(cfg(thread_id, checkpoint_ns=ns))
        cp = latest.checkpoint
        counters = latest.metadata.get("counters_since_delta_snapshot") or {}
        need = {c for c in counters if c in cp["channel_versions"] and c not in cp["channel_values"]}
        steps = [latest.metadata["step"]]
        if need:
            # the walk never needs more than supersteps-since-snapshot ancestors
            bound = max(counters[c][1] for c in need)
        cur = latest
        while need and cur.parent_config is not None:
            cur = mem.get_tuple(cur.parent_config)
            steps.append(cur.metadata["step"])
            need -= set(cur.checkpoint["channel_values"])
        if len(steps) > 1:
            assert len(steps) <= bound + 1
        if ns == "":
            root = steps
        else:
            subs.append(steps)
    return root, sorted(subs)


async def redis_kept_steps(saver, thread_id: str) -> tuple[list[int], list[list[int]]]:
    root: list[int] = []
    subs: list[list[int]] = []
    for ns, tuples in _by_ns(await alist(saver, cfg(thread_id))).items():
        steps = [t.metadata["step"] for t in tuples]  # list() is newest first
        if ns == "":
            root = steps
        else:
            subs.append(steps)
    return root, sorted(subs)


PRUNE_AFTER = (4, 9, 10, 15)  # turns after which the thread is pruned (0-based)
TURNS = 20


async def test_prune_keep_latest_many_turns_with_subgraph(saver, sync_client, prefix):
    tid = f"life-{uuid.uuid4().hex[:8]}"
    config = cfg(tid)
    mem = InMemorySaver()
    g_mem, g_redis = build(mem), build(saver)

    root_lengths = []
    for t in range(TURNS):
        await invoke(g_redis, saver, turn_input(t), config)
        g_mem.invoke(turn_input(t), config)
        if t not in PRUNE_AFTER:
            continue
        before = await get_state(g_redis, saver, config)
        assert view(before) == view(g_mem.get_state(config))
        keys_before = thread_keys(sync_client, prefix, tid)
        mem_before = memory_usage(sync_client, keys_before)
        n_before = len(await alist(saver, config))

        await call(saver, "prune", [tid], strategy="keep_latest")

        after = await get_state(g_redis, saver, config)
        assert view(after) == view(before)
        assert after.config["configurable"]["checkpoint_id"] == before.config["configurable"]["checkpoint_id"]
        # exactly the chain the DeltaChannel needs survives, in every namespace
        exp_root, exp_subs = expected_kept_steps(mem, tid)
        got_root, got_subs = await redis_kept_steps(saver, tid)
        assert got_root == exp_root
        assert got_subs == exp_subs
        assert len(await alist(saver, config)) < n_before
        root_lengths.append(len(got_root))
        # every kept checkpoint still reconstructs the same state as the reference
        hist = await state_history(g_redis, saver, config)
        ref = list(g_mem.get_state_history(config, limit=len(hist)))
        assert [view(s) for s in hist] == [view(s) for s in ref]
        assert hist[-1].parent_config is None  # the oldest kept one lost its deleted parent
        await _assert_delta_history_is_default_walk(saver, config)
        mem_after = memory_usage(sync_client, thread_keys(sync_client, prefix, tid))
        assert mem_after < mem_before, (mem_before, mem_after)
        # a second prune right away deletes nothing
        keys_now = {k: sync_client.dump(k) for k in thread_keys(sync_client, prefix, tid) if not k.endswith(b":meta")}
        await call(saver, "prune", [tid])
        keys_after = {k: sync_client.dump(k) for k in thread_keys(sync_client, prefix, tid) if not k.endswith(b":meta")}
        assert keys_after == keys_now

    # the walk was exercised beyond the trivial "latest is a snapshot" case
    assert max(root_lengths) > 1, root_lengths
    assert len(set(root_lengths)) > 1, root_lengths
    final = await get_state(g_redis, saver, config)
    assert view(final) == view(g_mem.get_state(config))
    assert len(final.values["items"]) > 20


@pytest.mark.parametrize("where", ["root", "sub"])
async def test_pending_interrupt_survives_prune(saver, where):
    tid = f"intr-{uuid.uuid4().hex[:8]}"
    config = cfg(tid)
    mem = InMemorySaver()
    g_mem, g_redis = build(mem, interrupt_in=where), build(saver, interrupt_in=where)
    for t in range(5):
        await invoke(g_redis, saver, turn_input(t), config)
        g_mem.invoke(turn_input(t), config)
        if t < 4:
            await invoke(g_redis, saver, Command(resume=f"r{t}"), config)
            g_mem.invoke(Command(resume=f"r{t}"), config)
            if t == 2:
                await call(saver, "prune", [tid])
    before = await get_state(g_redis, saver, config)
    assert before.next and before.interrupts
    assert view(before) == view(g_mem.get_state(config))
    before_sub = await get_state(g_redis, saver, config, subgraphs=True)

    await call(saver, "prune", [tid], strategy="keep_latest")

    after = await get_state(g_redis, saver, config)
    assert view(after) == view(before)
    after_sub = await get_state(g_redis, saver, config, subgraphs=True)
    assert [view(t.state) for t in after_sub.tasks if t.state] == [view(t.state) for t in before_sub.tasks if t.state]

    out = await invoke(g_redis, saver, Command(resume="final"), config)
    ref = g_mem.invoke(Command(resume="final"), config)
    assert out == ref
    assert view(await get_state(g_redis, saver, config)) == view(g_mem.get_state(config))
    assert any(m.content == "answer final" for m in ref["messages"])
    # and the thread keeps going
    await invoke(g_redis, saver, turn_input(5), config)
    g_mem.invoke(turn_input(5), config)
    await invoke(g_redis, saver, Command(resume="last"), config)
    g_mem.invoke(Command(resume="last"), config)
    assert view(await get_state(g_redis, saver, config)) == view(g_mem.get_state(config))


async def _assert_delta_history_is_default_walk(saver, config) -> None:
    from tests.lifecycle._util import base_delta_history

    got = await call(saver, "get_delta_channel_history", config=config, channels=list(DELTA))
    assert got == await base_delta_history(saver, config=config, channels=list(DELTA))


async def test_prune_exit_durability(saver):
    """durability="exit": one checkpoint per run, DeltaChannel writes saved at exit under
    synthetic task ids; the chain prune keeps still reconstructs the state."""
    tid = f"exit-{uuid.uuid4().hex[:8]}"
    config = cfg(tid)
    mem = InMemorySaver()
    g_mem, g_redis = build(mem), build(saver)

    async def turn(t):
        if is_async(saver):
            await g_redis.ainvoke(turn_input(t), config, durability="exit")
        else:
            g_redis.invoke(turn_input(t), config, durability="exit")
        g_mem.invoke(turn_input(t), config, durability="exit")

    lengths = []
    for t in range(9):
        await turn(t)
        if t in (4, 5, 8):
            before = await get_state(g_redis, saver, config)
            await call(saver, "prune", [tid])
            assert view(await get_state(g_redis, saver, config)) == view(before) == view(g_mem.get_state(config))
            exp_root, exp_subs = expected_kept_steps(mem, tid)
            got_root, got_subs = await redis_kept_steps(saver, tid)
            assert (got_root, got_subs) == (exp_root, exp_subs)
            lengths.append(len(got_root))
            await _assert_delta_history_is_default_walk(saver, config)
    assert max(lengths) > 1
    assert view(await get_state(g_redis, saver, config)) == view(g_mem.get_state(config))


async def test_prune_after_time_travel_fork(saver):
    """The latest checkpoint is on a branch forked from an old checkpoint: prune follows the
    branch's parent chain (not list order) and drops the abandoned branch."""
    tid = f"fork-{uuid.uuid4().hex[:8]}"
    config = cfg(tid)
    mem = InMemorySaver()
    g_mem, g_redis = build(mem), build(saver)
    for t in range(6):
        await invoke(g_redis, saver, turn_input(t), config)
        g_mem.invoke(turn_input(t), config)

    def fork_point(hist):
        # an old root checkpoint between turns (nothing pending), 3 turns back
        done = [s for s in hist if not s.next]
        return done[3]

    r_hist = await state_history(g_redis, saver, config)
    m_hist = list(g_mem.get_state_history(config))
    r_fork, m_fork = fork_point(r_hist), fork_point(m_hist)
    assert view(r_fork) == view(m_fork)
    # replay from the old checkpoint with a new input: a branch
    await invoke(g_redis, saver, turn_input(100), r_fork.config)
    g_mem.invoke(turn_input(100), m_fork.config)
    await invoke(g_redis, saver, turn_input(101), config)
    g_mem.invoke(turn_input(101), config)
    before = await get_state(g_redis, saver, config)
    assert view(before) == view(g_mem.get_state(config))
    assert "in100" in before.values["items"] and "in4" not in before.values["items"]

    await call(saver, "prune", [tid])

    assert view(await get_state(g_redis, saver, config)) == view(before)
    exp_root, exp_subs = expected_kept_steps(mem, tid)
    got_root, got_subs = await redis_kept_steps(saver, tid)
    assert (got_root, got_subs) == (exp_root, exp_subs)
    await _assert_delta_history_is_default_walk(saver, config)
    await invoke(g_redis, saver, turn_input(102), config)
    g_mem.invoke(turn_input(102), config)
    assert view(await get_state(g_redis, saver, config)) == view(g_mem.get_state(config))
