"""A burst of concurrent writes on a new async store: ``asyncio.gather`` of N ``aput``s.

    .venv/bin/python bench/store_burst.py [--sizes 6000,60000] [--runs 2] [--no-sqlite]

Each run starts a fresh ``redis-server`` (devkit/servers.py; ``BENCH_REDIS_URL``: a server of
yours, under a unique prefix), opens ``AsyncRedisStore.from_conn_string`` and awaits N puts of
distinct keys at once, as a web handler's fan-out does on a cold worker; then it counts what
was stored (every put must be there and no call may raise). Beside it, where installed,
``AsyncSqliteStore`` on an in-memory database runs the same burst. Prints per run the wall
time, the client's CPU time (``time.process_time``), the number and total time of the full
(generation 2) garbage collections during the burst, and the calls that raised.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FullCollections:
    """Counts and times generation-2 collections (``gc.callbacks``) while active."""

    def __init__(self) -> None:
        self.n, self.seconds, self._t0 = 0, 0.0, 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.n += 1
            self.seconds += time.perf_counter() - self._t0

    def __enter__(self) -> FullCollections:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        gc.callbacks.remove(self)


async def burst(store: Any, n: int) -> tuple[float, float, FullCollections, int]:
    ns = ("burst",)
    with FullCollections() as fc:
        t0, c0 = time.perf_counter(), time.process_time()
        res = await asyncio.gather(*[store.aput(ns, f"k{i}", {"v": i}) for i in range(n)], return_exceptions=True)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall, cpu, fc, sum(isinstance(r, BaseException) for r in res)


def line(wall: float, cpu: float, fc: FullCollections, failed: int, stored: int) -> str:
    gcs = f"{fc.n} full GCs {fc.seconds:5.2f} s"
    return f"{wall:7.2f} s wall, {cpu:6.2f} s CPU, {gcs}, {failed} raised, {stored} stored"


async def run_redis(url: str, n: int) -> str:
    from redis_saver import AsyncRedisStore

    prefix = "burst" + uuid.uuid4().hex[:8]
    async with AsyncRedisStore.from_conn_string(url, prefix=prefix) as store:
        got = await burst(store, n)
        stored = len(await store.asearch(("burst",), limit=n + 1))
    assert stored == n, f"{stored} of {n} puts stored"
    return line(*got, stored)


async def run_sqlite(n: int) -> str:
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    async with AsyncSqliteStore.from_conn_string(":memory:") as store:
        await store.setup()
        got = await burst(store, n)
        stored = len(await store.asearch(("burst",), limit=n + 1))
    return line(*got, stored)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="6000,60000")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--no-sqlite", action="store_true")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    for n in [int(s) for s in args.sizes.split(",")]:
        for run in range(args.runs):
            server, url = None, os.environ.get("BENCH_REDIS_URL")
            if url is None:
                from devkit.servers import start_standalone

                server = start_standalone()
                url = server.url
            try:
                print(f"{n:>7,} aputs, run {run + 1}: AsyncRedisStore   {asyncio.run(run_redis(url, n))}")
            finally:
                if server is not None:
                    server.stop()
            if not args.no_sqlite:
                try:
                    line = asyncio.run(run_sqlite(n))
                except ImportError as e:
                    line = f"skipped: {e}"
                print(f"{n:>7,} aputs, run {run + 1}: AsyncSqliteStore  {line}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
