"""Per-call latency and server time of one source tree, for before/after comparisons.

    python bench/calls_ab.py [ROUNDS] [ttl]

Replays the benchmark's recorded chat workload (bench/workload.py: 25 turns) into a fresh
redis-server, ROUNDS threads of it (default 8), through ``RedisSaver`` (with ``ttl``: a 60-minute
ttl), then reads each thread 30 times: ``get_tuple`` latest, ``get_tuple`` by id (the middle
checkpoint), ``list(limit=10)``. Prints one JSON line: per call, the p50 of wall time (µs) and
the mean server time (``INFO commandstats`` usec of FCALL / EVALSHA / EVAL around each call).

To compare two versions, run it from each tree in turn (the tree's root on ``PYTHONPATH``), in
alternation so that the machine's load falls on both alike, e.g. with a baseline extracted by
``git archive <rev> | tar -x -C /tmp/base``; docs/benchmarks.md shows how it was used.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from bench.workload import call_for_thread, capture  # noqa: E402
from devkit.servers import client_kwargs, start_standalone  # noqa: E402
from redis_saver import RedisSaver  # noqa: E402

SCRIPT_COMMANDS = ("cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_evalsha", "cmdstat_eval")


def server_usec(r: redis.Redis) -> int:
    stats = r.info("commandstats")
    return sum(int(v["usec"]) for k, v in stats.items() if k in SCRIPT_COMMANDS)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    ttl = {"default_ttl": 60} if len(sys.argv) > 2 and sys.argv[2] == "ttl" else None
    w = capture(25)
    wall: dict[str, list[float]] = {k: [] for k in ("put", "put_writes", "get_tuple", "get_tuple_id", "list10")}
    server: dict[str, list[int]] = {k: [] for k in wall}
    with start_standalone() as srv:
        r = redis.Redis(host=srv.host, port=srv.port, **client_kwargs())
        client = redis.Redis(host=srv.host, port=srv.port, **client_kwargs())
        saver = RedisSaver(client, prefix="ab", ttl=ttl, eviction_check="off")
        saver.setup()

        def timed(op: str, f: Any) -> None:
            s0, t0 = server_usec(r), time.perf_counter()
            f()
            t1, s1 = time.perf_counter(), server_usec(r)
            wall[op].append((t1 - t0) * 1e6)
            server[op].append(s1 - s0)

        for n in range(rounds):
            tid = f"t{n}"
            for c in w.calls:
                if c.op in ("put", "put_writes"):
                    c = call_for_thread(c, tid)
                    timed(c.op, lambda c=c: getattr(saver, c.op)(*c.args, **c.kwargs))
            mid = w.put_ids[len(w.put_ids) // 2]
            latest: dict[str, Any] = {"configurable": {"thread_id": tid}}
            by_id: dict[str, Any] = {"configurable": {"thread_id": tid, "checkpoint_ns": "", "checkpoint_id": mid}}
            for _ in range(30):
                timed("get_tuple", lambda latest=latest: saver.get_tuple(latest))
                timed("get_tuple_id", lambda by_id=by_id: saver.get_tuple(by_id))
                timed("list10", lambda latest=latest: list(saver.list(latest, limit=10)))
        r.close()
        client.close()
    print(json.dumps({k: {"wall_p50": statistics.median(wall[k]), "server_mean": statistics.mean(server[k])}
                      for k in wall}))


if __name__ == "__main__":
    main()
