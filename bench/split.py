"""Server time and client time per call, for the savers whose every call is a script (EVALSHA, FCALL).

For each call: wall time (``perf_counter``), client CPU (``process_time`` of the bench process) and
server time, the ``INFO commandstats`` usec delta of EVALSHA / FCALL around the call (``bench/infra.py``'s
``script_usec``, read on the entry's admin connection, outside the timed window). The command's usec covers the
whole script, the commands it runs included; a saver that also sends plain commands (the official saver,
plainredis, PostgresSaver) would be under-counted, so only the floors and redis_saver are measured.
"client" = wall - server: the client's CPU, the network and the kernel on both sides; "client CPU" is
the bench process's share of it.

Interleaved as the latency phase is: call *i* of the workload's replay, sample *i* of a read and timed
invoke turn *k* run on every entry before *i+1* / *k+1*, in a random order per call. Medians per call.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

OPS = ["put", "put_writes", "get_tuple latest", "get_tuple by id", "list limit=10", "invoke turn"]


def scripted(e) -> bool:
    """Entries whose calls are scripts only (the floors and redis_saver)."""
    return e.kind == "redis" and e.admin is not None and ("floor" in e.name or e.name.startswith("redis_saver"))


def phase(entries, calls, mid_id: str, graphs: dict, user_input: Callable, turns: int, n_reads: int,
          k_invoke: int, log: Callable[..., None], guarded: Callable, failed: object) -> dict[str, dict[str, Any]]:
    from bench.infra import script_usec as _usec
    from bench.workload import call_for_thread, shuffled

    el = [e for e in entries if scripted(e)]
    samples: dict[str, dict[str, dict[str, list[float]]]] = {
        e.name: {op: {"wall": [], "server": [], "cpu": []} for op in OPS} for e in el}
    dead: set[str] = set()

    def timed(e, op: str, fn: Callable, *a) -> Any:
        u0 = _usec(e.admin)
        c0, t0 = time.process_time_ns(), time.perf_counter_ns()
        r = fn(*a)
        t1, c1 = time.perf_counter_ns(), time.process_time_ns()
        s = samples[e.name][op]
        s["server"].append(float(_usec(e.admin) - u0))
        s["wall"].append((t1 - t0) / 1e3)
        s["cpu"].append((c1 - c0) / 1e3)
        return r

    def each(i: int, what: str, op: str, fn: Callable) -> None:
        for e in shuffled(el):
            if e.name not in dead and guarded(e, f"split {what}", timed, e, op, fn, e) is failed:
                dead.add(e.name)

    log(f"split: replay ({len(el)} savers)")
    prepared = {e.name: [call_for_thread(c, "split") for c in calls] for e in el}
    gc.collect()
    for i, c in enumerate(calls):
        if c.op in ("put", "put_writes"):
            each(i, "replay", c.op, lambda e, i=i: e.do(prepared[e.name][i]))
        else:  # the replay's reads keep the thread as LangGraph left it; not timed here
            for e in el:
                if e.name not in dead:
                    guarded(e, "split replay", e.do, prepared[e.name][i])
    log("split: reads")
    base = {"configurable": {"thread_id": "split", "checkpoint_ns": ""}}
    byid = {"configurable": {"thread_id": "split", "checkpoint_ns": "", "checkpoint_id": mid_id}}
    reads = [("get_tuple latest", lambda e: e.get_tuple(base)), ("get_tuple by id", lambda e: e.get_tuple(byid)),
             ("list limit=10", lambda e: e.list(base, limit=10))]
    for op, fn in reads:
        gc.collect()
        for i in range(n_reads):
            each(i, op, op, fn)
    if graphs:
        log(f"split: invoke ({turns} untimed turns, then {k_invoke} timed)")
        cfg = {"configurable": {"thread_id": "split-inv"}}
        for e in el:
            for t in range(turns):
                if e.name in dead or guarded(e, "split invoke prefill", e.invoke, graphs[e.name], user_input(t),
                                             cfg) is failed:
                    dead.add(e.name)
                    break
        for k in range(k_invoke):
            each(k, "invoke", "invoke turn",
                 lambda e, k=k: e.invoke(graphs[e.name], user_input(turns + k), cfg))
    out: dict[str, dict[str, Any]] = {}
    for name, ops in samples.items():
        out[name] = {}
        for op, s in ops.items():
            if not s["wall"]:
                continue
            out[name][op] = {
                "n": len(s["wall"]), "wall_us": statistics.median(s["wall"]),
                "server_us": statistics.median(s["server"]), "client_cpu_us": statistics.median(s["cpu"]),
                "client_us": statistics.median(w - v for w, v in zip(s["wall"], s["server"], strict=True))}
    return out
