"""Authenticated state: every stored item a reader uses carries a tag bound to where it belongs.

With ``integrity_key`` set, each value, checkpoint record and pending write is stored with a
tag: keyed BLAKE2b (``hashlib.blake2b(key=...)``, a MAC by design: RFC 7693) over what it holds
and where it belongs (prefix, thread, namespace, checkpoint id, channel and version, or task id
and write index). A reader checks the tag before anything is decompressed (values stored as they
are or as one zstd frame) or deserialized (stream values: their bytes are put together from the
stream first, then checked), and raises ``IntegrityError`` on a mismatch or a missing tag.

Where the tag lives: in the serde type part of the record (the serializer's type name never
holds ``\\x1f``), so the Lua scripts, which read no type but a channel value's trailing marks,
see nothing new; a build without this module hands the marked type to its serializer, which
refuses it (never a silent misread).

- a channel value: its tag's 16 bytes before its type, ``VALUE_MARK + tag + type + marks``
  (the type's last bytes stay its marks: a stream record's is read by its last two); an empty
  type, which no serializer gives, gets the earlier form.
- a checkpoint record: two tags (``CP_TAG``) after its type name, ``type + CP_MARK + tags +
  marks``: one over the record, one over the record with an empty parent id, so that prune may
  clear the parent of a checkpoint it keeps (a reader checks one of them; clearing a parent is
  what deleting the ancestors does anyway). Both hash the checkpoint id, then the record's bytes
  after its parent, then the parent (the second an empty one), so a put hashes the record once
  and copies the hash for the second tag. A reader checks a record over its bytes after the type
  as stored; one that prune's Lua packed again (other string headers) over its parts packed
  again as this client packs them.
- a pending write, a store item, a cache entry (and both of the above as builds up to df11781
  wrote them, which still verify in place): ``type + MARK + tag + marks``, the tag as bytes (a
  write's), as base64url text (``TEXT_TAG``: a value's and a store item's, whose types must not
  end in a mark by chance), a checkpoint record's two tags each over the whole record with its
  parent or an empty one. Those builds refuse the newer forms (as untagged).

Cost: a place's head (kind, thread, namespace) is hashed once per key and kept (``Integrity.at``,
``Integrity.place``), each tag copies it and hashes the rest of its place and its bytes; a put
packs its checkpoint record once, its tags in it, and tags its values one after the other; a
reader checks the bytes it read (nothing packed again but the place). A saver remembers what it
signed last at each place it keeps (``At.mine``: a thread's latest checkpoint record per
namespace and each channel's latest value, up to ``MINE_MAX`` bytes each): a read of exactly
those bytes at exactly that place (a stream value: over the very stream its running hash was
taken on) is verified by comparing them, since a MAC of them there is the tag this saver
computed; anything else, or anything another worker wrote, is checked by its MAC.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
from collections.abc import Sequence
from typing import Any

from ..errors import IntegrityError
from .codec import _local, checkpoint_record, packer

MARK = b"\x1fk"
TAG = 16  # bytes of a value's or write's tag
PARENT_TAG = 12  # bytes of a checkpoint's parent tag
CP_TAG = TAG + PARENT_TAG
MIN_KEY = 32
# the tag formats of checkpoint records and channel values since they were made cheaper (the
# earlier ones, ``MARK``'s, are still read): a checkpoint record's two tags hash its bytes once
# (``CP_MARK``), a value's tag is stored as bytes before its type (``VALUE_MARK``)
CP_MARK = b"\x1fj"
VALUE_MARK = b"\x1fb"

KeyArg = Any  # bytes, or a sequence of bytes (the first signs, each verifies)

_eq = hmac.compare_digest  # (one name to look up on the read path)


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


def split_cp(type_: bytes) -> tuple[bytes, bytes | None, bool]:
    """(a checkpoint record's type without its tags, its tags or None, whether they are of
    ``CP_MARK``'s format rather than ``MARK``'s)."""
    i = type_.find(b"\x1f")
    if i < 0 or len(type_) < i + 2 + CP_TAG:
        return type_, None, False
    m = type_[i + 1 : i + 2]
    if m != b"j" and m != b"k":
        return type_, None, False
    return type_[:i] + type_[i + 2 + CP_TAG :], type_[i + 2 : i + 2 + CP_TAG], m == b"j"


def join_cp(type_: bytes, tags: bytes) -> bytes:
    """A checkpoint record's type with its tags (``Integrity.cp_tags``) after its name."""
    i = type_.find(b"\x1f")
    return type_ + CP_MARK + tags if i < 0 else type_[:i] + CP_MARK + tags + type_[i:]


