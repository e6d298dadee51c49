"""Checks of the test infrastructure itself (servers, wire counting, fixtures). Fast: a few seconds."""

from __future__ import annotations

import os
import shutil

import pytest
import redis
import redis.asyncio

from devkit.servers import client_kwargs, start_standalone, start_tls
from devkit.wire import CountingProxy, RespRequestParser


def test_standalone_start_stop():
    with start_standalone() as s:
        assert s.url == f"redis://127.0.0.1:{s.port}/0"
        r = redis.Redis.from_url(s.url, **client_kwargs())
        assert r.ping()
        assert r.config_get("save")["save"] == ""
        assert r.config_get("appendonly")["appendonly"] == "no"
        r.close()
        d = s.dir
        assert os.path.isdir(d)
    assert s.proc.poll() is not None
    assert not os.path.exists(d)


def _pid_of(server) -> int:
    r = redis.Redis(host=server.host, port=server.port, **client_kwargs())
    try:
        return int(r.info("server")["process_id"])
    finally:
        r.close()


def test_start_waits_for_its_own_process_not_another_on_the_port(tmp_path):
    """Parallel workers may race for one free port: a server that answers PING on the port but is
    not the process started (its INFO server process_id) does not make the start succeed. Here the
    process started never listens (a script that sleeps) while another server holds its port."""
    from redis_saver.demo_server import ServerStartError, start_server

    never_listens = tmp_path / "never-listens"
    never_listens.write_text("#!/bin/sh\nexec sleep 30\n")
    never_listens.chmod(0o755)
    with start_standalone() as other:
        with pytest.raises(ServerStartError, match="another process"):
            start_server(str(never_listens), port=other.port, ready_timeout=1.0)
        assert _pid_of(other) == other.proc.pid  # the other server is untouched


def test_start_retries_when_another_server_took_the_free_port(monkeypatch):
    """The free port found is taken by another server before ours binds it: ours exits with
    "Address already in use", and the start retries on another port rather than returning the
    other server (or a dead process)."""
    import redis_saver.demo_server as emb

    with start_standalone() as other:
        taken = iter([other.port])  # the first "free" port found is the other server's
        real_free_port = emb.free_port

        def free_port(host: str = emb.LOOPBACK, avoid=()) -> int:
            return next(taken, None) or real_free_port(host, avoid)

        monkeypatch.setattr(emb, "free_port", free_port)
        with start_standalone() as s:
            assert s.port != other.port
            assert s.alive() and _pid_of(s) == s.proc.pid
        assert _pid_of(other) == other.proc.pid


def test_redis_url_fixture(redis_url, sync_client, prefix):
    assert redis_url.startswith(("redis://", "rediss://", "unix://"))
    assert sync_client.set(f"{prefix}:k", "v")
    assert sync_client.get(f"{prefix}:k") == b"v"
    sync_client.delete(f"{prefix}:k")


async def test_async_client_fixture(async_client, prefix):
    assert await async_client.set(f"{prefix}:k", "v")
    assert await async_client.get(f"{prefix}:k") == b"v"
    await async_client.delete(f"{prefix}:k")


def test_prefix_is_unique(prefix, request):
    assert prefix.startswith("t") and len(prefix) == 13


def test_resp_parser_split_and_pipelined():
    p = RespRequestParser()
    raw = b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$5\r\nhello\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\nPING\r\n"
    got = []
    for i in range(len(raw)):  # byte by byte
        got += p.feed(raw[i : i + 1])
    assert got == [[b"SET", b"a", b"hello"], [b"GET", b"a"], [b"PING"]]
    assert RespRequestParser().feed(raw) == got


def test_wire_counts_commands_and_pipelines(redis_url, prefix):
    from urllib.parse import urlparse

    u = urlparse(redis_url)
    if u.scheme != "redis":
        pytest.skip("needs plain TCP")
    with CountingProxy(u.hostname, u.port) as proxy:
        r = redis.Redis(host=proxy.host, port=proxy.port, db=int(u.path.strip("/") or 0), **client_kwargs())
        r.ping()
        proxy.reset()  # drop the connection handshake
        for i in range(3):
            r.set(f"{prefix}:{i}", i)
        assert proxy.names() == ["SET", "SET", "SET"]
        assert proxy.commands[0] == [b"SET", f"{prefix}:0".encode(), b"0"]

        proxy.reset()
        with r.pipeline(transaction=False) as pipe:
            pipe.get(f"{prefix}:0").incr(f"{prefix}:1")
            assert pipe.execute() == [b"0", 2]
        assert proxy.names() == ["GET", "INCRBY"]

        proxy.reset()
        with r.pipeline(transaction=True) as pipe:
            pipe.get(f"{prefix}:0").get(f"{prefix}:2")
            pipe.execute()
        assert proxy.names() == ["MULTI", "GET", "GET", "EXEC"]

        proxy.reset()  # large payload: 5 MB value, split across many reads
        big = os.urandom(5 * 1024 * 1024)
        r.set(f"{prefix}:big", big)
        assert r.get(f"{prefix}:big") == big
        assert proxy.names() == ["SET", "GET"]
        assert proxy.commands[0][2] == big
        assert proxy.count("SET") == 1 and proxy.count() == 2

        proxy.reset()  # scripts: EVALSHA / EVAL counted as one command each
        script = r.register_script("return redis.call('GET', KEYS[1])")
        r.script_flush()
        assert script(keys=[f"{prefix}:0"]) == b"0"
        assert proxy.names() == ["SCRIPT FLUSH", "EVALSHA", "SCRIPT LOAD", "EVALSHA"]
        r.delete(*[f"{prefix}:{k}" for k in (0, 1, 2, "big")])
        r.close()
    assert proxy.connections >= 1


