"""The vector cache (redis_saver/store/_vcache.py) against other workers on one real Redis.

Store A searches (its cache fills, then answers repeated searches); store B (its own cache)
and raw commands change what Redis holds: puts, overwrites, deletes, imports, TTL expiry,
item keys deleted behind the store's back (as maxmemory eviction does), vectors alone deleted,
the version key or the change log deleted. After each change A's next search must equal
InMemoryStore's answer on what Redis now holds, and the scan path's (a store without a cache).
The tests count the cache's scans (``fills``, ``misses``) and change sets applied (``patches``):
a write is patched in, not answered by a scan, so a test cannot pass by falling back.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from langgraph.store.memory import InMemoryStore

from devkit.servers import client_kwargs
from redis_saver import RedisStore
from redis_saver.keys import enc
from redis_saver.store import _semantics, _vcache
from redis_saver.store._keys import enc_ns

from .test_store import count_round_trips

WORDS = ["apple", "banana", "cherry", "date", "fig", "grape", "kiwi", "lemon", "mango", "melon"]
NS = ("mem", "u1")


def embed(texts: list[str]) -> list[list[float]]:
    return [[float(t.count(c)) for c in "aeilmnor"] for t in texts]


INDEX = {"dims": 8, "embed": embed, "fields": ["text"]}


@pytest.fixture(autouse=True)
def _numpy(monkeypatch):
    if _semantics._np is None:
        pytest.skip("numpy not installed (the vector extra)")
    import langgraph.store.memory as memory

    monkeypatch.setattr(memory, "_check_numpy", lambda: False)


SERVERS = ["redis7", "redis8"]


def server_client(request: Any) -> Any:
    """A client of Redis 7 (the scan fills the cache), or of Redis 8 (vector sets: the first
    search of a prefix is answered from them, the next fills the cache)."""
    which = "redis_url" if request.param == "redis7" else "redis8"
    server = request.getfixturevalue(which)
    c = redis.Redis.from_url(server if which == "redis_url" else server.url, **client_kwargs(5.0, 5.0))
    yield c
    c.close()


client = pytest.fixture(params=SERVERS)(server_client)


def stores(client: Any, prefix: str) -> tuple[RedisStore, RedisStore, RedisStore]:
    """A (searches, cached), B (writes, its own cache), C (no cache: the scan path, or the
    vector sets on Redis 8). On Redis 8, A searched ``NS`` once before (from the sets, empty):
    its next search of it fills its cache, as on Redis 7."""
    a = RedisStore(client, prefix=prefix, index=INDEX)
    b = RedisStore(client, prefix=prefix, index=INDEX)
    c = RedisStore(client, prefix=prefix, index=INDEX, vector_cache_bytes=0)
    assert a._cfg.state.vcache is not None and c._cfg.state.vcache is None
    a._vsets()
    if a._cfg.state.vsets:
        assert a.search(NS, query="apple") == [] and a._cfg.state.vcache.fills == 0
    return a, b, c


def norm(results: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.namespace, r.key, r.value, r.score) for r in results]


def reference(c: RedisStore, ns: tuple[str, ...]) -> InMemoryStore:
    """InMemoryStore holding what Redis holds in ``ns``, in its search order."""
    ref = InMemoryStore(index=INDEX)
    for it in c.search(ns, limit=100_000):
        ref.put(ns, it.key, it.value)
    return ref


def check(a: RedisStore, c: RedisStore, query: str, ref: bool = True, **kw: Any) -> list[tuple[Any, ...]]:
    """A's answer is the scan path's, and InMemoryStore's on what Redis holds (``ref``: when
    every item's vectors are its value's, which a put with ``index=False`` breaks)."""
    got = norm(a.search(NS, query=query, **kw))
    want = norm(c.search(NS, query=query, **kw))
    a._settle()  # Redis 8: a fill the search started (in the background) is in before the next
    assert got == want
    if ref:
        assert norm(reference(c, NS).search(NS, query=query, **kw)) == want
    return got


def fill(b: RedisStore, n: int, start: int = 0, **kw: Any) -> None:
    for i in range(start, start + n):
        b.put(NS, f"k{i}", {"text": " ".join(WORDS[(i * 7 + j) % 10] for j in range(1 + i % 3)), "i": i}, **kw)


QUERIES = [("apple melon", {}), ("banana", {"limit": 3}), ("kiwi lemon", {"limit": 4, "offset": 2})]


def check_all(a: RedisStore, c: RedisStore, ref: bool = True) -> None:
    for q, kw in QUERIES:
        check(a, c, q, ref, **kw)


def test_repeated_search_hits_the_cache_in_one_call(client, prefix):
    a, b, c = stores(client, prefix)
    fill(b, 40)
    b.put(NS, "plain", {"n": 1}, index=False)  # no vectors: after the scored ones
    vc = a._cfg.state.vcache
    check_all(a, c)
    assert vc.fills == 1 and vc.hits == len(QUERIES) - 1
    ops = count_round_trips(a)
    for q, kw in QUERIES:
        check(a, c, q, **kw)
    assert vc.hits == 2 * len(QUERIES) - 1 and vc.misses == 0
    assert len(ops) == len(QUERIES)  # one round trip each
    # a search past the scored items reaches the one without vectors
    got = check(a, c, "fig", limit=10, offset=35)
    assert got[-1][1] == "plain" and got[-1][3] is None


def test_writes_by_another_worker(client, prefix):
    a, b, c = stores(client, prefix)
    fill(b, 30)
    check_all(a, c)
    vc = a._cfg.state.vcache
    b.put(NS, "new", {"text": "apple melon apple melon"})  # the best match, new
    ops = count_round_trips(a)
    assert "new" in [r[1] for r in check(a, c, "apple melon", limit=10)]
    assert len(ops) == 1  # the change set came with the candidates' records
    assert vc.misses == 0 and vc.patches == 1 and vc.fills == 1
    check_all(a, c)
    b.put(NS, "k3", {"text": "kiwi"})  # an overwrite: other vectors
    check_all(a, c)
    b.put(NS, "k4", {"other": 1}, index=False)  # an overwrite that keeps its vectors
    check_all(a, c, ref=False)
    b.delete(NS, "k4")
    b.delete(NS, "new")
    check_all(a, c)
    b.batch([])  # nothing
    exported = list(c.export_items(NS))
    b.delete(NS, "k5")
    check_all(a, c)
    assert b.import_items([e for e in exported if e.key == "k5"]) == 1
    check_all(a, c)
    assert vc.misses == 0 and vc.fills == 1 and vc.patches == 6  # every write patched in, no scan


def test_expiry_and_eviction_without_a_bump(client, prefix):
    a, b, c = stores(client, prefix)
    fill(b, 20)
    fill(b, 5, start=100, ttl=0.002)  # 120 ms
    check_all(a, c)
    base = b.keys.base(0)
    misses = a._cfg.state.vcache.misses
    time.sleep(0.3)
    check_all(a, c)  # the expired ones are dropped from the cached ranking
    # items gone behind the store's back (maxmemory eviction deletes keys so)
    best = [r[1] for r in check(a, c, "apple melon", limit=5)]
    for key in best[:3]:
        client.delete(base + b"i:" + enc_ns(NS) + enc(key), base + b"v:" + enc_ns(NS) + enc(key))
    got = check(a, c, "apple melon", limit=5)
    assert not set(best[:3]) & {r[1] for r in got}
    check_all(a, c)
    assert a._cfg.state.vcache.misses == misses  # none of these bumps the version: the cache answered
    # an item's record evicted, its vectors not (and the other way round)
    client.delete(base + b"i:" + enc_ns(NS) + enc(best[3]))
    check_all(a, c)
    client.delete(base + b"v:" + enc_ns(NS) + enc(best[4]))  # it is scored no more
    assert best[4] not in [r[1] for r in check(a, c, "apple melon", ref=False, limit=30)[:-1]]
    check_all(a, c, ref=False)


def test_version_key_deleted_or_evicted(client, prefix):
    a, b, c = stores(client, prefix)
    fill(b, 20)
    check_all(a, c)
    w = b.keys.base(0) + b"w"
    token = client.get(w)
    assert token and b":" in token
    client.delete(w)
    # items changed while the token is gone: a raw overwrite of one item's vectors would be
    # invisible to a cache that took a missing token for its old one
    b.put(NS, "k1", {"text": "apple apple melon melon"})
    assert client.get(w) != token
    client.delete(w)
    got = check(a, c, "apple melon", limit=10)
    assert "k1" in [r[1] for r in got]
    check_all(a, c)
    assert client.get(w)  # a write call made it again (the scan saw none)
    check_all(a, c)


def test_two_caches_fed_by_each_other(client, prefix):
    """Both stores search and write in turns: each next search of either is exact."""
    a, b, c = stores(client, prefix)
    import random

    rng = random.Random(7)
    fill(b, 25)
    for step in range(60):
        w, r = (a, b) if step % 2 else (b, a)
        op = rng.random()
        key = f"k{rng.randrange(40)}"
        if op < 0.3:
            w.put(NS, key, {"text": " ".join(rng.sample(WORDS, rng.randint(1, 3)))})
        elif op < 0.45:
            w.delete(NS, key)
        elif op < 0.55:
            client.delete(b.keys.base(0) + b"i:" + enc_ns(NS) + enc(key))
        q = " ".join(rng.sample(WORDS, 2))
        check(r, c, q, limit=rng.choice([1, 3, 10]), offset=rng.choice([0, 0, 2]))
    assert a._cfg.state.vcache.hits and b._cfg.state.vcache.hits


def test_the_bound(client, prefix):
    a, b, c = stores(client, prefix)
    small = RedisStore(client, prefix=prefix, index=INDEX, vector_cache_bytes=1000)
    fill(b, 40)
    check(small, c, "apple")
    assert small._cfg.state.vcache.fills == 0 and not small._cfg.state.vcache.entries  # 40 x 8 x 4 > 1000
    with pytest.raises(ValueError):
        RedisStore(client, prefix=prefix, index=INDEX, vector_cache_bytes=-1)


def test_a_cached_search_is_one_command_on_the_wire(wire, wire_client, prefix, redis_url):
    from devkit.wire import SETUP_COMMANDS

    a = RedisStore(wire_client("sync"), prefix=prefix, index=INDEX)
    b = RedisStore(wire_client("sync"), prefix=prefix, index=INDEX)
    fill(b, 30)
    a.search(NS, query="apple", limit=5)  # fills the cache
    wire.reset()
    got = a.search(NS, query="kiwi melon", limit=5)
    cmds = [c for c, n in zip(wire.commands, wire.names(), strict=True) if n not in SETUP_COMMANDS]
    assert len(cmds) == 1 and cmds[0][0] in (b"FCALL", b"EVALSHA")
    assert b"c" in cmds[0] and b"s" not in cmds[0]  # the cached read, no scan
    assert len(got) == 5 and a._cfg.state.vcache.hits == 1


def test_many_of_the_best_gone(client, prefix):
    """More candidates gone than the partial ranking holds: the search ranks all and goes on."""
    a, b, c = stores(client, prefix)
    fill(b, 80)
    base = b.keys.base(0)
    order = [r[1] for r in check(a, c, "apple melon", limit=60)]
    for key in order[:40]:
        client.delete(base + b"i:" + enc_ns(NS) + enc(key))
    hits = a._cfg.state.vcache.hits
    ops = count_round_trips(a)
    got = check(a, c, "apple melon", limit=3, offset=1)
    assert a._cfg.state.vcache.hits == hits + 1 and len(ops) >= 3  # several calls, from the cache
    assert not set(order[:40]) & {r[1] for r in got}
    check_all(a, c)


@pytest.mark.parametrize("seed", range(6))
def test_partial_ranking_is_the_head_of_the_exact_one(seed):
    """The float32 screen then float64 scoring gives the exact ranking's first k: items with
    several vectors, duplicates (ties), zero vectors, items without vectors, items gone."""
    import numpy as np

    from redis_saver.store._vcache import Entry

    rng = np.random.default_rng(seed)
    dims = [3, 8, 64, 256][seed % 4]
    base = rng.standard_normal((50, dims)).astype(np.float32)
    vectors: list[list[bytes]] = []
    for i in range(3000):
        n = int(rng.integers(0, 4)) if seed % 2 else 1
        rows = [
            base[rng.integers(0, 50)] if rng.random() < 0.3 else rng.standard_normal(dims).astype(np.float32)
            for _ in range(n)
        ]
        if i % 97 == 0 and rows:
            rows[0] = np.zeros(dims, dtype=np.float32)
        vectors.append([r.astype("<f4").tobytes() for r in rows])
    e = Entry(b"t", [(b"n\x00", b"%d\x00" % i) for i in range(3000)], vectors, dims)
    e.alive[rng.integers(0, 3000, 200)] = False
    q = (base[0] + 1e-3 * rng.standard_normal(dims)).tolist() if seed % 3 else rng.standard_normal(dims).tolist()
    whole, wscores, sl, complete = e.ranking(q, None)
    assert complete and not set(whole) & set(sl)
    # the whole ranking is the scan's: best_scores of each live item, then (-score, position)
    live = [i for i in range(3000) if e.alive[i] and vectors[i]]
    best = _semantics.best_scores(q, [vectors[i] for i in live])
    want = sorted(range(len(live)), key=lambda j: (-best[j], j))
    assert whole == [live[j] for j in want] and wscores == [best[j] for j in want]
    for k in (1, 10, 26, 500):
        head, scores, _, _ = e.ranking(q, k)
        assert head == whole[:k] and scores == wscores[:k]


@pytest.mark.parametrize("kind", ["normal", "ties", "minus_inf", "nan", "sorted", "few_finite"])
def test_kth_largest_is_the_partitions(kind):
    """The cosine head's k-th best (block maxima, then a partition of the values reaching the
    k-th largest of them) equals ``np.partition``'s, ties, infinities and NaN included."""
    import numpy as np

    from redis_saver.store._vcache import kth_largest

    rng = np.random.default_rng(len(kind))
    for _ in range(60):
        n = int(rng.integers(1, 40_000))
        k = int(rng.integers(1, min(n, 300) + 1))
        v = rng.standard_normal(n).astype(np.float32)
        if kind == "ties":
            v = np.round(v * 3).astype(np.float32)
        elif kind == "minus_inf":
            v[rng.integers(0, n, n // 2)] = -np.inf
        elif kind == "nan":
            v[rng.integers(0, n, max(1, n // 500))] = np.nan
        elif kind == "sorted":  # the maxima all in the last blocks
            v = np.sort(v)
        elif kind == "few_finite":
            v[:] = -np.inf
            v[rng.integers(0, n, k)] = 1.0
        want, got = np.partition(v, n - k)[n - k], kth_largest(v, k)
        assert got == want or (np.isnan(got) and np.isnan(want)), (n, k)


def test_large_ranking_is_the_head_of_the_exact_one():
    """At 40,000 items (the k-th best found from block maxima) with many tied rows, the head
    is the exact ranking's."""
    import numpy as np

    from redis_saver.store._vcache import Entry

    rng = np.random.default_rng(7)
    base = rng.standard_normal((300, 16)).astype(np.float32)
    rows = np.where(rng.random((40_000, 1)) < 0.5, base[rng.integers(0, 300, 40_000)],
                    rng.standard_normal((40_000, 16)).astype(np.float32))  # fmt: skip
    vectors = [[r.astype("<f4").tobytes()] for r in rows]
    e = Entry(b"t", [(b"n\x00", b"%d\x00" % i) for i in range(40_000)], vectors, 16)
    for q in (base[3].tolist(), rng.standard_normal(16).tolist()):
        whole, wscores, _, _ = e.ranking(q, None)
        for k in (1, 10, 26, 200):
            head, scores, _, _ = e.ranking(q, k)
            assert head == whole[:k] and scores == wscores[:k]


def test_maxmemory_eviction():
    """A real maxmemory with allkeys-random: item records, vectors, index keys and the version
    key vanish without a bump while another worker writes; every search of the cached store
    equals the scan's on what the server holds."""
    import random

    from devkit.servers import start_standalone

    server = start_standalone(extra_args=["--maxmemory", "3mb", "--maxmemory-policy", "allkeys-random"])
    try:
        cl = redis.Redis.from_url(server.url, **client_kwargs(5.0, 5.0))
        a, b, c = stores(cl, "ev")
        rng = random.Random(5)
        before = cl.info("stats")["evicted_keys"]
        pad = "".join(rng.choice("0123456789abcdef") for _ in range(3000))  # not compressible

        def put(i: int) -> None:
            b.put(NS, f"k{i}", {"text": " ".join(rng.sample(WORDS, rng.randint(1, 3))), "pad": pad})

        for i in range(300):
            put(i)
        for step in range(120):
            if step % 3 == 0:
                for i in range(20):
                    put(300 + 20 * step + i)  # pushes older keys out
            q = " ".join(rng.sample(WORDS, 2))
            check(a, c, q, ref=False, limit=rng.choice([3, 10]), offset=rng.choice([0, 2]))
        evicted = cl.info("stats")["evicted_keys"] - before
        assert evicted > 100, evicted
        vc = a._cfg.state.vcache
        # misses: only when the token or a candidate's vectors alone were evicted (random)
        assert vc.hits > 0 and vc.patches > 0, (vc.hits, vc.misses, vc.patches)
        cl.close()
    finally:
        server.stop()


@pytest.mark.parametrize("lost", ["k-entry", "k", "q", "n"])
def test_index_keys_evicted(client, prefix, lost):
    """An index key (or entry) gone without a bump hides items from a scan: from the cache too."""
    a, b, c = stores(client, prefix)
    fill(b, 30)
    check_all(a, c)
    base, e = b.keys.base(0), enc_ns(NS)
    top = check(a, c, "apple melon", limit=3)[0][1]
    if lost == "k-entry":
        client.zrem(base + b"k:" + e, enc(top))
    else:
        client.delete(base + (b"k:" + e if lost == "k" else lost.encode()))
    hits = a._cfg.state.vcache.hits
    got = check(a, c, "apple melon", ref=False, limit=3)
    assert top not in [r[1] for r in got] and a._cfg.state.vcache.hits == hits + 1
    check_all(a, c, ref=False)
    # a new item in the namespace: with q or n lost, the namespace is listed again and the
    # items its k: kept are found again, though the log names only the new one (the write
    # raises the log's floor: the cache scans)
    misses = a._cfg.state.vcache.misses
    b.put(NS, "fresh", {"text": "lemon"})
    check_all(a, c, ref=False)
    assert a._cfg.state.vcache.misses == misses + (lost in ("q", "n"))
    b.put(NS, "fresh2", {"text": "lemon kiwi"})
    check_all(a, c, ref=False)
    assert a._cfg.state.vcache.misses == misses + (lost in ("q", "n"))  # patched


def test_data_of_the_previous_release(client, prefix):
    """The previous release wrote no version key: its data is searched in place; the first
    search makes the key (a write call), the next fills the cache, the one after uses it. On
    Redis 8 the sets answer the search, and the background fill it starts makes the key (a
    write call) and fills the cache: the next search uses it."""
    a, b, c = stores(client, prefix)
    fill(c, 30)
    w = c.keys.base(0) + b"w"
    client.delete(w)  # the same keys as the previous release's
    vc = a._cfg.state.vcache
    check(a, c, "apple melon", limit=5)
    if a._cfg.state.vsets:
        assert client.get(w) and vc.fills == 1 and a._cfg.state.vset_stats["hits"] == 1
    else:
        assert client.get(w) and vc.fills == 0
        check(a, c, "kiwi", limit=5)
        assert vc.fills == 1 and vc.hits == 0
    check(a, c, "kiwi lemon", limit=5)
    assert vc.hits == 1


async def test_async_store_uses_the_cache(prefix, client):
    import redis.asyncio as aredis

    from redis_saver import AsyncRedisStore

    server = client.connection_pool.connection_kwargs
    ac = aredis.Redis(host=server["host"], port=server["port"], socket_timeout=5.0)
    a = AsyncRedisStore(ac, prefix=prefix, index=INDEX)
    await a._avsets()
    if a._cfg.state.vsets:  # Redis 8: the prefix searched once (from the sets), as in stores()
        assert await a.asearch(NS, query="apple") == [] and a._cfg.state.vcache.fills == 0
    b = RedisStore(client, prefix=prefix, index=INDEX)
    c = RedisStore(client, prefix=prefix, index=INDEX, vector_cache_bytes=0)
    fill(b, 40)
    for q, kw in QUERIES * 2:
        got = norm(await a.asearch(NS, query=q, **kw))
        await a._asettle()  # Redis 8: the first one started a background fill (a task)
        assert got == norm(c.search(NS, query=q, **kw))
    assert a._cfg.state.vcache.fills == 1 and a._cfg.state.vcache.hits == 2 * len(QUERIES) - 1
    b.delete(NS, "k1")
    for q, kw in QUERIES:
        assert norm(await a.asearch(NS, query=q, **kw)) == norm(c.search(NS, query=q, **kw))
    assert a._cfg.state.vcache.misses == 0 and a._cfg.state.vcache.fills == 1 and a._cfg.state.vcache.patches == 1
    await ac.aclose()


def test_redis8_exact_mode_fills_the_cache_in_the_background(redis8, prefix, monkeypatch):
    """On a server with vector sets (exact mode), the first search of a prefix is answered from
    them; the second too, and it starts a background fill of the cache (bounded pages, no
    search scans); once it is in, the next ones use it. A cache found not current (more changes
    than a read brings) gives way to the sets, and the next search fills it again in the
    background; a prefix whose vectors do not fit in the cache's bound stays with the sets."""
    client = redis.Redis.from_url(redis8.url, **client_kwargs(5.0, 5.0))
    a = RedisStore(client, prefix=prefix, index=INDEX)
    scan = RedisStore(client, prefix=prefix, index=INDEX, vector_cache_bytes=0, vector_sets=False)
    fill(a, 40)
    vc, sets = a._cfg.state.vcache, a._cfg.state.vset_stats
    check(a, scan, "apple melon")
    assert sets == {"hits": 1, "scans": 0} and vc.fills == 0
    check(a, scan, "banana", limit=3)  # from the sets; the fill ran meanwhile (check settles it)
    assert sets == {"hits": 2, "scans": 0} and vc.fills == 1 and vc.hits == 0
    check(a, scan, "kiwi lemon", limit=4, offset=2)
    assert sets["hits"] == 2 and vc.fills == 1 and vc.hits == 1
    monkeypatch.setattr(_vcache, "CHANGE_BUDGET", 2)
    fill(a, 5, start=100)
    check(a, scan, "apple melon")
    assert sets["hits"] == 3 and vc.misses == 1 and vc.fills == 1
    check(a, scan, "banana", limit=3)
    assert sets["hits"] == 4 and vc.fills == 2
    check(a, scan, "kiwi lemon", limit=4, offset=2)
    assert sets == {"hits": 4, "scans": 0} and vc.fills == 2 and vc.hits == 2
    small = RedisStore(client, prefix=prefix, index=INDEX, vector_cache_bytes=40 * 8 * 4 - 1)
    check_all(small, scan)
    check_all(small, scan)
    assert small._cfg.state.vset_stats == {"hits": 2 * len(QUERIES), "scans": 0} and small._cfg.state.vcache.fills == 0
    assert not small._cfg.state.vcache.filling
    client.close()
