"""redis_saver benchmark: every saver side by side, one run, interleaved.

    .venv/bin/python -m bench            # full run (100k-checkpoint scaling, 10 repetitions)
    .venv/bin/python -m bench --quick    # ~2-3 minutes
    .venv/bin/python bench/run.py --quick --savers floor,redis_saver,InMemory

Outputs go to bench/results/<UTC timestamp>/ (results.json, results.md, chart.png) and are copied to
bench/results/latest/. See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

if __package__ in (None, ""):  # `python bench/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import report, split  # noqa: E402
from bench import throughput as tput  # noqa: E402
from bench.infra import TurnProxy, Unavailable  # noqa: E402
from bench.savers import (  # noqa: E402
    FACTORIES,
    FLOOR_ASYNC,
    FLOOR_SYNC,
    MIN_FLOOR_ASYNC,
    MIN_FLOOR_SYNC,
    Entry,
    resolve_pg_url,
)
from bench.workload import (  # noqa: E402
    Call,
    build_chat_graph,
    call_for_thread,
    capture,
    fill_args,
    fill_template,
    make_ids,
    shuffled,
    user_input,
)

OPS = ["put", "put_writes", "get_tuple latest", "get_tuple by id", "list limit=10", "delta history", "invoke turn"]
TARGETS = {  # op -> max p50 ratio to the floor
    "put": 1.25, "put_writes": 1.25, "get_tuple latest": 1.15, "get_tuple by id": 1.15,
    "list limit=10": 1.2, "invoke turn": 1.15,
}
SCALE_TARGET, BYTES_TARGET = 1.3, 1.1
FLOORS = (FLOOR_SYNC, FLOOR_ASYNC, MIN_FLOOR_SYNC, MIN_FLOOR_ASYNC)  # always run: every ratio needs them


FAILED = object()  # returned by guarded() when the call raised


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


# --------------------------------------------------------------------------- correctness


def _norm_tuple(t):
    if t is None:
        return None
    c = t.config["configurable"]
    p = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return {
        "config": (c.get("thread_id"), c.get("checkpoint_ns", ""), c.get("checkpoint_id")),
        "checkpoint": dict(t.checkpoint), "metadata": dict(t.metadata or {}), "parent": p,
        "pending_writes": [tuple(w) for w in (t.pending_writes or [])],
    }


def _wkey(w):
    return (str(w[0]), str(w[1]), repr(w[2]))


def compare_tuple(label, got, exp, fails, warns):
    g, e = _norm_tuple(got), _norm_tuple(exp)
    if (g is None) != (e is None):
        fails.append(f"{label}: {'missing' if g is None else 'unexpected'} result")
        return
    if g is None:
        return
    for k in ("config", "parent", "metadata"):
        if g[k] != e[k]:
            fails.append(f"{label}: {k} differs ({str(g[k])[:80]} vs {str(e[k])[:80]})")
    gc_, ec = g["checkpoint"], e["checkpoint"]
    extra = sorted(set(gc_) - set(ec))
    if extra:
        warns.append(f"{label}: checkpoint has extra keys {extra}")
    for k in sorted(ec):
        if gc_.get(k) != ec.get(k):
            if k == "channel_values":
                diff = [ch for ch in set(gc_[k]) | set(ec[k]) if gc_[k].get(ch) != ec[k].get(ch)]
                fails.append(f"{label}: checkpoint.channel_values differ in {sorted(diff)[:4]}")
            else:
                fails.append(f"{label}: checkpoint.{k} differs")
    gw, ew = g["pending_writes"], e["pending_writes"]
    if gw != ew:
        if sorted(gw, key=_wkey) == sorted(ew, key=_wkey):
            warns.append(f"{label}: pending_writes order differs from writes_sort_key order")
        else:
            fails.append(f"{label}: pending_writes differ ({len(gw)} vs {len(ew)} writes)")


def compare_list(label, got, exp, fails, warns):
    gi = [t.config["configurable"]["checkpoint_id"] for t in got]
    ei = [t.config["configurable"]["checkpoint_id"] for t in exp]
    if gi != ei:
        fails.append(f"{label}: ids differ (got {len(gi)}, expected {len(ei)}; first {gi[:1]} vs {ei[:1]})")
        return
    for g, e in zip(got, exp, strict=True):  # the same ids, checked above
        compare_tuple(label, g, e, fails, warns)


def compare_delta(label, got, exp, fails):
    for ch, e in exp.items():
        g = (got or {}).get(ch)
        if g is None:
            fails.append(f"{label}: channel {ch} missing")
            continue
        if ("seed" in g) != ("seed" in e) or g.get("seed") != e.get("seed"):
            fails.append(f"{label}: seed of {ch} differs")
        if [tuple(w) for w in g["writes"]] != [tuple(w) for w in e["writes"]]:
            fails.append(f"{label}: writes of {ch} differ ({len(g['writes'])} vs {len(e['writes'])})")


def check(e: Entry, ref: Entry, thread: str, put_ids, delta_cfg, capped=False):
    fails, warns = [], []
    base = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    queries = [("get_tuple(latest)", lambda s: s.get_tuple(base))]
    for cid in put_ids:
        cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": cid}}
        queries.append((f"get_tuple({cid[-6:]})", lambda s, cfg=cfg: s.get_tuple(cfg)))
    mid = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": put_ids[len(put_ids) // 2]}}
    lists = [("list(all)", {}), ("list(limit=10)", {"limit": 10}), ("list(before=middle, limit=10)",
                                                                      {"before": mid, "limit": 10})]
    for label, q in queries:
        try:
            compare_tuple(label, q(e), q(ref), fails, warns)
        except Exception as ex:
            fails.append(f"{label}: raised {type(ex).__name__}: {str(ex)[:100]}")
    for label, kw in lists:
        try:
            compare_list(label, e.list(base, **kw), ref.list(base, **kw), fails, warns)
        except Exception as ex:
            fails.append(f"{label}: raised {type(ex).__name__}: {str(ex)[:100]}")
    try:
        compare_delta("get_delta_channel_history", e.delta(delta_cfg, ["messages"]),
                      ref.delta(delta_cfg, ["messages"]), fails)
    except Exception as ex:
        fails.append(f"get_delta_channel_history: raised {type(ex).__name__}: {str(ex)[:100]}")
    return fails, warns


# --------------------------------------------------------------------------- phases


def replay(e: Entry, calls, thread):
    """Untimed replay (setup, warm-up, reference); the timed one is interleaved call by call in main()."""
    for c in [call_for_thread(c, thread) for c in calls]:
        e.do(c)


def replay_op(c: Call) -> str:
    return c.op if c.op in ("put", "put_writes") else "replay " + c.op


# The savers' order for each interleaved call: a fresh permutation, from one seeded generator.
def used_memory(e: Entry):
    return e.admin.info("memory")["used_memory"] if e.admin is not None else None


def pg_bytes(e: Entry, pg_url):
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as c:
        n = c.execute(
            "select coalesce(sum(pg_total_relation_size(c.oid)),0) from pg_class c join pg_namespace n "
            "on n.oid=c.relnamespace where n.nspname=%s and c.relkind='r'", (e.pg_schema,)).fetchone()[0]
        return int(n)


def fill(e: Entry, thread, tpl, ids, start, stop, deadline):
    """put ids[start:stop] as a parent chain; returns number actually put (stops at deadline)."""

    def args(i):
        return fill_args(tpl, thread, ids, i)

    if e.mode == "sync":
        for i in range(start, stop):
            e.saver.put(*args(i))
            if (i & 63) == 0 and time.perf_counter() > deadline:
                return i + 1
        return stop

    async def go():
        for i in range(start, stop):
            await e.saver.aput(*args(i))
            if (i & 63) == 0 and time.perf_counter() > deadline:
                return i + 1
        return stop

    return e.run(go())


def commandstats(e: Entry):
    if e.admin is None:
        return None
    return sum(v["calls"] for k, v in e.admin.info("commandstats").items() if k not in ("cmdstat_info",))


def wire_counts(e: Entry, tpl, pw, thread, mid_id, delta_cfg, m=5):
    """Round trips / commands / bytes per operation, counted by a proxy in front of the entry's server."""
    proxy = TurnProxy(*e.probe_target, resp=e.kind != "postgres")
    saver, close = e.make_probe("127.0.0.1", proxy.port)
    out = {}
    try:
        cfg0, cp0, md0, nv = tpl.args
        writes, task_id, task_path = pw.args[1], pw.args[2], pw.args[3]
        ids = make_ids(2 * m + 2)
        state = {"parent": None, "i": 0}
        wthread = f"wire-{e.name.replace(' ', '_')}"

        def do_put():
            i = state["i"]
            cfg = {"configurable": {"thread_id": wthread, "checkpoint_ns": "",
                                    **({"checkpoint_id": state["parent"]} if state["parent"] else {})}}
            out_cfg = e.put(cfg, {**cp0, "id": ids[i]}, {**md0, "step": i}, nv, saver=saver)
            state["parent"], state["i"], state["cfg"] = ids[i], i + 1, out_cfg

        def do_pw():
            state["i"] += 1
            e.put_writes(state["cfg"], writes, f"{task_id}-{state['i']}", task_path, saver=saver)

        base = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        byid = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": mid_id}}
        ops = {
            "put": do_put, "put_writes": do_pw,
            "get_tuple latest": lambda: e.get_tuple(base, saver=saver),
            "get_tuple by id": lambda: e.get_tuple(byid, saver=saver),
            "list limit=10": lambda: e.list(base, saver=saver, limit=10),
            "delta history": lambda: e.delta(delta_cfg, ["messages"], saver=saver),
        }
        for fn in ops.values():  # warm: connections, script loads, prepared statements
            fn()
        for op, fn in ops.items():
            proxy.reset()
            s0 = commandstats(e)
            for _ in range(m):
                fn()
            time.sleep(0.01)
            snap = proxy.snapshot()
            s1 = commandstats(e)
            out[op] = {
                "round_trips": snap["turns"] / m,
                "commands": None if snap["commands"] is None else snap["commands"] / m,
                "server_commands": None if s0 is None else (s1 - s0) / m,
                "bytes_up": snap["bytes_up"] / m, "bytes_down": snap["bytes_down"] / m,
            }
    finally:
        try:
            close()
        finally:
            proxy.close()
    return out


