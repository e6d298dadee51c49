"""``index["distance_type"]``: each distance scored and ordered as PostgresStore defines it, in
every search path, against a float64 reference of those definitions (cosine similarity, the dot
product, minus the Euclidean distance) on the stored float32 values: 0 mismatches over seeded
data; settings the store cannot honour refused before anything is written.

Paths: the scan (numpy's two passes; several shards through the merge; pure Python without
numpy), the client vector cache (Redis 7 and Redis 8), the vector sets in exact mode and the
approximate HNSW search (Redis 8; cosine: VSIM ranks by it, so other distances are answered by
the scan and the cache there, and an approximate search with them is refused)."""

from __future__ import annotations

import random
import struct
from typing import Any

import numpy as np
import pytest
from langgraph.store.base import SearchOp

from redis_saver import RedisStore
from redis_saver.store import _semantics
from tests.store.test_store import prefix_keys

DIMS = 16
ITEMS = 300
QUERIES = 12


def _vectors(seed: int) -> dict[str, list[float]]:
    """Items' and queries' vectors: random directions, norms spread over 0.1-10 (so the three
    distances rank differently), a few near duplicates and a few items of two vectors."""
    rng = random.Random(seed)
    out: dict[str, list[float]] = {}
    for i in range(ITEMS):
        scale = 10 ** rng.uniform(-1, 1)
        out[f"v{i}"] = [rng.gauss(0, 1) * scale for _ in range(DIMS)]
    for i in range(0, 20):
        out[f"v{i + 100}"] = [x * (1 + 1e-6 * rng.random()) for x in out[f"v{i}"]]
    for i in range(QUERIES):
        out[f"q{i}"] = [rng.gauss(0, 1) * 10 ** rng.uniform(-1, 1) for _ in range(DIMS)]
    return out


VECS = _vectors(7)


def embed(texts: list[str]) -> list[list[float]]:
    return [VECS[t] for t in texts]


def _f32(v: list[float]) -> np.ndarray:
    return np.frombuffer(struct.pack(f"<{len(v)}f", *v), dtype="<f4").astype(np.float64)


def reference(distance: str, query: str, texts: dict[str, list[str]]) -> list[tuple[str, float]]:
    """PostgresStore's scores (float64 on the stored float32 values, the query as given; an
    item's best over its vectors), best first."""
    q = np.asarray(VECS[query], dtype=np.float64)
    scored = []
    for key, ts in texts.items():
        best = -np.inf
        for t in ts:
            v = _f32(VECS[t])
            if distance == "cosine":
                s = float(q @ v / (np.linalg.norm(q) * np.linalg.norm(v)))
            elif distance == "inner_product":
                s = float(q @ v)
            else:
                s = -float(np.linalg.norm(q - v))
            best = max(best, s)
        scored.append((key, best))
    return sorted(scored, key=lambda ks: -ks[1])


def _items() -> dict[str, list[str]]:
    """Each item's texts: one vector, or two (paths "a" and "b") for every 25th."""
    return {f"k{i}": [f"v{i}"] + ([f"v{(i * 7) % ITEMS}"] if i % 25 == 0 else []) for i in range(ITEMS)}


def _fill(store: RedisStore, ns: tuple[str, ...]) -> dict[str, list[str]]:
    items = _items()
    store.batch([store_put(ns, key, texts) for key, texts in items.items()])
    return items


def store_put(ns: tuple[str, ...], key: str, texts: list[str]) -> Any:
    from langgraph.store.base import PutOp

    return PutOp(ns, key, {"a": texts[0], "b": texts[-1]} if len(texts) > 1 else {"a": texts[0]})


def _store(client: Any, prefix: str, distance: str, **options: Any) -> RedisStore:
    index = {"dims": DIMS, "embed": embed, "fields": ["a", "b"], "distance_type": distance}
    index.update(options.pop("index", {}))
    return RedisStore(client, prefix=prefix, index=index, **options)  # type: ignore[arg-type]


DISTANCES = ["cosine", "inner_product", "l2"]


