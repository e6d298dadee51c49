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
    for ns, tuples in _by_ns(mem.list(cfg(thread_id))).items():
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


PRUNE_AFTER = (4, 9, 10, 15, 19)  # turns after which the thread is pruned (0-based)
TURNS = 24


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
        ref = list(g_mem.get_state_history(config))
        assert [view(s) for s in hist] == [view(s) for s in ref[: len(hist)]]
        assert hist[-1].parent_config is None  # the oldest kept one lost its deleted parent
        mem_after = memory_usage(sync_client, thread_keys(sync_client, prefix, tid))
        assert mem_after < mem_before, (mem_before, mem_after)
        # a second prune right away deletes nothing
        keys_now = {k: sync_client.dump(k) for k in thread_keys(sync_client, prefix, tid) if not k.endswith(b":meta")}
        await call(saver, "prune", [tid])
        assert {k: sync_client.dump(k) for k in thread_keys(sync_client, prefix, tid) if not k.endswith(b":meta")} == keys_now

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
    for t in range(7):
        await invoke(g_redis, saver, turn_input(t), config)
        g_mem.invoke(turn_input(t), config)
        if t < 6:
            await invoke(g_redis, saver, Command(resume=f"r{t}"), config)
            g_mem.invoke(Command(resume=f"r{t}"), config)
            if t == 3:
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
    await invoke(g_redis, saver, turn_input(7), config)
    g_mem.invoke(turn_input(7), config)
    await invoke(g_redis, saver, Command(resume="last"), config)
    g_mem.invoke(Command(resume="last"), config)
    assert view(await get_state(g_redis, saver, config)) == view(g_mem.get_state(config))
