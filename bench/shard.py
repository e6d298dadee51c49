"""Shard capacity: the Redis server's main-thread CPU per graph step and per operation, side by side.

    python -m bench.shard [--rounds 3] [--threads 40] [--turns 12] [--stages 3]

A Redis shard runs its commands on one core, so the server CPU a graph step costs sets how many steps per
second one shard carries (1 / CPU per invoke). This measures it for redis_saver (``RedisSaver``), the
minimal floor (``bench/floor_min.py``: one EVALSHA per call) and plainredis
(langgraph-checkpoint-plainredis), each on its own fresh ``redis-server`` (devkit/servers.py), on two
real LangGraph graphs:

* **chat**: ``messages`` with ``add_messages`` (a growing history of real prose from
  ``bench/chat.py``'s corpus), an assistant node and a bookkeeping node; each invoke reads the latest
  checkpoint and writes 3 checkpoints and their writes.
* **tools**: an agent whose tool calls fan out with ``Send`` to 3 parallel tool tasks (each writes its
  ToolMessage through ``put_writes``), then answers; 4 checkpoints per invoke.

Phases, per graph, saver and round (the savers' order alternates by round; fresh thread ids each round):

1. **invoke**: ``graph.invoke`` of every thread, turn by turn (threads x turns). Server main-thread
   CPU (``used_cpu_sys_main_thread + used_cpu_user_main_thread`` of ``INFO cpu``) and
   ``INFO commandstats`` before and after; ``used_memory`` growth per checkpoint.
2. **ops**: the calls LangGraph made for one thread (recorded once on an InMemorySaver) replayed in
   lockstep on ``threads`` threads: each recorded call on every thread, ``INFO`` before and after that
   batch, so the CPU of each batch is one operation's (put, put_writes, get_tuple of the latest), then
   ``list(limit=10)`` of every thread. The ``INFO`` pair's own cost (median of back-to-back pairs) is
   subtracted.

With ``--stages ROUNDS`` it also times each script cut before each stage (``INFO commandstats`` time of the
script): get_tuple of the latest (FCALL, the library cut by devkit/script_cuts.py's ``get_libraries``, and
without its touch of the thread's keys), and bench/where.py's cuts of put (FCALL) and put_writes (EVALSHA).

Nothing here asserts: it measures. Server CPU is less sensitive to the machine's load than latency, but
compare rows of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import operator
import os
import random
import statistics
import sys
import time
import zlib
from collections import defaultdict
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any, TypedDict

if __package__ in (None, ""):  # run as a script: the repository root on the path, as `python -m` has it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402
import redis.asyncio as aioredis  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.runnables import RunnableConfig  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from langgraph.types import Send  # noqa: E402

from bench.chat import ChatState, corpus_paragraphs, lengths  # noqa: E402
from bench.workload import Call, RecordingSaver, bookkeeping, call_for_thread  # noqa: E402
from devkit.servers import client_kwargs, start_standalone  # noqa: E402

SAVERS = ("redis_saver", "minimal floor", "plainredis")
_PARAS = corpus_paragraphs()


def make_saver(name: str, client: redis.Redis) -> Any:
    if name == "redis_saver":
        from redis_saver import RedisSaver

        return RedisSaver(client, prefix="lg")
    if name == "minimal floor":
        from bench.floor_min import MinFloorSaver

        return MinFloorSaver(client)
    from langgraph_checkpoint_plainredis import RedisSaver as PlainRedisSaver

    return PlainRedisSaver(client=client)


def make_async_saver(name: str, client: Any) -> Any:
    """The async class of each saver, on a ``redis.asyncio.Redis`` client (redis_saver with its
    automatic pipelining on, the default)."""
    if name == "redis_saver":
        from redis_saver import AsyncRedisSaver

        return AsyncRedisSaver(client, prefix="lg")
    if name == "minimal floor":
        from bench.floor_min import AsyncMinFloorSaver

        return AsyncMinFloorSaver(client)
    from langgraph_checkpoint_plainredis import AsyncRedisSaver as AsyncPlainRedisSaver

    return AsyncPlainRedisSaver(client=client)


# --------------------------------------------------------------------------- the graphs


def text(key: str, median: int, lo: int = 20, hi: int = 4000) -> str:
    """Real prose of a lognormal length, a pure function of ``key`` (every saver gets the same texts)."""
    rng = random.Random(zlib.crc32(key.encode()))
    n, i, out = lengths(rng, median, lo, hi), rng.randrange(len(_PARAS)), []
    while sum(len(p) + 1 for p in out) < n:
        out.append(_PARAS[i % len(_PARAS)])
        i += 1
    return " ".join(out)[:n]


def _ai(key: str, n_msgs: int, median: int, **kw: Any) -> AIMessage:
    body = text(key, median)
    toks = len(body) // 4
    return AIMessage(content=body, id=f"run-{zlib.crc32(key.encode()):08x}-{n_msgs}",
                     response_metadata={"model_name": "gpt-4o-2024-08-06", "finish_reason": "stop"},
                     usage_metadata={"input_tokens": 40 * n_msgs, "output_tokens": toks,
                                     "total_tokens": 40 * n_msgs + toks}, **kw)


def chat_graph(saver: Any) -> Any:
    def assistant(state: dict, config: RunnableConfig) -> dict:
        n = len(state["messages"])
        return {"messages": [_ai(f"{config['configurable']['thread_id']}:a{n}", n, 900)]}

    g = StateGraph(ChatState)
    g.add_node("assistant", assistant)
    g.add_node("bookkeeping", bookkeeping)
    g.add_edge(START, "assistant")
    g.add_edge("assistant", "bookkeeping")
    g.add_edge("bookkeeping", END)
    return g.compile(checkpointer=saver)


class ToolState(TypedDict):
    messages: Annotated[list, add_messages]
    sources: Annotated[list, operator.add]


TOOLS = ("search", "fetch_page", "calculator")


def tool_graph(saver: Any) -> Any:
    def agent(state: dict, config: RunnableConfig) -> dict:
        n, last = len(state["messages"]), state["messages"][-1]
        key = f"{config['configurable']['thread_id']}:g{n}"
        if isinstance(last, HumanMessage):
            calls = [{"name": t, "args": {"query": text(f"{key}:{t}", 60, 20, 200)}, "id": f"call_{n}_{i}",
                      "type": "tool_call"} for i, t in enumerate(TOOLS)]
            return {"messages": [_ai(key, n, 80, tool_calls=calls)]}
        return {"messages": [_ai(key, n, 900)]}

    def route(state: dict) -> Any:
        last = state["messages"][-1]
        return [Send("tool", {"call": c}) for c in last.tool_calls] if getattr(last, "tool_calls", None) else END

    def tool(arg: dict) -> dict:
        c = arg["call"]
        out = text(f"{c['id']}:{c['args']['query']}", 1500, 200, 6000)
        return {"messages": [ToolMessage(content=out, tool_call_id=c["id"], name=c["name"], id=f"tool-{c['id']}")],
                "sources": [{"tool": c["name"], "chars": len(out)}]}

    g = StateGraph(ToolState)
    g.add_node("agent", agent)
    g.add_node("tool", tool)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["tool", END])
    g.add_edge("tool", "agent")
    return g.compile(checkpointer=saver)


def user_input(graph: str, thread: str, turn: int) -> dict:
    return {"messages": [HumanMessage(content=text(f"{graph}:{thread}:u{turn}", 160, 20, 1200),
                                      id=f"user-{zlib.crc32(f'{thread}:{turn}'.encode()):08x}")]}


GRAPHS: dict[str, Callable[[Any], Any]] = {"chat": chat_graph, "tools": tool_graph}


def record(graph: str, turns: int) -> list[Call]:
    """The calls LangGraph makes for one thread of ``turns`` invokes (put, put_writes, get_tuple)."""
    rec = RecordingSaver()
    g = GRAPHS[graph](rec)
    for t in range(turns):
        g.invoke(user_input(graph, "rec", t), {"configurable": {"thread_id": "rec"}})
    return [c for c in rec.calls if c.op in ("put", "put_writes", "get_tuple")]


# --------------------------------------------------------------------------- server readings


def reading(admin: redis.Redis) -> dict[str, Any]:
    """Main-thread CPU (µs), per-command (calls, usec) and used_memory, from one INFO."""
    info = admin.execute_command("INFO", "cpu", "commandstats", "memory")
    cpu = (float(info["used_cpu_sys_main_thread"]) + float(info["used_cpu_user_main_thread"])) * 1e6
    cmds = {k[len("cmdstat_"):]: (int(v["calls"]), int(v["usec"])) for k, v in info.items()
            if k.startswith("cmdstat_") and k != "cmdstat_info"}
    return {"cpu": cpu, "cmds": cmds, "mem": int(info["used_memory"])}


def info_cost(admin: redis.Redis, n: int = 30) -> float:
    """Main-thread CPU between two back-to-back readings (µs, median): subtracted from every window."""
    spent = []
    for _ in range(n):
        a = reading(admin)["cpu"]
        spent.append(reading(admin)["cpu"] - a)
    return statistics.median(spent)


def cmd_delta(a: dict, b: dict) -> dict[str, tuple[int, int]]:
    out = {}
    for k, (calls, usec) in b["cmds"].items():
        c0, u0 = a["cmds"].get(k, (0, 0))
        if calls > c0:
            out[k] = (calls - c0, usec - u0)
    return out


# --------------------------------------------------------------------------- phases


def invoke_phase(admin: redis.Redis, saver: Any, graph: str, threads: int, turns: int, tag: str,
                 overhead: float) -> dict[str, Any]:
    g = GRAPHS[graph](saver)
    a = reading(admin)
    for t in range(turns):
        for k in range(threads):
            th = f"{tag}:{k}"
            g.invoke(user_input(graph, str(k), t), {"configurable": {"thread_id": th}})
    b = reading(admin)
    return {"cpu": (b["cpu"] - a["cpu"] - overhead) / (threads * turns), "mem": b["mem"] - a["mem"],
            "cmds": cmd_delta(a, b)}


def async_invoke_phase(loop: asyncio.AbstractEventLoop, admin: redis.Redis, saver: Any, graph: str, threads: int,
                       turns: int, tag: str, overhead: float) -> dict[str, Any]:
    """As invoke_phase, with the async saver: each turn's invokes of all threads at once (gather)."""
    g = GRAPHS[graph](saver)

    async def turn(t: int) -> None:
        await asyncio.gather(*(g.ainvoke(user_input(graph, str(k), t), {"configurable": {"thread_id": f"{tag}:{k}"}})
                               for k in range(threads)))

    a = reading(admin)
    for t in range(turns):
        loop.run_until_complete(turn(t))
    b = reading(admin)
    return {"cpu": (b["cpu"] - a["cpu"] - overhead) / (threads * turns), "mem": b["mem"] - a["mem"],
            "cmds": cmd_delta(a, b)}


