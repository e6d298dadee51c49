"""Every operation as a pure plan: a generator that yields script calls and parses replies.

A plan never does I/O. It yields a :class:`Call` (one EVALSHA) and receives its reply, or
yields a ``list`` of calls (sent in one pipeline: fan-out over threads or slots) and
receives the list of replies, or yields :class:`Out` to hand finished results to the
caller (``list``). Its return value is the operation's result. The sync and async drivers
in ``transport/drivers.py`` run the same plans, so no logic is written twice.
"""

from __future__ import annotations

import bisect
import secrets
import uuid
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, Union, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..errors import CopyConflictError, DamagedThreadError, MalformedReplyError, ParentCycleError, ThreadEvictedError
from ..keys import FORMAT_VERSION, KeySchema, dec_first, dec_str, enc
from . import codec
from . import values as values_

if TYPE_CHECKING:
    from .ttl import TTLConfig

PAGE_SIZE = 100  # list() items per call when no limit (or a larger one) is given
SCAN_BUDGET = 512  # records one list call may examine while filtering (~10 ms of server time)
EXPORT_COUNT = 200  # HSCAN COUNT per rewrite_values scan page
# copy_thread: the most fields (records, stream parts) and bytes one export page or import
# call carries (a page: at most WORK_BUDGET checkpoints, at least one); a thread of at most
# WORK_BUDGET checkpoints, SNAPSHOT x COPY_FIELDS fields and 2 x COPY_BYTES bytes is read
# by one export call, a snapshot (HGETALL: ~1 us a field). A single larger record goes alone.
# ~5 us of import script time a field here: an import call takes ~2.5 ms, an export page less.
COPY_FIELDS = 512
COPY_BYTES = 4 << 20
SNAPSHOT = 8
COPY_ATTEMPTS = 4  # paged copies started again after a destructive change of the source
# The most ancestors one delta_history call walks, and the most checkpoints one prune or
# delete_for_runs call examines: a script blocks every client of its server while it runs, so
# each call's work is bounded on any stored data (a longer walk or a larger thread takes more
# calls; ~20-30 us of server time per unit here).
WALK_BUDGET = 256
WORK_BUDGET = 256


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
class Out:
    items: list[CheckpointTuple]


