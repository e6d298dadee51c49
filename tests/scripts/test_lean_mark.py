"""The lean mark (field "" of a thread's wr hash) on a real redis-server.

put_writes+lean trusts the mark instead of reading the meta hash: it must hold the format
exactly while the thread is indexed without expiry (meta.ix == "inf"), through every
change of the thread's expiry ("t" while the thread expires: the field is also the wr mark
that tells a lost wr key, see "Lost keys" in lua/_lib.lua), and a lost mark must only cost a
second call (and is reported as a lost wr key).
"""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from redis_saver import FORMAT_VERSION, RedisSaver, ThreadEvictedError
from redis_saver.core.plans import Call

MARK = FORMAT_VERSION.encode()
EXPIRING = b"t"  # the wr mark of a thread with an expiry: not the lean mark


def _put(saver, tid, n=1):
    cfg = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    for i in range(n):
        cp = generate_checkpoint(channel_values={"a": i}, channel_versions={"a": str(i + 1)})
        cfg = saver.put(cfg, cp, generate_metadata(step=i), {"a": str(i + 1)})
    return cfg


def _state(client, saver, tid):
    keys = saver.keys.thread_keys(tid)
    return client.hget(keys[5], ""), client.hget(keys[0], "ix"), client.pttl(keys[0])


def _scripts_sent(saver, cfg, writes, task, sent=None):
    """Run put_writes' plan by hand; the script names it sent (also into ``sent``)."""
    plan, reply = saver._plans._plan_put_writes(cfg, writes, task, "p"), None
    sent = [] if sent is None else sent
    try:
        while True:
            call = plan.send(reply)
            assert isinstance(call, Call)
            sent.append(call.script)
            reply = saver._driver.call(call)
    except StopIteration:
        return sent


def test_mark_follows_the_threads_expiry_through_savers_with_and_without_ttl(sync_client, prefix):
    plain = RedisSaver(sync_client, prefix=prefix)
    ttl = RedisSaver(sync_client, prefix=prefix, ttl={"default_ttl": 10})
    cfg = _put(plain, "t")
    assert _state(sync_client, plain, "t") == (MARK, b"inf", -1)  # first put: indexed, marked
    assert _scripts_sent(plain, cfg, [("x", 1)], "k1") == ["put_writes+lean"]

    ttl.put_writes(cfg, [("x", 2)], "k2", "p")  # a saver with a ttl: the thread expires again
    mark, ix, pttl = _state(sync_client, plain, "t")
    assert mark == EXPIRING and ix != b"inf" and 0 < pttl <= 600_000

    # the plain saver's lean call sees no mark, writes nothing; the full call persists the thread
    assert _scripts_sent(plain, cfg, [("x", 3)], "k3") == ["put_writes+lean", "put_writes"]
    assert _state(sync_client, plain, "t") == (MARK, b"inf", -1)
    assert all(sync_client.pttl(k) == -1 for k in plain.keys.thread_keys("t")[:9] if sync_client.exists(k))
    got = {(w[0], w[2]) for w in plain.get_tuple(cfg).pending_writes}
    assert got == {("k1", 1), ("k2", 2), ("k3", 3)}

    # pinned under a ttl: no expiry, so marked; unpinned: expiring, so not
    ttl.put(cfg, generate_checkpoint(), generate_metadata(step=9), {})
    assert _state(sync_client, plain, "t")[0] == EXPIRING
    ttl.pin("t")
    assert _state(sync_client, plain, "t") == (MARK, b"inf", -1)
    ttl.unpin("t")
    assert _state(sync_client, plain, "t")[0] == EXPIRING


def test_a_ttl_saver_never_takes_the_lean_path(sync_client, prefix):
    ttl = RedisSaver(sync_client, prefix=prefix, ttl={"default_ttl": 10})
    cfg = _put(ttl, "t")
    assert _scripts_sent(ttl, cfg, [("x", 1)], "k") == ["put_writes"]
    assert _state(sync_client, ttl, "t")[0] == EXPIRING


def test_a_lost_mark_forgets_the_thread_and_refuses_the_write(sync_client, prefix):
    saver = RedisSaver(sync_client, prefix=prefix)
    cfg = _put(saver, "t")
    sync_client.hdel(saver.keys.thread_keys("t")[5], "")  # as if wr had been evicted
    sent: list[str] = []
    with pytest.raises(ThreadEvictedError, match="lost a key"):  # the full call forgot the thread
        _scripts_sent(saver, cfg, [("x", 1)], "k1", sent)
    assert sent == ["put_writes+lean", "put_writes"]
    assert saver.get_tuple(cfg) is None
    assert not any(sync_client.exists(k) for k in saver.keys.thread_keys("t")[:9])
    # the session starts again: a put without a parent, then the lean path as before
    cfg = _put(saver, "t")
    assert _state(sync_client, saver, "t")[0] == MARK
    assert _scripts_sent(saver, cfg, [("x", 2)], "k2") == ["put_writes+lean"]
    assert saver.get_tuple(cfg).pending_writes == [("k2", "x", 2)]


def test_the_mark_is_never_a_write_and_is_not_copied(sync_client, prefix):
    saver = RedisSaver(sync_client, prefix=prefix)
    cfg = _put(saver, "src", 3)
    saver.put_writes(cfg, [("x", 1), ("y", 2)], "k", "p")
    saver.copy_thread("src", "dst")
    src, dst = saver.keys.thread_keys("src"), saver.keys.thread_keys("dst")
    assert sync_client.hlen(src[5]) == sync_client.hlen(dst[5]) == 3  # 2 writes + the target's own mark
    assert sync_client.hget(dst[5], "") == MARK
    dcfg = {"configurable": {**cfg["configurable"], "thread_id": "dst"}}
    assert saver.get_tuple(dcfg).pending_writes == saver.get_tuple(cfg).pending_writes
    assert len(list(saver.list(None))) == 6
    # a ttl saver copies into an expiring target: no lean mark there
    ttl = RedisSaver(sync_client, prefix=prefix, ttl={"default_ttl": 10})
    ttl.copy_thread("src", "dst2")
    assert sync_client.hget(saver.keys.thread_keys("dst2")[5], "") == EXPIRING
    assert sync_client.hlen(saver.keys.thread_keys("dst2")[5]) == 3


def test_regular_writes_repeated_within_one_call_keep_the_first(sync_client, prefix):
    # Python never sends one (task_id, idx) twice in a call; the script still keeps the first,
    # as a sequence of HSETNX would, and adds one sort member
    saver = RedisSaver(sync_client, prefix=prefix)
    for lean in (True, False):
        saver.delete_thread("t")
        cfg = _put(saver, "t")
        call = next(saver._plans._plan_put_writes(cfg, [("a", "first"), ("b", "second")], "task", "p"))
        assert call.script == "put_writes+lean"
        args = list(call.args)
        args[-2] = args[-4]  # the second write gets the first's tag, so the same idx
        keys = call.keys if lean else saver.keys.thread_keys("t")
        assert saver._driver.call(Call("put_writes+lean" if lean else "put_writes", keys, args)) == 1
        assert saver.get_tuple(cfg).pending_writes == [("task", "a", "first")]
        assert sync_client.zcard(saver.keys.thread_keys("t")[6]) == 1