def ops_phase(admin: redis.Redis, saver: Any, calls: list[Call], threads: int, tag: str,
              overhead: float) -> dict[str, float]:
    spent: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)

    def batch(op: str, fns: list[Callable[[], Any]]) -> None:
        a = reading(admin)["cpu"]
        for fn in fns:
            fn()
        spent[op] += reading(admin)["cpu"] - a - overhead
        count[op] += len(fns)

    for c in calls:
        todo = [call_for_thread(c, f"{tag}:{k}") for k in range(threads)]
        batch(c.op, [lambda c=c: getattr(saver, c.op)(*c.args, **c.kwargs) for c in todo])
    batch("list(limit=10)", [lambda k=k: list(saver.list({"configurable": {"thread_id": f"{tag}:{k}"}}, limit=10))
                             for k in range(threads)])
    return {op: spent[op] / count[op] for op in spent}


def warm_up(saver: Any, turns: int) -> None:
    """Both graphs on a thread of their own, and a page: scripts and functions loaded, connections open
    (one-time costs a shard pays once, left out of every window)."""
    for graph, build in GRAPHS.items():
        g = build(saver)
        for t in range(min(turns, 3)):
            g.invoke(user_input(graph, "warm", t), {"configurable": {"thread_id": f"warm:{graph}"}})
        list(saver.list({"configurable": {"thread_id": f"warm:{graph}"}}, limit=10))


