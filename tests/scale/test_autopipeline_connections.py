"""Automatic pipelining (``AsyncRedisSaver(auto_pipeline=True)``, ``redis_saver/transport/autopipe.py``)
on real servers: the lanes' connections.

What must hold: a cancelled caller, or one whose own timeout fires, leaves every other call and
every later call correct (the connection's reply stream stays in step); a socket timeout fails
the calls it belongs to; a connection the server closed while the lane was idle is replaced;
the client's retry policy and pool limits apply (one lane for a pool too small to hold two);
the sync saver is unchanged; a lane reads and writes the socket itself (TCP, TLS, unix
sockets) and still hands push messages and health checks to redis-py.

Raw calls go through the client's router (``_autopipe.router_for``), the way the driver sends
them; writes are counted at asyncio's ``StreamWriter`` (redis-py's writes and a lane's own alike).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest
import redis
import redis.asyncio

from devkit.servers import async_client_kwargs, client_kwargs, start_standalone
from redis_saver import AsyncRedisSaver, RedisSaver
from redis_saver.transport import autopipe as _autopipe
from redis_saver.transport import wire
from tests.faults._util import cfg
from tests.scale._autopipe import (
    ECHO,
    INCR,
    SLOW,
    call,
    chat_round,
    checkpoint,
)

# --------------------------------------------------------------------------- cancellation and timeouts


async def test_a_call_cancelled_before_its_write_is_not_sent(aclient):
    key = f"ap:{uuid.uuid4().hex}"
    tasks = [asyncio.create_task(call(aclient, INCR, (key,))) for _ in range(5)]
    await asyncio.sleep(0)  # every task has queued its call; the lane's first write comes next
    tasks[2].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[2], asyncio.CancelledError)
    assert sorted(done[i] for i in (0, 1, 3, 4)) == [1, 2, 3, 4]
    assert done[0] < done[4] and done[1] < done[3]  # calls 0, 2, 4 share a lane, 1 and 3 the other
    assert int(await aclient.get(key)) == 4  # the cancelled INCR never reached the server


async def test_a_caller_cancelled_while_waiting_leaves_the_others_correct(aclient, writes):
    # both lanes connected first: on a loaded machine lane B's connect once took longer than lane
    # A's SLOW, whose calls were then answered before the cancellation below. Three calls (A, B,
    # A) leave the lanes' turn as a fresh client's, so the burst below takes them as described
    warm = await asyncio.gather(*(call(aclient, ECHO, args=(f"w{i}",)) for i in range(3)))
    assert warm == [b"w0", b"w1", b"w2"]
    assert len(writes.connections) == 2
    writes.reset()
    # one iteration's calls: a SLOW first on each lane, then the others, each written behind its
    # lane's SLOW (lane A: slow, b0, b2, b4; lane B: slow, b1, b3, b5), the server busy with them
    slow = [asyncio.create_task(call(aclient, SLOW, args=(300, f"slow{k}"))) for k in range(2)]
    behind = [asyncio.create_task(call(aclient, ECHO, args=(f"b{i}",))) for i in range(6)]
    for _ in range(200):  # all written
        await asyncio.sleep(0.01)
        if writes.scripts == 8:
            break
    assert sorted(n for _, n in writes.log) == [4, 4]
    waiting = [t for t in behind if not t.done()]
    assert len(waiting) == 6  # still waiting behind the SLOWs
    behind[1].cancel()  # one call waiting on each lane
    behind[4].cancel()
    results = await asyncio.gather(*slow, *behind, return_exceptions=True)
    assert results[:2] == [b"slow0", b"slow1"]
    for i, r in enumerate(results[2:]):
        if i in (1, 4):
            assert isinstance(r, asyncio.CancelledError)
        else:
            assert r == f"b{i}".encode()
    # the replies of the cancelled calls were read and dropped: later calls get their own
    after = await asyncio.gather(*(call(aclient, ECHO, args=(f"a{i}",)) for i in range(50)))
    assert after == [f"a{i}".encode() for i in range(50)]
    assert len(writes.connections) == 2  # never reconnected: one connection per lane


async def test_a_callers_own_timeout_stays_with_it(aclient, prefix):
    saver = AsyncRedisSaver(aclient, prefix=prefix, auto_pipeline=True)
    await chat_round(saver, "x", 0, None)
    slow = asyncio.create_task(call(aclient, SLOW, args=(300, "slow")))
    await asyncio.sleep(0.05)
    patient = asyncio.create_task(saver.aget_tuple(cfg("x")))
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(saver.aget_tuple(cfg("x")), 0.05)
    assert (await patient).checkpoint["channel_values"]["msg"] == "x/0"
    assert await slow == b"slow"
    assert (await saver.aget_tuple(cfg("x"))).checkpoint["channel_values"]["msg"] == "x/0"


async def test_a_socket_timeout_fails_only_the_calls_it_belongs_to(redis_url, writes, monkeypatch):
    monkeypatch.setattr(_autopipe, "LANES", 1)  # one lane's bookkeeping: calls written together on one connection
    client = redis.asyncio.Redis.from_url(redis_url, **async_client_kwargs(0.4, 2.0))
    try:
        first = asyncio.create_task(call(client, SLOW, args=(1000, "late")))
        same_write = asyncio.create_task(call(client, ECHO, args=("same",)))
        await asyncio.sleep(0.3)
        later = asyncio.create_task(call(client, ECHO, args=("later",)))
        results = await asyncio.gather(first, same_write, later, return_exceptions=True)
        assert isinstance(results[0], redis.exceptions.TimeoutError)
        assert isinstance(results[1], redis.exceptions.TimeoutError)
        # 'later' left at 0.4 s, on a new connection, once no call waited on the first one any more;
        # the server, busy with SLOW until 1 s, did not answer it by 0.8 s: its own timeout
        assert isinstance(results[2], redis.exceptions.TimeoutError)
        await asyncio.sleep(0.5)  # the server is free again
        assert await asyncio.gather(*(call(client, ECHO, args=(str(i),)) for i in range(10))) == [
            str(i).encode() for i in range(10)
        ]
    finally:
        await client.aclose()


async def test_a_call_written_after_a_slow_one_still_gets_its_reply(redis_url):
    # the SLOW call times out at 0.4 s; the call queued at 0.3 s leaves then, with its own 0.4 s, and the
    # server (free at 0.5 s) answers it in time
    client = redis.asyncio.Redis.from_url(redis_url, **async_client_kwargs(0.4, 2.0))
    try:
        first = asyncio.create_task(call(client, SLOW, args=(500, "late")))
        await asyncio.sleep(0.3)
        second = asyncio.create_task(call(client, ECHO, args=("mine",)))
        results = await asyncio.gather(first, second, return_exceptions=True)
        assert isinstance(results[0], redis.exceptions.TimeoutError)
        assert results[1] == b"mine"
    finally:
        await client.aclose()


# --------------------------------------------------------------------------- connections


async def test_a_connection_the_server_closed_while_idle_is_replaced(aclient, prefix):
    saver = AsyncRedisSaver(aclient, prefix=prefix, auto_pipeline=True)  # retries=0: no second chance
    await chat_round(saver, "k", 0, None)  # one call at a time: the first lane only
    first, second = _autopipe.router_for(aclient).lanes[None]
    held = first.conn
    assert held is not None and held.is_connected and second.conn is None
    killed = await aclient.client_kill_filter(_type="normal", skipme=True)  # from a pooled connection
    assert killed >= 1
    await asyncio.sleep(0.05)  # the EOF reaches the lane's idle connection
    assert first.conn is held
    assert (await saver.aget_tuple(cfg("k"))).checkpoint["channel_values"]["msg"] == "k/0"


@pytest.mark.parametrize("retries", [0, 1])
async def test_the_clients_retry_policy_applies(redis_url, prefix, retries):
    # redis-py retries a command whose connection failed as often as the client's Retry says; so does a lane
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    from tests.faults._proxy import FaultProxy

    host, port = redis_url.split("//")[1].split("/")[0].split(":")
    with FaultProxy(host, int(port)) as proxy:
        kwargs = {**async_client_kwargs(2.0, 2.0), "retry": Retry(NoBackoff(), retries)}
        client = redis.asyncio.Redis(host=proxy.host, port=proxy.port, **kwargs)
        try:
            saver = AsyncRedisSaver(client, prefix=prefix, auto_pipeline=True)  # saver retries=0
            await chat_round(saver, "r", 0, None)
            proxy.cut_next()  # the next write reaches the server, its reply is lost, the connection reset
            if retries:
                assert (await saver.aget_tuple(cfg("r"))).checkpoint["channel_values"]["msg"] == "r/0"
            else:
                with pytest.raises(redis.exceptions.ConnectionError):
                    await saver.aget_tuple(cfg("r"))
            assert (await saver.aget_tuple(cfg("r"))).checkpoint["channel_values"]["msg"] == "r/0"
        finally:
            await client.aclose()


@pytest.mark.parametrize("pool_kind", ["small", "blocking"])
async def test_a_small_pool_gets_the_connection_back_between_bursts(redis_url, prefix, pool_kind):
    # one connection in all: the lane must not keep it while the saver's fan-outs (pipelines) need it
    kwargs = {**async_client_kwargs(5.0, 5.0), "max_connections": 1}
    if pool_kind == "blocking":
        pool = redis.asyncio.BlockingConnectionPool.from_url(redis_url, timeout=0.5, **kwargs)
    else:
        pool = redis.asyncio.ConnectionPool.from_url(redis_url, **kwargs)
    client = redis.asyncio.Redis(connection_pool=pool)
    try:
        saver = AsyncRedisSaver(client, prefix=prefix, auto_pipeline=True)
        if pool_kind == "blocking":  # concurrent callers wait for the connection
            await asyncio.gather(*(chat_round(saver, f"p{i}", 0, None) for i in range(5)))
        else:  # a non-blocking pool of one serves one caller at a time, lanes or not
            for i in range(5):
                await chat_round(saver, f"p{i}", 0, None)
        start = asyncio.get_running_loop().time()
        assert len(_autopipe.router_for(client).lanes[None]) == 1  # a pool of one: one lane
        listed = [t async for t in saver.alist(None)]  # a pipeline on the pool's one connection
        assert asyncio.get_running_loop().time() - start < 0.4
        assert len(listed) == 5
        await saver.adelete_thread("p0")
        assert await saver.aget_tuple(cfg("p0")) is None
    finally:
        await client.aclose()


async def test_savers_sharing_a_client_share_its_lanes(aclient, prefix, writes):
    a = AsyncRedisSaver(aclient, prefix=prefix + "a", auto_pipeline=True)
    b = AsyncRedisSaver(aclient, prefix=prefix + "b", auto_pipeline=True)
    await asyncio.gather(*(chat_round(s, f"s{i}", 0, None) for i in range(10) for s in (a, b)))
    assert len(writes.connections) == 2
    assert a._driver.router is b._driver.router


async def test_off_by_choice_uses_the_pool(aclient, prefix, writes):
    saver = AsyncRedisSaver(aclient, prefix=prefix, auto_pipeline=False)
    assert saver._driver.router is None
    await asyncio.gather(*(chat_round(saver, f"o{i}", 0, None) for i in range(8)))
    assert len(writes.log) == writes.scripts == 16  # one write per call


def test_the_option_is_checked():
    with pytest.raises(TypeError):
        AsyncRedisSaver(redis.asyncio.Redis(), auto_pipeline="yes")
    with pytest.raises(TypeError):
        RedisSaver(redis.Redis(), auto_pipeline=True)  # the sync saver has no such option


def test_sync_saver_and_sync_bridge_unaffected(redis_url, prefix):
    # RedisSaver works as before; AsyncRedisSaver's sync methods, from another thread, go through the lanes
    with RedisSaver.from_conn_string(redis_url, prefix=prefix) as sync_saver:
        cp = checkpoint("sync", 0)
        sync_saver.put(cfg("s"), cp, {"source": "loop", "step": 0}, {"msg": cp["channel_versions"]["msg"]})

    async def serve(ready: threading.Event, stop: asyncio.Event, box: dict) -> None:
        client = redis.asyncio.Redis.from_url(redis_url, **async_client_kwargs(5.0, 5.0))
        box["saver"] = AsyncRedisSaver(client, prefix=prefix, auto_pipeline=True)
        box["loop"] = asyncio.get_running_loop()
        ready.set()
        await stop.wait()
        await client.aclose()

    ready, box = threading.Event(), {}
    stop_holder: dict = {}

    def run() -> None:
        async def main() -> None:
            stop_holder["stop"] = asyncio.Event()
            await serve(ready, stop_holder["stop"], box)

        asyncio.run(main())

    th = threading.Thread(target=run, daemon=True)
    th.start()
    assert ready.wait(10)
    try:
        got = box["saver"].get_tuple(cfg("s"))
        assert got.checkpoint["channel_values"]["msg"] == "sync"
        assert box["saver"]._driver.router is not None
    finally:
        box["loop"].call_soon_threadsafe(stop_holder["stop"].set)
        th.join(10)
    with redis.Redis.from_url(redis_url, **client_kwargs()) as r:
        assert r.exists(f"{prefix}:{{s}}:cp")


# --------------------------------------------------------------------------- the lane's own socket I/O


class RedisPyIO:
    """Calls of redis-py's own ``send_packed_command`` / ``read_response`` (a lane bypasses them
    where ``wire.direct`` allows)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from redis.asyncio.connection import AbstractConnection

        self.sends = self.reads = 0
        send, read = AbstractConnection.send_packed_command, AbstractConnection.read_response

        async def spy_send(conn: Any, *a: Any, **kw: Any) -> Any:
            self.sends += 1
            return await send(conn, *a, **kw)

        async def spy_read(conn: Any, *a: Any, **kw: Any) -> Any:
            self.reads += 1
            return await read(conn, *a, **kw)

        monkeypatch.setattr(AbstractConnection, "send_packed_command", spy_send)
        monkeypatch.setattr(AbstractConnection, "read_response", spy_read)


