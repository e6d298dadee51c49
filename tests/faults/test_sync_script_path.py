"""RedisSaver's script calls on a plain ``redis.Redis`` go straight to a pooled connection
(``_drivers.SyncDriver._script``), skipping ``Redis.execute_command``'s per-command hooks; what the
client's own path guarantees still holds, and the client's own path is taken wherever it does more.

Against a real server the tests start (``devkit.servers.start_standalone``); connections are cut by
a userspace TCP proxy in front of it (``tests/faults/_proxy.py``), never mocked.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import redis
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from redis.backoff import NoBackoff
from redis.retry import Retry

from devkit.servers import client_kwargs, start_standalone
from redis_saver import RedisSaver
from tests.faults._proxy import FaultProxy


@pytest.fixture(scope="module")
def server():
    with start_standalone() as s:
        yield s


def _client(server: Any, **kw: Any) -> redis.Redis:
    opts = client_kwargs(2.0, 2.0)
    opts.update(kw)
    return redis.Redis(host=server.host, port=server.port, **opts)


def _put(saver: RedisSaver, thread: str, parent: str | None = None, cp: Any = None) -> str:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if parent:
        conf["checkpoint_id"] = parent
    if cp is None:
        version = saver.get_next_version(None, None)
        cp = generate_checkpoint(channel_values={"v": thread}, channel_versions={"v": version})
    saver.put({"configurable": conf}, cp, generate_metadata(), dict(cp["channel_versions"]))
    return str(cp["id"])


def test_scripts_skip_execute_command_on_a_plain_client(server: Any) -> None:
    client = _client(server)
    seen: list[Any] = []
    plain = client.execute_command

    def counting(*args: Any, **kw: Any) -> Any:
        seen.append(args[0])
        return plain(*args, **kw)

    client.execute_command = counting  # type: ignore[method-assign]
    saver = RedisSaver(client, prefix="direct")
    cid = _put(saver, "t1")
    got = saver.get_tuple({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}})
    assert got is not None and got.checkpoint["id"] == cid and got.checkpoint["channel_values"] == {"v": "t1"}
    assert not [c for c in seen if str(c).upper() in ("FCALL", "EVALSHA", "EVAL")], seen
    client.close()


def test_an_instrumented_client_keeps_its_own_path(server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An instrumentation (OpenTelemetry, ddtrace, Sentry) wraps ``Redis.execute_command`` on the
    class, maybe after the saver was made: every script call then goes through the wrapper."""
    client = _client(server)
    saver = RedisSaver(client, prefix="direct")
    _put(saver, "warm")
    seen: list[Any] = []
    plain = redis.Redis.execute_command

    @functools.wraps(plain)
    def traced(self: redis.Redis, *args: Any, **kw: Any) -> Any:
        seen.append(args[0])
        return plain(self, *args, **kw)

    monkeypatch.setattr(redis.Redis, "execute_command", traced)
    cid = _put(saver, "t2")
    got = saver.get_tuple({"configurable": {"thread_id": "t2", "checkpoint_ns": ""}})
    assert got is not None and got.checkpoint["id"] == cid
    assert [c for c in seen if str(c).upper() == "FCALL"], seen
    client.close()


@pytest.mark.parametrize("options", [{"single_connection_client": True}], ids=["single-connection"])
def test_a_client_bound_to_one_connection_keeps_its_own_path(server: Any, options: dict[str, Any]) -> None:
    client = _client(server, **options)
    saver = RedisSaver(client, prefix="direct")
    assert saver._driver._pool is None
    cid = _put(saver, "t3")
    got = saver.get_tuple({"configurable": {"thread_id": "t3", "checkpoint_ns": ""}})
    assert got is not None and got.checkpoint["id"] == cid
    client.close()


def test_a_response_callback_for_scripts_keeps_the_clients_path(server: Any) -> None:
    client = _client(server)
    client.set_response_callback("EVALSHA", lambda r, **kw: r)
    assert RedisSaver(client, prefix="direct")._driver._pool is None
    client.close()


def test_the_clients_retry_applies_to_script_calls(server: Any) -> None:
    """The reply of a put lost with its connection (``FaultProxy.cut_next``), with the saver's own
    retries off: a client whose ``Retry`` allows one more try stores the put once, on a new
    connection; one that allows none raises ``ConnectionError``, and its next call works."""
    with FaultProxy(server.host, server.port) as proxy:
        once_more = {**client_kwargs(2.0, 2.0), "retry": Retry(NoBackoff(), 1)}
        retrying = redis.Redis(host=proxy.host, port=proxy.port, **once_more)
        saver = RedisSaver(retrying, prefix="direct", retries=0)
        assert saver._driver._pool is retrying.connection_pool
        first = _put(saver, "t4")
        proxy.cut_next()
        second = _put(saver, "t4", first)
        assert [t.checkpoint["id"] for t in saver.list({"configurable": {"thread_id": "t4"}})] == [second, first]

        bare = redis.Redis(host=proxy.host, port=proxy.port, **client_kwargs(2.0, 2.0))  # retry=0
        plain = RedisSaver(bare, prefix="direct", retries=0)
        first = _put(plain, "t5")
        proxy.cut_next()
        cp = generate_checkpoint(channel_values={"v": "t5"})
        with pytest.raises(redis.ConnectionError):
            _put(plain, "t5", first, cp)
        _put(plain, "t5", first, cp)  # a new connection; stored once whether or not the cut call landed
        assert [t.checkpoint["id"] for t in plain.list({"configurable": {"thread_id": "t5"}})] == [cp["id"], first]
        # the pools got every connection back
        assert retrying.connection_pool._in_use_connections == set()
        assert bare.connection_pool._in_use_connections == set()
        retrying.close()
        bare.close()
