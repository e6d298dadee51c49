"""The steps a plan yields (Call, Out, IndexSlots), the helpers every plan uses, and PlanBase."""

from __future__ import annotations

import uuid
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, Union, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ...errors import (
    DamagedThreadError,
    IntegrityError,
    MalformedReplyError,
    ParentCycleError,
    ThreadEvictedError,
)
from ...keys import FORMAT_VERSION, KeySchema, enc
from .. import codec
from .. import values as values_
from ..integrity import TAG, TEXT_TAG, VALUE_MARK, At, Integrity, Place, split_cp, split_type
from ..ttl import TTLConfig


@dataclass(slots=True)  # not frozen: a frozen dataclass costs ~0.3 us more per call to build
class Call:
    script: str
    keys: Sequence[bytes]
    args: Sequence[bytes | str | int]
    wait: tuple[int, int] | None = None  # (replicas, timeout ms): WAIT after the script


@dataclass(frozen=True)
class IndexSlots:
    """Ask the driver which slots may hold a cross-thread index key (reply: list of slots)."""


@dataclass(frozen=True)
class LoadScripts:
    """Load the function library, or where the engine runs EVALSHA the scripts named
    ``prefix``* (SCRIPT LOAD): a store's setup()."""

    prefix: str


@dataclass(frozen=True)
class Out:
    items: list[CheckpointTuple]


T = TypeVar("T")
# a channel value to store: (channel, e(channel), version, (serde type, bytes) or None = no value)
Serialized = tuple[str, bytes, bytes, Union[tuple[bytes, bytes], None]]  # noqa: UP007
Step = Union[Call, list[Call], Out, IndexSlots, LoadScripts]  # noqa: UP007 (a runtime alias; py3.10 needs Union)
# a plan yields steps, is sent each step's reply, and returns the operation's result (T)
Plan = Generator[Step, Any, T]


def _thread_id(configurable: dict[str, Any], what: str = "config") -> str:
    if "thread_id" not in configurable or configurable["thread_id"] is None:
        raise ValueError(f"{what}['configurable']['thread_id'] is required")
    return normalize_thread_id(configurable["thread_id"])


def normalize_thread_id(tid: Any) -> str:
    if isinstance(tid, str):
        return tid
    if isinstance(tid, (int, uuid.UUID)) and not isinstance(tid, bool):
        return str(tid)
    raise TypeError(f"thread_id must be a str (or int / UUID), got {type(tid).__name__}")