def split_value(type_: bytes) -> tuple[bytes, bytes | None, bool]:
    """(a value's type without its tag, the tag or None, whether it is stored as bytes before
    the type, ``VALUE_MARK``, rather than as base64url text after its name, ``MARK``)."""
    if type_[:2] == VALUE_MARK and len(type_) > 2 + TAG:
        return type_[2 + TAG :], type_[2 : 2 + TAG], True
    i = type_.find(b"\x1f")
    if i < 0 or type_[i + 1 : i + 2] != b"k" or len(type_) < i + 2 + TEXT_TAG:
        return type_, None, False
    return type_[:i] + type_[i + 2 + TEXT_TAG :], type_[i + 2 : i + 2 + TEXT_TAG], False


def join_value(type_: bytes, tag: bytes) -> bytes:
    """A value's type with its tag: the tag's bytes before it (``VALUE_MARK``). The scripts read
    a value's type by its last two bytes, so an empty type (no serializer's) gets the tag as
    text after it instead (``join_text``): the bytes of a tag never end a type."""
    return VALUE_MARK + tag + type_ if type_ else join_text(type_, tag)


def join_type(type_: bytes, tag: bytes) -> bytes:
    """``type_`` (a serializer's type, then its marks) with ``tag`` after the type name."""
    i = type_.find(b"\x1f")
    if i < 0:
        return type_ + MARK + tag
    return type_[:i] + MARK + tag + type_[i:]


class At:
    """The MACs of every key (the signing key's first) fed the first elements ``head`` of the
    places of ``n`` elements: the tags and checks of such places hash that head once (a put's
    values share their kind, thread and namespace). Read-only once built: each tag copies them."""

    __slots__ = ("head", "_hs", "_size", "mine", "signing")

    def __init__(self, bases: Sequence[Any], n: int, head: tuple[Any, ...], size: int) -> None:
        # a place is hashed as a MessagePack array (self-delimiting, so the encoding is injective;
        # str and bytes pack alike): its header (n < 16), then its elements one after the other
        pre = bytes((0x90 | n,)) + checkpoint_record(head)[1:]
        self.head, self._size, self._hs = head, size, []
        # what this saver signed last at these places (``Integrity.signed_cp``, a put's values):
        # a read of exactly those bytes there needs no MAC to know it verifies (see ``mine``)
        self.mine: dict[Any, tuple[Any, ...]] = {}
        for base in bases:
            h = base.copy()
            h.update(pre)
            self._hs.append(h)
        self.signing = self._hs[0]  # the signing key's

    def tag(self, rest: Sequence[Any], data: bytes) -> bytes:
        """The tag of ``data`` stored at ``head + rest``, under the signing key."""
        h = self._hs[0].copy()
        h.update(checkpoint_record(rest)[1:])  # the elements after the head, without an array header
        h.update(data)
        out: bytes = h.digest()
        return out

    def tag_text(self, ch: str, version: Any, type_: bytes, data: bytes) -> bytes:
        """``join_text(type_, self.tag((ch, version, type_), data))`` in one call (a put's values)."""
        h = self._hs[0].copy()
        h.update((getattr(_local, "packer", None) or packer()).pack((ch, version, type_))[1:])
        h.update(data)
        text = binascii.b2a_base64(h.digest(), newline=False).translate(TO_URL)[:TEXT_TAG]  # no padding
        i = type_.find(b"\x1f")
        return type_ + MARK + text if i < 0 else type_[:i] + MARK + text + type_[i:]

    def check_text(self, text: bytes | None, ch: str, version: Any, type_: bytes, data: bytes) -> None:
        """``check`` of a value's tag as stored (``TEXT_TAG`` base64url characters, as
        ``tag_text`` writes them) at ``head + (ch, version, type_)``: its MAC is written out as
        text and compared as text (a read of a value: nothing decoded, one call)."""
        if text is not None and len(text) == TEXT_TAG:
            packed = (getattr(_local, "packer", None) or packer()).pack((ch, version, type_))[1:]
            for base in self._hs:
                h = base.copy()
                h.update(packed)
                h.update(data)
                if hmac.compare_digest(
                    binascii.b2a_base64(h.digest(), newline=False).translate(TO_URL)[:TEXT_TAG], text
                ):
                    return
        raise IntegrityError(_what(text, (*self.head, ch, version, type_)))

    def check_bin(self, tag: bytes | None, ch: str, version: Any, type_: bytes, data: bytes) -> None:
        """``check`` of a value's tag stored as bytes (``VALUE_MARK``: ``split_value`` found
        ``TAG`` of them, compared as they are) at ``head + (ch, version, type_)``: a read of a
        value (a text tag: ``check_text``)."""
        packed = (getattr(_local, "packer", None) or packer()).pack((ch, version, type_))[1:]
        for base in self._hs:
            h = base.copy()
            h.update(packed)
            h.update(data)
            if tag is not None and _eq(h.digest(), tag):
                return
        raise IntegrityError(_what(tag, (*self.head, ch, version, type_)))

    def verifies(self, tag: bytes | None, rest: Sequence[Any], data: bytes) -> bool:
        """Whether ``tag`` is ``data``'s at ``head + rest`` under one of the keys."""
        if tag is None or len(tag) != self._size:
            return False
        packed = (getattr(_local, "packer", None) or packer()).pack(rest)[1:]  # once, whichever key verifies
        for base in self._hs:
            h = base.copy()
            h.update(packed)
            h.update(data)
            if hmac.compare_digest(h.digest(), tag):
                return True
        return False

    def check(self, tag: bytes | None, rest: Sequence[Any], data: bytes) -> None:
        """Raise IntegrityError unless ``tag`` is ``data``'s at ``head + rest`` under one of the keys."""
        if not self.verifies(tag, rest, data):
            raise IntegrityError(_what(tag, (*self.head, *rest)))


