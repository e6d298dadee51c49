"""prune over many threads in one call, unknown threads, strategy="delete", and bad input (nothing written)."""

from __future__ import annotations

import uuid

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from tests.lifecycle._util import (
    alist,
    blob_fields,
    call,
    cfg,
    dump_prefix,
    get_state,
    invoke,
    referenced_blob_fields,
    thread_key_prefix,
    thread_keys,
    view,
    write_count,
)
from tests.lifecycle.graphs import build, turn_input
from tests.lifecycle.test_prune_graph import expected_kept_steps, redis_kept_steps


async def _threads(saver, n: int):
    mem = InMemorySaver()
    g, gm = build(saver), build(mem)
    tids = [f"many-{i}-{uuid.uuid4().hex[:6]}" for i in range(n)]
    for i, tid in enumerate(tids):
        for t in range(2 + i):  # different lengths: different distances to the last snapshot
            await invoke(g, saver, turn_input(t), cfg(tid))
            gm.invoke(turn_input(t), cfg(tid))
    return g, gm, mem, tids


async def test_prune_many_threads_one_call(saver, sync_client, prefix):
    g, gm, mem, tids = await _threads(saver, 5)
    bystander = tids.pop()
    bystander_keys = dump_prefix(sync_client, prefix, only=thread_key_prefix(prefix, bystander))
    before = {tid: view(await get_state(g, saver, cfg(tid))) for tid in tids}

    await call(saver, "prune", [*tids, "no-such-thread", tids[0]], strategy="keep_latest")

    for tid in tids:
        assert view(await get_state(g, saver, cfg(tid))) == before[tid] == view(gm.get_state(cfg(tid)))
        assert await redis_kept_steps(saver, tid) == expected_kept_steps(mem, tid)
    assert dump_prefix(sync_client, prefix, only=thread_key_prefix(prefix, bystander)) == bystander_keys
    assert not thread_keys(sync_client, prefix, "no-such-thread")
    # they all continue correctly
    for i, tid in enumerate(tids):
        await invoke(g, saver, turn_input(10 + i), cfg(tid))
        gm.invoke(turn_input(10 + i), cfg(tid))
        assert view(await get_state(g, saver, cfg(tid))) == view(gm.get_state(cfg(tid)))


@pytest.mark.parametrize("strategy", ["delete", "delete_all"])  # delete_all: the LangGraph API server's name
async def test_prune_delete_many_threads(saver, sync_client, prefix, strategy):
    g, _, _, tids = await _threads(saver, 4)
    doomed, kept = tids[:3], tids[3]
    kept_state = view(await get_state(g, saver, cfg(kept)))
    await call(saver, "prune", doomed, strategy=strategy)
    for tid in doomed:
        assert not thread_keys(sync_client, prefix, tid)
        assert await alist(saver, cfg(tid)) == []
        assert await call(saver, "get_tuple", cfg(tid)) is None
    assert view(await get_state(g, saver, cfg(kept))) == kept_state
    # the cross-thread view forgot them too
    assert {t.config["configurable"]["thread_id"] for t in await alist(saver, None)} == {kept}
    # and a deleted thread id starts afresh
    await invoke(g, saver, turn_input(0), cfg(doomed[0]))
    assert len((await get_state(g, saver, cfg(doomed[0]))).values["messages"]) == 4


@pytest.mark.parametrize("strategy", ["keep_latest", "delete"])
async def test_prune_unknown_thread_writes_nothing(saver, sync_client, prefix, strategy):
    g, _, _, tids = await _threads(saver, 1)
    snap = dump_prefix(sync_client, prefix)
    await call(saver, "prune", ["ghost", "", "x{y}%"], strategy=strategy)
    await call(saver, "prune", [], strategy=strategy)
    assert dump_prefix(sync_client, prefix) == snap


