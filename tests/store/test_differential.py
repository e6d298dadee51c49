"""RedisStore / AsyncRedisStore against InMemoryStore over seeded random op sequences.

Each sequence mixes puts, deletes, gets, searches (filters with every operator, offsets,
limits, namespace prefixes, semantic queries with a deterministic embedding) and namespace
listings (prefix and suffix with wildcards, max_depth, offset), in single-op batches and in
mixed batches, over namespaces and keys made of hostile strings (braces, colons, glob
characters, unicode, empty labels, NUL, dots), sent through ``batch`` / ``abatch`` (the public
methods refuse empty labels, NUL and dots; ``test_public_methods`` uses them with the rest).
Every result must equal the reference's: 0 mismatches, standalone and on the Redis Cluster.

The reference is InMemoryStore with one correction: a namespace without items is dropped after
each batch. InMemoryStore keeps every namespace it ever touched (a get of a missing namespace
creates it; list_namespaces then lists it, and a namespace that lost its items keeps its place
in search order); RedisStore, as PostgresStore, knows a namespace while it holds items.
Timestamps are compared as rules (created_at <= updated_at), not as values: RedisStore keeps
an item's created_at across puts, as PostgresStore does (InMemoryStore resets it).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import redis
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from devkit.servers import client_kwargs
from redis_saver import AsyncRedisStore, RedisStore
from redis_saver.store import _semantics

LABELS = ["a", "b", "{x}", "}", "{", ":", "a:b", "*"]
LABELS += ["?", "[", "\\", "é", "日本", "%7B", "%", " ", "", "\x00", "a\x00", ".", "ÿ"]
KEYS = ["k", "k2", "{k}", "", "\x00", "*", "é", "a:b", "K"]
WORDS = ["apple", "banana", "cherry", "date", "fig", "grape", "kiwi", "lemon", "mango", "melon"]
DIMS = 8


@pytest.fixture(autouse=True)
def _reference_in_python(monkeypatch):
    """The reference scores in pure Python whether numpy is installed or not: with numpy,
    InMemoryStore divides by a zero query norm (nan scores) where its Python path gives 0.0."""
    import langgraph.store.memory as memory

    monkeypatch.setattr(memory, "_check_numpy", lambda: False)


@pytest.fixture(params=["python", "numpy"])
def scoring(request, monkeypatch):
    """RedisStore's scoring path: pure Python, or numpy (the "vector" extra) when importable."""
    if request.param == "python":
        monkeypatch.setattr(_semantics, "_np", None)
    elif _semantics._np is None:
        pytest.skip("numpy not installed (the vector extra)")
    return request.param


def embed(texts: list[str]) -> list[list[float]]:
    """Deterministic: counts of 8 letters (integers: exact in float32, so scores agree exactly)."""
    return [[float(t.count(c)) for c in "aeilmnor"] for t in texts]


def namespace(rng: random.Random, known: list[tuple[str, ...]]) -> tuple[str, ...]:
    if known and rng.random() < 0.6:
        return rng.choice(known)
    return tuple(rng.choice(LABELS[:8] if rng.random() < 0.5 else LABELS) for _ in range(rng.randint(1, 3)))


def value(rng: random.Random) -> dict[str, Any]:
    v: dict[str, Any] = {"n": rng.randint(0, 5), "s": rng.choice(["x", "y", "z"])}
    if rng.random() < 0.5:
        v["nested"] = {"x": rng.randint(0, 2), "y": rng.choice(["p", "q"])}
    if rng.random() < 0.5:
        v["tags"] = rng.sample(["t1", "t2", "t3"], rng.randint(0, 2))
    if rng.random() < 0.8:
        v["text"] = " ".join(rng.sample(WORDS, rng.randint(1, 3)))
    if rng.random() < 0.2:
        v["blob"] = "w" * rng.randint(200, 2000)  # compressed
    return v


