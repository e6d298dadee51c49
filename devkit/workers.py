"""Worker loops and invariant checks of tests/scale's many-writers and failover scenarios.

Kept in a plain module (no pytest) so that ``multiprocessing`` spawn children can import it.
Checkpoints are synthetic: channel ``ch`` at version ``v`` always holds the value ``f"{ch}@{v}"``,
so any checkpoint read back can be checked for missing or mismatched blobs.
"""

from __future__ import annotations

import functools
import itertools
import random
import sys
import time
import traceback
import uuid
from collections import Counter
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
    redis_url, prefix, threads, n_ops, fencing, seed, deadline, *rest = args
    together = rest[0] if rest else 0  # start once this many workers are ready (0: at once)
    import redis_saver
    from redis_saver import RedisSaver

    random.seed(seed)
    tag = f"w{seed}"
    res = WorkerResult()
    with RedisSaver.from_conn_string(redis_url, prefix=prefix, fencing=fencing, socket_timeout=5, retries=0) as saver:
        if together:
            # a start line: a spawned worker spends a second or more importing, so on a busy
            # machine one could finish its rounds before another begins (no contention at all)
            ready = f"{prefix}:test-start-line"
            saver.client.incr(ready)
            while int(saver.client.get(ready) or 0) < together and time.time() < deadline:
                time.sleep(0.005)
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
    if any(a <= b for a, b in itertools.pairwise(ids)):
        problems.append(f"{thread}: list() not strictly descending by id")
    present = set(ids)
    for t in tuples:
        if t.parent_config is not None:
            p = t.parent_config["configurable"]["checkpoint_id"]
            if p not in present:
                problems.append(f"{thread}: {t.config['configurable']['checkpoint_id']} has missing parent {p}")
    for _, cid, _parent in acked_puts:
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


# --------------------------------------------------------------------------- failover scenario

RETRYABLE_NAMES = (
    "ConnectionError", "TimeoutError", "ClusterDownError", "TryAgainError", "SlotNotCoveredError",
    "MovedError", "AskError", "ClusterError", "RedisClusterException", "ReplicationTimeoutError",
)  # fmt: skip


@dataclass
class FailoverStats:
    acked_puts: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # thread -> [(cid, t_ack)]
    acked_writes: dict[str, list[tuple[str, str, int, str, str]]] = field(default_factory=dict)
    errors: Counter = field(default_factory=lambda: Counter())
    unexpected: list[str] = field(default_factory=list)
    first_error: dict[str, float] = field(default_factory=dict)  # thread -> first failure time


class _Stop(Exception):
    pass


def _retrying(fn, thread: str, stats: FailoverStats, stop: Any, lock: Any) -> Any:
    """Call fn until it succeeds, retrying only errors where a retry is safe (put is idempotent by
    checkpoint id, put_writes by (task_id, idx)) -- what a user's loop would do."""
    import redis

    from redis_saver import ReplicationTimeoutError

    while True:
        if stop.is_set():
            raise _Stop
        try:
            return fn()
        except (redis.exceptions.RedisError, ReplicationTimeoutError) as e:
            name = type(e).__name__
            with lock:
                stats.errors[name] += 1
                stats.first_error.setdefault(thread, time.monotonic())
                if name not in RETRYABLE_NAMES and len(stats.unexpected) < 20:
                    stats.unexpected.append(f"{name}: {e}")
            time.sleep(0.02)


def failover_worker(
    url: str, prefix: str, thread: str, saver_kw: dict, stats: FailoverStats, stop: Any, lock: Any, shared: Any = None
) -> None:
    """Advance ``thread`` until ``stop``; each step: put a child, then put_writes. Uses its own saver
    (own client), or the ``shared`` saver every worker uses (one checkpointer per process)."""
    import contextlib

    from redis_saver import RedisSaver

    cm = (
        contextlib.nullcontext(shared)
        if shared is not None
        else RedisSaver.from_conn_string(url, prefix=prefix, **saver_kw)
    )
    with cm as saver:
        parent_id, versions, step = None, {}, 0
        try:
            while not stop.is_set():
                cp, md, nv = make_child(saver, versions, thread, step)
                c = cfg(thread, parent_id)
                _retrying(functools.partial(saver.put, c, cp, md, nv), thread, stats, stop, lock)
                with lock:
                    stats.acked_puts.setdefault(thread, []).append((cp["id"], time.monotonic()))
                task = uuid.uuid4().hex
                writes = [(ch, f"{thread}:{step}:{ch}") for ch in random.sample(CHANNELS, 2)]
                wc = cfg(thread, cp["id"])
                _retrying(functools.partial(saver.put_writes, wc, writes, task), thread, stats, stop, lock)
                with lock:
                    stats.acked_writes.setdefault(thread, []).extend(
                        (cp["id"], task, i, ch, v) for i, (ch, v) in enumerate(writes)
                    )
                parent_id, versions, step = cp["id"], cp["channel_versions"], step + 1
                time.sleep(0.005)
        except _Stop:
            pass


