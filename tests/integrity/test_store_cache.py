"""With an integrity key, the store never returns an item's value from another namespace or key,
nor one written without the key, nor tampered bytes; the node cache never returns another key's
value. A payload planted without the key is never deserialized (the canary is never called)."""

from __future__ import annotations

import os
from typing import Any

import pytest
import redis

import redis_saver
from tests.integrity import canary
from tests.integrity._graphs import SERDE, Sync, close_sync

KEY = os.urandom(32)
NAMESPACES = [("users", "a"), ("users", "b"), ("docs",)]


def _store(r: Any, prefix: str, **kw: Any) -> Any:
    return redis_saver.RedisStore(r, prefix=prefix, serde=SERDE, **kw)


def _made(kind: str, sync_cls: Any, async_cls: Any, r: Any, url: str, **kw: Any) -> Any:
    """The sync class on ``r``, or the async one driven from sync code."""
    return sync_cls(r, **kw) if kind == "sync" else Sync(async_cls, url, **kw)


def _items(r: Any, prefix: str) -> dict[bytes, bytes]:
    return {k: r.get(k) for k in r.scan_iter(match=f"{prefix}:store#*:i:*", count=1000)}


def _reads(store: Any) -> list[Any]:
    out: list[Any] = []
    for ns in NAMESPACES:
        for key in ("k1", "k2", "big"):
            try:
                it = store.get(ns, key)
                out.append(None if it is None else (it.namespace, it.key, it.value))
            except redis_saver.IntegrityError:
                out.append("IntegrityError")
        try:
            out.append([(i.key, i.value) for i in store.search(ns, limit=50)])
        except redis_saver.IntegrityError:
            out.append("IntegrityError")
    return out


@pytest.fixture(params=["sync", "async"])
def stored(request: pytest.FixtureRequest, redis_url: str, prefix: str) -> Any:
    r = redis.Redis.from_url(redis_url)
    s = _made(request.param, redis_saver.RedisStore, redis_saver.AsyncRedisStore, r, redis_url,
              prefix=prefix, serde=SERDE, integrity_key=KEY)
    s.setup()
    for ns in NAMESPACES:
        s.put(ns, "k1", {"who": list(ns), "n": 1})
        s.put(ns, "k2", {"who": list(ns), "n": 2})
        s.put(ns, "big", {"text": "word " * 200 + "/".join(ns)})  # stored compressed
    yield r, prefix, s
    close_sync(s)
    r.close()


def test_store_values_swapped_between_namespaces_and_keys_are_refused(stored: Any) -> None:
    r, prefix, s = stored
    base = _reads(s)
    items = _items(r, prefix)
    assert len(items) == 9
    changed = refused = 0
    for ka, _ in items.items():
        for kb, vb in items.items():
            if ka == kb:
                continue
            old = r.get(ka)
            r.set(ka, vb, keepttl=True)
            got = _reads(s)
            r.set(ka, old, keepttl=True)
            for b, g in zip(base, got, strict=True):
                if g == "IntegrityError":
                    refused += 1
                elif g != b:
                    changed += 1
    assert changed == 0 and refused >= 9 * 8, (changed, refused)
    assert _reads(s) == base


def test_store_flipped_bytes_and_planted_items_are_refused(stored: Any) -> None:
    r, prefix, s = stored
    base = _reads(s)
    for k, v in _items(r, prefix).items():
        head, _, data = v.partition(b"\n")
        for bad in (head + b"\n" + data[:-1] + bytes([data[-1] ^ 1]), v[: len(v) - 3]):
            r.set(k, bad, keepttl=True)
            got = _reads(s)
            assert "IntegrityError" in got and all(g in ("IntegrityError", b) for g, b in zip(got, base, strict=True))
        r.set(k, v, keepttl=True)
    plain = _store(r, prefix)
    bomb = canary.Canary("store")
    canary.CALLS.clear()
    plain.put(("users", "a"), "k1", {"payload": bomb})
    with pytest.raises(redis_saver.IntegrityError):
        s.get(("users", "a"), "k1")
    with pytest.raises(redis_saver.IntegrityError):
        s.search(("users",))
    assert canary.CALLS == []
    assert plain.get(("users", "a"), "k1") is not None and canary.CALLS == ["store"]  # the canary is live


