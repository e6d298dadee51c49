"""Worker loops and invariant checks shared by tests/scale and bench/failover.py.

Kept in a plain module (no pytest) so that ``multiprocessing`` spawn children and the benchmark can
import it. Checkpoints are synthetic: channel ``ch`` at version ``v`` always holds the value
``f"{ch}@{v}"``, so any checkpoint read back can be checked for missing or mismatched blobs.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

CHANNELS = ("a", "b", "c", "d")


def value_for(ch: str, version: Any) -> str:
    return f"{ch}@{version}"


def make_child(saver: Any, parent_versions: dict[str, Any], tag: str, step: int) -> tuple[dict, dict, dict]:
    """A child checkpoint of a parent with ``parent_versions``: bumps 1-2 channels.

    Returns (checkpoint, metadata, new_versions). ``channel_values`` holds *every* channel (as LangGraph
    passes it) but only the bumped ones are in ``new_versions``, so unchanged channels must be read back
    from blobs written by ancestors.
    """
    versions = dict(parent_versions)
    bumped = random.sample(CHANNELS, random.randint(1, 2)) if versions else list(CHANNELS)
    new_versions = {}
    for ch in bumped:
        versions[ch] = saver.get_next_version(versions.get(ch), None)
        new_versions[ch] = versions[ch]
    cp = empty_checkpoint()
    cp["id"] = str(uuid6())
    cp["channel_versions"] = versions
    cp["channel_values"] = {ch: value_for(ch, v) for ch, v in versions.items()}
    md = {"source": "loop", "step": step, "writer": tag}
    return cp, md, new_versions


def cfg(thread_id: str, checkpoint_id: str | None = None) -> dict:
    c: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}


@dataclass
class WorkerResult:
    puts: list[tuple[str, str, str]] = field(default_factory=list)  # (thread, cid, parent)
    writes: list[tuple[str, str, str, int, str, str]] = field(default_factory=list)  # thread, cid, task, idx, ch, val
    conflicts: int = 0
    errors: list[str] = field(default_factory=list)


def many_writers_worker(args: tuple) -> WorkerResult:
    """One process: ``n_ops`` read-latest / put-child / put_writes rounds on random threads."""
    redis_url, prefix, threads, n_ops, fencing, seed, deadline = args
    import redis_saver
    from redis_saver import RedisSaver

    random.seed(seed)
    tag = f"w{seed}"
    res = WorkerResult()
    with RedisSaver.from_conn_string(redis_url, prefix=prefix, fencing=fencing, socket_timeout=5, retries=0) as saver:
        for i in range(n_ops):
            if time.time() > deadline:
                res.errors.append(f"{tag}: deadline hit after {i} ops")
                break
            thread = random.choice(threads)
            latest = saver.get_tuple(cfg(thread))
            parent_id = latest.config["configurable"]["checkpoint_id"] if latest else None
            parent_versions = latest.checkpoint["channel_versions"] if latest else {}
            cp, md, nv = make_child(saver, parent_versions, tag, i)
            try:
                saver.put(cfg(thread, parent_id), cp, md, nv)
            except redis_saver.ConflictError:
                res.conflicts += 1
                continue
            res.puts.append((thread, cp["id"], parent_id or ""))
            # pending writes of one task against the new checkpoint, and (LangGraph-style) a
            # second task writing against the parent the worker read
            targets = [cp["id"]] + ([parent_id] if parent_id else [])
            for target in targets:
                task = uuid.uuid4().hex
                writes = [(ch, f"{tag}:{i}:{ch}:{task}") for ch in random.sample(CHANNELS, 2)]
                saver.put_writes(cfg(thread, target), writes, task)
                for idx, (ch, val) in enumerate(writes):
                    res.writes.append((thread, target, task, idx, ch, val))
    return res


def check_thread(saver: Any, thread: str, acked_puts: list[tuple[str, str, str]], acked_writes: list) -> dict:
    """Invariants of one thread; returns {'n': checkpoints, 'problems': [...]}."""
    problems: list[str] = []
    tuples = list(saver.list(cfg(thread)))
    ids = [t.config["configurable"]["checkpoint_id"] for t in tuples]
    if any(a <= b for a, b in zip(ids, ids[1:])):
        problems.append(f"{thread}: list() not strictly descending by id")
    present = set(ids)
    for t in tuples:
        if t.parent_config is not None:
            p = t.parent_config["configurable"]["checkpoint_id"]
            if p not in present:
                problems.append(f"{thread}: {t.config['configurable']['checkpoint_id']} has missing parent {p}")
    for _, cid, parent in acked_puts:
        if cid not in present:
            problems.append(f"{thread}: acknowledged put {cid} not listed")
    by_cid: dict[str, Any] = {}
    for cid in present | {c for _, c, *_ in acked_writes}:
        t = saver.get_tuple(cfg(thread, cid))
        if t is None:
            problems.append(f"{thread}: get_tuple({cid}) is None")
            continue
        by_cid[cid] = t
        got_id = t.config["configurable"]["checkpoint_id"]
        if got_id != cid:
            problems.append(f"{thread}: get_tuple({cid}) returned {got_id}")
        vals = t.checkpoint["channel_values"]
        for ch, v in t.checkpoint["channel_versions"].items():
            if vals.get(ch) != value_for(ch, v):
                problems.append(f"{thread}/{cid}: channel {ch}@{v} blob missing or wrong: {vals.get(ch)!r}")
    for _, cid, parent in acked_puts:
        t = by_cid.get(cid)
        if t is not None:
            got_parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else ""
            if got_parent != parent:
                problems.append(f"{thread}/{cid}: parent {got_parent!r}, put with {parent!r}")
    for _, cid, task, _idx, ch, val in acked_writes:
        t = by_cid.get(cid)
        if t is None:
            continue
        if (task, ch, val) not in t.pending_writes:
            problems.append(f"{thread}/{cid}: acknowledged write {task}/{ch} missing from pending_writes")
    return {"n": len(tuples), "tuples": tuples, "problems": problems}


def chain_from_latest(tuples: list) -> list[str]:
    """Follow parent links from the latest checkpoint to the root; the ids visited."""
    by_id = {t.config["configurable"]["checkpoint_id"]: t for t in tuples}
    if not tuples:
        return []
    cur: Any = tuples[0]
    out = []
    while cur is not None:
        cid = cur.config["configurable"]["checkpoint_id"]
        if cid in out:
            break  # cycle guard
        out.append(cid)
        cur = by_id.get(cur.parent_config["configurable"]["checkpoint_id"]) if cur.parent_config else None
    return out