T = TypeVar("T")
# a channel value to store: (channel, e(channel), version, (serde type, bytes) or None = no value)
Serialized = tuple[str, bytes, bytes, Union[tuple[bytes, bytes], None]]  # noqa: UP007
Step = Union[Call, list[Call], Out, IndexSlots]  # noqa: UP007 (a runtime alias; py3.10 needs Union)
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
    (the bytes ``chain_entry()`` in lua/_lib.lua builds from a record)."""
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


class Plans:
    """Plans for every operation; mixed into both savers (reads ``self.serde`` per call)."""

    serde: SerializerProtocol
    keys: KeySchema
    ttl: TTLConfig
    history: str
    fencing: bool
    compress: bool
    _streams: values_.StreamCache
    _wait: tuple[int, int] | None

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
        exist ("Lost keys" in lua/_lib.lua)."""
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
        self, blob: bytes, streams: dict[bytes, values_.Stream], cache_key: tuple[str, str, str] | None = None
    ) -> tuple[str, bytes]:
        """What serde loads a channel value from, from its blob record; a stream record's value
        from the reply's streams (``cache_key``: remember its stream for the next put of that
        channel)."""
        type_, data = codec.unpack_blob(blob)
        if type_.endswith(values_.STREAM_MARK):
            data, known = values_.decode_stream_value(data, streams)
            type_ = type_[:-2]
            if cache_key is not None:
                self._streams.put(cache_key, known)
        return self._typed(type_, data)

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
        parent_b, cp_type, cp_bytes, md_type, md_bytes, vrec, flt = codec.checkpoint_head(raw)[:7]
        if cp_type.endswith(values_.ZSTD_MARK):
            cp_type, cp_bytes = cp_type[:-2], values_.decompress(cp_bytes)
        if cp_type.endswith(values_.VERSIONS_MARK_B):
            checkpoint: Checkpoint = self._load(cp_type[:-2], cp_bytes)
            checkpoint["channel_versions"] = codec.str_pairs(vrec)
            checkpoint["id"] = cid
        else:
            checkpoint = self._load(cp_type, cp_bytes)
        values: dict[str, Any] = {}
        for i in range(0, len(values_at), 2):  # {channel, k, ...}: the channels that hold a value
            chan = values_at[i].decode()
            values[chan] = blobs.value(self, values_at[i + 1], (thread_id, ns, chan) if remember else None)
        checkpoint["channel_values"] = values  # a fresh dict from serde: no copy needed
        pending = []
        for w in writes:
            if w:
                tid, ch, ty, data, _path, _idx = codec.unpack(w)
                pending.append((tid.decode(), ch.decode(), self._load(ty, data)))
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

    # ---- put -----------------------------------------------------------------------
    def _plan_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Plan[RunnableConfig]:
        conf = _configurable(config)
        thread_id = _thread_id(conf)
        ns = _str(conf.get("checkpoint_ns", "") or "", "checkpoint_ns")
        parent = conf.get("checkpoint_id") or ""
        _str(parent, "config checkpoint_id")
        if not isinstance(checkpoint, dict) or "id" not in checkpoint:
            raise TypeError("checkpoint must be a Checkpoint dict with an 'id'")
        cid = _str(checkpoint["id"], "checkpoint['id']")
        if not cid:
            raise ValueError("checkpoint['id'] must not be empty")
        if cid == parent:
            raise ValueError(
                f"checkpoint {cid!r} cannot be its own parent (config checkpoint_id is the new checkpoint's id)"
            )
        if not isinstance(new_versions, dict):
            raise TypeError("new_versions must be a dict")
        if not isinstance(metadata, dict):
            raise TypeError(f"metadata must be a dict, got {type(metadata).__name__}")
        _str_keys(metadata, "metadata")
        c: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = c.pop("channel_values", None) or {}
        if not isinstance(values, dict):
            raise TypeError(f"checkpoint['channel_values'] must be a dict, got {type(values).__name__}")
        versions = c.get("channel_versions") or {}
        if not isinstance(versions, dict):
            raise TypeError(f"checkpoint['channel_versions'] must be a dict, got {type(versions).__name__}")
        _str_keys(versions, "checkpoint['channel_versions']")
        try:
            md = get_checkpoint_metadata(config, metadata)
        except AttributeError as exc:  # the config's "metadata" / "configurable" is not a dict of str keys
            raise TypeError(
                f"config['metadata'] and config['configurable'] must be dicts with str keys: {exc}"
            ) from None
        # the record's versions part holds channel_versions and its key the id: with compression
        # on, the serialized checkpoint leaves both out (~180 bytes) and reads put them back
        # (VERSIONS_MARK). What is left is small (~250 bytes: zstd saves little there at ~4 us
        # a put and a read), so only a large one is compressed (CP_MIN_ENCODED).
        mark = ""
        if self.compress and "channel_versions" in c and all(type(v) is str for v in versions.values()):
            del c["channel_versions"], c["id"]
            mark = values_.VERSIONS_MARK
        cp_type, cp_bytes = values_.encode_plain(
            *self.serde.dumps_typed(c), self.compress, mark, values_.CP_MIN_ENCODED
        )
        flt, holds = codec.filter_parts(md, self.compress)
        if self.compress and holds:
            # the filter record already holds every value as JSON that reads back exactly:
            # the metadata is stored once, there (MD_IN_FILTER)
            md_type, md_bytes = codec.MD_IN_FILTER, b""
        else:
            md_type, md_bytes = values_.encode_plain(*self.serde.dumps_typed(md), self.compress)
        dumps = self.serde.dumps_typed
        serialized: list[Serialized] = []
        for ch, ver in new_versions.items():
            _str(ch, "channel name")
            v = str(ver).encode()
            if v[:1] == b"\0":
                raise ValueError(f"channel version {ver!r} starts with a NUL byte")
            if ch in values:
                ty, data = dumps(values[ch])
                serialized.append((ch, enc(ch), v, (ty.encode(), data)))
            else:
                serialized.append((ch, enc(ch), v, None))
        run_id = md.get("run_id")
        delta = md.get("counters_since_delta_snapshot") or {}
        parents = md.get("parents") if isinstance(md.get("parents"), dict) else {}
        record = codec.checkpoint_record(
            [
                parent,
                cp_type,
                cp_bytes,
                md_type,
                md_bytes,
                [x for ch, ver in versions.items() for x in (ch, str(ver))],
                flt,
                "" if run_id is None else str(run_id),
                [str(k) for k in delta] if delta and isinstance(delta, dict) else [],
                [str(x) for kv in parents.items() for x in kv] if parents else [],
            ]
        )
        head = self._header(thread_id) + [
            ns,
            cid,
            parent,
            record,
            self.history,
            "1" if self.fencing else "0",
            # the chain entry: with compression off a new thread keeps them (delta history then
            # reads ~300 bytes per ancestor, not its record); else none (put.lua builds one from
            # the record for a thread that keeps them: an older format's, or one started so)
            b"" if self.compress else _chain_entry(parent, versions),
        ]
        keys = self.keys.thread_keys(thread_id)
        args, appends = self._blob_args(thread_id, ns, serialized, True)
        cleaned = yield Call("put", keys, head + args, self._wait)
        if cleaned == 3:
            # a stream this worker appended to changed or went since it last saw it (another
            # worker wrote the channel): nothing was written; new streams cannot conflict
            args, appends = self._blob_args(thread_id, ns, serialized, False)
            cleaned = yield Call("put", keys, head + args, self._wait)
        if cleaned == 4:
            self._streams.drop_thread(thread_id)
            raise self._evicted(
                thread_id, f"put continues from checkpoint {parent!r}, which the thread no longer holds"
            )
        for a, (ch, *_rest) in appends:
            self._streams.put((thread_id, ns, ch), a.known)
        if cleaned == 2:
            # history="latest" on a thread too large to clean in one bounded call (written
            # with "full" before): prune it in pages; later puts keep it latest-only
            yield from self._plan_prune_paged(thread_id)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}

    def _blob_args(
        self, thread_id: str, ns: str, serialized: list[Serialized], cached: bool
    ) -> tuple[list[bytes | int], list[tuple[values_.StreamAppend, tuple[str, bytes, bytes, Any]]]]:
        """put.lua's blob and stream arguments; the appends, to remember once stored.

        A channel without a value gets no blob field at all (since format 5): reads take a
        version with no field for a channel without a value, as they take ``EMPTY_BLOB``, which
        earlier formats stored (~90 bytes per such version: LangGraph's ``branch:to:*``
        channels get one at every step)."""
        args: list[bytes | int] = [0]
        appends: list[tuple[values_.StreamAppend, tuple[str, bytes, bytes, Any]]] = []
        for item in serialized:
            ch, ch_e, v, typed = item
            if typed is None:
                continue
            args.append(ch_e + v)
            if self.compress:
                # a value too small to encode never reads the cache (most channels, most puts)
                big = len(typed[1]) >= values_.MIN_ENCODED
                known = self._streams.get((thread_id, ns, ch)) if cached and big else None
                rec, app = values_.encode_channel(typed[0], typed[1], ch_e, known)
                args.append(rec)
                if app is not None:
                    appends.append((app, item))
            else:
                values_.check_type(typed[0])
                args.append(codec.blob_record(typed[0], typed[1]))
        args[0] = (len(args) - 1) // 2
        sent = [a for a, _ in appends if a.mode != b"-"]
        args.append(len(sent))
        for a in sent:
            args += a.args()
        return args, appends

    # ---- put_writes ----------------------------------------------------------------
    def _plan_put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> Plan[None]:
        conf = _configurable(config)
        thread_id = _thread_id(conf)
        ns = _str(conf.get("checkpoint_ns", "") or "", "checkpoint_ns")
        cid = conf.get("checkpoint_id")
        if not cid:
            raise ValueError("put_writes needs config['configurable']['checkpoint_id']")
        _str(cid, "checkpoint_id")
        _str(task_id, "task_id")
        _str(task_path, "task_path")
        _sequence(writes, "writes", "(channel, value) pairs")
        task_b, path_b = task_id.encode(), task_path.encode()
        argv: list[bytes | str | int] = [*self._header(thread_id), ns, cid, enc(task_b), enc(path_b), 0]
        fixed = len(argv)  # the last fixed argument is the number of writes, set below
        dumps = self.serde.dumps_typed
        for idx, item in enumerate(writes):
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise TypeError("writes must be a sequence of (channel, value) pairs")
            ch, value = item
            _str(ch, "write channel")
            widx = WRITES_IDX_MAP.get(ch)
            tag = b"0" if widx is None else b"1"  # regular: first write wins; special: overwrites
            if widx is None:
                widx = idx
            ty_b, data = values_.encode_plain(*dumps(value), self.compress)
            record = codec.write_record(task_b, ch.encode(), ty_b, data, path_b, b"%d" % widx)
            argv += [tag + _idx8(widx), record]
        if len(argv) == fixed:
            return None
        argv[fixed - 1] = (len(argv) - fixed) // 2
        if self.ttl.ttl_ms == 0:
            # the steady state: 2 keys instead of 11; nil = nothing written, the thread's
            # index or expiry needs the full call (e.g. its first write, before any put)
            stored = yield Call("put_writes+lean", self.keys.lean_keys(thread_id), argv, self._wait)
            if stored is not None:
                return None
        if (yield Call("put_writes", self.keys.thread_keys(thread_id), argv, self._wait)) == -1:
            self._streams.drop_thread(thread_id)
            raise self._evicted(thread_id, f"put_writes to checkpoint {cid!r}: the thread lost a key and was forgotten")
        return None

    # ---- get_tuple -----------------------------------------------------------------
    def _plan_get_tuple(self, config: RunnableConfig) -> Plan[CheckpointTuple | None]:
        conf = _configurable(config)
        thread_id = _thread_id(conf)
        ns = _str(conf.get("checkpoint_ns", "") or "", "checkpoint_ns")
        cid = get_checkpoint_id(config) or ""
        _str(cid, "checkpoint_id")
        name, refresh = self._read_script("get_tuple")
        reply = yield from self._read(
            Call(name, self.keys.thread_keys(thread_id), self._header(thread_id, refresh) + [ns, cid])
        )
        if reply is None:
            return None
        cid_b, raw, values_at, writes, streams, blobs = reply
        return self._tuple(
            thread_id, ns, cid_b.decode(), raw, values_at, writes,
            _ReplyBlobs(blobs, values_.decode_streams(streams, self._streams, thread_id)), remember=True,
        )

    # ---- list ----------------------------------------------------------------------
    def _plan_list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Plan[None]:
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int):
                raise TypeError(f"limit must be an int or None, got {type(limit).__name__}")
            if limit <= 0:
                return
        if filter is not None and not isinstance(filter, dict):
            raise TypeError("filter must be a dict or None")
        fargs = codec.filter_args(filter)
        before_id = None
        if before is not None:
            before_id = get_checkpoint_id(before) if _configurable(before, "before") else None
            if before_id is not None:
                _str(before_id, "before checkpoint_id")
        if config is None:
            yield from self._plan_list_all(fargs, before_id, limit)
            return
        conf = _configurable(config)
        thread_id = _thread_id(conf)
        ns = conf.get("checkpoint_ns")
        if ns is not None:
            _str(ns, "checkpoint_ns")
        cid = get_checkpoint_id(config)
        bounds = _list_bounds(ns, cid, before_id)
        if bounds is None:
            return
        remaining = limit
        name, refresh = self._read_script("list")
        index, upper, lower = bounds
        while True:
            page = PAGE_SIZE if remaining is None else min(remaining, PAGE_SIZE)
            reply = yield from self._read(
                Call(
                    name,
                    self.keys.thread_keys(thread_id),
                    self._header(thread_id, refresh) + [index, upper, lower, page, SCAN_BUDGET, *fargs],
                )
            )
            cursor, items = reply[0], reply[3:]
            blobs = self._reply_blobs(reply, thread_id)
            out = [self._tuple(thread_id, dec_str(i[0]), dec_str(i[1]), i[2], i[3], i[4], blobs) for i in items]
            if out:
                yield Out(out)
            if remaining is not None:
                remaining -= len(out)
                if remaining <= 0:
                    return
            if not cursor:
                return
            upper = cursor

    def _reply_blobs(self, reply: list[Any], thread_id: str) -> _ReplyBlobs:
        """A list reply's blobs: {cursor, streams, blobs, item, ...} ({cursor} alone when empty)."""
        if len(reply) < 3:
            return _ReplyBlobs([], {})
        return _ReplyBlobs(reply[2], values_.decode_streams(reply[1], self._streams, thread_id))

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

    def _plan_list_all(self, fargs: list[bytes], before_id: str | None, limit: int | None) -> Plan[None]:
        threads = yield from self._plan_live_threads()
        if not threads:
            return
        bounds = _list_bounds(None, None, before_id)
        assert bounds is not None
        index, upper, lower = bounds
        page = PAGE_SIZE if limit is None else min(limit, PAGE_SIZE)
        name, refresh = "list", False
        found: list[CheckpointTuple] = []
        pending = [(t, upper, 0) for t in threads]
        while pending:
            calls = [
                Call(
                    name,
                    self.keys.thread_keys(t),
                    self._header(t, refresh) + [index, up, lower, page, SCAN_BUDGET, *fargs],
                )
                for t, up, _ in pending
            ]
            try:
                replies = yield calls
            except DamagedThreadError:  # a thread of the batch lost a key: forget the damaged ones
                replies = yield [self._forgetting(c) for c in calls]
            nxt = []
            for (t, _, n), reply in zip(pending, replies, strict=True):
                cursor, items = reply[0], reply[3:]
                blobs = self._reply_blobs(reply, t)
                got = [self._tuple(t, dec_str(i[0]), dec_str(i[1]), i[2], i[3], i[4], blobs) for i in items]
                found.extend(got)
                n += len(got)
                # with a limit, no thread can contribute more than `limit` items
                if cursor and (limit is None or n < limit):
                    nxt.append((t, cursor, n))
            pending = nxt
        found.sort(key=lambda t: t.config["configurable"]["checkpoint_id"], reverse=True)
        if limit is not None:
            found = found[:limit]
        if found:
            yield Out(found)

    # ---- deletes, prune, copy ------------------------------------------------------
    def _plan_delete_thread(self, thread_id: Any) -> Plan[None]:
        tid = normalize_thread_id(thread_id)
        self._streams.drop_thread(tid)
        yield Call("delete_thread", self.keys.thread_keys(tid), self._header(tid))

    def _plan_delete_for_runs(self, run_ids: Sequence[str]) -> Plan[int]:
        runs = [str(r) for r in _sequence(run_ids, "run_ids", "run ids")]
        if not runs:
            return 0
        threads = yield from self._plan_live_threads(runs)
        if not threads:
            return 0
        replies = yield [
            Call("delete_runs", self.keys.thread_keys(t), [*self._header(t), "all", WORK_BUDGET, *runs])
            for t in threads
        ]
        total = 0
        for t, r in zip(threads, replies, strict=True):
            total += (yield from self._plan_delete_runs_paged(t, runs)) if r[0] == b"paged" else int(r[0])
        return total

    def _plan_delete_runs_paged(self, thread_id: str, runs: list[str]) -> Plan[int]:
        """delete_for_runs on a thread too large for one bounded call (see delete_runs.lua)."""
        keys, head = self.keys.thread_keys(thread_id), self._header(thread_id)
        deleted, candidates = 0, set()
        while True:
            n, more, fields = yield Call("delete_runs", keys, [*head, "drop", WORK_BUDGET, *runs])
            deleted += int(n)
            candidates.update(fields)
            if more != b"1":
                break
        emptied = yield Call("delete_runs", keys, [*head, "finish", WORK_BUDGET])
        if not int(emptied):
            yield from self._plan_gc(thread_id, candidates)
        return deleted

    def _plan_gc(self, thread_id: str, candidates: set[bytes]) -> Plan[None]:
        """Delete the candidate blob fields that no checkpoint left in their namespace
        references, a bounded page per call (gc.lua)."""
        keys, head = self.keys.thread_keys(thread_id), self._header(thread_id)
        by_ns: dict[bytes, set[bytes]] = {}
        for f in candidates:
            by_ns.setdefault(f[: dec_first(f)[1]], set()).add(f)
        for ns_e, fields in by_ns.items():
            cursor = b""
            while fields:
                cursor, refs = yield Call("gc", keys, [*head, "refs", ns_e, cursor, WORK_BUDGET])
                fields.difference_update(refs)
                if not cursor:
                    break
            gone = sorted(fields)
            for i in range(0, len(gone), WORK_BUDGET):
                yield Call("gc", keys, [*head, "hdel", *gone[i : i + WORK_BUDGET]])

    def _plan_prune(self, thread_ids: Sequence[str], strategy: str = "keep_latest") -> Plan[int]:
        _sequence(thread_ids, "thread_ids", "thread ids")
        if strategy == "delete_all":  # the LangGraph API server's name for "delete"
            strategy = "delete"
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        tids = [normalize_thread_id(t) for t in thread_ids]
        if not tids:
            return 0
        replies = yield [
            Call("prune", self.keys.thread_keys(t), [*self._header(t), strategy, "all", WORK_BUDGET]) for t in tids
        ]
        total = 0
        for t, r in zip(tids, replies, strict=True):
            total += (yield from self._plan_prune_paged(t)) if r[0] == b"paged" else int(r[0])
        return total

    def _plan_prune_paged(self, thread_id: str) -> Plan[int]:
        """prune(keep_latest) of a thread too large for one bounded call, step by step (see
        prune.lua): every call examines at most WORK_BUDGET checkpoints or writes."""
        keys, head = self.keys.thread_keys(thread_id), self._header(thread_id)

        def step(name: str, *args: Any) -> Call:
            return Call("prune", keys, [*head, "keep_latest", name, WORK_BUDGET, *args])

        namespaces: list[bytes] = []
        cursor = b""
        while True:
            page = yield step("ns", cursor)
            namespaces += page
            if len(page) < 64:
                break
            cursor = page[-1]
        deleted = 0
        for ns_e in namespaces:
            # 1. the checkpoints to keep: the latest and its delta chain, a bounded walk per call
            kept: list[bytes] = []
            seen: set[bytes] = set()
            start: bytes = b""
            need: list[bytes] = []
            while True:
                latest, page, nxt, need, oldest_parent = yield step("walk", ns_e, start, *need)
                _walked(seen, page, nxt, thread_id, dec_str)
                kept += page
                if not nxt:
                    break
                start = nxt
            if not latest:
                continue  # the namespace is gone
            # 2. delete the others, oldest first, a page per call; the kept ids of the page go with it
            order = sorted(seen)
            candidates: set[bytes] = set()
            cursor = b""
            while True:
                at = bisect.bisect_right(order, cursor[len(ns_e) :]) if cursor else 0
                window = order[at : at + WORK_BUDGET]
                more = "1" if at + WORK_BUDGET < len(order) else "0"
                n, cursor, fields = yield step("drop", ns_e, latest, cursor, more, *window)
                deleted += int(n)
                candidates.update(fields)
                if not cursor:
                    break
            # 3. the oldest kept checkpoint loses a parent that was not kept
            if kept and oldest_parent != b"\0" and oldest_parent not in seen:
                yield step("detach", ns_e, kept[-1])
            # 4. writes stored against older ids that have no checkpoint
            cursor = b""
            while True:
                cursor = yield step("orphans", ns_e, latest, cursor)
                if not cursor:
                    break
            # 5. the blobs no kept checkpoint references
            yield from self._plan_gc(thread_id, candidates)
        return deleted

    def _plan_copy_thread(self, source_thread_id: Any, target_thread_id: Any) -> Plan[None]:
        """Copy a thread into a new one (see docs/lifecycle.md "Copying a thread").

        A source within WORK_BUDGET checkpoints, SNAPSHOT x COPY_FIELDS fields and 2 x
        COPY_BYTES bytes is read by one export call (a snapshot); a larger one in pages of
        checkpoints, oldest first, each with its values, streams and writes, under a guard in
        the source's meta that every destructive change moves (the copy then starts again,
        COPY_ATTEMPTS times at most). Every copied stream gets a fresh id, so no stream id of
        the target ever held other bytes."""
        src = normalize_thread_id(source_thread_id)
        dst = normalize_thread_id(target_thread_id)
        if src == dst:
            return None
        src_keys = self.keys.thread_keys(src)
        budget = [WORK_BUDGET, SNAPSHOT * COPY_FIELDS, 2 * COPY_BYTES]
        reply = yield Call("export", src_keys, [*self._header(src), "all", *budget])
        if reply[0] == b"all":
            streams, records = _split_blobs(reply[2])
            # only the streams some record names (a stream a replaced record left counted
            # stays in the source until the thread goes; the copy need not carry it), and the
            # checkpoints oldest first, as the pages give them
            named = {_stream_dir(f, b) for f, b in codec.pairs(records)}
            streams = {d: p for d, p in streams.items() if d in named}
            cps = sorted(codec.pairs(reply[1]), key=lambda fr: fr[0][_after_ns(fr[0]) :] + fr[0])
            flat = [x for pair in cps for x in pair]
            yield from self._plan_import(dst, _CopyIds(), streams, records, reply[3], flat, True, True)
            return None
        for _ in range(COPY_ATTEMPTS):
            if (yield from self._plan_copy_paged(src, dst)):
                return None
        raise CopyConflictError(
            f"copy_thread({src!r}, {dst!r}): the source changed destructively (prune, delete_for_runs, "
            f"delete, expiry, a re-put) during each of {COPY_ATTEMPTS} attempts; nothing was copied"
        )

    def _plan_copy_paged(self, src: str, dst: str) -> Plan[bool]:
        """One attempt at a paged copy; False (the target removed again) when the source
        changed destructively meanwhile."""
        src_keys, ids = self.keys.thread_keys(src), _CopyIds()
        # the target is checked first: a refused copy writes nothing, not even the guard
        yield from self._plan_import(dst, ids, {}, [], [], [], True, False)
        guard = yield Call("import", src_keys, [*self._header(src), "guard", secrets.randbelow(9 * 10**15) + 10**15])
        if guard is None:  # the source is gone: nothing to copy
            return True
        held: dict[bytes, bytes] = {}  # source stream directory field -> the directory the target holds
        imported: set[bytes] = set()  # source blob fields the target holds
        after, upto, first = b"", b"", True
        while True:
            args: list[Any] = [*self._header(src), "page", guard, after, upto, WORK_BUDGET, COPY_FIELDS, COPY_BYTES]
            for d, n in held.items():
                args += [d, n]
            reply = yield Call("export", src_keys, args)
            if reply[0] != b"ok":
                if not first:
                    yield Call("import", self.keys.thread_keys(dst), [*self._header(dst), "abort", ids.token])
                return False
            nxt, upto, cps, blobs, parts, writes = reply[1:]
            # the records the target lacks, the streams they name, and the streams it holds that grew
            records: list[bytes] = []
            named: set[bytes] = set()
            for f, b in codec.pairs(blobs):
                if f not in imported:
                    imported.add(f)
                    records += (f, b)
                    named_dir = _stream_dir(f, b)
                    if named_dir is not None:
                        named.add(named_dir)
            streams = {d: p for d, p in _split_blobs(parts)[0].items() if d in named or d in held}
            for d, p in streams.items():
                held[d] = dict(codec.pairs(p))[d]
            yield from self._plan_import(dst, ids, streams, records, writes, cps, first, not nxt)
            if not nxt:
                return True
            after, first = nxt, False

    def _plan_import(
        self,
        dst: str,
        ids: _CopyIds,
        streams: dict[bytes, list[bytes]],
        records: list[bytes],
        writes: list[bytes],
        cps: list[bytes],
        first: bool,
        last: bool,
    ) -> Plan[None]:
        """import.lua calls of bounded size: streams (each whole in one call), values, writes,
        then checkpoints, so the target never holds a checkpoint without its data. Stream ids
        are the copy's own (``ids``)."""
        units: list[tuple[int, list[bytes]]] = []
        for p in streams.values():
            units.append((0, [ids.field(x) if i % 2 == 0 else x for i, x in enumerate(p)]))
        for f, b in codec.pairs(records):
            units.append((1, [f, ids.record(f, b)]))
        for section, flat in ((2, writes), (3, cps)):
            units += [(section, list(pair)) for pair in codec.pairs(flat)]
        calls: list[list[list[bytes]]] = []
        size = fields = 0
        for section, flat in units:
            n, nbytes = len(flat) // 2, sum(map(len, flat))
            if not calls or (fields and (fields + n > COPY_FIELDS or size + nbytes > COPY_BYTES)):
                calls.append([[], [], [], []])
                size = fields = 0
            calls[-1][section] += flat
            size, fields = size + nbytes, fields + n
        if not calls:
            if not (first or last):
                return None
            calls.append([[], [], [], []])
        keys, head = self.keys.thread_keys(dst), self._header(dst)
        for i, c in enumerate(calls):
            flags = ["1" if first and i == 0 else "0", "1" if last and i == len(calls) - 1 else "0"]
            args: list[Any] = [*head, "import", ids.token, *flags, *(len(x) // 2 for x in c)]
            for x in c:
                args += x
            if not (yield Call("import", keys, args)):
                raise CopyConflictError(
                    f"copy_thread into {dst!r}: the target was deleted, expired or written by another "
                    "writer while the copy ran"
                )
        return None

    # ---- DeltaChannel history ------------------------------------------------------
    def _plan_delta_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Plan[dict[str, DeltaChannelHistory]]:
        chans = list(_sequence(channels, "channels", "channel names"))
        if not chans:
            return {}
        conf = _configurable(config)
        thread_id = _thread_id(conf)
        ns = _str(conf.get("checkpoint_ns", "") or "", "checkpoint_ns")
        cid = get_checkpoint_id(config) or ""
        for ch in chans:
            _str(ch, "channel name")
        name, refresh = self._read_script("delta_history")
        keys, header = self.keys.thread_keys(thread_id), self._header(thread_id, refresh)
        writes: dict[str, list[tuple[str, str, Any]]] = {c: [] for c in chans}
        result: dict[str, DeltaChannelHistory] = {}
        pages: list[list[list[bytes]]] = []  # each call's ancestors, newest first
        walked: set[bytes] = set()
        wanted, cont = dict.fromkeys(chans), "0"
        while True:
            reply = yield from self._read(Call(name, keys, [*header, ns, cid, cont, WALK_BUDGET, *wanted]))
            ancestors, seeds, nxt, ids = reply[:4]
            if cont == "1" and not ancestors:
                # the ancestor this continuation starts at is gone: the thread was forgotten (or
                # deleted) between two calls of the walk; a history without its seed would
                # rebuild a wrong state, so the answer is the absent thread's
                return {c: {"writes": []} for c in chans}
            streams = values_.decode_streams(reply[4] if len(reply) > 4 else [], self._streams, thread_id)
            pages.append(ancestors)
            for ch, blob in codec.pairs(seeds):
                result[ch.decode()] = {
                    "seed": self.serde.loads_typed(self._blob_typed(blob, streams)),
                    "writes": writes[ch.decode()],
                }
                wanted.pop(ch.decode(), None)
            if not nxt:
                break
            _walked(walked, ids, nxt, thread_id, bytes.decode)
            cid, cont = nxt.decode(), "1"
        for ancestors in reversed(pages):  # oldest first; each in writes_sort_key order
            for anc in reversed(ancestors):
                for w in anc:
                    tid, ch, ty, data, _p, _i = codec.unpack(w)
                    writes[ch.decode()].append((tid.decode(), ch.decode(), self._load(ty, data)))
        for c in chans:
            result.setdefault(c, {"writes": writes[c]})
        return {c: result[c] for c in chans}

    # ---- rewrite of values stored raw ------------------------------------------------
    def _plan_rewrite_values(self, thread_id: Any) -> Plan[RewriteStats]:
        """Re-encode the thread's raw channel values as a put of this version stores them:
        each (namespace, channel)'s versions in order, so a list's versions share one stream.
        Bounded calls; a value changed meanwhile is left alone; running it again goes on where
        it stopped (encoded values are not raw any more)."""
        import hashlib

        tid = normalize_thread_id(thread_id)
        keys, head = self.keys.thread_keys(tid), self._header(tid)
        stats = RewriteStats(tid)
        found: dict[bytes, list[tuple[bytes, bytes, int]]] = {}  # e(ns)e(channel) -> [(version, field, length)]
        cursor: bytes | int = 0
        while True:
            cursor, page = yield Call("rewrite", keys, [*head, "scan", cursor, EXPORT_COUNT, values_.MIN_ENCODED])
            for f, n in codec.pairs(page):
                p = dec_first(f, dec_first(f)[1])[1]  # after e(ns)e(channel)
                found.setdefault(f[:p], []).append((f[p:], f, int(n)))
            if cursor in (b"0", 0, "0"):
                break
        for prefix, items in found.items():
            ns_e = prefix[: dec_first(prefix)[1]]
            ch_e = prefix[len(ns_e) :]
            items.sort()
            for attempt in range(2):
                known: values_.Known | None = None
                ok = True
                for batch in _batches(items, REWRITE_BYTES):
                    recs = yield Call("rewrite", keys, [*head, "get", *(f for _, f, _ in batch)])
                    triples: list[bytes] = []
                    appends: list[values_.StreamAppend] = []
                    for (_, f, _), rec in zip(batch, recs, strict=True):
                        if rec is None:
                            continue
                        type_, data = codec.unpack_blob(rec)
                        if b"\x1f" in type_:
                            continue  # encoded meanwhile
                        new, app = values_.encode_channel(type_, data, ch_e, known if attempt == 0 else None)
                        if app is not None:
                            known = app.known
                            if app.mode != b"-":
                                appends.append(app)
                        if new == rec:
                            continue
                        triples += [f, hashlib.sha1(rec).hexdigest().encode(), new]
                        stats.bytes_before += len(rec)
                        stats.bytes_after += len(new) + (len(app.frame) if app is not None else 0)
                    if not triples:
                        continue
                    args: list[Any] = [*head, "set", ns_e, len(triples) // 3, *triples]
                    for a in appends:
                        args += a.args()
                    n = yield Call("rewrite", keys, args)
                    if int(n) < 0:
                        ok = False  # a stream changed under us: this channel again, new streams
                        break
                    stats.values += int(n)
                if ok:
                    break
        return stats

    # ---- pinning -------------------------------------------------------------------
    def _plan_pin(self, thread_id: Any, pinned: bool) -> Plan[bool]:
        tid = normalize_thread_id(thread_id)
        reply = yield Call("pin", self.keys.thread_keys(tid), self._header(tid) + ["1" if pinned else "0"])
        return bool(reply)


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


REWRITE_BYTES = 1 << 20  # raw bytes one rewrite "get" call brings back, at most (one value may exceed it)


# what serde may load once for all the checkpoints of a reply that hold the same blob: nobody
# can change such an object, so sharing it is unobservable (a list, a dict or a message is
# loaded again for each checkpoint: callers may mutate what they get)
_IMMUTABLE = frozenset({str, int, float, bool, bytes, type(None)})


class _ReplyBlobs:
    """The blobs of one get_tuple or list reply, each unpacked (and decompressed, and read from
    its stream) at most once however many of the reply's checkpoints hold it; an immutable value
    (a str, a number, None) is also loaded once."""

    __slots__ = ("blobs", "streams", "done", "shared")

    def __init__(self, blobs: list[bytes], streams: dict[bytes, values_.Stream]) -> None:
        self.blobs, self.streams = blobs, streams
        self.done: dict[int, tuple[str, bytes]] = {}
        self.shared: dict[int, Any] = {}

    def value(self, plans: Plans, k: int, cache_key: tuple[str, str, str] | None) -> Any:
        """The value of blob ``k``: loaded by serde for this checkpoint, or the one loaded for
        an earlier checkpoint of the reply when it is immutable."""
        if k in self.shared:
            return self.shared[k]
        v = plans.serde.loads_typed(self.typed(plans, k, cache_key))
        if type(v) in _IMMUTABLE:
            self.shared[k] = v
        return v

    def typed(self, plans: Plans, k: int, cache_key: tuple[str, str, str] | None) -> tuple[str, bytes]:
        got = self.done.get(k)
        if got is None:
            if not 0 < k <= len(self.blobs):
                raise MalformedReplyError(f"a checkpoint names blob {k} of {len(self.blobs)}")
            got = self.done[k] = plans._blob_typed(self.blobs[k - 1], self.streams, cache_key)
        return got


@dataclass
class RewriteStats:
    """What ``rewrite_values`` did to one thread."""

    thread_id: str
    values: int = 0  # value records replaced
    bytes_before: int = 0  # their raw records' bytes
    bytes_after: int = 0  # the new records' and the stream frames' bytes


def _batches(items: list[tuple[bytes, bytes, int]], limit: int) -> list[list[tuple[bytes, bytes, int]]]:
    out: list[list[tuple[bytes, bytes, int]]] = [[]]
    total = 0
    for it in items:
        if out[-1] and total + it[2] > limit:
            out.append([])
            total = 0
        out[-1].append(it)
        total += it[2]
    return [b for b in out if b]


def _after_ns(field: bytes) -> int:
    """The position after e(ns) in a checkpoint or blob field."""
    i = field.find(b"\0")
    if i >= 0 and field[i + 1 : i + 2] != b"\xff":
        return i + 1
    return dec_first(field)[1]


def _after_channel(field: bytes) -> int:
    """The position after e(ns)e(channel) in a blob field."""
    i = field.find(b"\0")
    j = field.find(b"\0", i + 1)
    if i >= 0 and j >= 0 and field[i + 1 : i + 2] != b"\xff" and field[j + 1 : j + 2] != b"\xff":
        return j + 1  # no escaped NUL (UTF-8 text never holds 0xff): the second NUL ends e(channel)
    return dec_first(field, dec_first(field)[1])[1]


def _split_blobs(flat: Sequence[bytes]) -> tuple[dict[bytes, list[bytes]], list[bytes]]:
    """A blob hash's (field, value) list: the stream parts (directory and frames) grouped by
    directory field, and the value records."""
    streams: dict[bytes, list[bytes]] = {}
    records: list[bytes] = []
    for f, v in codec.pairs(flat):
        p = _after_channel(f)
        if f[p : p + 1] == b"\0":
            q = f.find(b"\0", p + 1)
            streams.setdefault(f if q < 0 else f[:q], []).extend((f, v))
        else:
            records += (f, v)
    return streams, records


def _stream_dir(field: bytes, rec: bytes) -> bytes | None:
    """The directory field of the stream the value record ``rec`` at ``field`` names, or None."""
    if len(rec) > values_.STREAM_REC_MAX:
        return None
    type_, data = codec.unpack_blob(rec)
    if not type_.endswith(values_.STREAM_MARK):
        return None
    return field[: _after_channel(field)] + b"\0" + codec.unpack(data)[0]


class _CopyIds:
    """One copy's token (import.lua) and fresh stream ids: each source stream (its directory
    field) gets a new random id in the target, for the stream's parts and every record naming it."""

    __slots__ = ("token", "sids", "used")

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self.sids: dict[bytes, bytes] = {}  # source directory field -> the copy's sid
        self.used: set[bytes] = set()

    def _sid(self, dir_field: bytes, old: bytes) -> bytes:
        new = self.sids.get(dir_field)
        if new is None:
            new = values_.new_sid()
            while new == old or new in self.used:
                new = values_.new_sid()
            self.sids[dir_field] = new
            self.used.add(new)
        return new

    def field(self, f: bytes) -> bytes:
        """A stream part's field (directory or frame) under the copy's id."""
        p = _after_channel(f)
        q = f.find(b"\0", p + 1)
        d = f if q < 0 else f[:q]
        return f[: p + 1] + self._sid(d, d[p + 1 :]) + (b"" if q < 0 else f[q:])

    def record(self, f: bytes, rec: bytes) -> bytes:
        """A value record, naming the copy's id of its stream if it is a stream record."""
        d = _stream_dir(f, rec)
        if d is None:
            return rec
        type_, data = codec.unpack_blob(rec)
        parts = codec.unpack(data)
        parts[0] = self._sid(d, parts[0])
        return codec.blob_record(type_, codec.pack(parts))
