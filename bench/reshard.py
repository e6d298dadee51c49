"""Live resharding under load, the full scenario (``devkit/reshard.py``): a 3-primary cluster,
4 sync RedisSaver workers on 8 threads each (the last with ``compress=False`` and run ids), one
AsyncRedisSaver with 32 tasks on 300 threads, three ``redis-cli --cluster reshard`` rounds of
5,461 slots, then 32 slots that hold threads half-moved for 2 s.

    .venv/bin/python -m bench reshard [--server redis-7.0|redis-8.2|valkey-9.1] [--migration redis-cli|atomic]
        [--rounds 3] [--slots 5461] [--slow 32] [--hold 2] [--threads 300]

``--server``: the cluster's server (``redis-7.0``: the one on PATH; the others from
``devkit.matrix``). ``--migration``: how the rounds move slots, ``redis-cli --cluster reshard``
key by key (the redis-cli beside the server if its package ships one, else the one on PATH) or
Valkey 9's atomic ``CLUSTER MIGRATESLOTS`` (the default on ``valkey-9.1``). The slow round
always holds slots half-moved key by key.

Prints the report: calls, errors surfaced, scripts stopped halfway, wrong reads, lost
writes, damaged threads, leaks, the slowest call, and the first few of each kind. Exit status 1
when any count is not 0 or a call took longer than the slow round's measured half-moved
window + 2 s. ``BENCH_DEBUG=1`` prints the first errors'
tracebacks. tests/scale/test_live_reshard.py runs a small one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

SERVERS = {"redis-7.0": None, "redis-8.2": "redis-8.2", "valkey-9.1": "valkey-9"}  # -> devkit.matrix name


def main(argv: list[str] | None = None) -> int:
    from devkit import reshard as R
    from devkit.servers import start_cluster

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", choices=sorted(SERVERS), default="redis-7.0")
    ap.add_argument("--migration", choices=["redis-cli", "atomic"], help="default: atomic on valkey-9.1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--slots", type=int, default=5461, help="slots per redis-cli reshard round")
    ap.add_argument("--slow", type=int, default=32, help="slots held half-moved")
    ap.add_argument("--hold", type=float, default=2.0, help="seconds the slow round holds them")
    ap.add_argument("--threads", type=int, default=300, help="threads of the async saver")
    args = ap.parse_args(argv)
    migration = args.migration or ("atomic" if args.server == "valkey-9.1" else "redis-cli")
    if migration == "atomic" and args.server != "valkey-9.1":
        ap.error("--migration atomic needs --server valkey-9.1")
    plan = R.Plan(rounds=args.rounds, round_slots=args.slots, slow_slots=args.slow, hold=args.hold,
                  async_threads=args.threads, atomic=migration == "atomic")  # fmt: skip
    binary = None
    if SERVERS[args.server]:
        from devkit.matrix import CACHE, find

        CACHE.mkdir(parents=True, exist_ok=True)
        binary = find(SERVERS[args.server]).binary
    cluster = start_cluster(masters=3, replicas_per_master=0, binary=binary)
    try:
        report = R.run(cluster, plan)
    finally:
        cluster.stop()
    summary = report.summary()
    info = {"server": args.server, "migration": migration}
    print(json.dumps({**info, **summary, "load": round(os.getloadavg()[0], 2)}, indent=1))
    for name in ("errors", "halfway", "wrong_reads", "lost", "damaged", "leaks"):
        for line in getattr(report, name)[:5]:
            print(f"{name}: {line}")
    if os.environ.get("BENCH_DEBUG"):
        print("\n".join(report.traces))
    bad = ("errors", "halfway", "wrong_reads", "lost_writes", "damaged", "leaks")
    # the target: no call slower than the half-moved window + 2 s; the window as measured (under
    # load, opening and finishing the slow round's slots adds to the hold)
    return 1 if any(summary[k] for k in bad) or summary["slowest_s"] > max(args.hold, report.window_s) + 2 else 0


if __name__ == "__main__":
    sys.exit(main())