class Place:
    """The places of one thread and namespace a put and a get_tuple tag and check, their heads
    hashed: its values' (``v``) and its checkpoint records' (``c``: the first tag, ``c2``: the
    tag with an empty parent). One dict lookup per call finds them (``Integrity.place``)."""

    __slots__ = ("v", "c", "c2")

    def __init__(self, integ: Integrity, thread_id: str, ns: str) -> None:
        self.v = At(integ._bases[TAG], 6, ("v", thread_id, ns), TAG)
        self.c = At(integ._bases[TAG], 5, ("c", thread_id, ns), TAG)
        self.c2 = At(integ._bases[PARENT_TAG], 5, ("c", thread_id, ns), PARENT_TAG)


class Integrity:
    """The tags of one prefix under one key list (the first key signs)."""

    __slots__ = ("keys", "_bases", "_at", "_places")

    def __init__(self, key: KeyArg, prefix: str) -> None:
        self.keys = coerce_keys(key)
        # per key and tag size, the MAC with the key and the prefix taken in, copied for each tag
        pre = checkpoint_record([prefix])
        self._bases = {
            size: [hashlib.blake2b(pre, key=k, digest_size=size) for k in self.keys] for size in (TAG, PARENT_TAG)
        }
        self._at: dict[tuple[Any, ...], At] = {}
        self._places: dict[tuple[str, str], Place] = {}

    def place(self, thread_id: str, ns: str) -> Place:
        """The places of (thread, namespace): kept for the latest ones, like ``at``'s heads."""
        k = (thread_id, ns)
        got = self._places.get(k)
        if got is None:
            got = Place(self, thread_id, ns)
            if len(self._places) >= _HEADS:
                self._places.clear()
            self._places[k] = got
        return got

    def at(self, n: int, head: tuple[Any, ...], size: int = TAG) -> At:
        """The places of ``n`` elements starting with ``head`` (its kind first), their head
        hashed once: kept for the latest heads (a thread's values are tagged and checked at every
        put and read)."""
        k = (n, size, *head)
        got = self._at.get(k)
        if got is None:
            got = At(self._bases[size], n, head, size)
            if len(self._at) >= _HEADS:
                self._at.clear()  # (dict operations are atomic: another thread at most builds one again)
            self._at[k] = got
        return got

    def tag(self, where: Sequence[Any], data: bytes, size: int = TAG) -> bytes:
        """The tag of ``data`` stored at ``where`` (its kind first), under the signing key."""
        return self.at(len(where), (), size).tag(where, data)

    def check(self, tag: bytes | None, where: Sequence[Any], data: bytes, size: int = TAG) -> None:
        """Raise IntegrityError unless ``tag`` is ``data``'s at ``where`` under one of the keys."""
        self.at(len(where), (), size).check(tag, where, data)

    # ---- checkpoint records -----------------------------------------------------------
    def signed_cp(self, thread_id: str, ns: str, cid: str, parts: Sequence[Any]) -> bytes:
        """A checkpoint record (``codec.checkpoint_record``) of ``parts`` (CP order, the type
        without tags) with its two tags in its type (``CP_MARK``): over its parts with its
        parent, then over them with an empty parent (the record once prune cleared its parent).
        The record is packed once: what the tags cover is its checkpoint id, its bytes after the
        parent (its type, then the rest), then its parent, so the two tags hash those bytes once
        (the second is a copy of the first taken before the parent); it gets its tagged type in
        place of its type."""
        pk = getattr(_local, "packer", None) or packer()
        record: bytes = pk.pack(parts)
        pparent, type_ = pk.pack(parts[0]), parts[1]
        a = 1 + len(pparent)  # the record: array header, parent, type, rest
        b = a + len(pk.pack(type_))
        body, pcid = record[a:], pk.pack(cid)
        at = self.place(thread_id, ns).c
        h = at._hs[0].copy()
        h.update(pcid + b"\x99")  # the cid, then the array header of the parts after the parent
        h.update(body)
        h2 = h.copy()
        h.update(pparent)
        h2.update(b"\xa0")  # an empty parent
        tags = h.digest() + h2.digest()[:PARENT_TAG]
        i = type_.find(b"\x1f")
        tagged = type_ + CP_MARK + tags if i < 0 else type_[:i] + CP_MARK + tags + type_[i:]
        out: bytes = record[:a] + pk.pack(tagged) + record[b:]
        if len(out) <= MINE_MAX:
            at.mine[None] = (cid, out)
        else:
            at.mine.pop(None, None)
        return out

    def cp_tags(self, where: Sequence[Any], parts: Sequence[Any], parent: bytes | str) -> bytes:
        """A checkpoint record's two tags (``parts``: CP order, the type without tags; ``where``:
        kind, thread, namespace, checkpoint id), as ``signed_cp`` puts them in its type (joined
        with ``join_cp``)."""
        pk = getattr(_local, "packer", None) or packer()
        h = self.place(where[1], where[2]).c._hs[0].copy()
        h.update(pk.pack(where[3]))
        h.update(_content(parts))
        h2 = h.copy()
        h.update(pk.pack(parent))
        h2.update(b"\xa0")
        out: bytes = h.digest() + h2.digest()[:PARENT_TAG]
        return out

    def check_cp(
        self,
        tags: bytes | None,
        where: Sequence[Any],
        parts: Sequence[Any],
        raw: bytes | None = None,
        joint: bool = False,
    ) -> None:
        """Check a stored checkpoint record's tags (``parts``: as read, the type without tags;
        ``raw``: the record they were read from): one MAC, the first tag's, or with an empty
        parent the second's. It covers the record's bytes after its type as they are stored
        (nothing packed again) when this client packed them; a record prune's Lua packed again
        (other string headers) is checked over its parts packed as this client packs them.
        The record this saver signed last at that place, read back as it signed it, verifies
        without a MAC (``At.mine``: the same bytes at the same place give the same tags).
        ``joint``: the tags are of ``CP_MARK``'s format (``split_cp``), else of ``MARK``'s."""
        if tags is None or len(tags) != CP_TAG:
            raise IntegrityError(_what(None, where))
        parent, cid = parts[0], where[3]
        pl = self.place(where[1], where[2])  # (where[0] is "c")
        at = pl.c
        if raw is not None:
            mine = at.mine.get(None)
            if mine is not None and mine[1] == raw and mine[0] == cid:
                return
        if joint:
            self._check_joint(tags, where, parts)
            return
        if parent:
            tag, rest = tags[:TAG], (cid, parent)
        else:  # the ancestors were pruned (or deleted): see the module's doc
            at, tag, rest = pl.c2, tags[TAG:], (cid, b"")
        end = -1 if raw is None else _after_type(raw)
        if raw is not None and end > 0:
            # the bytes as stored, hashed in place: its place, the array header, its type, the rest
            pk = getattr(_local, "packer", None) or packer()
            pre = pk.pack(rest)[1:] + b"\x99" + pk.pack(parts[1])
            tail = raw[end:]
            for base in at._hs:
                h = base.copy()
                h.update(pre)
                h.update(tail)
                if hmac.compare_digest(h.digest(), tag):
                    return
        at.check(tag, rest, _content(parts))

    def check_head(self, pl: Place, cid: str, raw: bytes, parts: list[Any]) -> None:
        """``check_cp`` of a checkpoint record as read (``parts``: ``codec.checkpoint_head`` of
        ``raw``, its type still tagged), its type replaced by the type without its tags: a get_tuple's
        and a list's path. A record of ``CP_MARK``'s format as this client packed it (every
        record but one prune's Lua packed again) is hashed where it lies, its headers read off
        the stored bytes (the MAC covers exactly those bytes, so any other record fails it, and
        is then checked by ``check_cp``, which also raises)."""
        typ, parent = parts[1], parts[0]
        try:
            i = typ.find(b"\x1f")
            e = i + _CP_SPAN
            joint = i >= 0 and len(typ) >= e and typ[i + 1] == 0x6A and raw[0] == 0x9A  # (0x6A: CP_MARK's "j")
        except AttributeError:  # no string where the type belongs: no record this client packed
            raise IntegrityError(_what(None, (*pl.c.head, cid))) from None
        if not joint:
            t, tags, joint = split_cp(typ)
            parts[1] = t
            self.check_cp(tags, (*pl.c.head, cid), parts, raw, joint)
            return
        parts[1] = untagged = typ[:i] + typ[e:]
        at = pl.c
        if at.mine:
            mine = at.mine.get(None)
            if mine is not None and mine[1] == raw and mine[0] == cid:
                return
        # what the tags cover: the cid, the header of the parts after the parent, the untagged
        # type, the rest as stored, then the parent as stored (or an empty one); the stored
        # record is its array header, its parent, its tagged type, the rest, each string's
        # header as stored (fixstr, str8, raw16, raw32: _HSIZE)
        try:
            p_end = 1 + _HSIZE[raw[1]] + len(parent)
            end = p_end + _HSIZE[raw[p_end]] + len(typ)
            c = cid.encode()
            msg = b"".join(
                (_HDRS[len(c)], c, b"\x99", _HDRS[len(untagged)], untagged, raw[end:],
                 raw[1:p_end] if parent else b"\xa0")
            )
        except (TypeError, IndexError):  # a parent that is no string, headers past the end, long strings
            msg = b""
        if msg:
            tag, n = (typ[i + 2 : i + 2 + TAG], TAG) if parent else (typ[i + 2 + TAG : e], PARENT_TAG)
            for base in at._hs:
                h = base.copy()
                h.update(msg)
                if _eq(h.digest()[:n], tag):
                    return
        self._check_joint(typ[i + 2 : e], (*pl.c.head, cid), parts)

    def _check_joint(self, tags: bytes, where: Sequence[Any], parts: Sequence[Any]) -> None:
        """``check_cp`` of tags of ``CP_MARK``'s format over the record's parts packed again as
        this client packs them: one MAC over the checkpoint id, the parts after the parent, then
        the parent (an empty one: the second tag's). The same bytes, whoever packed the record
        (a record prune's Lua packed again when it cleared its parent has other headers); a
        record as this client packed it is checked where it lies first (``check_head``)."""
        parent, cid = parts[0], where[3]
        at = self.place(where[1], where[2]).c
        pk = getattr(_local, "packer", None) or packer()
        if parent:
            tag, n, last = tags[:TAG], TAG, pk.pack(parent)
        else:
            tag, n, last = tags[TAG:], PARENT_TAG, b"\xa0"
        pre, tail = pk.pack(cid), _content(parts)
        for base in at._hs:
            h = base.copy()
            h.update(pre)
            h.update(tail)
            h.update(last)
            if _eq(h.digest()[:n], tag):
                return
        raise IntegrityError(_what(tag, (*where, parent)))


