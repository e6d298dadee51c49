"""Shard capacity: the Redis server's time per graph step and per operation, side by side.

    python -m bench.shard [--rounds 6] [--threads 16] [--turns 12] [--async] [--stages N]
    python -m bench.shard --ab REV [--rounds 20] [--threads 16] [--turns 12] [--run-ids]

A Redis shard runs its commands on one core, so the server time a graph step costs sets how many
steps per second one shard carries (1 / CPU per invoke). This measures it for redis_saver
(``RedisSaver``), the minimal floor (``bench/floor_min.py``: one EVALSHA per call) and plainredis
(langgraph-checkpoint-plainredis; skipped, with the reason, when it is not installed), each on its own
fresh ``redis-server`` (devkit/servers.py), on two real LangGraph graphs:

* **chat**: ``messages`` with ``add_messages`` (a growing history of real prose from
  ``bench/chat.py``'s corpus), an assistant node and a bookkeeping node; each invoke reads the latest
  checkpoint and writes 3 checkpoints and their writes.
* **tools**: an agent whose tool calls fan out with ``Send`` to 3 parallel tool tasks (each writes its
  ToolMessage through ``put_writes``), then answers; 4 checkpoints per invoke.

Two figures for every window, from one ``INFO cpu commandstats memory`` before and after it:

* **commands**: the ``INFO commandstats`` usec of the commands the saver sent (FCALL / EVALSHA for
  redis_saver and the floor; EXEC, MULTI and the plain commands sent outside a transaction for
  plainredis, whose client is wrapped to count them: a command a script or EXEC runs is counted under
  its own name too, and its time is already in the script's or EXEC's). Time inside commands only.
* **main-thread CPU** (``used_cpu_sys_main_thread + used_cpu_user_main_thread``): also reading,
  parsing and replying, i.e. the per-round-trip work (plainredis sends several round trips per call,
  so its commands' time is small and its CPU is not); the INFO pair's own CPU is subtracted.

Phases, per graph and round (fresh thread ids each round):

1. **invoke**: ``graph.invoke`` of every thread, turn by turn; each turn of all threads is one window
   per saver, the savers' order rotating by turn and round (so a load change hits all three alike);
   summed per saver, per invoke. ``used_memory`` growth per checkpoint.
2. **ops**: the calls LangGraph made for one thread (recorded once on an InMemorySaver) replayed in
   lockstep: each recorded call on every thread is one window per saver (order rotating by call), so
   the figures are one operation's (put, put_writes, get_tuple of the latest), then ``list(limit=10)``
   of every thread. "the invoke's calls, summed" = calls per invoke x µs per call, per round.

Figures: medians of the rounds (ranges); ratios are computed per round (the sides of a round ran
interleaved) and their median and range reported. Sync calls leave the server idle between calls,
so a call's command time here is "cold" (caches, clock); ``--ab`` runs back to back.

``--ab REV``: script-level A/B, the function library commit REV built (``git show``) against this
checkout's, both loaded on one server: each graph's script calls (as the sync saver sends them) are
replayed on fresh threads per side and round, each call of all threads pipelined in one window, the
sides alternating call by call; FCALL usec per call by script. What a Lua change buys.

``--stages ROUNDS`` also times each script cut before each stage (``INFO commandstats`` time of the
script): get_tuple of the latest (the library cut by devkit/script_cuts.py's ``get_libraries``, and
without its touch of the thread's keys), and bench/where.py's cuts of put (FCALL) and put_writes.

Nothing here asserts: it measures. It needs a ``redis-server`` on PATH (it says so and exits 2 when it
cannot start one). Compare rows of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import operator
import os
import random
import statistics
import subprocess
import sys
import time
import zlib
from collections import Counter, defaultdict
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

# the commands that run a script: INFO commandstats counts the commands a script calls under
# their own names too, and the script's usec includes theirs (as EXEC's includes the commands it
# runs), so a call's server time is its top-level commands' usec alone
SCRIPT_CMDS = frozenset({"fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "eval_ro"})


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


class SentCommands:
    """The commands one redis-py client (sync or asyncio) sends at top level, by name, and those it
    queues inside MULTI / EXEC (the server runs them within EXEC, whose usec includes theirs). Wraps
    the instance's ``execute_command`` and its pipelines' ``execute``; plainredis sends plain
    commands and transactions, so its calls' server time is EXEC's and MULTI's usec plus the share of
    each other command's usec that its top-level calls make."""

    def __init__(self, client: Any) -> None:
        self.top: Counter[str] = Counter()
        self.nested: Counter[str] = Counter()
        plain_exec, plain_pipe = client.execute_command, client.pipeline
        if inspect.iscoroutinefunction(plain_exec):
            async def aexecute(*args: Any, **kw: Any) -> Any:
                self.top[_cmd_name(args)] += 1
                return await plain_exec(*args, **kw)
            client.execute_command = aexecute
        else:
            def execute(*args: Any, **kw: Any) -> Any:
                self.top[_cmd_name(args)] += 1
                return plain_exec(*args, **kw)
            client.execute_command = execute

        def pipeline(*args: Any, **kw: Any) -> Any:
            p = plain_pipe(*args, **kw)
            run = p.execute

            def note() -> None:
                tx = getattr(p, "transaction", getattr(p, "is_transaction", True))
                for cargs, _ in p.command_stack:
                    (self.nested if tx else self.top)[_cmd_name(cargs)] += 1
            if inspect.iscoroutinefunction(run):
                async def aexec(*a: Any, **k: Any) -> Any:
                    note()
                    return await run(*a, **k)
                p.execute = aexec
            else:
                def sexec(*a: Any, **k: Any) -> Any:
                    note()
                    return run(*a, **k)
                p.execute = sexec
            return p
        client.pipeline = pipeline


