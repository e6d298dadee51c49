"""Requirement 1: after every kind of write, every key of the thread carries the same PTTL,
and the thread's slot-index keys expire no earlier than the thread."""

from __future__ import annotations

import asyncio

import pytest

from tests.sessions._util import assert_uniform_ttl, call, cfg, new_tid, put_cp, scan_thread, thread_keys

TTL_MIN = 0.2  # 12 s: long enough that nothing expires during the test
TTL_MS = 12_000
KINDS = ["sync", "async"]


async def age() -> None:
    """Let the current expiry visibly run down, so the next call's refresh is observable."""
    await asyncio.sleep(0.2)


@pytest.mark.parametrize("kind", KINDS)
async def test_every_write_kind_sets_one_ttl_on_all_keys(kind, make_saver, sync_client, prefix):
    s = make_saver(kind, ttl={"default_ttl": TTL_MIN})
    r = sync_client
    t = new_tid("a")

    # put (with run ids, so the run index keys exist too), two namespaces
    c1 = await put_cp(s, t, run_id="run-1", step=0)
    assert_uniform_ttl(r, prefix, t, TTL_MS)
    await age()
    c2 = await put_cp(s, t, c1, run_id="run-1", step=1)
    await put_cp(s, t, run_id="run-2", ns="sub:1", step=0)
    c3 = await put_cp(s, t, c2, run_id="run-2", step=2)
    m = assert_uniform_ttl(r, prefix, t, TTL_MS)
    assert m > TTL_MS - 150

    # put_writes
    await age()
    await call(s, "put_writes", c3, [("x", "w1"), ("y", "w2")], "task-1")
    assert_uniform_ttl(r, prefix, t, TTL_MS)
    found = scan_thread(r, prefix, t)
    assert set(thread_keys(prefix, t)[0]) == found, "all 9 thread keys should exist by now"

    # copy_thread into a target: the target's keys all carry the ttl
    await age()
    dst = new_tid("copy")
    await call(s, "copy_thread", t, dst)
    assert_uniform_ttl(r, prefix, dst, TTL_MS)
    assert scan_thread(r, prefix, dst) == {k for k in thread_keys(prefix, dst)[0]}

    # prune keep_latest
    await age()
    await call(s, "prune", [t], strategy="keep_latest")
    assert_uniform_ttl(r, prefix, t, TTL_MS)
    assert len(await call(s, "list", cfg(t, ""))) == 1

    # delete_for_runs of part of the thread (run-2 goes, run-1 stays on the copy and the original)
    await age()
    c4 = await put_cp(s, t, c3, run_id="run-1", step=3)
    await age()
    await call(s, "delete_for_runs", ["run-2"])
    assert_uniform_ttl(r, prefix, t, TTL_MS)
    assert_uniform_ttl(r, prefix, dst, TTL_MS)
    left = await call(s, "list", {"configurable": {"thread_id": t}})
    assert [x.config["configurable"]["checkpoint_id"] for x in left] == [c4["configurable"]["checkpoint_id"]]

    # pin: every key (and the slot index) persistent; unpin: the ttl again, on every key
    await call(s, "pin", t)
    assert_uniform_ttl(r, prefix, t, None)
    await age()
    await call(s, "unpin", t)
    assert_uniform_ttl(r, prefix, t, TTL_MS)


@pytest.mark.parametrize("kind", KINDS)
async def test_refresh_on_read_reaches_every_key(kind, make_saver, sync_client, prefix):
    s = make_saver(kind, ttl={"default_ttl": TTL_MIN, "refresh_on_read": True})
    plain = make_saver(kind, ttl={"default_ttl": TTL_MIN})
    t = new_tid("r")
    c1 = await put_cp(s, t, run_id="run-1")
    await call(s, "put_writes", c1, [("x", 1)], "task")
    for read in (
        lambda: call(s, "get_tuple", cfg(t)),
        lambda: call(s, "list", cfg(t)),
        lambda: call(s, "get_delta_channel_history", config=cfg(t), channels=["x"]),
    ):
        await age()
        await read()
        assert_uniform_ttl(sync_client, prefix, t, TTL_MS)
    # a saver without refresh_on_read leaves the expiry running down
    await age()
    await call(plain, "get_tuple", cfg(t))
    await call(plain, "list", cfg(t))
    tk, _ = thread_keys(prefix, t)
    assert max(sync_client.pttl(k) for k in tk) < TTL_MS - 150


@pytest.mark.parametrize("kind", KINDS)
async def test_slot_index_expiry_covers_longest_thread(kind, make_saver, sync_client, prefix):
    """Two threads in one slot with different ttls: the index keys live as long as the longer one."""
    from tests.sessions._util import twin_in_slot

    short = make_saver(kind, ttl={"default_ttl": 0.1})
    long_ = make_saver(kind, ttl={"default_ttl": TTL_MIN})
    a = new_tid("s")
    b = twin_in_slot(a)
    await put_cp(long_, b, run_id="rb")
    await put_cp(short, a, run_id="ra")
    assert_uniform_ttl(sync_client, prefix, a, 6000)
    _, ikeys = thread_keys(prefix, a)
    assert all(sync_client.pttl(k) > TTL_MS - 150 for k in ikeys)
