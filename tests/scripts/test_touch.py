"""Every write and every read leaves all of a thread's keys equally recent (on a real redis-server).

Under an LRU maxmemory-policy Redis evicts the keys least recently accessed, so a put that
accessed only some of a thread's keys would leave the others to go first. Without a ttl,
touch() TOUCHes the keys the call did not access otherwise (put.lua says which it did); these
tests let every key of a thread go idle, then check that one put, a new one and an identical
retry, brought each existing key's idle time back to zero; and the same of get_tuple (its
commands read most keys, and it TOUCHes the others).
"""

from __future__ import annotations

import time

from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from redis_saver import RedisSaver


def _idle(client, keys: list[str]) -> dict[str, int]:
    return {k: client.object("idletime", k) for k in keys if client.exists(k)}


def test_a_put_accesses_every_key_of_the_thread(sync_client, prefix):
    policy = sync_client.config_get("maxmemory-policy")["maxmemory-policy"]
    assert "lfu" not in policy, "OBJECT IDLETIME needs an LRU (or no eviction) policy"
    saver = RedisSaver(sync_client, prefix=prefix)
    saver.setup()
    tid = "t:{touch}"
    cfg = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    for t in range(1, 3):
        cp = generate_checkpoint(channel_values={"a": "x" * 40 * t}, channel_versions={"a": str(t)})
        cfg = saver.put(cfg, cp, generate_metadata(), {"a": str(t)})
        saver.put_writes(cfg, [("a", t)], f"task-{t}", "p")
    keys = saver.keys.thread_keys(tid)
    # meta, cp, cp_ns, cp_id, blob, wr, wr_ord and the slot index (no run ids: no run keys, and
    # a thread started with compression on keeps no chain)
    assert len(_idle(sync_client, keys)) == 8
    cp = generate_checkpoint(channel_values={"a": "y" * 120}, channel_versions={"a": "3"})
    call = saver._plans._plan_put(cfg, cp, generate_metadata(), {"a": "3"})
    first = next(call)
    for what in ("a new checkpoint", "an identical retry"):
        time.sleep(2.1)
        before = _idle(sync_client, keys)
        assert min(before.values()) >= 2, before  # the control: every key went idle
        assert saver._driver.call(first) == 1, what
        after = _idle(sync_client, keys)
        assert set(after) == set(before)
        assert max(after.values()) <= 1, (what, after)


def test_get_tuple_accesses_every_key_of_the_thread(sync_client, prefix):
    policy = sync_client.config_get("maxmemory-policy")["maxmemory-policy"]
    assert "lfu" not in policy, "OBJECT IDLETIME needs an LRU (or no eviction) policy"
    saver = RedisSaver(sync_client, prefix=prefix)
    saver.setup()
    tid = "t:{touch-read}"
    cfg = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    ids = []
    for t in range(1, 3):
        cp = generate_checkpoint(channel_values={"a": "x" * 40 * t}, channel_versions={"a": str(t), "b": str(t)})
        cfg = saver.put(cfg, cp, {**generate_metadata(), "run_id": f"run-{t}"}, {"a": str(t), "b": str(t)})
        saver.put_writes(cfg, [("a", t)], f"task-{t}", "p")
        ids.append(cfg["configurable"]["checkpoint_id"])
    keys = saver.keys.thread_keys(tid)
    # meta, cp, cp_ns, cp_id, blob, wr, wr_ord, runs and both slot index keys (no chain)
    assert len(_idle(sync_client, keys)) == 10
    reads = {"the latest": {"configurable": {"thread_id": tid}},
             "by id": {"configurable": {"thread_id": tid, "checkpoint_ns": "", "checkpoint_id": ids[0]}}}
    for what, config in reads.items():
        time.sleep(2.1)
        before = _idle(sync_client, keys)
        assert min(before.values()) >= 2, before  # the control: every key went idle
        assert saver.get_tuple(config) is not None, what
        after = _idle(sync_client, keys)
        assert set(after) == set(before)
        assert max(after.values()) <= 1, (what, after)