# a string's header as this client's packer writes it (msgpack's raw family, use_bin_type=False:
# fixstr, then raw16, raw32), for lengths below 256; and each header's size by its first byte
_HDRS = [bytes((0xA0 | n,)) if n < 32 else b"\xda\x00" + bytes((n,)) for n in range(256)]
_HDR_SIZE = {0xD9: 2, 0xDA: 3, 0xDB: 5}
# a header's size by its first byte (any other first byte: no string, past any record's end)
_HSIZE = [1 if 0xA0 <= b <= 0xBF else _HDR_SIZE.get(b, 1 << 40) for b in range(256)]
_CP_SPAN = 2 + CP_TAG  # a checkpoint record's mark and tags


def _after_type(raw: bytes) -> int:
    """Where a format-6 checkpoint record's third part starts (after its parent and its type:
    two strings of the raw family, whatever their headers), or -1."""
    if raw[:1] != b"\x9a":
        return -1
    n = len(raw)
    b = raw[1] if n > 2 else 0
    # a parent id (a uuid's 36 characters: str8; none: fixstr), then a tagged type (str8) of this
    # client's packing (the common case)
    i = 3 + raw[2] if b == 0xD9 else 2 + (b & 31) if 0xA0 <= b <= 0xBF else 0
    if 0 < i < n - 1 and raw[i] == 0xD9:
        i += 2 + raw[i + 1]
        return i if i <= n else -1
    i = 1
    for _ in range(2):
        b = raw[i] if i < len(raw) else 0
        if 0xA0 <= b <= 0xBF:
            i += 1 + (b & 31)
        elif b == 0xD9 and i + 1 < len(raw):
            i += 2 + raw[i + 1]
        elif b == 0xDA:
            i += 3 + int.from_bytes(raw[i + 1 : i + 3], "big")
        elif b == 0xDB:
            i += 5 + int.from_bytes(raw[i + 1 : i + 5], "big")
        else:
            return -1
    return i if i <= len(raw) else -1


