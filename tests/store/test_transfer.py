"""export_items / import_items: items out and back in as they were stored (values as the
serializer's bytes, created_at / updated_at, ttl, vectors), across prefixes and shard layouts."""

from __future__ import annotations

import json

import redis
import redis.asyncio as aredis

from devkit.servers import client_kwargs
from redis_saver import AsyncRedisStore, RedisStore
from redis_saver.store import StoredItem


def embed(texts):
    return [[float(t.count(c)) for c in "aeiou"] for t in texts]


INDEX = {"dims": 5, "embed": embed, "fields": ["text"]}
NAMESPACES = [("users", "{u1}", "memories"), ("users", "u:2"), ("docs", "日本")]


def fill(store):
    for i, ns in enumerate(NAMESPACES):
        for j in range(5):
            value = {"text": f"item {i} {j} " + "aeiou"[j] * j, "n": j, "big": "x" * 600 * (j == 4)}
            store.put(ns, f"k{j}", value, ttl=60 if j == 3 else None)


def view(store):
    out = []
    for ns in NAMESPACES:
        for item in store.search(ns, query="ooo ii", limit=20):
            out.append((item.namespace, item.key, item.value, item.created_at, item.updated_at, round(item.score, 9)))
    return out


def test_export_import_round_trip(redis_url, prefix):
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    src = RedisStore(client, prefix=prefix, index=INDEX)
    fill(src)
    exported = list(src.export_items())
    assert len(exported) == 15 and {it.namespace for it in exported} == set(NAMESPACES)
    assert sorted(it.ttl_ms for it in exported)[-3:] == [3_600_000] * 3
    # through JSON, as the CLI writes them
    lines = [json.dumps(it.to_json()) for it in exported]
    back = [StoredItem.from_json(json.loads(line)) for line in lines]
    dst = RedisStore(client, prefix=prefix + "b", index=INDEX, shards=3, compress=False)
    assert dst.import_items(back) == 15
    assert view(dst) == view(src)  # values, times, vectors (scores), order
    assert 0 < client.pttl(dst.keys.item(NAMESPACES[0], "k3")) <= 3_600_000
    assert client.pttl(dst.keys.item(NAMESPACES[0], "k2")) == -1
    assert list(src.export_items(("users",))) == [it for it in exported if it.namespace[0] == "users"]
    client.close()


async def test_async_export_import(redis_url, prefix):
    sync_client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    fill(RedisStore(sync_client, prefix=prefix, index=INDEX))
    client = aredis.Redis.from_url(redis_url, socket_timeout=5.0)
    src = AsyncRedisStore(client, prefix=prefix, index=INDEX)
    dst = AsyncRedisStore(client, prefix=prefix + "c", index=INDEX)
    items = [it async for it in src.aexport_items()]
    assert await dst.aimport_items(items) == 15
    assert [it async for it in dst.aexport_items()] == items
    await client.aclose()
    sync_client.close()
