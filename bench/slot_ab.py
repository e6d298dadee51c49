"""The stable path, before and after a change, side by side: put, put_writes and get_tuple of
RedisSaver and AsyncRedisSaver on a standalone server and on a 3-primary cluster whose slots do
not move.

    .venv/bin/python -m bench slot_ab [--base main] [--rounds 5] [--calls 1500] [--kinds sync,async]
        [--deployments standalone,cluster]

Both sides are taken from git (``git archive <ref> redis_saver lua`` into a scratch directory:
``--base``, default ``main``, against ``HEAD``, the working tree's commit) and run in turns, each
round one fresh process per side and deployment (A B, then B A in the next round), all against
the same servers, each on its own threads (prefix per side). Every process runs ``--calls``
steps on one thread (a put whose message list grows by one small message, kept to the last 20,
a put_writes on it, a get_tuple of the latest), after 50 steps of warm-up, timing each call
(wall clock, and the process's CPU time: "<op> cpu", the client's own cost, which a loaded
machine disturbs less); the figure is the median of the per-round means, in microseconds per call, the ratio after /
before, and the median (and range) of the rounds' own ratios. Nothing here runs in
the pytest suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OPS = ("put", "put_writes", "get_tuple")
KINDS = ("sync", "async")


def _archive(ref: str, into: Path) -> str:
    """``redis_saver`` and ``lua`` of ``ref`` under ``into``; the commit's short id."""
    commit = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, capture_output=True, text=True, check=True)
    data = subprocess.run(["git", "archive", ref, "redis_saver", "lua"], cwd=ROOT, capture_output=True, check=True)
    with tarfile.open(fileobj=BytesIO(data.stdout)) as tar:
        tar.extractall(into, filter="data")
    return commit.stdout.strip()


# ---- the timed process (its redis_saver comes from PYTHONPATH) ---------------------------------
def _calls(saver: Any, thread: str, n: int) -> tuple[Any, ...]:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    state: dict[str, Any] = {"parent": None, "versions": {}, "messages": []}

    def next_put() -> tuple[Any, ...]:
        versions = dict(state["versions"])
        versions["messages"] = saver.get_next_version(versions.get("messages"), None)
        state["messages"] = [*state["messages"][-20:], f"message {len(state['messages'])}"]
        cp = empty_checkpoint()
        cp["id"] = str(uuid6())
        cp["channel_versions"] = versions
        cp["channel_values"] = {"messages": state["messages"]}
        conf = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": state["parent"]}}
        state["parent"], state["versions"] = cp["id"], versions
        return conf, cp, {"source": "loop", "step": n}, {"messages": versions["messages"]}

    def writes_args() -> tuple[Any, ...]:
        conf = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": state["parent"]}}
        return conf, [("messages", "a write")], f"task-{time.monotonic_ns()}"

    latest = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    return next_put, writes_args, latest


def _sync(url: str, prefix: str, n: int) -> dict[str, float]:
    from redis_saver import RedisSaver

    sums = dict.fromkeys([*OPS, *(f"{op} cpu" for op in OPS)], 0.0)
    with RedisSaver.from_conn_string(url, prefix=prefix) as saver:
        next_put, writes_args, latest = _calls(saver, f"{prefix}-t", n)
        for i in range(n + 50):  # the first 50: warm-up (connections, scripts, caches)
            put, writes = next_put(), writes_args()
            t = [(time.perf_counter(), time.process_time())]
            saver.put(*put)
            t.append((time.perf_counter(), time.process_time()))
            saver.put_writes(*writes)
            t.append((time.perf_counter(), time.process_time()))
            saver.get_tuple(latest)
            t.append((time.perf_counter(), time.process_time()))
            if i >= 50:
                _add(sums, t)
    return {op: v / n * 1e6 for op, v in sums.items()}


def _add(sums: dict[str, float], t: list[tuple[float, float]]) -> None:
    """Each op's wall and CPU time, from the clocks read before and after each call."""
    for k, op in enumerate(OPS):
        sums[op] += t[k + 1][0] - t[k][0]
        sums[f"{op} cpu"] += t[k + 1][1] - t[k][1]