def run_failover(
    cluster: Any,
    *,
    wait_for_replicas: int = 0,
    n_threads: int = 6,
    warmup: float = 1.0,
    after: float = 1.5,
    restart: bool = True,
    client_kw: dict | None = None,
    prefix: str | None = None,
    fault: str = "kill",
    shared: bool = False,
    settle: float = 10.0,
) -> dict:
    """Workers write continuously through ``redis+cluster://``; ``kill -9`` the primary of the first
    worker's thread; wait for the promotion; restart the killed node (it rejoins as a replica, which
    ``wait_for_replicas=1`` needs); keep writing ``after`` s; stop; check every acknowledged write.

    ``fault="stop"``: SIGSTOP the primary instead (a hang: calls time out, no connection error), and
    SIGCONT it after the promotion instead of restarting it (it comes back believing it is the primary
    until it learns the new epoch: the split-brain window).

    After ``after`` s the workers go on until every thread that can make progress (all of them, but
    the victim's without a restart) has a put acknowledged after the fault and after its first
    error, or until ``settle`` s from the fault: on a loaded machine failure detection, the new
    epoch's gossip and the clients' slot-map refresh can take longer than ``after``, and a slow
    recovery must be measured as slow, not as none.

    Returns recovery timings (s, from the fault) and acknowledged-but-lost counts.
    """
    import threading

    from redis_saver import RedisSaver

    prefix = prefix or "fo" + uuid.uuid4().hex[:8]
    host, port = cluster.startup_nodes[0]
    url = f"redis+cluster://{host}:{port}"
    saver_kw = {
        "socket_timeout": 1.0,
        "socket_connect_timeout": 1.0,
        "wait_for_replicas": wait_for_replicas,
        "wait_timeout_ms": 500,
        **(client_kw or {}),
    }
    threads = [f"fo-{i}" for i in range(n_threads)]
    probe = RedisSaver(cluster.client(), prefix=prefix)
    primaries = {t: cluster.primary_for_key(probe.keys.thread_keys(t)[0]).port for t in threads}
    probe.client.close()
    victim = primaries[threads[0]]
    affected = [t for t in threads if primaries[t] == victim]

    stats, stop, lock = FailoverStats(), threading.Event(), threading.Lock()
    shared_cm = RedisSaver.from_conn_string(url, prefix=prefix, **saver_kw) if shared else None
    shared_saver = shared_cm.__enter__() if shared_cm is not None else None
    workers = [
        threading.Thread(
            target=failover_worker,
            args=(url, prefix, t, saver_kw, stats, stop, lock, shared_saver),
            name=t,
            daemon=True,
        )
        for t in threads
    ]
    for w in workers:
        w.start()
    time.sleep(warmup)
    # the fault strikes running workers: each has made its client and had a put acknowledged (on a
    # loaded machine a thread may not have started within the warmup, and a cluster client made
    # while a node is down or stopped cannot even connect)
    ready_by = time.monotonic() + 30.0
    while time.monotonic() < ready_by:
        with lock:
            if all(stats.acked_puts.get(t) for t in threads):
                break
        time.sleep(0.05)
    t_kill = time.monotonic()
    t_restarted = None
    if fault == "kill":
        cluster.kill_node(victim)
        cluster.wait_failover(victim)
        t_promoted = time.monotonic() - t_kill
        if restart:
            cluster.restart_node(victim)
            t_restarted = time.monotonic() - t_kill
    elif fault == "stop":
        import os
        import signal

        node = cluster.node(victim)
        os.kill(node.proc.pid, signal.SIGSTOP)
        try:
            _wait_promoted_without(cluster, victim)
            t_promoted = time.monotonic() - t_kill
        finally:
            os.kill(node.proc.pid, signal.SIGCONT)
        t_restarted = time.monotonic() - t_kill
        _wait_demoted(node)
    else:
        raise ValueError(fault)
    time.sleep(after)
    can_progress = [t for t in threads if t not in affected or restart or fault == "stop"]

    def acked_after_fault(t: str) -> list[float]:
        """When ``t``'s puts were acknowledged after the fault and after its first error (a put
        answered just before the fault may return just after it)."""
        since = max(t_kill, stats.first_error.get(t, t_kill))
        return [ts for _, ts in stats.acked_puts.get(t, []) if ts > since]

    while time.monotonic() < t_kill + settle:
        with lock:
            if all(acked_after_fault(t) for t in can_progress):
                break
        time.sleep(0.05)
    # where each worker that has not progressed since the fault is, now (for the failure message)
    frames = sys._current_frames()
    with lock:
        late = [t for t in can_progress if not acked_after_fault(t)]
    stalled_stacks = {
        w.name: "".join(traceback.format_stack(frames[w.ident])[-12:])
        for w in workers
        if w.name in late and w.ident in frames
    }
    stop.set()
    for w in workers:
        w.join(15)
    hung = [w.name for w in workers if w.is_alive()]
    if shared_cm is not None:
        shared_cm.__exit__(None, None, None)

    # recovery: first acknowledged put after the kill, per affected thread (the slowest one counts)
    rec, gaps = [], []
    for t in affected:
        after_kill = acked_after_fault(t)
        rec.append(min(after_kill) - t_kill if after_kill else float("inf"))
        times = [t_kill] + sorted(ts for _, ts in stats.acked_puts.get(t, []) if ts > t_kill)
        gaps.append(max(b - a for a, b in itertools.pairwise(times)) if len(times) > 1 else float("inf"))
    recovery = max(rec) if rec else float("nan")
    max_gap = max(gaps) if gaps else float("nan")
    # acks on the victim's slots once that worker saw its first error after the fault (a put answered
    # just before the kill may return just after it: that one is legitimately acknowledged)
    acked_affected_after_kill = sum(
        1
        for t in affected
        for _, ts in stats.acked_puts.get(t, [])
        if ts > max(t_kill, stats.first_error.get(t, float("inf")))
    )
    others_stalled = [
        t for t in threads if t not in affected and not any(ts > t_kill for _, ts in stats.acked_puts.get(t, []))
    ]

    # verification on a fresh client after the dust settled
    checker = RedisSaver(cluster.client(socket_timeout=5.0), prefix=prefix)
    checker_keys = checker.keys
    lost_puts, lost_writes, problems = 0, 0, []
    try:
        for t in threads:
            acked = stats.acked_puts.get(t, [])
            by_cid = {}
            for cid, _ in acked:
                tup = checker.get_tuple(cfg(t, cid))
                if tup is None:
                    lost_puts += 1
                    continue
                by_cid[cid] = tup
                vals = tup.checkpoint["channel_values"]
                for ch, v in tup.checkpoint["channel_versions"].items():
                    if vals.get(ch) != value_for(ch, v):
                        problems.append(f"{t}/{cid}: channel {ch}@{v} blob missing/wrong")
            for cid, task, _i, ch, v in stats.acked_writes.get(t, []):
                tup = by_cid.get(cid)
                if tup is not None and (task, ch, v) not in tup.pending_writes:
                    lost_writes += 1
            ids = [x.config["configurable"]["checkpoint_id"] for x in checker.list(cfg(t))]
            if any(a <= b for a, b in itertools.pairwise(ids)):
                problems.append(f"{t}: list() not strictly descending")
    finally:
        checker.client.close()
    return {
        "fault": fault,
        "shared": shared,
        "wait_for_replicas": wait_for_replicas,
        "victim": victim,
        "affected_threads": len(affected),
        "acked_puts": sum(len(v) for v in stats.acked_puts.values()),
        "acked_writes": sum(len(v) for v in stats.acked_writes.values()),
        "lost_puts": lost_puts,
        "lost_writes": lost_writes,
        "promoted_s": t_promoted,
        "restarted_s": t_restarted,
        "recovery_s": recovery,
        "max_gap_s": max_gap,
        "others_stalled": others_stalled,
        "stalled_stacks": stalled_stacks,
        "acked_affected_after_kill": acked_affected_after_kill,
        "errors": dict(stats.errors),
        "unexpected": stats.unexpected,
        "problems": problems,
        "hung_workers": hung,
        "keys": {t: checker_keys.thread_keys(t) for t in threads},
    }


def _wait_promoted_without(cluster: Any, victim: int, timeout: float = 20.0) -> None:
    """Every node but ``victim`` (paused, so it can't answer) serves no slot from it and is ok."""
    deadline = time.monotonic() + timeout
    others = [n for n in cluster.nodes if n.port != victim and n.alive()]
    while time.monotonic() < deadline:
        try:
            done = True
            for n in others:
                slots = n.command("CLUSTER", "SLOTS")
                info = n.command("CLUSTER", "INFO")
                if not isinstance(slots, list) or any(int(row[2][1]) == victim for row in slots):
                    done = False
                if not isinstance(info, bytes) or b"cluster_state:ok" not in info:
                    done = False
            if done:
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise TimeoutError(f"no promotion away from paused {victim} within {timeout} s")


def _wait_demoted(node: Any, timeout: float = 20.0) -> None:
    """After SIGCONT: the old primary has learnt the new epoch and turned into a synced replica."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            raw = node.command("INFO", "replication")
            if isinstance(raw, bytes) and b"role:slave" in raw and b"master_link_status:up" in raw:
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise TimeoutError(f"{node.port} did not rejoin as a replica within {timeout} s")
