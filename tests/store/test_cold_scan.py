"""The cold semantic search (a scan of every vector under the prefix): its two-pass scoring
(``_semantics.page_candidates``) leaves out only items that cannot rank and scores the others
bit for bit as the float64 path (``best_scores``); the store's answers equal that path's on
adversarial vectors, across page boundaries, with filters and offsets past the first page; a
filter is evaluated best first, only until an item cannot enter; the vector cache filled from
the scan's pages (``Entry.from_pages``) is the entry the items give."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest
import redis
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

from devkit.servers import client_kwargs
from redis_saver import RedisStore
from redis_saver.store import _budgets, _vcache
from redis_saver.store import _semantics as sem


@pytest.fixture(autouse=True)
def _numpy():
    if sem._np is None:
        pytest.skip("numpy not installed (the vector extra)")


def pack(v: list[float]) -> bytes:
    return struct.pack(f"<{len(v)}f", *v)


def adversarial(rng: random.Random, dims: int, n: int) -> list[list[float]]:
    """Vectors that make a float32 pass go wrong if it is not guarded: near ties (one vector and
    1-ulp neighbours, copies, scaled copies), huge and tiny norms (float32 products and squares
    that overflow or underflow), zero vectors, and plain random ones."""
    base = [rng.uniform(-1, 1) for _ in range(dims)]
    out: list[list[float]] = []
    for i in range(n):
        kind = i % 9
        if kind == 0:
            v = [rng.uniform(-1, 1) for _ in range(dims)]
        elif kind == 1:  # the same direction: ties, and ties after float32 rounding
            v = list(base)
        elif kind == 2:  # 1-ulp neighbours of base
            v = [struct.unpack("<f", struct.pack("<f", x))[0] * (1 + rng.choice([-1, 1]) * 2**-23) for x in base]
        elif kind == 3:  # scaled copies: the same cosine, other norms
            s = rng.choice([1e-3, 7.0, 3e4])
            v = [x * s for x in base]
        elif kind == 4:  # huge: float32 squares overflow
            v = [rng.uniform(-1, 1) * 1e25 for _ in range(dims)]
        elif kind == 5:  # tiny: float32 squares underflow, some components subnormal
            v = [rng.uniform(-1, 1) * rng.choice([1e-30, 1e-40, 1e-44]) for _ in range(dims)]
        elif kind == 6:
            v = [0.0] * dims
        elif kind == 7:  # base plus noise at float32's last digits
            v = [x + rng.uniform(-1, 1) * 1e-7 for x in base]
        else:  # a few large components
            v = [rng.choice([0.0, 1e6, -1e6, rng.uniform(-1, 1)]) for _ in range(dims)]
        out.append([struct.unpack("<f", struct.pack("<f", x))[0] for x in v])  # as stored
    return out


def page_of(rng: random.Random, dims: int, n: int) -> list[list[bytes]]:
    vecs = adversarial(rng, dims, 3 * n)
    rng.shuffle(vecs)
    page, at = [], 0
    for _ in range(n):
        c = rng.choice([0, 1, 1, 1, 2, 3])
        page.append([pack(v) for v in vecs[at : at + c]])
        at += c
    return page


@pytest.mark.parametrize("metric", sem.DISTANCES)
@pytest.mark.parametrize("dims", [3, 16, 256])
def test_page_candidates_are_the_float64_scores_and_leave_out_only_what_cannot_rank(dims, metric):
    rng = random.Random(dims)
    for trial in range(12):
        page = page_of(rng, dims, 200)
        if trial % 3 == 0:
            query = [rng.uniform(-1, 1) for _ in range(dims)]
        elif trial % 3 == 1:  # the direction of the ties
            query = sem.unpack(next(b for p in page for b in p))
        else:  # a huge query
            query = [rng.uniform(-1, 1) * 1e30 for _ in range(dims)]
        exact = sem.best_scores(query, page, metric)
        m32, counts = sem.page_matrix(dims, page)
        finite = sorted(s for s in exact if s is not None)
        for k in (None, 1, 5, 50, 500):
            for floor in (None, finite[len(finite) // 2], finite[-3], finite[0] - 1, 2.0):
                idx, scores = sem.page_candidates(query, m32, counts, k, floor, metric)
                assert idx == sorted(idx)
                assert scores == [exact[i] for i in idx]  # bit for bit
                for i in set(range(len(page))) - set(idx):
                    s = exact[i]
                    if s is None:
                        continue
                    below_floor = floor is not None and s <= floor
                    beaten = k is not None and sum(1 for x in exact if x is not None and x > s) >= k
                    assert below_floor or beaten, (i, s, k, floor)
                if k is None and floor is None:
                    assert len(idx) == sum(1 for s in exact if s is not None)


@pytest.mark.parametrize("metric", sem.DISTANCES)
def test_page_candidates_prune_a_plain_page(metric):
    """Not vacuous: on plain random vectors (norms spread over 0.5-2) few items are scored exactly."""
    rng = random.Random(3)
    dims = 64
    page = [[pack([rng.gauss(0, 1) * rng.uniform(0.5, 2) for _ in range(dims)])] for _ in range(1000)]
    m32, counts = sem.page_matrix(dims, page)
    idx, _ = sem.page_candidates([rng.gauss(0, 1) for _ in range(dims)], m32, counts, 10, None, metric)
    assert 10 <= len(idx) < 50


def test_page_matrix_refuses_other_dims():
    assert sem.page_matrix(2, [[pack([1.0, 2.0])], [pack([1.0, 2.0, 3.0])]]) is None
    m, counts = sem.page_matrix(2, [[], []])
    assert m is None and counts == [0, 0]
    assert sem.page_candidates([1.0, 0.0], m, counts, 3, None) == ([], [])


def test_entry_from_pages_is_the_entry_of_the_items():
    rng = random.Random(5)
    dims = 8
    pages, items = [], []
    for p in range(4):
        flat, counts, vecs = [], [], []
        for j in range(30):
            ens = f"ns{(p * 30 + j) // 25}".encode()
            vs = [pack([rng.uniform(-1, 1) for _ in range(dims)]) for _ in range(rng.choice([0, 1, 2]))]
            nsq, isq = str((p * 30 + j) // 25 + 1).encode(), str(p * 30 + j + 7).encode()
            hv: list[Any] = []
            for n, b in enumerate(vs):
                hv += [f"f{n}".encode(), b]
            flat += [ens, f"k{j}".encode(), nsq, isq, b"rec", hv]
            counts.append(len(vs))
            vecs += vs
            items.append(((ens, f"k{j}".encode()), (int(nsq), int(isq)), vs))
        m = sem.page_matrix(dims, [flat[i][1::2] for i in range(5, len(flat), 6)])
        assert m is not None and m[1] == counts
        pages.append((flat, counts, m[0]))
    got = _vcache.Entry.from_pages(b"t", dims, pages)
    want = _vcache.Entry(b"t", [k for k, _, _ in items], [v for _, _, v in items], dims, [s for _, s, _ in items])
    np = sem._np
    assert got.keys == want.keys and got.index == want.index and got.nsids == want.nsids
    assert got.scoreless == want.scoreless and got.nrows == want.nrows and got.nbytes == want.nbytes
    for name in ("nsseq", "nsid", "iseq", "alive", "scored", "starts", "counts"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    assert np.array_equal(got.matrix[: got.nrows], want.matrix[: want.nrows])
    assert np.array_equal(got.norms[: got.nrows], want.norms[: want.nrows])
    q = [rng.uniform(-1, 1) for _ in range(dims)]
    assert got.ranking(q, 5) == want.ranking(q, 5) and got.ranking(q, None) == want.ranking(q, None)


@pytest.mark.parametrize("metric", sem.DISTANCES)
@pytest.mark.parametrize("dims", [3, 16, 256])
def test_cache_ranking_head_is_the_exact_ranking_on_adversarial_vectors(dims, metric):
    """The vector cache's ranking shares the guarded first pass (tiny and huge norms, a tiny
    query: an unguarded float32 pass underflows and ranks them wrong)."""
    rng = random.Random(dims)
    for t in range(10):
        page = page_of(rng, dims, 300)
        e = _vcache.Entry(b"t", [(b"n", f"k{i}".encode()) for i in range(300)], page, dims)
        scale = [1.0, 1e-30, 1e30][t % 3]
        q = [rng.uniform(-1, 1) * scale for _ in range(dims)]
        whole = e.ranking(q, None, metric)
        for k in (1, 10, 50):
            head = e.ranking(q, k, metric)
            assert head[:2] == (whole[0][:k], whole[1][:k]), (t, k)


# ---- the store, on a real Redis ------------------------------------------------------------
DIMS = 16


def store_with(client: Any, prefix: str, n: int, seed: int, **kw: Any) -> tuple[RedisStore, dict[str, list[float]]]:
    """``n`` items of adversarial vectors (an item: 0, 1 or 2 texts, each its own vector)."""
    rng = random.Random(seed)
    table: dict[str, list[float]] = {}
    for i, v in enumerate(adversarial(rng, DIMS, 2 * n + 40)):
        table[f"t{i}"] = v

    def embed(texts: list[str]) -> list[list[float]]:
        return [table[t] for t in texts]

    st = RedisStore(client, prefix=prefix, index={"dims": DIMS, "embed": embed, "fields": ["a", "b"]}, **kw)
    st.setup()
    ops = []
    for i in range(n):
        value: dict[str, Any] = {"kind": rng.choice("xyz"), "n": rng.randint(0, 99)}
        c = rng.choice([0, 1, 1, 2])
        if c >= 1:
            value["a"] = f"t{2 * i}"
        if c == 2:
            value["b"] = f"t{2 * i + 1}"
        ops.append(PutOp(("docs", f"u{i % 3}"), f"k{i}", value))
    st.batch(ops)
    return st, table


def answer(st: RedisStore, query: str, **kw: Any) -> list[tuple[Any, ...]]:
    return [(r.namespace, r.key, r.value, r.score) for r in st.search(("docs",), query=query, **kw)]


def float64_path(monkeypatch: Any) -> None:
    """The search as before the two passes: every page scored by best_scores, through the merge."""
    monkeypatch.setattr(sem, "page_matrix", lambda dims, pages: None)


SEARCHES: list[dict[str, Any]] = [
    {"limit": 10},
    {"limit": 1},
    {"limit": 30, "offset": 5},
    {"limit": 10, "offset": 40},  # past the first pages
    {"limit": 7, "offset": 190},  # past the scored items: unscored ones fill
    {"limit": 500},
    {"limit": 10, "filter": {"kind": "x"}},
    {"limit": 5, "offset": 33, "filter": {"kind": "y"}},
    {"limit": 10, "filter": {"n": {"$gte": 90}}},  # selective: matches spread over many pages
    {"limit": 4, "offset": 20, "filter": {"n": {"$lt": 20}, "kind": "z"}},
    {"limit": 10, "filter": {"kind": "none"}},
    {"limit": 0},
]


@pytest.mark.parametrize("page", [3, 7, 16, 1024])
def test_answers_equal_the_float64_paths(redis_url, prefix, monkeypatch, page):
    monkeypatch.setattr(_budgets, "VECTOR_PAGE", page)
    monkeypatch.setattr(_budgets, "PAGE", page)
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    st, table = store_with(client, prefix, 220, seed=page, vector_cache_bytes=0)
    queries = ["t0", "t1", "t3", "t5", "t9", "t13", "t25"]  # plain, ties, scaled, tiny, ...
    got = [answer(st, q, **kw) for q in queries for kw in SEARCHES]
    with monkeypatch.context() as m:
        float64_path(m)
        want = [answer(st, q, **kw) for q in queries for kw in SEARCHES]
    assert got == want
    assert any(len(g) >= 10 for g in got) and any(g and g[-1][3] is None for g in got)  # unscored fill
    client.close()


def test_cache_filled_from_the_scan_answers_as_the_scan(redis_url, prefix, monkeypatch):
    monkeypatch.setattr(_budgets, "VECTOR_PAGE", 16)
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    cached, _ = store_with(client, prefix, 150, seed=11)
    scan = RedisStore(client, prefix=prefix, index=cached.index_config, vector_cache_bytes=0)  # type: ignore[arg-type]
    vc = cached._cfg.state.vcache
    assert vc is not None
    for q in ("t0", "t2", "t7"):
        for kw in SEARCHES:
            if "filter" not in kw:
                assert answer(cached, q, **kw) == answer(scan, q, **kw)
    assert vc.fills == 1 and vc.hits >= 10 and vc.misses == 0
    client.close()


def test_filter_is_evaluated_only_until_an_item_cannot_enter(redis_url, prefix, monkeypatch):
    """Documented difference: InMemoryStore compares every item first, so a comparison that
    raises on any item raises; here a page's items are compared best first, only while one may
    still enter the best offset + limit found so far (pages come in search order, so an item
    of an early page may be compared before the best ones are found)."""
    monkeypatch.setattr(_budgets, "VECTOR_PAGE", 4)
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    vecs = {f"v{i}": [1.0, i / 100] for i in range(40)}  # v0 best, then worse and worse

    def embed(texts: list[str]) -> list[list[float]]:
        return [vecs[t] for t in texts]

    index = {"dims": 2, "embed": embed, "fields": ["text"]}
    st = RedisStore(client, prefix=prefix, index=index, vector_cache_bytes=0)  # type: ignore[arg-type]
    ref = InMemoryStore(index=index)  # type: ignore[arg-type]
    order = list(range(10))
    random.Random(1).shuffle(order)  # search order unrelated to score
    late = list(range(10, 40))
    random.Random(2).shuffle(late)
    for i in order + late:  # the 30 worst have a string, and come later: $gte raises on them
        value = {"text": f"v{i}", "n": i if i < 10 else "many"}
        st.put(("d",), f"k{i}", value)
        ref.put(("d",), f"k{i}", value)
    flt = {"n": {"$gte": 2}}
    got = [(r.key, r.score) for r in st.search(("d",), query="v0", filter=flt, limit=3)]
    assert [k for k, _ in got] == ["k2", "k3", "k4"]
    with pytest.raises(ValueError):  # InMemoryStore compares every item
        ref.search(("d",), query="v0", filter=flt, limit=3)
    with pytest.raises(ValueError):  # an item that may enter is compared
        st.search(("d",), query="v0", filter=flt, limit=9)
    with monkeypatch.context() as m:  # the float64 path through the merge compares every item too
        float64_path(m)
        with pytest.raises(ValueError):
            st.search(("d",), query="v0", filter=flt, limit=3)
    client.close()
