"""Shared helpers for the deployment tests (cluster, sentinel, TLS, ACL)."""

from __future__ import annotations

import contextlib
import io
import operator
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6


def new_prefix(tag: str = "dep") -> str:
    # colon and glob characters on purpose (no braces: KeySchema forbids them in a prefix)
    return f"{tag}:*?[x]{uuid.uuid4().hex[:10]}"


def glob_escape(s: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in s)


def delete_prefix(client: Any, prefix: str) -> int:
    """Delete every key under ``prefix`` (sync client; cluster clients scan every primary)."""
    keys = list(client.scan_iter(match=glob_escape(prefix + ":") + "*", count=1000))
    n = 0
    for k in keys:
        n += client.delete(k)
    return n


async def adelete_prefix(client: Any, prefix: str) -> int:
    keys = [k async for k in client.scan_iter(match=glob_escape(prefix + ":") + "*", count=1000)]
    n = 0
    for k in keys:
        n += await client.delete(k)
    return n


def wait_until(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # noqa: BLE001
            last = e
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what} (last error: {last!r})")


# --------------------------------------------------------------------------- checkpoints


def cfg(thread: str, ns: str = "", cid: str | None = None) -> dict:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if cid is not None:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def tcfg(thread: str) -> dict:
    """A config naming only the thread: ``list`` then covers every namespace."""
    return {"configurable": {"thread_id": thread}}


def _link(saver: Any, thread: str, ns: str, i: int, run_id: str | None) -> tuple[dict, dict, dict]:
    """The ``i``-th checkpoint of a chain: (checkpoint, metadata, its new versions)."""
    ck = empty_checkpoint()
    ck["id"] = str(uuid6(clock_seq=i))
    ck["channel_values"] = {"msg": f"{thread}/{ns}/{i}"}
    ck["channel_versions"] = {"msg": saver.get_next_version(None if i == 0 else f"{i:032}.0", None)}
    md: dict[str, Any] = {"source": "loop", "step": i, "parents": {}}
    if run_id is not None:
        md["run_id"] = run_id
    return ck, md, {"msg": ck["channel_versions"]["msg"]}


def put_chain(saver: Any, thread: str, n: int, ns: str = "", run_id: str | None = None) -> list[dict]:
    """``n`` checkpoints in a parent chain on one thread/namespace, each with one channel blob
    and a pending write; returns the configs ``put`` returned."""
    out: list[dict] = []
    parent = cfg(thread, ns)
    for i in range(n):
        parent = saver.put(parent, *_link(saver, thread, ns, i, run_id))
        saver.put_writes(parent, [("msg", f"w{i}")], task_id=f"task-{i}")
        out.append(parent)
    return out


async def aput_chain(saver: Any, thread: str, n: int, ns: str = "", run_id: str | None = None) -> list[dict]:
    """Async :func:`put_chain`."""
    out: list[dict] = []
    parent = cfg(thread, ns)
    for i in range(n):
        parent = await saver.aput(parent, *_link(saver, thread, ns, i, run_id))
        await saver.aput_writes(parent, [("msg", f"w{i}")], task_id=f"task-{i}")
        out.append(parent)
    return out


def summary(t: Any) -> tuple:
    """A comparable view of a CheckpointTuple (without the thread id)."""
    if t is None:
        return None  # type: ignore[return-value]
    c = t.config["configurable"]
    return (
        c["checkpoint_ns"],
        c["checkpoint_id"],
        t.checkpoint["channel_values"],
        {k: v for k, v in t.metadata.items() if k != "thread_id"},
        None if t.parent_config is None else t.parent_config["configurable"]["checkpoint_id"],
        sorted(t.pending_writes or []),
    )


# --------------------------------------------------------------------------- conformance


async def run_conformance(make: Callable[[], Awaitable[Any]], cleanup: Callable[[Any], Awaitable[None]]) -> str:
    """Run langgraph-checkpoint-conformance; every capability must be detected and pass."""
    from langgraph.checkpoint.conformance import validate
    from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
    from langgraph.checkpoint.conformance.initializer import RegisteredCheckpointer
    from langgraph.checkpoint.conformance.report import ProgressCallbacks

    async def factory() -> AsyncIterator[Any]:
        saver = await make()
        try:
            yield saver
        finally:
            await cleanup(saver)

    registered = RegisteredCheckpointer(name="redis_saver-deploy", factory=factory)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        report = await validate(registered, progress=ProgressCallbacks.verbose())
        report.print_report()
    text = out.getvalue()
    detected = {name for name, r in report.results.items() if r.detected}
    assert detected == {c.value for c in ALL_CAPABILITIES}, f"detected {sorted(detected)}\n{text}"
    failures = {n: r.failures for n, r in report.results.items() if r.detected and not r.passed}
    assert not failures, f"conformance failures: {failures}\n{text}"
    assert report.conformance_level() == "FULL", text
    assert sum(r.tests_passed for r in report.results.values()) > 50, text
    return text


