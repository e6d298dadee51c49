"""Where the time of ``put_writes``, ``put`` and delta history goes: redis_saver against the floor.

    python bench/where.py [--rounds 15] [--crowd 20] [--list 40] [--put 12 [--put-crowd 6]]

Starts its own redis-server (devkit/servers.py: start_standalone) and replays the benchmark's
recorded chat workload (bench/workload.py) into it, through redis_saver and through the floor
(bench/floor.py), and the minimal floor (bench/floor_min.py) where it says so. Prints markdown tables:

1. **Server time per call** (``INFO commandstats`` usec delta around each call; mean per round,
   median over rounds): the whole script, redis_saver (and with ``compress=False``) vs both floors.
2. **Server time by stage of put_writes**: the real script cut short after each stage
   (``do return 0 end`` inserted before a marker line), swapped into the saver, and the
   workload's put_writes calls sent to a fresh thread per variant and round;
   the difference between consecutive rows is what that stage costs. "empty script" is
   ``#!lua`` + ``return 1`` with the same keys and arguments: what any EVALSHA carrying them
   costs before its first line (the floor pays it too).
3. **Client CPU per call** (``time.process_time``, min over rounds): building the call (the
   plan, serde included) and the whole call, redis_saver (and with ``compress=False``) vs both
   floors, and the serializer's share of a put (what every saver pays: checkpoint, metadata,
   new values).
4. With ``--crowd ROUNDS``: **put_writes among other savers**, interleaved call by call as in
   the full benchmark (InMemorySaver, SqliteSaver, 3 more floors and 3 more redis_savers on 6
   more servers): p50 of wall time, client CPU and server time of the floor and of redis_saver, with its
   lean script whole, cut after the included helpers, and empty (one pass each, the floor
   in every pass). Caches are cold there, as in the full run.
5. With ``--list ROUNDS``: **list(before=middle, limit=10) on a 1,000-checkpoint thread** of
   small checkpoints (the benchmark's scaling fill, a 2-write put_writes on every third),
   redis_saver and the floor alternating: server time and wall time per call (p50).
6. With ``--put ROUNDS``: **server time of put by stage**, the function library's put (FCALL, as
   the saver calls it) cut after each stage, on the replay's put calls recorded as the saver
   sent them, against the minimal floor's put (``put_stages()``); ``--put-crowd N`` first runs
   each call on N other servers, so caches are cold as in the full benchmark.

Nothing here asserts anything beyond sanity checks (a page of 10): it measures. Numbers move with the
machine's load; compare rows within one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root on the path, as `python -m` has it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from bench.floor import FloorSaver  # noqa: E402
from bench.floor_min import MinFloorSaver  # noqa: E402
from bench.infra import script_usec as _usec  # noqa: E402
from bench.workload import call_for_thread, capture, fill_args, fill_template, make_ids  # noqa: E402
from devkit.script_cuts import (  # noqa: E402
    BODY_START,
    STAGES,
    put_libraries,
    script_calls,
)
from devkit.servers import client_kwargs, start_standalone  # noqa: E402
from redis_saver import RedisSaver  # noqa: E402
from redis_saver.core import scripts as _scripts  # noqa: E402


def _timed(r: redis.Redis, fn: Callable[[], Any]) -> int:
    u0 = _usec(r)
    fn()
    return _usec(r) - u0


def server_per_call(r: redis.Redis, savers: dict[str, Any], calls: list, rounds: int) -> dict:
    out: dict[str, dict[str, list[float]]] = {k: {"put": [], "put_writes": []} for k in savers}
    for rnd in range(rounds):
        for name, s in savers.items():
            spent: dict[str, list[int]] = {"put": [], "put_writes": []}
            for c in [call_for_thread(c, f"srv{rnd}") for c in calls]:
                spent[c.op].append(_timed(r, lambda c=c, s=s: getattr(s, c.op)(*c.args)))
            for op, v in spent.items():
                out[name][op].append(statistics.fmean(v))
    return {k: {op: statistics.median(v) for op, v in d.items()} for k, d in out.items()}


def put_writes_stages(r: redis.Redis, saver: RedisSaver, calls: list, rounds: int) -> list[tuple[str, float]]:
    # the steady state runs put_writes+lean (2 keys; lua/_keys_lean.lua): that is the script cut
    name = "put_writes+lean"
    full = _scripts.load_all()[name].source.decode()
    body_at = full.index(BODY_START)
    variants = [("empty script (same keys and arguments)", "#!lua\nreturn 1"),
                ("+ script setup (included helpers)", full[:body_at] + "do return 0 end\n" + full[body_at:])]
    for label, marker in STAGES:
        assert marker in full, f"put_writes.lua changed: marker {marker!r} not found"
        variants.append((f"+ {label}", full.replace(marker, "do return 0 end\n" + marker, 1)))
    # the lean script has no touch() (an @full-only line): the ZADD is its last stage
    variants.append(("+ one ZADD of the sort members: the whole script", full))
    pw_calls = [c for c in calls if c.op == "put_writes"]
    first_put = next(c for c in calls if c.op == "put")
    res: dict[str, list[float]] = {label: [] for label, _ in variants}
    drv = saver._driver
    library, drv.engine.library = drv.engine.library, None  # EVALSHA, so the cut scripts run
    try:
        for rnd in range(rounds):
            # the order alternates, so drift during a round (Lua GC, allocator) hits every row alike
            order = list(enumerate(variants))
            for k, (label, src) in (order if rnd % 2 == 0 else order[::-1]):
                drv.scripts[name] = _scripts._make(name, src)
                # a fresh thread per variant and round, so every variant sees the same state;
                # its first put (untimed) indexes it, as LangGraph's first put does
                thread = f"stages:{rnd}:{k}"
                saver.put(*call_for_thread(first_put, thread).args)
                writes = [call_for_thread(c, thread) for c in pw_calls]
                saver.put_writes(*call_for_thread(pw_calls[0], f"load:{rnd}:{k}").args)  # NOSCRIPT: load it
                spent = 0
                for c in writes:
                    spent += _timed(r, lambda c=c: saver.put_writes(*c.args))
                res[label].append(spent / len(writes))
    finally:
        drv.scripts[name] = _scripts.load_all()[name]
        drv.engine.library = library
    return [(label, statistics.median(v)) for label, v in res.items()]


def put_stages(rounds: int, crowd: int = 0) -> list[tuple[str, float]]:
    """Server time per put, put.lua cut after each stage, FCALL as the saver calls it.

    The chat replay's put and put_writes calls are recorded once, exactly as the default saver
    sends them (FCALL, one thread). Each variant then replays them into a flushed server: each
    put first as the variant (timed: ``INFO commandstats`` around it), then whole (untimed: a
    put is idempotent, so the whole one completes what a cut one left, and every variant's
    calls find the same state); put_writes whole. The minimal floor replays the same workload
    through its saver on the same server (timed the same way). With ``crowd`` > 0, each call is
    first run on that many other servers holding the same thread, so caches are cold as in the
    full benchmark. Variants alternate order by round; median over rounds of the mean per put."""
    from contextlib import ExitStack

    calls = [c for c in capture(25).calls if c.op in ("put", "put_writes")]
    variants = put_libraries()
    with ExitStack() as stack:
        servers = [stack.enter_context(start_standalone()) for _ in range(1 + crowd)]
        cl = [redis.Redis(host=s.host, port=s.port, **client_kwargs()) for s in servers]
        r = cl[0]
        rs = RedisSaver(r, prefix="lg")
        with script_calls(rs) as sent:
            for c in calls:
                getattr(rs, c.op)(*call_for_thread(c, "stages").args)
        recorded = [(str(args[0]).endswith("_put"), args) for args in sent]
        assert sum(is_put for is_put, _ in recorded) == sum(c.op == "put" for c in calls), "a put took 2 calls"
        for cli in cl:
            for _, src, _ in variants:
                cli.function_load(src, replace=True)
        floor = MinFloorSaver(r)
        res: dict[str, list[float]] = {label: [] for label, _, _ in variants}
        res["minimal floor: whole script"] = []
        order = [*variants, ("minimal floor: whole script", "", "")]
        for rnd in range(rounds):
            for label, _, fname in (order if rnd % 2 == 0 else order[::-1]):
                for cli in cl:
                    cli.flushdb()
                spent = []
                if not fname:
                    for j, c in enumerate([call_for_thread(c, f"floor:{rnd}") for c in calls]):
                        for other in cl[1:]:  # the crowd runs the recorded calls alongside
                            other.fcall(*recorded[j % len(recorded)][1])
                        if c.op == "put":
                            spent.append(_timed(r, lambda c=c: floor.put(*c.args)))
                        else:
                            floor.put_writes(*c.args)
                    res[label].append(statistics.fmean(spent))
                    continue
                for is_put, args in recorded:
                    for other in cl[1:]:
                        other.fcall(*args)
                    if is_put:
                        spent.append(_timed(r, lambda args=args, fname=fname: r.fcall(fname, *args[1:])))
                    r.fcall(*args)
                res[label].append(statistics.fmean(spent))
        for cli in cl:
            cli.close()
    return [(label, statistics.median(v)) for label, v in res.items()]


def client_cpu(savers: dict[str, Any], calls: list, rounds: int) -> dict[str, dict[str, float]]:
    rs, fl, mf = savers["redis_saver"], savers["floor"], savers["minimal floor"]
    nc = savers["redis_saver compress=False"]
    pw = [c for c in calls if c.op == "put_writes"]
    pu = [c for c in calls if c.op == "put"]
    serde = rs.serde

    def dumps(c: Any) -> None:  # what every saver serializes for a put: checkpoint, metadata, new values
        _, cp, md, nv = c.args
        values = cp["channel_values"]
        serde.dumps_typed({k: v for k, v in cp.items() if k != "channel_values"})
        serde.dumps_typed(md)
        for ch in nv:
            if ch in values:
                serde.dumps_typed(values[ch])

    cases: dict[str, Callable[[list], None]] = {
        "redis_saver: build put_writes call": lambda cs: [next(rs._plans._plan_put_writes(*c.args)) for c in cs],
        "floor: build put_writes call": lambda cs: [fl._writes_args(*c.args) for c in cs],
        "minimal floor: build put_writes call": lambda cs: [mf._writes_args(*c.args) for c in cs],
        "serializer alone (checkpoint, metadata, new values) of a put": lambda cs: [dumps(c) for c in cs],
        "redis_saver: build put call": lambda cs: [next(rs._plans._plan_put(*c.args)) for c in cs],
        "redis_saver compress=False: build put call": lambda cs: [next(nc._plans._plan_put(*c.args)) for c in cs],
        "floor: build put call": lambda cs: [fl._put_args(*c.args) for c in cs],
        "minimal floor: build put call": lambda cs: [mf._put_args(*c.args) for c in cs],
    }
    # round-robin over the cases, so a stretch of machine noise falls on all of them alike
    built: dict[str, float] = {}
    for _ in range(rounds):
        for label, fn in cases.items():
            cs = pw if "put_writes" in label else pu
            built[label] = min(built.get(label, float("inf")), _cpu(lambda fn=fn, cs=cs: fn(cs)) / len(cs))
    out: dict[str, dict[str, float]] = {label: {"us": t * 1e6} for label, t in built.items()}
    # one replay per saver and round, both operations timed in it; the savers' order alternates
    # by round, so a stretch of machine noise falls on all of them alike
    fastest: dict[tuple[str, str], float] = {}
    names = list(savers)
    for rnd in range(rounds):
        for name in (names if rnd % 2 == 0 else names[::-1]):
            s = savers[name]
            spent = {"put": 0.0, "put_writes": 0.0}
            for c in [call_for_thread(c, f"cpu{rnd}") for c in calls]:
                c0 = time.process_time()
                getattr(s, c.op)(*c.args)
                spent[c.op] += time.process_time() - c0
            for op, cs in (("put_writes", pw), ("put", pu)):
                fastest[name, op] = min(fastest.get((name, op), float("inf")), spent[op] / len(cs))
    for (name, op), t in sorted(fastest.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        out[f"{name}: whole {op} call"] = {"us": t * 1e6}
    return out


def crowded(calls: list, rounds: int, extra: int = 6) -> list[tuple[str, dict[str, float]]]:
    """put_writes with other savers interleaved call by call, as in the full benchmark: the
    floor and redis_saver each on its own server, and between their calls InMemorySaver,
    SqliteSaver and ``extra`` more floors / redis_savers on servers of their own. Each variant
    of redis_saver's lean script (whole, helpers only, empty) runs in its own pass, with the floor."""
    import os
    import sqlite3
    import tempfile
    from contextlib import ExitStack

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.sqlite import SqliteSaver

    name = "put_writes+lean"
    full = _scripts.load_all()[name].source.decode()
    body_at = full.index(BODY_START)
    variants = [
        ("empty script", "#!lua\nreturn 1"),
        ("helpers only", full[:body_at] + "do return 1 end\n" + full[body_at:]),
        ("whole script", full),
    ]
    out = []
    with ExitStack() as stack:
        servers = [stack.enter_context(start_standalone()) for _ in range(2 + extra)]
        cl = [redis.Redis(host=s.host, port=s.port, **client_kwargs()) for s in servers]
        fl, rs = FloorSaver(cl[0]), RedisSaver(cl[1], prefix="lg", functions=False)  # EVALSHA: the cut scripts run
        db = sqlite3.connect(os.path.join(stack.enter_context(tempfile.TemporaryDirectory()), "c.db"),
                             check_same_thread=False)
        others: list[Any] = [InMemorySaver(), SqliteSaver(db)]
        others[1].setup()
        others += [FloorSaver(c) if i % 2 else RedisSaver(c, prefix="lg") for i, c in enumerate(cl[2:])]
        for label, src in variants:
            rs._driver.scripts[name] = _scripts._make(name, src)
            wall: dict[str, list[int]] = {"floor": [], "redis_saver": []}
            cpu: dict[str, list[float]] = {"floor": [], "redis_saver": []}
            srv: dict[str, list[int]] = {"floor": [], "redis_saver": []}
            for rnd in range(rounds):
                order = [("floor", fl, cl[0]), ("redis_saver", rs, cl[1])] + [(None, o, None) for o in others]
                k = rnd % len(order)
                for c in [call_for_thread(c, f"crowd:{label}:{rnd}") for c in calls]:
                    for who, s, r in order[k:] + order[:k]:
                        if c.op == "put" or who is None:
                            getattr(s, c.op)(*c.args)
                            continue
                        u0, c0, t0 = _usec(r), time.process_time(), time.perf_counter_ns()
                        s.put_writes(*c.args)
                        wall[who].append(time.perf_counter_ns() - t0)
                        cpu[who].append(time.process_time() - c0)
                        srv[who].append(_usec(r) - u0)
            for who in ("floor", "redis_saver"):
                out.append((f"{who}{'' if who == 'floor' else ': ' + label}", {
                    "p50": statistics.median(wall[who]) / 1e3, "cpu": statistics.median(cpu[who]) * 1e6,
                    "server": statistics.median(srv[who])}))
        rs._driver.scripts[name] = _scripts.load_all()[name]
        for c in cl:
            c.close()
    return out