@pytest.mark.parametrize("protocol", [2, 3])
async def test_lanes_read_and_write_the_socket_themselves(redis_url, protocol, writes, monkeypatch):
    # on redis-py's own connection classes, RESP2 or RESP3, a lane writes and reads the socket
    # itself, through the connection's hiredis reader; every call still gets its own reply
    client = redis.asyncio.Redis.from_url(redis_url, protocol=protocol, **async_client_kwargs(5.0, 5.0))
    try:
        # both lanes connect (redis-py's handshake is redis-py's own I/O)
        assert await asyncio.gather(*(call(client, ECHO, args=(w,)) for w in "abcd")) == [b"a", b"b", b"c", b"d"]
        assert all(lane.conn is not None for lane in _autopipe.router_for(client).lanes[None])
        io = RedisPyIO(monkeypatch)
        writes.reset()
        args = [f"p{protocol}-{i}" for i in range(64)]
        assert await asyncio.gather(*(call(client, ECHO, args=(a,)) for a in args)) == [a.encode() for a in args]
        assert writes.scripts == 64 and io.sends == 0 and io.reads == 0
        lane = _autopipe.router_for(client).lanes[None][0]
        assert wire.direct(lane.conn)
    finally:
        await client.aclose()


def test_a_connection_class_that_changes_reads_keeps_redis_pys_methods():
    # Sentinel's connections turn a READONLY reply into a ConnectionError in read_response
    from redis.asyncio.connection import Connection
    from redis.asyncio.sentinel import SentinelManagedConnection

    assert wire.direct(Connection())
    assert not wire.direct(SentinelManagedConnection(connection_pool=None))


