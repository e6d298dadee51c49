"""AsyncRedisSaver with ``auto_pipeline`` on and off, side by side (``redis_saver/transport/autopipe.py``).

One step = ``aput`` of a new checkpoint (two channels, ~1 KB) + ``aput_writes`` of two writes
for it, each task on a thread of its own. Per repetition: a fresh ``redis-server`` (``--cluster``:
a fresh local 3-primary Redis Cluster) and both modes, each on its own saver and client:

- latency at concurrency 1: p50 / p90 of one step (the checkpoint is built before the clock starts);
- throughput at concurrency 8 and 64: steps per second over ``--seconds``.

Both savers are open at once and measured in alternation (``--rounds`` times per repetition), so
load from elsewhere on the machine hits both alike; the last line gives the on/off ratio of each
figure per repetition.

    .venv/bin/python bench/autopipeline.py [--reps 5] [--rounds 5] [--steps 2000] [--seconds 5]
                                           [--cluster] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402

from devkit.servers import start_cluster, start_standalone  # noqa: E402
from redis_saver import AsyncRedisSaver  # noqa: E402

TEXT = "x" * 1000


class Thread:
    """One thread's chain of checkpoints: each step's checkpoint is a child of the previous."""

    def __init__(self, saver: AsyncRedisSaver) -> None:
        self.saver = saver
        self.config: dict[str, Any] = {"configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}}
        self.versions: dict[str, str] = {}
        self.step = 0

    def next(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        self.step += 1
        new = {ch: self.saver.get_next_version(self.versions.get(ch), None) for ch in ("messages", "turn")}
        self.versions.update(new)
        cp = empty_checkpoint()
        cp["id"] = str(uuid6())
        cp["channel_versions"] = dict(self.versions)
        cp["channel_values"] = {"messages": [TEXT, self.step], "turn": self.step}
        return cp, {"source": "loop", "step": self.step}, new

    async def run(self, cp: dict[str, Any], md: dict[str, Any], new: dict[str, Any]) -> None:
        self.config = await self.saver.aput(self.config, cp, md, new)  # type: ignore[arg-type]
        await self.saver.aput_writes(self.config, [("messages", "hi"), ("turn", self.step)], "task-1")


async def latency(saver: AsyncRedisSaver, steps: int) -> list[float]:
    t = Thread(saver)
    out = []
    for _ in range(steps):
        args = t.next()
        start = time.perf_counter()
        await t.run(*args)
        out.append(time.perf_counter() - start)
    return out


async def throughput(saver: AsyncRedisSaver, tasks: int, seconds: float) -> float:
    done = 0
    stop = False

    async def worker() -> None:
        nonlocal done
        t = Thread(saver)
        while not stop:
            await t.run(*t.next())
            done += 1

    running = [asyncio.create_task(worker()) for _ in range(tasks)]
    await asyncio.sleep(0.3)  # warm-up
    start, base = time.perf_counter(), done
    await asyncio.sleep(seconds)
    count, elapsed = done - base, time.perf_counter() - start
    stop = True
    await asyncio.gather(*running)
    return count / elapsed


async def one_rep(url: str, rep: int, rounds: int, steps: int, seconds: float) -> list[dict[str, Any]]:
    """Both modes on one server, open side by side, measured in alternation (paired: a burst of
    load from elsewhere on the machine hits both alike)."""
    modes = (False, True) if rep % 2 == 0 else (True, False)
    async with contextlib.AsyncExitStack() as stack:
        savers = {}
        for on in modes:
            saver = await stack.enter_async_context(
                AsyncRedisSaver.from_conn_string(url, auto_pipeline=on, prefix="b" + uuid.uuid4().hex[:8])
            )
            await saver.asetup()
            await latency(saver, 200)  # warm-up
            savers[on] = saver
        lat: dict[bool, list[float]] = {on: [] for on in modes}
        for _ in range(rounds):
            for on in modes:
                lat[on] += await latency(savers[on], steps // rounds)
        tput: dict[tuple[bool, int], list[float]] = {}
        for _ in range(rounds):
            for tasks in (8, 64):
                for on in modes:
                    tput.setdefault((on, tasks), []).append(await throughput(savers[on], tasks, seconds / rounds))
    rows = []
    for on in modes:
        ls = sorted(lat[on])
        rows.append(
            {
                "rep": rep,
                "auto_pipeline": on,
                "p50_us": statistics.median(ls) * 1e6,
                "p90_us": ls[int(len(ls) * 0.9)] * 1e6,
                "c8_per_s": statistics.mean(tput[(on, 8)]),
                "c64_per_s": statistics.mean(tput[(on, 64)]),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5, help="alternations of the two modes per repetition")
    ap.add_argument("--steps", type=int, default=2000, help="c=1 steps per mode and repetition")
    ap.add_argument("--seconds", type=float, default=5.0, help="throughput seconds per mode, concurrency, repetition")
    ap.add_argument("--cluster", action="store_true", help="a local 3-primary Redis Cluster instead of one server")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for rep in range(a.reps):
        with start_cluster(3, 0) if a.cluster else start_standalone() as server:
            url = server.url.replace("redis://", "redis+cluster://") if a.cluster else server.url
            for r in asyncio.run(one_rep(url, rep, a.rounds, a.steps, a.seconds)):
                rows.append(r)
                print(
                    f"rep {rep} auto_pipeline={'on ' if r['auto_pipeline'] else 'off'}  p50 {r['p50_us']:6.0f} us  "
                    f"p90 {r['p90_us']:6.0f} us  c=8 {r['c8_per_s']:6.0f}/s  c=64 {r['c64_per_s']:6.0f}/s",
                    file=sys.stderr,
                )
    keys = ("p50_us", "p90_us", "c8_per_s", "c64_per_s")
    print("| auto_pipeline | p50 c=1 (us) | p90 c=1 (us) | steps/s c=8 | steps/s c=64 |")
    print("|---|---|---|---|---|")
    for on in (False, True):
        med = {k: statistics.median(r[k] for r in rows if r["auto_pipeline"] is on) for k in keys}
        print(
            f"| {'on' if on else 'off'} | {med['p50_us']:.0f} | {med['p90_us']:.0f} | "
            f"{med['c8_per_s']:.0f} | {med['c64_per_s']:.0f} |"
        )
    # paired ratios (on / off) per repetition: the comparison that load elsewhere on the machine disturbs least
    ratios = {k: [] for k in keys}
    for rep in range(a.reps):
        pair = {r["auto_pipeline"]: r for r in rows if r["rep"] == rep}
        for k in keys:
            ratios[k].append(pair[True][k] / pair[False][k])
    print(
        "\non/off per repetition (median, min-max): "
        + ", ".join(f"{k} {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" for k, v in ratios.items())
    )
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