def list_page(rounds: int, n: int = 1000) -> dict[str, dict[str, float]]:
    """list(before=<middle id>, limit=10) on an n-checkpoint thread: server µs and wall µs (p50)."""

    tpl, pw = fill_template(capture(2).calls)
    ids = make_ids(n)
    with start_standalone() as server:
        r = redis.Redis(host=server.host, port=server.port, **client_kwargs())
        savers = {"floor": FloorSaver(r), "redis_saver": RedisSaver(r, prefix="lg")}
        for s in savers.values():
            for i, cid in enumerate(ids):
                s.put(*fill_args(tpl, "page", ids, i))
                if i % 3 == 0:
                    at = {"configurable": {"thread_id": "page", "checkpoint_ns": "", "checkpoint_id": cid}}
                    s.put_writes(at, *pw.args[1:])
        q, before = {"configurable": {"thread_id": "page"}}, {"configurable": {"checkpoint_id": ids[n // 2]}}
        srv: dict[str, list[int]] = {k: [] for k in savers}
        wall: dict[str, list[int]] = {k: [] for k in savers}
        for rnd in range(rounds):
            for name in (list(savers) if rnd % 2 else list(savers)[::-1]):
                u0, t0 = _usec(r), time.perf_counter_ns()
                got = list(savers[name].list(q, before=before, limit=10))
                wall[name].append(time.perf_counter_ns() - t0)
                srv[name].append(_usec(r) - u0)
                assert len(got) == 10
        r.close()
    return {k: {"server": statistics.median(srv[k]), "wall": statistics.median(wall[k]) / 1e3} for k in savers}


def _cpu(fn: Callable[[], Any]) -> float:
    c0 = time.process_time()
    fn()
    return time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--list", type=int, default=0, metavar="ROUNDS",
                    help="also time list(before=middle, limit=10) on a 1,000-checkpoint thread")
    ap.add_argument("--crowd", type=int, default=0, metavar="ROUNDS",
                    help="also time put_writes among 8 other savers on 6 more servers (ROUNDS per pass)")
    ap.add_argument("--put", type=int, default=0, metavar="ROUNDS",
                    help="also time put.lua cut after each stage (FCALL), against the minimal floor's put")
    ap.add_argument("--put-crowd", type=int, default=0, metavar="SERVERS",
                    help="with --put: run each call on this many other servers first (cold caches)")
    a = ap.parse_args()
    work = capture(25)
    calls = [c for c in work.calls if c.op in ("put", "put_writes")]
    with start_standalone() as server:
        r = redis.Redis(host=server.host, port=server.port, **client_kwargs())
        savers = {"redis_saver": RedisSaver(r, prefix="lg"), "floor": FloorSaver(r), "minimal floor": MinFloorSaver(r),
                  "redis_saver compress=False": RedisSaver(r, prefix="nc", compress=False)}
        print(f"# Where the time goes (workload: {len(calls)} put/put_writes calls, {a.rounds} rounds)\n")
        print("## Server time per call (µs)\n\n| saver | put | put_writes |\n|---|---|---|")
        for name, d in server_per_call(r, savers, calls, a.rounds).items():
            print(f"| {name} | {d['put']:.1f} | {d['put_writes']:.1f} |")
        print("\n## Server time of put_writes, script cut after each stage (µs per call)\n")
        print("| script runs up to | µs |\n|---|---|")
        for label, us in put_writes_stages(r, savers["redis_saver"], calls, a.rounds):
            print(f"| {label} | {us:.1f} |")
        print("\n## Client CPU per call (min over rounds, µs)\n\n| what | µs |\n|---|---|")
        for label, d in client_cpu(savers, calls, a.rounds).items():
            print(f"| {label} | {d['us']:.1f} |")
        r.close()
    if a.list:
        print("\n## list(before=middle, limit=10), 1,000 small checkpoints (p50 per call, µs)\n")
        print("| saver | server | wall |\n|---|---|---|")
        for name, d in list_page(a.list).items():
            print(f"| {name} | {d['server']:.0f} | {d['wall']:.0f} |")
    if a.put:
        crowd = f", each call run on {a.put_crowd} other servers first" if a.put_crowd else ""
        print(f"\n## Server time of put, put.lua cut after each stage (FCALL; µs per put{crowd})\n")
        print("| script runs up to | µs |\n|---|---|")
        for label, us in put_stages(a.put, a.put_crowd):
            print(f"| {label} | {us:.1f} |")
    if a.crowd:
        print("\n## put_writes among other savers (interleaved call by call, as in the full benchmark)\n")
        print("| pass: saver | p50 µs | client CPU µs (p50) | server µs (p50) |\n|---|---|---|---|")
        for label, d in crowded(calls, a.crowd):
            print(f"| {label} | {d['p50']:.1f} | {d['cpu']:.1f} | {d['server']:.1f} |")


if __name__ == "__main__":
    main()
