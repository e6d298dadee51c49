"""Helpers for tests/sessions: drive sync/async savers alike, inspect a thread's keys."""

from __future__ import annotations

import uuid
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from redis_saver import AsyncRedisSaver, KeySchema
from redis_saver.keys import glob_escape, key_slot, thread_tag

TOL_MS = 10  # keys touched by one script get their expiry within a few ms of each other


async def call(saver: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """``saver.method(...)`` for RedisSaver, ``await saver.amethod(...)`` for AsyncRedisSaver."""
    if isinstance(saver, AsyncRedisSaver):
        if method == "list":
            return [t async for t in saver.alist(*args, **kwargs)]
        return await getattr(saver, "a" + method)(*args, **kwargs)
    if method == "list":
        return list(saver.list(*args, **kwargs))
    return getattr(saver, method)(*args, **kwargs)


def cfg(tid: str, ns: str = "", cid: str | None = None) -> dict:
    c: dict = {"configurable": {"thread_id": tid, "checkpoint_ns": ns}}
    if cid is not None:
        c["configurable"]["checkpoint_id"] = cid
    return c


async def put_cp(saver: Any, tid: str, parent: dict | None = None, *, ns: str = "", run_id: str | None = None,
                 step: int = 0, value: Any = None) -> dict:
    """Put one checkpoint (child of ``parent``'s checkpoint id when given); return its config."""
    cp = empty_checkpoint()
    v = str(step + 1)
    cp["channel_values"] = {"x": value if value is not None else f"v{step}"}
    cp["channel_versions"] = {"x": v}
    meta: dict = {"source": "loop", "step": step}
    if run_id is not None:
        meta["run_id"] = run_id
    c = cfg(tid, ns)
    if parent is not None:
        c["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    return await call(saver, "put", c, cp, meta, {"x": v})


def thread_keys(prefix: str, tid: str) -> tuple[list[bytes], list[bytes]]:
    """(the per-thread keys, the 2 slot-index keys) of ``tid``."""
    ks = KeySchema(prefix).thread_keys(tid)
    return ks[:-2], ks[-2:]


def thread_key(prefix: str, tid: str, suffix: str) -> bytes:
    """One per-thread key by its suffix (``meta``, ``cp``, ``wr``, ...)."""
    (key,) = [k for k in thread_keys(prefix, tid)[0] if k.endswith(b":" + suffix.encode())]
    return key


def scan_thread(client: Any, prefix: str, tid: str) -> set[bytes]:
    """Every key of the thread found by a SCAN of ``<prefix>:{<tag>}:*`` (glob-escaped)."""
    base = thread_keys(prefix, tid)[0][0].rsplit(b":", 1)[0] + b":"
    return set(client.scan_iter(match=glob_escape(base) + b"*", count=1000))


def scan_prefix(client: Any, prefix: str) -> set[bytes]:
    return set(client.scan_iter(match=KeySchema(prefix).scan_pattern(), count=1000))


def pttls(client: Any, keys: list[bytes], *, transaction: bool = False) -> dict[bytes, int]:
    p = client.pipeline(transaction=transaction)
    for k in keys:
        p.pttl(k)
    return dict(zip(keys, p.execute(), strict=True))


def assert_uniform_ttl(client: Any, prefix: str, tid: str, ttl_ms: int | None, *, fresh_within: int = 600) -> int:
    """Every existing key of the thread has the same PTTL (within TOL_MS), no key of the thread
    exists outside the known per-thread keys, and the slot-index keys expire no earlier than the thread.

    ``ttl_ms=None``: every key must be persistent (pinned / no ttl). Else every PTTL must be in
    ``(ttl_ms - fresh_within, ttl_ms]`` (i.e. refreshed by the last call). Returns the min PTTL.
    """
    tkeys, ikeys = thread_keys(prefix, tid)
    found = scan_thread(client, prefix, tid)
    assert found, f"thread {tid!r} has no keys"
    assert found <= set(tkeys), f"unexpected keys: {found - set(tkeys)}"
    assert thread_key(prefix, tid, "meta") in found
    # the thread's and the index keys' PTTLs in one atomic snapshot: read apart, on a loaded machine
    # the index keys' PTTLs, read later, could look shorter than the thread's by more than TOL_MS
    both = pttls(client, sorted(found) + list(ikeys), transaction=True)
    t = {k: both[k] for k in found}
    ix = {k: both[k] for k in ikeys}
    assert ix[ikeys[0]] != -2, f"slot-index threads key missing: {ix}"
    ix = {k: v for k, v in ix.items() if v != -2}  # the runs index exists once a checkpoint has a run_id
    if ttl_ms is None:
        assert set(t.values()) == {-1}, f"not all persistent: {t}"
        assert set(ix.values()) == {-1}, f"index keys not persistent: {ix}"
        assert_index_score(client, prefix, tid)
        return -1
    vals = list(t.values())
    assert all(v > 0 for v in vals), f"some keys without expiry: {t}"
    assert max(vals) - min(vals) <= TOL_MS, f"PTTLs differ: {t}"
    assert ttl_ms - fresh_within < min(vals) <= ttl_ms, f"PTTL {vals} not freshly set to {ttl_ms}"
    for k, v in ix.items():
        assert v == -1 or v >= max(vals) - TOL_MS, f"index key {k!r} expires before the thread: {v} < {vals}"
    assert_index_score(client, prefix, tid)
    return min(vals)


def assert_index_score(client: Any, prefix: str, tid: str) -> None:
    """The thread's score in the slot index is its expiry (ms since epoch, rounded up to
    ttl/64), +inf when persistent."""
    tkeys, ikeys = thread_keys(prefix, tid)
    p = client.pipeline(transaction=True)  # one atomic snapshot
    p.time()
    p.pttl(tkeys[0])
    p.zscore(ikeys[0], tid)
    (sec, usec), pttl, score = p.execute()
    assert score is not None, f"thread {tid!r} missing from its slot index"
    if pttl == -1:
        assert score == float("inf"), score
    else:
        # the score is the expiry rounded up to ttl/64 (lua/_lib.lua touch())
        expiry = sec * 1000 + usec // 1000 + pttl
        step = (pttl + TOL_MS) // 64 + 1
        assert -TOL_MS <= score - expiry <= step + TOL_MS, f"index score {score} != expiry {expiry} (+{step})"


def expiry_times(client: Any, prefix: str, tid: str) -> dict[bytes, int]:
    """PEXPIRETIME (absolute expiry, ms since epoch; -1 = none) of the thread's existing keys."""
    p = client.pipeline(transaction=False)
    keys = thread_keys(prefix, tid)[0]
    for k in keys:
        p.execute_command("PEXPIRETIME", k)
    return {k: v for k, v in zip(keys, p.execute(), strict=True) if v != -2}


def max_expiry(client: Any, prefix: str, tid: str) -> int:
    """Latest absolute expiry among the thread's keys (read it just before an operation)."""
    return max(expiry_times(client, prefix, tid).values())


def assert_refreshed(client: Any, prefix: str, tid: str, before: int, min_gain_ms: int = 50) -> None:
    """Every key's absolute expiry moved past ``before`` (``max_expiry`` read before the call).
    Load-independent: absolute expiry times do not move unless a call sets them."""
    now = expiry_times(client, prefix, tid)
    assert min(now.values()) >= before + min_gain_ms, f"not refreshed: {now} vs {before} before the call"


def twin_in_slot(tid: str, base: str = "twin") -> str:
    """A thread id different from ``tid`` whose keys hash to the same slot (shares the slot index)."""
    slot = key_slot(thread_tag(tid))
    for i in range(10_000_000):
        cand = f"{base}-{i}"
        if cand != tid and key_slot(thread_tag(cand)) == slot:
            return cand
    raise AssertionError("unreachable")


def other_slot(tid: str, base: str = "far") -> str:
    slot = key_slot(thread_tag(tid))
    for i in range(1000):
        cand = f"{base}-{i}"
        if key_slot(thread_tag(cand)) != slot:
            return cand
    raise AssertionError("unreachable")


def ix_members(client: Any, prefix: str, tid: str) -> tuple[dict[bytes, float], list[bytes]]:
    """(threads ZSET with scores, runs ZSET members) of the slot index ``tid`` belongs to."""
    _, (ixt, ixr) = thread_keys(prefix, tid)
    return dict(client.zrange(ixt, 0, -1, withscores=True)), client.zrange(ixr, 0, -1)


def new_tid(name: str = "t") -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"

