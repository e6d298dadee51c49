"""A fixed thread history applied to any thread, and a thread's state compared key by key
(tests of calls that move or stop: slots moving, what an interrupted call left)."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from redis_saver.keys import enc
from tests.deploy.helpers import cfg, summary, tcfg

NAMES = ("meta", "cp", "cp_ns", "cp_id", "blob", "wr", "wr_ord", "runs", "chain")


# --------------------------------------------------------------------------- histories


def _checkpoint(i: int, versions: dict[str, str], values: dict[str, Any]) -> dict[str, Any]:
    ck = empty_checkpoint()
    ck["id"] = str(uuid6(clock_seq=i))
    ck["ts"] = "2026-01-01T00:00:00+00:00"
    ck["channel_values"] = dict(values)
    ck["channel_versions"] = dict(versions)
    return ck


class History:
    """A fixed list of puts and writes (the same bytes for every thread it is applied to):
    a root namespace of 4 checkpoints (the first 3 in run ``r1``, the last in none: a prune
    drops every run link), a subgraph namespace of 2, pending writes on each and an error write
    on the latest."""

    def __init__(self) -> None:
        self.ops: list[tuple[Any, ...]] = []
        self.latest: dict[str, str] = {}
        self._n = 0
        msgs: list[str] = []
        for i in range(4):
            msgs = [*msgs, f"m{i}"]
            self._put("", {"messages": list(msgs), "step": i}, "r1" if i < 3 else None)
            self._writes("", [("messages", f"w{i}")], f"task-{i}")
        for i in range(2):
            self._put("sub", {"inner": i}, None)
            self._writes("sub", [("inner", i + 10)], f"sub-{i}")
        self._writes("", [("__error__", "boom")], "task-err")

    def _put(self, ns: str, values: dict[str, Any], run: str | None) -> None:
        self._n += 1
        versions = {ch: f"{self._n:02d}.v{ch}" for ch in values}
        ck = _checkpoint(self._n, versions, values)
        md: dict[str, Any] = {"source": "loop", "step": self._n, "parents": {"": self.latest[""]} if ns else {}}
        if run is not None:
            md["run_id"] = run
        self.ops.append(("put", ns, self.latest.get(ns), ck, md, dict(versions)))
        self.latest[ns] = ck["id"]

    def _writes(self, ns: str, writes: list[tuple[str, Any]], task: str) -> None:
        self.ops.append(("writes", ns, self.latest[ns], writes, task))

        ck = _checkpoint(99, {"messages": "99.vnext"}, {"messages": ["next"]})
        md = {"source": "loop", "step": 99, "parents": {}}
        self.next_put = ("put", "", self.latest[""], ck, md, {"messages": "99.vnext"})  # not applied


def apply(saver: Any, tid: str, op: tuple[Any, ...]) -> Any:
    if op[0] == "put":
        _, ns, parent, ck, md, new = op
        return saver.put(cfg(tid, ns, parent), ck, md, new)
    _, ns, cid, writes, task = op
    return saver.put_writes(cfg(tid, ns, cid), writes, task_id=task)


# --------------------------------------------------------------------------- comparison


def thread_state(rc: Any, saver: Any, tid: str, exact_blobs: bool, ttl: bool) -> dict[str, Any]:
    """The thread's keys with its id taken out, its index entries and what it reads back."""
    keys = saver.keys.thread_keys(tid)
    te = enc(tid)
    out: dict[str, Any] = {}
    for name, k in zip(NAMES, keys[:9], strict=True):
        kind = rc.type(k)
        if kind == b"hash":
            v: Any = rc.hgetall(k)
        elif kind == b"zset":
            v = rc.zrange(k, 0, -1, withscores=True)
        else:
            v = kind
        out[name] = v
    if isinstance(out["meta"], dict):
        out["meta"].pop(b"tid", None)
        out["meta"].pop(b"xk", None)  # a copy's random token
        if ttl:
            out["meta"].pop(b"ix", None)
    if not exact_blobs and isinstance(out["blob"], dict):
        b = out["blob"]
        out["blob"] = (len(b), sorted(f for f in b if b"\x00" not in f.split(b"\x00", 2)[-1][:1]))
    out["ixt"] = rc.zscore(keys[9], tid) is not None
    out["ixr"] = sorted(m.replace(te, b"<T>") for m in rc.zrange(keys[10], 0, -1) if te in m)
    out["reads"] = [summary(x) for x in saver.list(tcfg(tid))]
    return out