def test_a_method_redis_py_lacks_is_one_no_subclass_changed(monkeypatch):
    # redis-py 8.0's connections have no _read_response_from_parser (8.2's read_response calls
    # it): wire.direct raised AttributeError there, in every lane's worker, for every call
    from redis.asyncio.connection import AbstractConnection, Connection

    monkeypatch.setattr(wire, "_DIRECT", {})
    monkeypatch.delattr(AbstractConnection, "_read_response_from_parser", raising=False)
    assert not hasattr(Connection, "_read_response_from_parser")
    assert wire.direct(Connection())

    class Reads(Connection):
        async def _read_response_from_parser(self, *a: Any, **kw: Any) -> Any:
            raise AssertionError("a subclass's own reads: never bypassed")

    assert not wire.direct(Reads())


async def test_a_lane_that_fails_before_its_write_fails_its_calls(aclient, monkeypatch):
    # a failure after the lane has its connection and before it writes (here wire.direct's)
    # fails the calls queued; they stayed queued before, and each worker started the next at
    # once: a loop without end (redis-py 8.0, see above). The failure stops after 50 tries so
    # that the old code ends too (the call then answered)
    assert await call(aclient, ECHO, args=("warm",)) == b"warm"
    tries = 0
    plain = wire.direct

    def failing(conn: Any) -> bool:
        nonlocal tries
        tries += 1
        if tries > 50:
            return plain(conn)
        raise AttributeError("a redis-py internal that moved")

    monkeypatch.setattr(wire, "direct", failing)
    with pytest.raises(AttributeError, match="a redis-py internal that moved"):
        await asyncio.wait_for(call(aclient, ECHO, args=("x",)), 10)
    assert tries == 1
    monkeypatch.setattr(wire, "direct", plain)
    assert await call(aclient, ECHO, args=("after",)) == b"after"