def a_filter(rng: random.Random) -> dict[str, Any] | None:
    choices: list[dict[str, Any] | None] = [
        None,
        {"n": rng.randint(0, 5)},
        {"n": {"$gt": rng.randint(0, 4)}},
        {"n": {"$gte": 2, "$lte": 4}},
        {"n": {"$lt": 3}},
        {"s": {"$ne": "x"}},
        {"s": {"$eq": "y"}},
        {"nested": {"x": 1}},
        {"tags": ["t1"]},
        {"s": "z", "n": {"$ne": 2}},
    ]
    return rng.choice(choices)


def condition(rng: random.Random, known: list[tuple[str, ...]]) -> MatchCondition:
    base = list(rng.choice(known)) if known and rng.random() < 0.7 else [rng.choice(LABELS)]
    path = base[: rng.randint(1, len(base))]
    if rng.random() < 0.3:
        path[rng.randrange(len(path))] = "*"
    kind = rng.choice(["prefix", "suffix"])
    if kind == "suffix":
        path = (list(rng.choice(known)) if known else path)[-rng.randint(1, 2) :]
    return MatchCondition(kind, tuple(path))


def random_op(
    rng: random.Random, known: list[tuple[str, ...]], items: list[tuple[tuple[str, ...], str]], indexed: bool
) -> Any:
    r = rng.random()
    if r < 0.35:
        ns = namespace(rng, known)
        index: Any = None
        if indexed and rng.random() < 0.3:
            index = rng.choice([False, ["text"], ["text", "nested.y"]])
        return PutOp(ns, rng.choice(KEYS), value(rng), index=index)
    if r < 0.45:
        ns, key = rng.choice(items) if items and rng.random() < 0.7 else (namespace(rng, known), rng.choice(KEYS))
        return PutOp(ns, key, None)
    if r < 0.6:
        ns, key = rng.choice(items) if items and rng.random() < 0.7 else (namespace(rng, known), rng.choice(KEYS))
        return GetOp(ns, key)
    if r < 0.85:
        ns = namespace(rng, known)
        prefix = ns[: rng.randint(0, len(ns))]
        query = " ".join(rng.sample(WORDS, 2)) if indexed and rng.random() < 0.6 else None
        return SearchOp(prefix, a_filter(rng), rng.randint(0, 12), rng.choice([0, 0, 1, 3, 7]), query)
    conds = tuple(condition(rng, known) for _ in range(rng.randint(0, 2)))
    return ListNamespacesOp(conds, rng.choice([None, None, 1, 2]), rng.randint(1, 10), rng.choice([0, 0, 1, 3]))


def sequence(seed: int, n: int, indexed: bool) -> list[list[Any]]:
    rng = random.Random(seed)
    known: list[tuple[str, ...]] = []
    items: list[tuple[tuple[str, ...], str]] = []
    batches = []
    for _ in range(n):
        size = 1 if rng.random() < 0.75 else rng.randint(2, 4)
        batch = [random_op(rng, known, items, indexed) for _ in range(size)]
        if indexed:  # InMemoryStore fails a batch whose puts embed one text twice: one put a batch
            puts = [op for op in batch if isinstance(op, PutOp) and op.value is not None]
            batch = [op for op in batch if op not in puts[1:]] or batch[:1]
        for op in batch:
            if isinstance(op, PutOp) and op.namespace not in known:
                known.append(op.namespace)
            if isinstance(op, PutOp) and op.value is not None:
                items.append((op.namespace, op.key))
        batches.append(batch)
    return batches


def normalize(result: Any) -> Any:
    if result is None:
        return None
    if isinstance(result, list):
        return [normalize(r) for r in result]
    if isinstance(result, tuple):
        return result
    assert result.created_at <= result.updated_at
    score = getattr(result, "score", None)
    return (result.namespace, result.key, result.value, None if score is None else round(score, 9))


