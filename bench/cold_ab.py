"""The cold semantic search of two source trees, side by side in one run (interleaved A/B).

    python bench/cold_ab.py BASE_TREE [--sizes 1000,10000,100000] [--reps 11] [--dims 256]

One fresh ``redis-server`` (devkit/servers.py), one namespace grown to each size (this tree's
RedisStore loads it; the stored format is the same in both trees), and two worker processes,
one importing ``redis_saver`` from ``BASE_TREE`` (e.g. ``git archive main | tar -x -C
/tmp/base``), one from this tree. Each rep asks both workers the same query, A then B on even
reps and B then A on odd ones, in four cases: no filter / ``{"kind": "fact"}`` (a third of the
items match), without the vector cache (``vector_cache_bytes=0``) / with it, emptied before each
query (so every query is cold and fills it). Per query: wall time, the worker's CPU time
(``time.process_time``: reading the replies, scoring, filtering, filling the cache) and the
server's time (``INFO commandstats`` usec of the script commands around the query). The two
trees' answers (keys and scores) must be equal; the run says how many differed. Prints one
markdown table: the p50 of each (wall, client CPU, server time; a shared machine's outliers
move means), per size and case.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT_COMMANDS = ("cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_evalsha", "cmdstat_eval")
FILTERS: dict[str, Any] = {"none": None, "kind=fact": {"kind": "fact"}}
CASES = [("off", "none"), ("off", "kind=fact"), ("on", "none")]  # a filter never uses the cache


def embedder(dims: int) -> Any:
    import numpy as np

    def vector(text: str) -> list[float]:  # "d<i>": item i's vector; "q<i>": query i's
        seed = int(text[1:]) * 2 + (text[0] == "q")
        return np.random.default_rng(seed).standard_normal(dims).astype(np.float32).tolist()

    return lambda texts: [vector(t) for t in texts]


def worker(tree: str, port: int, prefix: str, dims: int) -> None:
    sys.path.insert(0, tree)
    import redis

    import redis_saver
    from redis_saver import RedisStore

    assert Path(redis_saver.__file__).resolve().is_relative_to(Path(tree).resolve()), redis_saver.__file__
    index = {"dims": dims, "embed": embedder(dims), "fields": ["text"]}
    client = redis.Redis(port=port, socket_timeout=120)
    stats = redis.Redis(port=port, socket_timeout=120)
    stores = {
        "off": RedisStore(client, prefix=prefix, index=index, vector_cache_bytes=0),
        "on": RedisStore(client, prefix=prefix, index=index, vector_cache_bytes=2**30),
    }

    def server_usec() -> int:
        return sum(int(v["usec"]) for k, v in stats.info("commandstats").items() if k in SCRIPT_COMMANDS)

    print(json.dumps({"ready": redis_saver.__file__}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        st = stores[job["cache"]]
        if st._cfg.vcache is not None:
            st._cfg.vcache.clear()
        qv = st.embeddings.embed_query(job["query"])  # embedded outside the timing
        s0, c0, t0 = server_usec(), time.process_time(), time.perf_counter()
        got = st.search(("docs",), query=job["query"], filter=FILTERS[job["filter"]], limit=10)
        t1, c1 = time.perf_counter(), time.process_time()
        s1 = server_usec()
        assert qv is not None
        print(json.dumps({
            "wall": t1 - t0, "cpu": c1 - c0, "server": (s1 - s0) / 1e6,
            "answer": [[r.key, r.score] for r in got],
        }), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--dims", type=int, default=256)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--prefix", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.base, args.port, args.prefix, args.dims)
        return
    sys.path.insert(0, str(ROOT))
    import redis
    from langgraph.store.base import PutOp

    from devkit.servers import start_standalone
    from redis_saver import RedisStore

    prefix = "coldab"
    with start_standalone() as srv:
        client = redis.Redis(port=srv.port, socket_timeout=120)
        loader = RedisStore(client, prefix=prefix, index={"dims": args.dims, "embed": embedder(args.dims),
                                                          "fields": ["text"]}, vector_cache_bytes=0)
        loader.setup()
        trees = {"A (base)": args.base, "B (this tree)": str(ROOT)}
        procs = {}
        for name, tree in trees.items():
            cmd = [sys.executable, __file__, tree, "--worker", "--port", str(srv.port), "--prefix", prefix,
                   "--dims", str(args.dims)]
            env = dict(os.environ, PYTHONPATH="")
            procs[name] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
            print(f"# {name}: {json.loads(procs[name].stdout.readline())['ready']}", file=sys.stderr)  # type: ignore[union-attr]

        def ask(name: str, job: dict[str, Any]) -> dict[str, Any]:
            p = procs[name]
            p.stdin.write(json.dumps(job) + "\n")  # type: ignore[union-attr]
            p.stdin.flush()  # type: ignore[union-attr]
            return json.loads(p.stdout.readline())  # type: ignore[union-attr]

        rows = []
        loaded, differ, q = 0, 0, 0
        for size in [int(s) for s in args.sizes.split(",")]:
            t = time.perf_counter()
            kinds = ["fact", "pref", "note"]
            for start in range(loaded, size, 500):
                loader.batch([PutOp(("docs",), f"d{i}", {"text": f"d{i}", "kind": kinds[i % 3], "n": i})
                              for i in range(start, min(start + 500, size))])
            loaded = size
            print(f"# {size} items loaded in {time.perf_counter() - t:.1f} s, load average {os.getloadavg()}",
                  file=sys.stderr)
            res: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
            for rep in range(args.reps):
                for cache, flt in CASES:
                    q += 1
                    job = {"query": f"q{q}", "filter": flt, "cache": cache}
                    order = list(trees) if rep % 2 == 0 else list(reversed(trees))
                    out = {name: ask(name, job) for name in order}
                    if out[order[0]]["answer"] != out[order[1]]["answer"]:
                        differ += 1
                    for name, o in out.items():
                        res.setdefault((cache, flt, name), []).append(o)
            for (cache, flt, name), os_ in res.items():
                wall = statistics.median(o["wall"] for o in os_) * 1e3
                cpu = statistics.median(o["cpu"] for o in os_) * 1e3
                rows.append((size, cache, flt, name, wall, cpu, statistics.median(o["server"] for o in os_) * 1e3))
            print(f"# {size} done, load average {os.getloadavg()}", file=sys.stderr)
        for p in procs.values():
            p.stdin.close()  # type: ignore[union-attr]
            p.wait()
    print(f"{args.reps} reps, limit 10, {args.dims} dims, answers that differed between the trees: {differ}")
    print("| items | vector cache | filter | tree | wall ms | client CPU ms | server ms |  (p50 each)")
    print("|---|---|---|---|---|---|---|")
    for size, cache, flt, name, wall, cpu, server in rows:
        print(f"| {size:,} | {cache} | {flt} | {name} | {wall:.1f} | {cpu:.1f} | {server:.1f} |")


if __name__ == "__main__":
    main()
