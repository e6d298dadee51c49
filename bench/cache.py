"""Node-cache latency: redis_saver's RedisCache / AsyncRedisCache beside LangGraph's own
``langgraph.cache.redis.RedisCache`` and ``InMemoryCache``, in one interleaved run.

    python -m bench cache [--samples 2000] [--value-bytes 1000]

Starts its own redis-server (devkit/servers.py); each Redis cache gets its own prefix on it. A
sample of an operation calls every cache once, in a shuffled order, so drift and noise hit all
of them alike; p50 / p99 per call in microseconds. Operations, with a value of about
``--value-bytes`` of text in a dict (what a node's writes look like to the cache):

* ``get 1`` (a hit), ``get miss``, ``set 1`` (TTL 60 s): one key;
* ``get 4 ns`` / ``set 4 ns``: four keys in four namespaces, as a step with four cached nodes.

Every cache's reads are checked against what was written before timing starts. The sync API
is timed for all; the async API for AsyncRedisCache and, as LangGraph ships them, the others'
``aget`` / ``aset`` (which call their sync code, blocking the event loop for the round trip:
hence also the calls per second of 8 tasks reading at once).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root on the path, as `python -m` has it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402
import redis.asyncio  # noqa: E402
from langgraph.cache.memory import InMemoryCache  # noqa: E402
from langgraph.cache.redis import RedisCache as LangGraphRedisCache  # noqa: E402

from devkit.servers import async_client_kwargs, client_kwargs, start_standalone  # noqa: E402
from redis_saver import AsyncRedisCache, RedisCache  # noqa: E402

NS = ("__pregel_ns_writes", "node")


def _ops(value: Any) -> dict[str, tuple[str, Any]]:
    """op name -> (method, argument), the keys written by _fill."""
    one = (NS, "hit")
    four = [((NS[0], f"node{i}"), "hit") for i in range(4)]
    return {
        "get 1": ("get", [one]),
        "get miss": ("get", [(NS, "miss")]),
        "set 1": ("set", {(NS, "set"): (value, 60)}),
        "get 4 ns": ("get", four),
        "set 4 ns": ("set", {((NS[0], f"node{i}"), "set"): (value, 60) for i in range(4)}),
    }


def _stats(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs) * 1e6, xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1e6


def _table(title: str, names: list[str], times: dict[str, dict[str, list[float]]]) -> str:
    ops = list(next(iter(times.values())))
    lines = [f"### {title}", "", "| cache | " + " | ".join(f"{op} p50 / p99 µs" for op in ops) + " |",
             "|---|" + "---|" * len(ops)]
    for name in names:
        cells = []
        for op in ops:
            p50, p99 = _stats(times[name][op])
            cells.append(f"{p50:,.0f} / {p99:,.0f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _check(cache: Any, value: Any, ops: dict[str, tuple[str, Any]]) -> None:
    for op, (method, arg) in ops.items():
        if method == "get":
            got = cache.get(arg)
            want = {} if op == "get miss" else {k: value for k in arg}
            if got != want:
                raise AssertionError(f"{type(cache).__name__}: {op} read {got!r}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench cache", description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--value-bytes", type=int, default=1000)
    args = ap.parse_args(argv)
    value = {"messages": [{"type": "ai", "content": "word " * (args.value_bytes // 5)}]}
    ops = _ops(value)
    server = start_standalone()
    try:
        client = redis.Redis.from_url(server.url, **client_kwargs(5.0, 5.0))
        tag = uuid.uuid4().hex[:8]
        caches: dict[str, Any] = {
            "redis_saver RedisCache": RedisCache(client, prefix=f"b{tag}"),
            "langgraph RedisCache": LangGraphRedisCache(client, prefix=f"lg{tag}:"),
            "InMemoryCache": InMemoryCache(),
        }
        fill = {k: (value, None) for _, (m, arg) in ops.items() if m == "get" for k in arg if k[1] == "hit"}
        for cache in caches.values():
            cache.set(fill)
            _check(cache, value, ops)
        sync_times = _run_sync(caches, ops, args.samples)
        print(_table("sync API", list(caches), sync_times))
        print()
        async_times, names = asyncio.run(_run_async(server.url, caches, ops, fill, value, args.samples, tag))
        print(_table("async API", names, async_times))
        stats = client.info("commandstats")
        print("\n### server time per command (INFO commandstats, whole run)\n")
        print("| command | calls | µs per call |\n|---|---|---|")
        for cmd in ("evalsha", "eval", "mget", "setex", "set"):
            st = stats.get(f"cmdstat_{cmd}")
            if st:
                print(f"| {cmd.upper()} | {st['calls']:,} | {st['usec_per_call']:.2f} |")
        print("\n(EVALSHA: redis_saver's set.lua; SETEX: LangGraph's set; MGET: both gets)")
        print(f"\n{args.samples} samples per op and cache, value {len(str(value))} characters; redis-py "
              f"{redis.__version__}, one local redis-server; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        for cache in caches.values():
            cache.clear()
        client.close()
    finally:
        server.stop()
    return 0


Times = dict[str, dict[str, list[float]]]  # cache -> op -> seconds per call


def _run_sync(caches: dict[str, Any], ops: dict[str, tuple[str, Any]], samples: int) -> Times:
    times: dict[str, dict[str, list[float]]] = {n: {op: [] for op in ops} for n in caches}
    names = list(caches)
    clock = time.perf_counter
    for _ in range(samples):
        for op, (method, arg) in ops.items():
            random.shuffle(names)
            for name in names:
                fn = getattr(caches[name], method)
                t0 = clock()
                fn(arg)
                times[name][op].append(clock() - t0)
    return times


async def _run_async(url: str, caches: dict[str, Any], ops: dict[str, tuple[str, Any]], fill: dict, value: Any,
                     samples: int, tag: str) -> tuple[dict[str, dict[str, list[float]]], list[str]]:
    aclient = redis.asyncio.Redis.from_url(url, **async_client_kwargs(5.0, 5.0))
    ours = AsyncRedisCache(aclient, prefix=f"a{tag}")
    await ours.aset(fill)
    got = await ours.aget(ops["get 4 ns"][1])
    assert got == {k: value for k in ops["get 4 ns"][1]}, got
    acaches = {"redis_saver AsyncRedisCache": ours, **{n: c for n, c in caches.items() if "redis_saver" not in n}}
    times: dict[str, dict[str, list[float]]] = {n: {op: [] for op in ops} for n in acaches}
    names = list(acaches)
    clock = time.perf_counter
    for _ in range(samples):
        for op, (method, arg) in ops.items():
            random.shuffle(names)
            for name in names:
                fn = getattr(acaches[name], "a" + method)
                t0 = clock()
                await fn(arg)
                times[name][op].append(clock() - t0)
    # 8 tasks reading at once: calls per second (an aget that blocks the loop serializes them)
    conc: dict[str, float] = {}
    arg = ops["get 1"][1]
    for _ in range(3):
        for name in random.sample(names, len(names)):
            fn = acaches[name].aget

            async def reader(fn: Any = fn) -> None:
                for _ in range(max(50, samples // 20)):
                    await fn(arg)

            t0 = clock()
            await asyncio.gather(*(reader() for _ in range(8)))
            rate = 8 * max(50, samples // 20) / (clock() - t0)
            conc[name] = max(conc.get(name, 0.0), rate)
    await ours.aclear()
    await aclient.aclose()
    print("\n### async API, 8 tasks calling `aget` (1 key) at once: calls/s, best of 3\n")
    print("| cache | calls/s |\n|---|---|")
    for name in acaches:
        print(f"| {name} | {conc[name]:,.0f} |")
    print()
    return times, list(acaches)


if __name__ == "__main__":
    sys.exit(main())
