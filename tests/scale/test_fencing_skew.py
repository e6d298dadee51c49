"""Fencing on a real redis-server with hand-made checkpoint ids that sort both ways.

A namespace's head is the checkpoint its last fenced put stored (while still stored; else
its greatest id). A fenced put must name the head as its parent, so a parent never gets two
fenced children, even when a child's id sorts before its parent's (clock skew between hosts).
"""

from __future__ import annotations

from typing import Any

import pytest

from redis_saver import ConflictError
from tests.lifecycle._util import op

# ids as uuid6 strings would be; only their order matters here
P = "1ef00000-0000-6000-8000-000000000500"
EARLY_1 = "1ef00000-0000-6000-8000-000000000100"  # sorts before P (a host with a slow clock)
EARLY_2 = "1ef00000-0000-6000-8000-000000000200"
LATE_1 = "1ef00000-0000-6000-8000-000000000900"  # sorts after P
LATE_2 = "1ef00000-0000-6000-8000-000000000950"
ROOT_EARLY = "1ef00000-0000-6000-8000-000000000050"


_call = op  # sync or async, list collected


def _ckpt(cid: str, step: int = 0) -> dict:
    return {"v": 4, "id": cid, "ts": "2026-01-01T00:00:00+00:00", "channel_values": {"a": step},
            "channel_versions": {"a": str(step + 1)}, "versions_seen": {}, "updated_channels": None}


def _cfg(parent: str | None = None, ns: str = "", tid: str = "t") -> dict:
    c: dict[str, Any] = {"thread_id": tid, "checkpoint_ns": ns}
    if parent:
        c["checkpoint_id"] = parent
    return {"configurable": c}


async def _put(saver: Any, parent: str | None, cid: str, ns: str = "", tid: str = "t", md: dict | None = None) -> Any:
    step = {P: 1}.get(cid, 2)
    return await _call(
        saver, "put", _cfg(parent, ns, tid), _ckpt(cid, step), md or {"step": step}, {"a": str(step + 1)}
    )


