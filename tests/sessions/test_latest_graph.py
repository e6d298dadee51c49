"""history="latest" under a real graph with interrupt()/Command(resume=...) run for
200 turns, against an InMemorySaver reference, with and without a subgraph, combined with a TTL."""

from __future__ import annotations

import collections
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Interrupt

from tests.sessions._graph import arun_turns, build, run_turns, turn_inputs
from tests.sessions._util import assert_uniform_ttl, call, new_tid, scan_thread

TURNS = 200
TTL = 0.02  # 1.2 s: shorter than the run, so the run itself keeps the thread alive
TTL_MS = 1200

_reference: dict[bool, dict[str, Any]] = {}


def norm_writes(writes: list) -> list:
    """Pending writes without task ids (they derive from time-based checkpoint ids)."""
    out = []
    for _task, ch, v in writes:
        if isinstance(v, (list, tuple)) and v and all(isinstance(i, Interrupt) for i in v):
            v = ("interrupts", [i.value for i in v])
        elif isinstance(v, Interrupt):
            v = ("interrupt", v.value)
        out.append((ch, repr(v)))
    return sorted(out)


def sub_config(graph: Any, config: dict) -> dict | None:
    """The config of the interrupted subgraph's latest checkpoint (None without a subgraph)."""
    st = graph.get_state(config, subgraphs=True)
    for t in st.tasks:
        if t.state is not None and hasattr(t.state, "config"):
            return t.state.config
    return None


async def asub_config(graph: Any, config: dict) -> dict | None:
    st = await graph.aget_state(config, subgraphs=True)
    for t in st.tasks:
        if t.state is not None and hasattr(t.state, "config"):
            return t.state.config
    return None


def reference(subgraph: bool) -> dict[str, Any]:
    """The InMemorySaver run (deterministic: explicit message ids), computed once per variant."""
    if subgraph in _reference:
        return _reference[subgraph]
    mem = InMemorySaver()
    g = build(mem, subgraph)
    conf = {"configurable": {"thread_id": "ref"}}
    run_turns(g, conf, 1, 10)
    at10 = g.get_state(conf).values
    run_turns(g, conf, 11, TURNS - 1)
    first, resume = turn_inputs(TURNS)
    g.invoke(first, conf)
    ref = {
        "at10": at10,
        "interrupted_values": g.get_state(conf).values,
        "pending": norm_writes(mem.get_tuple(conf).pending_writes),
        "sub_pending": None,
    }
    sc = sub_config(g, conf)
    if sc is not None:
        ref["sub_pending"] = norm_writes(mem.get_tuple(sc).pending_writes)
    g.invoke(resume, conf)
    ref["final"] = g.get_state(conf).values
    ref["final_pending"] = norm_writes(mem.get_tuple(conf).pending_writes)
    _reference[subgraph] = ref
    return ref


def thread_memory(client: Any, prefix: str, tid: str) -> int:
    return sum(client.memory_usage(k, samples=0) or 0 for k in scan_thread(client, prefix, tid))


async def run(kind: str, graph: Any, conf: dict, a: int, b: int) -> None:
    if kind == "async":
        await arun_turns(graph, conf, a, b)
    else:
        run_turns(graph, conf, a, b)


def one_per_namespace(listed: list) -> collections.Counter:
    c = collections.Counter(x.config["configurable"]["checkpoint_ns"] for x in listed)
    assert c[""] == 1, c
    assert set(c.values()) == {1}, c.most_common(3)
    return c


@pytest.mark.parametrize(
    "kind,refresh,subgraph",
    [
        pytest.param("sync", True, False, id="sync-refresh-flat"),
        pytest.param("async", False, False, id="async-flat"),
        # (one subgraph variant: ~10 s; the saver logic is the same Lua for both drivers)
        pytest.param("sync", True, True, id="sync-refresh-subgraph"),
    ],
)
async def test_latest_mode_long_interrupt_run(kind, refresh, subgraph, make_saver, sync_client, prefix):
    ref = reference(subgraph)
    s = make_saver(kind, history="latest", ttl={"default_ttl": TTL, "refresh_on_read": refresh})
    g = build(s, subgraph)
    tid = new_tid("chat")
    conf = {"configurable": {"thread_id": tid}}

    await run(kind, g, conf, 1, 10)
    assert (await g.aget_state(conf)).values == ref["at10"]
    one_per_namespace(await call(s, "list", conf))
    mem10 = thread_memory(sync_client, prefix, tid)

    await run(kind, g, conf, 11, TURNS - 1)
    first, resume = turn_inputs(TURNS)
    out = await g.ainvoke(first, conf) if kind == "async" else g.invoke(first, conf)
    assert [i.value for i in out["__interrupt__"]] == [{"question": f"approve proposal {TURNS}?", "turn": TURNS}]

    # interrupted: the latest checkpoint's pending writes are exactly the reference's
    assert (await g.aget_state(conf)).values == ref["interrupted_values"]
    latest = await call(s, "get_tuple", conf)
    assert norm_writes(latest.pending_writes) == ref["pending"]
    if subgraph:
        sc = await asub_config(g, conf)
        assert sc is not None and sc["configurable"]["checkpoint_ns"].startswith("review:")
        assert norm_writes((await call(s, "get_tuple", sc)).pending_writes) == ref["sub_pending"]
    listed = await call(s, "list", conf)
    one_per_namespace(listed)
    for t in listed:  # no checkpoint carries writes that are not its own latest ones
        assert t.checkpoint["id"] == t.config["configurable"]["checkpoint_id"]

    out = await g.ainvoke(resume, conf) if kind == "async" else g.invoke(resume, conf)
    assert "__interrupt__" not in out
    final = (await g.aget_state(conf)).values
    assert final == ref["final"]
    assert final["turns"] == TURNS and final["approved"] == TURNS - TURNS // 7
    assert final["messages"][-1].content == f"approved {TURNS}: yes-{TURNS}"
    assert norm_writes((await call(s, "get_tuple", conf)).pending_writes) == ref["final_pending"]
    one_per_namespace(await call(s, "list", conf))

    # the TTL holds on every key of the thread after the whole run
    assert_uniform_ttl(sync_client, prefix, tid, TTL_MS, fresh_within=900)

    # the thread's size follows its (bounded) state, not the number of turns
    mem200 = thread_memory(sync_client, prefix, tid)
    assert mem200 <= 1.5 * mem10, (mem10, mem200, one_per_namespace(await call(s, "list", conf)).total())

