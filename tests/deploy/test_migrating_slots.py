"""Every saver call while the thread's slot moves key by key: refused before it runs, or run to
its end, never stopped halfway.

While a slot is MIGRATING on its source and IMPORTING on its target, Redis runs a script only
where every key it declares exists, and fails a command of a running script on a key that is
not there ("Script attempted to access a non local key"), keeping the writes before it
(docs/architecture.md, "Slots that move"). Each case builds one history on two threads, holds
the slot of one of them at a stage of a move (none, some or all of its keys moved, the slot not
yet handed over), calls the operation straight at the source node and then at the target node
with ASKING (clients that follow no redirection: what a cluster client reaches), and checks
that each call was either refused before running (TRYAGAIN, ASK, MOVED), with nothing written
on either node, or completed; the move is then finished, a refused call sent again (as the
client's retry does), the same operation done on the other thread in a stable slot, and the two
threads compared key by key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import redis_saver
from devkit.servers import client_kwargs, start_cluster
from tests.deploy.helpers import cfg, new_prefix, summary, tcfg
from tests.deploy.slotmove import REFUSALS, SlotMove, key_slot, thread_in_slot
from tests.deploy.threadstate import History, apply, thread_state

pytestmark = pytest.mark.cluster

STAGES = ("none_moved", "some_moved", "all_moved")


@pytest.fixture(scope="module")
def mcluster() -> Iterator[Any]:
    """A 3-primary cluster of this module's own: its slots end up moved around."""
    c = start_cluster(masters=3, replicas_per_master=0)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def mclient(mcluster: Any) -> Iterator[Any]:
    rc = mcluster.client(**client_kwargs(5.0, 5.0))
    yield rc
    rc.close()


# --------------------------------------------------------------------------- the operations


def _delete_for_runs(s: Any, t: str, h: History) -> Any:
    return s.delete_for_runs(["r1"])


def _copy(s: Any, t: str, h: History) -> Any:
    s.copy_thread(t, t + "-copy")
    return [summary(x) for x in s.list(tcfg(t + "-copy"))]


OPS: dict[str, Callable[[Any, str, History], Any]] = {
    "put": lambda s, t, h: apply(s, t, h.next_put)["configurable"]["checkpoint_id"],
    "put_writes": lambda s, t, h: apply(s, t, ("writes", "", h.latest[""], [("messages", "late")], "task-late")),
    "put_writes_special": lambda s, t, h: apply(
        s, t, ("writes", "", h.latest[""], [("__error__", "again")], "task-err")
    ),
    "get_tuple": lambda s, t, h: summary(s.get_tuple(tcfg(t))),
    "list": lambda s, t, h: [summary(x) for x in s.list(tcfg(t))],
    "delta_history": lambda s, t, h: {
        k: (list(v["writes"]), v.get("seed"))
        for k, v in s.get_delta_channel_history(config=cfg(t, "", h.latest[""]), channels=["messages"]).items()
    },
    "prune_keep_latest": lambda s, t, h: s.prune([t]),
    "prune_delete": lambda s, t, h: s.prune([t], strategy="delete"),
    "delete_thread": lambda s, t, h: s.delete_thread(t),
    "delete_for_runs": _delete_for_runs,
    "copy_thread": _copy,
    "pin": lambda s, t, h: s.pin(t),
    "unpin": lambda s, t, h: (s.pin(t), s.unpin(t)),
    "rewrite_values": lambda s, t, h: dataclasses.replace(s.rewrite_values(t), thread_id=""),
}

SAVERS: dict[str, dict[str, Any]] = {
    "raw": {"compress": False},
    "compressed": {},
    "latest_only": {"compress": False, "history": "latest"},
    "ttl": {"compress": False, "ttl": {"default_ttl": 60, "refresh_on_read": True}},
}


def _saver(client: Any, prefix: str, kind: str) -> Any:
    return redis_saver.RedisSaver(client, prefix=prefix, eviction_check="off", **SAVERS[kind])


# --------------------------------------------------------------------------- the cases


def _call_at(
    move: SlotMove, node: Any, asking: bool, prefix: str, kind: str, fn: Any, tid: str, h: History
) -> tuple[str, Any]:
    """The operation on one node: ("refused", error) with nothing written, or ("done", result)."""
    client = move.client(node, asking)
    try:
        before = move.snapshot()
        try:
            return "done", fn(_saver(client, prefix, kind), tid, h)
        except REFUSALS as e:
            assert move.snapshot() == before, f"refused with {e!r}, but keys changed"
            return "refused", e
    finally:
        client.close()