def _cmd_name(args: tuple) -> str:
    a = args[0]
    return (a.decode() if isinstance(a, bytes) else str(a)).split()[0].lower()


def own_usec(d: dict[str, tuple[int, int]], sent: dict[str, int] | None) -> float:
    """The server time (µs, ``INFO commandstats``) of the calls a client sent, from the commands'
    deltas ``d`` of a window: without ``sent`` (redis_saver, the floor: scripts only), the script
    commands' usec; with ``sent`` (top-level sends by name, ``SentCommands``), EXEC and MULTI plus
    each other command's usec times the share of its calls sent at top level."""
    total = 0.0
    for k, (calls, usec) in d.items():
        if k in SCRIPT_CMDS or k in ("exec", "multi"):
            total += usec
        elif sent is not None:
            total += usec * min(1.0, sent.get(k, 0) / calls)
    return total


# --------------------------------------------------------------------------- phases


class Side:
    """One saver on its own server: its admin connection, sync saver (and async one), the INFO pair's
    own CPU, and what its client sends (plainredis)."""

    def __init__(self, name: str, srv: Any, stack: ExitStack, use_async: bool) -> None:
        self.name = name
        self.admin = redis.Redis(host=srv.host, port=srv.port, **client_kwargs())
        stack.callback(self.admin.close)
        cl = redis.Redis(host=srv.host, port=srv.port, socket_timeout=30)
        stack.callback(cl.close)
        self.sent = SentCommands(cl) if name == "plainredis" else None
        self.saver = make_saver(name, cl)
        self.asaver: Any = None
        self.asent: SentCommands | None = None
        if use_async:  # on the same server: phases never overlap
            self.acl = aioredis.Redis(host=srv.host, port=srv.port, socket_timeout=30, max_connections=4096)
            self.asent = SentCommands(self.acl) if name == "plainredis" else None
            self.asaver = make_async_saver(name, self.acl)
        self.overhead = 0.0

    def window(self, fn: Callable[[], Any], use_async: bool = False) -> dict[str, Any]:
        """Run fn between two readings: its main-thread CPU, its calls' server time, memory growth."""
        sent = self.asent if use_async else self.sent
        before = Counter(sent.top) if sent is not None else None
        a = reading(self.admin)
        fn()
        b = reading(self.admin)
        d = cmd_delta(a, b)
        top = (sent.top - before) if sent is not None and before is not None else None
        return {"cpu": b["cpu"] - a["cpu"] - self.overhead, "own": own_usec(d, top), "mem": b["mem"] - a["mem"],
                "cmds": d}


