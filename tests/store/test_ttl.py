"""TTL on real time: an item expires as a Redis key (no sweeper); reads restart its expiry when
asked (``refresh_on_read``, ``refresh_ttl``); the index entries it leaves are skipped by reads
and dropped by later writes. TTLs here are 1.2 s (0.02 min); waits leave 0.5 s of margin."""

from __future__ import annotations

import time

import pytest
import redis
import redis.asyncio as aredis

from devkit.servers import client_kwargs
from redis_saver import AsyncRedisStore, RedisStore

TTL = 0.02  # minutes: 1.2 s
MS = 1200


@pytest.fixture
def client(redis_url):
    c = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    yield c
    c.close()


def pttl(client, store, ns, key) -> int:
    return client.pttl(store.keys.item(ns, key))


def test_an_item_expires_with_its_ttl(client, prefix):
    store = RedisStore(client, prefix=prefix)
    store.put(("n",), "short", {"v": 1}, ttl=TTL)
    store.put(("n",), "long", {"v": 2})
    store.put(("gone",), "k", {"v": 3}, ttl=TTL)
    assert 0 < pttl(client, store, ("n",), "short") <= MS and pttl(client, store, ("n",), "long") == -1
    assert store.list_namespaces() == [("gone",), ("n",)]
    time.sleep(MS / 1000 + 0.5)
    assert store.get(("n",), "short") is None and store.get(("n",), "long").value == {"v": 2}
    assert [i.key for i in store.search(("n",))] == ["long"]
    assert store.search(("gone",)) == [] and store.list_namespaces() == [("n",)]
    # the next write to the shard drops what the expired items left in its indexes
    store.put(("n",), "other", {"v": 4})
    left = {k for k in client.scan_iter(match=store.keys.scan_pattern()) if b"gone" in k or b"short" in k}
    assert left == set()


def test_reads_restart_the_expiry(client, prefix):
    store = RedisStore(client, prefix=prefix, ttl={"default_ttl": TTL, "refresh_on_read": True})
    store.put(("n",), "a", {"v": 1})
    store.put(("n",), "b", {"v": 2})
    store.put(("n",), "c", {"v": 3})
    for i in range(3):  # 3 x 0.6 s > 1.2 s: kept alive by the reads
        time.sleep(MS / 2000)
        assert store.get(("n",), "a") is not None
        assert [i.key for i in store.search(("n",), filter={"v": 2})] == ["b"]
        if i == 0:
            assert store.get(("n",), "c", refresh_ttl=False) is not None
    assert store.get(("n",), "c", refresh_ttl=False) is None  # never refreshed: gone
    assert store.get(("n",), "a").value == {"v": 1} and store.get(("n",), "b").value == {"v": 2}
    # refresh_on_read=False: reads leave the expiry alone
    quiet = RedisStore(client, prefix=prefix, ttl={"default_ttl": TTL, "refresh_on_read": False})
    quiet.put(("q",), "k", {"v": 1})
    time.sleep(MS / 2000)
    assert quiet.get(("q",), "k") is not None
    time.sleep(MS / 2000 + 0.5)
    assert quiet.get(("q",), "k") is None


def test_per_put_ttl_and_no_expiry(client, prefix):
    store = RedisStore(client, prefix=prefix, ttl={"default_ttl": TTL})
    store.put(("n",), "k", {"v": 1})
    assert 0 < pttl(client, store, ("n",), "k") <= MS
    store.put(("n",), "k", {"v": 1}, ttl=None)  # an explicit None: no expiry
    assert pttl(client, store, ("n",), "k") == -1
    store.put(("n",), "k", {"v": 1}, ttl=10)
    assert MS < pttl(client, store, ("n",), "k") <= 600_000


def test_a_store_without_ttl_config_refreshes_items_that_have_one(client, prefix):
    """No default_ttl: gets stay read-only scripts; an item that has a ttl gets a second call."""
    store = RedisStore(client, prefix=prefix)
    store.put(("n",), "k", {"v": 1}, ttl=TTL)
    time.sleep(0.5)
    before = pttl(client, store, ("n",), "k")
    assert store.get(("n",), "k") is not None
    assert pttl(client, store, ("n",), "k") > before + 300
    assert store.search(("n",))[0].key == "k"


def test_vectors_expire_with_their_item(client, prefix):
    def embed(texts):
        return [[float(len(t)), 1.0] for t in texts]

    store = RedisStore(client, prefix=prefix, index={"dims": 2, "embed": embed, "fields": ["text"]})
    store.put(("n",), "k", {"text": "hello"}, ttl=TTL)
    vkey = store.keys.item(("n",), "k").replace(b"}:i:", b"}:v:")
    assert 0 < client.pttl(vkey) <= MS
    assert store.search(("n",), query="hi")[0].score is not None


async def test_async_ttl(redis_url, prefix):
    client = aredis.Redis.from_url(redis_url, socket_timeout=5.0)
    store = AsyncRedisStore(client, prefix=prefix, ttl={"default_ttl": TTL})
    await store.aput(("n",), "k", {"v": 1})
    await store.aput(("n",), "j", {"v": 2})
    time.sleep(MS / 2000)
    assert await store.aget(("n",), "k") is not None
    time.sleep(MS / 2000 + 0.2)
    assert await store.aget(("n",), "k") is not None and await store.aget(("n",), "j") is None
    await client.aclose()
