"""The wire phase of the benchmark (bench/run.py): round trips, commands and bytes per operation, counted by a
proxy in front of each saver's server (and the server's own command count, where there is an admin connection)."""

from __future__ import annotations

import time

from bench.harness import FAILED, log
from bench.infra import TurnProxy
from bench.savers import Entry
from bench.workload import make_ids


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


def phase(entries: list[Entry], tpl, pw_tpl, mid_id: str, delta_cfg: dict, guarded) -> dict[str, dict]:
    """``{saver: {op: figures}}`` for every saver that can be probed behind a proxy."""
    wire: dict[str, dict] = {}
    for e in entries:
        if e.make_probe is None:
            continue
        log(f"wire counts: {e.name}")
        res = guarded(e, "wire counts", wire_counts, e, tpl, pw_tpl, "rep0", mid_id, delta_cfg)
        if res is not FAILED:
            wire[e.name] = res
    return wire
