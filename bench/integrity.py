"""What ``integrity_key`` costs: put / get_tuple p50 and p99 with and without a key, side by side
in one run on one local redis-server, and the bytes each stored record gains.

    python bench/integrity.py [--samples 2000] [--turns 20] [--other-reader]

Starts its own redis-server (devkit/servers.py). Each sample extends one chat thread per variant
by one checkpoint (a growing message list, stored as a stream, and two small channels), then
reads its latest checkpoint back; the variants alternate, order flipped every sample, so drift
and server noise hit both alike. Each thread is restarted every ``turns`` checkpoints, so the
message list stays chat-sized. ``--other-reader``: each variant's reads are made by a second
saver (same key), as another worker reads them: it remembers nothing it signed, so it checks
every tag by its MAC. Target: with a key <= 1.05x without (p50), and at most 32 bytes
more per stored record.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root on the path, as `python -m` has it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402

from devkit.servers import client_kwargs, start_standalone  # noqa: E402
from redis_saver import RedisSaver  # noqa: E402


class Chat:
    def __init__(self, saver: RedisSaver, name: str, reader: RedisSaver | None = None) -> None:
        self.saver, self.name, self.round, self.n = saver, name, 0, 0
        self.reader = saver if reader is None else reader
        self.messages: list = []
        self.parent = None

    def restart(self) -> None:
        self.round += 1
        self.n, self.messages, self.parent = 0, [], None

    def put(self) -> float:
        self.n += 1
        self.messages = [*self.messages, HumanMessage(f"question {self.n} " * 12), AIMessage("answer " * 40)]
        cp = empty_checkpoint()
        v = f"{self.n:08d}"
        cp["channel_values"] = {"messages": self.messages, "step": self.n, "route": "talk"}
        cp["channel_versions"] = {"messages": v, "step": v, "route": v}
        tid = f"{self.name}-{self.round}"
        config = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
        if self.parent:
            config["configurable"]["checkpoint_id"] = self.parent
        meta = {"source": "loop", "step": self.n, "run_id": f"run-{tid}"}
        c0, t0 = time.thread_time(), time.perf_counter()
        self.saver.put(config, cp, meta, {"messages": v, "step": v, "route": v})
        dt, dc = time.perf_counter() - t0, time.thread_time() - c0
        self.parent = cp["id"]
        return dt, dc

    def get(self) -> float:
        c0, t0 = time.thread_time(), time.perf_counter()
        got = self.reader.get_tuple({"configurable": {"thread_id": f"{self.name}-{self.round}"}})
        dt, dc = time.perf_counter() - t0, time.thread_time() - c0
        assert got is not None and len(got.checkpoint["channel_values"]["messages"]) == len(self.messages)
        return dt, dc


def _stored(r: redis.Redis, prefix: str, tid: str) -> tuple[int, int]:
    """(bytes of the values of a thread's cp, blob and wr hashes, number of fields)."""
    total = fields = 0
    for h in ("cp", "blob", "wr"):
        for v in r.hgetall(f"{prefix}:{{{tid}}}:{h}").values():
            total, fields = total + len(v), fields + 1
    return total, fields


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--other-reader", action="store_true", help="reads by a second saver (another worker)")
    args = ap.parse_args(argv)
    with start_standalone() as srv:
        r = redis.Redis.from_url(srv.url, **client_kwargs(5.0, 5.0))
        key, other = os.urandom(32), args.other_reader
        chats = {
            "no key": Chat(RedisSaver(r, prefix="plain"), "c", RedisSaver(r, prefix="plain") if other else None),
            "key": Chat(RedisSaver(r, prefix="keyed", integrity_key=key), "c",
                        RedisSaver(r, prefix="keyed", integrity_key=key) if other else None),
        }
        for c in chats.values():  # warm up: scripts loaded, caches filled
            for _ in range(args.turns):
                c.put()
                c.get()
        puts: dict[str, list[tuple[float, float]]] = {k: [] for k in chats}
        gets: dict[str, list[tuple[float, float]]] = {k: [] for k in chats}
        gc.disable()
        for i in range(args.samples):
            order = list(chats) if i % 2 == 0 else list(reversed(chats))
            for k in order:
                c = chats[k]
                if c.n >= args.turns:
                    c.restart()
                puts[k].append(c.put())
                gets[k].append(c.get())
        gc.enable()
        print(f"{args.samples} samples, threads of {args.turns} checkpoints, load {os.getloadavg()[0]:.2f}"
              + (", reads by another saver" if other else ""))
        print("wall time, then the client's CPU time (time.thread_time) of each call")
        print("| | put p50 | put p99 | get_tuple p50 | get_tuple p99 | put CPU p50 | get_tuple CPU p50 |")
        print("|---|---|---|---|---|---|---|")
        q = {}
        for k in chats:
            pw, pc = zip(*puts[k], strict=True)
            gw, gc_ = zip(*gets[k], strict=True)
            q[k] = (statistics.median(pw), statistics.quantiles(pw, n=100)[98], statistics.median(gw),
                    statistics.quantiles(gw, n=100)[98], statistics.median(pc), statistics.median(gc_))
            print(f"| {k} | " + " | ".join(f"{x * 1e6:.0f} us" for x in q[k]) + " |")
        ratios = [f"{a / b:.3f}x" for a, b in zip(q["key"], q["no key"], strict=True)]
        print("| key / no key | " + " | ".join(ratios) + " |")
        a, na = _stored(r, "plain", "c-1")
        b, nb = _stored(r, "keyed", "c-1")
        print(f"stored bytes of one thread: {a} without a key, {b} with ({nb} records, "
              f"{(b - a) / max(nb, 1):.1f} bytes more per record)")
        r.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
