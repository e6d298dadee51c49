"""A store written as often as it is searched: one put, then one semantic search, in turns.

    .venv/bin/python bench/store_churn.py [--semantic 10000,100000] [--rounds 20] [--dims 256]

One namespace of ``--semantic`` items (``--dims`` float32 vectors, a deterministic embedding:
a hash of the text seeds numpy's generator). Each round a writer (a store without a cache) puts
one item (an overwrite of a random item with a new text, or a new item, in turns), then each
searcher runs one semantic search (limit 10, a random query) and the search is timed:

- ``incremental``: RedisStore with the vector cache; the put reaches it through the shard's
  change log (the search patches its cached entry in the same call);
- ``invalidation``: the same with ``_vcache.CHANGE_BUDGET = 0`` during its searches: any change
  under the prefix makes the cache scan and refill, which is what the release before the change
  log did for every write (``git show 48dceae:redis_saver/store/_plans.py``);
- ``no writes``: the incremental store searched again without a put in between (a plain hit).

Every search's keys are compared with the scan's (a store without a cache) on the first and
last rounds; recall@10 is printed. Redis runs on a fresh ``redis-server`` (devkit/servers.py;
``BENCH_REDIS_URL``: a server of yours, under a unique prefix). Prints p50 / p95 in ms.
Loading 100,000 items of 256 dims takes ~1 minute; a round at 100k ~3 s (the invalidation scan).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import statistics
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.store import sizes  # noqa: E402

WORDS = [f"w{i}" for i in range(400)]
NS = ("users", "u1", "memories")


def embed_factory(dims: int) -> Any:
    import numpy as np

    def embed(texts: list[str]) -> list[list[float]]:
        out = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
            out.append(np.random.default_rng(seed).standard_normal(dims).astype(np.float32).tolist())
        return out

    return embed


def text(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=8))


def ms(samples: list[float]) -> str:
    s = sorted(samples)
    return f"{statistics.median(s) * 1e3:8.2f} / {s[min(len(s) - 1, int(len(s) * 0.95))] * 1e3:8.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--semantic", type=sizes, default=[10_000, 100_000], help="items in the namespace (grows)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--dims", type=int, default=256)
    args = ap.parse_args()

    import redis
    from langgraph.store.base import PutOp

    from devkit.servers import start_standalone
    from redis_saver import RedisStore
    from redis_saver.store import _vcache

    server = None
    url = os.environ.get("BENCH_REDIS_URL")
    if url is None:
        server = start_standalone()
        url = server.url
    prefix = "churn" + uuid.uuid4().hex[:8]
    client = redis.Redis.from_url(url)
    try:
        index = {"dims": args.dims, "embed": embed_factory(args.dims), "fields": ["text"]}
        writer = RedisStore(client, prefix=prefix, index=index, vector_cache_bytes=0)
        scan = writer
        inc = RedisStore(client, prefix=prefix, index=index, vector_cache_bytes=1 << 30)
        inv = RedisStore(client, prefix=prefix, index=index, vector_cache_bytes=1 << 30)
        print(f"Redis {client.info('server')['redis_version']} at {url}; {args.dims} dims, limit 10, "
              f"{args.rounds} rounds of (one put, one search each)")
        rng = random.Random(3)
        have = 0
        for size in args.semantic:
            t0 = time.perf_counter()
            while have < size:
                n = min(256, size - have)
                writer.batch([PutOp(NS, f"m{have + i}", {"text": text(rng), "i": have + i}) for i in range(n)])
                have += n
            load = time.perf_counter() - t0
            times: dict[str, list[float]] = {"incremental": [], "invalidation": [], "no writes": []}
            puts: list[float] = []
            agree = total = 0
            for s in (inc, inv):  # the caches fill (a cold scan each)
                s.search(NS, query=text(rng), limit=10)
            patches, fills = inc._cfg.state.vcache.patches, inc._cfg.state.vcache.fills  # type: ignore[union-attr]
            for r in range(args.rounds):
                key = f"m{rng.randrange(have)}" if r % 2 else f"new{size}-{r}"
                t0 = time.perf_counter()
                writer.put(NS, key, {"text": text(rng), "i": -1})
                puts.append(time.perf_counter() - t0)
                q = text(rng)
                for name, store in (("incremental", inc), ("invalidation", inv)):
                    budget = _vcache.CHANGE_BUDGET
                    if store is inv:
                        _vcache.CHANGE_BUDGET = 0
                    try:
                        t0 = time.perf_counter()
                        got = store.search(NS, query=q, limit=10)
                        times[name].append(time.perf_counter() - t0)
                    finally:
                        _vcache.CHANGE_BUDGET = budget
                    if r in (0, args.rounds - 1):
                        want = {i.key for i in scan.search(NS, query=q, limit=10)}
                        agree += len(want & {i.key for i in got})
                        total += len(want)
                t0 = time.perf_counter()
                inc.search(NS, query=text(rng), limit=10)
                times["no writes"].append(time.perf_counter() - t0)
            vc = inc._cfg.state.vcache
            assert vc is not None
            print(f"\n{have:,} items (loaded in {load:.1f} s); put p50 / p95 {ms(puts)} ms; "
                  f"recall@10 {agree / max(1, total):.3f} (first and last rounds, against the scan)")
            print(f"  incremental: {vc.patches - patches} patches, {vc.fills - fills} refills")
            for name, ts in times.items():
                print(f"  search {name:<13} p50 / p95 {ms(ts)} ms")
    finally:
        try:
            for k in client.scan_iter(match=f"{prefix}:*", count=1000):
                client.delete(k)
        finally:
            client.close()
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
