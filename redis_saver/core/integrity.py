"""Authenticated state: every stored item a reader uses carries a tag bound to where it belongs.

With ``integrity_key`` set, each value, checkpoint record and pending write is stored with a
tag: keyed BLAKE2b (``hashlib.blake2b(key=...)``, a MAC by design: RFC 7693) over what it holds
and where it belongs (prefix, thread, namespace, checkpoint id, channel and version, or task id
and write index). A reader checks the tag before anything is decompressed (values stored as they
are or as one zstd frame) or deserialized (stream values: their bytes are put together from the
stream first, then checked), and raises ``IntegrityError`` on a mismatch or a missing tag.

Where the tag lives: in the serde type part of the record, right after the serializer's type
name (which never holds ``\\x1f``) and before the encoding marks: ``type + MARK + tag + marks``.
The Lua scripts read no type but a channel value's trailing marks, so they see nothing new (a
channel value's tag is base64url text, ``TEXT_TAG``, so its type never ends in a mark by chance;
a write's and a checkpoint's are bytes); a build without this module hands the marked type to
its serializer, which refuses it (never a silent misread).
A checkpoint record's type holds two tags (``CP_TAG``): one over the record, one over the record
with an empty parent id, so that prune may clear the parent of a checkpoint it keeps (a reader
checks one of them; clearing a parent is what deleting the ancestors does anyway). A record is
read back from its parts, packed again as this client packs it, since prune's Lua packs the
records it changes with other string headers.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
from collections.abc import Sequence
from typing import Any

from ..errors import IntegrityError
from .codec import checkpoint_record

MARK = b"\x1fk"
TAG = 16  # bytes of a value's or write's tag
PARENT_TAG = 12  # bytes of a checkpoint's parent tag
CP_TAG = TAG + PARENT_TAG
MIN_KEY = 32

KeyArg = Any  # bytes, or a sequence of bytes (the first signs, each verifies)


def coerce_keys(key: KeyArg) -> tuple[bytes, ...]:
    """The keys of an ``integrity_key`` option: one key of at least 32 bytes, or a non-empty
    sequence of them (the first signs new data, every one verifies)."""
    keys = (key,) if isinstance(key, (bytes, bytearray, memoryview)) else key
    if isinstance(keys, str) or not isinstance(keys, Sequence) or not keys:
        raise TypeError("integrity_key must be bytes (>= 32) or a non-empty sequence of such bytes")
    out: list[bytes] = []
    for k in keys:
        if not isinstance(k, (bytes, bytearray, memoryview)):
            raise TypeError(f"integrity_key: each key must be bytes, got {type(k).__name__}")
        if len(k) < MIN_KEY:
            raise ValueError(f"integrity_key: a key must hold at least {MIN_KEY} bytes, got {len(k)}")
        if len(k) > 64:
            # BLAKE2b takes keys up to 64 bytes: a longer one is hashed to 64 first
            k = hashlib.blake2b(bytes(k)).digest()
        out.append(bytes(k))
    return tuple(out)


def split_type(type_: bytes, n: int = TAG) -> tuple[bytes, bytes | None]:
    """(the type without its tag, the tag or None) of a stored type part."""
    i = type_.find(b"\x1f")
    if i < 0 or type_[i + 1 : i + 2] != b"k" or len(type_) < i + 2 + n:
        return type_, None
    return type_[:i] + type_[i + 2 + n :], type_[i + 2 : i + 2 + n]


def join_type(type_: bytes, tag: bytes) -> bytes:
    """``type_`` (a serializer's type, then its marks) with ``tag`` after the type name."""
    i = type_.find(b"\x1f")
    if i < 0:
        return type_ + MARK + tag
    return type_[:i] + MARK + tag + type_[i:]


class Integrity:
    """The tags of one prefix under one key list (the first key signs)."""

    __slots__ = ("keys", "_bases", "_sign")

    def __init__(self, key: KeyArg, prefix: str) -> None:
        self.keys = coerce_keys(key)
        # per key and tag size, the MAC with the key and the prefix taken in, copied for each tag
        pre = checkpoint_record([prefix])
        self._bases = {
            size: [hashlib.blake2b(pre, key=k, digest_size=size) for k in self.keys] for size in (TAG, PARENT_TAG)
        }
        self._sign = self._bases[TAG][0]

    def tag(self, where: Sequence[Any], data: bytes, size: int = TAG) -> bytes:
        """The tag of ``data`` stored at ``where`` (its kind first), under the signing key."""
        h = (self._sign if size == TAG else self._bases[size][0]).copy()
        # where: a MessagePack array (self-delimiting, so the encoding is injective; str and
        # bytes pack alike), then the data
        h.update(checkpoint_record(where))
        h.update(data)
        out: bytes = h.digest()
        return out

    def check(self, tag: bytes | None, where: Sequence[Any], data: bytes, size: int = TAG) -> None:
        """Raise IntegrityError unless ``tag`` is ``data``'s at ``where`` under one of the keys."""
        if tag is not None and len(tag) == size:
            packed = checkpoint_record(where)  # once, whichever key verifies
            for base in self._bases[size]:
                h = base.copy()
                h.update(packed)
                h.update(data)
                if hmac.compare_digest(h.digest(), tag):
                    return
        raise IntegrityError(_what(tag, where))

    # ---- checkpoint records -----------------------------------------------------------
    def cp_tags(self, where: Sequence[Any], parts: Sequence[Any], parent: bytes | str) -> bytes:
        """A checkpoint record's two tags (``parts``: CP order, the type without tags): over its
        parts with its parent, then over them with an empty parent (the record once prune
        cleared its parent)."""
        content = _content(parts)
        p = parent if isinstance(parent, bytes) else parent.encode()
        return self.tag((*where, p), content) + self.tag((*where, b""), content, PARENT_TAG)

    def check_cp(self, tags: bytes | None, where: Sequence[Any], parts: Sequence[Any]) -> None:
        """Check a stored checkpoint record's tags (``parts``: as read, the type without tags):
        one MAC, the first tag's, or with an empty parent the second's."""
        if tags is None or len(tags) != CP_TAG:
            raise IntegrityError(_what(None, where))
        parent = parts[0]
        if parent:
            self.check(tags[:TAG], (*where, parent), _content(parts))
        else:  # the ancestors were pruned (or deleted): see the module's doc
            self.check(tags[TAG:], (*where, b""), _content(parts), PARENT_TAG)


# a tag in base64url without padding: in a channel value's type (the scripts take a type ending
# in "\x1fs" for a stream record's, which a binary tag could end with) and a store item's (its
# record is text up to its bytes)
TEXT_TAG = 22


# base64url is base64 with "-_" for "+/": binascii straight, as base64.urlsafe_b64* do it
# (the same lenient decoding) without their layers of calls
_TO_URL = bytes.maketrans(b"+/", b"-_")
_FROM_URL = bytes.maketrans(b"-_", b"+/")


def join_text(type_: bytes, tag: bytes) -> bytes:
    """``join_type`` with the tag as base64url (no ``\x1f``, space, newline or NUL)."""
    return join_type(type_, binascii.b2a_base64(tag, newline=False).translate(_TO_URL).rstrip(b"="))


def split_text(type_: bytes) -> tuple[bytes, bytes | None]:
    """``split_type`` of a type holding a ``join_text`` tag."""
    t, tag = split_type(type_, TEXT_TAG)
    if tag is None:
        return t, None
    try:
        return t, binascii.a2b_base64(tag.translate(_FROM_URL) + b"==")
    except ValueError:  # binascii.Error: not base64, so no tag
        return t, None


def _content(parts: Sequence[Any]) -> bytes:
    """What a checkpoint's main tag covers: its parts but the parent, packed as MessagePack of the
    raw family (str and bytes pack alike, so what was written and what is read give one form,
    whichever encoder last wrote the record)."""
    return checkpoint_record(list(parts[1:]))


_KINDS = {"c": "checkpoint", "v": "value", "w": "pending write", "s": "store item", "e": "cache entry"}


def _what(tag: bytes | None, where: Sequence[Any]) -> str:
    kind = _KINDS.get(str(where[0]), str(where[0])) if where else "data"
    shown = ", ".join(repr(w[:80] if isinstance(w, (str, bytes)) else w) for w in where[1:])
    if tag is None:
        return f"stored {kind} ({shown}) carries no integrity tag: written without the key, or planted"
    return (
        f"stored {kind} ({shown}) fails its integrity check: tampered, moved from elsewhere, "
        "or signed with another key"
    )