async def test_a_reply_longer_than_one_read_is_read_whole(aclient):
    # a 3 MB reply arrives in many socket reads, fed to one reader; the next call is answered too
    big = "return string.rep(ARGV[1], 3 * 1024 * 1024)"
    got = await asyncio.gather(call(aclient, big, args=("x",)), call(aclient, ECHO, args=("after",)))
    assert got == [b"x" * (3 * 1024 * 1024), b"after"]


async def test_a_push_message_between_replies_goes_to_redis_pys_handler(redis_url, monkeypatch):
    # RESP3: with client tracking on a lane's connection, a write to a key it read makes the
    # server push an invalidation among that connection's replies; the lane hands it to the
    # parser's handler and every call still gets its own reply
    client = redis.asyncio.Redis.from_url(redis_url, protocol=3, **async_client_kwargs(5.0, 5.0))
    key = f"tracked-{uuid.uuid4().hex}"
    try:
        assert await call(client, ECHO, args=("warm",)) == b"warm"
        lane = _autopipe.router_for(client).lanes[None][0]
        pushed: list[Any] = []
        parser = lane.conn._parser
        handle = parser.handle_push_response

        async def spy(response: Any, **kw: Any) -> Any:
            pushed.append(response)
            return await handle(response, **kw)

        monkeypatch.setattr(parser, "handle_push_response", spy)
        assert await lane.submit(("CLIENT", "TRACKING", "ON")) == b"OK"
        assert await lane.submit(("SET", key, "v1")) is True  # redis-py's SET callback
        assert await lane.submit(("GET", key)) == b"v1"  # now tracked on this connection
        # one write: the SET invalidates the key this connection tracks
        got = await asyncio.gather(
            lane.submit(("SET", key, "v2")), lane.submit(("ECHO", "next")), lane.submit(("GET", key))
        )
        assert got == [True, b"next", b"v2"]
        assert [p[0] for p in pushed] == [b"invalidate"] and pushed[0][1] == [key.encode()]
        assert lane.conn._parser is parser  # the connection stayed
    finally:
        await client.aclose()


