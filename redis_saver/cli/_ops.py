"""What the CLI does, without the CLI: thread enumeration, summaries, copying checkpoints.

Everything here goes through the saver's public API (``list``, ``get_tuple``, ``put``,
``put_writes``, ...), the documented ``KeySchema`` helpers (``thread_keys``, ``index_keys``,
``scan_pattern``) and the ``_plan_live_threads`` plan; it never spells a key name or reads a
stored record, so it keeps working while the storage layout changes underneath.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP, CheckpointTuple
from redis.crc import key_slot

from redis_saver._base import _counter

SLOT_BATCH = 512  # slots queried per pipeline while streaming thread ids


# --------------------------------------------------------------------------- threads


def iter_thread_ids(saver: Any, match: str | None = None, batch: int = SLOT_BATCH) -> Iterator[str]:
    """Live thread ids, streamed slot batch by slot batch (never all ids in memory at once).

    Runs the saver's own ``_plan_live_threads`` plan over a few hundred slots at a time
    (``_plan_index_slots`` says which); ids come out sorted within each batch of slots. ``match``
    is a glob (``fnmatch``, case-sensitive) on the thread id.
    """
    drv = saver._driver
    slots = drv.run(saver._plans._plan_index_slots())
    for i in range(0, len(slots), batch):
        found = drv.run(saver._plans._plan_live_threads(slots=slots[i : i + batch]))
        for t in sorted(found):
            if match is None or fnmatch.fnmatchcase(t, match):
                yield t


def thread_config(thread_id: str, ns: str | None = None, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread_id}
    if ns is not None:
        conf["checkpoint_ns"] = ns
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def own_keys(saver: Any, thread_id: str) -> list[bytes]:
    """The thread's own keys (its ``thread_keys`` minus the shared slot-index keys)."""
    keys = saver.keys.thread_keys(thread_id)
    shared = set(saver.keys.index_keys(key_slot(keys[0])))
    return [k for k in keys if k not in shared]


def expiry_ms(saver: Any, thread_id: str) -> int | None:
    """Milliseconds until the thread expires; None = no expiry (pinned, or no TTL); -2 = gone."""
    keys = own_keys(saver, thread_id)
    pipe = saver.client.pipeline(transaction=False)
    for k in keys:
        pipe.pttl(k)
    ttls = [int(x) for x in pipe.execute()]
    live = [t for t in ttls if t != -2]
    if not live:
        return -2
    if all(t == -1 for t in live):
        return None
    return max(t for t in live if t >= 0)  # every key of a thread shares one expiry


def memory_bytes(saver: Any, keys: Sequence[bytes]) -> int:
    pipe = saver.client.pipeline(transaction=False)
    for k in keys:
        pipe.execute_command("MEMORY USAGE", k, "SAMPLES", "0")
    return sum(int(x or 0) for x in pipe.execute())


@dataclass
class ThreadSummary:
    thread_id: str
    namespaces: dict[str, int] = field(default_factory=dict)  # ns -> checkpoints
    checkpoints: int = 0
    pending_writes: int = 0
    latest_id: str | None = None
    latest_step: int | None = None
    latest_ts: str | None = None
    bytes: int = 0
    expires_in_ms: int | None = None  # None: no expiry (pinned or no TTL)
    pinned: bool | None = None  # None: unknown through the public API

    def as_json(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "namespaces": self.namespaces,
            "checkpoints": self.checkpoints,
            "pending_writes": self.pending_writes,
            "bytes": self.bytes,
            "expires_in_ms": self.expires_in_ms,
            "pinned": self.pinned,
            "latest": {"checkpoint_id": self.latest_id, "step": self.latest_step, "ts": self.latest_ts},
        }


