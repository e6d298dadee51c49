"""The figures of the benchmark's report (bench/run.py) from what the phases measured: latency per operation,
ratios to each saver's floor, and the targets each saver passes or fails."""

from __future__ import annotations

import statistics

from bench.harness import Timer, pct
from bench.savers import FLOOR_ASYNC, FLOOR_SYNC, MIN_FLOOR_ASYNC, MIN_FLOOR_SYNC, Entry

TARGETS = {  # op -> max p50 ratio to the floor
    "put": 1.25, "put_writes": 1.25, "get_tuple latest": 1.15, "get_tuple by id": 1.15,
    "list limit=10": 1.2, "invoke turn": 1.15,
}
SCALE_TARGET, BYTES_TARGET = 1.3, 1.1
FLOORS = (FLOOR_SYNC, FLOOR_ASYNC, MIN_FLOOR_SYNC, MIN_FLOOR_ASYNC)  # always run: every ratio needs them


def floor_of(entries: list[Entry]) -> dict[str, str]:
    return {e.name: e.floor for e in entries}


def min_floor_of(entries: list[Entry]) -> dict[str, str]:
    """The minimal floor of the same kind (sync / async) as each saver."""
    return {e.name: MIN_FLOOR_SYNC if e.mode == "sync" else MIN_FLOOR_ASYNC for e in entries}


def latency(timer: Timer, names: list[str]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for name in names:
        out[name] = {}
        for op, per_rep in timer.wall[name].items():
            xs = [x for v in per_rep.values() for x in v]
            out[name][op] = {"p50_us": pct(xs, .5) / 1e3, "p99_us": pct(xs, .99) / 1e3,
                             "mean_us": statistics.fmean(xs) / 1e3, "n": len(xs),
                             "client_cpu_us": timer.cpu[name][op] / len(xs) / 1e3}
    return out


def ratios(timer: Timer, names: list[str], floors: dict[str, str]) -> dict[str, dict]:
    """Per saver and op: the median over repetitions of (the saver's p50 / its floor's p50 in that repetition)."""
    out: dict[str, dict] = {}
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
    return out


def targets(names: list[str], ratios_: dict[str, dict], scaling: dict[str, dict], sizes: list[int],
            bytes_per_cp: dict[str, dict], floors: dict[str, str]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for name in names:
        if name in FLOORS:
            continue
        t = {}
        for op, lim in TARGETS.items():
            v = ratios_[name].get(op)
            t[f"{op} <= {lim}x floor"] = {"value": v, "pass": None if v is None else v <= lim}
        t.update(_scale_targets(scaling.get(name, {}), sizes))
        b, fb = bytes_per_cp.get(name), bytes_per_cp.get(floors[name])
        v = b["bytes"] / fb["bytes"] if b and fb and b["method"] == fb["method"] and fb["bytes"] > 0 else None
        t[f"bytes/checkpoint <= {BYTES_TARGET}x floor"] = {"value": v, "pass": None if v is None else v <= BYTES_TARGET}
        out[name] = t
    return out


def _scale_targets(sc: dict, sizes: list[int]) -> dict[str, dict]:
    t = {}
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
    return t


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for pkg in ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres",
                "langgraph-checkpoint-redis", "langgraph-checkpoint-plainredis", "redis", "hiredis", "psycopg",
                "redis-saver"):
        try:
            from importlib.metadata import version

            out[pkg] = version(pkg)
        except Exception:
            out[pkg] = None
    return out
