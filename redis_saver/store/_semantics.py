"""InMemoryStore's semantics, written once: filters, namespace matching, texts to embed, scoring.

``langgraph.store.memory`` keeps these as private helpers; they are restated here (same
behaviour, including its corner cases) so that a change of private names upstream does not
break the store, and ``tests/store/test_differential.py`` checks that results agree.
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Sequence
from operator import mul
from typing import Any

from langgraph.store.base import MatchCondition, get_text_at_path, tokenize_path


def compare_values(item_value: Any, filter_value: Any) -> bool:
    """A filter value against an item's value, JSONB-like (nested dicts, lists, ``$`` operators)."""
    if isinstance(filter_value, dict):
        if any(k.startswith("$") for k in filter_value):
            return all(apply_operator(item_value, k, v) for k, v in filter_value.items())
        if not isinstance(item_value, dict):
            return False
        return all(compare_values(item_value.get(k), v) for k, v in filter_value.items())
    if isinstance(filter_value, (list, tuple)):
        return (
            isinstance(item_value, (list, tuple))
            and len(item_value) == len(filter_value)
            and all(compare_values(iv, fv) for iv, fv in zip(item_value, filter_value, strict=False))
        )
    return bool(item_value == filter_value)


def apply_operator(value: Any, operator: str, op_value: Any) -> bool:
    if operator == "$eq":
        return bool(value == op_value)
    if operator == "$gt":
        return float(value) > float(op_value)
    if operator == "$gte":
        return float(value) >= float(op_value)
    if operator == "$lt":
        return float(value) < float(op_value)
    if operator == "$lte":
        return float(value) <= float(op_value)
    if operator == "$ne":
        return bool(value != op_value)
    raise ValueError(f"Unsupported operator: {operator}")


OPERATORS = frozenset({"$eq", "$gt", "$gte", "$lt", "$lte", "$ne"})


def check_filter(flt: Any) -> None:
    """Refuse a filter with an operator InMemoryStore does not know, before anything runs (it
    would raise on the first item compared); an operator's operand is a value, not a filter."""
    if flt is None:
        return
    if not isinstance(flt, dict):
        raise TypeError(f"filter must be a dict, got {type(flt).__name__}")
    stack: list[Any] = list(flt.values())
    while stack:
        fv = stack.pop()
        if isinstance(fv, dict):
            if any(isinstance(k, str) and k.startswith("$") for k in fv):
                bad = [k for k in fv if k not in OPERATORS]
                if bad:
                    raise ValueError(f"Unsupported operator: {bad[0]}")
            else:
                stack.extend(fv.values())
        elif isinstance(fv, (list, tuple)):
            stack.extend(fv)


def matches(value: dict[str, Any], flt: dict[str, Any] | None) -> bool:
    if not flt:
        return True
    return all(compare_values(value.get(k), v) for k, v in flt.items())


def does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """A namespace against a prefix / suffix condition (``*`` matches any one label)."""
    path = condition.path
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"Unsupported match type: {condition.match_type}")
    return all(p == "*" or k == p for k, p in pairs)


def tokenized_fields(fields: Sequence[str] | None) -> list[tuple[str, Any]]:
    return [(p, tokenize_path(p)) if p != "$" else (p, p) for p in (fields or ["$"])]


def texts_to_embed(value: dict[str, Any], paths: Sequence[tuple[str, Any]]) -> list[tuple[str, str]]:
    """(path name, text) pairs of a value: ``path`` for one text, ``path.i`` for several."""
    out: list[tuple[str, str]] = []
    for path, field in paths:
        texts = get_text_at_path(value, field)
        if texts:
            if len(texts) > 1:
                out.extend((f"{path}.{i}", t) for i, t in enumerate(texts))
            else:
                out.append((path, texts[0]))
    return out


def cosine(query: Sequence[float], vectors: Sequence[Sequence[float]]) -> list[float]:
    """Cosine similarity of ``query`` with each vector (0.0 for a zero vector), in plain Python."""
    # the same sums, in the same order, as InMemoryStore's pure-Python path (map is faster)
    norm1 = sum(map(mul, query, query)) ** 0.5
    out: list[float] = []
    for y in vectors:
        dot = sum(map(mul, query, y))
        norm2 = sum(map(mul, y, y)) ** 0.5
        out.append(dot / (norm1 * norm2) if norm1 > 0 and norm2 > 0 else 0.0)
    return out


DISTANCES = ("cosine", "l2", "inner_product")  # index["distance_type"]: PostgresStore's scores


