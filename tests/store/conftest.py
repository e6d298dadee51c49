"""Fixtures for tests/store: RedisStore / AsyncRedisStore on the session's servers."""

from __future__ import annotations

import pytest

from tests.deploy.helpers import delete_prefix, new_prefix


@pytest.fixture
def cluster_client(cluster):
    rc = cluster.client(socket_timeout=5.0, socket_connect_timeout=2.0)
    try:
        yield rc
    finally:
        rc.close()


@pytest.fixture
async def acluster_client(cluster):
    rc = cluster.async_client(socket_timeout=5.0, socket_connect_timeout=2.0)
    await rc.initialize()
    try:
        yield rc
    finally:
        await rc.aclose()


@pytest.fixture
def cprefix(cluster_client):
    """A unique prefix on the cluster; its keys are deleted afterwards."""
    p = new_prefix("st")
    yield p
    delete_prefix(cluster_client, p)
