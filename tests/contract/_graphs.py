"""Shared by the graph tests (test_graphs*.py): the same graph compiled with InMemorySaver and with the
saver under test (``Pair``, made by the ``pair_factory`` fixture of conftest.py), and the normalization
that makes their outputs, ``get_state`` and ``get_state_history`` comparable (ids and timestamps left out)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.graph import StateGraph

THREAD = "chat:{1} *?[x] ü"


# --------------------------------------------------------------------------- normalization
_TASK_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def norm_ns(ns: str) -> str:
    # "node:<task uuid>|child:<task uuid>" -> "node|child" (task ids derive from checkpoint ids)
    return "|".join(part.split(":")[0] for part in ns.split("|")) if ns else ""


def norm_value(v: Any) -> Any:
    if isinstance(v, BaseMessage):
        return {"type": v.type, "content": v.content, "name": v.name}
    if isinstance(v, dict):
        return {k: norm_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(norm_value(x) for x in v)
    if hasattr(v, "value") and type(v).__name__ == "Interrupt":
        return ("Interrupt", norm_value(v.value))
    return v


def norm_output(out: Any) -> Any:
    """invoke() output; ``__interrupt__`` lists parallel tasks' interrupts in completion
    order (thread-pool timing), so it is compared as a multiset."""
    out = norm_value(out)
    if isinstance(out, dict) and "__interrupt__" in out:
        out = {**out, "__interrupt__": sorted(out["__interrupt__"], key=repr)}
    return out


def norm_metadata(md: dict | None) -> dict:
    out = {}
    for k, v in (md or {}).items():
        if k in ("run_id", "thread_id", "checkpoint_id", "checkpoint_ns"):
            continue
        if k == "parents":
            out[k] = sorted(norm_ns(x) for x in v)
        else:
            out[k] = norm_value(v)
    return out


def norm_config(cfg: dict | None) -> Any:
    if not cfg:
        return None
    c = cfg.get("configurable", {})
    return {"thread_id": c.get("thread_id"), "ns": norm_ns(c.get("checkpoint_ns", ""))}


def norm_snapshot(s: Any) -> Any:
    if s is None:
        return None
    return {
        "values": norm_value(s.values),
        "next": tuple(s.next),
        "metadata": norm_metadata(s.metadata),
        "config": norm_config(s.config),
        "has_parent": s.parent_config is not None,
        "interrupts": [norm_value(i) for i in s.interrupts],
        "tasks": [
            {
                "name": t.name,
                "path": tuple(str(p) if _TASK_ID.match(str(p)) is None else "<id>" for p in t.path),
                "error": repr(t.error) if t.error else None,
                "interrupts": [norm_value(i) for i in t.interrupts],
                "state": norm_snapshot(t.state) if type(t.state).__name__ == "StateSnapshot" else norm_config(t.state),
                "result": norm_value(t.result),
            }
            for t in s.tasks
        ],
    }


# --------------------------------------------------------------------------- driver
class Pair:
    """The same graph compiled with the reference saver and with the saver under test."""

    def __init__(self, builder: StateGraph, ref: Any, target: Any, mode: str, **compile_kw: Any) -> None:
        self.mode = mode
        self.ref_graph = builder.compile(checkpointer=ref, **compile_kw)
        self.graph = builder.compile(checkpointer=target, **compile_kw)
        self.target = target

    async def _call(self, graph: Any, name: str, *args: Any, **kw: Any) -> Any:
        if self.mode == "async":
            if name == "get_state_history":
                return [s async for s in graph.aget_state_history(*args, **kw)]
            return await getattr(graph, "a" + name)(*args, **kw)
        if name == "get_state_history":
            return list(graph.get_state_history(*args, **kw))
        return getattr(graph, name)(*args, **kw)

    async def both(self, name: str, *args: Any, ref_args: Sequence | None = None, **kw: Any) -> Any:
        """Call on both graphs (``ref_args`` overrides args for the reference side, for
        configs that carry saver-specific checkpoint ids); return the target's result
        after asserting equal normalized results."""
        exp = await self._call(self.ref_graph, name, *(ref_args if ref_args is not None else args), **kw)
        got = await self._call(self.graph, name, *args, **kw)
        if name == "invoke":
            assert norm_output(got) == norm_output(exp), f"{name} output differs"
        return exp, got

    async def check(self, config: dict, *, subgraphs: bool = False) -> tuple[list, list]:
        exp_state = await self._call(self.ref_graph, "get_state", config, subgraphs=subgraphs)
        got_state = await self._call(self.graph, "get_state", config, subgraphs=subgraphs)
        assert norm_snapshot(got_state) == norm_snapshot(exp_state), "get_state differs"
        exp_hist = await self._call(self.ref_graph, "get_state_history", config)
        got_hist = await self._call(self.graph, "get_state_history", config)
        assert len(got_hist) == len(exp_hist), "history length differs"
        assert [norm_snapshot(s) for s in got_hist] == [norm_snapshot(s) for s in exp_hist]
        # filtered / paginated history
        for kw in ({"limit": 2}, {"filter": {"source": "loop"}}, {"filter": {"step": 1}}):
            e = await self._call(self.ref_graph, "get_state_history", config, **kw)
            g = await self._call(self.graph, "get_state_history", config, **kw)
            assert [norm_snapshot(s) for s in g] == [norm_snapshot(s) for s in e], kw
        if len(exp_hist) > 2:
            e = await self._call(self.ref_graph, "get_state_history", config, before=exp_hist[1].config, limit=3)
            g = await self._call(self.graph, "get_state_history", config, before=got_hist[1].config, limit=3)
            assert [norm_snapshot(s) for s in g] == [norm_snapshot(s) for s in e], "before"
        return exp_hist, got_hist


def cfg(thread: str = THREAD) -> dict:
    return {"configurable": {"thread_id": thread}}