def python_scores(query: Sequence[float], vectors: Sequence[Sequence[float]], metric: str = "cosine") -> list[float]:
    """``query``'s score with each vector in plain Python, as PostgresStore scores ``metric``:
    cosine similarity (``cosine``: 0.0 for a zero vector, as InMemoryStore), the dot product
    (``inner_product``), minus the Euclidean distance (``l2``)."""
    if metric == "cosine":
        return cosine(query, vectors)
    if metric == "inner_product":
        return [sum(map(mul, query, y)) for y in vectors]
    return [-(sum((a - b) * (a - b) for a, b in zip(query, y, strict=True)) ** 0.5) for y in vectors]


_np: Any
try:  # optional (the "vector" extra): scores a page of vectors at once
    _np = importlib.import_module("numpy")
except ImportError:  # pragma: no cover - exercised by tests that hide numpy
    _np = None


def best_scores(query: Sequence[float], pages: Sequence[Sequence[bytes]], metric: str = "cosine") -> list[float | None]:
    """The best score (``metric``: ``python_scores``) of ``query`` over each item's float32
    vectors (little-endian bytes); None for an item without vectors. With numpy, one matrix
    product for the whole page (float64 arithmetic on the stored float32 values, as the
    pure-Python path: ``row_scores``); without, ``python_scores``."""
    dims = len(query)
    counts = list(map(len, pages))
    vectors = [b for p in pages for b in p]  # (a page's Python work is per item: keep it in C calls)
    if _np is not None and dims and vectors and set(map(len, vectors)) == {4 * dims}:
        np = _np
        m = np.frombuffer(b"".join(vectors), dtype="<f4").reshape(-1, dims).astype(np.float64)
        q = np.asarray(query, dtype=np.float64)
        qn = float(np.sqrt(q @ q))
        norms = np.sqrt(np.einsum("ij,ij->i", m, m)) if metric == "cosine" else None
        scores = row_scores(m, q, qn, norms, metric).tolist()
        if counts.count(1) == len(counts):  # one vector an item (the common case)
            return scores  # type: ignore[no-any-return]
        out: list[float | None] = []
        at = 0
        for c in counts:
            out.append(max(scores[at : at + c]) if c else None)
            at += c
        return out
    return [max(python_scores(query, [unpack(b) for b in p], metric)) if p else None for p in pages]


def rough_delta(dims: int) -> float:
    """How far a float32 cosine (``page_candidates``' first pass, ``_vcache.Entry.ranking``) may
    be from the float64 one: rounding of each product and sum is at most ``(dims + 2) * 2**-24``
    relative to ``|x| |q|`` (Cauchy-Schwarz), a float32 norm adds half that; this takes 4x."""
    return (dims + 16) * 2.0**-22


def rough_scores(m32: Any, q: Any, qn: float, norms: Any = None, metric: str = "cosine") -> tuple[Any, Any, Any]:
    """The first pass: bounds of each row's exact score (``row_scores``) with ``q`` (float64,
    norm ``qn`` > 0), from a float32 product with the unit query (``norms``: the rows' norms,
    else taken in float32): (low, high, sure), the exact score within [low, high] where
    ``sure``. The float32 dot is within ``rough_delta * |x| |q|`` of the exact one; so a cosine
    is within ``rough_delta``, a dot product within ``rough_delta |x| |q|``, a squared distance
    ``|x|^2 + |q|^2 - 2 dot`` within ``rough_delta (2 |x| |q| + |x|^2)`` (the float32 norm's
    share; and float64 rounding of the sum), and minus its square root within the roots of
    those ends. A row whose norm is zero, under 2**-30, over 2**30 or not finite is not sure
    (float32 products and squares under- or overflow there, and rounding is no longer
    relative), nor is a bound that is not finite."""
    np = _np
    delta = rough_delta(m32.shape[1])
    with np.errstate(all="ignore"):
        if norms is None:
            norms = np.sqrt(np.einsum("ij,ij->i", m32, m32))
        norms = norms.astype(np.float64, copy=False)  # the bounds' own arithmetic in float64
        # ~ dot / qn; einsum's own loop, not a BLAS call: a multithreaded BLAS gemv waits on its
        # threads when the cores are busy (10k x 256: ~30 ms against ~0.5 ms on a loaded machine)
        unit = np.einsum("ij,j->i", m32, (q / qn).astype(np.float32)).astype(np.float64)
        if metric == "cosine":
            rough = unit / norms
            low, high = rough - delta, rough + delta
        elif metric == "inner_product":
            rough, err = unit * qn, delta * norms * qn
            low, high = rough - err, rough + err
        else:
            d2 = norms * norms + qn * qn - 2 * qn * unit
            err = delta * (2 * norms * qn + norms * norms) + 2.0**-50 * (norms * norms + qn * qn)
            low, high = -np.sqrt(np.maximum(d2 + err, 0.0)), -np.sqrt(np.maximum(d2 - err, 0.0))
        sure = (norms >= 2.0**-30) & (norms <= 2.0**30) & np.isfinite(low) & np.isfinite(high)
    return low, high, sure


