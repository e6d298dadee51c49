"""Store items as they are stored, out and in: export, import and migration (the CLI's
``redis-saver store export / import / migrate``).

An exported item is its serializer's bytes (decompressed), its created_at / updated_at, its
ttl and its vectors: an import writes them back as they were (``"P"`` writes of
``lua/store_write.lua``), without re-serializing the values nor embedding the texts again.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..core import values as _values
from ..core.plans import Call, Out, Plan
from ..errors import IntegrityError
from ..keys import enc
from . import _budgets as B
from ._keys import STORE_FORMAT, dec_ns, enc_ns
from ._plans import _base_sequence, write_format
from ._records import Config, sign_value, stored_value

_EPOCH_US = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass
class StoredItem:
    """One item as stored: the serializer's ``(type, bytes)``, times in µs since the epoch."""

    namespace: tuple[str, ...]
    key: str
    type: str
    data: bytes
    created_us: int
    updated_us: int
    ttl_ms: int = 0
    vectors: dict[str, bytes] = field(default_factory=dict)  # index path -> float32 vector

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "item",
            "namespace": list(self.namespace),
            "key": self.key,
            "value_type": self.type,
            "value": base64.b64encode(self.data).decode(),
            "created_us": self.created_us,
            "updated_us": self.updated_us,
            "ttl_ms": self.ttl_ms,
            "vectors": {p: base64.b64encode(v).decode() for p, v in self.vectors.items()},
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StoredItem:
        ns = d["namespace"]
        if not isinstance(ns, list) or not all(isinstance(x, str) for x in ns) or not isinstance(d["key"], str):
            raise ValueError(f"bad namespace or key in {d!r:.100}")
        for name in ("created_us", "updated_us", "ttl_ms"):
            if isinstance(d[name], bool) or not isinstance(d[name], int) or d[name] < 0:
                raise ValueError(f"bad {name} in {d!r:.100}")
        return cls(
            tuple(ns),
            d["key"],
            str(d["value_type"]),
            base64.b64decode(d["value"], validate=True),
            d["created_us"],
            d["updated_us"],
            d["ttl_ms"],
            {str(p): base64.b64decode(v, validate=True) for p, v in (d.get("vectors") or {}).items()},
        )

    @staticmethod
    def us(when: datetime) -> int:
        """Microseconds since the epoch of an aware datetime (naive: taken as UTC)."""
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        d = when - _EPOCH_US
        return (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds


def export_plan(
    cfg: Config, prefix: tuple[str, ...] = (), failed: list[tuple[tuple[str, ...], str, str]] | None = None
) -> Plan[int]:
    """Every item under ``prefix``, shard by shard in search order (emitted a page at a time).
    ``failed`` (a list): an item failing its integrity check is added to it as (namespace, key,
    the error) and left out, instead of stopping the export."""
    n = 0
    for shard in cfg.keys.shards_under(prefix):
        c_ns, c_item = b"", b""
        while True:
            args = [b"s", enc_ns(prefix), c_ns, c_item, str(B.VECTOR_PAGE).encode(), b"1"]
            reply = yield Call("store_read", [cfg.keys.index(shard)], [STORE_FORMAT, b"0", b"1", *args])
            flat, c_ns, c_item = reply[0][:3]
            out = []
            for i in range(0, len(flat), 6):
                ens, ekey, _, _, rec, vec = flat[i : i + 6]
                head, _, data = rec.partition(b"\n")
                created, updated, ttl, type_ = head.split(b" ", 3)
                vectors = {vec[j].decode(): vec[j + 1] for j in range(0, len(vec), 2)}
                ns, key = dec_ns(ens), dec_ns(ekey)[0]
                try:
                    type_, data = stored_value(cfg, type_, data, ns, key)  # checked with a key
                except IntegrityError as exc:
                    if failed is None:
                        raise
                    failed.append((ns, key, str(exc)))
                    continue
                out.append(StoredItem(ns, key, type_.decode(), data, int(created), int(updated), int(ttl), vectors))
            n += len(out)
            if out:
                yield Out(out)  # type: ignore[arg-type]
            if not c_ns:
                break
    return n


def import_plan(cfg: Config, items: Iterable[StoredItem]) -> Plan[int]:
    """Write ``items`` as they were (value bytes, times, ttl, vectors): one pipeline of calls of
    at most B.CALL_OPS writes; an item already there is replaced. Checked before anything is sent."""
    per_shard: dict[int, list[list[bytes]]] = {}
    n = 0
    for ordinal, it in enumerate(items):
        t, d = _values.encode_plain(it.type, it.data, cfg.compress)
        if b" " in t or b"\n" in t:
            raise ValueError(f"serializer type {it.type!r} may not contain a space or a newline")
        t = sign_value(cfg, t, d, it.namespace, it.key)
        vec = [x for p, v in it.vectors.items() for x in (p.encode(), v)]
        args = [b"P", enc_ns(it.namespace), enc(it.key), str(ordinal).encode(), str(it.ttl_ms).encode(), t, d]
        args += [str(it.created_us).encode(), str(it.updated_us).encode(), str(len(it.vectors)).encode(), *vec]
        per_shard.setdefault(cfg.keys.shard(it.namespace), []).append(args)
        n += 1
    if not n:
        return 0
    base = _base_sequence(cfg, n)
    calls = []
    for shard, ws in per_shard.items():
        for j in range(0, len(ws), B.CALL_OPS):
            chunk = ws[j : j + B.CALL_OPS]
            wargs: list[bytes | str | int] = [write_format(cfg), base, str(len(chunk)).encode()]
            wargs += [a for w in chunk for a in w]
            calls.append(Call("store_write", [cfg.keys.index(shard)], wargs))
    yield (calls[0] if len(calls) == 1 else calls)
    return n


def value_of(cfg: Config, item: StoredItem) -> Any:
    """The item's value, as its serializer reads it."""
    return cfg.serde.loads_typed((item.type, item.data))
