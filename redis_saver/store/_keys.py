"""The store's key names (the only place they are spelled; ``lua/_store_lib.lua`` lists them).

A store's namespaces live in ``shards``; every key of a shard shares the shard's hash tag, so
one script call serves any number of operations on the namespaces of one shard::

    <prefix>:store#{<shard tag>}:n               ZSET  e(ns), lex (list_namespaces, prefixes)
    <prefix>:store#{<shard tag>}:q               ZSET  e(ns) -> namespace sequence (search order)
    <prefix>:store#{<shard tag>}:x               ZSET  e(ns) -> latest expiry of its items (ms), if all expire
    <prefix>:store#{<shard tag>}:m               HASH  seq -> the shard's last sequence number
    <prefix>:store#{<shard tag>}:w               STRING version token "<incarnation>:<counter>" (vector caches)
    <prefix>:store#{<shard tag>}:l               ZSET  change log: e(ns)e(key) -> counter, "#<incarnation>" -> floor
    <prefix>:store#{<shard tag>}:k:<e(ns)>        ZSET  e(key) -> item sequence
    <prefix>:store#{<shard tag>}:e:<e(ns)>        ZSET  e(key) -> item expiry (ms), items that expire
    <prefix>:store#{<shard tag>}:i:<e(ns)><e(key)> STRING the item record
    <prefix>:store#{<shard tag>}:v:<e(ns)><e(key)> HASH  index path -> float32 vector
    <prefix>:store#{<shard tag>}:s:<e(ns)>        VSET  e(key)e(path) -> vector (servers with VADD: Redis 8)
    <prefix>:store#{<shard tag>}:c               HASH  e(ns) -> elements of s:<e(ns)> while complete
                                                        ("<elements> <token> <cursor>": being rebuilt)
    <prefix>:store#{<shard tag>}:t:<e(ns)>        SET   e(path) of the paths put in the namespace
    <prefix>:store#{<shard 0 tag>}:schema         STRING store format, shards, shard depth

``e(ns)`` is ``keys.enc`` of each label, concatenated: self-delimiting and ordered as the
tuples are, so an item key (namespace components, then the key's) decodes one way only, and
the namespaces under a prefix are one lex range. A namespace's shard is CRC16 of
``e(ns[:shard_depth])`` modulo ``shards``; shard ``s`` takes the tag of cluster slot
``s * 16384 // shards`` (``keys.slot_tag``: the shortest string hashing there), so the shards
spread evenly over a cluster's slots.

The keys never meet the saver's: a saver key's first ``{`` follows ``:`` (``<p>:{`` or
``<p>:ix:{``), a store key's follows ``:store#``, and no prefix holds a brace.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..keys import SLOTS, check_prefix, enc, glob_escape, key_slot, slot_tag

STORE_FORMAT = "1"  # lua/_store_lib.lua STORE_FORMAT


def vset_format(hnsw: tuple[int, int] | None = None) -> str:
    """ARGV[1] of a script call that keeps vector sets (lua/_store_lib.lua st_check): the store
    format and "v", then "h<M>:<EF>" when the sets it makes get those HNSW parameters."""
    return STORE_FORMAT + "v" + (f"h{hnsw[0]}:{hnsw[1]}" if hnsw else "")
MARKER = ":store#"


def enc_ns(namespace: Sequence[str]) -> bytes:
    """``e(label)`` per label: injective for any strings (NUL, empty, braces...), ordered as tuples."""
    return b"".join([enc(label) for label in namespace])


def dec_ns(e: bytes) -> tuple[str, ...]:
    """The namespace of ``enc_ns``."""
    if b"\xff" not in e:  # no escaped NUL (UTF-8 never holds 0xff): every NUL ends a label
        # (one decode, then a split: a NUL byte is never part of a longer UTF-8 sequence)
        return tuple(e[:-1].decode().split("\x00")) if e else ()
    out: list[str] = []
    pos, n = 0, len(e)
    while pos < n:
        i = e.index(b"\x00", pos)
        while i + 1 < n and e[i + 1] == 0xFF:
            i = e.index(b"\x00", i + 2)
        out.append(e[pos:i].replace(b"\x00\xff", b"\x00").decode())
        pos = i + 1
    return tuple(out)


class StoreKeys:
    """The key names of one store: ``prefix``, ``shards`` and ``shard_depth``."""

    def __init__(self, prefix: str, shards: int, shard_depth: int | None) -> None:
        check_prefix(prefix)
        if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= SLOTS:
            raise ValueError(f"shards must be an int from 1 to {SLOTS}, got {shards!r}")
        if shard_depth is not None and (
            isinstance(shard_depth, bool) or not isinstance(shard_depth, int) or shard_depth < 1
        ):
            raise ValueError(f"shard_depth must be None or an int >= 1, got {shard_depth!r}")
        self.prefix, self.shards, self.shard_depth = prefix, shards, shard_depth
        head = (prefix + MARKER).encode()
        self._index = [head + b"{" + slot_tag(s * SLOTS // shards) + b"}:n" for s in range(shards)]

    def shard(self, namespace: Sequence[str]) -> int:
        if self.shards == 1:
            return 0
        part = namespace if self.shard_depth is None else namespace[: self.shard_depth]
        return key_slot(enc_ns(part)) % self.shards

    def shards_under(self, prefix: Sequence[str]) -> list[int]:
        """The shards that may hold a namespace starting with ``prefix`` (all, unless the prefix
        fixes the labels the shard is chosen by)."""
        if self.shards == 1:
            return [0]
        if self.shard_depth is not None and len(prefix) >= self.shard_depth:
            return [self.shard(prefix)]
        return list(range(self.shards))

    def index(self, shard: int) -> bytes:
        """KEYS[1] of a store script on ``shard``: its namespace index."""
        return self._index[shard]

    def base(self, shard: int) -> bytes:
        """What every key of ``shard`` starts with."""
        return self._index[shard][:-1]

    def item(self, namespace: Sequence[str], key: str) -> bytes:
        return self.base(self.shard(namespace)) + b"i:" + enc_ns(namespace) + enc(key)

    def vset(self, shard: int, ens: bytes) -> bytes:
        """The vector set of the namespace ``ens`` (``enc_ns``) on ``shard``: its elements are
        ``enc(key) + enc(path)``, one per vector (injective: both parts self-delimiting)."""
        return self.base(shard) + b"s:" + ens

    def vset_element(self, ekey: bytes, path: str) -> bytes:
        return ekey + enc(path)

    def schema(self) -> bytes:
        return self.base(0) + b"schema"

    def scan_pattern(self) -> bytes:
        """SCAN MATCH / ACL pattern of every key of this store (glob characters escaped)."""
        return glob_escape((self.prefix + MARKER).encode()) + b"{*"
