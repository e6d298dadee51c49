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
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

from devkit.servers import client_kwargs
from redis_saver import RedisStore
from redis_saver.keys import enc
from redis_saver.store import _semantics
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


@pytest.fixture
def client(redis_url):
    c = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    yield c
    c.close()


def stores(client: Any, prefix: str) -> tuple[RedisStore, RedisStore, RedisStore]:
    """A (searches, cached), B (writes, its own cache), C (no cache: the scan path)."""
    a = RedisStore(client, prefix=prefix, index=INDEX)
    b = RedisStore(client, prefix=prefix, index=INDEX)
    c = RedisStore(client, prefix=prefix, index=INDEX, vector_cache_bytes=0)
    assert a._cfg.vcache is not None and c._cfg.vcache is None
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
    vc = a._cfg.vcache
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
    vc = a._cfg.vcache
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
    misses = a._cfg.vcache.misses
    time.sleep(0.3)
    check_all(a, c)  # the expired ones are dropped from the cached ranking
    # items gone behind the store's back (maxmemory eviction deletes keys so)
    best = [r[1] for r in check(a, c, "apple melon", limit=5)]
    for key in best[:3]:
        client.delete(base + b"i:" + enc_ns(NS) + enc(key), base + b"v:" + enc_ns(NS) + enc(key))
    got = check(a, c, "apple melon", limit=5)
    assert not set(best[:3]) & {r[1] for r in got}
    check_all(a, c)
    assert a._cfg.vcache.misses == misses  # none of these bumps the version: the cache answered
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
    assert a._cfg.vcache.hits and b._cfg.vcache.hits


def test_the_bound(client, prefix):
    a, b, c = stores(client, prefix)
    small = RedisStore(client, prefix=prefix, index=INDEX, vector_cache_bytes=1000)
    fill(b, 40)
    check(small, c, "apple")
    assert small._cfg.vcache.fills == 0 and not small._cfg.vcache.entries  # 40 x 8 x 4 > 1000
    with pytest.raises(ValueError):
        RedisStore(client, prefix=prefix, index=INDEX, vector_cache_bytes=-1)


def test_a_cached_search_is_one_command_on_the_wire(wire, wire_client, prefix, client):
    from devkit.wire import SETUP_COMMANDS

    a = RedisStore(wire_client("sync"), prefix=prefix, index=INDEX)
    b = RedisStore(client, prefix=prefix, index=INDEX)
    fill(b, 30)
    a.search(NS, query="apple", limit=5)  # fills the cache
    wire.reset()
    got = a.search(NS, query="kiwi melon", limit=5)
    cmds = [c for c, n in zip(wire.commands, wire.names(), strict=True) if n not in SETUP_COMMANDS]
    assert len(cmds) == 1 and cmds[0][0] in (b"FCALL", b"EVALSHA")
    assert b"c" in cmds[0] and b"s" not in cmds[0]  # the cached read, no scan
    assert len(got) == 5 and a._cfg.vcache.hits == 1


def test_many_of_the_best_gone(client, prefix):
    """More candidates gone than the partial ranking holds: the search ranks all and goes on."""
    a, b, c = stores(client, prefix)
    fill(b, 80)
    base = b.keys.base(0)
    order = [r[1] for r in check(a, c, "apple melon", limit=60)]
    for key in order[:40]:
        client.delete(base + b"i:" + enc_ns(NS) + enc(key))
    hits = a._cfg.vcache.hits
    ops = count_round_trips(a)
    got = check(a, c, "apple melon", limit=3, offset=1)
    assert a._cfg.vcache.hits == hits + 1 and len(ops) >= 3  # several calls, from the cache
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
        rows = [base[rng.integers(0, 50)] if rng.random() < 0.3 else rng.standard_normal(dims).astype(np.float32)
                for _ in range(n)]
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
        vc = a._cfg.vcache
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
    hits = a._cfg.vcache.hits
    got = check(a, c, "apple melon", ref=False, limit=3)
    assert top not in [r[1] for r in got] and a._cfg.vcache.hits == hits + 1
    check_all(a, c, ref=False)
    # a new item in the namespace: with q lost, the namespace is listed again and the items its
    # k: kept are found again, though the log names only the new one (the write raises the
    # log's floor: the cache scans)
    misses = a._cfg.vcache.misses
    b.put(NS, "fresh", {"text": "lemon"})
    check_all(a, c, ref=False)
    assert a._cfg.vcache.misses == misses + (lost == "q")
    b.put(NS, "fresh2", {"text": "lemon kiwi"})
    check_all(a, c, ref=False)
    assert a._cfg.vcache.misses == misses + (lost == "q")  # patched


