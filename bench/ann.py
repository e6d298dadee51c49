"""RedisStore's approximate search (``ann_index_config``, HNSW vector sets) vs its exact mode, on Redis 8.

    .venv/bin/python bench/ann.py [--semantic 10000[,100000]] [--dims 256] [--queries 30]
                                  [--hnsw 16,64] [--ef 10,20,40,100,200,400]

One namespace grown to each size (bench/store.py's values and hashed-word embedding; the
vectors computed once with numpy, so the stores' embed is a lookup and the load times are the
store's), loaded twice on the same server: by a store in exact mode (sets made with M 4 EF 1,
searched with ``VSIM ... TRUTH``) and by one with ``ann_index_config`` (M, ef_construction of
``--hnsw``). Write cost per mode: the load's time, each 100-put batch's p50 / p95 / worst, and the
worst PING of a second client during the load (a write script runs on the main thread: its VADDs
block every client), and the set's ``MEMORY USAGE``. Then ``--queries`` searches (limit 10, no
vector cache): the exact mode, and the approximate one at each ``ef_search`` of ``--ef``: p50 /
p95 latency and recall@10 against the exact ranking (numpy, float64 on the stored float32
values, as the store scores).

Redis 8: ``BENCH_REDIS8_URL``, else a fresh server of devkit.matrix's ``redis-8.2``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import redis  # noqa: E402
from langgraph.store.base import PutOp  # noqa: E402

from bench.store import WORDS, embed_factory, sizes, value  # noqa: E402
from bench.vset import pct, pinging, redis8_url  # noqa: E402
from redis_saver import RedisStore  # noqa: E402
from redis_saver.store._keys import enc_ns  # noqa: E402

NS = ("docs",)
BATCH = 100


class Vectors:
    """Texts -> embeddings (bench/store.py's hashed words, summed in numpy: the same values)."""

    def __init__(self, dims: int) -> None:
        slow = embed_factory(dims)
        self.words = {w: i for i, w in enumerate(WORDS)}
        self.w = np.asarray(slow(WORDS), dtype=np.float64)
        self.rows: dict[str, int] = {}
        self.m = np.zeros((0, dims), dtype=np.float32)

    def add(self, texts: list[str]) -> None:
        idx = np.asarray([[self.words[w] for w in t.split()] for t in texts])
        new = self.w[idx].sum(axis=1).astype(np.float32)
        base = len(self.m)
        self.m = np.concatenate((self.m, new))
        for j, t in enumerate(texts):
            self.rows.setdefault(t, base + j)

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for t in texts:
            i = self.rows.get(t)
            row = self.m[i] if i is not None else self.w[[self.words[w] for w in t.split()]].sum(0)
            out.append(row.tolist())
        return out


def load(store: RedisStore, url: str, start: int, end: int) -> dict[str, float]:
    """Put items start..end in batches of 100 while another client PINGs."""
    batches = []
    with pinging(url, pause=0.001) as pings:
        t0 = time.perf_counter()
        for s in range(start, end, BATCH):
            t = time.perf_counter()
            store.batch([PutOp(NS, f"d{i}", value(random.Random(i), i)) for i in range(s, min(s + BATCH, end))])
            batches.append(time.perf_counter() - t)
        total = time.perf_counter() - t0
    return {"total": total, "p50": pct(batches, 0.5) * 1e3, "p95": pct(batches, 0.95) * 1e3,
            "max": max(batches) * 1e3, "ping": max(pings) * 1e3, "ping99": pct(pings, 0.99) * 1e3}  # fmt: skip


def exact_top(vec: Vectors, q: list[float], n: int) -> list[str]:
    m = vec.m[:n].astype(np.float64)
    qv = np.asarray(q)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = (m @ qv) / (np.linalg.norm(m, axis=1) * np.linalg.norm(qv))
    top = np.argsort(-s, kind="stable")[:10]
    return [f"d{i}" for i in top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--semantic", type=sizes, default=[10000])
    ap.add_argument("--dims", type=int, default=256)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--hnsw", default="16,64", help="M,ef_construction of the approximate store's sets")
    ap.add_argument("--ef", default="10,20,40,100,200,400", help="ef_search values to sweep")
    args = ap.parse_args()
    m, efc = (int(x) for x in args.hnsw.split(","))
    efs = [int(x) for x in args.ef.split(",")]
    vec = Vectors(args.dims)
    with redis8_url() as url:
        r = redis.Redis.from_url(url)
        print(f"# Redis {r.info('server')['redis_version']} at {url}; {args.dims} dims, limit 10, HNSW M {m} "
              f"ef_construction {efc}", file=sys.stderr)
        prefix = "bench_ann_" + uuid.uuid4().hex[:8]
        index: dict[str, Any] = {"dims": args.dims, "embed": vec.embed, "fields": ["text"]}
        kw: dict[str, Any] = {"vector_cache_bytes": 0, "telemetry": False}

        def mk(p: str, ann: dict[str, Any] | None) -> RedisStore:
            ix = dict(index, ann_index_config=ann) if ann else index
            return RedisStore(redis.Redis.from_url(url), prefix=p, index=ix, **kw)

        exact = mk(prefix + "e", None)
        ann_cfg = {"kind": "hnsw", "m": m, "ef_construction": efc}
        approx = mk(prefix + "h", ann_cfg)
        queries = [" ".join(random.Random(q).choices(WORDS, k=3)) for q in range(args.queries)]
        qvecs = vec.embed(queries)
        loaded = 0
        for size in args.semantic:
            vec.add([value(random.Random(i), i)["text"] for i in range(loaded, size)])
            print(f"\n{size} items ({loaded} before): writes, batches of {BATCH} puts")
            print("| mode | load s | batch p50 / p95 / worst ms | worst PING ms (p99) | set MEMORY USAGE MB |")
            print("|---|---|---|---|---|")
            for name, s in (("exact (M 4, EF 1)", exact), (f"HNSW (M {m}, EF {efc})", approx)):
                w = load(s, url, loaded, size)
                mem = r.memory_usage(s.keys.vset(0, enc_ns(NS)), samples=0) or 0
                print(f"| {name} | {w['total']:.1f} | {w['p50']:.1f} / {w['p95']:.1f} / {w['max']:.1f} |"
                      f" {w['ping']:.1f} ({w['ping99']:.2f}) | {mem / 2**20:.1f} |")
            loaded = size
            truth = [exact_top(vec, qv, size) for qv in qvecs]
            print(f"\n{size} items: search (limit 10, {args.queries} queries), p50 / p95 ms, recall@10")
            print("| mode | p50 / p95 ms | recall@10 |")
            print("|---|---|---|")
            rows = [("exact", exact)] + [(f"HNSW ef_search {e}", mk(prefix + "h", dict(ann_cfg, ef_search=e)))
                                         for e in efs]  # fmt: skip
            for name, s in rows:
                ts, rec = [], []
                s.search(NS, query=queries[0], limit=10)  # warm: scripts loaded, sets probed
                for q, want in zip(queries, truth, strict=True):
                    t = time.perf_counter()
                    got = [x.key for x in s.search(NS, query=q, limit=10)]
                    ts.append(time.perf_counter() - t)
                    rec.append(len(set(got) & set(want)) / 10)
                scans = s._cfg.state.vset_stats["scans"]  # searches that fell back to the scan (expected: none)
                print(f"| {name} | {pct(ts, 0.5) * 1e3:.2f} / {pct(ts, 0.95) * 1e3:.2f} |"
                      f" {statistics.mean(rec):.3f}{f' ({scans} scans)' if scans else ''} |")


if __name__ == "__main__":
    main()
