"""After every kind of write, every key of the thread carries the same PTTL,
and the thread's slot-index keys expire no earlier than the thread."""

from __future__ import annotations

import asyncio

import pytest

from redis_saver import ThreadExistsError
from tests.sessions._util import (
    assert_refreshed,
    assert_uniform_ttl,
    call,
    cfg,
    max_expiry,
    new_tid,
    put_cp,
    scan_thread,
    thread_keys,
)

TTL_MIN = 0.2  # 12 s: long enough that nothing expires during the test
TTL_MS = 12_000
FRESH = 2_000  # "set by the last call": PTTL within 2 s of the full ttl (loaded CI machines)
KINDS = ["sync", "async"]


async def age(r, prefix, *tids) -> dict:
    """Let the current expiry visibly run down; return the absolute expiry just before the next call,
    so that the call's refresh can be checked with ``assert_refreshed`` (absolute expiry times)."""
    await asyncio.sleep(0.1)
    return {t: max_expiry(r, prefix, t) for t in tids}


@pytest.mark.parametrize("kind", KINDS)
async def test_every_write_kind_sets_one_ttl_on_all_keys(kind, make_saver, sync_client, prefix):
    s = make_saver(kind, ttl={"default_ttl": TTL_MIN})
    r = sync_client
    t = new_tid("a")

    def check(tid: str, before: dict | None = None) -> None:
        assert_uniform_ttl(r, prefix, tid, TTL_MS, fresh_within=FRESH)
        if before is not None and tid in before:
            assert_refreshed(r, prefix, tid, before[tid])

    # put (with run ids, so the run index keys exist too), two namespaces
    c1 = await put_cp(s, t, run_id="run-1", step=0)
    check(t)
    b = await age(r, prefix, t)
    c2 = await put_cp(s, t, c1, run_id="run-1", step=1)
    check(t, b)
    await put_cp(s, t, run_id="run-2", ns="sub:1", step=0)
    c3 = await put_cp(s, t, c2, run_id="run-2", step=2)
    check(t)

    # put_writes
    b = await age(r, prefix, t)
    await call(s, "put_writes", c3, [("x", "w1"), ("y", "w2")], "task-1")
    check(t, b)
    # every per-thread key exists by now, but chain: a thread format 5 starts keeps no chain entries
    assert scan_thread(r, prefix, t) == {k for k in thread_keys(prefix, t)[0] if not k.endswith(b":chain")}

    # copy_thread into a target: the target's keys all carry the ttl
    dst = new_tid("copy")
    await call(s, "copy_thread", t, dst)
    check(dst)
    assert scan_thread(r, prefix, dst) == {k for k in thread_keys(prefix, dst)[0] if not k.endswith(b":chain")}
    # copying again into an existing (aged) target is refused and writes nothing: its expiry stays
    b = await age(r, prefix, dst)
    with pytest.raises(ThreadExistsError):
        await call(s, "copy_thread", t, dst)
    assert max_expiry(r, prefix, dst) == b[dst]

    # prune keep_latest
    b = await age(r, prefix, t)
    await call(s, "prune", [t], strategy="keep_latest")
    check(t, b)
    assert len(await call(s, "list", cfg(t, ""))) == 1

    # delete_for_runs of part of the thread (run-2 goes, run-1 stays on the copy and the original)
    c4 = await put_cp(s, t, c3, run_id="run-1", step=3)
    b = await age(r, prefix, t, dst)
    await call(s, "delete_for_runs", ["run-2"])
    check(t, b)
    check(dst, b)
    left = await call(s, "list", {"configurable": {"thread_id": t}})
    assert [x.config["configurable"]["checkpoint_id"] for x in left] == [c4["configurable"]["checkpoint_id"]]

    # pin: every key (and the slot index) persistent; unpin: the ttl again, on every key
    await call(s, "pin", t)
    assert_uniform_ttl(r, prefix, t, None)
    await call(s, "unpin", t)
    check(t)
    b = await age(r, prefix, t)
    await call(s, "unpin", t)  # unpinning again refreshes too (it is a write)
    check(t, b)


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
        b = await age(sync_client, prefix, t)
        await read()
        assert_uniform_ttl(sync_client, prefix, t, TTL_MS, fresh_within=FRESH)
        assert_refreshed(sync_client, prefix, t, b[t])
    # a saver without refresh_on_read leaves the expiry running down
    b = await age(sync_client, prefix, t)
    await call(plain, "get_tuple", cfg(t))
    await call(plain, "list", cfg(t))
    await call(plain, "get_delta_channel_history", config=cfg(t), channels=["x"])
    # cross-thread reads never refresh, even with refresh_on_read
    await call(s, "list", None)
    await call(s, "list", None, filter={"source": "loop"}, limit=5)
    assert max_expiry(sync_client, prefix, t) <= b[t]  # unchanged
    assert_uniform_ttl(sync_client, prefix, t, TTL_MS, fresh_within=FRESH)


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
    assert_uniform_ttl(sync_client, prefix, a, 6000, fresh_within=FRESH)
    _, ikeys = thread_keys(prefix, a)
    assert all(sync_client.pttl(k) > TTL_MS - FRESH for k in ikeys)