def _rotated(names: list[str], k: int) -> list[str]:
    k %= len(names)
    return names[k:] + names[:k]


def invoke_round(sides: dict[str, Side], graph: str, threads: int, turns: int, tag: str, rnd: int,
                 loop: asyncio.AbstractEventLoop | None = None) -> dict[str, dict[str, Any]]:
    """Every saver's ``threads`` x ``turns`` invokes of ``graph``, interleaved turn by turn (each turn
    of all threads is one window per saver; the savers' order rotates by turn and round), summed per
    saver and divided per invoke."""
    names = list(sides)
    use_async = loop is not None
    graphs = {n: GRAPHS[graph](s.asaver if use_async else s.saver) for n, s in sides.items()}
    acc: dict[str, dict[str, Any]] = {n: {"cpu": 0.0, "own": 0.0, "mem": 0, "cmds": defaultdict(lambda: [0, 0])}
                                      for n in names}
    for t in range(turns):
        for n in _rotated(names, t + rnd):
            g, s = graphs[n], sides[n]
            if use_async:
                assert loop is not None

                async def turn(g: Any = g, t: int = t) -> None:
                    await asyncio.gather(*(g.ainvoke(user_input(graph, str(k), t),
                                                     {"configurable": {"thread_id": f"{tag}:{k}"}})
                                           for k in range(threads)))
                w = s.window(lambda turn=turn: loop.run_until_complete(turn()), use_async=True)
            else:
                def run_turn(g: Any = g, t: int = t) -> None:
                    for k in range(threads):
                        g.invoke(user_input(graph, str(k), t), {"configurable": {"thread_id": f"{tag}:{k}"}})
                w = s.window(run_turn)
            a = acc[n]
            a["cpu"] += w["cpu"]
            a["own"] += w["own"]
            a["mem"] += w["mem"]
            for k, (c, u) in w["cmds"].items():
                a["cmds"][k][0] += c
                a["cmds"][k][1] += u
    n_inv = threads * turns
    return {n: {"cpu": a["cpu"] / n_inv, "own": a["own"] / n_inv, "mem": a["mem"], "cmds": dict(a["cmds"])}
            for n, a in acc.items()}


OPS = ("put", "put_writes", "get_tuple", "list(limit=10)")


def ops_round(sides: dict[str, Side], calls: list[Call], threads: int, tag: str,
              rnd: int) -> dict[str, dict[str, tuple[float, float]]]:
    """The recorded calls replayed in lockstep: each call on every thread of every saver (one window
    per call and saver; the savers' order rotates by call and round), then ``list(limit=10)`` of
    every thread. Returns saver -> op -> (main-thread CPU, the calls' server time) per call, µs."""
    names = list(sides)
    cpu: dict[tuple[str, str], float] = defaultdict(float)
    own: dict[tuple[str, str], float] = defaultdict(float)
    count: dict[tuple[str, str], int] = defaultdict(int)
    batches = [(c.op, [call_for_thread(c, f"{tag}:{k}") for k in range(threads)]) for c in calls]
    for i, (op, todo) in enumerate(batches):
        for n in _rotated(names, i + rnd):
            saver = sides[n].saver
            w = sides[n].window(lambda saver=saver, todo=todo: [getattr(saver, c.op)(*c.args, **c.kwargs)
                                                               for c in todo])
            cpu[n, op] += w["cpu"]
            own[n, op] += w["own"]
            count[n, op] += len(todo)
    for n in _rotated(names, rnd):
        saver = sides[n].saver
        w = sides[n].window(lambda saver=saver: [list(saver.list({"configurable": {"thread_id": f"{tag}:{k}"}},
                                                                 limit=10)) for k in range(threads)])
        cpu[n, OPS[3]] += w["cpu"]
        own[n, OPS[3]] += w["own"]
        count[n, OPS[3]] += threads
    return {n: {op: (cpu[n, op] / count[n, op], own[n, op] / count[n, op]) for op in OPS if count[n, op]}
            for n in names}


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


