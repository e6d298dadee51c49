"""The plans that delete, prune, copy and rewrite threads, each in bounded script calls."""

from __future__ import annotations

import bisect
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import CopyConflictError
from ...keys import dec_first, dec_str
from .. import codec
from .. import values as values_
from ..replies import DeleteRuns, DeleteRunsFinish, Export, Import, Prune, Rewrite
from ._resign import Resign

if TYPE_CHECKING:
    pass

from . import budgets as B
from .common import (
    Call,
    Plan,
    PlanBase,
    _sequence,
    _walked,
    normalize_thread_id,
)


@dataclass
class RewriteStats:
    """What ``rewrite_values`` did to one thread."""

    thread_id: str
    values: int = 0  # value records replaced
    bytes_before: int = 0  # their raw records' bytes
    bytes_after: int = 0  # the new records' and the stream frames' bytes




class LifecyclePlans(PlanBase):
    """delete_thread, delete_for_runs, prune, copy_thread, rewrite_values."""

    # ---- deletes, prune, copy ------------------------------------------------------
    def _plan_delete_thread(self, thread_id: Any) -> Plan[None]:
        tid = normalize_thread_id(thread_id)
        self.streams.drop_thread(tid)
        yield Call("delete_thread", self.keys.thread_keys(tid), self._header(tid))

    def _plan_delete_for_runs(self, run_ids: Sequence[str]) -> Plan[int]:
        runs = [str(r) for r in _sequence(run_ids, "run_ids", "run ids")]
        if not runs:
            return 0
        threads = yield from self._plan_live_threads(runs)
        if not threads:
            return 0
        replies = yield [
            Call("delete_runs", self.keys.thread_keys(t), [*self._header(t), "all", B.WORK_BUDGET, *runs])
            for t in threads
        ]
        total = 0
        for t, r in zip(threads, replies, strict=True):
            total += (yield from self._plan_delete_runs_paged(t, runs)) if r[0] == DeleteRuns.PAGED else int(r[0])
        return total

    def _plan_delete_runs_paged(self, thread_id: str, runs: list[str]) -> Plan[int]:
        """delete_for_runs on a thread too large for one bounded call (see delete_runs.lua)."""
        keys, head = self.keys.thread_keys(thread_id), self._header(thread_id)
        deleted, candidates = 0, set()
        while True:
            n, more, fields = yield Call("delete_runs", keys, [*head, "drop", B.WORK_BUDGET, *runs])
            deleted += int(n)
            candidates.update(fields)
            if more != DeleteRuns.MORE:
                break
        emptied = yield Call("delete_runs", keys, [*head, "finish", B.WORK_BUDGET])
        if int(emptied) != DeleteRunsFinish.EMPTIED:
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
                cursor, refs = yield Call("gc", keys, [*head, "refs", ns_e, cursor, B.WORK_BUDGET])
                fields.difference_update(refs)
                if not cursor:
                    break
            gone = sorted(fields)
            for i in range(0, len(gone), B.WORK_BUDGET):
                yield Call("gc", keys, [*head, "hdel", *gone[i : i + B.WORK_BUDGET]])

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
            Call("prune", self.keys.thread_keys(t), [*self._header(t), strategy, "all", B.WORK_BUDGET]) for t in tids
        ]
        total = 0
        for t, r in zip(tids, replies, strict=True):
            total += (yield from self._plan_prune_paged(t)) if r[0] == Prune.PAGED else int(r[0])
        return total

    def _plan_prune_paged(self, thread_id: str) -> Plan[int]:
        """prune(keep_latest) of a thread too large for one bounded call, step by step (see
        prune.lua): every call examines at most WORK_BUDGET checkpoints or writes."""
        keys, head = self.keys.thread_keys(thread_id), self._header(thread_id)

        def step(name: str, *args: Any) -> Call:
            return Call("prune", keys, [*head, "keep_latest", name, B.WORK_BUDGET, *args])

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
                window = order[at : at + B.WORK_BUDGET]
                more = "1" if at + B.WORK_BUDGET < len(order) else "0"
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
        budget = [B.WORK_BUDGET, B.SNAPSHOT * B.COPY_FIELDS, 2 * B.COPY_BYTES]
        reply = yield Call("export", src_keys, [*self._header(src), "all", *budget])
        if reply[0] == Export.ALL:
            streams, records = _split_blobs(reply[2])
            # only the streams some record names (a stream a replaced record left counted
            # stays in the source until the thread goes; the copy need not carry it), and the
            # checkpoints oldest first, as the pages give them
            named = {_stream_dir(f, b) for f, b in codec.pairs(records)}
            streams = {d: p for d, p in streams.items() if d in named}
            cps = sorted(codec.pairs(reply[1]), key=lambda fr: fr[0][_after_ns(fr[0]) :] + fr[0])
            flat = [x for pair in cps for x in pair]
            yield from self._plan_import(dst, self._copy_ids(src, dst), streams, records, reply[3], flat, True, True)
            return None
        for _ in range(B.COPY_ATTEMPTS):
            if (yield from self._plan_copy_paged(src, dst)):
                return None
        raise CopyConflictError(
            f"copy_thread({src!r}, {dst!r}): the source changed destructively (prune, delete_for_runs, "
            f"delete, expiry, a re-put) during each of {B.COPY_ATTEMPTS} attempts; nothing was copied"
        )

    def _plan_copy_paged(self, src: str, dst: str) -> Plan[bool]:
        """One attempt at a paged copy; False (the target removed again) when the source
        changed destructively meanwhile."""
        src_keys, ids = self.keys.thread_keys(src), self._copy_ids(src, dst)
        # the target is checked first: a refused copy writes nothing, not even the guard
        yield from self._plan_import(dst, ids, {}, [], [], [], True, False)
        guard = yield Call("import", src_keys, [*self._header(src), "guard", secrets.randbelow(9 * 10**15) + 10**15])
        if guard is None:  # the source is gone: nothing to copy
            return True
        held: dict[bytes, bytes] = {}  # source stream directory field -> the directory the target holds
        imported: set[bytes] = set()  # source blob fields the target holds
        after, upto, first = b"", b"", True
        while True:
            args: list[Any] = [
                *self._header(src), "page", guard, after, upto, B.WORK_BUDGET, B.COPY_FIELDS, B.COPY_BYTES
            ]
            for d, n in held.items():
                args += [d, n]
            reply = yield Call("export", src_keys, args)
            if reply[0] != Export.OK:
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

    def _copy_ids(self, src: str, dst: str) -> _CopyIds:
        """A copy's ids; with a key, what checks its records against ``src`` and signs them for ``dst``."""
        return _CopyIds(None if self.integrity is None else Resign(self.integrity, src, dst))

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
        if ids.resign is not None:
            rs = ids.resign
            rs.learn(streams)
            writes = [x if i % 2 == 0 else rs.write(writes[i - 1], x) for i, x in enumerate(writes)]
            cps = [x if i % 2 == 0 else rs.checkpoint(cps[i - 1], x) for i, x in enumerate(cps)]
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
            if not calls or (fields and (fields + n > B.COPY_FIELDS or size + nbytes > B.COPY_BYTES)):
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
            if (yield Call("import", keys, args)) != Import.WRITTEN:
                raise CopyConflictError(
                    f"copy_thread into {dst!r}: the target was deleted, expired or written by another "
                    "writer while the copy ran"
                )
        return None

    # ---- a thread written whole by put / put_writes (the command-line tool) ----------
    def _plan_staged(self, thread_id: str, step: str, token: str) -> Plan[Import]:
        """import.lua's "stage" / "reveal" / "abort" of a thread written by put and put_writes
        between them, invisible to reads until "reveal" makes it visible whole in one call:
        stage returns WRITTEN, or REDONE when it removed an earlier unfinished one (raises
        ThreadExistsError on a thread that exists); reveal and abort WRITTEN, or NOT_WRITTEN
        when the thread no longer holds ``token`` (deleted, expired or staged again meanwhile)."""
        tid = normalize_thread_id(thread_id)
        reply = yield Call("import", self.keys.thread_keys(tid), [*self._header(tid), step, token])
        return Import(int(reply))

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
            cursor, page = yield Call("rewrite", keys, [*head, "scan", cursor, B.EXPORT_COUNT, values_.MIN_ENCODED])
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
                for batch in _batches(items, B.REWRITE_BYTES):
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
                    if int(n) == Rewrite.STREAMS_MOVED:
                        ok = False  # a stream changed under us: this channel again, new streams
                        break
                    stats.values += int(n)
                if ok:
                    break
        return stats



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

    __slots__ = ("token", "sids", "used", "resign")

    def __init__(self, resign: Resign | None = None) -> None:
        self.resign = resign
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
        """A value record, naming the copy's id of its stream if it is a stream record (with a
        key: checked where it was and signed for the target)."""
        d = _stream_dir(f, rec)
        if self.resign is not None:
            rec = self.resign.blob(f, rec, d)
        if d is None:
            return rec
        type_, data = codec.unpack_blob(rec)
        parts = codec.unpack(data)
        parts[0] = self._sid(d, parts[0])
        return codec.blob_record(type_, codec.pack(parts))

