"""Hostile thread ids and namespaces round-trip exactly through a real server, never collide,
and leave no key outside their threads' (the key schema itself: tests/unit/test_keys.py)."""

from __future__ import annotations

import itertools

from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from redis_saver.keys import KeySchema
from tests.unit.test_keys import HOSTILE


def generate_config(thread_id: str, checkpoint_ns: str = "") -> dict:
    # (the conformance helper replaces an empty thread id with a random one)
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}}


async def test_hostile_ids_round_trip_and_stay_apart(saver, sync_client, prefix):
    namespaces = ["", "child:1", "a{b}", "*"]
    tids = HOSTILE[:12] + ["ünïcödé-🚀", "x" * 5000]
    for tid, ns in itertools.product(tids, namespaces):
        cp = generate_checkpoint(channel_values={"who": [tid, ns]}, channel_versions={"who": "1"})
        cfg = await saver.aput(generate_config(tid, checkpoint_ns=ns), cp, generate_metadata(), {"who": "1"})
        await saver.aput_writes(cfg, [("w", (tid, ns))], "task")
    for tid, ns in itertools.product(tids, namespaces):
        tup = await saver.aget_tuple(generate_config(tid, checkpoint_ns=ns))
        assert tup is not None
        assert tup.config["configurable"]["thread_id"] == tid
        assert tup.config["configurable"]["checkpoint_ns"] == ns
        assert tup.checkpoint["channel_values"]["who"] == [tid, ns]
        # msgpack: tuples come back as lists, as in InMemorySaver
        assert tup.pending_writes == [("task", "w", [tid, ns])]
    all_tuples = [t async for t in saver.alist(None)]
    confs = [t.config["configurable"] for t in all_tuples]
    assert sorted((c["thread_id"], c["checkpoint_ns"]) for c in confs) == sorted(itertools.product(tids, namespaces))
    # deleting one hostile thread leaves every other one intact
    await saver.adelete_thread("{")
    assert await saver.aget_tuple(generate_config("{")) is None
    for tid in tids:
        if tid != "{":
            assert await saver.aget_tuple(generate_config(tid, checkpoint_ns="a{b}")) is not None
    # nothing was written outside the prefix, and every key under it belongs to a live thread or the index
    schema = KeySchema(prefix)
    allowed = {k for t in tids if t != "{" for k in schema.thread_keys(t)}
    present = set(sync_client.scan_iter(match=schema.scan_pattern(), count=1000))
    assert present and present <= allowed