def available(names: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The savers this machine can run, and why the others are skipped."""
    ok, skipped = [], []
    for name in names:
        if name == "plainredis":
            try:
                import langgraph_checkpoint_plainredis  # noqa: F401
            except ImportError as e:
                skipped.append(f"plainredis skipped: langgraph-checkpoint-plainredis is not installed ({e})")
                continue
        ok.append(name)
    return ok, skipped


def run(rounds: int, threads: int, turns: int, use_async: bool = False) -> dict[str, Any]:
    names, skipped = available(SAVERS)
    recorded = {g: record(g, turns) for g in GRAPHS}
    res: dict[str, Any] = {"inv": defaultdict(list), "own": defaultdict(list), "mem": defaultdict(list),
                           "ops": defaultdict(list), "ops_own": defaultdict(list), "cmds": {},
                           "recorded": recorded, "savers": names, "skipped": skipped,
                           "names": names + ([async_name(n, threads) for n in names] if use_async else [])}
    loop = asyncio.new_event_loop()
    with ExitStack() as stack:
        stack.callback(loop.close)
        sides: dict[str, Side] = {}
        for name in names:
            srv = stack.enter_context(start_standalone())
            s = sides[name] = Side(name, srv, stack, use_async)
            warm_up(s.saver, turns)
            if use_async:
                stack.callback(lambda acl=s.acl: loop.run_until_complete(acl.aclose()))
                invoke_round({name: s}, "chat", 2, 2, "warm:async", 0, loop)
            s.overhead = info_cost(s.admin)
        res["overhead"] = {n: s.overhead for n, s in sides.items()}
        for rnd in range(rounds):
            for graph in GRAPHS:
                puts = sum(c.op == "put" for c in recorded[graph]) * threads
                modes: list[tuple[str, asyncio.AbstractEventLoop | None]] = [("inv", None)]
                if use_async:
                    modes.append(("ainv", loop))
                for mode, lp in modes:
                    t0 = time.perf_counter()
                    got = invoke_round(sides, graph, threads, turns, f"{graph}:{mode}:{rnd}", rnd, lp)
                    for n, d in got.items():
                        key = n if lp is None else async_name(n, threads)
                        res["inv"][graph, key].append(d["cpu"])
                        res["own"][graph, key].append(d["own"])
                        res["mem"][graph, key].append(d["mem"] / puts)
                        res["cmds"][graph, key] = d["cmds"]
                    print(f"round {rnd} {graph} {mode}: " + ", ".join(
                        f"{n} {d['cpu']:.0f} / {d['own']:.0f}" for n, d in got.items())
                        + f" µs per invoke (CPU / commands; {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
                got_ops = ops_round(sides, recorded[graph], threads, f"{graph}:ops:{rnd}", rnd)
                for n, per in got_ops.items():
                    for op, (c, o) in per.items():
                        res["ops"][graph, n, op].append(c)
                        res["ops_own"][graph, n, op].append(o)
    return res


# --------------------------------------------------------------------------- report


def _med(v: list[float], digits: int = 0) -> str:
    return f"{statistics.median(v):,.{digits}f} ({min(v):,.{digits}f}-{max(v):,.{digits}f})"


def _ratio(a: list[float], b: list[float]) -> str:
    """Median and range of the per-round ratios a/b (rounds paired: they ran interleaved)."""
    r = [x / y for x, y in zip(a, b, strict=True) if y]
    if not r:
        return "-"
    return f"{statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f})"


FLOOR, PLAIN = "minimal floor", "plainredis"


def _per_invoke(res: dict[str, Any], graph: str, turns: int, name: str, key: str) -> list[float]:
    """Per round: the invoke's calls summed (calls per invoke x µs per call of that round)."""
    rec = res["recorded"][graph]
    n_rounds = len(res[key][graph, name, "put"])
    return [sum(sum(c.op == op for c in rec) / turns * res[key][graph, name, op][r] for op in OPS[:3])
            for r in range(n_rounds)]


def report(res: dict[str, Any], threads: int, turns: int) -> list[str]:
    out = list(res["skipped"])
    if out:
        out.append("")
    savers = res["savers"]
    out += ["Per invoke: the server time of the invoke's commands (`INFO commandstats` usec of the top-level "
            "commands: FCALL / EVALSHA, or EXEC, MULTI and plain commands) and the server's main-thread CPU "
            "(`INFO cpu`, which adds reading, parsing and replying); medians of the rounds (ranges), ratios "
            "per round (rounds paired):", "",
            "| graph | saver | commands, µs per invoke | / minimal floor | / plainredis "
            "| main-thread CPU, µs per invoke | / minimal floor | / plainredis | invokes/s per core "
            "| memory per checkpoint, bytes |", "|---|---|---|---|---|---|---|---|---|---|"]
    for graph in GRAPHS:
        for name in res["names"]:
            suffix = async_name("", threads) if name.endswith(async_name("", threads)) else ""
            fl, pl = FLOOR + suffix, PLAIN + suffix
            own, cpu = res["own"][graph, name], res["inv"][graph, name]
            cells = [_med(own), _ratio(own, res["own"][graph, fl]),
                     _ratio(own, res["own"][graph, pl]) if (graph, pl) in res["own"] else "-",
                     _med(cpu), _ratio(cpu, res["inv"][graph, fl]),
                     _ratio(cpu, res["inv"][graph, pl]) if (graph, pl) in res["inv"] else "-",
                     f"{1e6 / statistics.median(cpu):,.0f}"]
            mem = statistics.median(res["mem"][graph, name])
            cells.append(f"{mem:,.0f} ({mem / statistics.median(res['mem'][graph, fl]):.2f}x)")
            out.append(f"| {graph} | {name} | " + " | ".join(cells) + " |")
    out += ["", "Per operation (sync; the recorded calls replayed in lockstep over the threads, one window per "
            "call and saver, interleaved): server time of the call's commands (`INFO commandstats`), µs per "
            "call, medians of the rounds (ranges):", "",
            "| graph | operation | calls per invoke | " + " | ".join(savers)
            + (" | redis_saver / floor | redis_saver / plainredis |" if PLAIN in savers
               else " | redis_saver / floor |"),
            "|---|---|---|" + "---|" * (len(savers) + (2 if PLAIN in savers else 1))]
    for graph in GRAPHS:
        rows = [(op, [res["ops_own"][graph, n, op] for n in savers]) for op in OPS]
        rows.append(("the invoke's calls, summed", [_per_invoke(res, graph, turns, n, "ops_own") for n in savers]))
        for op, vals in rows:
            n = sum(c.op == op for c in res["recorded"][graph]) / turns if op in OPS[:3] else 0
            cells = [_med(v, 1) for v in vals] + [_ratio(vals[0], vals[savers.index(FLOOR)])]
            if PLAIN in savers:
                cells.append(_ratio(vals[0], vals[savers.index(PLAIN)]))
            out.append(f"| {graph} | {op} | {n:g} | " + " | ".join(cells) + " |" if op in OPS[:3] or op == OPS[3]
                       else f"| {graph} | **{op}** | | " + " | ".join(cells) + " |")
    out += ["", "Per operation, main-thread CPU (`INFO cpu` around each window, less the INFO pair's own), µs "
            "per call, medians (ratio to the floor, median of the rounds' ratios):", "",
            "| graph | operation | " + " | ".join(savers) + " |", "|---|---|" + "---|" * len(savers)]
    for graph in GRAPHS:
        rows = [(op, [res["ops"][graph, n, op] for n in savers]) for op in OPS]
        rows.append(("the invoke's calls, summed", [_per_invoke(res, graph, turns, n, "ops") for n in savers]))
        for op, vals in rows:
            fl = vals[savers.index(FLOOR)]
            out.append(f"| {graph} | {op} | " + " | ".join(
                f"{statistics.median(v):,.0f} ({_ratio(v, fl).split(' ')[0]})" for v in vals) + " |")
    out += ["", "Commands per invoke (`INFO commandstats`, last round; script-called commands counted too): "
            "calls and usec per call, the 8 costliest by total usec:", ""]
    for graph in GRAPHS:
        for name in res["names"]:
            d = res["cmds"][graph, name]
            top = sorted(d.items(), key=lambda kv: -kv[1][1])[:8]
            n = threads * turns
            out.append(f"- {graph}, {name}: " + ", ".join(
                f"{k} {c / n:.2f} x {u / c:.1f}" for k, (c, u) in top))
    return out


# --------------------------------------------------------------------------- script A/B


def _library_at(rev: str) -> str:
    """lua/build/library.lua as commit ``rev`` built it (git show, from this checkout)."""
    root = Path(__file__).resolve().parent.parent
    return subprocess.run(["git", "show", f"{rev}:lua/build/library.lua"], cwd=root, check=True,
                          capture_output=True, text=True).stdout


def ab(rev: str, rounds: int, threads: int, turns: int, run_ids: bool = False) -> list[str]:
    """Script-level A/B: the function library commit ``rev`` built (A) and this checkout's (B), loaded
    on one server. Each graph's script calls (one thread, ``turns`` invokes, as the sync saver sends
    them) are replayed on ``threads`` fresh threads per side and round, call by call: every call of
    all threads of one side is one window, the sides alternate by call and round, and a window's
    script time is the ``INFO commandstats`` usec of FCALL. Per op and side: µs per call, medians of
    the rounds (ranges), and the rounds' B/A ratios. ``run_ids``: each invoke's checkpoints carry a
    run id in their metadata (as LangGraph's server sets it), so puts keep the run index."""
    from devkit.script_cuts import script_calls
    from redis_saver import RedisSaver
    from redis_saver.core import scripts as _scripts

    try:
        old_src = _library_at(rev)
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        return [f"A/B skipped: cannot read lua/build/library.lua at {rev!r} ({e})"]
    new = _scripts.library()
    old_name = old_src.split("\n", 1)[0].removeprefix("#!lua name=")
    libs = {"A": old_name, "B": new.name}
    # per (graph, script): one {side: µs per call} per call index and round (the two sides of a call ran
    # back to back: a pair)
    res: dict[tuple[str, str], list[dict[str, float]]] = defaultdict(list)
    with start_standalone() as srv:
        r = redis.Redis(host=srv.host, port=srv.port, **client_kwargs(socket_timeout=60))
        saver = RedisSaver(r, prefix="lg")
        warm_up(saver, turns)
        if old_name != new.name:
            r.function_load(old_src, replace=True)
        captured = {}
        for graph, build in GRAPHS.items():
            g = build(saver)
            with script_calls(saver) as sent:
                for t in range(turns):
                    cfg: dict[str, Any] = {"configurable": {"thread_id": f"ab:cap:{graph}"}}
                    if run_ids:
                        cfg["metadata"] = {"run_id": f"run-{graph}-{t}"}
                    g.invoke(user_input(graph, "ab", t), cfg)
            captured[graph] = list(sent)
        keys = saver.keys

        def call(side: str, args: tuple, tid: str) -> tuple:
            op = str(args[0]).removeprefix(new.name + "_")
            nk = int(args[1])
            ks = keys.thread_keys(tid) if nk == 11 else keys.lean_keys(tid)
            argv = list(args[2 + nk:])
            argv[1] = tid
            return (f"{libs[side]}_{op}", nk, *ks, *argv)

        for rnd in range(rounds):
            for graph, calls in captured.items():
                for i, args in enumerate(calls):
                    op = str(args[0]).removeprefix(new.name + "_").replace("__", "+")
                    pair: dict[str, float] = {}
                    for side in (("A", "B") if (i + rnd) % 2 == 0 else ("B", "A")):
                        pipe = r.pipeline(transaction=False)
                        for k in range(threads):
                            pipe.execute_command("FCALL", *call(side, args, f"ab:{rnd}:{side}:{graph}:{k}"))
                        a = reading(r)
                        pipe.execute()
                        d = cmd_delta(a, reading(r))
                        pair[side] = own_usec(d, None) / threads
                    res[graph, op].append(pair)
        r.close()
    out = [f"Script A/B on one server: A = the library at {rev} ({old_name}), B = this checkout's ({new.name}); "
           f"{threads} threads x {turns} turns per graph{', a run id per invoke' if run_ids else ''}, {rounds} "
           "rounds, sides alternating call by call; "
           "FCALL µs per call (`INFO commandstats`) of each window (one call of every thread): medians and "
           "quartiles over the windows, and of the B / A ratios of the windows' pairs (a pair: one call of one "
           "round, both sides back to back; a window the machine's load hit is one outlier among many):", "",
           "| graph | script | windows | A | B | B / A | B - A, µs |", "|---|---|---|---|---|---|---|"]

    def q(v: list[float], fmt: str) -> str:
        qs = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
        return f"{qs[1]:{fmt}} ({qs[0]:{fmt}}-{qs[2]:{fmt}})"

    for (graph, op), pairs in sorted(res.items()):
        a, b = [p["A"] for p in pairs], [p["B"] for p in pairs]
        out.append(f"| {graph} | {op} | {len(pairs)} | {q(a, '.1f')} | {q(b, '.1f')} "
                   f"| {q([y / x for x, y in zip(a, b, strict=True) if x], '.3f')}x "
                   f"| {q([y - x for x, y in zip(a, b, strict=True)], '+.1f')} |")
    return out


def get_stages(rounds: int, threads: int = 20, turns: int = 12) -> list[tuple[str, float]]:
    """Server µs per get_tuple of the latest (``INFO commandstats`` of FCALL), the library's get_tuple
    cut before each stage (devkit/script_cuts.py). After the chat graph ran ``threads`` x ``turns``
    invokes, the get_tuple RedisSaver then sends for each thread (as the next invoke would) is
    replayed ``turns`` times per variant;
    variants alternate order by round; median over the windows (one pass over the threads each,
    pipelined) of the mean per call."""
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
                # one window per pass over the threads, the calls pipelined (back to back on the server)
                for j in range(0, len(gets), threads):
                    pipe = r.pipeline(transaction=False)
                    for args in gets[j:j + threads]:
                        pipe.execute_command("FCALL", fname, *args[1:])
                    a = reading(r)
                    pipe.execute()
                    res[label].append(own_usec(cmd_delta(a, reading(r)), None) / len(gets[j:j + threads]))
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
    ap.add_argument("--rounds", type=int, default=6, help="interleaved rounds (default 6)")
    ap.add_argument("--threads", type=int, default=16, help="threads per phase (default 16)")
    ap.add_argument("--turns", type=int, default=12, help="invokes per thread (default 12)")
    ap.add_argument("--async", dest="use_async", action="store_true",
                    help="also the async savers, each turn's invokes of all threads at once")
    ap.add_argument("--stages", type=int, default=0, metavar="ROUNDS",
                    help="also run bench/where.py's stage cuts of put and put_writes (ROUNDS rounds)")
    ap.add_argument("--ab", metavar="REV", help="only the script A/B: the library commit REV built against "
                    "this checkout's, on one server (--rounds, --threads, --turns apply)")
    ap.add_argument("--run-ids", action="store_true",
                    help="with --ab: a run id in every invoke's metadata (as LangGraph's server sets it)")
    a = ap.parse_args(argv)
    load = os.getloadavg()
    t0 = time.perf_counter()
    try:
        start_standalone().stop()
    except Exception as e:  # noqa: BLE001 - any failure to start one is the reason to give
        print(f"bench.shard skipped: cannot start a redis-server ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    if a.ab:
        out = ab(a.ab, a.rounds, a.threads, a.turns, a.run_ids)
        print(f"# Script A/B (load average {load[0]:.1f} at start, {os.getloadavg()[0]:.1f} at the end; "
              f"{time.perf_counter() - t0:.0f} s)\n")
        print("\n".join(out))
        return 0
    res = run(a.rounds, a.threads, a.turns, a.use_async)
    print(f"# Server time per invoke and per operation ({a.threads} threads x {a.turns} turns, {a.rounds} "
          f"interleaved rounds, medians (ranges); load average {load[0]:.1f} at start, "
          f"{os.getloadavg()[0]:.1f} at the end; {time.perf_counter() - t0:.0f} s)\n")
    print("\n".join(report(res, a.threads, a.turns)))
    if a.stages:
        print("\n## Server time by script stage (`INFO commandstats` µs of the script, cumulative)\n")
        print("\n".join(stages(a.stages)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
