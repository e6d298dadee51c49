"""Key schema: the only module that spells redis_saver's key names.

Every key of one thread shares the hash tag ``{<thread tag>}``, so that every per-thread
script touches a single cluster slot::

    <prefix>:{<tag>}:meta       HASH  tid, v (format), pin
    <prefix>:{<tag>}:cp         HASH  e(ns)e(cid)              -> checkpoint record
    <prefix>:{<tag>}:cp_ns      ZSET  e(ns)e(cid)              (lex; latest / before per namespace)
    <prefix>:{<tag>}:cp_id      ZSET  e(cid)e(ns)              (lex; order across namespaces)
    <prefix>:{<tag>}:blob       HASH  e(ns)e(channel)version   -> blob record
    <prefix>:{<tag>}:wr         HASH  e(ns)e(cid)e(task_id)idx -> write record
    <prefix>:{<tag>}:wr_ord     ZSET  e(ns)e(cid)e(task_path)e(task_id)idx e(channel)
                                      (lex = writes_sort_key)
    <prefix>:{<tag>}:runs       ZSET  e(run_id)e(ns)e(cid)     (lex; delete_for_runs)
    <prefix>:{<tag>}:chain      HASH  e(ns)e(cid)              -> chain entry: e(parent id), then
                                      "\\x01"e(channel)"\\x02"e(version) per channel (delta history)

Cross-thread views (``list(None)``, ``delete_for_runs``) use a per-*slot* index that lives
in the same slot as the threads it describes, so per-thread scripts keep it exact
atomically, and cross-thread operations fan out over slots (grouped by cluster node)::

    <prefix>:ix:{<slot tag>}:threads  ZSET  thread id -> expiry (ms since epoch, +inf = none)
    <prefix>:ix:{<slot tag>}:runs     ZSET  lex: "r"e(run)e(thread) and "t"e(thread)e(run)

``e(s)`` is an order-preserving, self-delimiting encoding (``\\x00`` -> ``\\x00\\xff``, then a
``\\x00`` terminator), so concatenated components sort like tuples and decode unambiguously (UTF-8 never holds
\\xff, so a terminator is never followed by it) and never run into each
other. The thread tag escapes ``%``, ``{`` and ``}``, so it is injective and no thread id
can end the tag early or share another thread's tag.

The schema is injective across prefixes too: a prefix holds no brace, so the text before a
key's first ``{`` names its prefix, and a prefix may not end with ``:ix`` (``<p>:ix``'s thread
keys would be ``<p>``'s slot-index keys). The ACL key patterns of one prefix are
``<p>:{*``, ``<p>:ix:{*`` and ``<p>:schema`` (see :meth:`KeySchema.scan_patterns`).
"""

from __future__ import annotations

import binascii
import itertools
from functools import lru_cache
from typing import Any

SLOTS = 16384
FORMAT_VERSION = "6"  # the storage format written (CHANGELOG.md lists them)
# the formats read in place: the previous release's too (lua/_lib_thread.lua OLDER_FORMATS); a write
# to such a thread upgrades it to FORMAT_VERSION
READ_FORMATS = ("3", "4", "5", "6")

THREAD_SUFFIXES = ("meta", "cp", "cp_ns", "cp_id", "blob", "wr", "wr_ord", "runs", "chain")
INDEX_SUFFIXES = ("threads", "runs")
_WR, _WR_ORD = THREAD_SUFFIXES.index("wr"), THREAD_SUFFIXES.index("wr_ord")


def enc(s: str | bytes) -> bytes:
    """Order-preserving, self-delimiting encoding of one key component (FoundationDB-style)."""
    b = s.encode() if isinstance(s, str) else s
    return b.replace(b"\x00", b"\x00\xff") + b"\x00"


def dec_first(b: bytes, pos: int = 0) -> tuple[bytes, int]:
    """Decode the component that starts at ``pos``; return it and the position after it."""
    out = bytearray()
    while True:
        i = b.index(b"\x00", pos)
        out += b[pos:i]
        if i + 1 < len(b) and b[i + 1] == 0xFF:
            out += b"\x00"
            pos = i + 2
        else:
            return bytes(out), i + 1


def dec_str(e: bytes) -> str:
    """The text of one whole encoded component ``e(s)``."""
    if b"\xff" not in e:  # no escape: UTF-8 never holds \xff
        return e[:-1].decode()
    return dec_first(e)[0].decode()


def thread_tag(thread_id: str) -> bytes:
    """Injective hash tag for a thread id: never contains braces, never empty."""
    if thread_id == "":
        return b"%"
    return thread_id.encode().replace(b"%", b"%25").replace(b"{", b"%7B").replace(b"}", b"%7D")


def key_slot(tag: bytes) -> int:
    """Redis Cluster slot of a hash tag (CRC16-XMODEM, as ``CLUSTER KEYSLOT``)."""
    return binascii.crc_hqx(tag, 0) % SLOTS


