"""Shared by the eviction tests (test_eviction*.py): configs, a tuple normalized for comparison, and a
writer that drives the saver API as a LangGraph run does, on several savers at once."""

from __future__ import annotations

import random
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint


def cfg(thread: str, ns: str = "", cid: str | None = None) -> dict:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if cid is not None:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def norm(t: Any) -> Any:
    if t is None:
        return None
    key = lambda c: c and tuple(c["configurable"].get(k) for k in ("thread_id", "checkpoint_ns", "checkpoint_id"))  # noqa: E731
    return (key(t.config), t.checkpoint, t.metadata, key(t.parent_config), [tuple(w) for w in t.pending_writes or []])


class Writer:
    """Drives the saver API as a LangGraph run does (checkpoints whose changed channels get new
    versions, writes of tasks against them) on several savers at once, with the same values."""

    def __init__(self, savers: list[Any], seed: int = 0) -> None:
        self.savers = savers
        self.rnd = random.Random(seed)
        self.state: dict[str, dict[str, Any]] = {}

    def text(self, n: int) -> str:
        words = ["checkpoint", "redis", "graph", "node", "edge", "state", "value", "tool", "call", "reply"]
        return " ".join(self.rnd.choice(words) for _ in range(n // 6))

    def step(self, thread: str, ns: str = "") -> str:
        st = self.state.setdefault(thread + "|" + ns, {"cfg": cfg(thread, ns), "cp": None, "step": -1})
        prev = st["cp"]
        cp = empty_checkpoint() if prev is None else {**prev, "channel_values": dict(prev["channel_values"])}
        st["step"] += 1
        step = st["step"]
        cp["id"] = f"1ef{step:05d}-{self.rnd.randrange(16**8):08x}"
        values = cp["channel_values"]
        versions = dict(cp.get("channel_versions") or {})
        changed = ["messages"]
        reply = {"role": "ai", "content": self.text(self.rnd.randrange(300, 1500))}
        values["messages"] = [*values.get("messages", []), reply]
        if step % 3 == 0:
            values["summary"] = self.text(400)
            changed.append("summary")
        if step == 0:
            values["user"] = {"name": thread, "tier": "gold"}
            changed.append("user")
        new_versions = {}
        for ch in changed:
            versions[ch] = self.savers[0].get_next_version(versions.get(ch), None)
            new_versions[ch] = versions[ch]
        cp["channel_versions"] = versions
        md = {"source": "loop", "step": step, "run_id": f"run-{thread}-{step // 4}", "parents": {}}
        for s in self.savers:
            out = s.put(st["cfg"], cp, md, new_versions)
        st["cfg"], st["cp"] = out, cp
        if step % 2 == 0:  # pending writes of two tasks against the new checkpoint
            for task in ("agent", "tools"):
                writes = [("messages", {"role": "tool", "content": self.text(200)}), ("route", task)]
                for s in self.savers:
                    s.put_writes(out, writes, f"{task}-{step}", f"~__pregel_pull, {task}")
        return out["configurable"]["checkpoint_id"]