def test_data_of_the_previous_release(client, prefix):
    """The previous release wrote no version key: its data is searched in place; the first
    search makes the key (a write call), the next fills the cache, the one after uses it."""
    a, b, c = stores(client, prefix)
    fill(c, 30)
    w = c.keys.base(0) + b"w"
    client.delete(w)  # the same keys as the previous release's
    vc = a._cfg.vcache
    check(a, c, "apple melon", limit=5)
    assert client.get(w) and vc.fills == 0
    check(a, c, "kiwi", limit=5)
    assert vc.fills == 1 and vc.hits == 0
    check(a, c, "kiwi lemon", limit=5)
    assert vc.hits == 1


async def test_async_store_uses_the_cache(redis_url, prefix, client):
    import redis.asyncio as aredis

    from redis_saver import AsyncRedisStore

    _, b, c = stores(client, prefix)
    fill(b, 40)
    ac = aredis.Redis.from_url(redis_url, socket_timeout=5.0)
    a = AsyncRedisStore(ac, prefix=prefix, index=INDEX)
    for q, kw in QUERIES * 2:
        got = norm(await a.asearch(NS, query=q, **kw))
        assert got == norm(c.search(NS, query=q, **kw))
    assert a._cfg.vcache.fills == 1 and a._cfg.vcache.hits == 2 * len(QUERIES) - 1
    b.delete(NS, "k1")
    for q, kw in QUERIES:
        assert norm(await a.asearch(NS, query=q, **kw)) == norm(c.search(NS, query=q, **kw))
    assert a._cfg.vcache.misses == 0 and a._cfg.vcache.fills == 1 and a._cfg.vcache.patches == 1
    await ac.aclose()


# ---- the change log: writes patched into the cached entries -----------------------------
def test_three_caches_and_a_writer(client, prefix):
    """Three stores with caches of their own search in turns while a fourth worker puts,
    overwrites, deletes, imports, and items expire or vanish behind the store's back: every
    search equals the scan's, and no write sends a cache back to a scan."""
    import random

    a, b, c = stores(client, prefix)
    d = RedisStore(client, prefix=prefix, index=INDEX)
    w = RedisStore(client, prefix=prefix, index=INDEX, vector_cache_bytes=0)
    rng = random.Random(11)
    fill(w, 40)
    exported = list(c.export_items(NS))
    base = w.keys.base(0)
    for step in range(90):
        op, key = rng.random(), f"k{rng.randrange(50)}"
        if op < 0.35:
            w.put(NS, key, {"text": " ".join(rng.sample(WORDS, rng.randint(1, 3)))})
        elif op < 0.45:
            w.put(NS, key, {"text": rng.choice(WORDS)}, index=False if rng.random() < 0.3 else None)
        elif op < 0.6:
            w.delete(NS, key)
        elif op < 0.68:
            w.import_items([rng.choice(exported)])
        elif op < 0.72:
            client.delete(base + b"i:" + enc_ns(NS) + enc(key))  # evicted: no bump
        elif op < 0.76:
            w.batch([])
        if step % 30 == 29:  # items that expire (300 ms), each cache searches, they expire
            fill(w, 4, start=300 + step, ttl=0.005)
            for r in (a, b, d):
                check(r, c, "apple melon", ref=False, limit=10)
            time.sleep(0.6)
        r = (a, b, d)[step % 3]
        check(r, c, " ".join(rng.sample(WORDS, 2)), ref=False, limit=rng.choice([1, 3, 10]), offset=rng.choice([0, 2]))
    for s in (a, b, d):
        vc = s._cfg.vcache
        assert vc.fills == 1 and vc.misses == 0 and vc.patches >= 20, (vc.fills, vc.misses, vc.patches)


def test_change_log_lost_is_never_taken_for_no_change(client, prefix):
    """The log key evicted (or deleted): a cache behind it must scan, not believe it current;
    the token and the log vanishing together start a new incarnation."""
    a, b, c = stores(client, prefix)
    fill(b, 30)
    check_all(a, c)
    vc, base = a._cfg.vcache, b.keys.base(0)
    log = base + b"l"
    assert client.exists(log)
    client.delete(log)
    check_all(a, c)  # nothing changed since: the token alone says current
    assert vc.misses == 0 and vc.fills == 1
    b.put(NS, "best", {"text": "apple melon apple melon"})  # logged in the lost log: lost too
    client.delete(log)
    b.put(NS, "k2", {"text": "fig"})  # a new log, floor at the counter before it
    assert "best" in [r[1] for r in check(a, c, "apple melon", limit=3)]
    assert vc.misses == 1 and vc.fills == 2
    b.put(NS, "k3", {"text": "kiwi"})
    check_all(a, c)
    assert vc.misses == 1 and vc.patches == 1  # the new log covers the refilled entry
    client.delete(log, base + b"w")
    b.put(NS, "k4", {"text": "apple melon melon"})
    check_all(a, c)
    assert vc.misses == 2