def _str(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{what} must be a str, got {type(v).__name__}")
    return v


def _chain_entry(parent: str, versions: dict[str, Any]) -> bytes:
    """A checkpoint's chain entry: e(parent), then \\x01 e(channel) \\x02 e(version) per channel
    (the bytes ``chain_entry()`` in lua/_lib_checkpoints.lua builds from a record)."""
    s = parent + "\0" + "".join([f"\x01{ch}\0\x02{ver}\0" for ch, ver in versions.items()])
    if s.count("\0") == 1 + 2 * len(versions):
        return s.encode()  # no name or version holds a NUL: every e() is the text and a NUL
    out = [enc(parent)]
    for ch, ver in versions.items():
        out += [b"\x01", enc(ch), b"\x02", enc(str(ver))]
    return b"".join(out)


def _str_keys(d: Mapping[Any, Any], what: str) -> None:
    for k in d:
        if not isinstance(k, str):
            raise TypeError(f"{what} keys must be str, got {type(k).__name__} {k!r}")


def _walked(seen: set[bytes], ids: Sequence[bytes], nxt: bytes, thread_id: str, name: Any) -> None:
    """Add one call's walked ids to ``seen``. An id met again, or a next step already walked,
    is a parent cycle longer than one call's walk, which the script cannot see."""
    for i in ids:
        if i in seen:
            raise ParentCycleError(f"thread {thread_id!r}: the parent chain returns to {name(i)}")
        seen.add(i)
    if nxt in seen:
        raise ParentCycleError(f"thread {thread_id!r}: the parent chain returns to {name(nxt)}")


def _sequence(v: Any, what: str, of: str) -> Any:
    """``v`` when it is a collection to iterate (not a bare str / bytes, a dict or None)."""
    if isinstance(v, (str, bytes, bytearray)):
        raise TypeError(f"{what} must be a sequence of {of}, not a single {type(v).__name__}")
    if v is None or isinstance(v, dict) or not hasattr(v, "__iter__"):
        raise TypeError(f"{what} must be a sequence of {of}, got {type(v).__name__}")
    return v


def _configurable(config: RunnableConfig | None, what: str = "config") -> dict[str, Any]:
    if not isinstance(config, dict):
        raise TypeError(f"{what} must be a RunnableConfig dict, got {type(config).__name__}")
    c = config.get("configurable")
    if not isinstance(c, dict):
        raise ValueError(f"{what}['configurable'] is required")
    return c


def _idx8(idx: int) -> bytes:
    return b"%08x" % (idx + 2**31)



@dataclass(frozen=True, eq=False)
class PlanBase:
    """The frozen context of a saver's plans, and what every plan uses (the call header, loading
    stored values, building a checkpoint tuple); the other plan classes of this package derive
    from it. A plan is a method of this context: a function of it and the call's arguments,
    reading nothing else, so a test builds one without a client (``PlanBase(serde, keys)``).

    ``streams``, the cache of the streams last read or written (``values.StreamCache``), is the
    one mutable object it holds: reads and puts remember a channel's stream there, so the next
    put of that channel sends only its new bytes."""

    serde: SerializerProtocol
    keys: KeySchema
    ttl: TTLConfig = field(default_factory=TTLConfig)
    history: str = "full"
    fencing: bool = False
    compress: bool = True
    streams: values_.StreamCache = field(default_factory=lambda: values_.StreamCache(64 << 20))
    wait: tuple[int, int] | None = None  # (replicas, timeout ms): WAIT after each write
    integrity: Integrity | None = None  # integrity_key: tags written and checked

    # ---- helpers -------------------------------------------------------------------
    def _header(self, thread_id: str, refresh: bool = False) -> list[bytes | str | int]:
        return [FORMAT_VERSION, thread_id, self.ttl.ttl_ms, "1" if refresh else "0"]

    def _read_script(self, name: str) -> tuple[str, bool]:
        refresh = self.ttl.refresh_on_read and self.ttl.ttl_ms > 0
        return (name + "+rw" if refresh else name), refresh

    @staticmethod
    def _forgetting(call: Call) -> Call:
        """A read call sent again after it raised RS_DAMAGED (a key of its thread was lost):
        the forgetting variant (writable, ``allow-oom``) with ARGV[4] = "f", which checks the
        thread again and forgets it whole if it is still damaged, answering as if it did not
        exist ("Lost keys" in lua/_lib_thread.lua)."""
        name = call.script.partition("+")[0] + "+forget"
        return Call(name, call.keys, [*call.args[:3], "f", *call.args[4:]])

    def _read(self, call: Call) -> Plan[Any]:
        """One read call; sent again as its forgetting variant when the thread is damaged."""
        try:
            return (yield call)
        except DamagedThreadError:
            return (yield self._forgetting(call))

    @staticmethod
    def _evicted(thread_id: str, what: str) -> ThreadEvictedError:
        return ThreadEvictedError(
            f"thread {thread_id[:200]!r}: {what}; nothing was stored and the thread now reads as absent "
            "(evicted under memory pressure, expired or deleted while a run used it): start the "
            "session again",
            thread_id,
        )

    def _load(self, type_: bytes, data: bytes) -> Any:
        return self.serde.loads_typed(self._typed(type_, data))

    @staticmethod
    def _typed(type_: bytes, data: bytes) -> tuple[str, bytes]:
        """What serde loads a stored value from: its type, and its bytes decompressed."""
        if type_.endswith(values_.ZSTD_MARK):
            type_, data = type_[:-2], values_.decompress(data)
        return type_.decode(), data

    def _blob_typed(
        self,
        blob: bytes,
        streams: dict[bytes, values_.Stream],
        cache_key: tuple[str, str, str] | None = None,
        where: tuple[At, str, str] | None = None,
    ) -> tuple[str, bytes]:
        """What serde loads a channel value from, from its blob record; a stream record's value
        from the reply's streams (``cache_key``: remember its stream for the next put of that
        channel). With a key, its tag is checked against ``where`` (the place's head hashed:
        kind, thread, namespace; then channel, version) first: a stream value's once its bytes
        are put together, any other's before it is decompressed."""
        type_, data = codec.unpack_blob(blob)
        # split_value, inline: a tag as bytes before the type, or (an earlier format) as text
        # after its name, then checked as the text it is stored as
        tag, binary = None, type_[:2] == VALUE_MARK and len(type_) > 2 + TAG
        if binary:
            tag, type_ = type_[2 : 2 + TAG], type_[2 + TAG :]
        else:
            i = type_.find(b"\x1f")
            if i >= 0 and type_[i + 1 : i + 2] == b"k" and len(type_) >= i + 2 + TEXT_TAG:
                tag, type_ = type_[i + 2 : i + 2 + TEXT_TAG], type_[:i] + type_[i + 2 + TEXT_TAG :]
        integ = self.integrity
        stream = type_.endswith(values_.STREAM_MARK)
        mine: Any = None
        if integ is not None:
            if where is None:
                raise IntegrityError("a stored value was read with no place to check it against")
            at, ch, ver = where
            # the record this saver signed last at this place, read back as it signed it, needs
            # no MAC (its tag is the one this saver computed for these bytes there: At.mine)
            if at.mine:
                mine = at.mine.get(ch)
                if mine is not None and (mine[1] != blob or mine[0] != ver.encode()):
                    mine = None
            if not stream and mine is None:
                (at.check_bin if binary else at.check_text)(tag, ch, ver, type_, data)
        if stream:
            payload = data
            data, known = values_.decode_stream_value(payload, streams)
            # (a stream value as signed: its stream is the one whose running hash it was signed
            # over, held by this saver since, so the same bytes)
            if integ is not None and (mine is None or mine[2] is None or mine[2] is not known.stream.hashed):
                # its ops as stored and a hash of the stream bytes they read
                covered, st = values_.stream_covered(known.ops, known.stream, None, payload)
                (at.check_bin if binary else at.check_text)(tag, ch, ver, type_, covered)
                if st is not known.stream:  # its running hash, for the reply's other values and the cache
                    streams[st.sid] = st
                    known = values_.Known(st, known.ops, known.value)
            type_ = type_[:-2]
            if cache_key is not None:
                self.streams.put(cache_key, known)
        return self._typed(type_, data)

    def _write(self, thread_id: str, ns: str, cid: str, w: bytes) -> tuple[bytes, bytes, bytes, bytes, bytes]:
        """(task id, channel, type, bytes, write index) of a stored write of checkpoint (ns,
        cid), its tag checked with a key (and left out of the type)."""
        tid, ch, ty, data, path, idx = codec.unpack(w)
        ty, tag = split_type(ty)
        if self.integrity is not None:
            self.integrity.at(9, ("w", thread_id, ns, cid)).check(tag, (tid, idx, ch, path, ty), data)
        return tid, ch, ty, data, idx

    def _checked_head(self, cid: str, raw: bytes, pl: Place | None) -> list[Any]:
        """A checkpoint record's parts (``codec.checkpoint_head``), its type without its tags,
        which are checked with a key (``pl``: the place of (thread, namespace) with a key, None
        without)."""
        parts = codec.checkpoint_head(raw)  # (a new list)
        if pl is not None and self.integrity is not None:
            self.integrity.check_head(pl, cid, raw, parts)
        else:
            parts[1] = split_cp(parts[1])[0]
        return parts

    def _checked_items(
        self,
        thread_id: str,
        ns: str,
        cid: str,
        pl: Place,
        vers: dict[str, Any],
        values_at: list[Any],
        writes: list[bytes],
        blobs: _ReplyBlobs,
        remember: bool,
    ) -> tuple[list[tuple[str, int, Any, Any]], list[tuple[bytes, bytes, bytes, bytes]]]:
        """With a key: a checkpoint's values (channel, blob, place, checked (type, bytes)) and
        pending writes (task id, channel, type, bytes), each checked against its
        place (``blobs.typed``, ``_write``), nothing loaded."""
        vat = pl.v  # the values' place (kind, thread, namespace)
        chans = []
        for i in range(0, len(values_at), 2):  # {channel, k, ...}: the channels that hold a value
            chan = values_at[i].decode()
            if chan not in vers:
                raise IntegrityError(f"checkpoint {cid!r}: a value of channel {chan!r}, which it does not name")
            where = (vat, chan, vers[chan])
            k, cache_key = values_at[i + 1], (thread_id, ns, chan) if remember else None
            chans.append((chan, k, where, blobs.typed(self, k, cache_key, where)))
        stored = []
        seen: set[tuple[bytes, bytes]] = set()
        for w in writes:
            if w:
                tid, ch, ty, data, idx = self._write(thread_id, ns, cid, w)
                # each (task id, index) is stored once: a second one is a copy planted beside it
                if (tid, idx) in seen:
                    raise IntegrityError(f"checkpoint {cid!r}: write {idx!r} of task {tid!r} stored twice")
                seen.add((tid, idx))
                stored.append((tid, ch, ty, data))
        return chans, stored

    def _tuple(
        self,
        thread_id: str,
        ns: str,
        cid: str,
        raw: bytes,
        values_at: list[Any],
        writes: list[bytes],
        blobs: _ReplyBlobs,
        remember: bool = False,
    ) -> CheckpointTuple:
        integ = self.integrity
        # with a key: the places of (thread, namespace), their heads hashed once (Integrity.place)
        pl = integ.place(thread_id, ns) if integ is not None else None
        parent_b, cp_type, cp_bytes, md_type, md_bytes, vrec, flt = self._checked_head(cid, raw, pl)[:7]
        if cp_type.endswith(values_.ZSTD_MARK):
            cp_type, cp_bytes = cp_type[:-2], values_.decompress(cp_bytes)
        vers = checked = None
        if pl is not None:
            # with a key, every value and write is checked before anything of the checkpoint is
            # loaded: a reply with one that fails loads nothing
            vers = codec.str_pairs(vrec)
            checked = self._checked_items(thread_id, ns, cid, pl, vers, values_at, writes, blobs, remember)
        if cp_type.endswith(values_.VERSIONS_MARK_B):
            checkpoint: Checkpoint = self._load(cp_type[:-2], cp_bytes)
            checkpoint["channel_versions"] = codec.str_pairs(vrec) if vers is None else vers
            checkpoint["id"] = cid
        else:
            checkpoint = self._load(cp_type, cp_bytes)
        values: dict[str, Any] = {}
        pending = []
        if checked is None:
            for i in range(0, len(values_at), 2):  # {channel, k, ...}: the channels that hold a value
                chan = values_at[i].decode()
                values[chan] = blobs.value(self, values_at[i + 1], (thread_id, ns, chan) if remember else None)
            for w in writes:
                if w:
                    tid, ch, ty, data, _ = self._write(thread_id, ns, cid, w)
                    pending.append((tid.decode(), ch.decode(), self._load(ty, data)))
        else:
            for chan, k, where, got in checked[0]:
                values[chan] = blobs.value(self, k, None, where, got)
            for tid, ch, ty, data in checked[1]:
                pending.append((tid.decode(), ch.decode(), self._load(ty, data)))
        checkpoint["channel_values"] = values  # a fresh dict from serde: no copy needed
        parent = parent_b.decode()
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}},
            checkpoint=checkpoint,
            metadata=cast(
                CheckpointMetadata,
                codec.metadata_from_filter(flt) if md_type == codec.MD_IN_FILTER else self._load(md_type, md_bytes),
            ),
            parent_config=(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}}
                if parent
                else None
            ),
            pending_writes=pending,
        )

    def _plan_index_slots(self) -> Plan[list[int]]:
        """The slots that may hold a cross-thread index key of this prefix."""
        slots: list[int] = yield IndexSlots()
        return slots

    def _plan_live_threads(
        self, runs: Sequence[str] | None = None, slots: Sequence[int] | None = None
    ) -> Plan[list[str]]:
        """Fan out over every slot's index (or over ``slots``, from ``_plan_index_slots``): ids
        of live threads (optionally holding ``runs``)."""
        args: list[Any] = ["threads"] if runs is None else ["runs", *runs]
        if slots is None:
            slots = yield from self._plan_index_slots()
        replies = yield [Call("ix_query", self.keys.index_keys(slot), args) for slot in slots]
        out: list[str] = []
        for r in replies:
            out.extend(t.decode() for t in r)
        return out