def two_threads(rc: Any, tag: str, kind: str) -> tuple[Any, str, History, str, str, int]:
    """A saver on a new prefix and one history built on two threads: ``ref`` and ``tid``, whose
    slot is half the slot space away. Returns (saver, prefix, history, ref, tid, tid's slot)."""
    prefix = new_prefix(tag)
    saver = _saver(rc, prefix, kind)
    saver.setup()
    h = History()
    ref = f"ref-{prefix[-10:]}"
    slot = (key_slot(saver.keys.thread_keys(ref)[0]) + 8192) % 16384
    tid = thread_in_slot(saver.keys, slot)
    for o in h.ops:
        apply(saver, ref, o)
        apply(saver, tid, o)
    return saver, prefix, h, ref, tid, slot


def run_case(cluster: Any, rc: Any, kind: str, op: str, stage: str) -> dict[str, str]:
    stable, prefix, h, ref, tid, slot = two_threads(rc, "mig", kind)
    move = SlotMove(cluster, slot)
    move.open()
    keys = stable.keys.thread_keys(tid)
    if stage == "some_moved":
        move.migrate([keys[i] for i in (1, 3, 5, 7, 9)])
    elif stage == "all_moved":
        move.migrate(move.keys_at(move.src))
    fn = OPS[op]
    outcome: dict[str, str] = {}
    result: Any = None
    for where, node, asking in (("src", move.src, False), ("dst", move.dst, True)):
        what, value = _call_at(move, node, asking, prefix, kind, fn, tid, h)
        outcome[where] = what
        if what == "done":
            result = value
            break
    move.finish()
    if "done" not in outcome.values():
        result = fn(stable, tid, h)  # sent again once the slot has moved
    expected = fn(stable, ref, h)
    assert result == expected, outcome
    exact = kind != "compressed"
    ttl = kind == "ttl"
    assert thread_state(rc, stable, tid, exact, ttl) == thread_state(rc, stable, ref, exact, ttl), outcome
    if op == "copy_thread":
        assert thread_state(rc, stable, tid + "-copy", False, ttl) == thread_state(
            rc, stable, ref + "-copy", False, ttl
        )
    return outcome


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("kind", list(SAVERS))
def test_call_is_refused_or_completes_while_the_slot_moves(mcluster, mclient, kind, op, stage):
    outcome = run_case(mcluster, mclient, kind, op, stage)
    # a thread that holds all 11 keys (compress=False, run ids, writes) runs where they all are
    # (copy_thread: unless its target thread's slot is on another node)
    if kind == "raw" and stage == "none_moved" and op != "copy_thread":
        assert outcome["src"] == "done", outcome
    # a thread whose keys are on two nodes: every call on it is refused (delete_for_runs is a
    # call on every thread holding the runs, found through the slot index of each node)
    if stage == "some_moved" and op != "delete_for_runs":
        assert "done" not in outcome.values(), outcome


def test_prune_that_drops_every_run_link_runs_to_its_end_on_the_slot_it_leaves(mcluster, mclient):
    """prune(keep_latest), compress off, where the kept checkpoint has no run id: the prune
    empties the thread's run links and used to read them again, failing after deleting the
    older checkpoints (a kept checkpoint naming a dropped parent, stale run-index entries and
    unreferenced values left behind)."""
    assert run_case(mcluster, mclient, "raw", "prune_keep_latest", "none_moved") == {"src": "done"}


def test_delete_of_the_only_thread_in_its_slot_runs_to_its_end_on_the_slot_it_leaves(mcluster, mclient):
    """delete_thread of the only thread in its slot empties the slot index and used to read it
    again, failing after the thread was deleted."""
    assert run_case(mcluster, mclient, "raw", "delete_thread", "none_moved") == {"src": "done"}
    assert run_case(mcluster, mclient, "raw", "prune_delete", "none_moved") == {"src": "done"}


def test_put_on_a_thread_that_lost_a_key_is_refused_before_writing_while_its_slot_moves(mcluster, mclient):
    """A put that finds the thread damaged forgets it and writes afresh; no node may create the
    thread's keys while its slot moves, so there the put is refused before its first write."""
    prefix = new_prefix("dmg")
    saver = _saver(mclient, prefix, "raw")
    saver.setup()
    h = History()
    tid = thread_in_slot(saver.keys, key_slot(saver.keys.thread_keys(f"x-{prefix[-10:]}")[0]))
    for o in h.ops:
        apply(saver, tid, o)
    mclient.hset(saver.keys.thread_keys(tid)[0], "dmg", "wr")  # what earlier versions wrote on a loss
    move = SlotMove(mcluster, key_slot(saver.keys.thread_keys(tid)[0]))
    move.open()
    what, err = _call_at(move, move.src, False, prefix, "raw", OPS["put"], tid, h)
    move.finish()
    assert what == "refused" and "moving" in str(err), err
    # once the slot moved: as on any slot, the put forgets the thread, and refuses to continue
    # from a parent it no longer holds
    with pytest.raises(redis_saver.ThreadEvictedError):
        OPS["put"](saver, tid, h)
