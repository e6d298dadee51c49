"""The plans that write a thread's checkpoints: put, put_writes, pin."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)

from ...keys import enc
from .. import codec
from .. import values as values_
from ..integrity import MINE_MAX, TAG, VALUE_MARK, join_type, join_value
from ..replies import Pin, Put, PutWrites

if TYPE_CHECKING:
    pass

from .common import (
    Call,
    Plan,
    Serialized,
    _chain_entry,
    _configurable,
    _idx8,
    _sequence,
    _str,
    _str_keys,
    _thread_id,
    normalize_thread_id,
)
from .lifecycle import LifecyclePlans


class WritePlans(LifecyclePlans):
    """put, put_writes and pin (a latest-only put of a large thread prunes it in pages: a
    lifecycle plan)."""

    # ---- put -----------------------------------------------------------------------
    def _plan_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Plan[RunnableConfig]:
        thread_id, ns, parent, cid, c, values, versions, md = _put_input(config, checkpoint, metadata, new_versions)
        cp_type, cp_bytes, md_type, md_bytes, flt = self._encode_checkpoint(c, versions, md)
        serialized = self._serialize_values(new_versions, values)
        run_id = md.get("run_id")
        delta = md.get("counters_since_delta_snapshot") or {}
        parents = md.get("parents") if isinstance(md.get("parents"), dict) else {}
        parts: list[Any] = [
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
        integ = self.integrity
        record = codec.checkpoint_record(parts) if integ is None else integ.signed_cp(thread_id, ns, cid, parts)
        head: list[Any] = self._header(thread_id) + [
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
        cleaned = yield Call("put", keys, head + args, self.wait)
        if cleaned == Put.STREAMS_MOVED:
            # a stream this worker appended to changed or went since it last saw it (another
            # worker wrote the channel): nothing was written; new streams cannot conflict
            args, appends = self._blob_args(thread_id, ns, serialized, False)
            cleaned = yield Call("put", keys, head + args, self.wait)
        if cleaned == Put.THREAD_GONE:
            self.streams.drop_thread(thread_id)
            raise self._evicted(
                thread_id, f"put continues from checkpoint {parent!r}, which the thread no longer holds"
            )
        for a, (ch, *_rest) in appends:
            self.streams.put((thread_id, ns, ch), a.known)
        if cleaned == Put.PRUNE_IN_PAGES:
            # history="latest" on a thread too large to clean in one bounded call (written
            # with "full" before): prune it in pages; later puts keep it latest-only
            yield from self._plan_prune_paged(thread_id)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}

    def _encode_checkpoint(
        self, c: dict[str, Any], versions: dict[str, Any], md: CheckpointMetadata
    ) -> tuple[bytes, bytes, bytes, bytes, Any]:
        """A put's checkpoint (without its values) and metadata as the record stores them:
        (checkpoint type, bytes, metadata type, bytes, the filter part)."""
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
        return cp_type, cp_bytes, md_type, md_bytes, flt

    def _serialize_values(self, new_versions: ChannelVersions, values: dict[str, Any]) -> list[Serialized]:
        """Each new channel version with its value serialized (None: the channel holds none)."""
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
        return serialized

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
        integ = self.integrity
        extra = len(VALUE_MARK) + TAG if integ is not None else 0
        # with a key: the values' place (kind, thread, namespace) hashed once for them all, and
        # each tag computed here (At.tag_text's steps, inline: a put tags a few values)
        at = integ.place(thread_id, ns).v if integ is not None else None
        signing: Any = None
        pk: Any = None
        if at is not None:
            signing, pk = at.signing, codec.packer()
        for item in serialized:
            ch, ch_e, v, typed = item
            if typed is None:
                continue
            args.append(ch_e + v)
            app, known = None, None
            if self.compress:
                # a value too small to encode never reads the cache (most channels, most puts)
                big = len(typed[1]) >= values_.MIN_ENCODED
                known = self.streams.get((thread_id, ns, ch)) if cached and big else None
                t, stored, app = values_.encode_channel_parts(typed[0], typed[1], ch_e, known, extra, at is not None)
                if app is not None:
                    appends.append((app, item))
            else:
                values_.check_type(typed[0])
                t, stored = typed
            if at is not None:
                # a stream value's tag covers its ops and a hash of its stream (its running hash:
                # only its new bytes hashed), the others' what is stored
                covered, hashed = stored, False
                if app is not None:
                    nk = app.known
                    covered, st = values_.stream_covered(nk.ops, nk.stream, known and known.stream, stored)
                    if st is not nk.stream:
                        app.known = values_.Known(st, nk.ops, nk.value)
                    hashed = st.hashed
                h = signing.copy()
                h.update(pk.pack((ch, v, t))[1:])  # the place after its head, as At.tag
                h.update(covered)
                # the tag's bytes before the type (join_value, inline)
                rec = codec.blob_record(VALUE_MARK + h.digest() + t if t else join_value(t, h.digest()), stored)
                if len(rec) <= MINE_MAX:
                    # remembered: a read of this value, as signed, needs no MAC (At.mine)
                    at.mine[ch] = (v, rec, hashed)
                args.append(rec)
                continue
            args.append(codec.blob_record(t, stored))
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
        # with a key: the writes' place (kind, thread, namespace, checkpoint) hashed once for them all
        at = self.integrity.at(9, ("w", thread_id, ns, cid)) if self.integrity is not None else None
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
            ch_b, idx_b = ch.encode(), b"%d" % widx
            if at is not None:
                ty_b = join_type(ty_b, at.tag((task_b, idx_b, ch_b, path_b, ty_b), data))
            record = codec.write_record(task_b, ch_b, ty_b, data, path_b, idx_b)
            argv += [tag + _idx8(widx), record]
        if len(argv) == fixed:
            return None
        argv[fixed - 1] = (len(argv) - fixed) // 2
        if self.ttl.ttl_ms == 0:
            # the steady state: 2 keys instead of 11; nil = nothing written, the thread's
            # index or expiry needs the full call (e.g. its first write, before any put)
            stored = yield Call("put_writes+lean", self.keys.lean_keys(thread_id), argv, self.wait)
            if stored is not None:
                return None
        if (yield Call("put_writes", self.keys.thread_keys(thread_id), argv, self.wait)) == PutWrites.FORGOTTEN:
            self.streams.drop_thread(thread_id)
            raise self._evicted(thread_id, f"put_writes to checkpoint {cid!r}: the thread lost a key and was forgotten")
        return None

    # ---- pinning -------------------------------------------------------------------
    def _plan_pin(self, thread_id: Any, pinned: bool) -> Plan[bool]:
        tid = normalize_thread_id(thread_id)
        reply = yield Call("pin", self.keys.thread_keys(tid), self._header(tid) + ["1" if pinned else "0"])
        return bool(reply == Pin.DONE)




def _put_input(
    config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
) -> tuple[str, str, str, str, dict[str, Any], dict[str, Any], dict[str, Any], CheckpointMetadata]:
    """put's arguments checked (a clear error before anything is sent): thread id, namespace,
    parent id, checkpoint id, the checkpoint without its values (a copy), its values, its
    channel versions, and the metadata the checkpoint stores (the config's merged in)."""
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
    return thread_id, ns, parent, cid, c, values, versions, md
