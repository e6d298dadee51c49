"""Real LangGraph graphs with a DeltaChannel, compiled with our saver vs InMemorySaver: the same
outputs, ``get_state`` and ``get_state_history`` over many turns (and the saver's delta history
equal to the base class's walk), and the thread going on identically after ``prune(keep_latest)``
and after ``copy_thread``. Kinds and harness as in ``test_graphs.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send
from typing_extensions import TypedDict

from tests.contract._graphs import THREAD, cfg, norm_output, norm_value


# --------------------------------------------------------------------------- graphs
def batch_add(state: list, writes: Sequence[list]) -> list:
    out = list(state)
    for w in writes:
        out.extend(w if isinstance(w, list) else [w])
    return out


class DeltaState(TypedDict):
    turn: int
    log: Annotated[list, DeltaChannel(batch_add, snapshot_frequency=3)]


def d_start(state: DeltaState) -> dict:
    return {"turn": state.get("turn", 0) + 1, "log": [f"start{state.get('turn', 0)}"]}


def d_fan(state: DeltaState) -> list[Send]:
    return [Send("d_worker", {"turn": state["turn"] * 10 + i, "log": []}) for i in range(3)]


def d_worker(state: DeltaState) -> dict:
    return {"log": [f"w{state['turn']}"]}


def d_end(state: DeltaState) -> dict:
    return {"log": [f"end{len(state['log'])}"]}


def delta_builder() -> StateGraph:
    b = StateGraph(DeltaState)
    b.add_node("start", d_start)
    b.add_node("d_worker", d_worker)
    b.add_node("end", d_end)
    b.add_edge(START, "start")
    b.add_conditional_edges("start", d_fan, ["d_worker"])
    b.add_edge("d_worker", "end")
    b.add_edge("end", END)
    return b


async def test_delta_channel_many_turns(pair_factory: Any) -> None:
    p = pair_factory(delta_builder())
    for turn in range(8):
        await p.both("invoke", {"log": [f"in{turn}"]}, cfg())
        if turn % 3 == 2:
            await p.check(cfg())
    await p.check(cfg())
    state = await p._call(p.graph, "get_state", cfg())
    assert len(state.values["log"]) == 8 * 6
    # the saver's delta history equals the base-class walk over the same saver
    from langgraph.checkpoint.base import BaseCheckpointSaver

    tgt = p.target
    conf = state.config
    if p.mode == "async":
        got = await tgt.aget_delta_channel_history(config=conf, channels=["log", "turn"])
        base = await BaseCheckpointSaver.aget_delta_channel_history(tgt, config=conf, channels=["log", "turn"])
    else:
        got = tgt.get_delta_channel_history(config=conf, channels=["log", "turn"])
        base = BaseCheckpointSaver.get_delta_channel_history(tgt, config=conf, channels=["log", "turn"])
    assert {k: {**v, "writes": [tuple(w) for w in v["writes"]]} for k, v in got.items()} == {
        k: {**v, "writes": [tuple(w) for w in v["writes"]]} for k, v in base.items()
    }


async def test_delta_channel_prune_keep_latest_then_continue(pair_factory: Any, contract_kind: str) -> None:
    if contract_kind == "memory":
        pytest.skip("InMemorySaver has no prune")
    p = pair_factory(delta_builder())
    for turn in range(7):
        await p.both("invoke", {"log": [f"in{turn}"]}, cfg())
    before = await p._call(p.ref_graph, "get_state", cfg())
    if p.mode == "async":
        await p.target.aprune([THREAD], strategy="keep_latest")
    else:
        p.target.prune([THREAD], strategy="keep_latest")
    got = await p._call(p.graph, "get_state", cfg())
    assert norm_value(got.values) == norm_value(before.values), "state changed by prune(keep_latest)"
    assert got.next == before.next
    hist = await p._call(p.graph, "get_state_history", cfg())
    e_hist = await p._call(p.ref_graph, "get_state_history", cfg())
    assert 1 <= len(hist) < len(e_hist)
    # and the thread goes on identically
    await p.both("invoke", {"log": ["after-prune"]}, cfg())
    e = await p._call(p.ref_graph, "get_state", cfg())
    g = await p._call(p.graph, "get_state", cfg())
    assert norm_value(g.values) == norm_value(e.values)
    assert g.next == e.next


async def test_copy_thread_then_continue(pair_factory: Any, contract_kind: str) -> None:
    if contract_kind == "memory":
        pytest.skip("InMemorySaver has no copy_thread")
    p = pair_factory(delta_builder())
    for turn in range(5):
        await p.both("invoke", {"log": [f"in{turn}"]}, cfg())
    src_state = await p._call(p.graph, "get_state", cfg())
    src_hist = await p._call(p.graph, "get_state_history", cfg())
    dst = "copy:{dst} ü"
    if p.mode == "async":
        await p.target.acopy_thread(THREAD, dst)
    else:
        p.target.copy_thread(THREAD, dst)
    got = await p._call(p.graph, "get_state", cfg(dst))
    assert norm_value(got.values) == norm_value(src_state.values)
    got_hist = await p._call(p.graph, "get_state_history", cfg(dst))
    assert [norm_value(s.values) for s in got_hist] == [norm_value(s.values) for s in src_hist]
    # both threads continue independently
    out_src = await p._call(p.graph, "invoke", {"log": ["s"]}, cfg())
    out_dst = await p._call(p.graph, "invoke", {"log": ["s"]}, cfg(dst))
    assert norm_output(out_src) == norm_output(out_dst)
    await p._call(p.graph, "invoke", {"log": ["only-dst"]}, cfg(dst))
    s = await p._call(p.graph, "get_state", cfg())
    d = await p._call(p.graph, "get_state", cfg(dst))
    assert len(d.values["log"]) == len(s.values["log"]) + 6