def summarize(saver: Any, thread_id: str, with_bytes: bool = True) -> ThreadSummary | None:
    """Counts, latest step/time, bytes and expiry of one thread; None if it has no checkpoint.

    Reads the thread through ``list`` (which decodes every checkpoint: the public API has no
    cheaper count), ``MEMORY USAGE`` and ``PTTL`` of its own keys. ``pinned`` stays None
    when the thread has no expiry: pinned and "no TTL configured" look the same from here.
    """
    s = ThreadSummary(thread_id)
    for t in saver.list(thread_config(thread_id)):
        ns = t.config["configurable"]["checkpoint_ns"]
        s.namespaces[ns] = s.namespaces.get(ns, 0) + 1
        s.checkpoints += 1
        s.pending_writes += len(t.pending_writes or ())
        if s.latest_id is None:
            s.latest_id = t.config["configurable"]["checkpoint_id"]
            s.latest_step = (t.metadata or {}).get("step")
            s.latest_ts = t.checkpoint.get("ts")
    if not s.checkpoints:
        return None
    if with_bytes:
        s.bytes = memory_bytes(saver, own_keys(saver, thread_id))
        s.expires_in_ms = expiry_ms(saver, thread_id)
        if s.expires_in_ms == -2:
            return None
        if s.expires_in_ms is not None:
            s.pinned = False
    return s


def thread_exists(saver: Any, thread_id: str) -> bool:
    return next(iter(saver.list(thread_config(thread_id), limit=1)), None) is not None


def count_checkpoints(saver: Any, thread_id: str) -> int:
    return sum(1 for _ in saver.list(thread_config(thread_id)))


# --------------------------------------------------------------------------- key kinds


def key_kind(saver: Any, key: bytes) -> str:
    """A label for a key under the prefix: the last part of its name (``cp``, ``blob``...),
    ``index <part>`` for slot-index keys (recognised with ``KeySchema.index_keys``)."""
    close = key.rfind(b"}")
    if close < 0:
        return key[len(saver.keys.prefix) + 1 :].decode(errors="replace") or "?"
    suffix = key[close + 1 :].lstrip(b":").decode(errors="replace") or "?"
    if key in saver.keys.index_keys(key_slot(key)):
        return "index " + suffix
    return suffix


# --------------------------------------------------------------------------- copying


@dataclass
class Item:
    """One checkpoint as written by ``put`` and ``put_writes``: enough to recreate it."""

    thread_id: str
    ns: str
    checkpoint_id: str
    parent_id: str | None
    checkpoint: dict[str, Any]  # with channel_values limited to the channels in new_versions
    metadata: dict[str, Any]
    new_versions: dict[str, Any]
    writes: list[tuple[str, str, Any]]  # (task_id, channel, value), in the order list() gives


def _int_version(x: Any) -> Any:
    """An int version (savers whose ``get_next_version`` counts with ints, such as
    langgraph-checkpoint-plainredis) in the zero-padded string form; anything else as it is."""
    return f"{x:032}.{0:016}" if isinstance(x, int) and not isinstance(x, bool) else x


def padded_version(x: Any) -> Any:
    """A channel version in the form LangGraph's other savers make and parse
    (``"<counter, 32 digits>.<tail>"``: SqliteSaver and PostgresSaver read the part before the
    dot as an int): redis_saver's short versions (``"216.c6PpAn"``, counter 16) keep their tail
    (``"000...0016.c6PpAn"``), int and zero-padded ones their counter. The counters and the
    tails keep their order, so versions keep theirs: a short version sorts above every
    zero-padded one of the same counter, and its tail (6 base-62 letters or digits) above every
    tail of those, which begin with ``0.`` or ``00`` (a tail ``000000`` aside, one in 62**6)."""
    x = _int_version(x)
    if not isinstance(x, str):
        return x
    head, dot, tail = x.partition(".")
    return f"{_counter(x):032}{dot}{tail}" if head else x


def _with_versions(checkpoint: Any, version: Callable[[Any], Any]) -> dict[str, Any]:
    out = dict(checkpoint)
    out["channel_versions"] = {c: version(x) for c, x in (checkpoint.get("channel_versions") or {}).items()}
    out["versions_seen"] = {
        node: {c: version(x) for c, x in seen.items()} for node, seen in (checkpoint.get("versions_seen") or {}).items()
    }
    return out


