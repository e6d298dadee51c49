"""A put of thousands of new values at once (a graph with thousands of channels, or a first
checkpoint restored with all of them) is stored whole and read back, with and without a stream
among them, on a real redis-server: put.lua writes them in parts, as Lua's unpack() refuses
~8,000 values, and that error came after the call's first writes."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from redis_saver import RedisSaver


@pytest.mark.parametrize("with_stream", [False, True], ids=["plain", "stream"])
def test_a_put_of_5000_new_values_is_stored_whole(sync_client, prefix, with_stream):
    saver = RedisSaver(sync_client, prefix=prefix)
    saver.setup()
    cfg = {"configurable": {"thread_id": "t:{many}", "checkpoint_ns": ""}}
    words = [f"message {i} " + "lorem ipsum dolor sit amet " * 12 for i in range(6)]
    for step in (1, 2):
        values: dict = {f"c{i}": [i, step] for i in range(5000)}
        if with_stream:  # a growing list: stored as a stream from the second put on
            values["m"] = words[: 3 * step]
        versions = {k: str(step) for k in values}
        cp = generate_checkpoint(channel_values=values, channel_versions=versions)
        cfg = saver.put(cfg, cp, generate_metadata(), versions)
        got = saver.get_tuple(cfg)
        assert got is not None and got.checkpoint["channel_values"] == values
    blob = saver.keys.thread_keys("t:{many}")[4]
    assert sync_client.hlen(blob) >= 10000
    if with_stream:
        assert any(f.count(b"\0") == 3 and b"\0\0" in f for f in sync_client.hkeys(blob))  # a stream directory
