"""Sessions on a real server in real time (ttl 0.02 min = 1.2 s):
whole-thread expiry, refresh_on_read, pinning, and the cross-thread index after expiry."""

from __future__ import annotations

import asyncio
import time

from redis_saver import KeySchema
from redis_saver.keys import enc
from tests.sessions._util import (
    assert_refreshed,
    assert_uniform_ttl,
    call,
    cfg,
    ix_members,
    max_expiry,
    new_tid,
    other_slot,
    put_cp,
    scan_prefix,
    scan_thread,
    thread_keys,
    twin_in_slot,
)

TTL = 0.02  # minutes
TTL_MS = 1200
PAST = 1.5  # seconds: comfortably past the ttl
LOADED = 1000  # ms: "just set to the ttl" on a loaded 2-CPU CI box (PTTL in (200, 1200])
KINDS = ["sync", "async"]


async def both_kinds(scenario, make_saver, sync_client, prefix):
    """Run the sync and the async variant of a real-time scenario concurrently (one shared wait),
    each under its own key prefix. Sync saver calls block the loop only for their round trip."""

    def maker(pfx):
        return lambda kind, **kw: make_saver(kind, prefix=pfx, **kw)

    results = await asyncio.gather(
        *(scenario(k, maker(f"{prefix}-{k}"), sync_client, f"{prefix}-{k}") for k in KINDS), return_exceptions=True
    )
    for k, res in zip(KINDS, results, strict=True):
        if isinstance(res, BaseException):
            raise AssertionError(f"{k} saver: {res!r}") from res


def live_keys(client, prefix):
    """Every key under the prefix except the optional schema marker written by setup()."""
    return scan_prefix(client, prefix) - {KeySchema(prefix).schema_key()}


async def _idle_expires_read_thread_survives_only_with_refresh(kind, make_saver, sync_client, prefix):
    r = sync_client
    refreshing = make_saver(kind, ttl={"default_ttl": TTL, "refresh_on_read": True})
    plain = make_saver(kind, ttl={"default_ttl": TTL})
    idle, active, noref = new_tid("idle"), new_tid("active"), new_tid("noref")
    for t in (idle, active, noref):
        c = await put_cp(plain, t, run_id="r-" + t)
        await call(plain, "put_writes", c, [("x", 1)], "task")
        assert_uniform_ttl(r, prefix, t, TTL_MS, fresh_within=LOADED)

    t0 = time.monotonic()
    idle_gone_at = noref_gone_at = None
    while (el := time.monotonic() - t0) < 3.0:  # 2.5x the ttl, reading every ~0.25 s
        got = await call(refreshing, "get_tuple", cfg(active))
        assert got is not None, f"actively read thread expired after {el:.2f}s"
        if el > 1.5:  # also the other read paths refresh
            await call(refreshing, "list", cfg(active), limit=1)
        n = await call(plain, "get_tuple", cfg(noref))  # reads without refresh_on_read: no extension
        if n is None and noref_gone_at is None:
            noref_gone_at = el
        if idle_gone_at is None and not scan_thread(r, prefix, idle):
            idle_gone_at = el
        await asyncio.sleep(0.25)

    assert idle_gone_at is not None and 0.7 < idle_gone_at < 2.7, idle_gone_at
    assert noref_gone_at is not None and 0.7 < noref_gone_at < 2.7, noref_gone_at
    for t in (idle, noref):
        assert scan_thread(r, prefix, t) == set()
        # a refreshing read of an expired thread finds nothing and resurrects nothing
        assert await call(refreshing, "get_tuple", cfg(t)) is None
        assert await call(refreshing, "list", cfg(t)) == []
        assert scan_thread(r, prefix, t) == set()
    b = max_expiry(r, prefix, active)
    await asyncio.sleep(0.1)
    assert await call(refreshing, "get_tuple", cfg(active)) is not None
    assert_refreshed(r, prefix, active, b)  # absolute expiry moved: load-independent
    assert_uniform_ttl(r, prefix, active, TTL_MS, fresh_within=TTL_MS)

    # stop reading: the active thread expires too, and with it the whole prefix is empty
    await asyncio.sleep(PAST)
    assert scan_thread(r, prefix, active) == set()
    assert await call(plain, "get_tuple", cfg(active)) is None
    assert live_keys(r, prefix) == set(), "stale keys left after every thread expired"


