"""The cache's operations as pure plans, and the loop that runs them on the saver's engine.

A plan is a generator, as the saver's (``redis_saver/core/plans.py``): it yields a script
:class:`~redis_saver.core.plans.Call` or a list of them (run by the saver's engine: EVALSHA, EVAL
after NOSCRIPT, one pipeline for a list, retries on ``ConnectionError``), or a plain command
(``Cmd``, ``Pipe``, ``Scan`` of ``redis_saver.core.engine``: the reads, which need no script), is
sent the reply, and returns the operation's result. :func:`run` wraps a plan in the span and
metrics of one call; the saver's drivers (``transport/drivers.py``) perform what it yields, so the sync
and async caches share every line of logic.

Slots: all keys of one namespace share its hash tag (``keys.py``). A batch is one ``MGET``
(get) or one ``set.lua`` call (set) whatever its namespaces; on a cluster, where one command
may only touch one slot, it is one command per namespace, in one pipeline, which redis-py's
cluster client splits by node (a round trip per node). LangGraph's node cache puts each node
in a namespace of its own (``("__pregel_ns_writes", <node>)``), so there a step's batch is one
command per cached node.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Generator, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, TypeVar, Union

from langgraph.checkpoint.serde.base import SerializerProtocol

from ..core import values as values_
from ..core.engine import Cmd, Pipe, Scan
from ..core.integrity import Integrity, join_type, split_type
from ..core.plans import Call
from ..core.replies import CacheClear
from ..core.scripts import Script, lua_dir
from ..keys import dec_first, enc
from .keys import CacheKeys

T = TypeVar("T")
Namespace = tuple[str, ...]
FullKey = tuple[Namespace, str]
Step = Union[Call, list[Call], Cmd, Pipe, Scan]  # noqa: UP007 (a runtime alias; py3.10 needs Union)
Plan = Generator[Step, Any, T]

SET, CLEAR = "cache_set", "cache_clear"
# entries one clear.lua call deletes: ~1 us of server time each, so a call stays well under a
# millisecond however large the namespace (a larger one takes more calls)
CLEAR_PAGE = 512


@lru_cache(maxsize=1)
def scripts() -> dict[str, Script]:
    """The cache's scripts (``lua/cache/*.lua``) by name."""
    out: dict[str, Script] = {}
    for path in sorted((lua_dir() / "cache").glob("*.lua")):
        data = path.read_bytes()
        s = Script(f"cache_{path.stem}", data, hashlib.sha1(data).hexdigest(), True)
        out[s.name] = s
    return out


# ---- input --------------------------------------------------------------------------------
def namespace(ns: Any) -> Namespace:
    """A namespace as given (a tuple, or a list, of str), or TypeError."""
    if not isinstance(ns, (tuple, list)):
        raise TypeError(f"a cache namespace must be a tuple of str, got {type(ns).__name__}")
    for c in ns:
        if not isinstance(c, str):
            raise TypeError(f"a cache namespace's parts must be str, got {type(c).__name__} in {ns!r}")
    return tuple(ns)


def full_key(k: Any) -> FullKey:
    """A ``(namespace, key)`` pair as given, or TypeError."""
    if not isinstance(k, tuple) or len(k) != 2:
        raise TypeError(f"a cache key must be a (namespace, key) pair, got {k!r}")
    ns, key = k
    if not isinstance(key, str):
        raise TypeError(f"a cache key must be a str, got {type(key).__name__}")
    return namespace(ns), key


def ttl_ms(ttl: Any) -> int:
    """A TTL in seconds as the script takes it, in ms: -1 none, 0 expired already (as
    InMemoryCache, an entry whose TTL is 0 is never read back), else >= 1."""
    if ttl is None:
        return -1
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise TypeError(f"a cache TTL must be a number of seconds or None, got {type(ttl).__name__}")
    if not math.isfinite(ttl) or ttl < 0:
        raise ValueError(f"a cache TTL must be a finite number of seconds >= 0, got {ttl!r}")
    return 0 if ttl == 0 else max(1, math.ceil(ttl * 1000))


# ---- values: e(serde type) + bytes; the type marked "\x1fz" when the bytes are one zstd frame
# with an integrity key, the type holds a tag of (namespace, key) after its name (core/integrity.py)
def encode_value(
    serde: SerializerProtocol, value: Any, compress: bool, integ: Integrity | None = None, where: Any = None
) -> bytes:
    type_, data = serde.dumps_typed(value)
    t, b = values_.encode_plain(type_, data, compress)
    if integ is not None:
        t = join_type(t, integ.tag(("e", *where, t), b))
    return enc(t) + b


