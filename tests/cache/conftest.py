"""Caches on real servers: ``make_cache(**options)`` builds a RedisCache (``sync``) or an
AsyncRedisCache (``async``) from a URL, on a standalone server or the local Redis Cluster,
wrapped so that every test is written once (``await c.get(...)`` runs the sync call in place)."""

from __future__ import annotations

import pytest

from redis_saver import AsyncRedisCache, RedisCache


class Cache:
    """One awaitable face over both caches (the sync one called in place, not in a thread)."""

    def __init__(self, cache, sync: bool) -> None:
        self.cache, self.sync = cache, sync

    async def get(self, keys):
        return self.cache.get(keys) if self.sync else await self.cache.aget(keys)

    async def set(self, pairs):
        return self.cache.set(pairs) if self.sync else await self.cache.aset(pairs)

    async def clear(self, namespaces=None):
        return self.cache.clear(namespaces) if self.sync else await self.cache.aclear(namespaces)


@pytest.fixture(params=["standalone", pytest.param("cluster", marks=pytest.mark.cluster)])
def deployment(request, redis_url) -> str:
    """The URL of the server the test runs on (``redis+cluster://`` for the cluster)."""
    if request.param == "standalone":
        return redis_url
    return request.getfixturevalue("cluster").url.replace("redis://", "redis+cluster://", 1)


@pytest.fixture(params=["sync", "async"])
async def make_cache(request, deployment, prefix):
    sync = request.param == "sync"
    opened = []

    async def make(url: str | None = None, **options) -> Cache:
        options.setdefault("prefix", prefix)
        if sync:
            cm = RedisCache.from_conn_string(url or deployment, **options)
            cache = cm.__enter__()
        else:
            cm = AsyncRedisCache.from_conn_string(url or deployment, **options)
            cache = await cm.__aenter__()
        opened.append(cm)
        return Cache(cache, sync)

    make.sync = sync  # type: ignore[attr-defined]
    yield make
    for cm in reversed(opened):
        if sync:
            cm.__exit__(None, None, None)
        else:
            await cm.__aexit__(None, None, None)


@pytest.fixture
def raw(deployment):
    """A plain sync client on the test's server, to look at the keys."""
    from redis_saver.transport.clients import make_sync_client

    client = make_sync_client(deployment)
    yield client
    client.close()


def keys_under(raw, prefix: str) -> list[bytes]:
    """Every key of the cache prefix (SCAN on every primary)."""
    return sorted(raw.scan_iter(match=prefix.encode() + b":cache{*", count=1000))