def our_versions(checkpoint: Any) -> dict[str, Any]:
    """The checkpoint with int channel versions (savers whose ``get_next_version`` counts with
    ints, such as langgraph-checkpoint-plainredis) written in string form, in the same order.
    LangGraph compares a channel's old and new versions, so a migrated thread must go on with
    versions of the type this saver makes."""
    return _with_versions(checkpoint, _int_version)


def padded_versions(checkpoint: Any) -> dict[str, Any]:
    """The checkpoint with every channel version in the other savers' form (``padded_version``):
    given redis_saver's short versions, they would count on from the wrong number
    (``int("216") + 1``) and make versions that sort below the ones they follow, so the thread's
    channels would stop advancing."""
    return _with_versions(checkpoint, padded_version)


def items_from_tuples(tuples: Sequence[CheckpointTuple], *, other_saver: bool = False) -> list[Item]:
    """Turn one thread's tuples (any order) into items oldest first (parents before children).

    A checkpoint's new versions are the channel versions that differ from its parent's (when
    the parent is among ``tuples``), else all of them. For redis_saver (and the export stream)
    only their values travel, as redis_saver stores values per version. For another saver
    (``other_saver``: SqliteSaver, PostgresSaver) the items carry what LangGraph hands those
    savers' ``put``: every value of the checkpoint (SqliteSaver keeps them all in each row,
    PostgresSaver its primitives) but the DeltaChannel snapshots an earlier checkpoint took, and
    versions in their form (``padded_versions``).
    """
    ordered = sorted(tuples, key=lambda t: t.config["configurable"]["checkpoint_id"])
    versions: dict[tuple[str, str], dict[str, Any]] = {}
    out: list[Item] = []
    for t in ordered:
        conf = t.config["configurable"]
        ns, cid = conf.get("checkpoint_ns", "") or "", conf["checkpoint_id"]
        parent_id = t.parent_config["configurable"].get("checkpoint_id") if t.parent_config else None
        cp = padded_versions(t.checkpoint) if other_saver else our_versions(t.checkpoint)
        cv = dict(cp["channel_versions"])
        pv = versions.get((ns, parent_id)) if parent_id else None
        new = dict(cv) if pv is None else {c: v for c, v in cv.items() if pv.get(c) != v}
        values = t.checkpoint.get("channel_values") or {}
        if other_saver:
            cp["channel_values"] = {c: v for c, v in values.items() if c in new or not _is_delta_snapshot(v)}
        else:
            cp["channel_values"] = {c: values[c] for c in new if c in values}
        versions[(ns, cid)] = cv
        out.append(
            Item(
                thread_id=conf["thread_id"],
                ns=ns,
                checkpoint_id=cid,
                parent_id=parent_id or None,
                checkpoint=cp,
                metadata=dict(t.metadata or {}),
                new_versions=new,
                writes=[(w[0], w[1], w[2]) for w in (t.pending_writes or [])],
            )
        )
    return out


def write_item(saver: Any, item: Item) -> int:
    """``put`` one checkpoint (its id, parent and metadata preserved), then its pending
    writes; returns the number of writes stored."""
    conf = thread_config(item.thread_id, item.ns, item.parent_id or None)
    if item.parent_id is None:
        conf["configurable"].pop("checkpoint_id", None)
    saver.put(conf, item.checkpoint, item.metadata, item.new_versions)
    write_pending(saver, thread_config(item.thread_id, item.ns, item.checkpoint_id), item.writes)
    return len(item.writes)


def write_pending(saver: Any, config: dict[str, Any], writes: Sequence[tuple[str, str, Any]]) -> None:
    """Store pending writes so that they read back in the same order.

    Reads return writes in ``(task_path, task_id, idx)`` order but do not expose the task
    path; if the tasks already come in task-id order, they are stored with an empty path,
    else with order-preserving synthetic paths (``~000000``, ``~000001``...). Regular writes
    of a task go in one ``put_writes`` call (indices 0..n-1, in order), special ones
    (``__interrupt__``, ``__error__``, ...) one call each (their index is fixed).
    """
    groups: list[tuple[str, list[tuple[str, Any]]]] = []
    for task_id, channel, value in writes:
        if groups and groups[-1][0] == task_id:
            groups[-1][1].append((channel, value))
        else:
            groups.append((task_id, [(channel, value)]))
    ids = [g[0] for g in groups]
    synthetic = ids != sorted(ids)
    for i, (task_id, ws) in enumerate(groups):
        path = f"~{i:06d}" if synthetic else ""
        regular = [(c, v) for c, v in ws if c not in WRITES_IDX_MAP]
        if regular:
            saver.put_writes(config, regular, task_id, path)
        for c, v in ws:
            if c in WRITES_IDX_MAP:
                saver.put_writes(config, [(c, v)], task_id, path)