# --------------------------------------------------------------------------- a real graph


class ChatState(TypedDict):
    messages: Annotated[list[str], operator.add]


def build_chat_graph(checkpointer: Any) -> Any:
    """bot -> sub(ask: interrupt for the user's answer -> echo) -> bot.

    The interrupt lives inside the subgraph, so checkpoints exist in a non-empty namespace.
    """
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    def ask(state: ChatState) -> dict:
        answer = interrupt({"question": state["messages"][-1]})
        return {"messages": [f"user:{answer}"]}

    def echo(state: ChatState) -> dict:
        return {"messages": [f"sub-echo:{len(state['messages'])}"]}

    sub = StateGraph(ChatState)
    sub.add_node("ask", ask)
    sub.add_node("echo", echo)
    sub.add_edge(START, "ask")
    sub.add_edge("ask", "echo")
    sub.add_edge("echo", END)
    subgraph = sub.compile()

    def bot(state: ChatState) -> dict:
        return {"messages": [f"bot:{state['messages'][-1]}"]}

    g = StateGraph(ChatState)
    g.add_node("bot", bot)
    g.add_node("sub", subgraph)
    g.add_node("final", bot)
    g.add_edge(START, "bot")
    g.add_edge("bot", "sub")
    g.add_edge("sub", "final")
    g.add_edge("final", END)
    return g.compile(checkpointer=checkpointer)


def _result(r: dict) -> dict:
    """An invoke() result without interrupt ids (they hash task ids, which hash checkpoint ids)."""
    return {k: ([i.value for i in v] if k == "__interrupt__" else v) for k, v in r.items()}


def _state_view(s: Any) -> tuple:
    return (
        s.values,
        s.next,
        [i.value for t in s.tasks for i in t.interrupts],
        s.metadata.get("source") if s.metadata else None,
        s.metadata.get("step") if s.metadata else None,
    )


def chat_transcript(graph: Any, thread: str) -> list:
    """Two turns of chat, each interrupted inside the subgraph and resumed; returns what a user sees."""
    from langgraph.types import Command

    c = cfg(thread)
    seen: list[Any] = []
    for turn, answer in (("hello", "yes"), ("again", "no")):
        r = graph.invoke({"messages": [turn]}, c)
        seen.append(_result(r))
        st = graph.get_state(c, subgraphs=True)
        seen.append(_state_view(st))
        seen.append([_state_view(t.state) for t in st.tasks if t.state is not None])
        r = graph.invoke(Command(resume=answer), c)
        seen.append(_result(r))
        seen.append(_state_view(graph.get_state(c)))
    hist = list(graph.get_state_history(c))
    seen.append([_state_view(h) for h in hist])
    # time travel: replay from the checkpoint before the second turn's input, with a fork
    fork_from = hist[len(hist) // 2].config
    forked = graph.update_state(fork_from, {"messages": ["forked"]})
    seen.append(_state_view(graph.get_state(forked)))
    return seen


async def achat_transcript(graph: Any, thread: str) -> list:
    from langgraph.types import Command

    c = cfg(thread)
    seen: list[Any] = []
    for turn, answer in (("hello", "yes"), ("again", "no")):
        r = await graph.ainvoke({"messages": [turn]}, c)
        seen.append(_result(r))
        st = await graph.aget_state(c, subgraphs=True)
        seen.append(_state_view(st))
        seen.append([_state_view(t.state) for t in st.tasks if t.state is not None])
        r = await graph.ainvoke(Command(resume=answer), c)
        seen.append(_result(r))
        seen.append(_state_view(await graph.aget_state(c)))
    hist = [h async for h in graph.aget_state_history(c)]
    seen.append([_state_view(h) for h in hist])
    fork_from = hist[len(hist) // 2].config
    forked = await graph.aupdate_state(fork_from, {"messages": ["forked"]})
    seen.append(_state_view(await graph.aget_state(forked)))
    return seen


def memory_transcript() -> list:
    from langgraph.checkpoint.memory import InMemorySaver

    return chat_transcript(build_chat_graph(InMemorySaver()), "chat-thread")
