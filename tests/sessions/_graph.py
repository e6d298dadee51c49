"""The approval graph of the latest-only tests: messages (add_messages, trimmed to a bounded window)
+ a human-approval step that calls ``interrupt()``; optionally the approval runs in a subgraph."""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

WINDOW = 6  # messages kept in state: the state is bounded, so storage must be too


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: int
    approved: int


def agent(state: State) -> dict:
    n = state.get("turns", 0) + 1
    msgs = state["messages"]
    drop = [RemoveMessage(id=m.id) for m in msgs[: max(0, len(msgs) + 2 - WINDOW)]]
    return {"messages": [*drop, AIMessage(content=f"proposal {n}", id=f"ai-{n}")], "turns": n}


def approve(state: State) -> dict:
    n = state["turns"]
    answer = interrupt({"question": f"approve proposal {n}?", "turn": n})
    ok = answer == f"yes-{n}"
    return {
        "messages": [AIMessage(content=f"{'approved' if ok else 'rejected'} {n}: {answer}", id=f"ap-{n}")],
        "approved": state.get("approved", 0) + int(ok),
    }


def build(checkpointer: Any, subgraph: bool = False):
    g = StateGraph(State)
    g.add_node("agent", agent)
    if subgraph:
        sub = StateGraph(State)
        sub.add_node("check", lambda s: {"turns": s["turns"]})
        sub.add_node("approve", approve)
        sub.add_edge(START, "check")
        sub.add_edge("check", "approve")
        sub.add_edge("approve", END)
        g.add_node("review", sub.compile())
    else:
        g.add_node("review", approve)
    g.add_edge(START, "agent")
    g.add_edge("agent", "review")
    g.add_edge("review", END)
    return g.compile(checkpointer=checkpointer)


def turn_inputs(i: int) -> tuple[dict, Command]:
    """Turn ``i`` (1-based): the human message, then the resume answer (every 7th is a 'no')."""
    answer = f"no-{i}" if i % 7 == 0 else f"yes-{i}"
    return {"messages": [HumanMessage(content=f"turn {i}", id=f"h-{i}")]}, Command(resume=answer)


def run_turns(graph: Any, config: dict, start: int, stop: int) -> None:
    for i in range(start, stop + 1):
        first, resume = turn_inputs(i)
        out = graph.invoke(first, config)
        assert out["__interrupt__"][0].value == {"question": f"approve proposal {i}?", "turn": i}, out
        out = graph.invoke(resume, config)
        assert "__interrupt__" not in out, out


async def arun_turns(graph: Any, config: dict, start: int, stop: int) -> None:
    for i in range(start, stop + 1):
        first, resume = turn_inputs(i)
        out = await graph.ainvoke(first, config)
        assert out["__interrupt__"][0].value == {"question": f"approve proposal {i}?", "turn": i}, out
        out = await graph.ainvoke(resume, config)
        assert "__interrupt__" not in out, out