@pytest.mark.parametrize("kind", KINDS)
async def test_mixed_savers_on_one_thread(kind, make_saver, sync_client, prefix):
    """The last writer's configuration wins on every key: a no-ttl saver's write makes the whole
    thread (and its index entry) persistent, a ttl saver's next write gives it the ttl again."""
    r = sync_client
    ttl_s = make_saver(kind, ttl={"default_ttl": TTL_MIN})
    plain = make_saver(kind)
    t = new_tid("mix")
    c1 = await put_cp(ttl_s, t, run_id="r1")
    await call(ttl_s, "put_writes", c1, [("x", 1)], "task")
    assert_uniform_ttl(r, prefix, t, TTL_MS, fresh_within=FRESH)
    c2 = await put_cp(plain, t, c1, run_id="r1", step=1)
    assert_uniform_ttl(r, prefix, t, None)
    await call(plain, "put_writes", c2, [("x", 2)], "task")
    assert_uniform_ttl(r, prefix, t, None)
    await put_cp(ttl_s, t, c2, run_id="r1", step=2)
    assert_uniform_ttl(r, prefix, t, TTL_MS, fresh_within=FRESH)
    assert len(await call(plain, "list", cfg(t))) == 3


@pytest.mark.parametrize("kind", KINDS)
async def test_delete_thread_leaves_nothing(kind, make_saver, sync_client, prefix):
    from redis_saver.keys import enc
    from tests.sessions._util import ix_members, scan_prefix, twin_in_slot

    r = sync_client
    s = make_saver(kind, ttl={"default_ttl": TTL_MIN})
    t = new_tid("del")
    other = twin_in_slot(t)
    c = await put_cp(s, t, run_id="r1")
    await call(s, "put_writes", c, [("x", 1)], "task")
    await put_cp(s, other, run_id="r2")
    await call(s, "delete_thread", t)
    assert scan_thread(r, prefix, t) == set()
    ixt, ixr = ix_members(r, prefix, t)
    assert set(ixt) == {other.encode()} and not [m for m in ixr if enc(t) in m]
    await call(s, "delete_thread", other)
    assert {k for k in scan_prefix(r, prefix) if not k.endswith(b":schema")} == set()


@pytest.mark.parametrize(
    "ttl,ms",
    [({"default_ttl": 1}, 60_000), ({"default_ttl": 2.5}, 150_000), ("cfg", 30_000)],
    ids=["int-minutes", "float-minutes", "TTLConfig"],
)
async def test_ttl_units(ttl, ms, make_saver, sync_client, prefix):
    from redis_saver import TTLConfig

    if ttl == "cfg":
        ttl = TTLConfig(default_ttl=0.5, refresh_on_read=True)
    s = make_saver("sync", ttl=ttl)
    t = new_tid("u")
    c = await put_cp(s, t, run_id="r")
    await call(s, "put_writes", c, [("x", 1)], "task")
    assert_uniform_ttl(sync_client, prefix, t, ms, fresh_within=FRESH)
