"""Real graphs' threads for the integrity tests, and what the tests do to the stored keys: a
snapshot and its restore (DUMP / RESTORE of every key of a prefix), the reads a worker makes,
and the classification of what a read returned."""

from __future__ import annotations

import asyncio
import inspect
import operator
from typing import Annotated, Any, TypedDict

import redis
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

import redis_saver
from tests.integrity.canary import Canary

# the canary is an allowed type, so a reader that deserializes a planted payload calls it
SERDE = JsonPlusSerializer(allowed_msgpack_modules=[("tests.integrity.canary", "Canary")])


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]
    notes: Annotated[list[str], operator.add]


def build(checkpointer: Any) -> Any:
    """A graph with a subgraph (a second namespace), two tasks in one step, one of which asks
    (an interrupt): the other's writes stay pending beside the interrupt."""
    sub = StateGraph(State)
    sub.add_node("inner", lambda s: {"notes": ["inner " * 40]})
    sub.add_edge(START, "inner")
    sub.add_edge("inner", END)

    def talk(s: State) -> dict[str, Any]:
        return {"messages": [AIMessage("reply " * 60 + str(len(s["messages"])))]}

    def ask(s: State) -> dict[str, Any]:
        answer = interrupt("approve?")
        return {"notes": [f"answer {answer}"]}

    g = StateGraph(State)
    g.add_node("talk", talk)
    g.add_node("sub", sub.compile())
    g.add_node("ask", ask)
    g.add_edge(START, "talk")
    g.add_edge("talk", "sub")
    g.add_edge("talk", "ask")
    g.add_edge("sub", END)
    g.add_edge("ask", END)
    return g.compile(checkpointer=checkpointer)


class Sync:
    """An async class (``AsyncRedisSaver``, ``AsyncRedisStore``, ``AsyncRedisCache``) on a client
    of its own, called from sync code on an event loop of its own: the black-box tests change the
    stored data and read it back in sync code, so each of their matrices runs for the async
    classes too. ``x.get_tuple(...)`` runs ``aget_tuple``; an async iterator comes back as a list."""

    def __init__(self, cls: Any, url: str, **kwargs: Any) -> None:
        import redis.asyncio as aredis

        self.loop = asyncio.new_event_loop()
        self.client = aredis.Redis.from_url(url)
        self.inner = cls(self.client, **kwargs)

    def run(self, aw: Any) -> Any:
        if not inspect.isawaitable(aw) and not inspect.isasyncgen(aw):
            return aw
        if inspect.isasyncgen(aw):
            gen = aw

            async def collect() -> list[Any]:
                return [x async for x in gen]

            aw = collect()
        return self.loop.run_until_complete(aw)

    def __getattr__(self, name: str) -> Any:
        f = getattr(self.inner, "a" + name, None) or getattr(self.inner, name)
        return lambda *a, **k: self.run(f(*a, **k))

    def close(self) -> None:
        self.run(self.client.aclose())
        self.loop.close()


def close_sync(*objs: Any) -> None:
    """Close the ``Sync`` objects among ``objs`` (their clients and loops)."""
    for o in objs:
        if isinstance(o, Sync):
            o.close()


def run_thread(saver: Any, thread: str, turns: int = 2) -> None:
    """``turns`` turns, each interrupted then resumed, then one more left interrupted (a ``Sync``
    saver: the graph's async calls)."""
    app = build(saver.inner if isinstance(saver, Sync) else saver)
    invoke = (lambda x, c: saver.run(app.ainvoke(x, c))) if isinstance(saver, Sync) else app.invoke
    cfg = {"configurable": {"thread_id": thread}}
    for i in range(turns):
        invoke({"messages": [HumanMessage(f"question {i} " * 30)], "notes": []}, cfg)
        invoke(Command(resume=f"yes {i}"), cfg)
    invoke({"messages": [HumanMessage("last question " * 30)], "notes": []}, cfg)


def keys_of(r: Any, prefix: str) -> list[bytes]:
    return [k for k in r.scan_iter(match=prefix + ":*", count=1000)]


def snapshot(r: Any, prefix: str) -> dict[bytes, bytes]:
    return {k: r.dump(k) for k in keys_of(r, prefix)}


def restore(r: Any, prefix: str, snap: dict[bytes, bytes]) -> None:
    p = r.pipeline(transaction=False)
    for k in keys_of(r, prefix):
        p.delete(k)
    for k, v in snap.items():
        p.restore(k, 0, v, replace=True)
    p.execute()


def _norm(t: Any) -> Any:
    if t is None:
        return None
    return repr((t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes))


def reads(saver: Any, thread: str, places: list[tuple[str, str]]) -> list[tuple[str, Any]]:
    """The reads of one thread a worker makes: the whole list, each checkpoint, each namespace's
    latest; each read's result normalized, or the error it raised."""
    out: list[tuple[str, Any]] = []

    def one(name: str, f: Any) -> None:
        try:
            out.append((name, f()))
        except redis_saver.IntegrityError:
            out.append((name, "IntegrityError"))
        except redis.exceptions.ResponseError as exc:
            # a script met a record it cannot parse (cmsgpack: "Missing bytes in input")
            out.append((name, "malformed"))
            assert "input" in str(exc), exc
        except (redis_saver.MalformedReplyError, ValueError) as exc:
            # a record that no longer parses, in the client or in the script (RS_BADARG)
            out.append((name, "malformed"))
            assert "malformed" in str(exc) or "corrupt" in str(exc) or "stream" in str(exc), exc

    one("list", lambda: [_norm(t) for t in saver.list({"configurable": {"thread_id": thread}})])
    for ns, cid in places:
        conf = {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}
        one(f"get {ns} {cid}", lambda c=conf: _norm(saver.get_tuple({"configurable": c})))
    for ns in sorted({ns for ns, _ in places}):
        conf = {"thread_id": thread, "checkpoint_ns": ns}
        one(f"latest {ns}", lambda c=conf: _norm(saver.get_tuple({"configurable": c})))
    return out


def classify(base: list[tuple[str, Any]], got: list[tuple[str, Any]]) -> dict[str, int]:
    """How many reads returned what they did before, raised IntegrityError, raised
    MalformedReplyError, found the thread absent (the read forgot a thread it found damaged:
    what a deletion does), or returned changed state."""
    counts = dict.fromkeys(["unchanged", "IntegrityError", "malformed", "absent", "changed"], 0)
    for (_name, b), (_, g) in zip(base, got, strict=True):
        if g == b:
            counts["unchanged"] += 1
        elif g in ("IntegrityError", "malformed"):
            counts[g] += 1
        elif g is None or g == []:
            counts["absent"] += 1
        else:
            counts["changed"] += 1
    return counts


__all__ = ["SERDE", "Canary", "Sync", "build", "classify", "close_sync", "reads", "restore", "run_thread", "snapshot"]
