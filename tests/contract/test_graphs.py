"""Real LangGraph graphs compiled with our saver vs InMemorySaver: same inputs must give
the same outputs, ``get_state`` and ``get_state_history`` (values, next, tasks,
interrupts, metadata minus ids/timestamps, number of checkpoints).

Kinds: ``sync`` = RedisSaver driven with ``graph.invoke`` & co; ``async`` =
AsyncRedisSaver driven with ``graph.ainvoke`` & co; ``memory`` = InMemorySaver vs
InMemorySaver (validates the harness).  The InMemorySaver reference always runs in the
same mode as the saver under test.
"""

from __future__ import annotations

import operator
import re
import threading
from collections.abc import Sequence
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Send, interrupt
from typing_extensions import TypedDict

from tests.contract.conftest import delete_prefix, new_saver, unique_prefix

THREAD = "chat:{1} *?[x] ü"


# --------------------------------------------------------------------------- normalization
_TASK_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def norm_ns(ns: str) -> str:
    # "node:<task uuid>|child:<task uuid>" -> "node|child" (task ids derive from checkpoint ids)
    return "|".join(part.split(":")[0] for part in ns.split("|")) if ns else ""


def norm_value(v: Any) -> Any:
    if isinstance(v, BaseMessage):
        return {"type": v.type, "content": v.content, "name": v.name}
    if isinstance(v, dict):
        return {k: norm_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(norm_value(x) for x in v)
    if hasattr(v, "value") and type(v).__name__ == "Interrupt":
        return ("Interrupt", norm_value(v.value))
    return v


def norm_output(out: Any) -> Any:
    """invoke() output; ``__interrupt__`` lists parallel tasks' interrupts in completion
    order (thread-pool timing), so it is compared as a multiset."""
    out = norm_value(out)
    if isinstance(out, dict) and "__interrupt__" in out:
        out = {**out, "__interrupt__": sorted(out["__interrupt__"], key=repr)}
    return out


def norm_metadata(md: dict | None) -> dict:
    out = {}
    for k, v in (md or {}).items():
        if k in ("run_id", "thread_id", "checkpoint_id", "checkpoint_ns"):
            continue
        if k == "parents":
            out[k] = sorted(norm_ns(x) for x in v)
        else:
            out[k] = norm_value(v)
    return out


def norm_config(cfg: dict | None) -> Any:
    if not cfg:
        return None
    c = cfg.get("configurable", {})
    return {"thread_id": c.get("thread_id"), "ns": norm_ns(c.get("checkpoint_ns", ""))}


def norm_snapshot(s: Any) -> Any:
    if s is None:
        return None
    return {
        "values": norm_value(s.values),
        "next": tuple(s.next),
        "metadata": norm_metadata(s.metadata),
        "config": norm_config(s.config),
        "has_parent": s.parent_config is not None,
        "interrupts": [norm_value(i) for i in s.interrupts],
        "tasks": [
            {
                "name": t.name,
                "path": tuple(str(p) if _TASK_ID.match(str(p)) is None else "<id>" for p in t.path),
                "error": repr(t.error) if t.error else None,
                "interrupts": [norm_value(i) for i in t.interrupts],
                "state": norm_snapshot(t.state) if type(t.state).__name__ == "StateSnapshot" else norm_config(t.state),
                "result": norm_value(t.result),
            }
            for t in s.tasks
        ],
    }


# --------------------------------------------------------------------------- driver
class Pair:
    """The same graph compiled with the reference saver and with the saver under test."""

    def __init__(self, builder: StateGraph, ref: Any, target: Any, mode: str, **compile_kw: Any) -> None:
        self.mode = mode
        self.ref_graph = builder.compile(checkpointer=ref, **compile_kw)
        self.graph = builder.compile(checkpointer=target, **compile_kw)
        self.target = target

    async def _call(self, graph: Any, name: str, *args: Any, **kw: Any) -> Any:
        if self.mode == "async":
            if name == "get_state_history":
                return [s async for s in graph.aget_state_history(*args, **kw)]
            return await getattr(graph, "a" + name)(*args, **kw)
        if name == "get_state_history":
            return list(graph.get_state_history(*args, **kw))
        return getattr(graph, name)(*args, **kw)

    async def both(self, name: str, *args: Any, ref_args: Sequence | None = None, **kw: Any) -> Any:
        """Call on both graphs (``ref_args`` overrides args for the reference side, for
        configs that carry saver-specific checkpoint ids); return the target's result
        after asserting equal normalized results."""
        exp = await self._call(self.ref_graph, name, *(ref_args if ref_args is not None else args), **kw)
        got = await self._call(self.graph, name, *args, **kw)
        if name == "invoke":
            assert norm_output(got) == norm_output(exp), f"{name} output differs"
        return exp, got

    async def check(self, config: dict, *, subgraphs: bool = False) -> tuple[list, list]:
        exp_state = await self._call(self.ref_graph, "get_state", config, subgraphs=subgraphs)
        got_state = await self._call(self.graph, "get_state", config, subgraphs=subgraphs)
        assert norm_snapshot(got_state) == norm_snapshot(exp_state), "get_state differs"
        exp_hist = await self._call(self.ref_graph, "get_state_history", config)
        got_hist = await self._call(self.graph, "get_state_history", config)
        assert len(got_hist) == len(exp_hist), "history length differs"
        assert [norm_snapshot(s) for s in got_hist] == [norm_snapshot(s) for s in exp_hist]
        # filtered / paginated history
        for kw in ({"limit": 2}, {"filter": {"source": "loop"}}, {"filter": {"step": 1}}):
            e = await self._call(self.ref_graph, "get_state_history", config, **kw)
            g = await self._call(self.graph, "get_state_history", config, **kw)
            assert [norm_snapshot(s) for s in g] == [norm_snapshot(s) for s in e], kw
        if len(exp_hist) > 2:
            e = await self._call(self.ref_graph, "get_state_history", config, before=exp_hist[1].config, limit=3)
            g = await self._call(self.graph, "get_state_history", config, before=got_hist[1].config, limit=3)
            assert [norm_snapshot(s) for s in g] == [norm_snapshot(s) for s in e], "before"
        return exp_hist, got_hist


@pytest.fixture
async def pair_factory(contract_kind: str, contract_url: str | None):
    made: list[tuple[Any, str]] = []

    def make(builder: StateGraph, **compile_kw: Any) -> Pair:
        prefix = unique_prefix()
        target = new_saver(contract_kind, contract_url, prefix=prefix)
        made.append((target, prefix))
        mode = "async" if contract_kind == "async" else "sync"
        return Pair(builder, InMemorySaver(), target, mode, **compile_kw)

    yield make
    for target, prefix in made:
        client = getattr(target, "client", None)
        if client is not None:
            if contract_kind == "async":
                await client.aclose()
            else:
                client.close()
        if contract_url:
            delete_prefix(contract_url, prefix)


def cfg(thread: str = THREAD) -> dict:
    return {"configurable": {"thread_id": thread}}


# --------------------------------------------------------------------------- graphs
class ChatState(TypedDict):
    messages: Annotated[list, add_messages]
    turns: int


def bot(state: ChatState) -> dict:
    last = state["messages"][-1]
    return {
        "messages": [AIMessage(content=f"echo[{len(state['messages'])}]: {last.content}")],
        "turns": state.get("turns", 0) + 1,
    }


def chat_builder() -> StateGraph:
    b = StateGraph(ChatState)
    b.add_node("bot", bot)
    b.add_edge(START, "bot")
    b.add_edge("bot", END)
    return b


async def test_multi_turn_chat(pair_factory: Any) -> None:
    p = pair_factory(chat_builder())
    for i, text in enumerate(["hi", "{braces} and *?[]", "ünïcödé 😀", "last"]):
        await p.both("invoke", {"messages": [HumanMessage(content=text)]}, cfg())
        hist, _ = await p.check(cfg())
        assert len(hist) == 3 * (i + 1)
    # a second thread stays apart
    await p.both("invoke", {"messages": [HumanMessage(content="other")]}, cfg("other:{2}"))
    await p.check(cfg("other:{2}"))
    await p.check(cfg())


class AskState(TypedDict):
    question: str
    answer: str
    log: Annotated[list, operator.add]


def ask(state: AskState) -> dict:
    answer = interrupt({"q": state["question"]})
    return {"answer": answer, "log": [f"answered:{answer}"]}


def after(state: AskState) -> dict:
    return {"log": ["after"]}


async def test_interrupt_and_resume(pair_factory: Any) -> None:
    b = StateGraph(AskState)
    b.add_node("ask", ask)
    b.add_node("after", after)
    b.add_edge(START, "ask")
    b.add_edge("ask", "after")
    b.add_edge("after", END)
    p = pair_factory(b)
    exp, got = await p.both("invoke", {"question": "why?", "log": []}, cfg())
    assert "__interrupt__" in got
    await p.check(cfg())
    state = await p._call(p.graph, "get_state", cfg())
    assert state.next == ("ask",) and state.interrupts
    await p.both("invoke", Command(resume="because"), cfg())
    await p.check(cfg())
    state = await p._call(p.graph, "get_state", cfg())
    assert state.values["answer"] == "because" and state.next == ()
    # a second run on the same thread interrupts again and resumes again
    await p.both("invoke", {"question": "again?"}, cfg())
    await p.both("invoke", Command(resume="sure"), cfg())
    await p.check(cfg())


class CountState(TypedDict):
    n: int
    trail: Annotated[list, operator.add]


def step_a(state: CountState) -> dict:
    return {"n": state["n"] + 1, "trail": ["a"]}


def step_b(state: CountState) -> dict:
    return {"n": state["n"] * 10, "trail": ["b"]}


async def test_time_travel_replay_and_fork(pair_factory: Any) -> None:
    b = StateGraph(CountState)
    b.add_node("a", step_a)
    b.add_node("b", step_b)
    b.add_edge(START, "a")
    b.add_edge("a", "b")
    b.add_edge("b", END)
    p = pair_factory(b)
    await p.both("invoke", {"n": 1, "trail": []}, cfg())
    await p.both("invoke", {"n": 5}, cfg())
    exp_hist, got_hist = await p.check(cfg())
    # the checkpoint just before "b" of the first run
    idx = next(i for i, s in enumerate(exp_hist) if s.next == ("b",) and s.values["n"] == 2)
    assert got_hist[idx].next == ("b",)
    # replay from there
    await p.both("invoke", None, got_hist[idx].config, ref_args=(None, exp_hist[idx].config))
    await p.check(cfg())
    # fork: update_state at an old checkpoint, then continue from the fork
    e_cfg, g_cfg = await p.both(
        "update_state", got_hist[idx].config, {"n": 100}, ref_args=(exp_hist[idx].config, {"n": 100})
    )
    await p.both("invoke", None, g_cfg, ref_args=(None, e_cfg))
    exp_hist2, got_hist2 = await p.check(cfg())
    final = await p._call(p.graph, "get_state", cfg())
    assert final.values["n"] == 1000
    # state at an old checkpoint by id
    e_old = await p._call(p.ref_graph, "get_state", exp_hist2[-2].config)
    g_old = await p._call(p.graph, "get_state", got_hist2[-2].config)
    assert norm_snapshot(g_old) == norm_snapshot(e_old)
    # update_state as a node, then run
    await p.both("update_state", cfg(), {"trail": ["manual"]}, as_node="a")
    await p.both("invoke", None, cfg())
    await p.check(cfg())


class SubState(TypedDict):
    x: int
    items: Annotated[list, operator.add]


def sub_inc(state: SubState) -> dict:
    return {"x": state["x"] + 1, "items": ["sub_inc"]}


def sub_ask(state: SubState) -> dict:
    v = interrupt("sub?")
    return {"x": state["x"] + v, "items": ["sub_ask"]}


def parent_pre(state: SubState) -> dict:
    return {"items": ["pre"]}


def parent_post(state: SubState) -> dict:
    return {"x": state["x"] * 2, "items": ["post"]}


async def test_subgraphs(pair_factory: Any) -> None:
    sb = StateGraph(SubState)
    sb.add_node("inc", sub_inc)
    sb.add_node("ask", sub_ask)
    sb.add_edge(START, "inc")
    sb.add_edge("inc", "ask")
    sb.add_edge("ask", END)
    sub = sb.compile()
    b = StateGraph(SubState)
    b.add_node("pre", parent_pre)
    b.add_node("child", sub)
    b.add_node("post", parent_post)
    b.add_edge(START, "pre")
    b.add_edge("pre", "child")
    b.add_edge("child", "post")
    b.add_edge("post", END)
    p = pair_factory(b)
    await p.both("invoke", {"x": 1, "items": []}, cfg())
    await p.check(cfg(), subgraphs=True)
    state = await p._call(p.graph, "get_state", cfg(), subgraphs=True)
    assert state.next == ("child",)
    assert state.tasks and state.tasks[0].state is not None
    sub_state = state.tasks[0].state
    assert sub_state.next == ("ask",) and sub_state.values["x"] == 2
    # subgraph checkpoints live in their own namespace
    ns = sub_state.config["configurable"]["checkpoint_ns"]
    assert ns.startswith("child:")
    sub_list = [t async for t in _alist(p, {"configurable": {"thread_id": THREAD, "checkpoint_ns": ns}})]
    assert sub_list and all(t.config["configurable"]["checkpoint_ns"] == ns for t in sub_list)
    all_list = [t async for t in _alist(p, cfg())]
    assert {t.config["configurable"]["checkpoint_ns"] for t in all_list} >= {"", ns}
    # history of the subgraph namespace compares too
    e_sub = await p._call(p.ref_graph, "get_state", cfg(), subgraphs=True)
    e_ns = e_sub.tasks[0].state.config["configurable"]["checkpoint_ns"]
    e_h = await p._call(
        p.ref_graph, "get_state_history", {"configurable": {"thread_id": THREAD, "checkpoint_ns": e_ns}}
    )
    g_h = await p._call(p.graph, "get_state_history", {"configurable": {"thread_id": THREAD, "checkpoint_ns": ns}})
    assert [norm_snapshot(s) for s in g_h] == [norm_snapshot(s) for s in e_h]
    await p.both("invoke", Command(resume=5), cfg())
    await p.check(cfg(), subgraphs=True)
    final = await p._call(p.graph, "get_state", cfg())
    assert final.values["x"] == 14 and final.next == ()


async def _alist(p: Pair, config: dict):
    if p.mode == "async":
        async for t in p.target.alist(config):
            yield t
    else:
        for t in p.target.list(config):
            yield t


class FanState(TypedDict):
    n: int
    results: Annotated[list, operator.add]


def fan_out(state: FanState) -> list[Send]:
    return [Send("worker", {"n": i, "results": []}) for i in range(state["n"])]


def worker(state: FanState) -> dict:
    return {"results": [f"w{state['n']}", {"n": state["n"], "sq": state["n"] ** 2}]}


def collect(state: FanState) -> dict:
    return {"results": [f"collected:{len(state['results'])}"]}


async def test_send_fan_out_parallel_writes(pair_factory: Any) -> None:
    b = StateGraph(FanState)
    b.add_node("worker", worker)
    b.add_node("collect", collect)
    b.add_conditional_edges(START, fan_out, ["worker"])
    b.add_edge("worker", "collect")
    b.add_edge("collect", END)
    p = pair_factory(b)
    await p.both("invoke", {"n": 7, "results": []}, cfg())
    await p.check(cfg())
    await p.both("invoke", {"n": 3}, cfg())
    await p.check(cfg())
    state = await p._call(p.graph, "get_state", cfg())
    assert state.values["results"][-1] == "collected:21"  # 7*2 + 1 + 3*2


async def test_interrupt_in_fan_out(pair_factory: Any) -> None:
    """Some parallel tasks interrupt, others finish: the finished tasks' writes are kept
    as pending writes and not re-run on resume."""

    def maybe_ask(state: FanState) -> dict:
        if state["n"] % 2:
            v = interrupt(f"q{state['n']}")
            return {"results": [f"a{state['n']}={v}"]}
        return {"results": [f"done{state['n']}"]}

    b = StateGraph(FanState)
    b.add_node("worker", maybe_ask)
    b.add_conditional_edges(START, fan_out, ["worker"])
    b.add_edge("worker", END)
    p = pair_factory(b)
    await p.both("invoke", {"n": 4, "results": []}, cfg())
    await p.check(cfg())
    state = await p._call(p.graph, "get_state", cfg())
    assert len(state.interrupts) == 2
    resume = {i.id: f"r-{i.value}" for i in state.interrupts}
    e_state = await p._call(p.ref_graph, "get_state", cfg())
    e_resume = {i.id: f"r-{i.value}" for i in e_state.interrupts}
    await p.both("invoke", Command(resume=resume), cfg(), ref_args=(Command(resume=e_resume), cfg()))
    await p.check(cfg())


def batch_add(state: list, writes: Sequence[list]) -> list:
    out = list(state)
    for w in writes:
        out.extend(w if isinstance(w, list) else [w])
    return out


class DeltaState(TypedDict):
    turn: int
    log: Annotated[list, DeltaChannel(batch_add, snapshot_frequency=3)]


def d_start(state: DeltaState) -> dict:
    return {"turn": state.get("turn", 0) + 1, "log": [f"start{state.get('turn', 0)}"]}


def d_fan(state: DeltaState) -> list[Send]:
    return [Send("d_worker", {"turn": state["turn"] * 10 + i, "log": []}) for i in range(3)]


def d_worker(state: DeltaState) -> dict:
    return {"log": [f"w{state['turn']}"]}


def d_end(state: DeltaState) -> dict:
    return {"log": [f"end{len(state['log'])}"]}


def delta_builder() -> StateGraph:
    b = StateGraph(DeltaState)
    b.add_node("start", d_start)
    b.add_node("d_worker", d_worker)
    b.add_node("end", d_end)
    b.add_edge(START, "start")
    b.add_conditional_edges("start", d_fan, ["d_worker"])
    b.add_edge("d_worker", "end")
    b.add_edge("end", END)
    return b


async def test_delta_channel_many_turns(pair_factory: Any) -> None:
    p = pair_factory(delta_builder())
    for turn in range(8):
        await p.both("invoke", {"log": [f"in{turn}"]}, cfg())
        if turn % 3 == 2:
            await p.check(cfg())
    await p.check(cfg())
    state = await p._call(p.graph, "get_state", cfg())
    assert len(state.values["log"]) == 8 * 6
    # the saver's delta history equals the base-class walk over the same saver
    from langgraph.checkpoint.base import BaseCheckpointSaver

    tgt = p.target
    conf = state.config
    if p.mode == "async":
        got = await tgt.aget_delta_channel_history(config=conf, channels=["log", "turn"])
        base = await BaseCheckpointSaver.aget_delta_channel_history(tgt, config=conf, channels=["log", "turn"])
    else:
        got = tgt.get_delta_channel_history(config=conf, channels=["log", "turn"])
        base = BaseCheckpointSaver.get_delta_channel_history(tgt, config=conf, channels=["log", "turn"])
    assert {k: {**v, "writes": [tuple(w) for w in v["writes"]]} for k, v in got.items()} == {
        k: {**v, "writes": [tuple(w) for w in v["writes"]]} for k, v in base.items()
    }


async def test_delta_channel_prune_keep_latest_then_continue(pair_factory: Any, contract_kind: str) -> None:
    if contract_kind == "memory":
        pytest.skip("InMemorySaver has no prune")
    p = pair_factory(delta_builder())
    for turn in range(7):
        await p.both("invoke", {"log": [f"in{turn}"]}, cfg())
    before = await p._call(p.ref_graph, "get_state", cfg())
    if p.mode == "async":
        await p.target.aprune([THREAD], strategy="keep_latest")
    else:
        p.target.prune([THREAD], strategy="keep_latest")
    got = await p._call(p.graph, "get_state", cfg())
    assert norm_value(got.values) == norm_value(before.values), "state changed by prune(keep_latest)"
    assert got.next == before.next
    hist = await p._call(p.graph, "get_state_history", cfg())
    e_hist = await p._call(p.ref_graph, "get_state_history", cfg())
    assert 1 <= len(hist) < len(e_hist)
    # and the thread goes on identically
    await p.both("invoke", {"log": ["after-prune"]}, cfg())
    e = await p._call(p.ref_graph, "get_state", cfg())
    g = await p._call(p.graph, "get_state", cfg())
    assert norm_value(g.values) == norm_value(e.values)
    assert g.next == e.next


async def test_copy_thread_then_continue(pair_factory: Any, contract_kind: str) -> None:
    if contract_kind == "memory":
        pytest.skip("InMemorySaver has no copy_thread")
    p = pair_factory(delta_builder())
    for turn in range(5):
        await p.both("invoke", {"log": [f"in{turn}"]}, cfg())
    src_state = await p._call(p.graph, "get_state", cfg())
    src_hist = await p._call(p.graph, "get_state_history", cfg())
    dst = "copy:{dst} ü"
    if p.mode == "async":
        await p.target.acopy_thread(THREAD, dst)
    else:
        p.target.copy_thread(THREAD, dst)
    got = await p._call(p.graph, "get_state", cfg(dst))
    assert norm_value(got.values) == norm_value(src_state.values)
    got_hist = await p._call(p.graph, "get_state_history", cfg(dst))
    assert [norm_value(s.values) for s in got_hist] == [norm_value(s.values) for s in src_hist]
    # both threads continue independently
    out_src = await p._call(p.graph, "invoke", {"log": ["s"]}, cfg())
    out_dst = await p._call(p.graph, "invoke", {"log": ["s"]}, cfg(dst))
    assert norm_output(out_src) == norm_output(out_dst)
    await p._call(p.graph, "invoke", {"log": ["only-dst"]}, cfg(dst))
    s = await p._call(p.graph, "get_state", cfg())
    d = await p._call(p.graph, "get_state", cfg(dst))
    assert len(d.values["log"]) == len(s.values["log"]) + 6


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
async def test_durability_modes(pair_factory: Any, durability: str) -> None:
    """``durability="async"`` saves checkpoints concurrently with the next step."""
    b = StateGraph(FanState)
    b.add_node("worker", worker)
    b.add_node("collect", collect)
    b.add_conditional_edges(START, fan_out, ["worker"])
    b.add_edge("worker", "collect")
    b.add_edge("collect", END)
    p = pair_factory(b)
    for n in (4, 2, 5):
        await p.both("invoke", {"n": n, "results": []}, cfg(), durability=durability)
    await p.check(cfg())


async def test_failed_task_resumes_without_rerunning_siblings(pair_factory: Any) -> None:
    """One parallel task fails: ERROR write stored, the siblings' writes are kept as
    pending writes, and resuming re-runs the failed task (and at most a sibling whose
    writes were still in flight when the error landed)."""
    calls: dict[str, int] = {}
    fail_once = {"armed": True}
    done = threading.Condition()
    finished: set[int] = set()

    def flaky(state: FanState) -> dict:
        key = f"{id(calls)}:{state['n']}"
        calls[key] = calls.get(key, 0) + 1
        if state["n"] == 2 and fail_once["armed"]:
            # fail only once every sibling has finished: a sibling still running when the
            # error lands is cancelled and legitimately runs again on resume (a race of the
            # test, not of the saver; seen under load)
            with done:
                done.wait_for(lambda: len(finished) >= 3, timeout=10)
            raise ValueError("boom")
        with done:
            finished.add(state["n"])
            done.notify_all()
        return {"results": [f"ok{state['n']}"]}

    b = StateGraph(FanState)
    b.add_node("worker", flaky)
    b.add_node("collect", collect)
    b.add_conditional_edges(START, fan_out, ["worker"])
    b.add_edge("worker", "collect")
    b.add_edge("collect", END)
    p = pair_factory(b)
    for graph in (p.ref_graph, p.graph):
        fail_once["armed"] = True
        calls.clear()
        finished.clear()
        with pytest.raises(ValueError, match="boom"):
            await p._call(graph, "invoke", {"n": 4, "results": []}, cfg())
        state = await p._call(graph, "get_state", cfg())
        errors = [t for t in state.tasks if t.error]
        assert len(errors) == 1 and "boom" in repr(errors[0].error)
        first_calls = dict(calls)
        fail_once["armed"] = False
        await p._call(graph, "invoke", None, cfg())
        reran = {k: calls[k] - first_calls.get(k, 0) for k in calls}
        failed_key = next(k for k in calls if k.endswith(":2"))
        assert reran[failed_key] == 1, reran  # the failed task ran again, once
        # a sibling whose writes LangGraph had not saved yet when the error landed runs again
        # (seen with InMemorySaver too, under load); none runs more than once
        assert all(v in (0, 1) for v in reran.values()), reran
    await p.check(cfg())
    state = await p._call(p.graph, "get_state", cfg())
    assert state.values["results"][-1] == "collected:4"


async def test_multiple_interrupts_in_one_node(pair_factory: Any) -> None:
    """Two sequential interrupt() calls in one node: RESUME special writes accumulate."""

    def two_questions(state: AskState) -> dict:
        a = interrupt("first?")
        b2 = interrupt(f"second after {a}?")
        return {"answer": f"{a}+{b2}", "log": ["done"]}

    b = StateGraph(AskState)
    b.add_node("ask", two_questions)
    b.add_edge(START, "ask")
    b.add_edge("ask", END)
    p = pair_factory(b)
    await p.both("invoke", {"question": "q", "log": []}, cfg())
    await p.check(cfg())
    await p.both("invoke", Command(resume="one"), cfg())
    await p.check(cfg())
    state = await p._call(p.graph, "get_state", cfg())
    assert [i.value for i in state.interrupts] == ["second after one?"]
    await p.both("invoke", Command(resume="two"), cfg())
    await p.check(cfg())
    state = await p._call(p.graph, "get_state", cfg())
    assert state.values["answer"] == "one+two" and state.next == ()
