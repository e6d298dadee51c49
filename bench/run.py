"""redis_saver benchmark: every saver side by side, one run, interleaved.

    .venv/bin/python -m bench            # full run (100k-checkpoint scaling, 10 repetitions)
    .venv/bin/python -m bench --quick    # ~2-3 minutes
    .venv/bin/python bench/run.py --quick --savers floor,redis_saver,InMemory

Outputs go to bench/results/<UTC timestamp>/ (results.json, results.md, chart.png) and are copied to
bench/results/latest/. See bench/README.md for what each figure means.
"""

# The phases are modules of their own: bench/latency.py (replay, reads, invoke; bytes per checkpoint and the
# correctness check of bench/correctness.py), bench/split.py, bench/scaling.py, bench/throughput.py and
# bench/wire.py; bench/aggregate.py turns what they measured into the report's figures; bench/harness.py holds
# what they share. This module reads the options, starts the savers, runs the phases and writes the results.

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

if __package__ in (None, ""):  # `python bench/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import aggregate, latency, report, scaling, split, wire  # noqa: E402
from bench import throughput as tput  # noqa: E402
from bench.aggregate import FLOORS  # noqa: E402
from bench.harness import FAILED, Guard, Plan, Timer, log  # noqa: E402
from bench.infra import Unavailable  # noqa: E402
from bench.savers import FACTORIES, Entry, resolve_pg_url  # noqa: E402
from bench.workload import build_chat_graph, capture, fill_template, user_input  # noqa: E402


def parse(argv=None) -> tuple[argparse.Namespace, Plan]:
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
    plan = Plan(
        quick=q,
        reps=a.reps or (3 if q else 8),
        n_reads=20 if q else 50,
        read_cap=0.4 if q else 2.0,
        # timed invoke turns per repetition: each repetition's p50 is taken over these, and a turn's
        # wall time moves ~10% from turn to turn (LangGraph's own work is most of it), so 5 gave
        # ratios that moved by more than the 5% the targets compare (1.02x-1.09x for one pair of entries)
        k_invoke=3 if q else 15,
        sizes=[int(x) for x in a.sizes.split(",")] if a.sizes else ([10, 1000, 10000] if q else
                                                                     [10, 1000, 10000, 100000]),
        budget=a.fill_budget or (4.0 if q else 90.0),
        tp_dur=a.tp_seconds or (0.7 if q else 2.0),
        tp_reps=a.tp_reps or (1 if q else 3),
        scale_n=15 if q else 40,
        turns=a.turns,
        skip=frozenset(filter(None, a.skip.split(","))),
    )
    return a, plan


def start_savers(savers: str, ctx: dict) -> tuple[list[Entry], dict[str, str]]:
    """The savers asked for (substrings of their names; the floors always) and why each other one did not start."""
    wanted = [s.strip().lower() for s in savers.split(",") if s.strip()]
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
    return entries, skipped