async def test_a_due_health_check_pings_before_the_write(redis_url, writes):
    # health_check_interval: a lane's first write after the interval goes through redis-py, which
    # PINGs first; replies the lane reads itself move the deadline, as redis-py's reads do
    pings: list[bytes] = []
    client = redis.asyncio.Redis.from_url(redis_url, health_check_interval=0.3, **async_client_kwargs(5.0, 5.0))
    try:
        assert await call(client, ECHO, args=("a",)) == b"a"
        lane = _autopipe.router_for(client).lanes[None][0]
        writer = lane.conn._writer
        writelines = writer.writelines

        def spy(data: Any) -> None:
            data = [bytes(d) for d in data]
            pings.extend(d for d in data if b"PING" in d)
            writelines(data)

        writer.writelines = spy  # type: ignore[method-assign]  # redis-py's writes and the lane's
        for i in range(5):  # within the interval of the last reply: no PING
            assert await call(client, ECHO, args=(f"b{i}",)) == f"b{i}".encode()
            await asyncio.sleep(0.05)
        assert pings == []
        before = lane.conn.next_health_check
        await asyncio.sleep(0.4)
        assert await call(client, ECHO, args=("c",)) == b"c"
        assert len(pings) == 1 and lane.conn.next_health_check > before
    finally:
        await client.aclose()


@pytest.fixture(params=["tls", "unix"])
def other_transport(request, tmp_path):
    """(url kwargs for redis.asyncio.Redis) of a server reached over TLS or a unix socket."""
    if request.param == "tls":
        server = request.getfixturevalue("tls_server")  # the session's
        yield {"url": server.url, "ssl_ca_certs": server.ca_file}
    else:
        sock = str(tmp_path / "redis.sock")
        with start_standalone(extra_args=["--unixsocket", sock, "--unixsocketperm", "700"]):
            yield {"unix_socket_path": sock}


async def test_lanes_do_their_own_io_over_tls_and_unix_sockets(other_transport, monkeypatch):
    # SSLConnection and UnixDomainSocketConnection keep redis-py's read and write methods: the
    # lanes read and write them directly too, replies of 256 KB arriving over many reads
    kw = dict(other_transport)
    url = kw.pop("url", None)
    opts = {**async_client_kwargs(5.0, 5.0), **kw}
    client = redis.asyncio.Redis.from_url(url, **opts) if url else redis.asyncio.Redis(**opts)
    try:
        assert await asyncio.gather(*(call(client, ECHO, args=(w,)) for w in "abcd")) == [b"a", b"b", b"c", b"d"]
        io = RedisPyIO(monkeypatch)
        big = "return string.rep(ARGV[1], 256 * 1024)"
        got = await asyncio.gather(*(call(client, big, args=(str(i % 10),)) for i in range(40)))
        assert got == [str(i % 10).encode() * (256 * 1024) for i in range(40)]
        assert io.sends == 0 and io.reads == 0
        assert all(wire.direct(lane.conn) for lane in _autopipe.router_for(client).lanes[None])
    finally:
        await client.aclose()
