"""Helpers shared by the fault tests: drive sync and async savers with one code path, and read
server counters (INFO) over a raw connection, so the measurement never goes through the code under test."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from devkit.servers import _info
from tests.lifecycle._util import alist as listed  # noqa: F401 (re-exported for the fault tests)
from tests.lifecycle._util import call, is_async  # noqa: F401


def cfg(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def info(server: Any, section: str) -> dict[str, str]:
    """INFO <section> of a ``devkit.servers`` server, as a dict (raw RESP, not redis-py)."""
    return _info(server, section)


def stat_count(server: Any, section: str, name: str, field: str = "calls") -> int:
    """One counter of INFO commandstats / errorstats, e.g. ("commandstats", "cmdstat_eval", "calls")."""
    value = info(server, section).get(name)
    if value is None:
        return 0
    parts = dict(p.split("=", 1) for p in value.split(","))
    return int(parts[field])


class OpFailed(Exception):
    pass


class Ops:
    """Calls saver methods, counting calls and errors per operation (one instance per worker)."""

    def __init__(self, saver: Any) -> None:
        self.saver = saver
        self.calls: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.samples: list[str] = []

    async def __call__(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.calls[name] += 1
        try:
            if name == "list":
                return await listed(self.saver, *args, **kwargs)
            return await call(self.saver, name, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - counted, and the round stops
            self.errors[name] += 1
            if len(self.samples) < 5:
                self.samples.append(f"{name}: {type(exc).__name__}: {exc}")
            raise OpFailed from exc


def checkpoint(value: str, version: str, **metadata: Any) -> tuple[dict, dict, dict]:
    cp = generate_checkpoint(channel_values={"x": value}, channel_versions={"x": version})
    return cp, generate_metadata(**metadata), {"x": version}


def version(k: int) -> str:
    return f"{k:032}.0"


async def mixed_round(ops: Ops, worker: str, k: int, state: dict[str, Any]) -> None:
    """One round of every kind of call, each answer checked against what this worker wrote.

    Single calls: put, put_writes, get_tuple, list(thread), get_delta_channel_history.
    Every 4th round also the fan-outs sent as pipelines: list(None) (ix_query per slot),
    delete_for_runs (ix_query per slot, then delete_runs per thread) and prune of two threads.
    The thread changes every 10 rounds, so parent chains stay short.
    """
    tid = f"{worker}-{k // 10}"
    parent = state.get(tid)
    cp, md, nv = checkpoint(f"v{k}", version(k), step=k, run_id=f"r-{worker}-{k}")
    conf = await ops("put", parent or cfg(tid), cp, md, nv)
    state[tid] = conf
    await ops("put_writes", conf, [("x", f"w{k}")], f"task{k}")
    tup = await ops("get_tuple", cfg(tid))
    assert tup is not None and tup.config == conf, (tup, conf)
    assert tup.checkpoint["channel_values"] == {"x": f"v{k}"}
    assert tup.metadata["run_id"] == f"r-{worker}-{k}"
    assert tup.pending_writes == [(f"task{k}", "x", f"w{k}")]
    got = await ops("list", cfg(tid), limit=2)
    assert [t.config for t in got] == [conf, *([parent] if parent else [])]
    hist = await ops("get_delta_channel_history", config=conf, channels=["x"])
    assert set(hist) == {"x"}
    if k % 4:
        return
    # fan-outs (pipelines)
    found = await ops("list", None, filter={"run_id": f"r-{worker}-{k}"})
    assert [t.config for t in found] == [conf]
    junk = [f"{worker}-junk-a", f"{worker}-junk-b"]
    run = f"junk-{worker}-{k}"
    for j in junk:
        c1 = await ops("put", cfg(j), *checkpoint("old", version(1), step=0, run_id=run))
        await ops("put", c1, *checkpoint("new", version(2), step=1, run_id=run))
    await ops("prune", junk, strategy="keep_latest")
    for j in junk:
        kept = await ops("list", cfg(j))
        assert [t.checkpoint["channel_values"] for t in kept] == [{"x": "new"}]
    await ops("delete_for_runs", [run])
    for j in junk:
        assert await ops("get_tuple", cfg(j)) is None


async def run_rounds(ops: Ops, worker: str, seconds: float, state: dict[str, Any], min_rounds: int = 0) -> int:
    """Rounds until ``seconds`` have passed and at least ``min_rounds`` ran; a failed call ends
    its round (counted in ``ops``)."""
    deadline = time.monotonic() + seconds
    k = 0
    while k < min_rounds or time.monotonic() < deadline:
        k += 1
        try:
            await mixed_round(ops, worker, k, state)
        except OpFailed:
            pass
    return k