def async_name(name: str, threads: int) -> str:
    return f"{name} (async, x{threads})"


def run(rounds: int, threads: int, turns: int, use_async: bool = False) -> dict[str, Any]:
    recorded = {g: record(g, turns) for g in GRAPHS}
    names = list(SAVERS) + ([async_name(n, threads) for n in SAVERS] if use_async else [])
    res: dict[str, Any] = {"inv": defaultdict(list), "mem": defaultdict(list), "ops": defaultdict(list),
                           "cmds": defaultdict(list), "recorded": recorded, "names": names}
    loop = asyncio.new_event_loop()
    with ExitStack() as stack:
        stack.callback(loop.close)
        savers, admins, overhead, asavers = {}, {}, {}, {}
        for name in SAVERS:
            srv = stack.enter_context(start_standalone())
            admins[name] = redis.Redis(host=srv.host, port=srv.port, **client_kwargs())
            cl = redis.Redis(host=srv.host, port=srv.port, socket_timeout=30)
            stack.callback(cl.close)
            stack.callback(admins[name].close)
            savers[name] = make_saver(name, cl)
            warm_up(savers[name], turns)
            overhead[name] = info_cost(admins[name])
            if use_async:  # on the same server: phases never overlap
                acl = aioredis.Redis(host=srv.host, port=srv.port, socket_timeout=30, max_connections=4096)
                stack.callback(lambda acl=acl: loop.run_until_complete(acl.aclose()))
                asavers[name] = make_async_saver(name, acl)
                async_invoke_phase(loop, admins[name], asavers[name], "chat", 2, 2, "warm:async", 0.0)
        res["overhead"] = overhead
        for rnd in range(rounds):
            order = list(SAVERS) if rnd % 2 == 0 else list(SAVERS)[::-1]
            for graph in GRAPHS:
                puts = sum(c.op == "put" for c in recorded[graph]) * threads
                for name in order:
                    t0 = time.perf_counter()
                    d = invoke_phase(admins[name], savers[name], graph, threads, turns, f"{graph}:inv:{rnd}",
                                     overhead[name])
                    res["inv"][graph, name].append(d["cpu"])
                    res["mem"][graph, name].append(d["mem"] / puts)
                    res["cmds"][graph, name].append(d["cmds"])
                    print(f"round {rnd} {graph} {name}: {d['cpu']:.0f} µs/invoke "
                          f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
                for name in order if use_async else ():
                    t0 = time.perf_counter()
                    d = async_invoke_phase(loop, admins[name], asavers[name], graph, threads, turns,
                                           f"{graph}:ainv:{rnd}", overhead[name])
                    key = async_name(name, threads)
                    res["inv"][graph, key].append(d["cpu"])
                    res["mem"][graph, key].append(d["mem"] / puts)
                    res["cmds"][graph, key].append(d["cmds"])
                    print(f"round {rnd} {graph} {key}: {d['cpu']:.0f} µs/invoke "
                          f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
                for name in order:
                    ops = ops_phase(admins[name], savers[name], recorded[graph], threads, f"{graph}:ops:{rnd}",
                                    overhead[name])
                    for op, us in ops.items():
                        res["ops"][graph, name, op].append(us)
    return res


# --------------------------------------------------------------------------- report


def _med(v: list[float]) -> str:
    return f"{statistics.median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f})"


def report(res: dict[str, Any], threads: int, turns: int) -> list[str]:
    out = []
    floor = "minimal floor"
    out.append("| graph | saver | server CPU per invoke, µs | ratio to the floor | invokes/s per core "
               "| memory per checkpoint, bytes |")
    out.append("|---|---|---|---|---|---|")
    for graph in GRAPHS:
        for name in res["names"]:
            v = res["inv"][graph, name]
            fl = async_name(floor, threads) if name.endswith(async_name("", threads)) else floor
            ratios = [a / b for a, b in zip(v, res["inv"][graph, fl], strict=True)]
            mem = statistics.median(res["mem"][graph, name])
            out.append(f"| {graph} | {name} | {_med(v)} | {statistics.median(ratios):.2f}x "
                       f"({min(ratios):.2f}-{max(ratios):.2f}) | {1e6 / statistics.median(v):,.0f} "
                       f"| {mem:,.0f} ({mem / statistics.median(res['mem'][graph, fl]):.2f}x) |")
    ops = sorted({op for (_, _, op) in res["ops"]}, key=["put", "put_writes", "get_tuple", "list(limit=10)"].index)
    out += ["", "Server CPU per operation (µs, median of rounds; ratio to the minimal floor):", "",
            "| graph | operation | calls per invoke | " + " | ".join(SAVERS) + " |",
            "|---|---|---|" + "---|" * len(SAVERS)]
    for graph in GRAPHS:
        for op in ops:
            n = sum(c.op == op for c in res["recorded"][graph]) / turns if op != "list(limit=10)" else 0
            cells = []
            for name in SAVERS:
                m = statistics.median(res["ops"][graph, name, op])
                f = statistics.median(res["ops"][graph, floor, op])
                cells.append(f"{m:,.0f} ({m / f:.2f}x)")
            out.append(f"| {graph} | {op} | {n:g} | " + " | ".join(cells) + " |")
        cells = []
        for name in SAVERS:  # the ops an invoke makes, summed: the rest of its CPU is per round trip
            per = statistics.median(res["inv"][graph, name])
            ops_sum = sum(sum(c.op == op for c in res["recorded"][graph]) / turns
                          * statistics.median(res["ops"][graph, name, op]) for op in ops if op != "list(limit=10)")
            cells.append(f"{ops_sum:,.0f} ({ops_sum / per:.0%} of the invoke)")
        out.append(f"| {graph} | the invoke's calls, summed | | " + " | ".join(cells) + " |")
    out += ["", "Commands per invoke (`INFO commandstats`, last round; script-called commands counted too): "
            "calls and usec per call, the 8 costliest by total usec:", ""]
    for graph in GRAPHS:
        for name in res["names"]:
            d = res["cmds"][graph, name][-1]
            top = sorted(d.items(), key=lambda kv: -kv[1][1])[:8]
            n = threads * turns
            out.append(f"- {graph}, {name}: " + ", ".join(
                f"{k} {c / n:.2f} x {u / c:.1f}" for k, (c, u) in top))
    return out


def get_stages(rounds: int, threads: int = 20, turns: int = 12) -> list[tuple[str, float]]:
    """Server µs per get_tuple of the latest (``INFO commandstats`` of FCALL), the library's get_tuple
    cut before each stage (devkit/script_cuts.py). After the chat graph ran ``threads`` x ``turns``
    invokes, the get_tuple RedisSaver then sends for each thread (as the next invoke would) is
    replayed ``turns`` times per variant;
    variants alternate order by round; median over rounds of the mean per call."""
    from devkit.script_cuts import get_libraries, script_calls
    from redis_saver import RedisSaver

    variants = get_libraries()
    with start_standalone() as srv:
        r = redis.Redis(host=srv.host, port=srv.port, **client_kwargs())
        saver = RedisSaver(r, prefix="lg")
        g = chat_graph(saver)
        for t in range(turns):
            for k in range(threads):
                g.invoke(user_input("chat", str(k), t), {"configurable": {"thread_id": f"get:{k}"}})
        # the get_tuple the next invoke of each thread sends (naming the streams the saver's
        # cache holds, as the worker that wrote the thread does), each replayed `turns` times
        with script_calls(saver) as sent:
            for k in range(threads):
                saver.get_tuple({"configurable": {"thread_id": f"get:{k}"}})
        gets = [args for args in sent if str(args[0]).endswith("_get_tuple")] * turns
        for _, src, _ in variants:
            r.function_load(src, replace=True)
        res: dict[str, list[float]] = {label: [] for label, _, _ in variants}
        for rnd in range(rounds):
            for label, _, fname in (variants if rnd % 2 == 0 else variants[::-1]):
                u0 = r.info("commandstats").get("cmdstat_fcall", {}).get("usec", 0)
                for args in gets:
                    r.fcall(fname, *args[1:])
                res[label].append((r.info("commandstats")["cmdstat_fcall"]["usec"] - u0) / len(gets))
        r.close()
    return [(label, statistics.median(v)) for label, v in res.items()]


def stages(rounds: int) -> list[str]:
    """bench/where.py's stage cuts of put (FCALL) and put_writes (EVALSHA): server µs per call, cumulative."""
    from bench.where import put_stages, put_writes_stages
    from bench.workload import capture
    from redis_saver import RedisSaver

    out = ["| script runs up to | µs per call | this stage |", "|---|---|---|"]
    rows = put_stages(rounds)
    calls = [c for c in capture(25).calls if c.op in ("put", "put_writes")]
    with start_standalone() as srv:
        r = redis.Redis(host=srv.host, port=srv.port, **client_kwargs())
        rows_pw = put_writes_stages(r, RedisSaver(r, prefix="lg"), calls, rounds)
        r.close()
    rows_get = get_stages(rounds)
    for title, rs in (("get_tuple, the latest (FCALL)", rows_get), ("put (FCALL)", rows),
                      ("put_writes (EVALSHA, lean)", rows_pw)):
        out.append(f"| **{title}** | | |")
        prev = 0.0
        for label, us in rs:
            floor_row = label.startswith("minimal floor")
            out.append(f"| {label} | {us:.1f} | {'' if floor_row else f'{us - prev:+.1f}'} |")
            prev = prev if floor_row else us
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--threads", type=int, default=40, help="threads per phase (default 40)")
    ap.add_argument("--turns", type=int, default=12, help="invokes per thread (default 12)")
    ap.add_argument("--async", dest="use_async", action="store_true",
                    help="also the async savers, each turn's invokes of all threads at once")
    ap.add_argument("--stages", type=int, default=0, metavar="ROUNDS",
                    help="also run bench/where.py's stage cuts of put and put_writes (ROUNDS rounds)")
    a = ap.parse_args(argv)
    load = os.getloadavg()
    t0 = time.perf_counter()
    res = run(a.rounds, a.threads, a.turns, a.use_async)
    print(f"# Server CPU per invoke and per operation ({a.threads} threads x {a.turns} turns, {a.rounds} "
          f"interleaved rounds, medians (ranges); load average {load[0]:.1f} at start, "
          f"{os.getloadavg()[0]:.1f} at the end; {time.perf_counter() - t0:.0f} s)\n")
    print("\n".join(report(res, a.threads, a.turns)))
    if a.stages:
        print("\n## Server time by script stage (`INFO commandstats` µs of the script, cumulative)\n")
        print("\n".join(stages(a.stages)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
