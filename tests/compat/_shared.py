"""What the upgrade test runs on both sides: the same graph, and every checkpoint of a thread
as a saver reads it (imported by the test and, on its own PYTHONPATH, by the old release's
process). Nothing here imports redis_saver."""

from __future__ import annotations

import base64
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt

BIG = "b" * 500  # a metadata value whose filter JSON the old release stored in full


def chat(state: MessagesState) -> dict:
    last = state["messages"][-1].content
    return {"messages": [AIMessage(content="echo: " + last)]}


def approve(state: MessagesState) -> dict:
    if "order" in state["messages"][-2].content:
        answer = interrupt({"question": "approve the order?"})
        return {"messages": [AIMessage(content="approved: " + str(answer))]}
    return {}


def build(saver: Any) -> Any:
    g = StateGraph(MessagesState)
    g.add_node("chat", chat)
    g.add_node("approve", approve)
    g.add_edge(START, "chat")
    g.add_edge("chat", "approve")
    g.add_edge("approve", END)
    return g.compile(checkpointer=saver)


def dump_threads(saver: Any, threads: list[str]) -> dict:
    """Every checkpoint of each thread as the saver reads it, serde bytes in base64."""
    serde = JsonPlusSerializer()

    def enc(v: Any) -> list[str]:
        t, b = serde.dumps_typed(v)
        return [t, base64.b64encode(b).decode()]

    out = {}
    for t in threads:
        out[t] = [
            {
                "config": tup.config,
                "parent": tup.parent_config,
                "checkpoint": enc(tup.checkpoint),
                "metadata": enc(tup.metadata),
                "writes": [[w[0], w[1], enc(w[2])] for w in tup.pending_writes or []],
            }
            for tup in saver.list({"configurable": {"thread_id": t}})
        ]
    return out
