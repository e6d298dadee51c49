"""What a script that stopped halfway left (as an earlier version's prune, delete_thread or
delete_for_runs did when their slot moved: docs/architecture.md, "Slots that move") is found
and cleaned by the next call that meets it: each case writes those leftovers directly, then
checks the thread against one the same history and calls left clean, key by key."""

from __future__ import annotations

from typing import Any

import redis_saver
from redis_saver.keys import enc
from tests.deploy.helpers import tcfg
from tests.deploy.threadstate import History, apply, thread_state


def _pair(client: Any, prefix: str) -> tuple[Any, str, str, History]:
    saver = redis_saver.RedisSaver(client, prefix=prefix, compress=False, eviction_check="off")
    saver.setup()
    h = History()
    for o in h.ops:
        apply(saver, "left", o)
        apply(saver, "clean", o)
    return saver, "left", "clean", h


def _stopped_prune(client: Any, saver: Any, tid: str) -> None:
    """What prune(keep_latest) of an earlier version left when it stopped after dropping the
    root namespace's older checkpoints: their records, indexes, writes and run links gone,
    but not their run-index entries, their blobs, nor the kept checkpoint's parent link."""
    k = saver.keys.thread_keys(tid)
    ns_e = enc("")
    members = [m for m in client.zrange(k[2], 0, -1) if m.startswith(ns_e)][:-1]  # all but the latest
    for m in members:
        cid_e = m[len(ns_e) :]
        client.hdel(k[1], m)
        client.hdel(k[8], m)
        client.zrem(k[2], m)
        client.zrem(k[3], cid_e + ns_e)
        for w in client.zrangebylex(k[6], b"[" + m, b"(" + m + b"\xff"):
            client.zrem(k[6], w)
        for f in [f for f in client.hkeys(k[5]) if f.startswith(m)]:
            client.hdel(k[5], f)
        for r in client.zrange(k[7], 0, -1):
            if r.endswith(m):
                client.zrem(k[7], r)


def test_prune_cleans_what_a_stopped_prune_left(sync_client, prefix):
    saver, left, clean, _ = _pair(sync_client, prefix)
    _stopped_prune(sync_client, saver, left)
    # the leftovers: the latest names a parent that is gone, a run-index entry and blobs stay
    latest = saver.get_tuple(tcfg(left))
    assert latest.parent_config is not None and saver.get_tuple(latest.parent_config) is None
    assert any(b"r1" in m for m in sync_client.zrange(saver.keys.thread_keys(left)[10], 0, -1))
    saver.prune([clean])
    assert len(thread_state(sync_client, saver, left, True, False)["blob"]) > len(
        thread_state(sync_client, saver, clean, True, False)["blob"]
    )
    saver.prune([left])
    assert thread_state(sync_client, saver, left, True, False) == thread_state(sync_client, saver, clean, True, False)
    assert saver.get_tuple(tcfg(left)).parent_config is None


def test_delete_for_runs_drops_run_index_entries_a_stopped_call_left(sync_client, prefix):
    saver, left, clean, _ = _pair(sync_client, prefix)
    k = saver.keys.thread_keys(left)
    # an earlier call dropped every checkpoint of run r1 with its run link, then stopped
    for r in sync_client.zrange(k[7], 0, -1):
        sync_client.zrem(k[7], r)
    saver.delete_for_runs(["r1"])
    stale = [m for m in sync_client.zrange(k[10], 0, -1) if enc(left) in m]
    assert stale == []


def test_index_entries_of_a_deleted_thread_go_with_the_next_read(sync_client, prefix):
    saver, left, _, _ = _pair(sync_client, prefix)
    k = saver.keys.thread_keys(left)
    # a delete that unlinked the thread's keys but stopped before its index entries
    sync_client.delete(*k[:9])
    assert sync_client.zscore(k[9], left) is not None
    assert saver.get_tuple(tcfg(left)) is None
    assert list(saver.list(tcfg(left))) == []
    assert sync_client.zscore(k[9], left) is None
    assert [m for m in sync_client.zrange(k[10], 0, -1) if enc(left) in m] == []
    assert left not in {t.config["configurable"]["thread_id"] for t in saver.list(None)}
