"""Fixtures of the automatic pipelining tests: the write counter and an asyncio client."""

from __future__ import annotations

import pytest
import redis.asyncio

from devkit.servers import async_client_kwargs
from tests.scale._autopipe import Writes


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> Writes:
    return Writes(monkeypatch)


@pytest.fixture
async def aclient(redis_url):
    client = redis.asyncio.Redis.from_url(redis_url, **async_client_kwargs(5.0, 5.0))
    try:
        yield client
    finally:
        await client.aclose()
