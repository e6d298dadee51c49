"""Key names of :class:`~redis_saver.cache.RedisCache`: the only module that spells them.

All keys of one cache namespace share the hash tag ``{<namespace tag>}``, so a namespace's
entries and its index live in one cluster slot::

    <prefix>:cache{<ns tag>}i          ZSET    entry key -> expiry (ms since epoch, server clock;
                                               +inf = none): what clear() deletes
    <prefix>:cache{<ns tag>}c          ZSET    the index as a clear() took it (its snapshot),
                                               while that clear runs
    <prefix>:cache{<ns tag>}e<key>     STRING  e(serde type) + the value's bytes (type marked
                                               "\\x1fz" when they are one zstd frame)

``<ns tag>`` is the namespace's components, each ``e(c)`` (``keys.enc``: self-delimiting), with
``%``, ``{`` and ``}`` escaped (``%25``, ``%7B``, ``%7D``; the empty namespace is ``%``), so it
is injective, never empty (an empty tag would hash the whole key) and never ends early. After
the tag comes one byte naming the kind (``i`` index, ``c`` snapshot, ``e`` entry) and, for an entry, the key's
bytes as they are: every (prefix, namespace, key) has its own key name.

Across kinds (docs/architecture.md, "Keys are injective"): a prefix holds no brace, so the text
before a key's first ``{`` is ``<prefix>`` followed by its kind's marker, ``:`` for the saver
(``<p>:{`` and ``<p>:ix:{``; its ``<p>:schema`` holds no brace), ``:cache`` for the cache,
``:store`` for the store; no marker ends another, so that text names exactly one (kind,
prefix). The ACL key pattern of one cache prefix is ``<prefix>:cache{*``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..keys import check_prefix, enc, glob_escape, key_slot

MARKER = b":cache"  # what follows the prefix, before the first brace, in every cache key


def namespace_tag(namespace: Sequence[str]) -> bytes:
    """The injective hash tag of a namespace (a tuple of arbitrary strings)."""
    raw = b"".join(enc(c) for c in namespace)
    if not raw:
        return b"%"
    return raw.replace(b"%", b"%25").replace(b"{", b"%7B").replace(b"}", b"%7D")


class CacheKeys:
    """Builds every key name of one cache ``prefix``."""

    def __init__(self, prefix: str = "lg") -> None:
        check_prefix(prefix)
        self.prefix = prefix
        self._p = prefix.encode() + MARKER + b"{"

    def base(self, namespace: Sequence[str]) -> bytes:
        """``<prefix>:cache{<ns tag>}``: what every key of the namespace starts with."""
        return self._p + namespace_tag(namespace) + b"}"

    def index(self, namespace: Sequence[str]) -> bytes:
        return self.base(namespace) + b"i"

    def entry(self, namespace: Sequence[str], key: str) -> bytes:
        return self.base(namespace) + b"e" + key.encode()

    def slot(self, namespace: Sequence[str]) -> int:
        """The cluster slot of every key of the namespace."""
        return key_slot(namespace_tag(namespace))

    def acl_pattern(self) -> bytes:
        """The key pattern (glob characters escaped) of exactly this prefix's cache keys, for
        ACL rules (``~<pattern>``) and SCAN."""
        return glob_escape(self._p) + b"*"

    def snapshot(self, namespace: Sequence[str]) -> bytes:
        return self.base(namespace) + b"c"

    def index_pattern(self) -> bytes:
        """A SCAN MATCH pattern of this prefix's index and snapshot keys (entry keys whose key
        ends with ``}i`` or ``}c`` match too: :meth:`namespace_base` tells them apart)."""
        return glob_escape(self._p) + b"*}[ic]"

    def namespace_base(self, key: bytes) -> bytes | None:
        """The namespace's :meth:`base` when ``key`` is an index or snapshot key of this prefix
        (the tag ends at the first ``}``), else None."""
        if not key.startswith(self._p):
            return None
        end = key.find(b"}", len(self._p))
        if end <= len(self._p) or key[end + 1 :] not in (b"i", b"c"):
            return None
        return key[: end + 1]
