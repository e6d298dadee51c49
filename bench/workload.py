"""The recorded workload: a LangGraph chat graph run against a recording wrapper around InMemorySaver.

Every saver later gets exactly the calls LangGraph made (same configs, checkpoints, metadata, new_versions,
writes, task ids and paths), retargeted to a fresh thread id.
"""

from __future__ import annotations

import copy
import operator
import random
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import _messages_delta_reducer, add_messages

WORDS = ("checkpoint redis latency graph channel replay thread message saver state token cluster "
         "script write read version parent delta snapshot budget").split()


def _text(seed: int, n_chars: int) -> str:
    out, i = [], seed
    while sum(len(w) + 1 for w in out) < n_chars:
        out.append(WORDS[(i * 7 + len(out) * 3) % len(WORDS)])
        i += 1
    return " ".join(out)[:n_chars]


class ChatState(TypedDict):
    messages: Annotated[list, add_messages]
    turn: int
    summary: str
    tokens: Annotated[int, operator.add]


class DeltaChatState(TypedDict):
    messages: Annotated[list, DeltaChannel(_messages_delta_reducer)]
    turn: int
    summary: str
    tokens: Annotated[int, operator.add]


def _assistant(state: dict) -> dict:
    n = len(state["messages"])
    reply = AIMessage(content=_text(n, 1600), id=f"ai-{n}")
    return {"messages": [reply], "tokens": 1600 // 4}  # 2 writes


def bookkeeping(state: dict) -> dict:
    """The chat graphs' second node: a turn counter and a summary line."""
    t = state.get("turn", 0) + 1
    return {"turn": t, "summary": f"turn {t}: {len(state['messages'])} messages"}  # 2 writes


def build_chat_graph(checkpointer, delta: bool = False):
    state = DeltaChatState if delta else ChatState
    g = StateGraph(state)
    g.add_node("assistant", _assistant)
    g.add_node("bookkeeping", bookkeeping)
    g.add_edge(START, "assistant")
    g.add_edge("assistant", "bookkeeping")
    g.add_edge("bookkeeping", END)
    return g.compile(checkpointer=checkpointer)


def user_input(turn: int) -> dict:
    return {"messages": [HumanMessage(content=_text(turn + 1000, 300), id=f"user-{turn}")]}


@dataclass
class Call:
    op: str  # put | put_writes | get_tuple | list | get_delta_channel_history
    args: tuple
    kwargs: dict


class RecordingSaver(InMemorySaver):
    """InMemorySaver that records every call LangGraph makes, with deep-copied exact arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Call] = []

    def _rec(self, op, *args, **kwargs):
        self.calls.append(Call(op, copy.deepcopy(args), copy.deepcopy(kwargs)))

    def put(self, config, checkpoint, metadata, new_versions):
        self._rec("put", config, checkpoint, metadata, new_versions)
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config, writes, task_id, task_path=""):
        self._rec("put_writes", config, writes, task_id, task_path)
        return super().put_writes(config, writes, task_id, task_path)

    def get_tuple(self, config):
        self._rec("get_tuple", config)
        return super().get_tuple(config)

    def list(self, config, *, filter=None, before=None, limit=None):
        self._rec("list", config, filter=filter, before=before, limit=limit)
        return super().list(config, filter=filter, before=before, limit=limit)

    def get_delta_channel_history(self, *, config, channels):
        self._rec("get_delta_channel_history", config=config, channels=list(channels))
        return super().get_delta_channel_history(config=config, channels=channels)


@dataclass
class Workload:
    calls: list[Call]
    thread_id: str
    turns: int
    message_bytes: int
    n_puts: int = 0
    n_writes_calls: int = 0
    put_ids: list = field(default_factory=list)


def capture(turns: int, delta: bool = False, thread_id: str = "capture") -> Workload:
    rec = RecordingSaver()
    graph = build_chat_graph(rec, delta=delta)
    cfg = {"configurable": {"thread_id": thread_id}}
    for t in range(turns):
        graph.invoke(user_input(t), cfg)
    msgs = graph.get_state(cfg).values["messages"]
    size = sum(len(m.content) for m in msgs)
    calls = [c for c in rec.calls]
    w = Workload(calls, thread_id, turns, size)
    w.n_puts = sum(c.op == "put" for c in calls)
    w.n_writes_calls = sum(c.op == "put_writes" for c in calls)
    w.put_ids = [c.args[1]["id"] for c in calls if c.op == "put"]
    return w


def retarget(obj: Any, thread_id: str) -> Any:
    """Deep copy with every RunnableConfig's configurable.thread_id replaced."""
    if isinstance(obj, dict):
        out = {k: retarget(v, thread_id) for k, v in obj.items()}
        if "configurable" in out and isinstance(out["configurable"], dict) and "thread_id" in out["configurable"]:
            out["configurable"] = {**out["configurable"], "thread_id": thread_id}
        return out
    if isinstance(obj, (list, tuple)):
        t = [retarget(v, thread_id) for v in obj]
        return type(obj)(t) if isinstance(obj, tuple) else t
    return copy.deepcopy(obj)


def call_for_thread(call: Call, thread_id: str) -> Call:
    """Only configs are retargeted; checkpoints/metadata/writes are passed as recorded (deep-copied)."""
    if call.op == "put":
        cfg, cp, md, nv = call.args
        return Call("put", (retarget(cfg, thread_id), copy.deepcopy(cp), copy.deepcopy(md), dict(nv)), {})
    if call.op == "put_writes":
        cfg, writes, task_id, task_path = call.args
        return Call("put_writes", (retarget(cfg, thread_id), copy.deepcopy(writes), task_id, task_path), {})
    return Call(call.op, retarget(call.args, thread_id), retarget(call.kwargs, thread_id))


def is_checkpointer(x) -> bool:
    return isinstance(x, BaseCheckpointSaver)


# A rotated order keeps every saver's predecessor the same on every call, and that biased whole
# rows: the entry right after `minimal floor (async)` ran ~15% slower than its twin (put 677 vs
# 587 µs, RedisSaver against the same saver with telemetry off), and swapping the two entries
# moved the gap with the position (786 vs 688 µs, the other way round), in `bench release
# --quick` runs of 2026-12-01.
_ORDER = random.Random(20261201)


def shuffled(xs):
    """xs in a random order (see _ORDER)."""
    out = list(xs)
    _ORDER.shuffle(out)
    return out


def fill_template(calls):
    """A small real put (turn 0, after the assistant step) and a real 2-write put_writes."""
    puts = [c for c in calls if c.op == "put"]
    pw = next(c for c in calls if c.op == "put_writes" and len(c.args[1]) == 2)
    return puts[2], pw


def make_ids(n):
    from langgraph.checkpoint.base.id import uuid6

    return sorted(str(uuid6(clock_seq=i)) for i in range(n))


def fill_args(tpl, thread, ids, i):
    """The put of ids[i] in a parent chain of the template checkpoint (the scaling fill)."""
    _, cp0, md0, nv = tpl.args
    cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": "",
                            **({"checkpoint_id": ids[i - 1]} if i else {})}}
    return cfg, {**cp0, "id": ids[i]}, {**md0, "step": i}, nv