def decode_value(serde: SerializerProtocol, raw: bytes, integ: Integrity | None = None, where: Any = None) -> Any:
    t, pos = dec_first(raw)
    data = raw[pos:]
    t, tag = split_type(t)
    if integ is not None:
        integ.check(tag, ("e", *where, t), data)
    if t.endswith(values_.ZSTD_MARK):
        t, data = t[: -len(values_.ZSTD_MARK)], values_.decompress(data)
    return serde.loads_typed((t.decode(), data))


# ---- plans --------------------------------------------------------------------------------
def get(
    keys: CacheKeys,
    serde: SerializerProtocol,
    wanted: Sequence[FullKey],
    cluster: bool,
    integ: Integrity | None = None,
) -> Plan[dict[FullKey, Any]]:
    """The stored values of ``wanted`` (missing and expired keys left out): one MGET, or on a
    cluster one per namespace, all in one pipeline."""
    groups: dict[Namespace, dict[FullKey, bytes]] = {}  # namespace -> its keys and their names
    for k in wanted:
        ns, key = full_key(k)
        names = groups.setdefault(ns, {})
        if (ns, key) not in names:
            names[(ns, key)] = keys.entry(ns, key)
    if not groups:
        return {}
    found = [k for names in groups.values() for k in names]
    if not cluster or len(groups) == 1:
        replies = yield Cmd("mget", [n for names in groups.values() for n in names.values()])
    else:
        piped = yield Pipe([("MGET", *names.values()) for names in groups.values()])
        replies = [r for reply in piped for r in reply]
    out: dict[FullKey, Any] = {}
    for k, raw in zip(found, replies, strict=True):
        if raw is not None:
            out[k] = decode_value(serde, raw, integ, k)
    return out


def set_(
    keys: CacheKeys,
    serde: SerializerProtocol,
    pairs: Mapping[FullKey, tuple[Any, int | None]],
    compress: bool,
    cluster: bool,
    integ: Integrity | None = None,
) -> Plan[None]:
    """Store ``pairs`` (value, TTL in seconds): one set.lua call, or on a cluster one per
    namespace, all in one pipeline. Every pair is checked and serialized before anything is sent."""
    if not isinstance(pairs, Mapping):
        raise TypeError(f"cache set takes a mapping of (namespace, key) -> (value, ttl), got {type(pairs).__name__}")
    groups: dict[Namespace, tuple[list[bytes], list[bytes | str | int]]] = {}
    for k, pair in pairs.items():
        ns, key = full_key(k)
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise TypeError(f"a cache entry must be a (value, ttl) pair, got {type(pair).__name__}")
        value, ttl = pair
        ms = ttl_ms(ttl)
        group = groups.get(ns)
        if group is None:
            group = groups[ns] = ([keys.index(ns)], [0])
        group[0].append(keys.entry(ns, key))
        group[1].extend((ms, encode_value(serde, value, compress, integ, (ns, key))))
    for names, args in groups.values():
        args[0] = len(names) - 1  # the group's entry count
    if not groups:
        return None
    if not cluster:
        every = groups.values()
        yield Call(SET, [n for names, _ in every for n in names], [a for _, args in every for a in args])
    elif len(groups) == 1:
        yield Call(SET, *next(iter(groups.values())))
    else:
        yield [Call(SET, names, args) for names, args in groups.values()]
    return None


def clear(keys: CacheKeys, namespaces: Iterable[Any] | None) -> Plan[None]:
    """Delete the entries of ``namespaces`` (every namespace of the prefix when None: found with
    SCAN) as they were when the clear began: clear.lua takes each namespace's index as its
    snapshot, then deletes up to ``CLEAR_PAGE`` of its entries per call; the namespaces' calls of
    one round go in one pipeline. The snapshots only shrink, so the number of calls is bounded
    whatever other workers set meanwhile (their sets go to a new index and stay)."""
    if namespaces is None:
        found = yield Scan(keys.index_pattern())
        bases = sorted({b for k in found if (b := keys.namespace_base(bytes(k))) is not None})
    else:
        if isinstance(namespaces, (str, bytes)):
            raise TypeError("clear takes a sequence of namespaces (tuples of str), not a str")
        bases = list(dict.fromkeys(keys.base(namespace(ns)) for ns in namespaces))
    took: set[bytes] = set()  # the namespaces whose index a call took: what preceded the clear
    while bases:
        calls = [Call(CLEAR, [b + b"i", b + b"c"], [CLEAR_PAGE]) for b in bases]
        replies = [(yield calls[0])] if len(calls) == 1 else (yield calls)
        left = []
        for b, (n, took_now) in zip(bases, replies, strict=True):
            if int(took_now) == CacheClear.TOOK_INDEX:
                took.add(b)
            if int(n) > 0 or b not in took:
                left.append(b)
        bases = left
    return None
