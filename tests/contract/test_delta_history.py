"""get_delta_channel_history on long chains and forked threads, against InMemorySaver.

lua/delta_history.lua walks the parent chain a page of 16 ancestors at a time and reads
the chain's writes either as one range of the sort index (a linear thread) or one range
per ancestor (when the range also holds many writes of other branches). This test builds
one thread where both happen, with the same puts in InMemorySaver and in RedisSaver:

* main: 150 checkpoints; channel ``log`` stores a value (a seed) at steps 0 and 60 and an
  empty blob otherwise, ``tick`` only at step 0, ``rare`` never; two writes per checkpoint;
* fork: 6 checkpoints branching off main step 70, with ids newer than all of main.

At the main tip the chain has 89 ancestors (6 pages) down to the seed at step 60, and the
id range holds only its own writes. At the fork tip it has 5 + 11 ancestors, while its id
range holds ~80 main checkpoints' writes that are not on the chain: more than
4 x chain + 64, so the per-ancestor reads are used.
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver

from tests.contract.conftest import delete_prefix, new_saver

THREAD = "dh:{1} ü"
MAIN, FORK, FORK_AT = 150, 6, 70


def _checkpoint(cid: str, step: int, versions: dict[str, int], values: dict[str, Any]) -> dict:
    cp = empty_checkpoint()
    cp["id"] = cid
    cp["channel_versions"] = {k: str(v) for k, v in versions.items()}
    cp["channel_values"] = dict(values)
    return cp


def _build(saver: Any) -> dict[str, dict]:
    """The same puts and writes into ``saver``; returns the configs of interest."""
    ids = sorted(str(uuid6(clock_seq=i)) for i in range(MAIN + FORK))
    out: dict[str, dict] = {}
    parent: dict | None = None
    versions: dict[str, int] = {}

    def put(cid: str, step: int, parent_cfg: dict | None, vers: dict[str, int], branch: str) -> dict:
        values: dict[str, Any] = {}
        new = {}
        for ch in ("log", "tick", "rare"):
            vers[ch] = vers.get(ch, 0) + (1 if ch == "log" or step == 0 else 0)
        new["log"] = str(vers["log"])
        if step == 0:
            new["tick"] = new["rare"] = "1"
            values["tick"] = ["t0"]
        if branch == "main" and step in (0, 60):
            values["log"] = [f"seed{step}"]
        cfg = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
        if parent_cfg is not None:
            cfg["configurable"]["checkpoint_id"] = parent_cfg["configurable"]["checkpoint_id"]
        md = {"source": "loop", "step": step, "parents": {}}
        saved = saver.put(cfg, _checkpoint(cid, step, vers, values), md, new)
        saver.put_writes(saved, [("log", f"{branch}{step}a"), ("tick", step)], f"task-{branch}-{step}", "p")
        saver.put_writes(saved, [("log", f"{branch}{step}b")], f"task2-{branch}-{step}", "")
        return saved

    fork_from: tuple[dict, dict[str, int]] | None = None
    for step in range(MAIN):
        parent = put(ids[step], step, parent, versions, "main")
        if step == FORK_AT:
            fork_from = (parent, dict(versions))
        if step == 100:
            out["main mid"] = parent
    out["main tip"] = parent
    assert fork_from is not None
    parent, versions = fork_from
    for k in range(FORK):
        parent = put(ids[MAIN + k], FORK_AT + 1 + k, parent, versions, "fork")
    out["fork tip"] = parent
    return out


def _norm(history: dict) -> dict:
    return {ch: {**h, "writes": [tuple(w) for w in h["writes"]]} for ch, h in history.items()}


@pytest.mark.parametrize("where", ["main tip", "main mid", "fork tip"])
@pytest.mark.parametrize("channels", [["log"], ["log", "tick"], ["rare", "log"], ["missing"]])
def test_delta_history_long_and_forked(contract_redis_url: str, where: str, channels: list[str]) -> None:
    ref = InMemorySaver()
    saver = new_saver("sync", contract_redis_url)
    try:
        ref_cfgs, cfgs = _build(ref), _build(saver)
        got = saver.get_delta_channel_history(config=cfgs[where], channels=channels)
        want = ref.get_delta_channel_history(config=ref_cfgs[where], channels=channels)
        assert _norm(got) == _norm(want)
        if "log" in channels:
            # the scenario is what the docstring says: long walks down to the seed at step 60
            assert got["log"].get("seed") == ["seed60"]
            assert len(got["log"]["writes"]) >= {"main tip": 170, "main mid": 80, "fork tip": 30}[where]
        latest = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
        got = saver.get_delta_channel_history(config=latest, channels=channels)
        assert _norm(got) == _norm(ref.get_delta_channel_history(config=latest, channels=channels))
    finally:
        delete_prefix(contract_redis_url, saver.keys.prefix)
