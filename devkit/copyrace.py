"""Saver operations for tests/scale/test_copy_races.py, runnable in this process or in a
spawned child (``serve``): every result is plain data (tuples of str / int / None), so a test can
compare what any saver reads with its reference model exactly.

A checkpoint holds one channel, ``messages``: a list of chat messages (a stream record once it
is 256 bytes or more), written as LangGraph writes it (a child of the checkpoint the writer
read, the list grown by one message). Messages are given as (kind, text, id) tuples.
"""

from __future__ import annotations

import traceback
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

Msg = tuple[str, str, str]


def client_for(target: tuple[str, Any]) -> Any:
    """A sync client: ("standalone", url) or ("cluster", [(host, port), ...])."""
    from devkit.servers import client_kwargs

    if target[0] == "cluster":
        from redis.cluster import ClusterNode, RedisCluster

        kw = client_kwargs(5, 5)
        return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in target[1]], **kw)
    import redis

    return redis.Redis.from_url(target[1], **client_kwargs(5, 5))


def to_msgs(msgs: list[Msg], plain: bool = False) -> list[Any]:
    if plain:  # a list of str: the same stream records, decoded ~50x faster than messages
        return ["\x1e".join(m) for m in msgs]
    return [(HumanMessage if k == "h" else AIMessage)(text, id=i) for k, text, i in msgs]


def from_msgs(value: Any) -> tuple[Msg, ...]:
    return tuple(
        tuple(m.split("\x1e")) if isinstance(m, str) else ("h" if isinstance(m, HumanMessage) else "a", m.content, m.id)
        for m in value
    )


def _cfg(thread: str, cid: str | None = None) -> dict:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if cid:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def view(t: Any) -> tuple:
    """(id, parent id, messages, step, run id, writes): one checkpoint as plain data."""
    if t is None:
        return None  # type: ignore[return-value]
    parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
    writes = tuple((task, ch, from_msgs(v) if isinstance(v, list) else v) for task, ch, v in t.pending_writes or [])
    return (
        t.config["configurable"]["checkpoint_id"],
        parent,
        from_msgs(t.checkpoint["channel_values"].get("messages", [])),
        t.metadata.get("step"),
        t.metadata.get("run_id"),
        writes,
    )


class Ops:
    """The operations of the race tests on one saver (its own cache)."""

    def __init__(self, saver: Any, plain: bool = False) -> None:
        self.saver, self.plain = saver, plain

    def read(self, thread: str) -> tuple[tuple | None, list[tuple]]:
        """The latest checkpoint and the whole history, newest first."""
        s = self.saver
        return view(s.get_tuple(_cfg(thread))), [view(t) for t in s.list(_cfg(thread))]

    def put(self, thread: str, cid: str, add: Msg, run_id: str, base: str | None, first: list[Msg]) -> tuple | None:
        """A child of ``base`` (None = the latest this saver reads; the thread's first checkpoint
        holds ``first``) whose messages are its parent's and ``add``; returns the parent as read."""
        s = self.saver
        parent = s.get_tuple(_cfg(thread, base))
        cp = empty_checkpoint()
        cp["id"] = cid
        prev = parent.checkpoint["channel_versions"].get("messages") if parent else None
        version = s.get_next_version(prev, None)
        cp["channel_versions"] = {"messages": version}
        msgs = (parent.checkpoint["channel_values"].get("messages", []) if parent else to_msgs(first, self.plain))
        msgs = msgs + to_msgs([add], self.plain)
        cp["channel_values"] = {"messages": msgs}
        conf = parent.config if parent else _cfg(thread)
        md = {"step": len(msgs), "run_id": run_id, "source": "loop"}
        s.put(conf, cp, md, {"messages": version})
        return view(parent)

    def put_writes(self, thread: str, cid: str, task: str, add: Msg) -> None:
        self.saver.put_writes(_cfg(thread, cid), [("messages", to_msgs([add], self.plain))], task)

    def copy(self, src: str, dst: str) -> str:
        from redis_saver import ThreadExistsError

        try:
            self.saver.copy_thread(src, dst)
        except ThreadExistsError:
            return "exists"
        return "ok"

    def delete(self, thread: str) -> None:
        self.saver.delete_thread(thread)

    def prune(self, threads: list[str], strategy: str) -> None:
        self.saver.prune(threads, strategy=strategy)

    def delete_runs(self, runs: list[str]) -> None:
        self.saver.delete_for_runs(runs)

    def rewrite(self, thread: str) -> int:
        return int(self.saver.rewrite_values(thread).values)


def serve(conn: Any, target: tuple[str, Any], prefix: str, kwargs: dict) -> None:
    """A child process's loop: (method, args) in, ("ok", result) or ("err", type, text) out; None stops."""
    from redis_saver import RedisSaver

    ops = Ops(RedisSaver(client_for(target), prefix=prefix, **kwargs))
    while True:
        msg = conn.recv()
        if msg is None:
            break
        name, args = msg
        try:
            conn.send(("ok", getattr(ops, name)(*args)))
        except Exception as exc:  # noqa: BLE001 (sent back to the test, which raises it)
            conn.send(("err", type(exc).__name__, f"{exc}\n{traceback.format_exc()}"))


def write_loop(target: tuple[str, Any], prefix: str, thread: str, stop_at: float, first: list[Msg], most: int) -> int:
    """Put to ``thread`` in a tight loop until ``stop_at`` (time.time()) or ``most`` steps: each
    step a put and a put_writes against it, as a LangGraph run makes them (values: lists of
    str); returns the number of steps."""
    import time

    from langgraph.checkpoint.base.id import uuid6

    from redis_saver import RedisSaver

    ops = Ops(RedisSaver(client_for(target), prefix=prefix), plain=True)
    n = 0
    while time.time() < stop_at and n < most:
        cid = str(uuid6())
        ops.put(thread, cid, ("h" if n % 2 else "a", f"step {n} " + "w" * 70, f"w{n}"), f"run{n % 3}", None, first)
        ops.put_writes(thread, cid, f"task{n}", ("a", f"write {n}", f"x{n}"))
        n += 1
    return n