@lru_cache(maxsize=1)
def _slot_tags() -> tuple[bytes, ...]:
    # Shortest [0-9a-z] strings, in a fixed enumeration order, that hash to each slot.
    # Deterministic, so every process and version derives the same index key names.
    table: list[bytes | None] = [None] * SLOTS
    left = SLOTS
    alphabet = b"0123456789abcdefghijklmnopqrstuvwxyz"
    for length in itertools.count(1):
        for tup in itertools.product(alphabet, repeat=length):
            s = bytes(tup)
            slot = binascii.crc_hqx(s, 0) % SLOTS
            if table[slot] is None:
                table[slot] = s
                left -= 1
                if not left:
                    return tuple(t for t in table if t is not None)
    raise AssertionError("unreachable")


def slot_tag(slot: int) -> bytes:
    return _slot_tags()[slot]


def check_prefix(prefix: Any) -> str:
    """A key prefix of the saver, the store or the cache: a str without braces (a brace would
    change the keys' hash slots and make the text before a key's first ``{`` ambiguous)."""
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
    if "{" in prefix or "}" in prefix:
        raise ValueError(f"prefix must not contain braces (it would change hash slots): {prefix!r}")
    return prefix


def glob_escape(b: bytes) -> bytes:
    """``b`` as a literal in a SCAN MATCH / ACL key pattern (glob characters escaped)."""
    out = bytearray()
    for ch in b:
        if ch in b"*?[]\\":
            out += b"\\"
        out.append(ch)
    return bytes(out)


class KeySchema:
    """Builds every key name for one ``prefix``."""

    def __init__(self, prefix: str = "lg") -> None:
        check_prefix(prefix)
        if prefix.endswith(":ix"):
            # <p>:ix's thread keys <p>:ix:{<tag>}:<suffix> would be <p>'s slot-index keys
            # <p>:ix:{<slot tag>}:<suffix> (thread "257" owns "<p>:ix:{257}:runs")
            raise ValueError(
                f"prefix must not end with ':ix': its keys could be the slot-index keys of prefix "
                f"{prefix[:-3]!r}: {prefix!r}"
            )
        self.prefix = prefix
        self._p = prefix.encode() + b":"
        self._ix: dict[int, list[bytes]] = {}
        self._tk: dict[str, list[bytes]] = {}

    def thread_keys(self, thread_id: str) -> list[bytes]:
        """The 11 KEYS of every per-thread script: 9 thread keys + 2 slot-index keys."""
        keys = self._tk.get(thread_id)
        if keys is None:
            if len(self._tk) >= 4096:  # a small cache: hot threads skip the encoding and CRC
                self._tk.clear()
            keys = self._tk[thread_id] = self._thread_keys(thread_id)
        return keys

    def lean_keys(self, thread_id: str) -> tuple[bytes, bytes]:
        """The 2 KEYS of a "+lean" script (lua/_keys_lean.lua): wr, wr_ord."""
        k = self.thread_keys(thread_id)
        return k[_WR], k[_WR_ORD]

    def _thread_keys(self, thread_id: str) -> list[bytes]:
        tag = thread_tag(thread_id)
        base = self._p + b"{" + tag + b"}:"
        keys = [base + s.encode() for s in THREAD_SUFFIXES]
        keys.extend(self.index_keys(key_slot(tag)))
        return keys

    def index_keys(self, slot: int) -> list[bytes]:
        cached = self._ix.get(slot)
        if cached is not None:
            return cached
        base = self._p + b"ix:{" + slot_tag(slot) + b"}:"
        out = self._ix[slot] = [base + s.encode() for s in INDEX_SUFFIXES]
        return out

    def index_pattern(self) -> bytes:
        """SCAN MATCH pattern of the slot-index keys of this prefix."""
        return self.scan_pattern()[:-1] + b"ix:{*}:threads"

    def slot_of_index_key(self, key: bytes) -> int:
        start = key.index(b"{") + 1
        return key_slot(key[start : key.index(b"}", start)])

    def schema_key(self) -> bytes:
        return self._p + b"schema"

    def scan_patterns(self) -> tuple[bytes, bytes, bytes]:
        """SCAN MATCH patterns (glob chars escaped) for exactly this prefix's keys: the thread
        keys ``<p>:{*``, the slot-index keys ``<p>:ix:{*`` and ``<p>:schema``. A prefix holds
        no brace and never ends with ":ix", so no other prefix's key matches them (nor the ACL
        key patterns of the same shape): ``<p>:*`` would also match a nested prefix such as
        ``<p>:tenant2``."""
        p = self.scan_pattern()[:-1]
        return p + b"{*", p + b"ix:{*", p + b"schema"

    def scan_pattern(self) -> bytes:
        """A SCAN MATCH pattern for every key under this prefix (glob chars escaped); it also
        matches the keys of nested prefixes (``<p>:tenant2``): see :meth:`scan_patterns`."""
        return glob_escape(self._p) + b"*"