def tuple_view(t: CheckpointTuple, versions: Callable[[Any], dict[str, Any]] = our_versions) -> tuple[Any, ...]:
    """What two savers must agree on for one checkpoint (its versions as ``versions`` writes them)."""
    return (
        t.config["configurable"].get("thread_id"),
        t.config["configurable"].get("checkpoint_ns", "") or "",
        t.config["configurable"].get("checkpoint_id"),
        (t.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
        versions(t.checkpoint),
        t.metadata,
        [tuple(w) for w in (t.pending_writes or [])],
    )


def _is_delta_snapshot(v: Any) -> bool:
    return type(v).__name__ == "_DeltaSnapshot"  # langgraph.channels.delta (private class)


def _delta_only_diff(x: dict[str, Any], y: dict[str, Any]) -> bool:
    """Checkpoints equal but for DeltaChannel snapshots present on one side only.

    Savers that store a whole checkpoint per row (SqliteSaver) keep a DeltaChannel snapshot
    only in the checkpoint that took it; savers that store values per channel version
    (PostgresSaver, redis_saver) return it with every checkpoint at that version. LangGraph
    reads both to the same state (the snapshot, or the same value rebuilt from the writes).
    """
    vx, vy = x.get("channel_values") or {}, y.get("channel_values") or {}
    extra = set(vx) ^ set(vy)
    if not extra or not all(_is_delta_snapshot(vx.get(c, vy.get(c))) for c in extra):
        return False
    if {c: v for c, v in vx.items() if c not in extra} != {c: v for c, v in vy.items() if c not in extra}:
        return False
    def rest(cp: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in cp.items() if k != "channel_values"}

    return rest(x) == rest(y)


def diff_threads(
    a: Sequence[CheckpointTuple],
    b: Sequence[CheckpointTuple],
    notes: list[str] | None = None,
    versions: Callable[[Any], dict[str, Any]] = our_versions,
) -> list[str]:
    """Differences between two reads of one thread, checkpoint by checkpoint ([] = equal), the
    versions of both compared as ``versions`` writes them (``padded_versions`` for a thread
    migrated out of redis_saver, whose versions were rewritten so).

    A checkpoint that differs only by a DeltaChannel snapshot present on one side (see
    ``_delta_only_diff``) counts as equal; it is reported in ``notes``.
    """
    def key(t: CheckpointTuple) -> tuple[str, str]:
        conf = t.config["configurable"]
        return (conf.get("checkpoint_ns", "") or "", conf["checkpoint_id"])

    da, db = {key(t): t for t in a}, {key(t): t for t in b}
    out: list[str] = []
    for k in sorted(set(da) | set(db)):
        if k not in db:
            out.append(f"checkpoint {k[1]} (ns {k[0]!r}) missing in the target")
        elif k not in da:
            out.append(f"checkpoint {k[1]} (ns {k[0]!r}) only in the target")
        else:
            va, vb = tuple_view(da[k], versions), tuple_view(db[k], versions)
            names = ("thread", "ns", "id", "parent", "checkpoint", "metadata", "pending writes")
            bad = [n for n, x, y in zip(names, va, vb, strict=True) if x != y]
            if bad == ["checkpoint"] and _delta_only_diff(va[4], vb[4]):
                if notes is not None:
                    notes.append(f"checkpoint {k[1]} (ns {k[0]!r}): a DeltaChannel snapshot on one side only")
                continue
            if bad:
                out.append(f"checkpoint {k[1]} (ns {k[0]!r}) differs: {', '.join(bad)}")
    return out
