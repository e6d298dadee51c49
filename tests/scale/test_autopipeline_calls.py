"""Automatic pipelining (``AsyncRedisSaver(auto_pipeline=True)``, ``redis_saver/transport/autopipe.py``)
on real servers: how calls leave and come back.

What must hold: script calls of concurrent tasks issued in one event-loop iteration leave in one
write on each of the server's two lanes (``_autopipe.LANES``: two connections per server, per
primary in a cluster; the first while it is idle, else in turn); every caller gets its own
reply, in the order its connection's server answered; an error reply (a script error, NOSCRIPT,
a saver conflict) reaches its own call only, and the engine's EVAL fallback still works per
call; in a cluster, one lane set per primary, redirects followed.

Raw calls go through the client's router (``_autopipe.router_for``), the way the driver sends
them; writes are counted at asyncio's ``StreamWriter`` (redis-py's writes and a lane's own alike).
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from typing import Any

import pytest
import redis
import redis.asyncio

from devkit.servers import async_client_kwargs, start_standalone
from redis_saver import AsyncRedisSaver, ConflictError
from redis_saver.transport import autopipe as _autopipe
from redis_saver.transport import wire
from redis_saver.transport.cluster import request_refresh
from tests.faults._util import cfg
from tests.scale._autopipe import (
    ECHO,
    FAIL,
    INCR,
    SLOW,
    call,
    chat_round,
    evalsha,
    split_in_two,
)

# --------------------------------------------------------------------------- one write, own replies, order


async def test_calls_of_one_iteration_leave_in_one_write_per_lane(aclient, writes):
    assert _autopipe.LANES == 2
    args = [f"arg-{i}-{uuid.uuid4().hex}" for i in range(100)]
    replies = await asyncio.gather(*(call(aclient, ECHO, args=(a,)) for a in args))
    assert replies == [a.encode() for a in args]
    # the first lane busy, the calls take the two lanes in turn: one write of 50 scripts on each of two connections
    assert split_in_two(writes, 100) and len(writes.log) == len(writes.connections) == 2


async def test_one_call_at_a_time_takes_the_first_lane_only(aclient, prefix, writes):
    # concurrency 1 is sent as with one lane: the second lane never opens a connection
    saver = AsyncRedisSaver(aclient, prefix=prefix, auto_pipeline=True)
    conf = await chat_round(saver, "one", 0, None)  # (loads the function library if the server lacks it)
    writes.reset()
    for step in range(1, 10):
        conf = await chat_round(saver, "one", step, conf)
    assert writes.scripts == 18 and len(writes.log) == 18 and len(writes.connections) == 1
    first, second = _autopipe.router_for(aclient).lanes[None]
    assert first.conn is not None and second.conn is None


@pytest.mark.parametrize("encoding", ["utf-8", "UTF8", "latin-1"])
def test_lanes_write_the_bytes_redis_py_would(encoding):
    # the lanes pack with hiredis' C packer where the connection encodes as it does (UTF-8, strict),
    # else with redis-py's own; the bytes on the wire are redis-py's either way
    conn = redis.asyncio.Connection(encoding=encoding)  # packing needs no server
    commands = [
        ("FCALL", "lib_put", 2, "t:{é}\x00", b"\x00\xff{}", "", 0, 12345, -7, "ü" * 3000, b"y" * 70000),
        ("EVALSHA", "a" * 40, 0),
        ("EVAL", "return 1", 1, "k", b""),
    ]
    if encoding == "latin-1":
        commands = [tuple(a.replace("ü", "ÿ").replace("é", "è") if isinstance(a, str) else a for a in c)
                    for c in commands]
    packed = b"".join(wire.packed(conn, commands))
    assert packed == b"".join(conn.pack_commands(commands))
    assert packed.count(b"\r\n$5\r\nFCALL\r\n") == 1 and packed.count(b"\r\n$4\r\nEVAL\r\n") == 1
    # an argument hiredis does not take: redis-py's packer reports it, as without lanes
    with pytest.raises(redis.exceptions.DataError):
        wire.packed(conn, [("EVAL", "return 1", 0, None)])


async def test_a_large_call_leaves_alone_on_a_pooled_connection(aclient, writes):
    small = [f"s-{i}" for i in range(20)]
    big = "x" * (_autopipe.LARGE + 1)
    replies = await asyncio.gather(*(call(aclient, ECHO, args=(a,)) for a in small), call(aclient, ECHO, args=(big,)))
    assert replies == [a.encode() for a in small] + [big.encode()]
    # the 20 small calls in one write on each lane's connection, the large one in its own write
    assert sorted(n for _, n in writes.log) == [1, 10, 10] and len(writes.connections) == 3


async def test_replies_keep_the_order_of_the_connection(aclient, writes):
    key = f"ap:{uuid.uuid4().hex}"

    async def burst(n: int) -> list[int]:
        await asyncio.sleep(0)  # the bursts start in different iterations: several writes
        return await asyncio.gather(*(call(aclient, INCR, (key,)) for _ in range(n)))

    results = await asyncio.gather(*(burst(50) for _ in range(4)))
    flat = [r for rs in results for r in rs]
    assert sorted(flat) == list(range(1, 201))  # every caller its own reply
    for rs in results:
        # consecutive calls take the two lanes in turn; each lane's replies keep the order its calls were queued in
        assert rs[0::2] == sorted(rs[0::2]) and rs[1::2] == sorted(rs[1::2])
    assert len(writes.connections) == 2
    assert writes.scripts == 200


@pytest.mark.parametrize("deployment", ["standalone", pytest.param("cluster", marks=pytest.mark.cluster)])
async def test_concurrent_saver_calls_get_their_own_state(deployment, request, redis_url, prefix, writes):
    if deployment == "cluster":
        client = request.getfixturevalue("cluster").async_client(socket_timeout=5.0, socket_connect_timeout=2.0)
        await client.initialize()
        primaries = len(client.get_primaries())
    else:
        client = redis.asyncio.Redis.from_url(redis_url, **async_client_kwargs(5.0, 5.0))
        primaries = 1
    try:
        saver = AsyncRedisSaver(client, prefix=prefix, auto_pipeline=True)
        await saver.asetup()
        threads = [f"t{i}-{uuid.uuid4().hex[:6]}" for i in range(64)]

        async def chat(thread: str) -> dict:
            conf = None
            for step in range(3):
                conf = await chat_round(saver, thread, step, conf)
            return conf

        writes.reset()
        confs = await asyncio.gather(*(chat(t) for t in threads))
        # 64 tasks x 3 rounds x 2 calls, coalesced into far fewer writes, on two connections per primary
        assert writes.scripts == 64 * 3 * 2
        assert len(writes.log) < writes.scripts / 4
        assert len(writes.connections) <= _autopipe.LANES * primaries

        tuples = await asyncio.gather(*(saver.aget_tuple(cfg(t)) for t in threads))
        for thread, conf, tup in zip(threads, confs, tuples, strict=True):
            assert tup.config["configurable"]["thread_id"] == thread
            assert tup.checkpoint["id"] == conf["configurable"]["checkpoint_id"]
            assert tup.checkpoint["channel_values"]["msg"] == f"{thread}/2"
            assert [w[1:] for w in tup.pending_writes] == [("msg", f"w {thread}/2")]
    finally:
        await client.aclose()


# --------------------------------------------------------------------------- errors stay with their call


async def test_an_error_reply_reaches_its_own_call_only(aclient, writes):
    kinds = ["ok", "fail", "ok", "noscript", "ok"] * 12

    def one(i: int, kind: str) -> Any:
        if kind == "fail":
            return call(aclient, FAIL, args=(str(i),))
        if kind == "noscript":
            return evalsha(aclient, "0" * 40, (str(i),))
        return call(aclient, ECHO, args=(str(i),))

    replies = await asyncio.gather(*(one(i, k) for i, k in enumerate(kinds)), return_exceptions=True)
    for i, (kind, reply) in enumerate(zip(kinds, replies, strict=True)):
        if kind == "ok":
            assert reply == str(i).encode()
        elif kind == "fail":
            assert isinstance(reply, redis.exceptions.ResponseError) and f"BOOM {i}" in str(reply)
        else:
            assert isinstance(reply, redis.exceptions.NoScriptError)
    assert len(writes.log) == 2  # one write per lane
    assert await call(aclient, ECHO, args=("after",)) == b"after"  # the connection is still in step


async def test_a_conflict_stays_with_its_call(aclient, prefix):
    saver = AsyncRedisSaver(aclient, prefix=prefix, fencing=True, auto_pipeline=True)
    threads = [f"f{i}" for i in range(20)]
    first = await asyncio.gather(*(chat_round(saver, t, 0, None) for t in threads))
    await asyncio.gather(*(chat_round(saver, t, 1, c) for t, c in zip(threads, first, strict=True)))
    # round 2: thread f7 writes from a stale parent (round 0's checkpoint), the others from the latest
    latest = await asyncio.gather(*(saver.aget_tuple(cfg(t)) for t in threads))
    parents = [first[i] if t == "f7" else latest[i].config for i, t in enumerate(threads)]
    results = await asyncio.gather(
        *(chat_round(saver, t, 2, p) for t, p in zip(threads, parents, strict=True)), return_exceptions=True
    )
    for t, r in zip(threads, results, strict=True):
        if t == "f7":
            assert isinstance(r, ConflictError)
        else:
            assert isinstance(r, dict) and r["configurable"]["thread_id"] == t


async def test_noscript_falls_back_to_eval_per_call(aclient, prefix, writes):
    saver = AsyncRedisSaver(aclient, prefix=prefix, auto_pipeline=True, functions=False)
    threads = [f"n{i}" for i in range(30)]
    await asyncio.gather(*(chat_round(saver, t, 0, None) for t in threads))
    await aclient.script_flush()
    writes.reset()
    tuples = await asyncio.gather(*(saver.aget_tuple(cfg(t)) for t in threads))
    assert [t.checkpoint["channel_values"]["msg"] for t in tuples] == [f"{t}/0" for t in threads]
    # one write of 15 EVALSHA per lane answered NOSCRIPT, then the EVALs: each call did its own fallback
    assert split_in_two(writes, 30) and writes.scripts == 60
    assert len(writes.connections) == 2


async def test_a_missing_library_is_loaded_once_for_concurrent_calls(aclient, prefix, writes):
    saver = AsyncRedisSaver(aclient, prefix=prefix, auto_pipeline=True)
    threads = [f"n{i}" for i in range(30)]
    await asyncio.gather(*(chat_round(saver, t, 0, None) for t in threads))
    await aclient.function_flush()
    writes.reset()
    writes.loads = 0
    tuples = await asyncio.gather(*(saver.aget_tuple(cfg(t)) for t in threads))
    assert [t.checkpoint["channel_values"]["msg"] for t in tuples] == [f"{t}/0" for t in threads]
    # one write of 15 FCALL per lane answered "Function not found"; one call loads the library and
    # sends its FCALL again, the 29 others go on with EVALSHA meanwhile: 60 script calls, one load
    assert split_in_two(writes, 30), writes.log
    assert writes.scripts == 60 and writes.loads == 1, (writes.log, writes.loads)
    writes.reset()
    await asyncio.gather(*(saver.aget_tuple(cfg(t)) for t in threads))
    assert writes.scripts == 30 and writes.loads == 1  # FCALL again from then on


# --------------------------------------------------------------------------- cluster


@pytest.mark.cluster
async def test_cluster_one_lane_per_primary_and_redirects_followed(cluster, prefix, writes):
    client = cluster.async_client(socket_timeout=5.0, socket_connect_timeout=2.0)
    await client.initialize()
    try:
        saver = AsyncRedisSaver(client, prefix=prefix, auto_pipeline=True)
        threads = [f"c{i}" for i in range(48)]
        writes.reset()
        await asyncio.gather(*(chat_round(saver, t, 0, None) for t in threads))
        router = _autopipe.router_for(client)
        assert set(router.lanes) == {n.name for n in client.get_primaries()}
        assert all(len(lanes) == 2 for lanes in router.lanes.values())
        assert len(writes.connections) == 2 * len(client.get_primaries())
        # a stale slot map for three threads: their calls go to a primary that answers MOVED, and
        # go again through redis-py's cluster path, which follows it and fixes the map (more MOVED at
        # once than redis-py's reinitialize_steps, 5, makes redis-py close every connection, lanes or not)
        slots = client.nodes_manager.slots_cache
        moved = []
        for t in threads[:3]:
            slot = client.keyslot(f"{prefix}:{{{t}}}:cp")
            slots[slot] = [next(n for n in client.get_primaries() if n.name != slots[slot][0].name)]
            moved.append(slot)
        tuples = await asyncio.gather(*(saver.aget_tuple(cfg(t)) for t in threads))
        assert [t.checkpoint["channel_values"]["msg"] for t in tuples] == [f"{t}/0" for t in threads]
        for slot in moved:  # redis-py followed MOVED and patched its map
            assert int(slots[slot][0].port) == cluster.primary_for_slot(slot).port
    finally:
        await client.aclose()


def _refresh_pacing(seconds: float) -> dict[str, Any]:
    """The cluster client's keyword setting the time between two slot-map refreshes asked for by
    errors: redis-py 8.2 waits ``topology_refresh_min_interval`` (one second by default) between
    them, serving the current map meanwhile; before 8.2 a refresh asked for runs before the next
    command, and the keyword does not exist."""
    from redis.asyncio.cluster import RedisCluster

    params = inspect.signature(RedisCluster.__init__).parameters
    return {"topology_refresh_min_interval": seconds} if "topology_refresh_min_interval" in params else {}


@pytest.mark.cluster
async def test_cluster_slot_map_refresh_pending_takes_redis_py_path(cluster, prefix):
    # a refresh redis-py would run before its next command: the first call goes through redis-py's
    # path, which runs it, before any lane is made (a lane would use the stale slot map)
    client = cluster.async_client(socket_timeout=5.0, socket_connect_timeout=2.0, **_refresh_pacing(0.0))
    await client.initialize()
    try:
        saver = AsyncRedisSaver(client, prefix=prefix, auto_pipeline=True)
        router = _autopipe.router_for(client)
        lanes_at_refresh = []
        initialize = client.initialize

        async def counted(*args: Any, **kwargs: Any) -> Any:
            if client._initialize:
                lanes_at_refresh.append(len(router.lanes))
            return await initialize(*args, **kwargs)

        client.initialize = counted
        request_refresh(client, None)  # what redis-py does after a node's connection error
        await chat_round(saver, "r", 0, None)
        assert not client._initialize  # redis-py refreshed, through its own path
        assert lanes_at_refresh[:1] == [0]  # before any lane was used
        assert router.lanes  # and the calls after it took the lanes
        assert (await saver.aget_tuple(cfg("r"))).checkpoint["channel_values"]["msg"] == "r/0"
    finally:
        await client.aclose()


@pytest.mark.cluster
@pytest.mark.skipif(not _refresh_pacing(1.0), reason="redis-py before 8.2 runs a refresh asked for at once")
async def test_cluster_slot_map_refresh_not_due_keeps_the_lanes(cluster, prefix):
    # redis-py 8.2 serves the current slot map until a refresh asked for is due: so do the lanes,
    # and the refresh stays asked for
    client = cluster.async_client(socket_timeout=5.0, socket_connect_timeout=2.0, **_refresh_pacing(600.0))
    await client.initialize()
    try:
        saver = AsyncRedisSaver(client, prefix=prefix, auto_pipeline=True)
        request_refresh(client, None)
        assert client._initialize and not client._initialize_due()
        await chat_round(saver, "nd", 0, None)
        assert set(_autopipe.router_for(client).lanes) <= {n.name for n in client.get_primaries()}
        assert _autopipe.router_for(client).lanes  # the calls took the lanes
        assert client._initialize  # still asked for, not due
        assert (await saver.aget_tuple(cfg("nd"))).checkpoint["channel_values"]["msg"] == "nd/0"
    finally:
        await client.aclose()


def test_a_loop_that_ends_with_a_reply_outstanding(redis_url, caplog):
    # asyncio.run() returns while a lane still waits for the reply of an abandoned call: its worker is
    # cancelled with the loop, quietly; a new loop gets new lanes on the same client
    client = redis.asyncio.Redis.from_url(redis_url, **async_client_kwargs(5.0, 5.0))

    async def abandon() -> None:
        task = asyncio.create_task(call(client, SLOW, args=(200, "slow")))
        await asyncio.sleep(0.05)
        task.cancel()

    async def again() -> bytes:
        try:
            return await call(client, ECHO, args=("again",))
        finally:
            await client.aclose()

    with caplog.at_level("ERROR", logger="asyncio"):
        asyncio.run(abandon())
        assert asyncio.run(again()) == b"again"
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.text


async def test_lanes_follow_the_event_loop(prefix):
    # a saver used from two event loops in turn (asyncio.run twice): the lanes follow the loop
    with start_standalone() as server:

        async def once(tag: str) -> str:
            client = redis.asyncio.Redis.from_url(server.url, **async_client_kwargs(5.0, 5.0))
            try:
                saver = AsyncRedisSaver(client, prefix=prefix, auto_pipeline=True)
                await chat_round(saver, tag, 0, None)
                return (await saver.aget_tuple(cfg(tag))).checkpoint["channel_values"]["msg"]
            finally:
                await client.aclose()

        assert await once("l1") == "l1/0"
        assert await asyncio.get_running_loop().run_in_executor(None, lambda: asyncio.run(once("l2"))) == "l2/0"
