"""Semantic scoring of a search page (``_semantics.best_scores``): numpy and pure Python agree
with each other and with InMemoryStore's pure-Python cosine, to the last digit that matters."""

from __future__ import annotations

import random
import struct

import pytest

from redis_saver.store import _semantics as sem


def pack(v):
    return struct.pack(f"<{len(v)}f", *v)


def reference(q, page):
    # InMemoryStore's pure-Python cosine, max over an item's vectors
    def cos(x, y):
        dot = sum(a * b for a, b in zip(x, y, strict=False))
        n1 = sum(a * a for a in x) ** 0.5
        n2 = sum(a * a for a in y) ** 0.5
        return dot / (n1 * n2) if n1 > 0 and n2 > 0 else 0.0

    return [max(cos(q, sem.unpack(b)) for b in item) if item else None for item in page]


@pytest.fixture(params=["python", "numpy"])
def path(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setattr(sem, "_np", None)
    elif sem._np is None:
        pytest.skip("numpy not installed (the vector extra)")
    return request.param


def test_page_scores_match_reference(path):
    rng = random.Random(7)
    q = [float(rng.randint(-5, 5)) for _ in range(16)]
    page = [[pack([rng.uniform(-1, 1) for _ in range(16)]) for _ in range(rng.randint(0, 3))] for _ in range(200)]
    page.append([pack([0.0] * 16)])  # a zero vector scores 0.0
    got, want = sem.best_scores(q, page), reference(q, page)
    assert [g is None for g in got] == [w is None for w in want]
    assert any(g is None for g in got) and got[-1] == 0.0
    for g, w in zip(got, want, strict=True):
        if w is not None:
            assert g == pytest.approx(w, rel=1e-12, abs=1e-15)


def test_zero_query_scores_zero(path):
    assert sem.best_scores([0.0, 0.0], [[pack([1.0, 2.0])], []]) == [0.0, None]


def test_vectors_of_another_length_use_the_pure_path(path):
    # a stored vector of other dims (an index changed): scored as InMemoryStore would (zip)
    q = [1.0, 0.0, 1.0]
    page = [[pack([1.0, 0.0])], [pack([1.0, 0.0, 1.0])]]
    assert sem.best_scores(q, page) == pytest.approx(reference(q, page))


def test_items_with_zero_one_or_several_vectors(path):
    # as many vectors as items, not one each: each item's best, None for the one without
    q = [1.0, 0.0]
    page = [[], [pack([0.0, 1.0]), pack([1.0, 0.0])], [pack([1.0, 1.0])]]
    got, want = sem.best_scores(q, page), reference(q, page)
    assert got[0] is None and got[1] == pytest.approx(1.0) and got[1:] == pytest.approx(want[1:])
    assert sem.best_scores(q, [[pack([0.0, 2.0])], [pack([3.0, 0.0])]]) == pytest.approx([0.0, 1.0])
