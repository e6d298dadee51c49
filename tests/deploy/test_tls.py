"""rediss:// against a TLS-only server with a self-signed CA (``ssl_ca_certs=``)."""

from __future__ import annotations

import pytest
import redis

import redis_saver
from tests.deploy.helpers import aput_chain, cfg, new_prefix, put_chain, tcfg


def test_rediss_round_trip(tls_server):
    p = new_prefix("tls")
    with redis_saver.RedisSaver.from_conn_string(tls_server.url, prefix=p, ssl_ca_certs=tls_server.ca_file) as s:
        assert s.client.connection_pool.connection_class is redis.SSLConnection
        s.setup()
        cfgs = put_chain(s, "tls{1}", 3, run_id="r1") + put_chain(s, "tls{1}", 2, ns="child:1", run_id="r2")
        got = s.get_tuple(cfg("tls{1}"))
        assert got is not None and got.config == cfgs[2] and got.pending_writes == [("task-2", "msg", "w2")]
        assert len(list(s.list(tcfg("tls{1}")))) == 5
        assert len(list(s.list(None))) == 5
        s.copy_thread("tls{1}", "tls-copy")
        assert len(list(s.list(tcfg("tls-copy")))) == 5
        s.delete_for_runs(["r2"])
        assert len(list(s.list(None))) == 6
        s.prune(["tls{1}", "tls-copy"], strategy="keep_latest")
        assert len(list(s.list(None))) == 2
        s.delete_thread("tls{1}")
        s.delete_thread("tls-copy")
        assert list(s.list(None)) == []


async def test_rediss_round_trip_async(tls_server):
    p = new_prefix("atls")
    async with redis_saver.AsyncRedisSaver.from_conn_string(
        tls_server.url, prefix=p, ssl_ca_certs=tls_server.ca_file
    ) as s:
        await s.asetup()
        cfgs = await aput_chain(s, "t", 2)
        got = await s.aget_tuple(cfg("t"))
        assert got is not None and got.config == cfgs[-1]
        await s.adelete_thread("t")
        assert [t async for t in s.alist(None)] == []


def test_rediss_rejects_unknown_ca(tls_server):
    """Without the CA the handshake fails: the certificate really is verified."""
    with redis_saver.RedisSaver.from_conn_string(tls_server.url, prefix=new_prefix("tls"), retries=0) as s:
        with pytest.raises(redis.ConnectionError):
            s.setup()