def page_matrix(dims: int, pages: Sequence[Sequence[bytes]]) -> tuple[Any, list[int]] | None:
    """A page's vectors (each item's float32 vectors, little-endian bytes) as one float32 matrix,
    each item's rows contiguous, and each item's count of vectors; None without numpy, or with a
    vector not of ``dims`` (the matrix is None for a page without vectors)."""
    if _np is None or not dims:
        return None
    counts = list(map(len, pages))
    vectors = [b for p in pages for b in p]
    if not vectors:
        return None, counts
    if set(map(len, vectors)) != {4 * dims}:
        return None
    return _np.frombuffer(b"".join(vectors), dtype="<f4").reshape(-1, dims), counts


def page_candidates(
    query: Sequence[float], m32: Any, counts: list[int], k: int | None, floor: float | None, metric: str = "cosine"
) -> tuple[list[int], list[float]]:
    """The items of a page (``page_matrix``) that may rank, with their exact best scores
    (``best_scores``' values, bit for bit): (their indexes in the page, ascending; their scores).
    Left out: the items without vectors, those whose exact score is at most ``floor``, and those
    with ``k`` others of the page scoring strictly higher.

    Two passes: a float32 product over every vector gives each item bounds of its exact score
    (``rough_scores``), so an item whose upper bound is under the line (``floor``, or the k-th
    best lower bound) scores exactly under it; the items above the line only are scored in
    float64, row by row as ``best_scores`` scores them. A vector whose float32 norm is zero,
    tiny, huge or not finite (where float32 rounding is not relative) is always scored exactly."""
    np = _np
    if m32 is None:
        return [], []
    q = np.asarray(query, dtype=np.float64)
    qn = float(np.sqrt(q @ q))
    items = np.flatnonzero(np.asarray(counts))  # the items with vectors, and their first rows
    one = len(m32) == len(items)
    starts = np.cumsum([0] + [c for c in counts if c][:-1])
    cand = items
    if (k is not None or floor is not None) and qn > 0 and np.isfinite(qn):
        low, high, sure = rough_scores(m32, q, qn, None, metric)
        sure = sure if one else np.logical_and.reduceat(sure, starts)
        low = low if one else np.maximum.reduceat(low, starts)
        high = high if one else np.maximum.reduceat(high, starts)
        line = -np.inf
        if floor is not None:
            line = floor
        if k is not None and 0 < k < int(sure.sum()):
            known = low[sure]
            line = max(line, float(known[np.argpartition(-known, k - 1)[k - 1]]))
        if line > -np.inf:
            keep = ~sure | (high >= line)
            cand, starts = items[keep], starts[keep]
    if not len(cand):
        return [], []
    c = np.asarray(counts)[cand]
    rows = starts if one else np.repeat(starts - np.cumsum(c) + c, c) + np.arange(int(c.sum()))
    m = m32[rows].astype(np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", m, m)) if metric == "cosine" else None
    scores = row_scores(m, q, qn, norms, metric).tolist()
    if not one:  # each item's best, as best_scores takes it
        at, best = 0, []
        for n in c.tolist():
            best.append(max(scores[at : at + n]))
            at += n
        scores = best
    return cand.tolist(), scores


def row_scores(m: Any, q: Any, qn: float, norms: Any, metric: str = "cosine") -> Any:
    """Each row's score with ``q`` (float64 rows of the stored float32 values; ``qn`` the norm
    of ``q``; ``norms``, the rows' norms, for ``cosine``), as ``python_scores`` defines it, each
    row alone (``row_dots``): the one float64 scoring of every path (pages, vector cache, sets)."""
    np = _np
    if metric == "inner_product":
        return row_dots(m, q)
    if metric == "l2":
        d = m - q
        return -np.sqrt((d * d).sum(axis=1))
    dots = row_dots(m, q)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((norms > 0) & (qn > 0), dots / (qn * norms), 0.0)


def row_dots(m: Any, q: Any) -> Any:
    """Each row of ``m`` dotted with ``q``, each row summed alone (numpy's pairwise sum of the
    products): a row's score does not depend on the rows beside it, as a BLAS matrix product's
    can (by an ulp), so a page, the vector cache and any subset of rows score an item alike."""
    return (m * q).sum(axis=1)


def unpack(b: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(b) // 4}f", b))