async def _pinned_thread_survives_and_unpin_restores_expiry(kind, make_saver, sync_client, prefix):
    r = sync_client
    s = make_saver(kind, ttl={"default_ttl": TTL})
    pinned = new_tid("pin")
    twin = twin_in_slot(pinned)  # unpinned, same slot index
    early = new_tid("early")  # pinned before its first checkpoint
    c = await put_cp(s, pinned, run_id="rp")
    await put_cp(s, twin, run_id="rt")
    await call(s, "pin", pinned)
    await call(s, "pin", early)
    await put_cp(s, early, run_id="re")
    assert_uniform_ttl(r, prefix, pinned, None)
    assert_uniform_ttl(r, prefix, early, None)

    await asyncio.sleep(PAST)
    assert scan_thread(r, prefix, twin) == set()
    assert (await call(s, "get_tuple", cfg(pinned))).config == c
    assert await call(s, "get_tuple", cfg(early)) is not None

    # later writes keep it pinned (PTTL -1 everywhere)
    c2 = await put_cp(s, pinned, c, run_id="rp", step=1)
    assert_uniform_ttl(r, prefix, pinned, None)
    await call(s, "put_writes", c2, [("x", 2)], "task")
    assert_uniform_ttl(r, prefix, pinned, None)
    await call(s, "prune", [pinned], strategy="keep_latest")
    assert_uniform_ttl(r, prefix, pinned, None)
    # that write in the slot purged the expired twin from the slot index
    ixt, ixr = ix_members(r, prefix, pinned)
    assert set(ixt) == {pinned.encode()} and ixt[pinned.encode()] == float("inf")
    assert not [m for m in ixr if enc(twin) in m], ixr

    # unpin: the ttl applies again, then the thread expires
    await call(s, "unpin", pinned)
    await call(s, "unpin", early)
    assert_uniform_ttl(r, prefix, pinned, TTL_MS, fresh_within=LOADED)
    assert_uniform_ttl(r, prefix, early, TTL_MS, fresh_within=LOADED)
    await asyncio.sleep(PAST)
    assert scan_thread(r, prefix, pinned) == set()
    assert scan_thread(r, prefix, early) == set()
    assert live_keys(r, prefix) == set()
    # unpinning a thread that no longer exists writes nothing
    await call(s, "unpin", pinned)
    assert live_keys(r, prefix) == set()


async def _expired_thread_leaves_cross_thread_views(kind, make_saver, sync_client, prefix):
    r = sync_client
    ttl_saver = make_saver(kind, ttl={"default_ttl": TTL})
    forever = make_saver(kind)  # same prefix, no ttl
    a = new_tid("exp")
    b = twin_in_slot(a)  # lives forever in a's slot: keeps the slot index alive
    c = other_slot(a)  # expires alone in its own slot
    ca = await put_cp(ttl_saver, a, run_id="ra")
    await put_cp(ttl_saver, a, ca, run_id="shared", step=1)
    cb = await put_cp(forever, b, run_id="rb")
    cb2 = await put_cp(forever, b, cb, run_id="shared", step=1)
    await put_cp(ttl_saver, c, run_id="rc")
    everything = await call(forever, "list", None)
    assert {x.config["configurable"]["thread_id"] for x in everything} == {a, b, c}
    assert len(everything) == 5

    await asyncio.sleep(PAST)
    assert scan_thread(r, prefix, a) == set() and scan_thread(r, prefix, c) == set()

    # no write in a's slot yet: the slot index may still hold a's entries, but nobody sees them
    listed = await call(ttl_saver, "list", None)
    assert [x.config["configurable"]["thread_id"] for x in listed] == [b, b]
    assert await call(forever, "list", None, limit=10) == listed
    await call(ttl_saver, "delete_for_runs", ["ra", "rc"])
    await call(ttl_saver, "delete_for_runs", ["shared"])  # deletes b's "shared" checkpoint only
    assert scan_thread(r, prefix, a) == set() and scan_thread(r, prefix, c) == set()
    left = await call(forever, "list", None)
    assert [x.config for x in left] == [cb]

    # a's slot saw writes since (the delete_for_runs on b): no stale entries for a remain
    await put_cp(forever, b, cb, run_id="rb", step=2)
    ixt, ixr = ix_members(r, prefix, a)
    assert set(ixt) == {b.encode()}, ixt
    assert not [m for m in ixr if enc(a) in m], ixr
    assert {m[:1] for m in ixr} == {b"r", b"t"} and all(enc(b) in m for m in ixr)
    # c was alone in its slot: the index keys expired with it
    _, c_ix = thread_keys(prefix, c)
    assert r.exists(*c_ix) == 0
    # nothing else is left under the prefix: only b's keys and its slot index
    assert live_keys(r, prefix) <= set(thread_keys(prefix, b)[0] + thread_keys(prefix, b)[1])
    assert await call(forever, "get_tuple", cfg(b, cid=cb2["configurable"]["checkpoint_id"])) is None


async def test_idle_expires_read_thread_survives_only_with_refresh(make_saver, sync_client, prefix):
    await both_kinds(_idle_expires_read_thread_survives_only_with_refresh, make_saver, sync_client, prefix)


async def test_pinned_thread_survives_and_unpin_restores_expiry(make_saver, sync_client, prefix):
    await both_kinds(_pinned_thread_survives_and_unpin_restores_expiry, make_saver, sync_client, prefix)


async def test_expired_thread_leaves_cross_thread_views(make_saver, sync_client, prefix):
    await both_kinds(_expired_thread_leaves_cross_thread_views, make_saver, sync_client, prefix)
