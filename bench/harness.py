"""What every phase of the benchmark (bench/run.py) shares: the run's settings, the log, the timer, the
percentile, and the guard that turns a saver's exception into an error of the report."""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass

FAILED = object()  # returned by Guard when the call raised


@dataclass(frozen=True)
class Plan:
    """The settings of one run, from the command line (bench/run.py's options)."""

    quick: bool
    reps: int  # repetitions, round-robin over savers
    n_reads: int  # samples per (saver, read op, repetition)
    read_cap: float  # seconds per (saver, read op, repetition)
    k_invoke: int  # timed invoke turns per repetition
    sizes: list[int]  # scaling sizes
    budget: float  # seconds allowed to fill one saver to one size
    tp_dur: float  # seconds per throughput run
    tp_reps: int  # throughput repetitions per level
    scale_n: int  # scaling samples per (saver, size, op, round)
    turns: int  # chat turns captured
    skip: frozenset[str]  # phases skipped


def log(*a) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *a, file=sys.stderr, flush=True)


def pct(xs, q):
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class Timer:
    """Collects wall (perf_counter_ns) and client CPU (process_time_ns) per (saver, op, rep)."""

    def __init__(self) -> None:
        self.wall = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
        self.cpu = defaultdict(lambda: defaultdict(int))

    def time(self, name, op, rep, fn, *a, **kw):
        c0, t0 = time.process_time_ns(), time.perf_counter_ns()
        r = fn(*a, **kw)
        t1, c1 = time.perf_counter_ns(), time.process_time_ns()
        self.wall[name][op][rep].append(t1 - t0)
        self.cpu[name][op] += c1 - c0
        return r


class Guard:
    """``guard(e, what, fn, *args)``: ``fn(*args)``, or FAILED when it raised; the first 10 errors of each
    saver are kept in ``errors`` (the report's), every one is logged (with its traceback under BENCH_DEBUG)."""

    def __init__(self) -> None:
        self.errors: dict[str, list] = defaultdict(list)

    def __call__(self, e, what, fn, *args):
        try:
            return fn(*args)
        except Exception as ex:
            msg = f"{what}: {type(ex).__name__}: {str(ex)[:200]}"
            if len(self.errors[e.name]) < 10:
                self.errors[e.name].append(msg)
            log(f"  ERROR {e.name} {msg}")
            if os.environ.get("BENCH_DEBUG"):
                traceback.print_exc()
            return FAILED
