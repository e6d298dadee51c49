"""Live resharding under load (``devkit/reshard.py``, small): sync savers (one with
``compress=False`` and run ids) and an AsyncRedisSaver with many tasks keep working while
``redis-cli --cluster reshard`` moves slots and a slow round holds slots half-moved for 2 s.
Every call succeeds, no read is wrong, nothing acknowledged is lost, no thread is damaged, no
key leaks, no script stops halfway ("non local key"), and no call takes longer than the
half-moved window + 2 s (the window as measured: on a loaded machine opening and finishing the
slow round's slots adds to its hold). The full version is ``python -m bench reshard``.
"""

from __future__ import annotations

import pytest

from devkit import reshard as R
from devkit.servers import start_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SMALL = R.Plan(
    sync_workers=2, sync_threads=6, tasks=8, async_threads=80, rounds=2, round_slots=400, slow_slots=6, hold=2.0,
    settle=1.0,
)  # fmt: skip


def test_a_live_reshard_fails_no_call_and_loses_nothing():
    cluster = start_cluster(masters=3, replicas_per_master=0)
    try:
        report = R.run(cluster, SMALL, prefix="live")
    finally:
        cluster.stop()
    summary = report.summary()
    print(f"\nlive reshard: {summary}\nhalfway: {report.halfway[:5]}")
    assert summary["calls"] > 1000 and report.moved_slots == 800 and report.half_moved == 6
    assert not report.errors, report.errors[:10]
    assert not report.wrong_reads, report.wrong_reads[:10]
    assert not report.lost, report.lost[:10]
    assert not report.damaged, report.damaged[:10]
    assert not report.leaks, report.leaks[:10]
    assert not report.halfway, report.halfway[:10]
    assert report.slowest[0] < max(SMALL.hold, report.window_s) + 2.0, (report.slowest, report.window_s)


def _valkey9() -> str:
    from devkit.matrix import CACHE, Unavailable, find

    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        return find("valkey-9").binary
    except Unavailable as e:
        pytest.skip(f"valkey-9 not available: {e}")


def test_valkey_atomic_slot_migrations_under_load_fail_no_call_and_lose_nothing():
    plan = R.Plan(
        sync_workers=2, sync_threads=6, tasks=8, async_threads=80, rounds=3, round_slots=2000, slow_slots=6,
        hold=2.0, settle=1.0, atomic=True,
    )  # fmt: skip
    cluster = start_cluster(masters=3, replicas_per_master=0, binary=_valkey9())
    try:
        report = R.run(cluster, plan, prefix="atomic")
    finally:
        cluster.stop()
    summary = report.summary()
    print(f"\nvalkey atomic reshard: {summary}\nhalfway: {report.halfway[:5]}")
    assert summary["calls"] > 500 and report.moved_slots == 6000 and report.half_moved == 6
    assert report.during_rounds > 0  # calls were served while the slots moved atomically
    assert not report.errors, report.errors[:10]
    assert not report.wrong_reads, report.wrong_reads[:10]
    assert not report.lost, report.lost[:10]
    assert not report.damaged, report.damaged[:10]
    assert not report.leaks, report.leaks[:10]
    assert not report.halfway, report.halfway[:10]
    assert report.slowest[0] < max(plan.hold, report.window_s) + 2.0, (report.slowest, report.window_s)
