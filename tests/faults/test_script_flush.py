"""A storm of SCRIPT FLUSH (and FUNCTION FLUSH) never reaches the caller.

``redis-cli -r -1 -i 0.002 SCRIPT FLUSH`` empties a server's script cache every ~2 ms (the
same state as a restart, or a failover to a replica that never loaded the scripts) while
sync savers in threads and async savers in tasks run every kind of call: single script calls
and the fan-outs sent as pipelines (list(None), prune, delete_for_runs). With
``functions=False`` the driver must answer a NOSCRIPT with EVAL of the script body; with the
function library (the default) a second storm runs FUNCTION FLUSH too, and a call answered
"Function not found" loads the library and goes again (a pipeline's command goes as EVAL if the
library is gone again). Either way there are 0 errors and every answer is right. The server's
own counters prove the storm hit: NOSCRIPT replies and EVALs happened, or library loads.

Three setups: a standalone server; a primary with a replica and ``wait_for_replicas=1`` (put
and put_writes go as the script call + WAIT in one pipeline), then a failover to that replica,
which never loaded a script; the session Redis Cluster with ``wait_for_replicas=1`` (the cluster
paths: WAIT on the thread's primary, fan-outs split by node). On the wire: only the commands
answered NOSCRIPT (or "Function not found") are sent again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import subprocess
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio

from devkit.servers import async_client_kwargs, client_kwargs, start_standalone
from redis_saver import AsyncRedisSaver, RedisSaver
from tests.faults._util import Ops, cfg, checkpoint, info, run_rounds, stat_count, version

SYNC_THREADS = 3
ASYNC_TASKS = 3
ALL_CALLS = {"put", "put_writes", "get_tuple", "list", "get_delta_channel_history", "prune", "delete_for_runs"}
# mixed_round() prunes and deletes runs every 4th round: each worker runs at least that many, however
# slow the machine (on a loaded 2-core machine the sync threads once finished 6 rounds in all)
EVERY_CALL = 4


def _storm(server: Any, what: str = "SCRIPT") -> subprocess.Popen:
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli not found")
    return subprocess.Popen(
        [cli, "-h", server.host, "-p", str(server.port), "-r", "-1", "-i", "0.002", what, "FLUSH"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _counters(servers: list[Any]) -> Counter:
    out: Counter = Counter()
    for s in servers:
        out["SCRIPT FLUSH"] += stat_count(s, "commandstats", "cmdstat_script|flush")
        out["NOSCRIPT"] += stat_count(s, "errorstats", "errorstat_NOSCRIPT", "count")
        out["EVAL"] += stat_count(s, "commandstats", "cmdstat_eval")
        out["FUNCTION FLUSH"] += stat_count(s, "commandstats", "cmdstat_function|flush")
        out["FUNCTION LOAD"] += stat_count(s, "commandstats", "cmdstat_function|load")
        out["FCALL"] += stat_count(s, "commandstats", "cmdstat_fcall")
    return out


def _sync_worker(make: Callable[[], tuple[Any, Callable[[], None]]], name: str, seconds: float, out: list[Ops]) -> None:
    saver, close = make()
    try:
        ops = Ops(saver)
        out.append(ops)
        asyncio.run(run_rounds(ops, name, seconds, {}, min_rounds=EVERY_CALL))
    finally:
        close()


async def _async_workers(make: Callable[[], Any], seconds: float, out: list[Ops]) -> None:
    made = [await make() for _ in range(ASYNC_TASKS)]
    try:
        opss = [Ops(saver) for saver, _ in made]
        out.extend(opss)
        await asyncio.gather(
            *(run_rounds(ops, f"a{i}", seconds, {}, min_rounds=EVERY_CALL) for i, ops in enumerate(opss))
        )
    finally:
        for _, aclose in made:
            await aclose()


def storm(
    servers: list[Any],
    make_sync: Callable,
    make_async: Callable,
    seconds: float,
    label: str,
    min_calls: int = 100,
    functions: bool = False,
) -> None:
    """Flush every server's script cache (and function libraries, with ``functions``) every
    ~2 ms while the savers work; 0 errors allowed."""
    before = _counters(servers)
    sync_ops: list[Ops] = []
    async_ops: list[Ops] = []
    storms = [_storm(s) for s in servers] + ([_storm(s, "FUNCTION") for s in servers] if functions else [])
    try:
        threads = [
            threading.Thread(target=_sync_worker, args=(make_sync, f"s{i}", seconds, sync_ops))
            for i in range(SYNC_THREADS)
        ]
        for t in threads:
            t.start()
        asyncio.run(_async_workers(make_async, seconds, async_ops))
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)
    finally:
        for p in storms:
            p.kill()
            p.wait()
    server_side = _counters(servers) - before
    print(f"\n{label}: server side {dict(server_side)}")
    results = []
    for kind, opss in (("sync", sync_ops), ("async", async_ops)):
        calls, errors, samples = Counter(), Counter(), []
        for ops in opss:
            calls.update(ops.calls)
            errors.update(ops.errors)
            samples += ops.samples
        n, e = sum(calls.values()), sum(errors.values())
        print(
            f"{label} {kind}: {n} calls, {e} errors ({100 * e / max(1, n):.1f}%); {dict(calls)}; errors {dict(errors)}"
        )
        results.append((kind, calls, errors, samples))
    # the storm really hit, and every kind of call ran, for both kinds of saver
    # (counts, not rates: on a loaded machine fewer flushes and calls fit in the same time; what
    # matters is that flushes and NOSCRIPT replies happened and every call kind ran without error)
    assert server_side["SCRIPT FLUSH"] > 10 * len(servers) * seconds, server_side  # ~150/s measured
    if functions:
        assert server_side["FUNCTION FLUSH"] > 10 * len(servers) * seconds, server_side
        assert server_side["FUNCTION LOAD"] > 20 and server_side["FCALL"] > 20, server_side
    else:
        assert server_side["NOSCRIPT"] > 20 and server_side["EVAL"] > 20, server_side
    for kind, calls, errors, samples in results:
        assert ALL_CALLS <= set(calls) and sum(calls.values()) > min_calls // 4, (kind, calls)
        assert not errors, (kind, dict(errors), samples)


def _plain(server: Any, **saver_kwargs: Any) -> tuple[Callable, Callable]:
    def make_sync():
        client = redis.Redis(host=server.host, port=server.port, **client_kwargs())
        return RedisSaver(client, **saver_kwargs), client.close

    async def make_async():
        client = redis.asyncio.Redis(host=server.host, port=server.port, **async_client_kwargs())
        return AsyncRedisSaver(client, **saver_kwargs), client.aclose

    return make_sync, make_async


FUNCTIONS = pytest.mark.parametrize("functions", [False, True], ids=["evalsha", "functions"])


@FUNCTIONS
def test_script_flush_storm_never_reaches_the_caller(functions):
    with start_standalone() as server:
        make = _plain(server, prefix="flush", functions=functions)
        storm([server], *make, seconds=2.0, label="standalone", functions=functions)


@FUNCTIONS
def test_script_flush_storm_with_wait_for_replicas_then_failover(functions):
    with start_standalone(extra_args=("--repl-diskless-sync-delay", "0")) as primary, start_standalone(
        extra_args=("--replicaof", primary.host, str(primary.port))
    ) as replica:
        for _ in range(500):
            if info(replica, "replication").get("master_link_status") == "up":
                break
            threading.Event().wait(0.01)
        else:
            raise AssertionError("the replica never synced")
        make_sync, make_async = _plain(
            primary, prefix="flushwait", wait_for_replicas=1, wait_timeout_ms=2000, functions=functions
        )
        storm([primary], make_sync, make_async, seconds=1.5, label="standalone+WAIT", functions=functions)
        # WAIT went with the writes (a count, not a rate: the machine may be loaded)
        assert stat_count(primary, "commandstats", "cmdstat_wait") > 20

        # failover to the replica, which never loaded a script: every call still works
        saver, close = make_sync()
        conf = saver.put(cfg("failover"), *checkpoint("before", version(1)))
        close()
        assert replica.command("REPLICAOF", "NO", "ONE") == "OK"
        to_sync, to_async = _plain(replica, prefix="flushwait", functions=functions)
        promoted, close = to_sync()
        try:
            assert replica.command("SCRIPT", "EXISTS", promoted._driver.scripts["get_tuple"].sha) == [0]
            if functions:  # the library may have been flushed last: the replica then lacks it too
                replica.command("FUNCTION", "FLUSH")
            assert promoted.get_tuple(cfg("failover")).config == conf
            conf2 = promoted.put(conf, *checkpoint("after", version(2)))
            assert [t.config for t in promoted.list(cfg("failover"))] == [conf2, conf]
        finally:
            close()

        async def async_side() -> None:
            asaver, aclose = await to_async()
            try:
                assert (await asaver.aget_tuple(cfg("failover"))).config == conf2
                await asaver.aprune(["failover"], strategy="keep_latest")
                assert [t.config async for t in asaver.alist(cfg("failover"))] == [conf2]
            finally:
                await aclose()

        asyncio.run(async_side())
        if functions:
            assert stat_count(replica, "commandstats", "cmdstat_function|load") >= 1
        else:
            assert stat_count(replica, "errorstats", "errorstat_NOSCRIPT", "count") >= 3


@pytest.mark.cluster
@FUNCTIONS
def test_script_flush_storm_on_cluster(cluster, functions):
    prefix = "flush" + uuid.uuid4().hex[:8]
    primaries = [cluster.node(int(row[2][1])) for row in cluster.slots()]
    opts = {"prefix": prefix, "wait_for_replicas": 1, "wait_timeout_ms": 2000, "functions": functions}

    def make_sync():
        rc = cluster.client(socket_timeout=5.0)
        return RedisSaver(rc, **opts), rc.close

    async def make_async():
        rc = cluster.async_client(socket_timeout=5.0)
        await rc.initialize()
        return AsyncRedisSaver(rc, **opts), rc.aclose

    try:
        storm(primaries, make_sync, make_async, seconds=1.5, label="cluster+WAIT", min_calls=40, functions=functions)
    finally:
        rc = cluster.client()
        for k in rc.scan_iter(match=prefix + ":*", count=1000):
            rc.delete(k)
        rc.close()


# --------------------------------------------------------------------------- on the wire: what is sent again


# what goes on the wire after a flush: (flush, single call, WAIT pipeline), per mode
AGAIN = {
    False: ("script_flush", ["EVALSHA", "EVAL"], ["EVALSHA", "WAIT", "EVAL", "WAIT"]),
    True: ("function_flush", ["FCALL", "FUNCTION LOAD", "FCALL"], ["FCALL", "WAIT", "FUNCTION LOAD", "FCALL", "WAIT"]),
}


@pytest.mark.parametrize("kind", ["sync", "async"])
@FUNCTIONS
async def test_only_the_commands_answered_so_are_sent_again(kind, functions):
    """A pipeline whose replies mix NOSCRIPT and results: only the NOSCRIPT commands go again,
    the first of each script as EVAL, the rest as EVALSHA behind it; a WAIT goes again with its
    script. With the function library, FCALLs answered "Function not found" load it and go
    again as they are. A single call: EVALSHA, then EVAL (FCALL, FUNCTION LOAD, FCALL)."""
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

    from devkit.wire import SETUP_COMMANDS, CountingProxy
    from redis_saver import ReplicationTimeoutError
    from tests.faults._util import call

    flush, single, waited = AGAIN[functions]
    with start_standalone() as server, CountingProxy(server.host, server.port) as wire:
        if kind == "sync":
            client = redis.Redis(host=wire.host, port=wire.port, **client_kwargs())
            saver = RedisSaver(client, prefix="wire", functions=functions)
        else:
            client = redis.asyncio.Redis(host=wire.host, port=wire.port, **async_client_kwargs())
            saver = AsyncRedisSaver(client, prefix="wire", functions=functions)
        admin = redis.Redis(host=server.host, port=server.port, **client_kwargs())

        def ops() -> list[str]:
            return [n for n in wire.names() if n not in SETUP_COMMANDS]

        try:
            confs = [await call(saver, "put", cfg(t), generate_checkpoint(), generate_metadata(), {}) for t in "ab"]
            plans = saver._plans
            calls = [next(plans._plan_get_tuple(cfg(t))) for t in "ab"] + [next(plans._plan_list(cfg(t))) for t in "ab"]
            getattr(admin, flush)()
            if not functions:
                admin.script_load(saver._driver.scripts["get_tuple"].source)  # get_tuple cached, list not
            wire.reset()
            batch = saver._driver.batch(calls)
            replies = await batch if kind == "async" else batch
            if functions:
                assert ops() == ["FCALL"] * 4 + ["FUNCTION LOAD"] + ["FCALL"] * 4, ops()
            else:
                assert ops() == ["EVALSHA"] * 4 + ["EVAL", "EVALSHA"], ops()
                assert wire.commands[-2][1] == saver._driver.scripts["list"].source  # the body, as loaded
            assert len(replies) == 4 and all(r for r in replies)

            # a single call, and the WAIT pipeline (no replica here: ReplicationTimeoutError, but stored)
            getattr(admin, flush)()
            wire.reset()
            assert (await call(saver, "get_tuple", confs[0])).config == confs[0]
            assert ops() == single
            getattr(admin, flush)()
            saver._context = dataclasses.replace(saver._context, wait=(1, 1))
            wire.reset()
            with pytest.raises(ReplicationTimeoutError):
                await call(saver, "put_writes", confs[1], [("x", 1)], "task")
            assert ops() == waited
            saver._context = dataclasses.replace(saver._context, wait=None)
            assert (await call(saver, "get_tuple", confs[1])).pending_writes == [("task", "x", 1)]
        finally:
            admin.close()
            if kind == "sync":
                client.close()
            else:
                await client.aclose()
