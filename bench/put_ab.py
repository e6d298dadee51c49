"""Script time of put (and put_writes, get_tuple) before and after a change, on one server.

    python bench/put_ab.py [--base main] [--graph chat] [--threads 20] [--turns 12] [--rounds 8]

Both sides come from git (``git archive <ref> redis_saver lua`` into a scratch directory:
``--base``, default ``main``, against the working tree as it is). Each side records, in a process of
its own (its redis_saver on PYTHONPATH), the script calls its sync saver sends for the graph's
recorded calls (bench/shard.py ``record``) on ``--threads`` threads, a turn of every thread in
turn, each side under its own key prefix. Both libraries are then loaded on one redis-server this
starts, and every round replays both sides into it, call by call alternating (A B, then B A in
the next round), after a FLUSHALL: ``INFO commandstats`` after every call gives that call's
FCALL µs. Prints per operation the median over rounds of the mean per call (and the range), A
and B. Nothing here asserts anything: it measures.
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.append(str(ROOT))  # after PYTHONPATH: a side's redis_saver comes first


def _archive(ref: str, into: Path) -> None:
    data = subprocess.run(["git", "archive", ref, "redis_saver", "lua"], cwd=ROOT, capture_output=True, check=True)
    with tarfile.open(fileobj=BytesIO(data.stdout)) as tar:
        tar.extractall(into, filter="data")


def _record(port: int, prefix: str, graph: str, threads: int, turns: int, out: str) -> None:
    """(In the side's own process.) The script calls of the graph's calls on ``threads`` threads."""
    import redis

    from bench.shard import record
    from bench.workload import call_for_thread
    from devkit.script_cuts import script_calls
    from redis_saver import RedisSaver
    from redis_saver.core import scripts

    r = redis.Redis(port=port)
    saver = RedisSaver(r, prefix=prefix)
    calls = record(graph, turns)
    per_thread = len(calls)
    sent: list[tuple[str, tuple]] = []
    with script_calls(saver) as got:
        for i in range(per_thread):
            for t in range(threads):
                c = call_for_thread(calls[i], f"ab:{t}")
                n = len(got)
                getattr(saver, c.op)(*c.args, **c.kwargs)
                sent += [(c.op, a) for a in got[n:]]
    with open(out, "wb") as f:
        pickle.dump({"library": scripts.library().source, "calls": sent, "file": scripts.__file__}, f)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="main")
    ap.add_argument("--graph", default="chat")
    ap.add_argument("--threads", type=int, default=20)
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--_record", nargs=5, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a._record:
        port, prefix, threads, turns, out = a._record
        _record(int(port), prefix, a.graph, int(threads), int(turns), out)
        return 0

    import redis

    from devkit.servers import start_standalone

    with tempfile.TemporaryDirectory() as tmp, start_standalone() as srv:
        base = Path(tmp) / "base"
        _archive(a.base, base)
        sides: dict[str, Any] = {}
        for name, path, prefix in (("A " + a.base, base, "la"), ("B this tree", ROOT, "lb")):
            out = str(Path(tmp) / f"{prefix}.pickle")
            env = dict(os.environ, PYTHONPATH=f"{path}{os.pathsep}{ROOT}")
            subprocess.run([sys.executable, str(Path(__file__).resolve()), "--graph", a.graph, "--_record",
                            str(srv.port), prefix, str(a.threads), str(a.turns), out], env=env, check=True)
            with open(out, "rb") as f:
                sides[name] = pickle.load(f)
            print(f"{name}: {len(sides[name]['calls'])} script calls, redis_saver from {sides[name]['file']}")
        r = redis.Redis(port=srv.port)
        for s in sides.values():
            r.function_load(s["library"], replace=True)

        def usec() -> int:
            st = r.info("commandstats")
            return int(st["cmdstat_fcall"]["usec"]) if "cmdstat_fcall" in st else 0

        names = list(sides)
        res: dict[tuple[str, str], list[float]] = {}
        n = max(len(s["calls"]) for s in sides.values())
        for rnd in range(a.rounds):
            r.flushall()
            spent: dict[tuple[str, str], list[int]] = {}
            order = names if rnd % 2 == 0 else names[::-1]
            last = usec()
            for i in range(n):
                for name in order:
                    calls = sides[name]["calls"]
                    if i >= len(calls):
                        continue
                    op, args = calls[i]
                    r.execute_command("FCALL", *args)
                    now = usec()
                    spent.setdefault((name, op), []).append(now - last)
                    last = now
            for k, v in spent.items():
                res.setdefault(k, []).append(statistics.fmean(v))
        os.system("uptime")
        print(f"\n{a.graph}, {a.threads} threads x {a.turns} turns, {a.rounds} rounds: FCALL µs per call, "
              "median of the rounds' means (range)\n")
        print("| op | " + " | ".join(names) + " | B / A | the rounds' B / A: median (range) |")
        print("|---|" + "---|" * (len(names) + 2))
        for op in sorted({op for _, op in res}):
            meds = [statistics.median(res[(nm, op)]) for nm in names]
            cells = [f"{m:.1f} ({min(res[(nm, op)]):.1f}-{max(res[(nm, op)]):.1f})"
                     for nm, m in zip(names, meds, strict=True)]
            ratios = [b / a for a, b in zip(res[(names[0], op)], res[(names[1], op)], strict=False)]
            print(f"| {op} | " + " | ".join(cells) + f" | {meds[1] / meds[0]:.3f} | "
                  f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
