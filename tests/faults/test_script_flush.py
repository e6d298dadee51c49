"""A storm of SCRIPT FLUSH never reaches the caller.

``redis-cli -r -1 -i 0.002 SCRIPT FLUSH`` empties the server's script cache every ~2 ms (the
same state as a restart, or a failover to a replica that never loaded the scripts) while
sync savers in threads and async savers in tasks run every kind of call: single EVALSHAs and
the fan-outs sent as pipelines (list(None), prune, delete_for_runs). The driver must answer a
NOSCRIPT with EVAL of the script body, so there are 0 errors and every answer is right.
The server's own counters prove the storm hit: NOSCRIPT replies and EVALs happened.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
from collections import Counter

import pytest
import redis
import redis.asyncio

from redis_saver import AsyncRedisSaver, RedisSaver
from tests.faults._util import Ops, run_rounds, stat_count
from tests.servers import async_client_kwargs, client_kwargs, start_standalone

SECONDS = 2.0
SYNC_THREADS = 3
ASYNC_TASKS = 3


@pytest.fixture
def server():
    with start_standalone() as s:
        yield s


def _storm(server) -> subprocess.Popen:
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli not found")
    return subprocess.Popen(
        [cli, "-h", server.host, "-p", str(server.port), "-r", "-1", "-i", "0.002", "SCRIPT", "FLUSH"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _sync_worker(server, name: str, out: list[Ops]) -> None:
    client = redis.Redis(host=server.host, port=server.port, **client_kwargs())
    try:
        saver = RedisSaver(client, prefix="flush")
        ops = Ops(saver)
        out.append(ops)
        asyncio.run(run_rounds(ops, name, SECONDS, {}))
    finally:
        client.close()


async def _async_workers(server, out: list[Ops]) -> None:
    clients = [redis.asyncio.Redis(host=server.host, port=server.port, **async_client_kwargs()) for _ in range(ASYNC_TASKS)]
    try:
        opss = [Ops(AsyncRedisSaver(c, prefix="flush")) for c in clients]
        out.extend(opss)
        await asyncio.gather(*(run_rounds(ops, f"a{i}", SECONDS, {}) for i, ops in enumerate(opss)))
    finally:
        for c in clients:
            await c.aclose()


def _totals(opss: list[Ops]) -> tuple[Counter, Counter, list[str]]:
    calls, errors, samples = Counter(), Counter(), []
    for ops in opss:
        calls.update(ops.calls)
        errors.update(ops.errors)
        samples += ops.samples
    return calls, errors, samples


def test_script_flush_storm_never_reaches_the_caller(server):
    setup = redis.Redis(host=server.host, port=server.port, **client_kwargs())
    RedisSaver(setup, prefix="flush").setup()
    setup.close()
    sync_ops: list[Ops] = []
    async_ops: list[Ops] = []
    storm = _storm(server)
    try:
        threads = [threading.Thread(target=_sync_worker, args=(server, f"s{i}", sync_ops)) for i in range(SYNC_THREADS)]
        for t in threads:
            t.start()
        asyncio.run(_async_workers(server, async_ops))
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)
    finally:
        storm.kill()
        storm.wait()

    flushes = stat_count(server, "commandstats", "cmdstat_script|flush")
    noscript = stat_count(server, "errorstats", "errorstat_NOSCRIPT", "count")
    evals = stat_count(server, "commandstats", "cmdstat_eval")
    report = []
    for kind, opss in (("sync", sync_ops), ("async", async_ops)):
        calls, errors, samples = _totals(opss)
        report.append((kind, calls, errors, samples))
        print(
            f"\n{kind}: {sum(calls.values())} calls, {sum(errors.values())} errors "
            f"({100 * sum(errors.values()) / max(1, sum(calls.values())):.1f}%); calls {dict(calls)}; errors {dict(errors)}"
        )
    print(f"server: {flushes} SCRIPT FLUSH, {noscript} NOSCRIPT replies, {evals} EVAL")

    # the storm really hit both kinds of saver, and every kind of call ran
    assert flushes > 200 and noscript > 20 and evals > 20
    for kind, calls, errors, samples in report:
        assert {"put", "put_writes", "get_tuple", "list", "get_delta_channel_history", "prune", "delete_for_runs"} <= set(calls), kind
        assert sum(calls.values()) > 100, (kind, calls)
        assert not errors, (kind, dict(errors), samples)