@pytest.mark.parametrize(
    "args, kwargs, exc",
    [
        (("abc",), {}, TypeError),
        ((b"abc",), {}, TypeError),
        (("abc",), {"strategy": "delete"}, TypeError),
        ((["THREAD"],), {"strategy": "nope"}, ValueError),
        ((["THREAD"],), {"strategy": "Keep_Latest"}, ValueError),
        ((["THREAD", "ghost"],), {"strategy": ""}, ValueError),
    ],
)
async def test_prune_bad_input_writes_nothing(saver, sync_client, prefix, args, kwargs, exc):
    g, _, _, (tid,) = await _threads(saver, 1)
    args = tuple([tid if a == "THREAD" else a for a in x] if isinstance(x, list) else x for x in args)
    snap = dump_prefix(sync_client, prefix)
    assert len(snap) > 3
    with pytest.raises(exc):
        await call(saver, "prune", *args, **kwargs)
    assert dump_prefix(sync_client, prefix) == snap


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_prune_many_is_one_round_of_scripts(kind, wire, wire_saver):
    """One FCALL per thread (pipelined), nothing else."""
    saver = wire_saver(kind)
    g = build(saver)
    tids = [f"w{i}" for i in range(5)]
    for tid in tids:
        for t in range(3):
            await invoke(g, saver, turn_input(t), cfg(tid))
    wire.reset()
    await call(saver, "prune", tids)
    assert wire.names() == ["FCALL"] * len(tids)


async def test_prune_drops_orphan_writes_and_unreferenced_blobs(saver, sync_client, prefix):
    """Direct put/put_writes: writes of pruned checkpoints, and writes stored against an older
    checkpoint id that does not exist, are gone after prune; writes stored against a *newer* id
    (put_writes may precede its checkpoint's put) stay and show up once that checkpoint is put.
    Every remaining blob is referenced exactly by the checkpoints that remain."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    tid = "orphans"
    base = {"thread_id": tid, "checkpoint_ns": ""}
    old_ghost = str(uuid6(clock_seq=99))  # sorts before every checkpoint below
    ids = [str(uuid6(clock_seq=i)) for i in range(6)]  # ids[5]: put only after the prune
    await call(saver, "put_writes", {"configurable": {**base, "checkpoint_id": old_ghost}}, [("a", "old")], "t", "")
    await call(saver, "put_writes", {"configurable": {**base, "checkpoint_id": ids[5]}}, [("a", "early")], "t5", "")
    parent = None
    version = None

    async def put(i):
        nonlocal parent, version
        cp = empty_checkpoint()
        cp["id"] = ids[i]
        version = saver.get_next_version(version, None)
        cp["channel_values"] = {"a": f"value {i}", "b": "same"} if i == 0 else {"a": f"value {i}"}
        cp["channel_versions"] = {"a": version, "b": "00000000000000000000000000000001.0"}
        new = dict(cp["channel_versions"]) if i == 0 else {"a": version}
        conf = {"configurable": {**base, **({"checkpoint_id": parent} if parent else {})}}
        await call(saver, "put", conf, cp, {"step": i}, new)
        parent = cp["id"]

    for i in range(5):
        await put(i)
        await call(saver, "put_writes", {"configurable": {**base, "checkpoint_id": ids[i]}}, [("a", i)], f"task{i}", "")
    tp = thread_key_prefix(prefix, tid)
    assert write_count(sync_client, tp + b"wr") == 7 and len(blob_fields(sync_client, tp + b"blob")) == 6

    await call(saver, "prune", [tid])

    (latest,) = await alist(saver, cfg(tid))
    assert latest.checkpoint["id"] == ids[4] and latest.parent_config is None
    assert latest.checkpoint["channel_values"] == {"a": "value 4", "b": "same"}
    assert [w[1:] for w in latest.pending_writes] == [("a", 4)]
    # kept: the latest's write and the early write of the future checkpoint
    assert write_count(sync_client, tp + b"wr") == sync_client.zcard(tp + b"wr_ord") == 2
    # blobs: a@latest and b (carried over from the first, now deleted, checkpoint)
    assert len(blob_fields(sync_client, tp + b"blob")) == 2
    assert blob_fields(sync_client, tp + b"blob") == referenced_blob_fields(sync_client, tp)

    await put(5)
    tup = await call(saver, "get_tuple", cfg(tid))
    assert tup.checkpoint["id"] == ids[5]
    assert [w[1:] for w in tup.pending_writes] == [("a", "early")]
