"""The scaling phase of the benchmark (bench/run.py): per saver one thread per size, filled by put in a loop
(timed, within a time budget); then every size of every saver is measured in the same interleaved rounds, so
load changes hit all sizes alike, and each size's reads are checked against the ids that were put."""

from __future__ import annotations

import gc
import time
from collections import defaultdict

from bench.harness import FAILED, Plan, Timer, log, pct
from bench.savers import Entry
from bench.workload import fill_args, make_ids, shuffled


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


def phase(plan: Plan, entries: list[Entry], tpl, guarded) -> dict[str, dict]:
    """``{saver: {size: {fill_s, fill_ms_per_put, get_latest_p50_us, list_before_p50_us, list5_before_p50_us}
    or {"skipped": reason}}}`` (and ``"incorrect"`` where a read returned what was not put)."""
    scaling: dict[str, dict] = defaultdict(dict)
    sizes = plan.sizes
    ids = make_ids(max(sizes))
    live = _fill_all(plan, entries, tpl, guarded, ids, scaling)
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
            for i in range(plan.scale_n):
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
            _check(e, size, ids, base, before, d)
    return scaling


def _fill_all(plan: Plan, entries, tpl, guarded, ids, scaling) -> dict[int, list]:
    """Fills every saver to every size (smallest first); returns the savers filled, per size. A saver whose
    fill failed, or would exceed the budget at the rate it filled the previous size, stops there."""
    budget = plan.budget
    rate = {e.name: None for e in entries}
    dead: dict[str, str] = {}
    live: dict[int, list] = defaultdict(list)
    for size in plan.sizes:
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
    return live


def _check(e: Entry, size: int, ids, base, before, d: dict) -> None:
    """The latest checkpoint and list(before=middle) against the ids put; a difference goes in d["incorrect"]."""
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