def test_change_log_trimmed(client, prefix):
    """More items changed in the shard than the log keeps since a cache's token: a scan."""
    from redis_saver.store._vcache import CHANGE_LOG

    a, b, c = stores(client, prefix)
    fill(b, 20)
    check_all(a, c)
    vc = a._cfg.vcache
    b.put(NS, "k1", {"text": "apple apple melon"})
    other = RedisStore(client, prefix=prefix)  # no index: fast puts
    other.batch([PutOp(("other",), f"o{i}", {"i": i}) for i in range(CHANGE_LOG - 2)])
    check_all(a, c)
    assert vc.misses == 0 and vc.patches == 1  # 2047 changed: covered (one under the prefix)
    assert client.zcard(b.keys.base(0) + b"l") == CHANGE_LOG + 1  # the items and the floor
    b.put(NS, "k2", {"text": "apple apple melon"})
    other.batch([PutOp(("other",), f"p{i}", {"i": i}) for i in range(CHANGE_LOG)])
    check_all(a, c)
    assert vc.misses == 1 and vc.fills == 2
    assert client.zcard(b.keys.base(0) + b"l") == CHANGE_LOG + 1


def test_change_budget(client, prefix, monkeypatch):
    """More changed items under the prefix than one read brings: a scan."""
    from redis_saver.store import _vcache

    monkeypatch.setattr(_vcache, "CHANGE_BUDGET", 3)
    a, b, c = stores(client, prefix)
    fill(b, 20)
    check_all(a, c)
    vc = a._cfg.vcache
    fill(b, 3, start=50)
    check_all(a, c)
    assert vc.misses == 0 and vc.patches == 1
    fill(b, 4, start=60)
    check_all(a, c)
    assert vc.misses == 1 and vc.fills == 2


def test_changes_under_the_prefix_only(client, prefix):
    """Changes to namespaces beside the prefix (a shorter one whose key spells the prefix's
    last label, a label that starts like it, one holding NUL) are not the prefix's; a deeper
    namespace's are."""
    a, b, c = stores(client, prefix)
    fill(b, 20)
    check_all(a, c)
    vc = a._cfg.vcache
    text = {"text": "apple melon apple melon"}
    b.put(("mem",), "u1", text)
    b.put(("mem", "u10"), "x", text)
    b.batch([PutOp(("mem", "u1\x00"), "y", text), PutOp(("mem", "u1", "deep"), "z", text)])
    got = check(a, c, "apple melon", ref=False, limit=5)  # (the reference holds one namespace)
    assert (("mem", "u1", "deep"), "z") in [g[:2] for g in got] and {g[0] for g in got} <= {NS, NS + ("deep",)}
    assert vc.misses == 0 and vc.patches == 1
    entry = next(iter(vc.entries.values()))
    assert {k for k in entry.index} >= {(enc_ns(("mem", "u1", "deep")), enc("z"))}
    assert len(entry.index) == 21
    check_all(a, c, ref=False)
    b.delete(("mem", "u1", "deep"), "z")
    check_all(a, c)
    assert vc.misses == 0 and vc.patches == 2 and len(entry.index) == 20


def test_many_overwrites_compact_the_entry(client, prefix):
    """Each overwrite leaves a dead row; once more are dead than live (and over 1024) the
    entry is rebuilt from the live ones."""
    a, b, c = stores(client, prefix)
    fill(b, 40)
    check_all(a, c)
    vc = a._cfg.vcache
    first = next(iter(vc.entries.values()))
    for r in range(30):
        b.batch([PutOp(NS, f"k{i}", {"text": f"{WORDS[(i + r) % 10]} {WORDS[r % 10]}"}) for i in range(40)])
        check(a, c, WORDS[r % 10], limit=5)
    entry = next(iter(vc.entries.values()))
    assert entry is not first and len(entry.keys) < 1024 + 80 and vc.misses == 0 and vc.patches == 30
    check_all(a, c)
    assert vc.nbytes == entry.nbytes


