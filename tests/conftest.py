"""Shared pytest fixtures: real Redis servers, clients, per-test key prefixes and savers.

- ``redis_url`` (session): ``$REDIS_URL`` if set, else a standalone server owned by the session.
- ``cluster`` / ``sentinel`` (session, started on first use): ``devkit.servers.Cluster`` / ``Sentinel``.
  Mark such tests ``@pytest.mark.cluster`` / ``@pytest.mark.sentinel``.
- ``tls_server`` (session, lazy): ``devkit.servers.TLSServer`` (url ``rediss://...``, ``ca_file``).
- ``prefix``: a unique key prefix per test (tests never flush the shared server).
- ``sync_client`` / ``async_client``: redis-py clients on ``redis_url`` with timeouts and no retry.
- ``saver`` (params ``sync`` / ``async``): ``RedisSaver(sync_client, prefix=prefix)`` or
  ``AsyncRedisSaver(async_client, prefix=prefix)``.
- ``make_saver(kind, **kwargs)``: a saver (``kind`` = ``"sync"`` / ``"async"``) on a fresh client, with the
  test's prefix unless ``prefix=`` is given; e.g. ``make_saver("async", ttl=..., history="latest")``.
- ``REDIS_SAVER_AUTO_PIPELINE=1`` / ``0`` in the environment: AsyncRedisSaver's ``auto_pipeline`` default.
- ``wire``: a ``devkit.wire.CountingProxy`` in front of the ``redis_url`` server, plus
  ``wire_client(kind)`` / ``wire_saver(kind, **kwargs)`` fixtures connecting through it.
"""

from __future__ import annotations

import os
import uuid
from urllib.parse import urlparse

import pytest

from devkit.servers import (  # noqa: E402
    async_client_kwargs,
    client_kwargs,
    start_cluster,
    start_sentinel,
    start_standalone,
    start_tls,
)
from devkit.wire import CountingProxy  # noqa: E402

SOCKET_TIMEOUT = 5.0


def pytest_configure(config: pytest.Config) -> None:
    # REDIS_SAVER_AUTO_PIPELINE=1 / 0: every AsyncRedisSaver the tests build without an explicit
    # auto_pipeline= gets it on / off (to run the whole suite both ways); unset: the library's default
    flag = os.environ.get("REDIS_SAVER_AUTO_PIPELINE")
    if flag is not None:
        import redis_saver._shell

        redis_saver._shell.AUTO_PIPELINE = flag not in ("", "0", "false", "off")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """A failing test's report carries the state of every server the session started and is still
    tracking (alive or its exit code, and its log's tail): a connection the server closed then shows
    whether the server crashed, was killed or refused the client."""
    report = yield
    if report.failed and call.excinfo is not None:
        from redis_saver.demo_server import _LIVE, _LIVE_LOCK

        with _LIVE_LOCK:
            servers = list(_LIVE.values())
        for s in servers:
            state = "alive" if s.alive() else f"exited with {s.proc.returncode}"
            tail = "\n".join(s.log.splitlines()[-25:])
            report.sections.append((f"server {s.host}:{s.port} ({state})", tail or "(no log)"))
    return report


# --------------------------------------------------------------------------- servers


@pytest.fixture(scope="session")
def redis_url():
    url = os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    server = start_standalone()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def cluster():
    c = start_cluster(masters=3, replicas_per_master=1)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def cluster_client(cluster):
    """A sync RedisCluster client on the session cluster (tests/deploy, tests/store)."""
    rc = cluster.client(socket_timeout=5.0, socket_connect_timeout=2.0)
    try:
        yield rc
    finally:
        rc.close()


@pytest.fixture
async def acluster_client(cluster):
    """An asyncio RedisCluster client on the session cluster, initialized."""
    rc = cluster.async_client(socket_timeout=5.0, socket_connect_timeout=2.0)
    await rc.initialize()
    try:
        yield rc
    finally:
        await rc.aclose()


@pytest.fixture(scope="session")
def sentinel():
    s = start_sentinel()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def tls_server():
    t = start_tls()
    try:
        yield t
    finally:
        t.stop()


