"""Values that several checkpoints of one ``list`` page hold: equal, and never one object that a
caller could change for the others.

Checkpoints whose channels did not change share those channels' versions, hence their stored
values: a page of ``list`` reads each shared blob once (redis_saver decodes it once). What the
caller gets must still behave as InMemorySaver's (which deep-copies every value out): a list,
a dict or a message of one tuple is not the object of another tuple, so mutating one leaves
the rest as stored. Immutable values (str, int, float, bool, bytes, None) may be one object:
nothing can tell.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base.id import uuid6

from tests.contract.conftest import delete_prefix, new_saver, unique_prefix

VALUES: dict[str, Any] = {
    "messages": [HumanMessage(content="hi", id="m1")],
    "state": {"k": [1, 2]},
    "text": "a string value",
    "count": 7,
    "ratio": 0.25,
    "flag": True,
    "raw": b"\x00bytes",
    "none": None,
}


def _checkpoints(n: int) -> list[dict[str, Any]]:
    ids = sorted(str(uuid6(clock_seq=i)) for i in range(n))
    return [
        {
            "v": 4,
            "id": cid,
            "ts": "2026-01-01T00:00:00+00:00",
            "channel_values": VALUES,
            "channel_versions": {ch: "1" for ch in VALUES},  # the same versions: shared blobs
            "versions_seen": {},
            "updated_channels": None,
        }
        for cid in ids
    ]


def _check(tuples: list[Any]) -> None:
    assert len(tuples) == 3
    for t in tuples:
        assert t.checkpoint["channel_values"] == VALUES
    a, b = tuples[0].checkpoint["channel_values"], tuples[1].checkpoint["channel_values"]
    for ch in ("messages", "state"):
        assert a[ch] is not b[ch]
    a["messages"].append(HumanMessage(content="added", id="m2"))
    a["messages"][0].content = "changed"
    a["state"]["k"].append(3)
    assert b["messages"] == VALUES["messages"] and b["messages"][0].content == "hi"
    assert b["state"] == {"k": [1, 2]}
    assert tuples[2].checkpoint["channel_values"] == VALUES


def _puts() -> list[tuple[Any, ...]]:
    """put's arguments for a chain of 3 checkpoints of thread "t"."""
    out, parent = [], None
    for cp in _checkpoints(3):
        link = {"checkpoint_id": parent} if parent else {}
        conf = {"configurable": {"thread_id": "t", "checkpoint_ns": "", **link}}
        out.append((conf, cp, {"step": 1}, dict(cp["channel_versions"])))
        parent = cp["id"]
    return out


def test_list_page_values_are_independent(contract_kind: str, contract_url: str | None) -> None:
    prefix = unique_prefix()
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    if contract_kind == "async":

        async def run() -> list[Any]:
            saver = new_saver("async", contract_url, prefix=prefix)
            for args in _puts():
                await saver.aput(*args)
            return [t async for t in saver.alist(config)]

        tuples = asyncio.run(run())
    else:
        saver = new_saver(contract_kind, contract_url, prefix=prefix)
        for args in _puts():
            saver.put(*args)
        tuples = list(saver.list(config))
    try:
        _check(tuples)
    finally:
        if contract_url is not None:
            delete_prefix(contract_url, prefix)