def test_threads_share_one_entry(client, prefix):
    """Searches from several threads on one store (one entry) after each write: one of them
    patches, the others find the entry patched meanwhile and rank it again, or patch it too
    from the same token; every answer is the scan's."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    a, b, c = stores(client, prefix)
    fill(b, 60)
    rng = random.Random(3)
    check_all(a, c)
    with ThreadPoolExecutor(4) as pool:
        for step in range(25):
            for _ in range(rng.randint(1, 3)):
                b.put(NS, f"k{rng.randrange(70)}", {"text": " ".join(rng.sample(WORDS, rng.randint(1, 3)))})
            if step % 5 == 4:
                b.delete(NS, f"k{rng.randrange(70)}")
            queries = [(" ".join(rng.sample(WORDS, 2)), rng.choice([1, 3, 10])) for _ in range(4)]
            got = list(pool.map(lambda qk: norm(a.search(NS, query=qk[0], limit=qk[1])), queries))
            assert got == [norm(c.search(NS, query=q, limit=k)) for q, k in queries]
    vc = a._cfg.vcache
    assert vc.misses == 0 and vc.fills == 1 and vc.patches >= 25


@pytest.mark.parametrize("seed", range(6))
def test_ranking_after_a_patch_is_the_head_of_the_exact_one(seed):
    """A ranking merged after a patch (the previous ranking's items still live, the patch's
    new items scored) is a head of the entry's whole ranking, for partial and whole ones."""
    import numpy as np

    from redis_saver.store._vcache import Entry

    rng = np.random.default_rng(seed)
    dims = [3, 8, 64][seed % 3]
    base = rng.standard_normal((20, dims)).astype(np.float32)

    def vec() -> list[bytes]:
        n = int(rng.integers(0, 3)) if seed % 2 else 1
        rows = [base[rng.integers(0, 20)] if rng.random() < 0.4 else rng.standard_normal(dims) for _ in range(n)]
        return [r.astype("<f4").tobytes() for r in rows]

    n = 800
    e = Entry(b"t", [(b"n\x00", b"%d\x00" % i) for i in range(n)], [vec() for _ in range(n)], dims)
    q = base[0].tolist() if seed % 3 else rng.standard_normal(dims).tolist()
    for k in (1, 10, 40, None):
        before = e.ranking(q, k)
        ranked, scores, _, whole = before
        flat: list = []
        for i in rng.choice(n, 30, replace=False):  # overwrites (some of the best), deletes, new items
            key = b"%d\x00" % i
            if rng.random() < 0.3:
                flat += [b"n\x00", key, b"", b"", None, []]
            else:
                v = vec()
                flat += [b"n\x00", key, b"0", str(int(i)).encode(), b"rec", [x for b in v for x in (b"p", b)]]
        for r in ranked[:5]:  # the best ones changed
            v1 = rng.standard_normal(dims).astype("<f4").tobytes()
            flat += [b"n\x00", e.keys[r][1], b"0", e.keys[r][1][:-1], b"rec", [b"p", v1]]
        first = len(e.keys)
        assert e.patch(b"t2", flat)
        got, got_scores, _, got_whole = e.reranked(q, ranked, scores, whole, first)
        full, full_scores, _, _ = e.ranking(q, None)
        assert got_whole == whole and got == full[: len(got)] and got_scores == full_scores[: len(got)]
        if whole:
            assert got == full
        n = len(e.keys)


def test_change_log_length_is_one_number():
    """The log length the Lua trims to and the one the client and docs assume agree."""
    import re

    from redis_saver.core.scripts import lua_dir
    from redis_saver.store._vcache import CHANGE_LOG

    lib = (lua_dir() / "_store_lib.lua").read_text()
    assert int(re.search(r"local CHANGE_LOG = (\d+)", lib).group(1)) == CHANGE_LOG


def test_cached_read_is_what_the_header_documents(client, prefix):
    """The "c" read the plan sends has the fixed arguments store_read.lua's header lists, then
    two per candidate (the header check in test_store.py sends no cached read)."""
    from langgraph.store.base import SearchOp

    from redis_saver.core.scripts import lua_dir
    from redis_saver.store._plans import batch_plan, prepare

    a, b, c = stores(client, prefix)
    fill(b, 30)
    check(a, c, "apple", limit=3)  # fills the cache
    cfg = a._cfg
    call = next(batch_plan(cfg, prepare(cfg, [SearchOp(NS, query="kiwi", limit=3)]), [], {"kiwi": embed(["kiwi"])[0]}))
    read = list(call.args)[3:]
    header = (lua_dir() / "store_read.lua").read_text().split("]]", 1)[0]
    line = next(x for x in header.splitlines() if x.strip().startswith('"c" '))
    words = line.split(":")[0].split()
    fixed = words.index("scored") + 1
    assert words[fixed:fixed + 2] == ["e(ns)", "e(key)"]
    assert read[0] == b"c" and len(read) == fixed + 2 * int(read[fixed - 2]) and int(read[fixed - 2]) > 0
    assert read[2] == enc_ns(NS) and int(read[3]) > 0  # the prefix, the change budget
