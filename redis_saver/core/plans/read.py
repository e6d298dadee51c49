"""The plans that read: get_tuple, list (one thread or all), DeltaChannel history."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
)

from ...errors import DamagedThreadError, IntegrityError, ParentCycleError
from ...keys import dec_str
from .. import codec
from .. import values as values_
from ..integrity import split_type

if TYPE_CHECKING:
    pass

from . import budgets as B
from .common import (
    Call,
    Out,
    Plan,
    PlanBase,
    _configurable,
    _list_bounds,
    _ReplyBlobs,
    _sequence,
    _str,
    _thread_id,
    _walked,
)


class ReadPlans(PlanBase):
    """get_tuple, list and get_delta_channel_history."""

    # ---- get_tuple -----------------------------------------------------------------
    def _plan_get_tuple(self, config: RunnableConfig) -> Plan[CheckpointTuple | None]:
        conf = _configurable(config)
        thread_id = _thread_id(conf)
        ns = _str(conf.get("checkpoint_ns", "") or "", "checkpoint_ns")
        cid = get_checkpoint_id(config) or ""
        _str(cid, "checkpoint_id")
        name, refresh = self._read_script("get_tuple")
        args = self._header(thread_id, refresh) + [ns, cid]
        # the streams held: the script leaves out the frames the cache has (lua/_lib_values.lua)
        held = self.streams.held(thread_id)
        args.append(len(held))
        for sid, st in held.items():
            args += (sid, len(st.raw))
        reply = yield from self._read(Call(name, self.keys.thread_keys(thread_id), args))
        if reply is None:
            return None
        cid_b, raw, values_at, writes, streams, blobs = _unflatten_tuple(reply)
        if cid and self.integrity is not None and cid_b.decode() != cid:
            raise IntegrityError(f"get_tuple of checkpoint {cid!r} answered with {cid_b!r}")
        return self._tuple(
            thread_id, ns, cid_b.decode(), raw, values_at, writes,
            _ReplyBlobs(blobs, values_.decode_streams(streams, self.streams, thread_id, held)), remember=True,
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
            page = B.PAGE_SIZE if remaining is None else min(remaining, B.PAGE_SIZE)
            reply = yield from self._read(
                Call(
                    name,
                    self.keys.thread_keys(thread_id),
                    self._header(thread_id, refresh) + [index, upper, lower, page, B.SCAN_BUDGET, *fargs],
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
        return _ReplyBlobs(reply[2], values_.decode_streams(reply[1], self.streams, thread_id))

    def _plan_list_all(self, fargs: list[bytes], before_id: str | None, limit: int | None) -> Plan[None]:
        threads = yield from self._plan_live_threads()
        if not threads:
            return
        bounds = _list_bounds(None, None, before_id)
        assert bounds is not None
        index, upper, lower = bounds
        page = B.PAGE_SIZE if limit is None else min(limit, B.PAGE_SIZE)
        name, refresh = "list", False
        found: list[CheckpointTuple] = []
        pending = [(t, upper, 0) for t in threads]
        while pending:
            calls = [
                Call(
                    name,
                    self.keys.thread_keys(t),
                    self._header(t, refresh) + [index, up, lower, page, B.SCAN_BUDGET, *fargs],
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
        if self.integrity is not None:
            # the script walks the parent links itself, unchecked: with a key, the walk goes
            # through checked checkpoints, one get_tuple each (BaseCheckpointSaver's own way)
            return (yield from self._plan_delta_walk(config, chans))
        name, refresh = self._read_script("delta_history")
        keys, header = self.keys.thread_keys(thread_id), self._header(thread_id, refresh)
        writes: dict[str, list[tuple[str, str, Any]]] = {c: [] for c in chans}
        result: dict[str, DeltaChannelHistory] = {}
        pages: list[list[list[bytes]]] = []  # each call's ancestors, newest first
        walked: set[bytes] = set()
        wanted, cont = dict.fromkeys(chans), "0"
        while True:
            reply = yield from self._read(Call(name, keys, [*header, ns, cid, cont, B.WALK_BUDGET, *wanted]))
            ancestors, seeds, nxt, ids = reply[:4]
            if cont == "1" and not ancestors:
                # the ancestor this continuation starts at is gone: the thread was forgotten (or
                # deleted) between two calls of the walk; a history without its seed would
                # rebuild a wrong state, so the answer is the absent thread's
                return {c: {"writes": []} for c in chans}
            streams = values_.decode_streams(reply[4] if len(reply) > 4 else [], self.streams, thread_id)
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
                    ty = split_type(ty)[0]
                    writes[ch.decode()].append((tid.decode(), ch.decode(), self._load(ty, data)))
        for c in chans:
            result.setdefault(c, {"writes": writes[c]})
        return {c: result[c] for c in chans}


    def _plan_delta_walk(self, config: RunnableConfig, chans: list[str]) -> Plan[dict[str, DeltaChannelHistory]]:
        """get_delta_channel_history over checked checkpoints: the target, then its parents one
        get_tuple at a time (each record's parent link is under its tag), as
        ``BaseCheckpointSaver.get_delta_channel_history`` walks them."""
        collected: dict[str, list[Any]] = {c: [] for c in chans}
        seeds: dict[str, Any] = {}
        remaining = set(chans)
        walked: set[str] = set()
        target = yield from self._plan_get_tuple(config)
        cursor = target.parent_config if target is not None else None
        while cursor is not None and remaining:
            cid = cursor["configurable"]["checkpoint_id"]
            if cid in walked:
                raise ParentCycleError(f"the parent chain returns to {cid!r}")
            walked.add(cid)
            tup = yield from self._plan_get_tuple(cursor)
            if tup is None:
                break
            for w in reversed(tup.pending_writes or []):
                if w[1] in remaining:
                    collected[w[1]].append(w)
            for ch in list(remaining):
                if ch in tup.checkpoint["channel_values"]:
                    seeds[ch] = tup.checkpoint["channel_values"][ch]
                    remaining.discard(ch)
            cursor = tup.parent_config
        out: dict[str, DeltaChannelHistory] = {}
        for ch in chans:
            entry: DeltaChannelHistory = {"writes": list(reversed(collected[ch]))}
            if ch in seeds:
                entry["seed"] = seeds[ch]
            out[ch] = entry
        return out


def _unflatten_tuple(reply: list[Any]) -> tuple[Any, Any, list[Any], list[Any], list[list[Any]], list[Any]]:
    """get_tuple.lua's flat reply (one array: nested ones cost the server a reply block each) as
    (checkpoint id, record, channel / blob position pairs, write records, streams, blobs)."""
    n = reply[2]
    values_at = reply[3:3 + n]
    i = 3 + n
    n = reply[i]
    writes = reply[i + 1:i + 1 + n]
    i += 1 + n
    streams = []
    for _ in range(reply[i]):
        f = reply[i + 3]
        streams.append(reply[i + 1:i + 3] + reply[i + 4:i + 4 + f])
        i += 3 + f
    return reply[0], reply[1], values_at, writes, streams, reply[i + 1:]
