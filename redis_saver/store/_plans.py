"""A store batch as a pure plan: ops checked and encoded, script calls per shard, replies read.

``prepare()`` checks every op and encodes every value before anything is sent (bad input
writes nothing); the shell then embeds the texts it lists (sync or async: the only I/O that is
not Redis) and runs ``batch_plan()``, a generator in the saver's plan form (``_plans.py``): it
yields script calls, one per shard (a list is sent as one pipeline, one round trip), and
returns the batch's results.

A batch runs as InMemoryStore's does: its reads see the store as it was before the batch, its
puts apply after them, the last put of an (namespace, key) winning. Reads and writes go in one
round trip when the reads need no second page (gets); searches and namespace listings run
first, a page per shard per round trip (one in the common case), the writes after them.
Searches merge the shards' pages in search order; filters run in the client, on the values
as they were stored (exactly InMemoryStore's comparisons); so does semantic scoring.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.store.base import (
    GetOp,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchOp,
    tokenize_path,
)

from ..core import values as _values
from ..core.plans import Call, Plan
from ..core.replies import StoreProbe
from ..errors import MalformedReplyError
from ..keys import enc
from . import _budgets as B
from . import _semantics as sem
from . import _vcache
from ._keys import STORE_FORMAT, enc_ns, vset_format
from ._records import Config, _item, pack_vector, sign_value
from ._search import _List, _Search


@dataclass
class Embedding:
    """What the shell embeds before the plan runs: texts of puts, and search queries."""

    texts: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # text -> [(put ordinal, path)]
    queries: list[str] = field(default_factory=list)


@dataclass
class Prepared:
    ops: list[Op]
    puts: dict[tuple[tuple[str, ...], str], tuple[int, PutOp, list[bytes]]]  # -> ordinal, op, write args
    embed: Embedding


# ---- input ----------------------------------------------------------------------------
def as_namespace(ns: Any, what: str) -> tuple[str, ...]:
    """A namespace (or prefix, or path) as a tuple: any sequence of str is taken, as PostgresStore
    and SqliteStore take it (a list...); a str or bytes alone is refused (its characters are not
    labels)."""
    if isinstance(ns, (str, bytes, bytearray)) or not isinstance(ns, Sequence):
        raise TypeError(f"{what} must be a tuple (or another sequence) of str, got {type(ns).__name__}")
    labels: tuple[str, ...] = tuple(ns)
    for label in labels:
        if not isinstance(label, str):
            raise TypeError(f"{what} labels must be str, got {type(label).__name__} in {labels!r}")
    return labels


def _key(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, got {type(key).__name__}")
    return key


def _int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{what} must be an int, got {type(v).__name__}")
    return v


def ttl_ms(ttl: Any) -> int:
    """Minutes (a positive number) as milliseconds; None: no expiry (0)."""
    if ttl is None:
        return 0
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise TypeError(f"ttl must be a number of minutes or None, got {type(ttl).__name__}")
    if not ttl > 0 or ttl == float("inf"):
        raise ValueError(f"ttl must be a positive, finite number of minutes, got {ttl!r}")
    return max(1, round(ttl * 60_000))


def _encode_value(cfg: Config, value: Mapping[str, Any], ns: tuple[str, ...], key: str) -> tuple[bytes, bytes]:
    type_, data = cfg.serde.dumps_typed(dict(value))
    t, d = _values.encode_plain(type_, data, cfg.compress)
    if b" " in t or b"\n" in t:
        raise ValueError(f"serializer type {type_!r} may not contain a space or a newline")
    return sign_value(cfg, t, d, ns, key), d


def _tupled(op: Op) -> Op:
    """``op`` with its namespace (prefix, match paths) as a tuple of str; else TypeError."""
    if isinstance(op, (GetOp, PutOp)):
        ns = as_namespace(op.namespace, "namespace")
        return op if ns is op.namespace else op._replace(namespace=ns)
    if isinstance(op, SearchOp):
        ns = as_namespace(op.namespace_prefix, "namespace_prefix")
        return op if ns is op.namespace_prefix else op._replace(namespace_prefix=ns)
    if isinstance(op, ListNamespacesOp) and op.match_conditions:
        conds = tuple(c._replace(path=as_namespace(c.path, "match condition path")) for c in op.match_conditions)
        return op._replace(match_conditions=conds)
    return op


def prepare(cfg: Config, ops: Iterable[Op]) -> Prepared:
    """Check and encode a batch: raises (TypeError, ValueError, the serializer's error) before
    anything is sent; namespaces given as other sequences than tuples become tuples)."""
    ops = [_tupled(op) for op in ops]
    puts: dict[tuple[tuple[str, ...], str], tuple[int, PutOp, list[bytes]]] = {}
    embed = Embedding()
    paths = cfg.index["__tokenized_fields"] if cfg.index else None
    for op in ops:
        if isinstance(op, GetOp):
            _key(op.key)
        elif isinstance(op, SearchOp):
            sem.check_filter(op.filter)
            _int(op.limit, "limit")
            _int(op.offset, "offset")
            if op.query is not None and not isinstance(op.query, str):
                raise TypeError(f"query must be a str, got {type(op.query).__name__}")
            if op.query and cfg.index and op.query not in embed.queries:
                embed.queries.append(op.query)
        elif isinstance(op, ListNamespacesOp):
            for c in op.match_conditions or ():
                if c.match_type not in ("prefix", "suffix"):
                    raise ValueError(f"Unsupported match type: {c.match_type}")
            if op.max_depth is not None:
                _int(op.max_depth, "max_depth")
            _int(op.limit, "limit")
            _int(op.offset, "offset")
        elif isinstance(op, PutOp):
            ns = op.namespace
            key = _key(op.key)
            if op.value is None:
                args = [b"d", enc_ns(ns), enc(key)]
            else:
                if not isinstance(op.value, Mapping):
                    raise TypeError(f"value must be a dict (or None to delete), got {type(op.value).__name__}")
                if op.index is not None and op.index is not False:
                    if isinstance(op.index, str) or not all(isinstance(p, str) for p in op.index):
                        raise TypeError("index must be False, None or a list of field paths")
                t, d = _encode_value(cfg, op.value, ns, key)
                args = [b"p", enc_ns(ns), enc(key), b"", str(ttl_ms(op.ttl)).encode(), t, d]
            old = puts.get((ns, key))
            ordinal = old[0] if old is not None else len(puts)
            puts[(ns, key)] = (ordinal, op, args)
        else:
            raise ValueError(f"Unknown operation type: {type(op)}")
    if paths is not None:
        for ordinal, op, _ in puts.values():
            if op.value is None or op.index is False:
                continue
            p = paths if op.index is None else [(ix, tokenize_path(ix)) for ix in op.index]
            for path, text in sem.texts_to_embed(dict(op.value), p):
                embed.texts.setdefault(text, []).append((ordinal, path))
    return Prepared(ops, puts, embed)


def merged(preps: Sequence[Prepared]) -> Prepared:
    """Several calls' prepared puts as one batch (``AsyncRedisStore``'s concurrent writes): the
    calls put disjoint keys (the caller checks), so the batch writes what the calls would, in
    order: each call's puts keep their order and come after the earlier calls' (ordinals
    shifted, texts to embed with them)."""
    ops: list[Op] = []
    puts: dict[tuple[tuple[str, ...], str], tuple[int, PutOp, list[bytes]]] = {}
    embed = Embedding()
    for p in preps:
        shift = len(puts)
        ops += p.ops
        for k, (ordinal, op, args) in p.puts.items():
            puts[k] = (ordinal + shift, op, args)
        for text, places in p.embed.texts.items():
            embed.texts.setdefault(text, []).extend([(ordinal + shift, path) for ordinal, path in places])
    assert len(puts) == sum(len(p.puts) for p in preps), "the calls' keys must be disjoint"
    return Prepared(ops, puts, embed)


# ---- the plan -------------------------------------------------------------------------
def _base_sequence(cfg: Config, n: int) -> bytes:
    """Microseconds of the client's clock, above the last base this store sent plus its batch:
    sequences follow the order of the calls (and of the puts in one batch) across shards."""
    now = max(time.time_ns() // 1000, cfg.state.clock[0] + 1)
    cfg.state.clock[0] = now + n
    return str(now).encode()


def probe_plan(cfg: Config) -> Plan[bool]:
    """Whether the server keeps vector sets for this store: one "P" read on shard 0 (a VCARD in
    the script: an unknown command, or one the store's ACL user may not run, answers no)."""
    reply = yield Call("store_read", [cfg.keys.index(0)], [STORE_FORMAT, b"0", b"1", b"P"])
    if not isinstance(reply, list) or len(reply) != 1 or reply[0] not in set(StoreProbe):
        raise MalformedReplyError(f"store_read replied {reply!r:.80}")
    return bool(reply[0] == StoreProbe.VECTOR_SETS)


def fill_plan(cfg: Config, key: tuple[int, bytes], dims: int) -> Plan[bool]:
    """Fill the vector cache's entry of ``key`` (shard, e(prefix)) in the background, while
    searches are answered otherwise (Redis 8: from the vector sets): the scan's pages with their
    vectors, one bounded ``store_read`` "s" call a page (``B.VECTOR_PAGE`` items; no call scans
    the prefix whole), kept as a search's scan keeps them (``_vcache.keep_pages``: the entry is
    current at the first page's token and the change log brings what changed since). False: not
    kept (a vector of other dims, a shard without a token or of two incarnations, over the
    cache's bound)."""
    vcache = cfg.state.vcache
    assert vcache is not None
    shard, eprefix = key
    pages: list[tuple[list[Any], list[int], Any]] = []
    tokens: list[bytes] = []
    cursor, rows, made = (b"", b""), 0, False
    page = str(B.VECTOR_PAGE).encode()
    while True:
        if cfg.state.closed:
            return False  # the store's client is closing: nothing kept
        reply = yield Call(
            "store_read", [cfg.keys.index(shard)], [STORE_FORMAT, b"0", b"1", b"s", eprefix, *cursor, page, b"1"]
        )
        if not isinstance(reply, list) or len(reply) != 1 or not isinstance(reply[0], list) or len(reply[0]) != 4:
            raise MalformedReplyError(f"store_read replied {reply!r:.80}")
        flat, c_ns, c_item, token = reply[0]
        if not token and not pages and not made:
            # a shard without a version token (written by an earlier release, or the key lost):
            # a write call makes it (as a search's scan does), then the fill starts over
            made = True
            calls = _write_calls(cfg, 0, {shard: []})
            yield (calls[0] if len(calls) == 1 else calls)
            continue
        mc = sem.page_matrix(dims, [v[1::2] for v in flat[5::6]])
        if mc is None:
            return False
        pages.append((flat, mc[1], mc[0]))
        tokens.append(token)
        rows += sum(mc[1])
        if not token or token.split(b":", 1)[0] != tokens[0].split(b":", 1)[0] or rows * dims * 4 > vcache.max_bytes:
            return False  # (keep_pages refuses these too: stop reading now)
        if not c_ns:
            return _vcache.keep_pages(vcache, key, dims, pages, tokens)
        cursor = (c_ns, c_item)


def write_format(cfg: Config) -> str:
    """ARGV[1] of store_write / store_delete: the store format, "v" when the server keeps vector
    sets, "vh<M>:<EF>" when the sets it makes get those HNSW parameters (``ann_index_config``)."""
    if not cfg.state.vsets:
        return STORE_FORMAT
    return vset_format(cfg.ann[:2] if cfg.ann else None)


_Reads = dict[int, list[tuple[list[bytes], Callable[[Any], None]]]]  # shard -> (arguments, reply handler)
_Tasks = dict[int, _Search | _List]  # op index -> its paged read


def _put_vectors(prep: Prepared, doc_vectors: list[list[float]]) -> dict[int, list[bytes]]:
    """The vectors of each put: (ordinal) -> [path, float32 bytes, ...]."""
    vectors: dict[int, list[bytes]] = {}
    if not prep.embed.texts:
        return vectors
    if len(prep.embed.texts) != len(doc_vectors):
        raise ValueError(
            f"Number of embeddings ({len(doc_vectors)}) does not match number of texts ({len(prep.embed.texts)})"
        )
    for places, embedding in zip(prep.embed.texts.values(), doc_vectors, strict=True):
        packed = pack_vector(embedding)
        for ordinal, path in places:
            vectors.setdefault(ordinal, []).extend([path.encode(), packed])
    return vectors


def _writes(cfg: Config, prep: Prepared, doc_vectors: list[list[float]]) -> dict[int, list[list[bytes]]]:
    """shard -> each write's arguments (a put with its vectors)."""
    vectors = _put_vectors(prep, doc_vectors)
    writes: dict[int, list[list[bytes]]] = {}
    for (ns, _), (ordinal, _, args) in prep.puts.items():
        if args[0] == b"p":
            vec = vectors.get(ordinal, [])
            args = [*args[:3], str(ordinal).encode(), *args[4:], str(len(vec) // 2).encode(), *vec]
        writes.setdefault(cfg.keys.shard(ns), []).append(args)
    return writes


def _write_calls(cfg: Config, n_puts: int, per_shard: dict[int, list[list[bytes]]]) -> list[Call]:
    """The write calls, B.CALL_OPS writes each (a shard without writes: a call that makes the
    version token)."""
    keys = cfg.keys
    base = _base_sequence(cfg, n_puts)
    fmt = write_format(cfg)
    calls = []
    for s, ws in per_shard.items():
        for j in range(0, max(1, len(ws)), B.CALL_OPS):
            chunk = ws[j : j + B.CALL_OPS]
            wargs: list[bytes | str | int]
            if chunk and all(w[0] == b"d" for w in chunk):  # deletes only: a script that runs out of memory
                wargs = [fmt, str(len(chunk)).encode(), *[a for w in chunk for a in w[1:]]]
                calls.append(Call("store_delete", [keys.index(s)], wargs))
                continue
            wargs = [fmt, base, str(len(chunk)).encode()]
            wargs += [a for w in chunk for a in w]
            calls.append(Call("store_write", [keys.index(s)], wargs))
    return calls


def _read_tasks(
    cfg: Config, ops: list[Op], query_vectors: dict[str, list[float]]
) -> tuple[list[tuple[int, int, GetOp]], _Tasks]:
    """The gets (op index, shard, op), read once, and the searches and listings, read until done."""
    gets: list[tuple[int, int, GetOp]] = []
    tasks: _Tasks = {}
    for i, op in enumerate(ops):
        if isinstance(op, GetOp):
            gets.append((i, cfg.keys.shard(op.namespace), op))
        elif isinstance(op, SearchOp):
            qv = query_vectors.get(op.query) if op.query and cfg.index else None
            tasks[i] = _Search(cfg, op, qv)
        elif isinstance(op, ListNamespacesOp):
            tasks[i] = _List(cfg, op)
    return gets, tasks


def _get_reads(
    cfg: Config,
    gets: list[tuple[int, int, GetOp]],
    results: list[Result],
    add_refresh: Callable[[tuple[str, ...], str], None],
) -> _Reads:
    """The gets' reads; each reply fills its result (and asks for a refresh when the read does not)."""
    reads: _Reads = {}
    for i, s, op in gets:
        code = b"G" if op.refresh_ttl and cfg.refresh_in_read else b"g"

        def on_get(rec: Any, i: int = i, op: GetOp = op) -> None:
            if rec is None:
                return
            item, ttl = _item(cfg, op.namespace, op.key, rec)
            results[i] = item
            if ttl and op.refresh_ttl and not cfg.refresh_in_read:
                add_refresh(op.namespace, op.key)

        reads.setdefault(s, []).append(([code, enc_ns(op.namespace), enc(op.key)], on_get))
    return reads


def _read_calls(cfg: Config, reads: _Reads) -> tuple[list[Call], list[list[Callable[[Any], None]]]]:
    """The reads as store_read calls, B.CALL_OPS each, and each call's reply handlers."""
    calls: list[Call] = []
    handlers: list[list[Callable[[Any], None]]] = []
    for s, rs in reads.items():
        for j in range(0, len(rs), B.CALL_OPS):
            chunk = rs[j : j + B.CALL_OPS]
            rw = any(r[0] == b"G" for r, _ in chunk)
            rargs: list[bytes | str | int] = [STORE_FORMAT, b"1" if rw else b"0", str(len(chunk)).encode()]
            rargs += [a for r, _ in chunk for a in r]
            calls.append(Call("store_read+rw" if rw else "store_read", [cfg.keys.index(s)], rargs))
            handlers.append([h for _, h in chunk])
    return calls, handlers


def _handle(handlers: list[list[Callable[[Any], None]]], replies: list[Any]) -> None:
    for hs, reply in zip(handlers, replies, strict=False):
        if not isinstance(reply, list) or len(reply) != len(hs):
            raise MalformedReplyError(f"store_read replied {reply!r:.80}")
        for h, r in zip(hs, reply, strict=True):
            h(r)


def _task_results(
    tasks: _Tasks,
    results: list[Result],
    writes: dict[int, list[list[bytes]]],
    add_refresh: Callable[[tuple[str, ...], str], None],
) -> None:
    """The searches' and listings' results; a search's returned items to refresh, and a write
    call for a shard it found without a version token."""
    for i, task in tasks.items():
        if not isinstance(task, _Search):
            results[i] = task.result()
            continue
        found, returned = task.result()
        results[i] = found
        if task.unversioned is not None:  # a shard written by an earlier release: its token
            writes.setdefault(task.unversioned, [])
        if task.op.refresh_ttl:
            for ns, key, ttl in returned:
                if ttl:
                    add_refresh(ns, key)


def batch_plan(
    cfg: Config, prep: Prepared, doc_vectors: list[list[float]], query_vectors: dict[str, list[float]]
) -> Plan[list[Result]]:
    """Run a prepared batch: ``doc_vectors`` are the embeddings of ``prep.embed.texts`` (one per
    distinct text, in its order), ``query_vectors`` those of its queries."""
    results: list[Result] = [None] * len(prep.ops)
    writes = _writes(cfg, prep, doc_vectors)
    gets, tasks = _read_tasks(cfg, prep.ops, query_vectors)
    refreshes: dict[int, list[list[bytes]]] = {}  # shard -> "r" writes (reads that restart an expiry)

    def add_refresh(ns: tuple[str, ...], key: str) -> None:
        refreshes.setdefault(cfg.keys.shard(ns), []).append([b"r", enc_ns(ns), enc(key)])

    first = True
    while True:
        for task in tasks.values():  # searches from vector sets: their VSIM calls (_vset.py)
            if isinstance(task, _Search) and (pipe := task.vsim_pipe()) is not None:
                task.vsim_feed((yield pipe))
        reads = _get_reads(cfg, gets, results, add_refresh) if first else {}
        for task in tasks.values():
            for s, args in task.requests():
                reads.setdefault(s, []).append((args, functools.partial(task.feed, s)))
        calls, handlers = _read_calls(cfg, reads)
        # writes ride with the first reads when no read needs a second page (they see the
        # store before the batch either way: per shard, the reads run first)
        with_writes = first and not tasks and bool(writes)
        if with_writes:
            calls += _write_calls(cfg, len(prep.puts), writes)
            writes = {}
        first = False
        if not calls:
            break
        replies = yield (calls[0] if len(calls) == 1 else calls)
        _handle(handlers, [replies] if len(calls) == 1 else replies)
        if with_writes and not refreshes:
            break
    _task_results(tasks, results, writes, add_refresh)
    # the writes (after reads that took pages), and the expiries reads restart
    for s, r in refreshes.items():
        writes.setdefault(s, []).extend(r)
    if writes:
        calls = _write_calls(cfg, len(prep.puts), writes)
        yield (calls[0] if len(calls) == 1 else calls)
    return results