class _Namespace(dict):
    """A namespace InMemoryStore looked up but has not written to: it joins the store on its
    first item (InMemoryStore's defaultdict would keep it, empty, from the lookup on)."""

    def __init__(self, data: dict, ns: tuple[str, ...]) -> None:
        super().__init__()
        self._parent, self._ns = data, ns

    def __setitem__(self, key: str, item: Any) -> None:
        self._parent.setdefault(self._ns, self)
        super().__setitem__(key, item)


class _Namespaces(dict):
    def __missing__(self, ns: tuple[str, ...]) -> _Namespace:
        return _Namespace(self, ns)


def drop_empty(ref: InMemoryStore) -> None:
    """Namespaces that lost their last item leave (and come back last in search order)."""
    for ns in [ns for ns, items in ref._data.items() if not items]:
        del ref._data[ns]


def reference(indexed: bool) -> InMemoryStore:
    ref = InMemoryStore(index={"dims": DIMS, "embed": embed, "fields": ["text"]} if indexed else None)
    ref._data = _Namespaces()
    return ref


def options(indexed: bool) -> dict[str, Any]:
    return {"index": {"dims": DIMS, "embed": embed, "fields": ["text"]}} if indexed else {}


def check(batches: list[list[Any]], ref: InMemoryStore, run: Any) -> int:
    """Run every batch on both; return the number of mismatches (asserting on the first)."""
    mismatches = 0
    for i, batch in enumerate(batches):
        want = [normalize(r) for r in ref.batch(batch)]
        drop_empty(ref)
        got = [normalize(r) for r in run(batch)]
        if got != want:
            mismatches += 1
            assert got == want, f"batch {i}: {batch}"
    return mismatches


SEEDS = [1, 2, 3]
N = 250


VCACHE = pytest.mark.parametrize("vcache", [256 << 20, 0], ids=["vcache", "novcache"])


@pytest.mark.parametrize(
    "indexed,vcache", [(False, 0), (True, 0), (True, 256 << 20)], ids=["plain", "indexed", "indexed-vcache"]
)
@pytest.mark.parametrize("seed", SEEDS)
def test_sync_standalone(redis_url, prefix, seed, indexed, scoring, vcache):
    """With the vector cache (an index and numpy scoring) and without: the same answers."""
    if vcache and scoring == "python":
        pytest.skip("the vector cache scores with numpy: this is the pure-Python run")
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    store = RedisStore(client, prefix=prefix, vector_cache_bytes=vcache, **options(indexed))
    assert check(sequence(seed, N, indexed), reference(indexed), store.batch) == 0
    if vcache:
        assert store._cfg.state.vcache is not None and store._cfg.state.vcache.fills > 0  # it was used
    client.close()


@pytest.mark.parametrize("indexed", [False, True], ids=["plain", "indexed"])
async def test_async_standalone(redis_url, prefix, indexed):
    import redis.asyncio as aredis

    client = aredis.Redis.from_url(redis_url, socket_timeout=5.0)
    store = AsyncRedisStore(client, prefix=prefix, **options(indexed))
    ref = reference(indexed)
    for i, batch in enumerate(sequence(11, N, indexed)):
        want = [normalize(r) for r in ref.batch(batch)]
        drop_empty(ref)
        got = [normalize(r) for r in await store.abatch(batch)]
        assert got == want, f"batch {i}: {batch}"
    await client.aclose()


@pytest.mark.parametrize("shards", [1, 3], ids=["1shard", "3shards"])
def test_sync_standalone_pages(redis_url, prefix, shards, monkeypatch, scoring):
    """Tiny pages: every search and listing takes several calls per shard, merged (semantic
    pages too: later pages meet a full top, whose floor drops items before the merge)."""
    from redis_saver.store import _budgets

    monkeypatch.setattr(_budgets, "PAGE", 2)
    monkeypatch.setattr(_budgets, "VECTOR_PAGE", 2)
    monkeypatch.setattr(_budgets, "LIST_PAGE", 2)
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    store = RedisStore(client, prefix=prefix, shards=shards, **options(True))
    assert check(sequence(5, N, True), reference(True), store.batch) == 0
    client.close()