def _parents(tuples: list) -> dict[str, str | None]:
    return {
        t.config["configurable"]["checkpoint_id"]: (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        for t in tuples
    }


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("first,second", [(EARLY_1, EARLY_2), (EARLY_1, LATE_1), (LATE_1, EARLY_1), (LATE_1, LATE_2)])
async def test_second_child_of_the_same_parent_conflicts_whatever_the_id_order(make_saver, kind, first, second):
    s = make_saver(kind, fencing=True)
    await _put(s, None, P)
    await _put(s, P, first)
    with pytest.raises(ConflictError) as info:
        await _put(s, P, second)
    assert first in str(info.value)  # names the head to resume from
    await _put(s, P, first)  # an idempotent retry of the accepted put still succeeds
    # the head moves on from the accepted child, whatever its id's order
    third = "1ef00000-0000-6000-8000-000000000300" if first < P else "1ef00000-0000-6000-8000-000000000999"
    await _put(s, first, third)
    await _put(s, P, first)  # a late retry of the accepted put does not move the head back
    with pytest.raises(ConflictError):
        await _put(s, P, second)
    with pytest.raises(ConflictError):
        await _put(s, first, second)  # a second child of the (former) head
    got = _parents(await _call(s, "list", _cfg()))
    assert got == {P: None, first: P, third: first}


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_first_put_of_a_thread(make_saver, kind):
    s = make_saver(kind, fencing=True)
    await _put(s, None, P)  # empty namespace: passes
    await _put(s, None, P)  # its retry too
    for cid in (EARLY_1, LATE_1):
        with pytest.raises(ConflictError):
            await _put(s, None, cid)  # a second root on a non-empty namespace conflicts
    await _put(s, None, EARLY_1, ns="child")  # namespaces are fenced each on their own
    with pytest.raises(ConflictError):
        await _put(s, None, EARLY_2, ns="child")
    await _put(s, EARLY_1, LATE_1, ns="child")
    assert len(await _call(s, "list", _cfg())) == 1


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_unfenced_puts_make_the_greatest_id_the_head_again(make_saver, kind):
    fenced, plain = make_saver(kind, fencing=True), make_saver(kind)
    await _put(fenced, None, P)
    await _put(fenced, P, EARLY_1)  # head: EARLY_1 (sorts first)
    await _put(plain, EARLY_1, LATE_1)  # an unfenced writer moves the namespace on
    with pytest.raises(ConflictError):
        await _put(fenced, EARLY_1, EARLY_2)
    await _put(fenced, LATE_1, LATE_2)  # from what get_tuple shows as latest: accepted
    assert (await _call(fenced, "get_tuple", _cfg())).config["configurable"]["checkpoint_id"] == LATE_2


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_deleted_head_falls_back_to_the_greatest_id(make_saver, kind):
    s = make_saver(kind, fencing=True)
    await _put(s, None, P, md={"run_id": "r1"})
    await _put(s, P, EARLY_1, md={"run_id": "r2"})  # head, sorting before its parent
    await _call(s, "delete_for_runs", ["r2"])
    assert [t.config["configurable"]["checkpoint_id"] for t in await _call(s, "list", _cfg())] == [P]
    with pytest.raises(ConflictError):
        await _put(s, EARLY_1, EARLY_2)  # the deleted head is no parent to build on
    await _put(s, P, LATE_1)  # the greatest id is the head again
    with pytest.raises(ConflictError):
        await _put(s, P, LATE_2)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_latest_only_mode_keeps_the_fenced_head(make_saver, kind):
    s = make_saver(kind, fencing=True, history="latest")
    await _put(s, None, P)
    await _put(s, P, EARLY_1)  # sorts before P, yet it is the latest: P goes, not EARLY_1
    got = await _call(s, "list", _cfg())
    assert _parents(got) == {EARLY_1: P}
    with pytest.raises(ConflictError):
        await _put(s, P, EARLY_2)
    await _put(s, EARLY_1, EARLY_2)
    assert _parents(await _call(s, "list", _cfg())) == {EARLY_2: EARLY_1}
    # without fencing, latest-only keeps the greatest id (an out-of-order put is stale)
    plain = make_saver(kind, history="latest")
    await _put(plain, None, LATE_1, tid="u")
    await _put(plain, LATE_1, EARLY_1, tid="u")
    assert list(_parents(await _call(plain, "list", _cfg(tid="u")))) == [LATE_1]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_copy_thread_target_fences_on_its_greatest_id(make_saver, kind):
    s = make_saver(kind, fencing=True)
    await _put(s, None, P, tid="src")
    await _put(s, P, EARLY_1, tid="src")  # the source's head (EARLY_1) is not its greatest id (P)
    await _call(s, "copy_thread", "src", "dst")
    # copy_thread does not carry heads: the target's head is its greatest id
    with pytest.raises(ConflictError):
        await _put(s, EARLY_1, EARLY_2, tid="dst")
    await _put(s, P, LATE_1, tid="dst")
    # the source keeps its head
    with pytest.raises(ConflictError):
        await _put(s, P, LATE_2, tid="src")
    await _put(s, EARLY_1, EARLY_2, tid="src")


async def test_fencing_off_touches_no_head(make_saver, sync_client):
    s = make_saver("sync")
    await _put(s, None, P)
    await _put(s, P, EARLY_1)
    meta = sync_client.hgetall(s.keys.thread_keys("t")[0])
    assert not [f for f in meta if f.startswith(b"h") or f == b"fh"], meta
    # unfenced puts record no head: a fenced writer then fences on the greatest id (P),
    # as before heads existed; its put records the first head
    f = make_saver("sync", fencing=True)
    await _put(f, P, EARLY_2)
    assert sync_client.hget(s.keys.thread_keys("t")[0], b"h\x00") == EARLY_2.encode()
    with pytest.raises(ConflictError):
        await _put(f, P, LATE_1)
