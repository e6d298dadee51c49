"""The store's settings as the plans read them (``Config``, which holds its runtime state,
``StoreState``) and its records as replies carry them: an item's record decoded (value,
timestamps, ttl), a vector packed as the scripts store it."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.store.base import (
    Item,
)

from ..core import values as _values
from ..core.integrity import Integrity, join_text, split_text
from ..errors import MalformedReplyError
from . import _vcache
from ._keys import StoreKeys, dec_ns

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass
class StoreState:
    """The store's runtime state, the one mutable object its ``Config`` holds: the clock of
    item timestamps, the probe's answer whether the server keeps vector sets, the counts of
    searches the sets answered, and the vector cache."""

    clock: list[int] = field(default_factory=lambda: [0])  # the last base sequence sent
    vsets: bool | None = None  # the server keeps vector sets (_vset.py); None: not asked yet
    vset_stats: dict[str, int] = field(default_factory=lambda: {"hits": 0, "scans": 0})  # searches from sets, fallbacks
    vcache: _vcache.VectorCache | None = None  # the vectors of the prefixes searched (_vcache.py)
    # set when ``from_conn_string`` closes the client: background fills stop at their next page
    # and no new one starts (searches then use the vector sets, as while a fill runs)
    closed: bool = False


@dataclass(frozen=True)
class Config:
    """The store's settings the plans read (frozen), and its runtime state (``StoreState``), the
    one mutable object it holds."""

    keys: StoreKeys
    serde: SerializerProtocol
    compress: bool
    refresh_in_read: bool  # "G" reads (the +rw variant) rather than "g" and a refresh write when needed
    index: dict[str, Any] | None  # IndexConfig with "__tokenized_fields", or None
    ann: tuple[int, int, int] | None = None  # opt-in approximate search: (M, ef_construction, ef_search)
    integrity: Integrity | None = None  # integrity_key: each item's type holds a tag of its namespace and key
    state: StoreState = field(default_factory=StoreState)


def pack_vector(v: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(v)}f", *v)


# ---- replies --------------------------------------------------------------------------
def _when(us: bytes) -> datetime:
    return _EPOCH + timedelta(microseconds=int(us))


def _decode(
    cfg: Config, rec: bytes, ns: tuple[str, ...], key: str, value: dict[str, Any] | None = None
) -> tuple[dict[str, Any], datetime, datetime, int]:
    """An item record: value (``value`` when already decoded), created_at, updated_at, ttl ms."""
    head, sep, data = rec.partition(b"\n")
    parts = head.split(b" ", 3)
    if not sep or len(parts) != 4:
        raise MalformedReplyError(f"malformed store item record {rec[:40]!r}")
    created, updated, ttl, type_ = parts
    if value is None:
        value = _load(cfg, type_, data, ns, key)
    return value, _when(created), _when(updated), int(ttl)


def _decode_value(cfg: Config, rec: bytes, ns: tuple[str, ...], key: str) -> dict[str, Any]:
    """An item record's value alone (what a filter reads; the times only for the results)."""
    head, sep, data = rec.partition(b"\n")
    parts = head.split(b" ", 3)
    if not sep or len(parts) != 4:
        raise MalformedReplyError(f"malformed store item record {rec[:40]!r}")
    return _load(cfg, parts[3], data, ns, key)


def stored_value(cfg: Config, type_: bytes, data: bytes, ns: tuple[str, ...], key: str) -> tuple[bytes, bytes]:
    """(serde type, serde bytes) of a stored item's type and bytes: its tag checked against
    (namespace, key) with a key, before it is decompressed."""
    type_, tag = split_text(type_)
    if cfg.integrity is not None:
        cfg.integrity.check(tag, ("s", ns, key, type_), data)
    if type_.endswith(_values.ZSTD_MARK):
        type_, data = type_[: -len(_values.ZSTD_MARK)], _values.decompress(data)
    return type_, data


def sign_value(cfg: Config, type_: bytes, data: bytes, ns: tuple[str, ...], key: str) -> bytes:
    """The type to store for an item's (stored type, bytes): with a tag of (namespace, key)."""
    if cfg.integrity is None:
        return type_
    return join_text(type_, cfg.integrity.tag(("s", ns, key, type_), data))


def _load(cfg: Config, type_: bytes, data: bytes, ns: tuple[str, ...], key: str) -> dict[str, Any]:
    t, d = stored_value(cfg, type_, data, ns, key)
    value: dict[str, Any] = cfg.serde.loads_typed((t.decode(), d))
    return value


def _dec_key(e: bytes) -> str:
    """The key of ``enc(key)`` (one label: ``dec_ns`` when it holds an escaped NUL)."""
    return e[:-1].decode() if b"\xff" not in e else dec_ns(e)[0]


def _item(cfg: Config, ns: tuple[str, ...], key: str, rec: bytes) -> tuple[Item, int]:
    value, created, updated, ttl = _decode(cfg, rec, ns, key)
    return Item(value=value, key=key, namespace=ns, created_at=created, updated_at=updated), ttl
