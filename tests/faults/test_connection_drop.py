"""Connections cut, closed, reset or frozen by a userspace TCP proxy (``_proxy.FaultProxy``).

- Without retries (a client with ``retry=0``, saver ``retries=0``) a fault mid-call reaches the
  caller as ``ConnectionError`` and the next call recovers on a new connection.
- With ``from_conn_string`` defaults (``socket_timeout`` 5 s, saver ``retries=3`` on
  ``ConnectionError`` only) the same faults are invisible: the call is retried, and since every
  script is idempotent a put whose reply was lost is stored once.
- A frozen server: a call fails with ``TimeoutError`` after ``socket_timeout`` (not retried), so
  one call stalls at most about ``socket_timeout``; after a thaw the next call works.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest
import redis
import redis.asyncio

from devkit.servers import async_client_kwargs, client_kwargs, start_standalone
from redis_saver import AsyncRedisSaver, RedisSaver
from redis_saver.transport.clients import DEFAULTS
from tests.faults._proxy import FaultProxy
from tests.faults._util import call, cfg, checkpoint, is_async, listed, version

KINDS = ["sync", "async"]


@pytest.fixture(scope="module")
def server():
    with start_standalone() as s:
        yield s


@pytest.fixture
def proxy(server):
    with FaultProxy(server.host, server.port) as p:
        yield p


@contextlib.asynccontextmanager
async def conn_string_saver(kind: str, proxy: FaultProxy, prefix: str, **options: Any):
    url = f"redis://{proxy.host}:{proxy.port}/0"
    if kind == "sync":
        with RedisSaver.from_conn_string(url, prefix=prefix, **options) as s:
            yield s
    else:
        async with AsyncRedisSaver.from_conn_string(url, prefix=prefix, **options) as s:
            yield s


@contextlib.asynccontextmanager
async def bare_saver(kind: str, proxy: FaultProxy, prefix: str):
    """No retries anywhere: redis-py ``retry=0``, saver ``retries=0``; short timeouts."""
    if kind == "sync":
        client = redis.Redis(host=proxy.host, port=proxy.port, **client_kwargs(1.0, 1.0))
        try:
            yield RedisSaver(client, prefix=prefix)
        finally:
            client.close()
    else:
        aclient = redis.asyncio.Redis(host=proxy.host, port=proxy.port, **async_client_kwargs(1.0, 1.0))
        try:
            yield AsyncRedisSaver(aclient, prefix=prefix)
        finally:
            await aclient.aclose()


async def timed(saver: Any, name: str, *args: Any, **kwargs: Any) -> tuple[float, Any]:
    """(seconds, result or the exception raised) of one call."""
    t0 = time.monotonic()
    try:
        result = await call(saver, name, *args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - returned for the test to check
        result = exc
    return time.monotonic() - t0, result


@pytest.mark.parametrize("kind", KINDS)
async def test_fault_mid_call_raises_and_the_next_call_recovers(kind, proxy, prefix):
    async with bare_saver(kind, proxy, prefix) as saver:
        c1 = await call(saver, "put", cfg("t"), *checkpoint("v1", version(1)))

        # the server runs the put, its reply is lost: ConnectionError, yet the put is stored
        proxy.cut_next()
        _, err = await timed(saver, "put", c1, *checkpoint("v2", version(2)))
        assert isinstance(err, redis.exceptions.ConnectionError), err
        got = await call(saver, "get_tuple", cfg("t"))  # the next call recovers
        assert got.checkpoint["channel_values"] == {"x": "v2"} and got.parent_config == c1
        c2 = got.config

        # the request never reaches the server: ConnectionError, nothing stored
        proxy.close_next()
        _, err = await timed(saver, "put_writes", c2, [("x", "w")], "task")
        assert isinstance(err, redis.exceptions.ConnectionError), err
        assert (await call(saver, "get_tuple", c2)).pending_writes == []

        # every open connection reset while idle: at most the first call notices
        proxy.reset_all()
        _, first = await timed(saver, "put_writes", c2, [("x", "w")], "task")
        assert first is None or isinstance(first, redis.exceptions.ConnectionError), first
        if first is not None:
            await call(saver, "put_writes", c2, [("x", "w")], "task")
        assert (await call(saver, "get_tuple", c2)).pending_writes == [("task", "x", "w")]
        assert proxy.faults == 2 and proxy.connections >= 3


@pytest.mark.parametrize("kind", KINDS)
async def test_faults_mid_call_are_retried_with_from_conn_string_defaults(kind, proxy, prefix):
    async with conn_string_saver(kind, proxy, prefix) as saver:
        assert saver.retries == 3
        c1 = await call(saver, "put", cfg("t"), *checkpoint("v1", version(1)))
        proxy.cut_next()  # reply of the put lost: retried, stored once
        c2 = await call(saver, "put", c1, *checkpoint("v2", version(2)))
        proxy.cut_next()  # reply of put_writes lost: retried, each write once
        await call(saver, "put_writes", c2, [("x", "w1"), ("y", "w2")], "task")
        proxy.close_next()
        got = await call(saver, "get_tuple", cfg("t"))
        assert got.config == c2 and got.pending_writes == [("task", "x", "w1"), ("task", "y", "w2")]
        proxy.reset_all()
        assert [t.config for t in await listed(saver, cfg("t"))] == [c2, c1]
        assert proxy.faults == 3


@pytest.mark.parametrize("kind", KINDS)
async def test_freeze_shorter_than_the_timeout_only_delays_the_call(kind, proxy, prefix):
    async with conn_string_saver(kind, proxy, prefix, socket_timeout=2.0) as saver:
        c1 = await call(saver, "put", cfg("t"), *checkpoint("v1", version(1)))
        proxy.freeze()
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, proxy.thaw)
        if is_async(saver):
            elapsed, got = await timed(saver, "get_tuple", cfg("t"))
        else:  # a sync call would block the loop that thaws: run it in a thread
            elapsed, got = await asyncio.to_thread(lambda: asyncio.run(timed(saver, "get_tuple", cfg("t"))))
        assert got.config == c1 and 0.25 < elapsed < 1.5, (elapsed, got)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_frozen_server_stalls_one_call_for_socket_timeout_at_most(kind, proxy, prefix, capsys):
    """With the defaults (socket_timeout 5 s): a call on an open connection; with a short
    timeout also a call that has to open its connection first (the handshake hangs)."""
    timeout = DEFAULTS["socket_timeout"]
    async with conn_string_saver(kind, proxy, prefix) as saver:
        c1 = await call(saver, "put", cfg("t"), *checkpoint("v1", version(1)))
        proxy.freeze()
        try:
            stall, err = await timed(saver, "get_tuple", cfg("t"))
        finally:
            proxy.thaw()
        assert isinstance(err, redis.exceptions.TimeoutError), err
        assert timeout - 0.2 < stall < timeout + 1.0, stall
        assert (await call(saver, "get_tuple", cfg("t"))).config == c1  # recovers
    async with conn_string_saver(kind, proxy, prefix, socket_timeout=0.5) as fresh:
        proxy.freeze()  # no connection yet: connect works (the proxy accepts), the handshake hangs
        try:
            fresh_stall, err = await timed(fresh, "get_tuple", cfg("t"))
        finally:
            proxy.thaw()
        assert isinstance(err, redis.exceptions.TimeoutError), err
        assert 0.4 < fresh_stall < 0.5 + 1.0, fresh_stall
        assert (await call(fresh, "get_tuple", cfg("t"))).config == c1
    with capsys.disabled():
        print(f"\n{kind}: frozen server: one call stalled {stall:.2f} s (socket_timeout {timeout} s, open connection); "
              f"{fresh_stall:.2f} s (socket_timeout 0.5 s, new connection)")