# --------------------------------------------------------------------------- clients


@pytest.fixture
def prefix() -> str:
    return "t" + uuid.uuid4().hex[:12]


def _sync_client(url: str):
    import redis

    return redis.Redis.from_url(url, **client_kwargs(SOCKET_TIMEOUT, SOCKET_TIMEOUT))


def _async_client(url: str):
    import redis.asyncio

    return redis.asyncio.Redis.from_url(url, **async_client_kwargs(SOCKET_TIMEOUT, SOCKET_TIMEOUT))


@pytest.fixture
def sync_client(redis_url):
    client = _sync_client(redis_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
async def async_client(redis_url):
    client = _async_client(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


# --------------------------------------------------------------------------- savers


def _build_saver(kind: str, client, prefix: str, kwargs: dict):
    import redis_saver  # imported lazily: the package may be mid-edit when the infra is loaded

    if kind == "sync":
        return redis_saver.RedisSaver(client, **{"prefix": prefix, **kwargs})
    if kind == "async":
        return redis_saver.AsyncRedisSaver(client, **{"prefix": prefix, **kwargs})
    raise ValueError(f"saver kind must be 'sync' or 'async', not {kind!r}")


class _SaverFactory:
    """Creates savers on fresh clients for one URL; ``aclose()`` closes every client it made."""

    def __init__(self, url: str, prefix: str):
        self.url = url
        self.prefix = prefix
        self._sync: list = []
        self._async: list = []

    def client(self, kind: str):
        if kind == "sync":
            c = _sync_client(self.url)
            self._sync.append(c)
        elif kind == "async":
            c = _async_client(self.url)
            self._async.append(c)
        else:
            raise ValueError(f"client kind must be 'sync' or 'async', not {kind!r}")
        return c

    def saver(self, kind: str, **kwargs):
        prefix = kwargs.pop("prefix", self.prefix)
        return _build_saver(kind, self.client(kind), prefix, kwargs)

    async def aclose(self) -> None:
        for c in self._sync:
            c.close()
        for c in self._async:
            await c.aclose()


@pytest.fixture(params=["sync", "async"], ids=["sync", "async"])
async def saver(request, redis_url, prefix):
    factory = _SaverFactory(redis_url, prefix)
    try:
        yield factory.saver(request.param)
    finally:
        await factory.aclose()


@pytest.fixture
async def make_saver(redis_url, prefix):
    """``make_saver(kind, **kwargs)``: ``kind`` is ``"sync"`` or ``"async"``; kwargs go to the saver."""
    factory = _SaverFactory(redis_url, prefix)
    try:
        yield factory.saver
    finally:
        await factory.aclose()


# --------------------------------------------------------------------------- wire counting


def _host_port(url: str) -> tuple[str, int]:
    u = urlparse(url)
    return u.hostname or "127.0.0.1", u.port or 6379


@pytest.fixture
def wire(redis_url):
    """A ``CountingProxy`` in front of the ``redis_url`` server (plain TCP only)."""
    if urlparse(redis_url).scheme != "redis":
        pytest.skip("wire counting needs a plain redis:// server")
    host, port = _host_port(redis_url)
    with CountingProxy(host, port) as proxy:
        yield proxy


def _proxied_url(redis_url: str, proxy: CountingProxy) -> str:
    u = urlparse(redis_url)
    netloc = f"{proxy.host}:{proxy.port}"
    if u.username or u.password:
        netloc = f"{u.username or ''}:{u.password or ''}@{netloc}"
    return u._replace(netloc=netloc).geturl()


@pytest.fixture
async def wire_factory(redis_url, wire, prefix):
    factory = _SaverFactory(_proxied_url(redis_url, wire), prefix)
    try:
        yield factory
    finally:
        await factory.aclose()


@pytest.fixture
def wire_client(wire_factory):
    """``wire_client(kind)``: a sync/async redis-py client whose traffic goes through ``wire``."""
    return wire_factory.client


@pytest.fixture
def wire_saver(wire_factory):
    """``wire_saver(kind, **kwargs)``: a saver whose traffic goes through ``wire`` (count with ``wire.names()``)."""
    return wire_factory.saver
