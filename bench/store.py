"""The store side by side: RedisStore / AsyncRedisStore, InMemoryStore and PostgresStore.

    .venv/bin/python bench/store.py [--items 1000] [--namespaces 100] [--reps 300] [--semantic 1000] [--dims 256]

Latency (p50 / p95, microseconds) of ``get``, ``put`` (an update), ``search`` with a filter in
one namespace (limit 10), ``list_namespaces`` (prefix, limit 100), each store in turn per
round (rounds interleaved, so load on the shared machine spreads over all); then semantic
search over ``--semantic`` items in one namespace with a deterministic embedding (hashed
words, ``--dims``), with recall@10 against InMemoryStore's exact ranking. Redis runs on a
fresh ``redis-server`` of its own (devkit/servers.py; ``BENCH_REDIS_URL``: a server of yours,
under a unique prefix), PostgresStore on ``BENCH_POSTGRES_URL``
or ``postgresql://postgres@127.0.0.1:5432/test`` in a temporary schema it drops; a store that
cannot run is skipped with the reason. Takes ~1 minute.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WORDS = [f"w{i}" for i in range(400)]


def embed_factory(dims: int) -> Callable[[list[str]], list[list[float]]]:
    cache: dict[str, list[float]] = {}

    def word(w: str) -> list[float]:
        v = cache.get(w)
        if v is None:
            h = hashlib.sha256(w.encode()).digest() * (dims // 32 + 1)
            v = cache[w] = [float(b - 128) for b in h[:dims]]
        return v

    def embed(texts: list[str]) -> list[list[float]]:
        out = []
        for t in texts:
            acc = [0.0] * dims
            for w in t.split():
                acc = [a + b for a, b in zip(acc, word(w), strict=True)]
            out.append(acc)
        return out

    return embed


def value(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "kind": rng.choice(["fact", "pref", "note"]),
        "score": rng.randint(0, 100),
        "text": " ".join(rng.choices(WORDS, k=12)),
        "i": i,
    }


class Runner:
    """One store: sync calls, or async ones run on a loop of its own."""

    def __init__(self, name: str, store: Any, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.name, self.store, self.loop = name, store, loop

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self.loop is None:
            return getattr(self.store, method)(*args, **kwargs)
        return self.loop.run_until_complete(getattr(self.store, "a" + method)(*args, **kwargs))


def redis_runners(url: str, prefix: str, **options: Any) -> list[Runner]:
    import redis
    import redis.asyncio as aredis

    from redis_saver import AsyncRedisStore, RedisStore

    loop = asyncio.new_event_loop()
    sync = RedisStore(redis.Redis.from_url(url), prefix=prefix, telemetry=False, **options)
    sync.setup()

    async def make() -> Any:
        return AsyncRedisStore(aredis.Redis.from_url(url), prefix=prefix, telemetry=False, **options)

    return [Runner("RedisStore", sync), Runner("AsyncRedisStore", loop.run_until_complete(make()), loop)]


def postgres_runner(schema: str, **options: Any) -> tuple[Runner | None, str, Callable[[], None]]:
    url = os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    try:
        import psycopg
        from langgraph.store.postgres import PostgresStore
    except ImportError as e:
        return None, f"langgraph-checkpoint-postgres / psycopg not installed: {e}", lambda: None
    try:
        admin = psycopg.connect(url, autocommit=True, connect_timeout=3)
    except Exception as e:  # noqa: BLE001 - any failure to connect: skipped with its reason
        return None, f"PostgreSQL at {url} not reachable: {e}", lambda: None
    admin.execute(f"CREATE SCHEMA {schema}")
    conn = psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}", row_factory=psycopg.rows.dict_row)
    store = PostgresStore(conn, **options)
    try:
        store.setup()
    except Exception as e:  # noqa: BLE001 - e.g. no pgvector for an index
        conn.close()
        admin.execute(f"DROP SCHEMA {schema} CASCADE")
        admin.close()
        return None, f"PostgresStore.setup() failed: {str(e).splitlines()[0]}", lambda: None

    def drop() -> None:
        conn.close()
        admin.execute(f"DROP SCHEMA {schema} CASCADE")
        admin.close()

    return Runner("PostgresStore", store), url, drop


def stats(samples: list[float]) -> str:
    s = sorted(samples)
    return f"{statistics.median(s) * 1e6:,.0f} / {s[int(len(s) * 0.95)] * 1e6:,.0f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--namespaces", type=int, default=100)
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--semantic", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--dims", type=int, default=256)
    args = ap.parse_args()

    from langgraph.store.base import PutOp
    from langgraph.store.memory import InMemoryStore

    from devkit.servers import start_standalone

    rng = random.Random(1)
    skipped: list[str] = []
    cleanups: list[Callable[[], None]] = []
    url = os.environ.get("BENCH_REDIS_URL")
    if url is None:
        try:
            server = start_standalone()
            cleanups.append(server.stop)
            url = server.url
        except Exception as e:  # noqa: BLE001 - no redis-server here: the Redis stores are skipped
            skipped.append(f"RedisStore, AsyncRedisStore: no redis-server to start ({e})")
    try:
        prefix = "bench" + uuid.uuid4().hex[:8]
        runners = [Runner("InMemoryStore", InMemoryStore())]
        if url is not None:
            runners += redis_runners(url, prefix)
        pg, why, drop = postgres_runner("bench_store_" + uuid.uuid4().hex[:8])
        cleanups.append(drop)
        if pg is None:
            skipped.append(f"PostgresStore: {why}")
        else:
            runners.append(pg)
        namespaces = [("users", f"u{i}", "memories") for i in range(args.namespaces)]
        items = [(namespaces[i % len(namespaces)], f"k{i}") for i in range(args.items)]
        for r in runners:
            if r.name == "AsyncRedisStore":
                continue  # the same keys as RedisStore
            for i, (ns, key) in enumerate(items):
                r.call("put", ns, key, value(rng, i), index=False)
        print(f"# store latency, {args.items} items in {args.namespaces} namespaces, {args.reps} reps, p50 / p95 us",
              file=sys.stderr)
        ops: dict[str, Callable[[Runner], Any]] = {
            "get": lambda r: r.call("get", *rng.choice(items)),
            "put": lambda r: r.call("put", *rng.choice(items), value(rng, 0), index=False),
            "search (filter)": lambda r: r.call(
                "search", rng.choice(namespaces), filter={"kind": "fact", "score": {"$gte": 50}}, limit=10
            ),
            "list_namespaces": lambda r: r.call("list_namespaces", prefix=("users",), limit=100),
        }
        samples: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.reps):
            for op, fn in ops.items():
                for r in runners:
                    t = time.perf_counter()
                    fn(r)
                    samples.setdefault((op, r.name), []).append(time.perf_counter() - t)
        names = [r.name for r in runners]
        print("| op | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for op in ops:
            print(f"| {op} | " + " | ".join(stats(samples[(op, n)]) for n in names) + " |")

        # semantic search
        embed = embed_factory(args.dims)
        index = {"dims": args.dims, "embed": embed, "fields": ["text"]}
        sem = [Runner("InMemoryStore", InMemoryStore(index=index))]
        if url is not None:
            sem += redis_runners(url, prefix + "s", index=index)
        pg, why, drop = postgres_runner("bench_store_" + uuid.uuid4().hex[:8], index=index)
        cleanups.append(drop)
        if pg is None:
            skipped.append(f"PostgresStore (semantic): {why}")
        else:
            sem.append(pg)
        ns = ("docs",)
        batch = 100
        for r in sem:
            if r.name == "AsyncRedisStore":
                continue
            for start in range(0, args.semantic, batch):
                r.call("batch", [PutOp(ns, f"d{i}", value(random.Random(i), i)) for i in range(start, start + batch)])
        queries = [" ".join(random.Random(q).choices(WORDS, k=3)) for q in range(args.queries)]
        times: dict[str, list[float]] = {r.name: [] for r in sem}
        recall: dict[str, list[float]] = {r.name: [] for r in sem}
        for q in queries:
            exact = [i.key for i in sem[0].call("search", ns, query=q, limit=10)]
            for r in sem:
                t = time.perf_counter()
                got = [i.key for i in r.call("search", ns, query=q, limit=10)]
                times[r.name].append(time.perf_counter() - t)
                recall[r.name].append(len(set(got) & set(exact)) / 10)
        print()
        from redis_saver.store import _semantics

        scoring = f"numpy {_semantics._np.__version__}" if _semantics._np is not None else "pure Python (no numpy)"
        print(f"semantic search, {args.semantic} items, {args.dims} dims, {args.queries} queries, limit 10;"
              f" RedisStore scoring: {scoring}")
        print("| store | p50 / p95 us | recall@10 |")
        print("|---|---|---|")
        for r in sem:
            print(f"| {r.name} | {stats(times[r.name])} | {statistics.mean(recall[r.name]):.3f} |")
        for s in skipped:
            print(f"\nskipped: {s}")
    finally:
        for c in reversed(cleanups):
            try:
                c()
            except Exception as e:  # noqa: BLE001
                print(f"cleanup: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
