"""Failover benchmark (not a test): kill -9 a Redis Cluster primary under continuous checkpoint writes.

Runs the scenario of ``tests/scale/test_failover.py`` (``devkit.workers.run_failover``) a few times
with and without ``wait_for_replicas=1``, for ``kill -9`` (+ restart) and SIGSTOP (+ SIGCONT) of the
primary, each run on a fresh local 3 primaries + 3 replicas cluster
(``--cluster-node-timeout 1000``), and prints a markdown table: time from the kill until the promoted
replica serves the slots, until every affected worker's put is acknowledged again (recovery), how many
puts/writes were acknowledged, and how many acknowledged ones were missing afterwards.

    .venv/bin/python bench/failover.py [--runs 3] [--threads 6] [--after 1.5] [--faults kill,stop]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: the repository root on the path, as `python -m` has it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devkit import workers as W  # noqa: E402
from devkit.servers import start_cluster  # noqa: E402


def one_run(fault: str, wait: int, threads: int, after: float) -> dict:
    c = start_cluster(masters=3, replicas_per_master=1)
    try:
        return W.run_failover(c, wait_for_replicas=wait, n_threads=threads, after=after, fault=fault)
    finally:
        c.stop()


def fmt_errors(errors: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(errors.items())) or "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per mode (default 3)")
    ap.add_argument("--threads", type=int, default=6, help="writer threads, one checkpoint thread each")
    ap.add_argument("--after", type=float, default=1.5, help="seconds of writing after the restart")
    ap.add_argument("--faults", default="kill,stop", help="kill (kill -9 + restart) and/or stop (SIGSTOP + SIGCONT)")
    args = ap.parse_args(argv)

    rows = []
    t0 = time.monotonic()
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    for run in range(args.runs):
        for fault in faults:
            for wait in (0, 1):
                r = one_run(fault, wait, args.threads, args.after)
                r["run"] = run + 1
                rows.append(r)
                print(
                    f"run {run + 1} {fault} wait_for_replicas={wait}: recovery {r['recovery_s']:.2f} s, "
                    f"lost {r['lost_puts']}/{r['acked_puts']} puts, {r['lost_writes']}/{r['acked_writes']} writes",
                    file=sys.stderr,
                    flush=True,
                )

    print(f"\n### Failover of a primary under load, 3+3 cluster, node-timeout 1000 ms, {args.threads} writers\n")
    print("| run | fault | wait_for_replicas | promoted (s) | recovery (s) | longest ack gap (s) "
          "| acked puts | lost puts | acked writes | lost writes "
          "| errors seen by workers (retried) | other primaries stalled |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['run']} | {r['fault']} | {r['wait_for_replicas']} "
            f"| {r['promoted_s']:.2f} | {r['recovery_s']:.2f} | {r['max_gap_s']:.2f} "
            f"| {r['acked_puts']} | {r['lost_puts']} | {r['acked_writes']} | {r['lost_writes']} "
            f"| {fmt_errors(r['errors'])} | {len(r['others_stalled'])} |"
        )
    print("\n| fault | wait_for_replicas | runs | recovery median (s) | recovery max (s) "
          "| acked puts/run | lost puts (total) "
          "| lost writes (total) | integrity problems |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for fault, wait in [(f, w) for f in faults for w in (0, 1)]:
        rs = [r for r in rows if r["wait_for_replicas"] == wait and r["fault"] == fault]
        rec = [r["recovery_s"] for r in rs]
        print(
            f"| {fault} | {wait} | {len(rs)} | {statistics.median(rec):.2f} | {max(rec):.2f} "
            f"| {statistics.mean(r['acked_puts'] for r in rs):.0f} | {sum(r['lost_puts'] for r in rs)} "
            f"| {sum(r['lost_writes'] for r in rs)} | {sum(len(r['problems']) for r in rs)} |"
        )
    print(f"\n(total {time.monotonic() - t0:.0f} s; recovery = fault until every affected worker's next put is acked; "
          "longest ack gap = longest time without an acked put on an affected thread; "
          "the killed node is restarted / the stopped node SIGCONTed as soon as the replica is promoted)")  # fmt: skip
    problems = [p for r in rows for p in r["problems"]] + [u for r in rows for u in r["unexpected"]]
    for p in problems[:10]:
        print(f"- problem: {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
