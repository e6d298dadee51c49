"""TTL overhead of ``put``: p50/p99 latency with and without ``ttl``, on threads holding 10 and
10,000 checkpoints (history="full"), measured interleaved on one local redis-server.

    python bench/ttl_overhead.py [--samples 1000] [--big 10000]

Starts its own redis-server (devkit/servers.py: start_standalone). Each measured ``put`` adds one
checkpoint with one changed channel (blob) to an existing thread:

* "10" row: ``samples`` threads per variant, each pre-filled with 10 checkpoints, one measured put
  each (so every measured put sees a 10-checkpoint thread);
* "10,000" row: one thread per variant pre-filled with ``big`` checkpoints, ``samples`` measured
  puts (the thread grows by ``samples`` during the measurement).

A second table gives the server-side time of the put script (INFO commandstats), free of client
and network noise: the TTL's real cost is the extra PEXPIRE/index work inside the script.

Interleaved: ttl / no-ttl puts alternate (order flipped every sample), so drift, GC and server
noise hit both variants alike. Prints a markdown table; target: with-TTL <= 1.1x without, and flat
with history (10,000-checkpoint p50 close to 10-checkpoint p50).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root on the path, as `python -m` has it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402

from bench.infra import SCRIPT_COMMANDS  # noqa: E402
from devkit.servers import client_kwargs, start_standalone  # noqa: E402
from redis_saver import RedisSaver  # noqa: E402

TTL = {"default_ttl": 60}  # minutes: long enough that nothing expires during the run


class Thread:
    """One thread being extended checkpoint by checkpoint through one saver."""

    def __init__(self, saver: RedisSaver, tid: str) -> None:
        self.saver, self.tid, self.n = saver, tid, 0
        self.config = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}

    def _next(self) -> tuple:
        self.n += 1
        cp = empty_checkpoint()
        v = str(self.n)
        cp["channel_values"] = {"messages": [f"message {self.n} " + "x" * 200], "step": self.n}
        cp["channel_versions"] = {"messages": v, "step": v}
        meta = {"source": "loop", "step": self.n, "run_id": f"run-{self.tid}"}
        return cp, meta, {"messages": v, "step": v}

    def put(self) -> int:
        """One put; returns its latency in ns."""
        cp, meta, nv = self._next()
        t0 = time.perf_counter_ns()
        self.config = self.saver.put(self.config, cp, meta, nv)
        return time.perf_counter_ns() - t0


def pct(xs: list[int], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))] / 1000  # us


def measure(pairs: list[tuple[Thread, Thread]], samples: int) -> tuple[list[int], list[int]]:
    """``pairs[i % len(pairs)]`` = (no-ttl thread, ttl thread); alternate which goes first."""
    plain, ttl = [], []
    gc.disable()
    try:
        for i in range(samples):
            a, b = pairs[i % len(pairs)]
            if i % 2:
                ttl.append(b.put())
                plain.append(a.put())
            else:
                plain.append(a.put())
                ttl.append(b.put())
    finally:
        gc.enable()
    return plain, ttl


def server_usec(client: redis.Redis) -> tuple[float, int]:
    """(total usec, calls) of script commands since the last CONFIG RESETSTAT."""
    st = client.info("commandstats")
    usec = calls = 0
    for name in SCRIPT_COMMANDS:
        if name in st:
            usec += st[name]["usec"]
            calls += st[name]["calls"]
    return usec, calls


def measure_server(
    client: redis.Redis, pairs: list[tuple[Thread, Thread]], samples: int, block: int = 50
) -> tuple[float, float]:
    """Server-side us per put (INFO commandstats), no client/network noise: alternating blocks of
    ``block`` puts per variant, stats reset before each block. Returns (no-TTL, TTL) us/call."""
    tot = {0: [0.0, 0], 1: [0.0, 0]}
    nxt = [0, 0]  # per variant: next pair to use, so both variants walk the same threads
    for blk in range(2 * max(1, samples // block)):
        variant = blk % 2
        client.config_resetstat()
        for _ in range(block):
            pairs[nxt[variant] % len(pairs)][variant].put()
            nxt[variant] += 1
        u, c = server_usec(client)
        tot[variant][0] += u
        tot[variant][1] += c
    return tot[0][0] / tot[0][1], tot[1][0] / tot[1][1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--big", type=int, default=10_000)
    args = ap.parse_args()

    with start_standalone() as server:
        client = redis.Redis.from_url(server.url, **client_kwargs(10, 10))
        plain = RedisSaver(client, prefix="bench-plain")
        withttl = RedisSaver(client, prefix="bench-ttl", ttl=TTL)
        plain.setup()
        withttl.setup()
        info = client.info("server")
        rows = []
        t_start = time.monotonic()

        # warm-up (script cache, connection)
        wp, wt = Thread(plain, "warm"), Thread(withttl, "warm")
        measure([(wp, wt)], 200)

        # 10-checkpoint threads
        small = []
        for i in range(args.samples):
            a, b = Thread(plain, f"s{i}"), Thread(withttl, f"s{i}")
            for _ in range(10):
                a.put()
                b.put()
            small.append((a, b))
        rows.append(("10", *measure(small, args.samples)))
        server_rows = [("10", *measure_server(client, small, args.samples))]

        # big threads
        a, b = Thread(plain, "big"), Thread(withttl, "big")
        for _ in range(args.big):
            a.put()
            b.put()
        rows.append((f"{args.big:,}", *measure([(a, b)], args.samples)))
        server_rows.append((f"{args.big:,}", *measure_server(client, [(a, b)], args.samples)))
        elapsed = time.monotonic() - t_start

        print(f"redis {info['redis_version']} (local, loopback), redis-py {redis.__version__}, "
              f"{args.samples} interleaved samples per cell, {elapsed:.0f}s\n")
        print("| checkpoints in thread | p50 no TTL (us) | p50 TTL (us) | p50 ratio "
              "| p99 no TTL (us) | p99 TTL (us) | p99 ratio |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        p50s = []
        for name, p, t in rows:
            p50p, p50t, p99p, p99t = pct(p, 50), pct(t, 50), pct(p, 99), pct(t, 99)
            p50s.append((p50p, p50t))
            print(f"| {name} | {p50p:.0f} | {p50t:.0f} | {p50t / p50p:.2f}x "
                  f"| {p99p:.0f} | {p99t:.0f} | {p99t / p99p:.2f}x |")
        (sp, st), (bp, bt) = p50s
        print(f"\nhistory growth (p50 at {rows[1][0]} / p50 at 10): no TTL {bp / sp:.2f}x, TTL {bt / st:.2f}x")
        print("\nServer-side time per put (INFO commandstats, EVALSHA usec/call; alternating blocks):\n")
        print("| checkpoints in thread | no TTL (us) | TTL (us) | ratio |")
        print("|---:|---:|---:|---:|")
        for name, p_us, t_us in server_rows:
            print(f"| {name} | {p_us:.1f} | {t_us:.1f} | {t_us / p_us:.2f}x |")
        print()
        print("median of per-pair ratios (TTL put / the no-TTL put next to it): "
              + ", ".join(f"{n}: {statistics.median(x / y for x, y in zip(t, p, strict=True)):.2f}x"
                          for n, p, t in rows))


if __name__ == "__main__":
    main()
