"""Exactly one Redis command per operation in steady state, counted on the wire.

put, put_writes, get_tuple (latest and by id), list (one page), delete_thread, prune of one
thread, delete_for_runs within ... and get_delta_channel_history are each one FCALL once the
function library is loaded (one EVALSHA with ``functions=False``); after FUNCTION FLUSH the
first call costs FCALL + FUNCTION LOAD + FCALL, after SCRIPT FLUSH (``functions=False``)
EVALSHA + EVAL.
"""

from __future__ import annotations

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata

from devkit.wire import SETUP_COMMANDS


def _ops(wire) -> list[str]:
    return [n for n in wire.names() if n not in SETUP_COMMANDS]


async def _chain(saver, tid: str, n: int) -> list[dict]:
    cfgs, parent = [], generate_config(tid)
    for i in range(n):
        cp = generate_checkpoint(channel_values={"x": i, "y": "same"}, channel_versions={"x": str(i + 1), "y": "1"})
        md = generate_metadata(step=i, run_id=f"run-{i % 2}")
        parent = await saver.aput(parent, cp, md, {"x": str(i + 1), "y": "1"})
        await saver.aput_writes(parent, [("x", i), ("y", "w")], f"task-{i}", "path")
        cfgs.append(parent)
    return cfgs


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("functions", [True, False])
async def test_each_operation_is_one_script_call(kind, functions, wire, wire_saver):
    saver = wire_saver(kind, functions=functions)
    await saver.asetup()  # loads the scripts: later calls are steady state
    one = ["FCALL"] if functions else ["EVALSHA"]
    tid = "one{call}:*?[]"
    cfgs = await _chain(saver, tid, 30)
    cp = generate_checkpoint(channel_values={"x": 99}, channel_versions={"x": "99"})

    async def count(coro) -> list[str]:
        wire.reset()
        res = await coro
        if hasattr(res, "__aiter__"):
            res = [x async for x in res]
        ops = _ops(wire)
        return ops

    async def alist(**kw):
        return [t async for t in saver.alist(generate_config(tid), **kw)]

    assert await count(saver.aput(cfgs[-1], cp, generate_metadata(step=99), {"x": "99"})) == one
    assert await count(saver.aput_writes(cfgs[-1], [("a", 1), ("b", 2), ("__interrupt__", 3)], "t", "p")) == one
    assert await count(saver.aget_tuple(generate_config(tid))) == one
    assert await count(saver.aget_tuple(cfgs[3])) == one
    assert await count(alist(limit=10)) == one
    assert await count(alist(limit=1, filter={"step": 3})) == one
    assert await count(alist(before=cfgs[20], limit=5)) == one
    assert await count(saver.aget_delta_channel_history(config=cfgs[-1], channels=["x", "y"])) == one
    assert await count(saver.aprune([tid], strategy="keep_latest")) == one
    assert await count(saver.adelete_thread(tid)) == one


async def test_noscript_reloads_invisibly(wire, wire_saver, sync_client):
    saver = wire_saver("sync", functions=False)
    cfg = await saver.aput(generate_config("ns-flush"), generate_checkpoint(), generate_metadata(), {})
    sync_client.script_flush()
    wire.reset()
    tup = await saver.aget_tuple(cfg)
    assert tup is not None and tup.config == cfg
    assert _ops(wire) == ["EVALSHA", "EVAL"]  # EVAL of the body: no NOSCRIPT possible, caches it
    wire.reset()
    await saver.aget_tuple(cfg)
    assert _ops(wire) == ["EVALSHA"]


async def test_a_flushed_library_loads_again_invisibly(wire, wire_saver, sync_client):
    for kind in ("sync", "async"):
        saver = wire_saver(kind)
        cfg = await saver.aput(generate_config(f"fn-flush-{kind}"), generate_checkpoint(), generate_metadata(), {})
        sync_client.function_flush()
        wire.reset()
        tup = await saver.aget_tuple(cfg)
        assert tup is not None and tup.config == cfg
        assert _ops(wire) == ["FCALL", "FUNCTION LOAD", "FCALL"]
        wire.reset()
        await saver.aget_tuple(cfg)
        assert _ops(wire) == ["FCALL"]


async def test_delta_history_matches_default_walk_in_one_call(wire, wire_saver):
    saver = wire_saver("sync")
    saver.setup()
    cfgs = await _chain(saver, "walk", 12)
    wire.reset()
    fast = saver.get_delta_channel_history(config=cfgs[-1], channels=["x", "y", "missing"])
    assert _ops(wire) == ["FCALL"]
    slow = BaseCheckpointSaver.get_delta_channel_history(saver, config=cfgs[-1], channels=["x", "y", "missing"])
    assert fast == slow
