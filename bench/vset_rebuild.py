"""Rebuilding a namespace's vector set on Redis 8 (RedisStore.rebuild_vector_sets): its cost.

    .venv/bin/python bench/vset_rebuild.py [--items 10000] [--dims 256] [--budget 128,512]

One namespace of ``--items`` items (bench/store.py's embedding and values) written by a store
with ``vector_sets=False`` (out of sets, as a namespace made before them); then per budget, the
set is dropped and rebuilt a page at a time: total time, pages, p50 / worst page (one script
call: the time the server is busy with it, plus a round trip), and the worst PING of a second
client meanwhile (another process; a page blocks the others for its duration); then searches from the rebuilt set
against the scan (identical answers, from sets).

Redis 8: ``BENCH_REDIS8_URL``, else a fresh server of devkit.matrix's ``redis-8.2``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402
from langgraph.store.base import PutOp  # noqa: E402

from bench.store import WORDS, sizes, value  # noqa: E402
from bench.vset import redis8_url, store_pair  # noqa: E402
from redis_saver.store import _rebuild  # noqa: E402
from redis_saver.store._keys import enc_ns  # noqa: E402


def pinger(url: str, stop: object, worst: object) -> None:
    """PING in a loop until ``stop`` is set; the worst latency (s) into ``worst``."""
    c = redis.Redis.from_url(url)
    while not stop.is_set():  # type: ignore[attr-defined]
        t = time.perf_counter()
        c.ping()
        worst.value = max(worst.value, time.perf_counter() - t)  # type: ignore[attr-defined]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=10000)
    ap.add_argument("--dims", type=int, default=256)
    ap.add_argument("--budget", type=sizes, default=[128, 512])
    args = ap.parse_args()
    with redis8_url() as url:
        r = redis.Redis.from_url(url)
        print(f"Redis {r.info('server')['redis_version']} at {url}; {args.items:,} items of {args.dims} dims")
        prefix = "bench_vsrb_" + uuid.uuid4().hex[:8]
        vs, old = store_pair(url, prefix, args.dims)
        ns = ("docs",)
        for start in range(0, args.items, 100):
            end = min(start + 100, args.items)
            old.batch([PutOp(ns, f"d{i}", value(random.Random(i), i)) for i in range(start, end)])
        vs._vsets()
        print("| budget | pages | total s | page p50 / worst ms | worst PING meanwhile ms | identical (from sets) |")
        print("|---|---|---|---|---|---|")
        for budget in args.budget:
            r.delete(vs.keys.vset(0, enc_ns(ns)))
            r.hdel(vs.keys.base(0) + b"c", enc_ns(ns))
            stop, worst = mp.Event(), mp.Value("d", 0.0)
            th = mp.Process(target=pinger, args=(url, stop, worst))  # another process: no GIL shared
            th.start()
            time.sleep(0.5)
            pages: list[float] = []
            token, start, status = _rebuild.new_token(), True, "more"
            t0 = time.perf_counter()
            while status == "more":

                def plan(token: str = token, start: bool = start, budget: int = budget):  # type: ignore[no-untyped-def]
                    call = _rebuild.page_call(vs._cfg, 0, enc_ns(ns), token, start, budget)
                    return _rebuild.parse_page((yield call))

                t = time.perf_counter()
                status, token, _ = vs._driver.run(plan())
                pages.append(time.perf_counter() - t)
                start = False
            total = time.perf_counter() - t0
            stop.set()
            th.join()
            assert status == "done", status
            same, hits0 = 0, vs._cfg.state.vset_stats["hits"]
            queries = [" ".join(random.Random(q).choices(WORDS, k=3)) for q in range(10)]
            for q in queries:
                got, want = vs.search(ns, query=q, limit=10), old.search(ns, query=q, limit=10)
                same += [(x.key, x.score) for x in got] == [(x.key, x.score) for x in want]
            print(
                f"| {budget} | {len(pages)} | {total:.2f} | {statistics.median(pages) * 1e3:.1f} / "
                f"{max(pages) * 1e3:.1f} | {worst.value * 1e3:.1f} | {same}/{len(queries)} "
                f"({vs._cfg.state.vset_stats['hits'] - hits0}) |",
                flush=True,
            )
        for k in r.scan_iter(match=prefix + "*"):
            r.delete(k)


if __name__ == "__main__":
    main()
