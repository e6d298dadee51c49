"""RedisSaver / AsyncRedisSaver on a real Redis Cluster (3 primaries + 3 replicas).

Checks: the conformance suite (sync via a* and async), a real LangGraph graph against
InMemorySaver, cross-thread operations over threads on every primary, copy_thread across
slots, one slot per thread for hostile thread ids, and NOSCRIPT recovery after SCRIPT FLUSH.
"""

from __future__ import annotations

import contextlib

import pytest
import redis
import redis.crc
from redis.cluster import RedisCluster

import redis_saver
from redis_saver.keys import key_slot, thread_tag
from tests.deploy.helpers import (
    achat_transcript,
    adelete_prefix,
    aput_chain,
    build_chat_graph,
    cfg,
    chat_transcript,
    delete_prefix,
    memory_transcript,
    new_prefix,
    put_chain,
    run_conformance,
    summary,
    tcfg,
)

pytestmark = pytest.mark.cluster

HOSTILE_THREADS = [
    "plain",
    "",
    "{",
    "}",
    "{}",
    "a{b}c",
    "}{x}{",
    "%7B",
    "%",
    "a:b:c",
    "*?[]",
    "[a-z]*",
    "ünï😀",
    " sp ace ",
    "tab\tnew\nline",
    "nul\x00byte",
]
NAMESPACES = ["", "child:1|p{2}", "ü*?[]"]


def _spread_threads(cluster, n_per_primary: int, tag: str) -> list[str]:
    """Thread ids chosen so that every primary serves at least ``n_per_primary`` of them."""
    per: dict[int, list[str]] = {}
    i = 0
    primaries = {int(row[2][1]) for row in cluster.slots()}
    while any(len(per.get(p, [])) < n_per_primary for p in primaries):
        tid = f"{tag}-{i}:{{x}}"
        port = cluster.primary_for_slot(key_slot(thread_tag(tid))).port
        per.setdefault(port, []).append(tid)
        i += 1
    assert set(per) == primaries and len(primaries) == 3
    return [t for ts in per.values() for t in ts]


def _check_slots(cluster, rc, saver, threads: list[str]) -> set[int]:
    """Every key of each thread is in that thread's slot (CLUSTER KEYSLOT and redis.crc agree);
    returns the set of primary ports serving them."""
    ports = set()
    for tid in threads:
        keys = saver.keys.thread_keys(tid)
        expected = key_slot(thread_tag(tid))
        for k in keys[:-2]:
            assert rc.cluster_keyslot(k) == expected == redis.crc.key_slot(k), (tid, k)
        for k in keys[-2:]:  # the slot-index keys live in the same slot as the thread
            assert redis.crc.key_slot(k) == expected, (tid, k)
        ports.add(cluster.primary_for_slot(expected).port)
    return ports


# --------------------------------------------------------------------------- conformance


async def test_conformance_sync_saver_via_a_methods(cluster):
    rc = cluster.client(socket_timeout=5.0)
    try:

        async def make():
            s = redis_saver.RedisSaver(rc, prefix=new_prefix("conf"))
            s.setup()
            return s

        async def cleanup(s):
            delete_prefix(rc, s.keys.prefix)

        await run_conformance(make, cleanup)
    finally:
        rc.close()


async def test_conformance_async_saver(cluster):
    rc = cluster.async_client(socket_timeout=5.0)
    await rc.initialize()
    try:

        async def make():
            s = redis_saver.AsyncRedisSaver(rc, prefix=new_prefix("aconf"))
            await s.asetup()
            return s

        async def cleanup(s):
            await adelete_prefix(rc, s.keys.prefix)

        await run_conformance(make, cleanup)
    finally:
        await rc.aclose()


# --------------------------------------------------------------------------- from_conn_string


def test_from_conn_string_cluster_url(cluster, cprefix):
    host, port = cluster.startup_nodes[0]
    for url, extra in ((f"redis+cluster://{host}:{port}", {}), (f"redis://{host}:{port}", {"cluster": True})):
        with redis_saver.RedisSaver.from_conn_string(url, prefix=cprefix, **extra) as s:
            assert isinstance(s.client, RedisCluster)
            s.setup()
            tid = f"fcs-{url}"
            cfgs = put_chain(s, tid, 2)
            got = s.get_tuple(cfg(tid))
            assert got is not None and got.config == cfgs[-1]
            assert [t.config for t in s.list(cfg(tid))] == cfgs[::-1]
            s.delete_thread(tid)
            assert s.get_tuple(cfg(tid)) is None


