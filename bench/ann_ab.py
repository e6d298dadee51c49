"""Two builds of RedisStore's approximate search side by side, query by query, on one loaded Redis 8.

    python bench/ann_ab.py URL PREFIX ITEMS load                          # load ITEMS (HNSW M 16, EF 64)
    python bench/ann_ab.py URL PREFIX ITEMS ab BUILD_A BUILD_B EFS QUERIES ROUNDS
    python bench/ann_ab.py URL PREFIX ITEMS first BUILD QUERY_NO          # one fresh store's first query

``load`` puts bench/store.py's items (its values and hashed-word embedding, as bench/ann.py) into
one namespace with ``ann_index_config`` m 16, ef_construction 64, with this checkout's build.
``ab`` starts one worker process per build (BUILD: a directory holding ``redis_saver`` and ``lua``,
e.g. ``git archive <commit> redis_saver lua | tar -x -C DIR``), each with that build alone on its
PYTHONPATH, and asks both the same query in a shuffled order, for each ``ef_search`` of EFS,
QUERIES queries, ROUNDS rounds (no vector cache): p50 per build, how many queries the second
build answered faster, and whether both returned the same keys. ``first``: a new process, a new
store, its first and second query (ms).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _store(url: str, prefix: str, embed, ef: int):  # type: ignore[no-untyped-def]
    import redis

    from redis_saver import RedisStore

    ann = {"kind": "hnsw", "m": 16, "ef_construction": 64, "ef_search": ef}
    index = {"dims": 256, "embed": embed, "fields": ["text"], "ann_index_config": ann}
    return RedisStore(redis.Redis.from_url(url), prefix=prefix, index=index, vector_cache_bytes=0, telemetry=False)


def _setup(n_items: int, nq: int):  # type: ignore[no-untyped-def]
    import redis_saver  # noqa: F401 - the build on PYTHONPATH first: bench/ puts this checkout first

    sys.path.append(HERE)
    from bench.ann import Vectors
    from bench.store import WORDS, value

    vec = Vectors(256)
    queries = [" ".join(random.Random(q).choices(WORDS, k=3)) for q in range(nq)]
    if n_items:
        vec.add([value(random.Random(i), i)["text"] for i in range(n_items)])
    vec.add(queries)
    return vec, queries, value


def worker(url: str, prefix: str, nq: int) -> None:
    vec, queries, _ = _setup(0, nq)
    stores = {}
    print("ready", flush=True)
    for line in sys.stdin:
        ef, qi = map(int, line.split())
        if ef not in stores:
            stores[ef] = _store(url, prefix, vec.embed, ef)
            stores[ef].search(("docs",), query=queries[0], limit=10)
        s = stores[ef]
        t = time.perf_counter()
        got = [x.key for x in s.search(("docs",), query=queries[qi], limit=10)]
        dt = time.perf_counter() - t
        print(json.dumps([dt, got, s._cfg.state.vset_stats["scans"]]), flush=True)


def ab(url: str, prefix: str, builds: dict[str, str], efs: list[int], nq: int, rounds: int) -> None:
    procs = {
        b: subprocess.Popen(
            [sys.executable, __file__, url, prefix, "0", "worker", str(nq)],
            env={"PYTHONPATH": p, "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        for b, p in builds.items()
    }  # fmt: skip
    for p in procs.values():
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    times: dict[tuple[str, int], list[float]] = {(b, ef): [] for b in builds for ef in efs}
    same = total = 0
    loads = [open("/proc/loadavg").read().split()[0]]
    rng = random.Random(5)
    for _ in range(rounds):
        for ef in efs:
            for qi in range(nq):
                order = list(builds)
                rng.shuffle(order)
                got = {}
                for b in order:
                    p = procs[b]
                    assert p.stdin is not None and p.stdout is not None
                    p.stdin.write(f"{ef} {qi}\n")
                    p.stdin.flush()
                    dt, keys, scans = json.loads(p.stdout.readline())
                    assert scans == 0, "a search fell back to the scan"
                    times[(b, ef)].append(dt * 1e3)
                    got[b] = keys
                total += 1
                same += len(set(map(json.dumps, got.values()))) == 1
        loads.append(open("/proc/loadavg").read().split()[0])
    a, b = list(builds)
    print(f"answers identical: {same}/{total}; load average (1 min) at each round: {loads}")
    print(f"| ef_search | {a} p50 ms | {b} p50 ms | ratio | queries {b} answered faster |")
    print("|---|---|---|---|---|")
    for ef in efs:
        ta, tb = times[(a, ef)], times[(b, ef)]
        wins = sum(y < x for x, y in zip(ta, tb, strict=True))
        ma, mb = statistics.median(ta), statistics.median(tb)
        print(f"| {ef} | {ma:.2f} | {mb:.2f} | {mb / ma:.2f} | {wins}/{len(ta)} |")
    for p in procs.values():
        assert p.stdin is not None
        p.stdin.close()
        p.wait()


def main() -> None:
    url, prefix, n_items, what = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if what == "worker":
        worker(url, prefix, int(sys.argv[5]))
    elif what == "load":
        from langgraph.store.base import PutOp

        vec, _, value = _setup(n_items, 1)
        s = _store(url, prefix, vec.embed, 100)
        t = time.perf_counter()
        for a in range(0, n_items, 100):
            s.batch([PutOp(("docs",), f"d{i}", value(random.Random(i), i)) for i in range(a, min(a + 100, n_items))])
        print(f"loaded {n_items} in {time.perf_counter() - t:.1f} s")
    elif what == "ab":
        builds = {os.path.basename(d.rstrip("/")): d for d in sys.argv[5:7]}
        ab(url, prefix, builds, [int(x) for x in sys.argv[7].split(",")], int(sys.argv[8]), int(sys.argv[9]))
    elif what == "first":
        proc = subprocess.run(
            [sys.executable, __file__, url, prefix, "0", "first-here", sys.argv[6]],
            env={"PYTHONPATH": sys.argv[5], "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            capture_output=True, text=True,
        )  # fmt: skip
        print(proc.stdout.strip() or proc.stderr[-2000:])
    elif what == "first-here":
        qi = int(sys.argv[5])
        vec, queries, _ = _setup(0, qi + 1)
        s = _store(url, prefix, vec.embed, 100)
        t = time.perf_counter()
        s.search(("docs",), query=queries[qi], limit=10)
        t1 = time.perf_counter() - t
        t = time.perf_counter()
        s.search(("docs",), query=queries[qi], limit=10)
        t2 = time.perf_counter() - t
        print(json.dumps([t1 * 1e3, t2 * 1e3, s._cfg.state.vset_stats]))


if __name__ == "__main__":
    main()