def test_store_export_import_keep_the_tags(stored: Any) -> None:
    """export_items checks each item and gives it without its tag; import_items with a key
    signs it for the target prefix (another key here); a tampered item stops the export."""
    r, prefix, s = stored
    items = list(s.export_items())
    assert len(items) == 9 and all(b"\x1fk" not in it.type.encode() for it in items)
    other = _store(r, prefix + "x", integrity_key=os.urandom(32))
    other.setup()
    assert other.import_items(items) == 9
    assert _reads(other) == _reads(s)
    k, v = next(iter(_items(r, prefix).items()))
    r.set(k, v[:-1] + bytes([v[-1] ^ 1]), keepttl=True)
    with pytest.raises(redis_saver.IntegrityError):
        list(s.export_items())


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_cache_never_returns_another_keys_value(kind: str, redis_url: str, prefix: str) -> None:
    r = redis.Redis.from_url(redis_url)
    cache = _made(kind, redis_saver.RedisCache, redis_saver.AsyncRedisCache, r, redis_url,
                  prefix=prefix, serde=SERDE, integrity_key=KEY)
    pairs = {(("n1",), "a"): ("A" * 400, None), (("n1",), "b"): ("B", None), (("n2",), "a"): ("other ns", None)}
    cache.set(pairs)
    assert cache.get(list(pairs)) == {k: v for k, (v, _) in pairs.items()}
    entries = {k: r.get(k) for k in r.scan_iter(match=f"{prefix}:cache*e*", count=100)}
    assert len(entries) == 3
    for ka in entries:
        for kb, vb in entries.items():
            if ka != kb:
                r.set(ka, vb)
                with pytest.raises(redis_saver.IntegrityError):
                    cache.get(list(pairs))
                r.set(ka, entries[ka])
        r.set(ka, entries[ka][:-1] + bytes([entries[ka][-1] ^ 1]))
        with pytest.raises(redis_saver.IntegrityError):
            cache.get(list(pairs))
        r.set(ka, entries[ka])
    plain = redis_saver.RedisCache(r, prefix=prefix, serde=SERDE)
    bomb = canary.Canary("cache")
    canary.CALLS.clear()
    plain.set({(("n1",), "a"): (bomb, None)})
    with pytest.raises(redis_saver.IntegrityError, match="no integrity tag"):
        cache.get([(("n1",), "a")])
    assert canary.CALLS == []
    assert plain.get([(("n1",), "b")]) == {(("n1",), "b"): "B"}  # tagged entries read without a key
    close_sync(cache)
    r.close()


async def test_async_store_and_cache_take_the_key(redis_url: str, prefix: str) -> None:
    import redis.asyncio as aredis

    ac = aredis.Redis.from_url(redis_url)
    store = redis_saver.AsyncRedisStore(ac, prefix=prefix, integrity_key=[KEY])
    await store.setup()
    await store.aput(("a",), "k", {"v": 1})
    assert (await store.aget(("a",), "k")).value == {"v": 1}
    plain = redis_saver.AsyncRedisStore(ac, prefix=prefix)
    await plain.aput(("a",), "k", {"v": 2})
    with pytest.raises(redis_saver.IntegrityError):
        await store.aget(("a",), "k")
    cache = redis_saver.AsyncRedisCache(ac, prefix=prefix, integrity_key=KEY)
    await cache.aset({(("n",), "k"): (1, None)})
    assert await cache.aget([(("n",), "k")]) == {(("n",), "k"): 1}
    await ac.aclose()