async def test_from_conn_string_cluster_url_async(cluster, cprefix):
    import warnings

    from redis.asyncio.cluster import RedisCluster as ARedisCluster
    from redis.asyncio.retry import Retry as AsyncRetry

    host, port = cluster.startup_nodes[0]
    with warnings.catch_warnings():
        # the client gets the asyncio Retry class (redis-py 8.2 warns when given the sync one)
        warnings.simplefilter("error")
        cm = redis_saver.AsyncRedisSaver.from_conn_string(f"redis+cluster://{host}:{port}", prefix=cprefix)
        s = await cm.__aenter__()
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_exit(cm)
        assert isinstance(s.client, ARedisCluster) and isinstance(s.client.retry, AsyncRetry)
        await s.asetup()
        cfgs = await aput_chain(s, "afcs", 3, ns="child:1")
        got = await s.aget_tuple(cfg("afcs", "child:1"))
        assert got is not None and got.config == cfgs[-1]
        assert [t.config async for t in s.alist(None)] == cfgs[::-1]


# --------------------------------------------------------------------------- a real graph


def test_graph_chat_interrupt_subgraph_matches_memory(csaver):
    expected = memory_transcript()
    got = chat_transcript(build_chat_graph(csaver), "chat-thread")
    assert got == expected


async def test_graph_chat_interrupt_subgraph_matches_memory_async(acsaver):
    expected = memory_transcript()
    got = await achat_transcript(build_chat_graph(acsaver), "chat-thread")
    assert got == expected


# --------------------------------------------------------------------------- cross-thread