# --------------------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run (~2-3 min): fewer reps, sizes up to 10k")
    ap.add_argument("--savers", default="", help="comma-separated substrings; floors are always included")
    ap.add_argument("--reps", type=int, help="repetitions (round-robin over savers)")
    ap.add_argument("--sizes", default="", help="scaling sizes, e.g. 10,1000,10000,100000")
    ap.add_argument("--fill-budget", type=float, help="seconds allowed to fill one saver to one size")
    ap.add_argument("--turns", type=int, default=25, help="chat turns captured (~1.9 KB of messages per turn)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--skip", default="", help="phases to skip: scaling,throughput,split,wire,invoke")
    ap.add_argument("--tp-reps", type=int, help="throughput repetitions per level (median; default 1 quick, 3 full)")
    ap.add_argument("--tp-seconds", type=float, help="seconds per throughput run (default 0.7 quick, 2 full)")
    a = ap.parse_args(argv)

    q = a.quick
    reps = a.reps or (3 if q else 8)
    n_reads = 20 if q else 50
    read_cap = 0.4 if q else 2.0  # seconds per (saver, read op, repetition)
    # timed invoke turns per repetition: each repetition's p50 is taken over these, and a turn's
    # wall time moves ~10% from turn to turn (LangGraph's own work is most of it), so 5 gave
    # ratios that moved by more than the 5% the targets compare (1.02x-1.09x for one pair of entries)
    k_invoke = 3 if q else 15
    sizes = [int(x) for x in a.sizes.split(",")] if a.sizes else ([10, 1000, 10000] if q else [10, 1000, 10000, 100000])
    budget = a.fill_budget or (4.0 if q else 90.0)
    tp_dur = a.tp_seconds or (0.7 if q else 2.0)
    tp_reps = a.tp_reps or (1 if q else 3)
    scale_n = 15 if q else 40
    skip_phases = set(filter(None, a.skip.split(",")))
    t_start = time.time()
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    started = datetime.now(timezone.utc)

    loop = asyncio.new_event_loop()
    tmp = tempfile.mkdtemp(prefix="rsbench-")
    pg_url, pg_reason = resolve_pg_url()
    ctx = {"loop": loop, "tmp": tmp, "pg_url": pg_url, "pg_reason": pg_reason}

    log(f"capturing workload: {a.turns} chat turns (plain add_messages, and DeltaChannel)")
    chat = capture(a.turns)
    dchat = capture(a.turns, delta=True, thread_id="capture-delta")
    tpl, pw_tpl = fill_template(chat.calls)
    chat_puts = chat.put_ids
    mid_id = chat_puts[len(chat_puts) // 2]
    delta_cfg = {"configurable": {"thread_id": "delta", "checkpoint_ns": "", "checkpoint_id": dchat.put_ids[-1]}}

    wanted = [s.strip().lower() for s in a.savers.split(",") if s.strip()]
    entries: list[Entry] = []
    skipped: dict[str, str] = {}
    for name, fac in FACTORIES:
        if wanted and name not in FLOORS and not any(w in name.lower() for w in wanted):
            continue
        try:
            log(f"starting {name}")
            entries.append(fac(ctx))
        except Unavailable as ex:
            skipped[name] = str(ex)
            log(f"  skipped: {ex}")
        except Exception as ex:
            skipped[name] = f"setup failed: {type(ex).__name__}: {str(ex)[:200]}"
            log(f"  skipped: {skipped[name]}")
    names = [e.name for e in entries]
    memory = __import__("langgraph.checkpoint.memory", fromlist=["x"])
    ref = Entry("reference", "sync", "memory", memory.InMemorySaver(), loop)

    timer = Timer()
    errors: dict[str, list] = defaultdict(list)
    bytes_per_cp: dict[str, dict] = {}
    correctness: dict[str, dict] = {}
    graphs = {e.name: build_chat_graph(e.saver) for e in entries}
    prefilled: set = set()

    def guarded(e, what, fn, *args):
        try:
            return fn(*args)
        except Exception as ex:
            msg = f"{what}: {type(ex).__name__}: {str(ex)[:200]}"
            if len(errors[e.name]) < 10:
                errors[e.name].append(msg)
            log(f"  ERROR {e.name} {msg}")
            if os.environ.get("BENCH_DEBUG"):
                traceback.print_exc()
            return FAILED

    try:
        # ---- setup data every phase reads: the DeltaChannel thread; warm-up (connections, scripts, indexes)
        for e in [ref, *entries]:
            log(f"setup {e.name}: delta thread + warm-up")
            guarded(e, "setup delta replay", replay, e, dchat.calls, "delta")
            guarded(e, "warm-up replay", replay, e, chat.calls[:40], "warm")

        # ---- latency, interleaved call by call: call i (replay), sample i (reads) and turn k (invoke) run on every
        # saver before call i+1, in a fresh random order per call (see shuffled()), so load drift hits all alike
        for r in range(reps):
            order = list(entries)
            thread = f"rep{r}"
            log(f"rep {r + 1}/{reps}: replay")
            prepared = {e.name: [call_for_thread(c, thread) for c in chat.calls] for e in order}  # untimed
            mem0 = {}
            if r == 0:  # bytes per checkpoint: server memory delta over this replay, per saver
                for e in order:
                    mem0[e.name] = (used_memory(e), pg_bytes(e, pg_url) if e.kind == "postgres" else None)
            dropped: set = set()  # savers whose call raised: out of the rest of this replay
            gc.collect()
            for i in range(len(chat.calls)):
                for e in shuffled(order):
                    if e.name in dropped:
                        continue
                    c = prepared[e.name][i]
                    if guarded(e, "replay", timer.time, e.name, replay_op(c), r, e.do, c) is FAILED:
                        dropped.add(e.name)
            for e in order:
                m0, p0 = mem0.get(e.name, (None, None))
                if e.name in dropped:
                    continue  # partial replay: no bytes per checkpoint
                if m0 is not None:
                    bytes_per_cp[e.name] = {"bytes": (used_memory(e) - m0) / chat.n_puts,
                                            "method": "Redis used_memory delta"}
                elif p0 is not None:
                    bytes_per_cp[e.name] = {"bytes": (pg_bytes(e, pg_url) - p0) / chat.n_puts,
                                            "method": "pg_total_relation_size delta"}
            if r == 0:
                replay(ref, chat.calls, thread)
                log("correctness check vs InMemorySaver")
                for e in entries:
                    res = guarded(e, "correctness", check, e, ref, thread, chat_puts, delta_cfg)
                    fails, warns = res if res is not FAILED else (["check raised (see errors)"], [])
                    correctness[e.name] = {"status": "FAIL" if fails else ("WARN" if warns else "OK"),
                                           "failures": fails[:12], "n_failures": len(fails),
                                           "warnings": warns[:6], "n_warnings": len(warns)}
            log(f"rep {r + 1}/{reps}: reads")
            base = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            byid = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": mid_id}}
            reads = [
                # (this rep's configs bound as defaults; the reads run below, in this iteration)
                ("get_tuple latest", lambda e, base=base: e.get_tuple(base)),
                ("get_tuple by id", lambda e, byid=byid: e.get_tuple(byid)),
                ("list limit=10", lambda e, base=base: e.list(base, limit=10)),
                ("delta history", lambda e: e.delta(delta_cfg, ["messages"])),
            ]
            for op, fn in reads:
                spent = {e.name: 0.0 for e in order}  # wall seconds in this saver's own calls (the time cap)
                stopped: set = set()  # failed, or over read_cap with >= 3 samples
                gc.collect()
                for i in range(n_reads):
                    for e in shuffled(order):
                        if e.name in stopped:
                            continue
                        t0 = time.perf_counter()
                        res = guarded(e, op, timer.time, e.name, op, r, fn, e)
                        spent[e.name] += time.perf_counter() - t0
                        if res is FAILED or (i >= 2 and spent[e.name] > read_cap):  # slow: fewer samples, see n
                            stopped.add(e.name)
            if "invoke" not in skip_phases:
                log(f"rep {r + 1}/{reps}: invoke (untimed native prefill of {a.turns} turns, then {k_invoke} timed)")
                # a thread written by the saver itself (its own version strings), ~50 KB of messages;
                # full run: a fresh one per repetition; --quick: one, growing by k_invoke turns per repetition
                inv = "inv0" if q else f"inv{r}"
                cfg = {"configurable": {"thread_id": inv}}
                for e in order:
                    if (e.name, inv) not in prefilled:
                        for t in range(a.turns):
                            if guarded(e, "invoke prefill", e.invoke, graphs[e.name], user_input(t), cfg) is FAILED:
                                break
                        else:
                            prefilled.add((e.name, inv))
                stopped = {e.name for e in order if (e.name, inv) not in prefilled}
                gc.collect()
                for k in range(k_invoke):
                    for e in shuffled(order):
                        if e.name in stopped:
                            continue
                        if guarded(e, "invoke", timer.time, e.name, "invoke turn", r, e.invoke, graphs[e.name],
                                   user_input(a.turns + r * k_invoke + k), cfg) is FAILED:
                            stopped.add(e.name)

        # ---- server time and client time per call (the floors and redis_saver: script calls only)
        split_res: dict[str, dict] = {}
        if "split" not in skip_phases:
            split_res = split.phase(entries, chat.calls, mid_id, graphs if "invoke" not in skip_phases else {},
                                    user_input, a.turns, n_reads, k_invoke, log, guarded, FAILED)

        # ---- scaling: per saver one thread per size (filled by put in a loop, timed, budgeted); then every size
        # of every saver is measured in the same interleaved rounds, so load changes hit all sizes alike
        scaling: dict[str, dict] = defaultdict(dict)
        if "scaling" not in skip_phases:
            ids = make_ids(max(sizes))
            rate = {e.name: None for e in entries}
            dead: dict[str, str] = {}
            live: dict[int, list] = defaultdict(list)
            for size in sizes:
                for e in entries:
                    if e.name in dead:
                        scaling[e.name][size] = {"skipped": dead[e.name]}
                        continue
                    if rate[e.name] and size * rate[e.name] > budget:
                        dead[e.name] = (f"fill to {size:,} estimated {size * rate[e.name]:.0f}s > budget "
                                        f"{budget:.0f}s ({1e3 * rate[e.name]:.2f} ms/put)")
                        scaling[e.name][size] = {"skipped": dead[e.name]}
                        continue
                    log(f"scaling: fill {e.name} to {size:,}")
                    gc.collect()
                    t0 = time.perf_counter()
                    got = guarded(e, f"fill {size}", fill, e, f"scale{size}", tpl, ids, 0, size, t0 + 1.5 * budget)
                    dt = time.perf_counter() - t0
                    if got is FAILED:
                        dead[e.name] = f"fill to {size:,} failed"
                        scaling[e.name][size] = {"skipped": dead[e.name]}
                        continue
                    rate[e.name] = dt / max(got, 1)
                    scaling[e.name][size] = {"fill_s": dt, "fill_ms_per_put": 1e3 * rate[e.name]}
                    if got < size:
                        dead[e.name] = f"fill to {size:,} exceeded the time budget ({got:,} put in {dt:.0f}s)"
                        scaling[e.name][size] = {"skipped": dead[e.name]}
                        continue
                    live[size].append(e)
            st = Timer()
            cfgs = {size: ({"configurable": {"thread_id": f"scale{size}", "checkpoint_ns": ""}},
                           {"configurable": {"thread_id": f"scale{size}", "checkpoint_ns": "",
                                             "checkpoint_id": ids[size // 2]}}) for size in sizes}
            for r in range(3):
                log(f"scaling: measure round {r + 1}/3")
                for size in (sizes if r % 2 == 0 else list(reversed(sizes))):
                    base, before = cfgs[size]
                    lv = live[size]
                    gc.collect()
                    # savers interleaved query by query (as the per-operation phase does), so a
                    # disturbance on the machine hits every saver's samples alike
                    for i in range(scale_n):
                        for e in shuffled(lv):
                            guarded(e, f"scale get {size}", st.time, e.name, f"get{size}", r, e.get_tuple, base)
                            # limit=10 and limit=5 alternate which goes first, so neither always follows the other
                            for op, lim in ((("list", 10), ("list5", 5)) if i % 2 == 0 else
                                            (("list5", 5), ("list", 10))):
                                guarded(e, f"scale {op} {size}", st.time, e.name, f"{op}{size}", r,
                                        lambda e=e, lim=lim, base=base, before=before: e.list(
                                            base, before=before, limit=lim))
            for size in sizes:
                base, before = cfgs[size]
                for e in live[size]:
                    d = scaling[e.name][size]
                    for key, op in (("get_latest_p50_us", f"get{size}"), ("list_before_p50_us", f"list{size}"),
                                    ("list5_before_p50_us", f"list5{size}")):
                        xs = [x for v in st.wall[e.name][op].values() for x in v]
                        d[key] = pct(xs, 0.5) / 1e3 if xs else None
                    try:
                        got_t = e.get_tuple(base)
                        bad = []
                        if got_t is None or got_t.config["configurable"]["checkpoint_id"] != ids[size - 1]:
                            bad.append("get latest returned the wrong checkpoint")
                        for lim in (10, 5):
                            # the ids just below the middle, newest first (only 5 exist at size 10)
                            expect = list(reversed(ids[max(0, size // 2 - lim):size // 2]))
                            got_l = [t.config["configurable"]["checkpoint_id"]
                                     for t in e.list(base, before=before, limit=lim)]
                            if got_l != expect:
                                what = "different ids" if len(got_l) == len(expect) else f"expected {len(expect)}"
                                bad.append(f"list(before=middle, limit={lim}) returned {len(got_l)} ids, {what}"
                                           f"{' (before ignored)' if got_l and got_l[0] == ids[size - 1] else ''}")
                        if bad:
                            d["incorrect"] = "; ".join(bad)
                    except Exception as ex:
                        d["incorrect"] = f"check raised {type(ex).__name__}"

        # ---- throughput: put+put_writes steps/s and step latency at each level (bench/throughput.py)
        throughput: dict[str, dict] = {}
        if "throughput" not in skip_phases:
            throughput = tput.phase(entries, tp_dur, tp_reps, tpl, pw_tpl, log, guarded)

        # ---- wire: round trips and commands per operation
        wire: dict[str, dict] = {}
        if "wire" not in skip_phases:
            for e in entries:
                if e.make_probe is None:
                    continue
                log(f"wire counts: {e.name}")
                res = guarded(e, "wire counts", wire_counts, e, tpl, pw_tpl, "rep0", mid_id, delta_cfg)
                if res is not FAILED:
                    wire[e.name] = res
    finally:
        for e in entries:
            e.close()
        shutil.rmtree(tmp, ignore_errors=True)

    # ---- aggregate
    latency: dict[str, dict] = {}
    ratios: dict[str, dict] = {}
    ratios_min: dict[str, dict] = {}  # the same against the minimal floor of the same kind
    floor_of = {e.name: e.floor for e in entries}
    min_floor_of = {e.name: MIN_FLOOR_SYNC if e.mode == "sync" else MIN_FLOOR_ASYNC for e in entries}
    for name in names:
        latency[name] = {}
        for op, per_rep in timer.wall[name].items():
            xs = [x for v in per_rep.values() for x in v]
            latency[name][op] = {"p50_us": pct(xs, .5) / 1e3, "p99_us": pct(xs, .99) / 1e3,
                                 "mean_us": statistics.fmean(xs) / 1e3, "n": len(xs),
                                 "client_cpu_us": timer.cpu[name][op] / len(xs) / 1e3}
    for out, floors in ((ratios, floor_of), (ratios_min, min_floor_of)):
        for name in names:
            fl = floors[name]
            out[name] = {}
            if name == fl or fl not in timer.wall:
                continue
            for op in timer.wall[name]:
                per = []
                for r, xs in timer.wall[name][op].items():
                    fx = timer.wall[fl][op].get(r)
                    if xs and fx:
                        per.append(pct(xs, .5) / pct(fx, .5))
                if per:
                    out[name][op] = statistics.median(per)

    targets: dict[str, dict] = {}
    for name in names:
        if name in FLOORS:
            continue
        t = {}
        for op, lim in TARGETS.items():
            v = ratios[name].get(op)
            t[f"{op} <= {lim}x floor"] = {"value": v, "pass": None if v is None else v <= lim}
        sc = scaling.get(name, {})
        ok = [s for s in sizes if sc.get(s, {}).get("get_latest_p50_us")]
        # (key, label, baseline size, what the label adds): at size 10 the middle is id #5, so limit=10 returns
        # only 5 checkpoints there and 10 at every larger size; limit=5 and the 1,000 baseline are like for like
        rows = [("get_latest_p50_us", "get latest", sizes[0], ""),
                ("list_before_p50_us", "list(before, limit=10)", sizes[0],
                 f" ({min(10, sizes[0] // 2)} results at {sizes[0]:,}, 10 beyond)" if sizes[0] < 20 else ""),
                ("list5_before_p50_us", "list(before, limit=5)", sizes[0], " (5 results at every size)"
                 if sizes[0] >= 10 else f" ({sizes[0] // 2} results at {sizes[0]:,}, 5 beyond)")]
        if 1000 in sizes and sizes[0] < 1000:
            rows.append(("list_before_p50_us", "list(before, limit=10)", 1000, " (10 results at both)"))
        for key, lab, lo, note in rows:
            hi = ok[-1] if ok else max(sizes)
            if lo in ok and hi > lo and sc[lo].get(key) and sc[hi].get(key):
                v = sc[hi][key] / sc[lo][key]
                # one row name for every saver (the largest size of the run); a saver that stopped
                # short of it is measured at its largest size, flagged incomplete (see the report)
                t[f"{lab} at {max(sizes):,} <= {SCALE_TARGET}x at {lo:,}{note}"] = {
                    "value": v, "pass": v <= SCALE_TARGET, "size": hi, "complete": hi == max(sizes)}
            else:
                t[f"{lab} at {max(sizes):,} <= {SCALE_TARGET}x at {lo:,}{note}"] = {"value": None, "pass": None}
        b, fb = bytes_per_cp.get(name), bytes_per_cp.get(floor_of[name])
        v = b["bytes"] / fb["bytes"] if b and fb and b["method"] == fb["method"] and fb["bytes"] > 0 else None
        t[f"bytes/checkpoint <= {BYTES_TARGET}x floor"] = {"value": v, "pass": None if v is None else v <= BYTES_TARGET}
        targets[name] = t

    versions = {}
    for pkg in ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres",
                "langgraph-checkpoint-redis", "langgraph-checkpoint-plainredis", "redis", "hiredis", "psycopg",
                "redis-saver"):
        try:
            from importlib.metadata import version

            versions[pkg] = version(pkg)
        except Exception:
            versions[pkg] = None
    results = {
        "meta": {
            "started_utc": started.isoformat(timespec="seconds"), "duration_s": round(time.time() - t_start, 1),
            "mode": "quick" if q else "full", "reps": reps, "reads_per_rep": n_reads, "invokes_per_rep": k_invoke,
            "scaling_sizes": sizes, "fill_budget_s": budget, "throughput_seconds": tp_dur,
            "throughput_reps": tp_reps,
            "python": platform.python_version(), "machine": f"{platform.machine()} {os.cpu_count()} cpu",
            "load_avg_start": load_start, "versions": versions, "postgres": pg_url or pg_reason,
            "workload": {"turns": a.turns, "message_bytes": chat.message_bytes, "puts": chat.n_puts,
                         "put_writes_calls": chat.n_writes_calls, "calls": len(chat.calls),
                         "delta_calls": len(dchat.calls),
                         "writes_per_step": sorted({len(c.args[1]) for c in chat.calls if c.op == "put_writes"})},
        },
        "savers": {e.name: {"mode": e.mode, "kind": e.kind, "floor": e.floor, "min_floor": min_floor_of[e.name],
                            "notes": e.notes} for e in entries},
        "skipped": skipped, "errors": dict(errors), "latency": latency, "ratios": ratios, "ratios_min": ratios_min,
        "split": split_res,
        "scaling": {k: {str(s): v for s, v in d.items()} for k, d in scaling.items()},
        "throughput": dict(throughput), "bytes_per_checkpoint": bytes_per_cp, "wire": wire,
        "correctness": correctness, "targets": targets,
    }
    from bench import release  # the working tree against the previous release (when both ran)

    results["vs_previous"] = release.ratios(timer.wall, names)
    try:
        results["meta"]["load_avg_end"] = os.getloadavg()
    except OSError:
        pass
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    out = Path(a.out) / stamp
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    md = report.markdown(results)
    (out / "results.md").write_text(md)
    try:
        report.chart(results, out / "chart.png")
    except Exception as ex:
        log(f"chart failed: {type(ex).__name__}: {ex}")
    latest = Path(a.out) / "latest"
    shutil.rmtree(latest, ignore_errors=True)
    shutil.copytree(out, latest)
    print(md)
    log(f"wrote {out}/results.json, results.md, chart.png (and {latest}/) in {time.time() - t_start:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