def _list_bounds(ns: str | None, cid: str | None, before_id: str | None) -> tuple[str, bytes, bytes] | None:
    """(index, upper, lower) lex bounds for ZRANGE ... BYLEX REV; None = empty result."""
    if cid is not None and before_id is not None and cid >= before_id:
        return None
    if ns is not None:
        base = enc(ns)
        if cid is not None:
            m = base + enc(cid)
            return "ns", b"[" + m, b"[" + m
        upper = b"(" + base + (enc(before_id) if before_id is not None else b"\xff")
        return "ns", upper, b"[" + base
    if cid is not None:
        return "id", b"(" + enc(cid) + b"\xff", b"[" + enc(cid)
    return "id", (b"(" + enc(before_id)) if before_id is not None else b"+", b"-"


# what serde may load once for all the checkpoints of a reply that hold the same blob: nobody
# can change such an object, so sharing it is unobservable (a list, a dict or a message is
# loaded again for each checkpoint: callers may mutate what they get)
_IMMUTABLE = frozenset({str, int, float, bool, bytes, type(None)})


class _ReplyBlobs:
    """The blobs of one get_tuple or list reply, each unpacked (and decompressed, and read from
    its stream) at most once however many of the reply's checkpoints hold it; an immutable value
    (a str, a number, None) is also loaded once."""

    __slots__ = ("blobs", "streams", "done", "shared", "places")

    def __init__(self, blobs: list[bytes], streams: dict[bytes, values_.Stream]) -> None:
        self.blobs, self.streams = blobs, streams
        self.done: dict[int, tuple[str, bytes]] = {}
        self.shared: dict[int, Any] = {}
        self.places: dict[int, Any] = {}  # with a key: the place blob k was checked against

    def value(
        self, plans: PlanBase, k: int, cache_key: tuple[str, str, str] | None, where: Any = None,
        got: tuple[str, bytes] | None = None,
    ) -> Any:
        """The value of blob ``k``: loaded by serde for this checkpoint, or the one loaded for
        an earlier checkpoint of the reply when it is immutable (with a key: when it was
        checked against the same place). ``got``: what ``typed`` returned for it (checked)."""
        if k in self.shared and self.places.get(k) == where:
            return self.shared[k]
        v = plans.serde.loads_typed(self.typed(plans, k, cache_key, where) if got is None else got)
        if type(v) in _IMMUTABLE:
            self.shared[k] = v
        return v

    def typed(
        self, plans: PlanBase, k: int, cache_key: tuple[str, str, str] | None, where: Any = None
    ) -> tuple[str, bytes]:
        got = self.done.get(k)
        if got is None or self.places.get(k) != where:
            if not 0 < k <= len(self.blobs):
                raise MalformedReplyError(f"a checkpoint names blob {k} of {len(self.blobs)}")
            got = self.done[k] = plans._blob_typed(self.blobs[k - 1], self.streams, cache_key, where)
            self.places[k] = where
        return got


