"""Throughput: steps/s and step latency at several levels of concurrency, savers interleaved run by run.

A step is one ``put`` (a small real checkpoint, child of the worker's previous one) and one ``put_writes``
of 2 writes to it, what LangGraph writes for one node step. Each worker writes its own thread.

Levels: sync savers with 1 and 4 OS threads sharing the saver, and 4 processes (fork; each builds its own
saver on the entry's server with ``Entry.make_probe``, so in-process savers such as InMemorySaver and
SqliteSaver are skipped there); async savers with 1, 8 and 64 tasks on the bench's event loop.

Per run: steps/s = steps of all workers / the window from the first worker's start to the last one's end;
step latency = wall time of each put + put_writes pair (p50, p99, mean), pooled over the workers; client
CPU % = CPU of the bench process (and its children, for processes) over the window. Little's law gives a
check printed with every row: steps/s x mean latency = the number of steps in flight, which must come out
close to the number of workers (below it only by the bookkeeping between steps).
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

SYNC_LEVELS = [("sync x1", "threads", 1), ("4 threads", "threads", 4), ("4 processes", "processes", 4)]
ASYNC_LEVELS = [("async x1", "tasks", 1), ("async x8", "tasks", 8), ("async x64", "tasks", 64)]
LEVELS = [label for label, _, _ in SYNC_LEVELS + ASYNC_LEVELS]


class Skip(Exception):
    """This entry cannot run at this level; the message says why."""


def _pct(xs: list[int], q: float) -> float:
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _step_args(tpl, pw, thread: str, n: int, parent: str | None):
    from langgraph.checkpoint.base.id import uuid6

    _, cp0, md0, nv = tpl.args
    cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": "",
                            **({"checkpoint_id": parent} if parent else {})}}
    cid = str(uuid6(clock_seq=n))
    return cid, (cfg, {**cp0, "id": cid}, {**md0, "step": n}, nv), pw.args[1:]


def _sync_loop(saver, tpl, pw, thread: str, end: float, lat: list[int]) -> int:
    """Steps until ``end`` (time.monotonic); appends each step's latency (ns) to ``lat``."""
    n, parent = 0, None
    while time.monotonic() < end:
        cid, put_args, pw_args = _step_args(tpl, pw, thread, n, parent)
        t0 = time.perf_counter_ns()
        out = saver.put(*put_args)
        saver.put_writes(out, *pw_args)
        lat.append(time.perf_counter_ns() - t0)
        parent, n = cid, n + 1
    return n


def _summary(counts: list[int], lats: list[int], window: float, cpu: float, workers: int) -> dict[str, Any]:
    n = sum(counts)
    r: dict[str, Any] = {"steps_per_s": n / window, "steps": n, "workers": workers,
                         "client_cpu_pct": 100 * cpu / window, "client_cpu_us_per_step": 1e6 * cpu / max(n, 1)}
    if lats:
        r.update(p50_ms=_pct(lats, .5) / 1e6, p99_ms=_pct(lats, .99) / 1e6, mean_ms=statistics.fmean(lats) / 1e6)
        r["in_flight"] = r["steps_per_s"] * r["mean_ms"] / 1e3  # Little's law: ~ workers
    return r


def run_threads(e, nthreads: int, dur: float, tpl, pw, tag: str) -> dict[str, Any]:
    counts, lats, errors = [0] * nthreads, [[] for _ in range(nthreads)], []
    spans: list[tuple[float, float]] = []
    end = [0.0]
    barrier = threading.Barrier(nthreads + 1)

    def worker(w: int) -> None:
        barrier.wait()
        t0 = time.monotonic()
        try:
            counts[w] = _sync_loop(e.saver, tpl, pw, f"tp-{tag}-{w}", end[0], lats[w])
        except Exception as ex:
            errors.append(f"{type(ex).__name__}: {ex}")
        spans.append((t0, time.monotonic()))

    ths = [threading.Thread(target=worker, args=(w,)) for w in range(nthreads)]
    for t in ths:
        t.start()
    gc.collect()
    c0 = time.process_time()
    end[0] = time.monotonic() + dur
    barrier.wait()
    for t in ths:
        t.join()
    cpu = time.process_time() - c0
    if errors:
        raise RuntimeError(errors[0][:200])
    window = max(b for _, b in spans) - min(a for a, _ in spans)
    return _summary(counts, [x for ls in lats for x in ls], window, cpu, nthreads)


