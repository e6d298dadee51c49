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