def test_cross_thread_ops_span_all_primaries(cluster, cluster_client, csaver):
    threads = _spread_threads(cluster, 4, "x")
    assert _check_slots(cluster, cluster_client, csaver, threads) == {int(row[2][1]) for row in cluster.slots()}
    written: dict[str, list[dict]] = {}
    for i, tid in enumerate(threads):
        run = "run-A" if i % 2 == 0 else "run-B"
        written[tid] = put_chain(csaver, tid, 3, run_id=run) + put_chain(csaver, tid, 2, ns="child:1", run_id=run)
    # every thread also got a run-C checkpoint in the first thread of each primary
    mixed = threads[0]
    extra = put_chain(csaver, mixed, 1, ns="other", run_id="run-C")

    all_items = list(csaver.list(None))
    assert len(all_items) == 5 * len(threads) + 1
    ids = [t.config["configurable"]["checkpoint_id"] for t in all_items]
    assert ids == sorted(ids, reverse=True), "list(None) is ordered by checkpoint id, newest first"
    assert {t.config["configurable"]["thread_id"] for t in all_items} == set(threads)
    assert len(list(csaver.list(None, limit=7))) == 7
    run_b = list(csaver.list(None, filter={"run_id": "run-B"}))
    assert len(run_b) == 5 * (len(threads) // 2)

    csaver.delete_for_runs(["run-A", "run-C"])
    left = list(csaver.list(None))
    assert {t.metadata["run_id"] for t in left} == {"run-B"}
    assert len(left) == 5 * (len(threads) // 2)
    assert csaver.get_tuple(extra[0]) is None

    # prune many threads across all primaries
    csaver.prune(threads, strategy="keep_latest")
    left = list(csaver.list(None))
    assert len(left) == 2 * (len(threads) // 2)
    for i, tid in enumerate(threads):
        if i % 2:
            latest = {t.config["configurable"]["checkpoint_ns"]: t.config for t in csaver.list(tcfg(tid))}
            assert latest == {"": written[tid][2], "child:1": written[tid][4]}
    csaver.prune(threads, strategy="delete")
    assert list(csaver.list(None)) == []


async def test_cross_thread_ops_span_all_primaries_async(cluster, cluster_client, acsaver):
    threads = _spread_threads(cluster, 2, "ax")
    for i, tid in enumerate(threads):
        await aput_chain(acsaver, tid, 2, run_id=f"r{i % 3}")
    items = [t async for t in acsaver.alist(None)]
    assert len(items) == 2 * len(threads)
    assert {t.config["configurable"]["thread_id"] for t in items} == set(threads)
    await acsaver.adelete_for_runs(["r0"])
    assert {t.metadata["run_id"] async for t in acsaver.alist(None)} == {"r1", "r2"}
    await acsaver.aprune(threads, strategy="keep_latest")
    n = len([t async for t in acsaver.alist(None)])
    assert n == len([i for i in range(len(threads)) if i % 3])
    for tid in threads:
        await acsaver.adelete_thread(tid)
    assert [t async for t in acsaver.alist(None)] == []


def test_copy_thread_across_slots_and_primaries(cluster, csaver):
    src, dst = "copy-src{1}", None
    src_port = cluster.primary_for_slot(key_slot(thread_tag(src))).port
    for i in range(100):
        cand = f"copy-dst:{i}"
        if cluster.primary_for_slot(key_slot(thread_tag(cand))).port != src_port:
            dst = cand
            break
    assert dst is not None and key_slot(thread_tag(src)) != key_slot(thread_tag(dst))
    put_chain(csaver, src, 3)
    put_chain(csaver, src, 2, ns="child:1")
    csaver.copy_thread(src, dst)
    a = [summary(t) for t in csaver.list(tcfg(src))]
    b = [summary(t) for t in csaver.list(tcfg(dst))]
    assert a == b and len(a) == 5
    assert {t.config["configurable"]["thread_id"] for t in csaver.list(tcfg(dst))} == {dst}
    assert len(list(csaver.list(None))) == 10
    csaver.delete_thread(src)
    assert [summary(t) for t in csaver.list(tcfg(dst))] == b
    assert csaver.get_tuple(cfg(src)) is None


# --------------------------------------------------------------------------- one slot per thread


def test_hostile_thread_ids_keep_every_key_in_one_slot(cluster, cluster_client, csaver, cprefix):
    for tid in HOSTILE_THREADS:
        for ns in NAMESPACES:
            put_chain(csaver, tid, 2, ns=ns, run_id=f"run:{tid}")
    _check_slots(cluster, cluster_client, csaver, HOSTILE_THREADS)

    # every key under the prefix is a thread key, a slot-index key in its slot, or the schema key
    allowed = {csaver.keys.schema_key()}
    for tid in HOSTILE_THREADS:
        allowed.update(csaver.keys.thread_keys(tid))
    stored = set(cluster_client.scan_iter(match=csaver.keys.scan_pattern(), count=1000))
    assert stored <= allowed, sorted(stored - allowed)[:5]
    for tid in HOSTILE_THREADS:
        tk = csaver.keys.thread_keys(tid)
        present = [k for k in tk[:-2] if k in stored]
        assert len(present) >= 5, (tid, present)
        assert len({cluster_client.cluster_keyslot(k) for k in present}) == 1

    # thread tags are injective: distinct hostile ids never share keys
    tags = [thread_tag(t) for t in HOSTILE_THREADS]
    assert len(set(tags)) == len(tags)

    for tid in HOSTILE_THREADS:
        got = list(csaver.list(tcfg(tid)))
        assert len(got) == 2 * len(NAMESPACES)
        assert {t.config["configurable"]["thread_id"] for t in got} == {tid}
        for ns in NAMESPACES:
            t = csaver.get_tuple(cfg(tid, ns))
            assert t is not None and t.checkpoint["channel_values"] == {"msg": f"{tid}/{ns}/1"}
            assert t.pending_writes == [("task-1", "msg", "w1")]
    assert len(list(csaver.list(None))) == 2 * len(NAMESPACES) * len(HOSTILE_THREADS)
    csaver.delete_for_runs([f"run:{HOSTILE_THREADS[0]}", f"run:{HOSTILE_THREADS[1]}"])
    assert len(list(csaver.list(None))) == 2 * len(NAMESPACES) * (len(HOSTILE_THREADS) - 2)
    csaver.copy_thread("{}", "}{x}{:copy")
    assert len(list(csaver.list(tcfg("}{x}{:copy")))) == 2 * len(NAMESPACES)
    for tid in [*HOSTILE_THREADS, "}{x}{:copy"]:
        csaver.delete_thread(tid)
    assert list(csaver.list(None)) == []


# --------------------------------------------------------------------------- NOSCRIPT


def _flush_scripts(cluster) -> None:
    """SCRIPT FLUSH on every node (primaries and replicas), checked with SCRIPT EXISTS."""
    shas = [sc.sha for sc in redis_saver.core.scripts.load_all().values()]
    for node in cluster.live_nodes():
        assert node.command("SCRIPT", "FLUSH") in ("OK", b"OK")
        assert node.command("SCRIPT", "EXISTS", *shas) == [0] * len(shas)


def test_calls_work_after_script_flush_on_all_nodes(cluster, cluster_client, cprefix):
    s = redis_saver.RedisSaver(cluster_client, prefix=cprefix)  # no setup(): first calls load lazily
    threads = _spread_threads(cluster, 1, "ns")
    _flush_scripts(cluster)
    for tid in threads:
        put_chain(s, tid, 2, run_id="r")
    _flush_scripts(cluster)
    for tid in threads:
        assert s.get_tuple(cfg(tid)) is not None
    _flush_scripts(cluster)
    assert len(list(s.list(None))) == 2 * len(threads)  # fan-out pipeline over all primaries
    _flush_scripts(cluster)
    s.copy_thread(threads[0], "ns-copy")
    s.prune([*threads, "ns-copy"], strategy="keep_latest")
    _flush_scripts(cluster)
    s.delete_for_runs(["r"])
    assert list(s.list(None)) == []
    s.setup()


async def test_calls_work_after_script_flush_on_all_nodes_async(cluster, cluster_client, acluster_client, cprefix):
    s = redis_saver.AsyncRedisSaver(acluster_client, prefix=cprefix)
    threads = _spread_threads(cluster, 1, "ans")
    _flush_scripts(cluster)
    for tid in threads:
        await aput_chain(s, tid, 2, run_id="r")
    _flush_scripts(cluster)
    assert await s.aget_tuple(cfg(threads[0])) is not None
    _flush_scripts(cluster)
    assert len([t async for t in s.alist(None)]) == 2 * len(threads)
    _flush_scripts(cluster)
    await s.aprune(threads, strategy="keep_latest")
    _flush_scripts(cluster)
    await s.adelete_for_runs(["r"])
    assert [t async for t in s.alist(None)] == []


# --------------------------------------------------------------------------- WAIT on the thread's primary


def test_wait_for_replicas_on_cluster(cluster, cluster_client, cprefix):
    """WAIT goes to the primary that owns the thread's slot; every primary has one replica."""
    s = redis_saver.RedisSaver(cluster_client, prefix=cprefix, wait_for_replicas=1, wait_timeout_ms=2000)
    threads = _spread_threads(cluster, 1, "w")
    for tid in threads:
        cfgs = put_chain(s, tid, 2)
        assert s.get_tuple(cfg(tid)).config == cfgs[-1]
    with pytest.raises(redis_saver.ReplicationTimeoutError):
        saver = redis_saver.RedisSaver(cluster_client, prefix=cprefix, wait_for_replicas=2, wait_timeout_ms=50)
        put_chain(saver, "w2", 1)


# --------------------------------------------------------------------------- one round trip per call


def _cluster_commands(cluster) -> dict[str, int]:
    """Calls per command (INFO commandstats) summed over every node."""
    total: dict[str, int] = {}
    for node in cluster.nodes:
        with redis.Redis(host=node.host, port=node.port) as r:
            for name, st in r.info("commandstats").items():
                total[name] = total.get(name, 0) + st["calls"]
    return total


def _ran(before: dict[str, int], after: dict[str, int], name: str) -> int:
    return after.get(name, 0) - before.get(name, 0)


@pytest.mark.parametrize("mode", ["sync", "async", "async unpiped"])
async def test_each_call_is_one_fcall_and_nothing_else_on_the_wire(cluster, cprefix, mode):
    # redis-py asks a server for an FCALL's keys (COMMAND GETKEYS, two round trips per call) unless
    # told its node: every saver call must stay one FCALL (redis_saver/transport/cluster.py), also for a call over
    # the lanes' 16 KB (an uncompressed large value) and without automatic pipelining
    big = "x" * (40 * 1024)
    if mode == "sync":
        rc = cluster.client(socket_timeout=5.0)
        saver = redis_saver.RedisSaver(rc, prefix=cprefix, compress=False)
        saver.setup()

        async def call(method: str, *args):
            return getattr(saver, method)(*args)
    else:
        rc = cluster.async_client(socket_timeout=5.0)
        await rc.initialize()
        saver = redis_saver.AsyncRedisSaver(rc, prefix=cprefix, compress=False, auto_pipeline=mode == "async")
        await saver.asetup()

        async def call(method: str, *args):
            return await getattr(saver, "a" + method)(*args)

    try:
        threads = _spread_threads(cluster, 2, "one-" + mode.replace(" ", "-"))
        await call("get_tuple", cfg(threads[0]))  # the library is on every primary: no load below
        before = _cluster_commands(cluster)
        calls = 0
        for i, tid in enumerate(threads):
            cp = {
                "v": 4,
                "id": f"1ef0000{i}-0000-6000-8000-000000000000",
                "ts": "2026-12-01T00:00:00+00:00",
                "channel_values": {"big": big, "small": i},
                "channel_versions": {"big": "1", "small": "1"},
                "versions_seen": {},
                "updated_channels": None,
            }
            conf = await call("put", cfg(tid), cp, {"step": i}, {"big": "1", "small": "1"})
            await call("put_writes", conf, [("small", i)], "task")
            got = await call("get_tuple", cfg(tid))
            assert got.checkpoint["channel_values"]["big"] == big
            calls += 3
        after = _cluster_commands(cluster)
        assert _ran(before, after, "cmdstat_command|getkeys") == 0
        assert _ran(before, after, "cmdstat_fcall") == calls
        assert _ran(before, after, "cmdstat_evalsha") == _ran(before, after, "cmdstat_eval") == 0
    finally:
        if mode == "sync":
            rc.close()
        else:
            await rc.aclose()


@pytest.mark.skipif(
    not hasattr(redis.cluster.NodesManager, "_run_requested_refresh"),
    reason="redis-py before 8.2 refreshes the slot map in the error path itself",
)
def test_a_refresh_redis_py_deferred_runs_before_the_saver_places_a_call(cluster, cprefix):
    """redis-py 8.2's sync cluster client runs the slot-map refresh an error asked for at the next
    command attempt, once due. The saver places an FCALL by reading the map first: it runs that
    refresh before, so the call goes to the node that owns the slot (no MOVED)."""
    from devkit import workers as W

    client = cluster.client(socket_timeout=5.0, socket_connect_timeout=2.0, topology_refresh_min_interval=0.0)
    try:
        saver = redis_saver.RedisSaver(client, prefix=cprefix)
        cp, md, nv = W.make_child(saver, {}, "s", 0)
        saver.put(W.cfg("deferred"), cp, md, nv)
        slot = key_slot(thread_tag("deferred"))
        primaries = client.get_primaries()
        owner = client.nodes_manager.slots_cache[slot][0]
        # a stale map for the thread's slot, and a refresh asked for (what a connection error leaves)
        client.nodes_manager.slots_cache[slot] = [next(n for n in primaries if n.name != owner.name)]
        client.nodes_manager._request_refresh()

        def moved() -> int:
            stats = [client.get_redis_connection(n).info("errorstats") for n in primaries]
            return sum(s.get("errorstat_MOVED", {}).get("count", 0) for s in stats)

        before = moved()
        assert saver.get_tuple(W.cfg("deferred")).checkpoint["id"] == cp["id"]
        assert moved() == before  # the refresh ran first: no call went to the stale node
        assert client.nodes_manager.slots_cache[slot][0].name == owner.name
        assert not client.nodes_manager._refresh_requested
    finally:
        client.close()