def run_tasks(e, ntasks: int, dur: float, tpl, pw, tag: str) -> dict[str, Any]:
    lats: list[int] = []

    async def worker(w: int, end: float) -> tuple[int, float, float]:
        n, parent, thread, t0 = 0, None, f"tp-{tag}-{w}", time.monotonic()
        while time.monotonic() < end:
            cid, put_args, pw_args = _step_args(tpl, pw, thread, n, parent)
            s0 = time.perf_counter_ns()
            out = await e.saver.aput(*put_args)
            await e.saver.aput_writes(out, *pw_args)
            lats.append(time.perf_counter_ns() - s0)
            parent, n = cid, n + 1
        return n, t0, time.monotonic()

    async def go():
        end = time.monotonic() + dur
        return await asyncio.gather(*(worker(w, end) for w in range(ntasks)))

    gc.collect()
    c0 = time.process_time()
    res = e.run(go())
    cpu = time.process_time() - c0
    window = max(b for _, _, b in res) - min(a for _, a, _ in res)
    return _summary([n for n, _, _ in res], lats, window, cpu, ntasks)


def _proc_worker(make: Callable, target: tuple[str, int], tpl, pw, thread: str, dur: float, barrier, q) -> None:
    """A forked child: its own saver on the entry's server, one warm-up step, then steps for ``dur``."""
    try:
        saver, close = make(*target)
        _sync_loop(saver, tpl, pw, thread + "-warm", time.monotonic() + 0.05, [])
        barrier.wait(60)
        lat: list[int] = []
        c0, t0 = time.process_time(), time.monotonic()
        n = _sync_loop(saver, tpl, pw, thread, t0 + dur, lat)
        q.put(("ok", n, t0, time.monotonic(), time.process_time() - c0, lat))
        close()
    except BaseException as ex:  # reported to the parent, never raised in the child
        barrier.abort()
        q.put(("error", f"{type(ex).__name__}: {str(ex)[:200]}"))


def run_processes(e, nprocs: int, dur: float, tpl, pw, tag: str) -> dict[str, Any]:
    if e.make_probe is None or e.probe_target is None:
        raise Skip("an in-process saver: the entry cannot build a saver on the same store in another process")
    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError as ex:
        raise Skip("no fork on this platform") from ex
    barrier, q = ctx.Barrier(nprocs + 1), ctx.Queue()
    ps = [ctx.Process(target=_proc_worker, daemon=True,
                      args=(e.make_probe, e.probe_target, tpl, pw, f"tp-{tag}-{w}", dur, barrier, q))
          for w in range(nprocs)]
    for p in ps:
        p.start()
    try:
        barrier.wait(60)  # every child has its saver and has done one step
    except threading.BrokenBarrierError:
        pass  # a child failed: its error is in the queue
    out = [q.get(timeout=dur + 60) for _ in ps]
    for p in ps:
        p.join(10)
    bad = [o[1] for o in out if o[0] == "error"]
    if bad:
        raise RuntimeError(bad[0])
    window = max(o[3] for o in out) - min(o[2] for o in out)
    return _summary([o[1] for o in out], [x for o in out for x in o[5]], window, sum(o[4] for o in out), nprocs)


RUNNERS = {"threads": run_threads, "tasks": run_tasks, "processes": run_processes}


def phase(entries, dur: float, reps: int, tpl, pw, log: Callable[..., None], guarded: Callable) -> dict:
    """Every level of every entry ``reps`` times, round-robin (entry order rotated per repetition).

    Returns ``{entry name: {level: {...median over reps of each figure..., "runs_steps_per_s": [...]}}}``;
    a level an entry cannot run is ``{"skipped": reason}``."""
    runs: dict[str, dict[str, list[dict]]] = {}
    skipped: dict[str, dict[str, str]] = {}
    for tr in range(reps):
        for label, kind, n in SYNC_LEVELS + ASYNC_LEVELS:
            el = [e for e in entries if (e.mode == "async") == (kind == "tasks")]
            k = tr % max(len(el), 1)
            for e in el[k:] + el[:k]:
                if label in skipped.get(e.name, {}):
                    continue
                log(f"throughput {label} ({tr + 1}/{reps}): {e.name}")
                tag = label.replace(" ", "")
                try:
                    if tr == 0:  # warm-up: pool connections, scripts
                        RUNNERS[kind](e, n, 0.2, tpl, pw, "warm" + tag)
                except Skip as ex:
                    skipped.setdefault(e.name, {})[label] = str(ex)
                    log(f"  skipped: {ex}")
                    continue
                except Exception:
                    pass  # the measured run below reports it
                res = guarded(e, f"throughput {label}", RUNNERS[kind], e, n, dur, tpl, pw, f"{tag}r{tr}")
                if isinstance(res, dict):
                    runs.setdefault(e.name, {}).setdefault(label, []).append(res)
    out: dict[str, dict] = {}
    for name in dict.fromkeys([e.name for e in entries]):
        d: dict[str, Any] = {label: {"skipped": why} for label, why in skipped.get(name, {}).items()}
        for label, rs in runs.get(name, {}).items():
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0] if isinstance(rs[0][k], (int, float))}
            d[label] = {**med, "runs_steps_per_s": [round(r["steps_per_s"]) for r in rs]}
        if d:
            out[name] = d
    return out
