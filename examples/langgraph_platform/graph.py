"""A chat turn that asks a human before it answers.

    START -> chat -> approve -> END

``chat`` drafts a reply (an echo: no model, no API key); ``approve`` stops the run with
``interrupt()`` until a client resumes it with ``Command(resume={"approved": True})`` (or
``{"approved": False, "reply": "edited text"}``). ``config["configurable"]["delay_s"]`` makes
``chat`` sleep first, to have a run that is still busy (the test's rollback uses it).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    draft: str


async def chat(state: State, config: RunnableConfig) -> dict:
    delay = float(config.get("configurable", {}).get("delay_s", 0) or 0)
    if delay > 0:
        await asyncio.sleep(delay)
    last = state["messages"][-1].content if state.get("messages") else ""
    return {"draft": f"You said: {last}"}


def approve(state: State) -> dict:
    decision = interrupt({"question": "Send this reply?", "draft": state["draft"]})
    if isinstance(decision, dict) and not decision.get("approved", True):
        reply = decision.get("reply") or "(reply withheld by the reviewer)"
    else:
        reply = state["draft"]
    return {"messages": [AIMessage(reply)], "draft": ""}


builder = StateGraph(State)
builder.add_node("chat", chat)
builder.add_node("approve", approve)
builder.add_edge(START, "chat")
builder.add_edge("chat", "approve")
builder.add_edge("approve", END)

# No checkpointer here: the server compiles in its own (the one langgraph.json names).
graph = builder.compile()