@pytest.mark.parametrize("distance", DISTANCES)
@pytest.mark.parametrize("path", ["scan", "merge", "python", "cache"])
def test_each_distance_scores_as_postgres_on_redis7(sync_client, prefix, distance, path, monkeypatch):
    if path == "python":
        monkeypatch.setattr(_semantics, "_np", None)
    options: dict[str, Any] = {"vector_cache_bytes": 0 if path != "cache" else 2**24}
    if path == "merge":
        options["shards"] = 4
        options["shard_depth"] = 2  # the prefix ("d",) spans the shards
    store = _store(sync_client, prefix, distance, **options)
    several = path == "merge"  # three namespaces under the prefix, on different shards
    items: dict[str, list[str]] = {}
    for n in range(3 if several else 1):
        part = _fill(store, ("d", f"n{n}"))
        items.update({f"{n}/{k}" if several else k: v for k, v in part.items()})
    if several:
        assert len({store.keys.shard(("d", f"n{n}")) for n in range(3)}) > 1
    assert _check_prefix(store, items, distance, path) == QUERIES * 15
    if path == "cache":
        assert store._cfg.state.vcache is not None and store._cfg.state.vcache.hits > 0


def _check_prefix(store: RedisStore, items: dict[str, list[str]], distance: str, path: str) -> int:
    """``_check`` over the prefix ("d",), keys named "<n>/<key>" when several namespaces."""
    checked = 0
    several = path == "merge"
    for i in range(QUERIES):
        want = reference(distance, f"q{i}", items)
        for offset, limit in ((0, 10), (3, 5)):
            got = store.batch([SearchOp(("d",), query=f"q{i}", limit=limit, offset=offset)])[0]
            keys = [f"{r.namespace[1][1:]}/{r.key}" if several else r.key for r in got]
            assert keys == [k for k, _ in want[offset : offset + limit]], (distance, i, offset)
            ref = dict(want)
            for key, r in zip(keys, got, strict=True):
                assert r.score == pytest.approx(ref[key], rel=1e-9, abs=1e-12), (distance, i, key)
            checked += len(keys)
    return checked


@pytest.mark.parametrize("distance", DISTANCES)
@pytest.mark.parametrize("path", ["sets", "cache"])
def test_each_distance_scores_as_postgres_on_redis8(r8, prefix, distance, path):
    store = _store(r8, prefix, distance, vector_cache_bytes=0 if path == "sets" else 2**24)
    _fill(store, ("d", "n0"))
    assert _check_prefix(store, _items(), distance, path) == QUERIES * 15
    stats, vcache = store._cfg.state.vset_stats, store._cfg.state.vcache
    if path == "sets":  # VSIM ranks by cosine: the others scan
        assert (stats["hits"] == 2 * QUERIES) if distance == "cosine" else (stats["hits"] == 0)
    else:
        assert vcache is not None and vcache.hits > 0


def test_approximate_search_scores_as_postgres(r8, prefix):
    """HNSW candidates, scored exactly: every score the reference's, in order (the items found
    may differ from the exact ones: recall, not checked here)."""
    store = _store(r8, prefix, "cosine", vector_cache_bytes=0, index={"ann_index_config": {"kind": "hnsw"}})
    items = _items()
    _fill(store, ("d", "n0"))
    for i in range(QUERIES):
        ref = dict(reference("cosine", f"q{i}", items))
        got = store.search(("d",), query=f"q{i}", limit=10)
        assert len(got) == 10
        for r in got:
            assert r.score == pytest.approx(ref[r.key], rel=1e-9, abs=1e-12)
        assert [r.score for r in got] == sorted((r.score for r in got), reverse=True)
    assert store._cfg.state.vset_stats["hits"] == QUERIES


@pytest.mark.parametrize(
    "index, message",
    [
        ({"distance_type": "hamming"}, "distance_type must be one of"),
        ({"distance_type": "l2", "ann_index_config": {"kind": "hnsw"}}, "ranks by cosine only"),
        ({"distance_type": "inner_product", "ann_index_config": {"m": 8}}, "ranks by cosine only"),
        ({"ann_index_config": {"kind": "ivfflat", "nlist": 10}}, "unknown ann_index_config"),
        ({"ann_index_config": {"kind": "ivfflat"}}, "only 'hnsw'"),
        ({"ann_index_config": {"vector_type": "halfvec"}}, "only 'vector'"),
        ({"ann_index_config": {"kind": "flat", "m": 8}}, "takes no option"),
        ({"metric": "l2"}, "unknown index option"),
    ],
)
def test_settings_it_cannot_honour_are_refused_before_anything_is_written(sync_client, prefix, index, message):
    with pytest.raises(ValueError, match=message):
        _store(sync_client, prefix, index.pop("distance_type", "cosine"), index=index)
    assert prefix_keys(sync_client, prefix) == []


def test_flat_is_the_exact_search(r8, prefix):
    store = _store(r8, prefix, "l2", index={"ann_index_config": {"kind": "flat", "vector_type": "vector"}})
    assert store._cfg.ann is None and store.index_config["distance_type"] == "l2"
