"""Deterministic graphs for the lifecycle tests: a DeltaChannel list, add_messages, a subgraph.

root: START -> a -> [ask] -> sub -> END      (state: items (DeltaChannel), messages)
sub:  START -> s1 -> [ask] -> s2 -> END      (own namespace "sub:<task id>"; outputs messages only)

Every node derives its output from the state it sees, and every message has a deterministic
id, so two runs of the same inputs (any saver) give equal states. Root ``items`` is written by
the input on even turns only and by ``a`` every turn, so the DeltaChannel snapshot cadence
(every 3 updates) drifts against the turn boundaries and the latest checkpoint is often not a
snapshot.
"""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from typing_extensions import TypedDict

SNAPSHOT_FREQUENCY = 3


def concat(state: list, writes: list) -> list:
    """Batching-invariant DeltaChannel reducer: concatenate every write (each a list)."""
    out = list(state)
    for w in writes:
        out.extend(w if isinstance(w, list) else [w])
    return out


class State(TypedDict, total=False):
    items: Annotated[list, DeltaChannel(concat, snapshot_frequency=SNAPSHOT_FREQUENCY)]
    messages: Annotated[list, add_messages]


class SubOut(TypedDict, total=False):
    messages: Annotated[list, add_messages]


def _a(state: State) -> dict:
    n = len(state.get("items", []))
    m = len(state.get("messages", []))
    return {"items": [f"a{n}"], "messages": [AIMessage(f"a saw {n}/{m}", id=f"a-{n}-{m}")]}


def _s1(state: State) -> dict:
    n = len(state.get("items", []))
    return {"items": [f"s1:{n}"], "messages": [AIMessage(f"s1 saw {n}", id=f"s1-{n}")]}


def _s2(state: State) -> dict:
    n = len(state.get("items", []))
    return {"messages": [AIMessage(f"s2 saw {n}", id=f"s2-{n}")]}


def _ask(state: State) -> dict:
    n = len(state.get("items", []))
    answer = interrupt(f"question {n}")
    return {"items": [f"ans:{answer}"], "messages": [AIMessage(f"answer {answer}", id=f"ans-{n}")]}


def build(checkpointer: Any, *, interrupt_in: str | None = None):
    """``interrupt_in`` = ``"root"`` / ``"sub"`` adds an ``interrupt()`` node there."""
    sb = StateGraph(State, output_schema=SubOut)
    sb.add_node("s1", _s1)
    sb.add_node("s2", _s2)
    sb.add_edge(START, "s1")
    if interrupt_in == "sub":
        sb.add_node("ask", _ask)
        sb.add_edge("s1", "ask")
        sb.add_edge("ask", "s2")
    else:
        sb.add_edge("s1", "s2")
    sb.add_edge("s2", END)
    sub = sb.compile()

    rb = StateGraph(State)
    rb.add_node("a", _a)
    rb.add_node("sub", sub)
    rb.add_edge(START, "a")
    if interrupt_in == "root":
        rb.add_node("ask", _ask)
        rb.add_edge("a", "ask")
        rb.add_edge("ask", "sub")
    else:
        rb.add_edge("a", "sub")
    rb.add_edge("sub", END)
    return rb.compile(checkpointer=checkpointer)


def turn_input(t: int, tag: str = "") -> dict:
    """Input of turn ``t``: a message every turn, an ``items`` write on even turns only."""
    out: dict = {"messages": [HumanMessage(f"hi {tag}{t}", id=f"h{tag}-{t}")]}
    if t % 2 == 0:
        out["items"] = [f"in{tag}{t}"]
    return out