@pytest.mark.cluster
@pytest.mark.parametrize("shard_depth", [None, 1], ids=["whole", "depth1"])
def test_sync_cluster(cluster_client, cprefix, shard_depth):
    store = RedisStore(cluster_client, prefix=cprefix, shard_depth=shard_depth, **options(True))
    assert store.keys.shards == 16
    assert check(sequence(21, N, True), reference(True), store.batch) == 0
    # the shards spread over every primary
    primaries = {cluster_client.get_node_from_key(store.keys.index(s)).name for s in range(16)}
    assert len(primaries) == 3


@pytest.mark.cluster
async def test_async_cluster(acluster_client, cprefix):
    store = AsyncRedisStore(acluster_client, prefix=cprefix, **options(False))
    ref = reference(False)
    for i, batch in enumerate(sequence(22, N, False)):
        want = [normalize(r) for r in ref.batch(batch)]
        drop_empty(ref)
        got = [normalize(r) for r in await store.abatch(batch)]
        assert got == want, f"batch {i}: {batch}"


def coarse(texts: list[str]) -> list[list[float]]:
    """Two dimensions: most scores tie, so ranking rests on InMemoryStore's tie order."""
    return [[float(t.count("a") > 1), float(t.count("e") > 0)] for t in texts]


@VCACHE
@pytest.mark.parametrize("seed", [31, 32])
def test_sync_standalone_ties_and_several_vectors(redis_url, prefix, seed, scoring, vcache):
    """Scores that tie, and items with two vectors (``text`` and ``nested.y``: max pooling)."""
    index = {"dims": 2, "embed": coarse, "fields": ["text", "nested.y"]}
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    store = RedisStore(client, prefix=prefix, index=index, vector_cache_bytes=vcache)
    ref = InMemoryStore(index=index)
    ref._data = _Namespaces()
    assert check(sequence(seed, N, True), ref, store.batch) == 0
    client.close()


@VCACHE
@pytest.mark.parametrize("shards", [1, 3], ids=["1shard", "3shards"])
def test_semantic_pages_keep_the_exact_top(redis_url, prefix, shards, monkeypatch, scoring, vcache):
    """Many items, pages of 4 vectors: most pages arrive with the kept top full, and items
    scoring at most its worst are dropped before the merge; the results stay InMemoryStore's
    (ties included: the texts repeat, so do scores)."""
    from redis_saver.store import _budgets

    monkeypatch.setattr(_budgets, "VECTOR_PAGE", 4)
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    store = RedisStore(client, prefix=prefix, shards=shards, vector_cache_bytes=vcache, **options(True))
    ref = reference(True)
    rng = random.Random(3)
    puts = []
    for i in range(120):
        ns = ("docs", rng.choice(["a", "b", "c"]))
        puts.append(PutOp(ns, f"k{i}", {"text": " ".join(rng.sample(WORDS, rng.randint(1, 3))), "n": i}))
    # one put a batch: InMemoryStore miscounts a batch's embeddings when its texts repeat
    assert check([[p] for p in puts], ref, store.batch) == 0
    searches = [
        [SearchOp(("docs",) if j % 2 else ("docs", "a"), query=" ".join(rng.sample(WORDS, 2)),
                  limit=rng.choice([1, 3, 10]), offset=rng.choice([0, 0, 2, 7]))]
        for j in range(40)
    ]
    assert check(searches, ref, store.batch) == 0
    if vcache and shards == 1 and scoring == "numpy":
        # the searches were answered from the cache (from vector sets on a server with them)
        assert store._cfg.state.vcache.hits + store._cfg.state.vset_stats["hits"] >= 30
    client.close()