# a record or value this saver signed is remembered for ``check_cp`` / a read's value check when
# it is at most this long (the common case: a few hundred bytes; a longer one's MAC costs more in
# its bytes than in the calls around it, and the memo holds at most this much per place)
MINE_MAX = 1024

_HEADS = 256  # heads kept (``Integrity.at``: ~0.4 KB a key each): per thread and namespace, a few kinds each


# a tag in base64url without padding: in a channel value's type (the scripts take a type ending
# in "\x1fs" for a stream record's, which a binary tag could end with) and a store item's (its
# record is text up to its bytes)
TEXT_TAG = 22


# base64url is base64 with "-_" for "+/": binascii straight, as base64.urlsafe_b64* do it
# (the same lenient decoding) without their layers of calls
TO_URL = bytes.maketrans(b"+/", b"-_")
_FROM_URL = bytes.maketrans(b"-_", b"+/")


def join_text(type_: bytes, tag: bytes) -> bytes:
    """``join_type`` with the tag as base64url (no ``\x1f``, space, newline or NUL)."""
    return join_type(type_, binascii.b2a_base64(tag, newline=False).translate(TO_URL).rstrip(b"="))


def split_text(type_: bytes) -> tuple[bytes, bytes | None]:
    """``split_type`` of a type holding a ``join_text`` tag (every read of a value: inlined)."""
    i = type_.find(b"\x1f")
    if i < 0 or type_[i + 1 : i + 2] != b"k" or len(type_) < i + 2 + TEXT_TAG:
        return type_, None
    t = type_[:i] + type_[i + 2 + TEXT_TAG :]
    try:
        return t, binascii.a2b_base64(type_[i + 2 : i + 2 + TEXT_TAG].translate(_FROM_URL) + b"==")
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
