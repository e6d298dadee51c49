"""The per-operation latency phase of the benchmark (bench/run.py), interleaved call by call: call i of the
captured chat (replay), sample i of each read and turn k of ``invoke`` run on every saver before call i+1, in a
fresh random order per call (see ``shuffled()``), so load drift hits all alike. The first repetition also
measures bytes per checkpoint (the server's memory over the replay) and runs the correctness check."""

from __future__ import annotations

import gc
import time

from bench.correctness import check
from bench.harness import FAILED, Plan, Timer, log
from bench.savers import Entry
from bench.workload import Call, call_for_thread, shuffled, user_input


def replay(e: Entry, calls, thread):
    """Untimed replay (setup, warm-up, reference); the timed one is interleaved call by call in phase()."""
    for c in [call_for_thread(c, thread) for c in calls]:
        e.do(c)


def replay_op(c: Call) -> str:
    return c.op if c.op in ("put", "put_writes") else "replay " + c.op


def used_memory(e: Entry):
    return e.admin.info("memory")["used_memory"] if e.admin is not None else None


def pg_bytes(e: Entry, pg_url):
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as c:
        n = c.execute(
            "select coalesce(sum(pg_total_relation_size(c.oid)),0) from pg_class c join pg_namespace n "
            "on n.oid=c.relnamespace where n.nspname=%s and c.relkind='r'", (e.pg_schema,)).fetchone()[0]
        return int(n)


def phase(plan: Plan, entries: list[Entry], ref: Entry, chat, graphs: dict, timer: Timer, guarded, pg_url,
          mid_id: str, delta_cfg: dict) -> tuple[dict[str, dict], dict[str, dict]]:
    """Every repetition: replay, reads, invoke (unless skipped). Returns (bytes per checkpoint, correctness)."""
    bytes_per_cp: dict[str, dict] = {}
    correctness: dict[str, dict] = {}
    prefilled: set = set()
    for r in range(plan.reps):
        order = list(entries)
        thread = f"rep{r}"
        log(f"rep {r + 1}/{plan.reps}: replay")
        _replay(r, order, chat, timer, guarded, pg_url, thread, bytes_per_cp)
        if r == 0:
            replay(ref, chat.calls, thread)
            log("correctness check vs InMemorySaver")
            for e in entries:
                res = guarded(e, "correctness", check, e, ref, thread, chat.put_ids, delta_cfg)
                fails, warns = res if res is not FAILED else (["check raised (see errors)"], [])
                correctness[e.name] = {"status": "FAIL" if fails else ("WARN" if warns else "OK"),
                                       "failures": fails[:12], "n_failures": len(fails),
                                       "warnings": warns[:6], "n_warnings": len(warns)}
        log(f"rep {r + 1}/{plan.reps}: reads")
        _reads(plan, r, order, timer, guarded, thread, mid_id, delta_cfg)
        if "invoke" not in plan.skip:
            log(f"rep {r + 1}/{plan.reps}: invoke (untimed native prefill of {plan.turns} turns, "
                f"then {plan.k_invoke} timed)")
            _invoke(plan, r, order, graphs, timer, guarded, prefilled)
    return bytes_per_cp, correctness


def _replay(r, order, chat, timer, guarded, pg_url, thread, bytes_per_cp):
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


def _reads(plan, r, order, timer, guarded, thread, mid_id, delta_cfg):
    base = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    byid = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": mid_id}}
    reads = [
        ("get_tuple latest", lambda e: e.get_tuple(base)),
        ("get_tuple by id", lambda e: e.get_tuple(byid)),
        ("list limit=10", lambda e: e.list(base, limit=10)),
        ("delta history", lambda e: e.delta(delta_cfg, ["messages"])),
    ]
    for op, fn in reads:
        spent = {e.name: 0.0 for e in order}  # wall seconds in this saver's own calls (the time cap)
        stopped: set = set()  # failed, or over read_cap with >= 3 samples
        gc.collect()
        for i in range(plan.n_reads):
            for e in shuffled(order):
                if e.name in stopped:
                    continue
                t0 = time.perf_counter()
                res = guarded(e, op, timer.time, e.name, op, r, fn, e)
                spent[e.name] += time.perf_counter() - t0
                if res is FAILED or (i >= 2 and spent[e.name] > plan.read_cap):  # slow: fewer samples, see n
                    stopped.add(e.name)


def _invoke(plan, r, order, graphs, timer, guarded, prefilled):
    # a thread written by the saver itself (its own version strings), ~50 KB of messages;
    # full run: a fresh one per repetition; --quick: one, growing by k_invoke turns per repetition
    inv = "inv0" if plan.quick else f"inv{r}"
    cfg = {"configurable": {"thread_id": inv}}
    for e in order:
        if (e.name, inv) not in prefilled:
            for t in range(plan.turns):
                if guarded(e, "invoke prefill", e.invoke, graphs[e.name], user_input(t), cfg) is FAILED:
                    break
            else:
                prefilled.add((e.name, inv))
    stopped = {e.name for e in order if (e.name, inv) not in prefilled}
    gc.collect()
    for k in range(plan.k_invoke):
        for e in shuffled(order):
            if e.name in stopped:
                continue
            if guarded(e, "invoke", timer.time, e.name, "invoke turn", r, e.invoke, graphs[e.name],
                       user_input(plan.turns + r * plan.k_invoke + k), cfg) is FAILED:
                stopped.add(e.name)