async def test_wire_async_client(wire, wire_client, prefix):
    r = wire_client("async")
    await r.ping()
    wire.reset()
    await r.set(f"{prefix}:a", 1)
    async with r.pipeline(transaction=False) as pipe:
        pipe.get(f"{prefix}:a").delete(f"{prefix}:a")
        assert await pipe.execute() == [b"1", 1]
    assert wire.names() == ["SET", "GET", "DEL"]


def test_wire_handshake_is_filtered(wire, wire_client):
    r = wire_client("sync")
    r.ping()
    assert wire.names() == ["PING"]
    assert "PING" in wire.names(include_setup=True)


@pytest.mark.skipif(not shutil.which("openssl"), reason="openssl CLI not installed")
def test_tls_server():
    with start_tls() as t:
        assert t.url.startswith("rediss://")
        r = t.client()
        assert r.ping()
        r.close()
        plain = redis.Redis(host=t.host, port=t.port, **client_kwargs(0.5, 0.5))
        with pytest.raises(redis.ConnectionError):
            plain.ping()  # a plain-TCP client cannot talk to the TLS port
        plain.close()


@pytest.mark.cluster
def test_cluster_fixture_and_hash_tags(cluster):
    from redis.exceptions import RedisClusterException

    assert len(cluster.nodes) == 6
    rc = cluster.client()
    try:
        assert rc.ping()
        lua = (
            "redis.call('SET', KEYS[1], ARGV[1]); redis.call('SET', KEYS[2], ARGV[1]); "
            "redis.call('SET', KEYS[3], ARGV[1]); return 3"
        )
        sha = rc.script_load(lua)
        keys = ["cp:{t1}:h", "cp:{t1}:z", "cp:{t1}:s"]
        assert rc.evalsha(sha, 3, *keys, "v") == 3
        assert rc.mget(keys) == [b"v"] * 3
        primary = cluster.primary_for_key("cp:{t1}:h")
        assert primary.command("GET", "cp:{t1}:z") == b"v"
        bad = ["cp:{a}:h", "cp:{b}:z", "cp:{c}:s"]
        with pytest.raises(RedisClusterException):  # refused by the client before sending
            rc.evalsha(sha, 3, *bad, "v")
        err = cluster.nodes[0].command("EVALSHA", sha, 3, *bad, "v")  # sent directly: CROSSSLOT
        assert isinstance(err, Exception) and "CROSSSLOT" in str(err)
        rc.delete(*keys)
    finally:
        rc.close()


def test_embedded_redis_starts_and_stops(monkeypatch):
    from redis_saver.demo_server import embedded_redis

    monkeypatch.delenv("REDIS_URL", raising=False)
    with embedded_redis() as url:
        assert url and url.startswith("redis://127.0.0.1:")
        r = redis.Redis.from_url(url, **client_kwargs())
        assert r.ping()
        r.close()
    r = redis.Redis.from_url(url, **client_kwargs(0.5, 0.5))
    with pytest.raises(redis.ConnectionError):
        r.ping()  # the throwaway server is gone
    r.close()
    monkeypatch.setenv("REDIS_URL", "redis://example.invalid:1/0")
    with embedded_redis() as url:
        assert url == "redis://example.invalid:1/0"


@pytest.mark.sentinel
def test_sentinel_fixture(sentinel, prefix):
    assert len(sentinel.sentinels) == 3
    assert sentinel.current_primary() == (sentinel.primary.host, sentinel.primary.port)
    primary = sentinel.client().master_for(sentinel.master_name, **client_kwargs())
    assert primary.set(f"{prefix}:k", "v")
    assert primary.get(f"{prefix}:k") == b"v"
    primary.delete(f"{prefix}:k")
    primary.close()


async def test_saver_fixtures_build_real_savers(saver, make_saver, prefix):
    from langgraph.checkpoint.base import BaseCheckpointSaver

    assert isinstance(saver, BaseCheckpointSaver)
    cfg = {"configurable": {"thread_id": f"{prefix}-none", "checkpoint_ns": ""}}
    assert await saver.aget_tuple(cfg) is None
    for kind in ("sync", "async"):
        s = make_saver(kind, history="latest")
        assert isinstance(s, BaseCheckpointSaver)
        assert await s.aget_tuple(cfg) is None


async def test_wire_saver_goes_through_proxy(wire, wire_saver, prefix):
    s = wire_saver("async")
    cfg = {"configurable": {"thread_id": f"{prefix}-none", "checkpoint_ns": ""}}
    wire.reset()
    assert await s.aget_tuple(cfg) is None
    assert wire.count() >= 1  # the saver's traffic is visible on the wire