async def _async(url: str, prefix: str, n: int) -> dict[str, float]:
    from redis_saver import AsyncRedisSaver

    sums = dict.fromkeys([*OPS, *(f"{op} cpu" for op in OPS)], 0.0)
    async with AsyncRedisSaver.from_conn_string(url, prefix=prefix) as saver:
        next_put, writes_args, latest = _calls(saver, f"{prefix}-t", n)
        for i in range(n + 50):
            put, writes = next_put(), writes_args()
            t = [(time.perf_counter(), time.process_time())]
            await saver.aput(*put)
            t.append((time.perf_counter(), time.process_time()))
            await saver.aput_writes(*writes)
            t.append((time.perf_counter(), time.process_time()))
            await saver.aget_tuple(latest)
            t.append((time.perf_counter(), time.process_time()))
            if i >= 50:
                _add(sums, t)
    return {op: v / n * 1e6 for op, v in sums.items()}


def worker(url: str, prefix: str, n: int, kinds: str) -> None:
    import redis_saver

    res: dict[str, Any] = {"from": redis_saver.__file__}
    if "sync" in kinds.split(","):
        res["sync"] = _sync(url, prefix + "s", n)
    if "async" in kinds.split(","):
        res["async"] = asyncio.run(_async(url, prefix + "a", n))
    print(json.dumps(res))


# ---- the parent ---------------------------------------------------------------------------------
def _run_side(src: Path, url: str, prefix: str, n: int, kinds: str) -> dict[str, dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    res = subprocess.run(
        [sys.executable, __file__, "--worker", url, prefix, str(n), kinds],
        env=env, cwd=src, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if res.returncode != 0:
        raise RuntimeError(res.stderr[-3000:])
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if not out.pop("from").startswith(str(src)):
        raise RuntimeError(f"the timed process did not import redis_saver from {src}")
    return out  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="main")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=1500)
    ap.add_argument("--kinds", default="sync,async", help="savers: sync, async or both")
    ap.add_argument("--deployments", default="standalone,cluster")
    args = ap.parse_args(argv)
    kinds = [k for k in KINDS if k in args.kinds.split(",")]
    from devkit.servers import start_cluster, start_standalone

    with tempfile.TemporaryDirectory() as tmp:
        sides = {}
        for label, ref in (("before", args.base), ("after", "HEAD")):
            (Path(tmp) / label).mkdir()
            sides[label] = (Path(tmp) / label, _archive(ref, Path(tmp) / label))
        server, cluster = start_standalone(), start_cluster(masters=3, replicas_per_master=0)
        deployments = {"standalone": server.url, "cluster": f"redis+cluster://127.0.0.1:{cluster.nodes[0].port}"}
        deployments = {k: v for k, v in deployments.items() if k in args.deployments.split(",")}
        times: dict[tuple[str, str, str, str], list[float]] = {}
        try:
            for r in range(args.rounds):
                order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
                for dep, url in deployments.items():
                    for label in order:
                        res = _run_side(sides[label][0], url, f"ab{r}{label[0]}{dep[0]}", args.calls, args.kinds)
                        for kind in kinds:
                            for op, us in res[kind].items():
                                times.setdefault((dep, kind, op, label), []).append(us)
                print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        finally:
            server.stop()
            cluster.stop()
    print(f"before = {args.base} ({sides['before'][1]}), after = HEAD ({sides['after'][1]}); "
          f"{args.rounds} rounds x {args.calls} calls; load {os.getloadavg()[0]:.2f}")  # fmt: skip
    print("| deployment | saver | op | before us | after us | after/before | per round: median (min-max) |")
    print("|---|---|---|---|---|---|---|")
    for dep in deployments:
        for kind in kinds:
            for op in [*OPS, *(f"{op} cpu" for op in OPS)]:
                bs, as_ = times[(dep, kind, op, "before")], times[(dep, kind, op, "after")]
                b, a = statistics.median(bs), statistics.median(as_)
                paired = [y / x for x, y in zip(bs, as_, strict=True)]
                spread = f"{statistics.median(paired):.3f} ({min(paired):.2f}-{max(paired):.2f})"
                print(f"| {dep} | {kind} | {op} | {b:.1f} | {a:.1f} | {a / b:.3f} | {spread} |")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:  # the timed process (run as a file: its sys.path has no repository)
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
        sys.exit(0)
    sys.exit(main())