def main(argv=None) -> int:
    a, plan = parse(argv)
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
    mid_id = chat.put_ids[len(chat.put_ids) // 2]
    delta_cfg = {"configurable": {"thread_id": "delta", "checkpoint_ns": "", "checkpoint_id": dchat.put_ids[-1]}}

    entries, skipped = start_savers(a.savers, ctx)
    names = [e.name for e in entries]
    memory = __import__("langgraph.checkpoint.memory", fromlist=["x"])
    ref = Entry("reference", "sync", "memory", memory.InMemorySaver(), loop)

    timer = Timer()
    guarded = Guard()
    graphs = {e.name: build_chat_graph(e.saver) for e in entries}
    try:
        # ---- setup data every phase reads: the DeltaChannel thread; warm-up (connections, scripts, indexes)
        for e in [ref, *entries]:
            log(f"setup {e.name}: delta thread + warm-up")
            guarded(e, "setup delta replay", latency.replay, e, dchat.calls, "delta")
            guarded(e, "warm-up replay", latency.replay, e, chat.calls[:40], "warm")

        # ---- latency, interleaved call by call (bench/latency.py)
        bytes_per_cp, correctness = latency.phase(plan, entries, ref, chat, graphs, timer, guarded, pg_url,
                                                  mid_id, delta_cfg)

        # ---- server time and client time per call (the floors and redis_saver: script calls only)
        split_res: dict[str, dict] = {}
        if "split" not in plan.skip:
            split_res = split.phase(entries, chat.calls, mid_id, graphs if "invoke" not in plan.skip else {},
                                    user_input, plan.turns, plan.n_reads, plan.k_invoke, log, guarded,
                                    FAILED)

        # ---- scaling: per saver one thread per size, then every size measured interleaved (bench/scaling.py)
        scaled: dict[str, dict] = {}
        if "scaling" not in plan.skip:
            scaled = scaling.phase(plan, entries, tpl, guarded)

        # ---- throughput: put+put_writes steps/s and step latency at each level (bench/throughput.py)
        throughput: dict[str, dict] = {}
        if "throughput" not in plan.skip:
            throughput = tput.phase(entries, plan.tp_dur, plan.tp_reps, tpl, pw_tpl, log, guarded)

        # ---- wire: round trips and commands per operation (bench/wire.py)
        wired: dict[str, dict] = {}
        if "wire" not in plan.skip:
            wired = wire.phase(entries, tpl, pw_tpl, mid_id, delta_cfg, guarded)
    finally:
        for e in entries:
            e.close()
        shutil.rmtree(tmp, ignore_errors=True)

    # ---- aggregate (bench/aggregate.py)
    floor_of, min_floor_of = aggregate.floor_of(entries), aggregate.min_floor_of(entries)
    ratios = aggregate.ratios(timer, names, floor_of)
    results = {
        "meta": {
            "started_utc": started.isoformat(timespec="seconds"), "duration_s": round(time.time() - t_start, 1),
            "mode": "quick" if plan.quick else "full", "reps": plan.reps, "reads_per_rep": plan.n_reads,
            "invokes_per_rep": plan.k_invoke, "scaling_sizes": plan.sizes, "fill_budget_s": plan.budget,
            "throughput_seconds": plan.tp_dur, "throughput_reps": plan.tp_reps,
            "python": platform.python_version(), "machine": f"{platform.machine()} {os.cpu_count()} cpu",
            "load_avg_start": load_start, "versions": aggregate.versions(), "postgres": pg_url or pg_reason,
            "workload": {"turns": a.turns, "message_bytes": chat.message_bytes, "puts": chat.n_puts,
                         "put_writes_calls": chat.n_writes_calls, "calls": len(chat.calls),
                         "delta_calls": len(dchat.calls),
                         "writes_per_step": sorted({len(c.args[1]) for c in chat.calls if c.op == "put_writes"})},
        },
        "savers": {e.name: {"mode": e.mode, "kind": e.kind, "floor": e.floor, "min_floor": min_floor_of[e.name],
                            "notes": e.notes} for e in entries},
        "skipped": skipped, "errors": dict(guarded.errors), "latency": aggregate.latency(timer, names),
        "ratios": ratios, "ratios_min": aggregate.ratios(timer, names, min_floor_of),
        "split": split_res,
        "scaling": {k: {str(s): v for s, v in d.items()} for k, d in scaled.items()},
        "throughput": dict(throughput), "bytes_per_checkpoint": bytes_per_cp, "wire": wired,
        "correctness": correctness,
        "targets": aggregate.targets(names, ratios, scaled, plan.sizes, bytes_per_cp, floor_of),
    }
    from bench import release  # the working tree against the previous release (when both ran)

    results["vs_previous"] = release.ratios(timer.wall, names)
    try:
        results["meta"]["load_avg_end"] = os.getloadavg()
    except OSError:
        pass
    write(results, Path(a.out), started, t_start)
    return 0


def write(results: dict, out_dir: Path, started: datetime, t_start: float) -> None:
    """results.json, results.md and chart.png in out_dir/<UTC timestamp>/, copied to out_dir/latest/."""
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    out = out_dir / stamp
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    md = report.markdown(results)
    (out / "results.md").write_text(md)
    try:
        report.chart(results, out / "chart.png")
    except Exception as ex:
        log(f"chart failed: {type(ex).__name__}: {ex}")
    latest = out_dir / "latest"
    shutil.rmtree(latest, ignore_errors=True)
    shutil.copytree(out, latest)
    print(md)
    log(f"wrote {out}/results.json, results.md, chart.png (and {latest}/) in {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    sys.exit(main())
