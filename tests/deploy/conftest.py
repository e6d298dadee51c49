"""Fixtures for tests/deploy: savers on the session cluster (tests/conftest.py ``cluster``)."""

from __future__ import annotations

import pytest

from tests.deploy.helpers import delete_prefix, new_prefix


@pytest.fixture
def cprefix(cluster_client):
    """A unique prefix on the cluster; its keys are deleted afterwards."""
    p = new_prefix("cl")
    yield p
    delete_prefix(cluster_client, p)


@pytest.fixture
def csaver(cluster_client, cprefix):
    import redis_saver

    s = redis_saver.RedisSaver(cluster_client, prefix=cprefix)
    s.setup()
    return s


@pytest.fixture
async def acsaver(acluster_client, cprefix):
    import redis_saver

    s = redis_saver.AsyncRedisSaver(acluster_client, prefix=cprefix)
    await s.asetup()
    return s
