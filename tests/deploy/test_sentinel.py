"""RedisSaver behind Redis Sentinel (1 primary + 1 replica + 3 sentinels).

The failover test kills a primary, so it starts its own deployment (about 10 s until the
sentinels know each other): the session ``sentinel`` fixture stays as other tests expect it.
"""

from __future__ import annotations

import time

import pytest
import redis

import redis_saver
from devkit.servers import client_kwargs, start_sentinel
from tests.deploy.helpers import aput_chain, cfg, delete_prefix, new_prefix, put_chain, tcfg, wait_until

pytestmark = pytest.mark.sentinel


def _url(sentinel) -> str:
    hosts = ",".join(f"{h}:{p}" for h, p in sentinel.sentinels)
    return f"redis+sentinel://{hosts}/{sentinel.master_name}"


@pytest.fixture
def sprefix():
    return new_prefix("sen")


def _round_trip(s, tid: str) -> list[dict]:
    s.setup()
    cfgs = put_chain(s, tid, 3) + put_chain(s, tid, 1, ns="child:1")
    got = s.get_tuple(cfg(tid))
    assert got is not None and got.config == cfgs[2]
    assert got.checkpoint["channel_values"] == {"msg": f"{tid}//2"}
    assert got.pending_writes == [("task-2", "msg", "w2")]
    assert len(list(s.list(tcfg(tid)))) == 4
    assert [t.config for t in s.list(None)] == [cfgs[3], cfgs[2], cfgs[1], cfgs[0]]
    return cfgs


def test_from_conn_string_sentinel_url(sentinel, sprefix):
    with redis_saver.RedisSaver.from_conn_string(_url(sentinel), prefix=sprefix) as s:
        assert isinstance(s.client.connection_pool, redis.sentinel.SentinelConnectionPool)
        _round_trip(s, "url-thread")
        s.delete_thread("url-thread")
        assert s.get_tuple(cfg("url-thread")) is None
        delete_prefix(s.client, sprefix)


async def test_from_conn_string_sentinel_url_async(sentinel, sprefix):
    async with redis_saver.AsyncRedisSaver.from_conn_string(_url(sentinel), prefix=sprefix) as s:
        await s.asetup()
        cfgs = await aput_chain(s, "aurl", 2)
        got = await s.aget_tuple(cfg("aurl"))
        assert got is not None and got.config == cfgs[-1]
        await s.adelete_thread("aurl")
        assert [t async for t in s.alist(None)] == []


def test_master_for_client(sentinel, sprefix):
    master = sentinel.client().master_for(sentinel.master_name, **client_kwargs(5.0, 2.0))
    try:
        s = redis_saver.RedisSaver(master, prefix=sprefix)
        _round_trip(s, "mf-thread")
        delete_prefix(master, sprefix)
    finally:
        master.close()


@pytest.fixture
def own_sentinel():
    s = start_sentinel()
    try:
        yield s
    finally:
        s.stop()


def test_failover_saver_keeps_working(own_sentinel, sprefix):
    """kill -9 the primary; after the sentinels promote the replica (~2.3 s) both savers work
    again without being recreated, and a write acknowledged by the replica before the crash is there."""
    sentinel = own_sentinel
    old_host, old_port = sentinel.current_primary()
    master = sentinel.client().master_for(sentinel.master_name, **client_kwargs(1.0, 1.0))
    with redis_saver.RedisSaver.from_conn_string(
        _url(sentinel), prefix=sprefix, socket_timeout=1.0, retries=1
    ) as url_saver:
        s = redis_saver.RedisSaver(master, prefix=sprefix, wait_for_replicas=1, wait_timeout_ms=2000)
        before = _round_trip(s, "fo-thread")  # each put/put_writes waited for the replica's ack

        sentinel.kill_node(old_port)
        t0 = time.monotonic()

        def write_ok() -> dict:
            return (
                put_chain(url_saver, "after-url", 1)[0]
                and put_chain(redis_saver.RedisSaver(master, prefix=sprefix), "after-mf", 1)[0]
            )

        wait_until(write_ok, 30.0, "writes to succeed after failover", interval=0.1)
        elapsed = time.monotonic() - t0
        new = sentinel.current_primary()
        assert new != (old_host, old_port), "sentinel promoted the replica"
        assert elapsed < 30.0

        for saver in (s, url_saver):
            got = saver.get_tuple(cfg("fo-thread"))
            assert got is not None and got.config == before[2]
            assert len(list(saver.list(tcfg("fo-thread")))) == 4
        # the replica-acked saver now has no replica: put raises ReplicationTimeoutError, data still written
        with pytest.raises(redis_saver.ReplicationTimeoutError):
            put_chain(redis_saver.RedisSaver(master, prefix=sprefix, wait_for_replicas=1, wait_timeout_ms=100), "x", 1)
        url_saver.delete_for_runs(["nobody"])
        url_saver.prune(["fo-thread", "after-url", "after-mf", "x"], strategy="delete")
        assert list(url_saver.list(None)) == []
    master.close()
