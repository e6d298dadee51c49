"""Live resharding under load: savers keep working while ``redis-cli --cluster reshard`` moves slots.

A 3-primary cluster; sync ``RedisSaver`` workers (OS threads, one saver each; the last one with
``compress=False`` and run ids in its metadata) and one ``AsyncRedisSaver`` with many tasks, on a
few hundred threads. Each step on a thread: a put whose ``messages`` channel grows by one message,
its pending writes, a get_tuple checked against the reference, now and then a list, and sometimes
a delete_thread, copy_thread or prune. Meanwhile ``redis-cli --cluster reshard`` rounds move slots
between the primaries, and a slow round holds some slots that hold threads half-moved (some keys
migrated) for ``hold`` seconds before finishing them (``devkit.slots.SlotMove``).

Each worker owns its threads, so it keeps the reference of what was acknowledged: every read is
checked against it as it returns, and at the end every thread is read back whole (``check``).
The report counts: errors surfaced (scripts stopped halfway, "non local key", apart), wrong reads,
lost writes (an acknowledged checkpoint or write missing), damaged threads (content or parent
links wrong), leaks (keys of no live thread, index entries naming none, value blobs no checkpoint
references), and the slowest call. Used by tests/scale/test_live_reshard.py (small) and
bench/reshard.py (full).
"""

from __future__ import annotations

import asyncio
import copy
import os
import random
import shutil
import subprocess
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from devkit import workers as W
from devkit.slots import SlotMove, node_id

HALFWAY = "non local key"  # a script stopped halfway by a migration (reported apart)


@dataclass
class Thread:
    """The reference of one thread: what its worker had acknowledged."""

    tid: str
    ids: list[str] = field(default_factory=list)  # checkpoints, oldest first
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    parent: dict[str, str | None] = field(default_factory=dict)
    writes: dict[str, set[tuple[str, str, Any]]] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    maybe: set[str] = field(default_factory=set)  # puts whose call failed: stored or not
    broken: bool = False  # a call on it failed: left alone from then on
    # a destructive call (delete, prune, copy into it) failed: either outcome, so its content is
    # not checked at the end (its keys still are, for leaks)
    uncertain: bool = False
    halfway: bool = False  # a script stopped halfway on it (its problems are counted apart)


@dataclass
class Report:
    ops: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    halfway: list[str] = field(default_factory=list)
    wrong_reads: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    traces: list[str] = field(default_factory=list)  # of the first errors
    slowest: tuple[float, str] = (0.0, "")
    moved_slots: int = 0
    half_moved: int = 0
    started: float = field(default_factory=time.monotonic)
    during_rounds: int = 0  # calls that ended while the rounds ran (the slow round apart)
    rounds_s: float = 0.0  # how long the rounds took
    window_s: float = 0.0  # from the slow round's first slot opened to its last slot moved
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "calls": sum(self.ops.values()), "errors": len(self.errors), "halfway": len(self.halfway),
            "wrong_reads": len(self.wrong_reads), "lost_writes": len(self.lost), "damaged": len(self.damaged),
            "leaks": len(self.leaks), "slowest_s": round(self.slowest[0], 3), "slowest_call": self.slowest[1],
            "moved_slots": self.moved_slots, "half_moved_slots": self.half_moved, "seconds": round(self.seconds, 1),
            "rounds_s": round(self.rounds_s, 2), "calls_during_rounds": self.during_rounds,
            "slow_window_s": round(self.window_s, 2),
        }  # fmt: skip


class Api:
    """One saver's calls, awaited alike for the sync and the async saver, each timed."""

    def __init__(self, saver: Any, report: Report, lock: threading.Lock, run_ids: bool = False) -> None:
        self.saver, self.report, self.lock, self.run_ids = saver, report, lock, run_ids
        self.aio = hasattr(saver, "aput") and type(saver).__name__.startswith("Async")

    async def call(self, op: str, *args: Any) -> Any:
        t0 = time.monotonic()
        if self.aio:
            fn = getattr(self.saver, "a" + op)
            res = [t async for t in fn(*args)] if op == "list" else await fn(*args)
        else:
            res = getattr(self.saver, op)(*args)
            res = list(res) if op == "list" else res
        took = time.monotonic() - t0
        with self.lock:
            self.report.ops[op] += 1
            if took > self.report.slowest[0]:
                at = f"ended {t0 + took - self.report.started:.1f} s in"
                self.report.slowest = (took, f"{op} {_thread_of(op, args)} {at}")
        return res


def _thread_of(op: str, args: tuple[Any, ...]) -> str:
    first = args[0]
    if isinstance(first, str):
        return first
    return str(first[0] if op == "prune" else first["configurable"]["thread_id"])


def _cid(t: Any) -> str:
    return t.config["configurable"]["checkpoint_id"]  # type: ignore[no-any-return]


def _pid(t: Any) -> str | None:
    return t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None


def read_problems(th: Thread, t: Any, cid: str) -> list[str]:
    """What a read of checkpoint ``cid`` of ``th`` got wrong, against the reference."""
    if t is None:
        return [f"{th.tid}/{cid}: not found"]
    out = []
    if _cid(t) != cid:
        out.append(f"{th.tid}: got {_cid(t)}, want {cid}")
    elif t.checkpoint["channel_values"] != th.values[cid]:
        out.append(f"{th.tid}/{cid}: values differ")
    elif _pid(t) != th.parent[cid]:
        out.append(f"{th.tid}/{cid}: parent {_pid(t)}, want {th.parent[cid]}")
    elif not th.writes[cid] <= set(t.pending_writes):
        out.append(f"{th.tid}/{cid}: acknowledged writes missing")
    return out


async def put_step(api: Api, th: Thread, n: int) -> None:
    """A put (messages grow by one), its writes, and a get_tuple checked at once."""
    parent = th.ids[-1] if th.ids else None
    versions = dict(th.versions)
    for ch in ("messages", "n"):
        versions[ch] = api.saver.get_next_version(versions.get(ch), None)
    messages = [*(th.values[parent]["messages"] if parent else []), f"{th.tid} message {n}"]
    cp = empty_checkpoint()
    cp["id"] = str(uuid6())
    cp["channel_versions"] = versions
    cp["channel_values"] = {"messages": messages, "n": n}
    md: dict[str, Any] = {"source": "loop", "step": n, **({"run_id": f"run-{n % 3}"} if api.run_ids else {})}
    th.maybe.add(cp["id"])
    await api.call("put", W.cfg(th.tid, parent), cp, md, {"messages": versions["messages"], "n": versions["n"]})
    th.maybe.discard(cp["id"])
    th.ids.append(cp["id"])
    th.values[cp["id"]], th.parent[cp["id"]], th.writes[cp["id"]] = cp["channel_values"], parent, set()
    th.versions = versions
    task = f"task-{n}"
    await api.call("put_writes", W.cfg(th.tid, cp["id"]), [("messages", f"w{n}"), ("n", n)], task)
    th.writes[cp["id"]] |= {(task, "messages", f"w{n}"), (task, "n", n)}
    got = await api.call("get_tuple", W.cfg(th.tid))
    with api.lock:
        api.report.wrong_reads.extend(read_problems(th, got, cp["id"]))


async def rare_step(api: Api, th: Thread, r: float, copies: list[Thread]) -> None:
    """Now and then: a list (checked), a prune keep_latest, a copy_thread or a delete_thread."""
    if r < 0.5:
        got = [_cid(t) for t in await api.call("list", W.cfg(th.tid))]
        if got != th.ids[::-1]:
            with api.lock:
                api.report.wrong_reads.append(f"{th.tid}: list {len(got)} ids, want {len(th.ids)}")
    elif r < 0.7:
        th.uncertain = True  # until acknowledged
        await api.call("prune", [th.tid])
        last = th.ids[-1]
        th.ids, th.parent[last], th.uncertain = [last], None, False
    elif r < 0.85:
        target = Thread(f"{th.tid}.c{len(copies)}", broken=True, uncertain=True)  # until acknowledged
        for name in ("ids", "values", "parent", "writes", "versions"):
            setattr(target, name, copy.deepcopy(getattr(th, name)))
        copies.append(target)
        await api.call("copy_thread", th.tid, target.tid)
        target.broken = target.uncertain = False
    else:
        th.uncertain = True
        await api.call("delete_thread", th.tid)
        th.ids, th.values, th.parent, th.writes, th.versions, th.uncertain = [], {}, {}, {}, {}, False


async def work(api: Api, threads: list[Thread], stop: list[float], seed: int) -> None:
    """Steps on ``threads`` (round robin; copies join them) until ``stop[0]`` (set at the
    scenario's end); a thread whose call failed is left as it is."""
    rng = random.Random(seed)
    n = 0
    while time.monotonic() < stop[0]:
        live = [t for t in threads if not t.broken]
        if not live:
            return
        th = live[n % len(live)]
        n += 1
        try:
            if th.ids and rng.random() < 0.12:
                await rare_step(api, th, rng.random(), threads)
            else:
                await put_step(api, th, n)
        except Exception as exc:  # counted; the thread is left as it is, checked at the end
            th.broken = True
            th.halfway = HALFWAY in str(exc)
            text = f"{th.tid}: {type(exc).__name__}: {exc}"[:300]
            with api.lock:
                (api.report.halfway if th.halfway else api.report.errors).append(text)
                if len(api.report.traces) < 5:
                    api.report.traces.append("".join(traceback.format_exception(exc)))


def _cli(cluster: Any) -> str:
    """The redis-cli beside the cluster's server binary when its package ships one, else the one on PATH."""
    here = os.path.dirname(cluster.binary or "")
    cli = shutil.which("redis-cli", path=here + os.pathsep + os.environ.get("PATH", ""))
    if cli is None:
        raise FileNotFoundError("redis-cli not found")
    return cli


def _keep_primaries(cluster: Any) -> list[int]:
    """The primaries' ports; a primary emptied by a round stays one (Redis 7 and Valkey make it a
    replica of the node that took its last slot, unless ``cluster-allow-replica-migration`` is off)."""
    for node in cluster.live_nodes():
        node.command("CONFIG", "SET", "cluster-allow-replica-migration", "no")
    return sorted({int(row[2][1]) for row in cluster.slots()})


def reshard_rounds(cluster: Any, rounds: int, slots: int, report: Report) -> None:
    """``rounds`` redis-cli reshard rounds of ``slots`` slots, each from one primary to the next."""
    primaries = _keep_primaries(cluster)
    for i in range(rounds):
        src, dst = cluster.node(primaries[i % 3]), cluster.node(primaries[(i + 1) % 3])
        cmd = [_cli(cluster), "--cluster", "reshard", f"{src.host}:{src.port}", "--cluster-from", node_id(src),
               "--cluster-to", node_id(dst), "--cluster-slots", str(slots), "--cluster-yes"]  # fmt: skip
        before = len(_served(dst))
        res = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
        if res.returncode != 0:
            raise RuntimeError(f"reshard failed: {res.stdout[-2000:]}\n{res.stderr[-2000:]}")
        if len(_served(dst)) - before != slots:  # the redis-cli of another version did its job
            raise RuntimeError(f"reshard moved {len(_served(dst)) - before} slots, not {slots}: {res.stdout[-2000:]}")
        report.moved_slots += slots


def _owned(cluster: Any, port: int, count: int) -> list[tuple[int, int]]:
    """The first ``count`` slots the primary on ``port`` serves, as (first, last) ranges."""
    ranges = sorted((int(r[0]), int(r[1])) for r in cluster.slots() if int(r[2][1]) == port)
    out = []
    for first, last in ranges:
        if count <= 0:
            break
        last = min(last, first + count - 1)
        out.append((first, last))
        count -= last - first + 1
    return out


def atomic_rounds(cluster: Any, rounds: int, slots: int, report: Report, timeout: float = 300.0) -> None:
    """``rounds`` atomic slot migrations (Valkey 9's ``CLUSTER MIGRATESLOTS``) of ``slots`` slots
    each, from one primary to the next; each round waits until the target serves them all, and
    fails on a job the source reports failed or cancelled (``CLUSTER GETSLOTMIGRATIONS``)."""
    primaries = _keep_primaries(cluster)
    for i in range(rounds):
        src, dst = cluster.node(primaries[i % 3]), cluster.node(primaries[(i + 1) % 3])
        ranges = _owned(cluster, src.port, slots)
        args = [x for r in ranges for x in r]
        reply = src.command("CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", *args, "NODE", node_id(dst))
        if reply not in (b"OK", "OK"):
            raise RuntimeError(f"CLUSTER MIGRATESLOTS on {src.port}: {reply!r}")
        wanted = {s for first, last in ranges for s in range(first, last + 1)}
        deadline = time.monotonic() + timeout
        while True:
            jobs = repr(src.command("CLUSTER", "GETSLOTMIGRATIONS"))
            if "failed" in jobs or "cancelled" in jobs:
                raise RuntimeError(f"atomic migration failed: {jobs[-2000:]}")
            if not wanted - _served(dst):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"atomic migration not done after {timeout} s: {jobs[-2000:]}")
            time.sleep(0.05)
        report.moved_slots += len(wanted)


def _served(node: Any) -> set[int]:
    """The slots ``node`` serves as primary, as it sees the map."""
    rows: Any = node.command("CLUSTER", "SLOTS")
    return {s for r in rows if int(r[2][1]) == node.port for s in range(int(r[0]), int(r[1]) + 1)}


def slow_round(cluster: Any, tids: list[str], count: int, hold: float, report: Report) -> None:
    """``count`` slots that hold threads, half-moved (some keys migrated) for ``hold`` s, then moved."""
    from redis_saver.keys import key_slot, thread_tag

    slots = sorted({key_slot(thread_tag(t)) for t in tids})[:count]
    moves = [SlotMove(cluster, s) for s in slots]
    t0 = time.monotonic()
    for m in moves:
        m.open()
        keys = m.keys()
        m.migrate(keys[: len(keys) // 2])
    report.half_moved += len(moves)
    time.sleep(hold)
    for m in moves:
        m.finish()
    report.window_s = time.monotonic() - t0


def check(saver: Any, client: Any, prefix: str, threads: list[Thread], report: Report) -> None:
    """Every thread read back whole against its reference, then the leak scan."""
    for th in threads:
        if th.uncertain or th.halfway:
            continue
        listed = list(saver.list(W.cfg(th.tid)))
        got = [_cid(t) for t in listed]
        want = th.ids[::-1]
        extra = set(got) - set(want) - th.maybe
        if set(want) - set(got):
            report.lost.append(f"{th.tid}: {len(set(want) - set(got))} acknowledged checkpoints missing")
        if extra or (not th.maybe and got != want):
            report.damaged.append(f"{th.tid}: list holds {len(got)} ids, {len(extra)} never acknowledged")
        for t in listed:
            if _cid(t) in th.values:
                problems = read_problems(th, t, _cid(t))
                (report.lost if any("missing" in p for p in problems) else report.damaged).extend(problems)
    halfway = {t.tid for t in threads if t.halfway}
    for leak in leaks(client, prefix, [t for t in threads if t.ids or t.uncertain or t.maybe or t.halfway]):
        (report.halfway if leak.split(":", 1)[0] in halfway else report.leaks).append(leak)


def leaks(client: Any, prefix: str, live: list[Thread]) -> list[str]:
    """Keys of no live thread, slot-index entries naming none, value blobs no checkpoint names."""
    from redis_saver.keys import KeySchema, enc, thread_tag
    from tests.lifecycle._util import blob_fields, referenced_blob_fields, thread_key_prefix

    tags = {b"{" + thread_tag(t.tid) + b"}" for t in live}
    ids = {t.tid.encode() for t in live}
    encoded = [enc(t.tid) for t in live]
    out = []
    for key in client.scan_iter(match=KeySchema(prefix).scan_pattern(), count=1000):
        rest = key[len(prefix) + 1 :]
        if rest == b"schema":
            continue
        if rest.startswith(b"ix:"):
            for m in client.zrange(key, 0, -1):
                if rest.endswith(b":threads") and m not in ids:
                    out.append(f"{key!r}: names {m!r}")
                elif rest.endswith(b":runs") and not any(m[1:].startswith(e) or m.endswith(e) for e in encoded):
                    out.append(f"{key!r}: run entry {m!r}")
        elif rest[: rest.index(b"}") + 1] not in tags:
            out.append(f"{key!r}: no live thread")
    for t in live:
        tp = thread_key_prefix(prefix, t.tid)
        try:
            unreferenced = blob_fields(client, tp + b"blob") - referenced_blob_fields(client, tp)
        except AssertionError as exc:  # a stream whose directory and records disagree
            out.append(f"{t.tid}: streams damaged: {exc}")
            continue
        if unreferenced:
            out.append(f"{t.tid}: {len(unreferenced)} value blobs no checkpoint references")
    return out


@dataclass
class Plan:
    """The scenario's size (bench/reshard.py's full run; the test's small one)."""

    sync_workers: int = 4
    sync_threads: int = 8  # per sync worker
    tasks: int = 32
    async_threads: int = 300
    rounds: int = 3
    round_slots: int = 5461
    slow_slots: int = 32
    hold: float = 2.0
    settle: float = 1.0  # seconds of load before the first round and after the last
    atomic: bool = False  # rounds by CLUSTER MIGRATESLOTS (Valkey 9) instead of redis-cli reshard


def run(cluster: Any, plan: Plan, prefix: str = "rs") -> Report:
    """The scenario on ``cluster`` (3 primaries); returns its report."""
    from redis_saver import AsyncRedisSaver, RedisSaver

    report, lock = Report(), threading.Lock()
    url = f"redis+cluster://{cluster.nodes[0].host}:{cluster.nodes[0].port}"
    opts: dict[str, Any] = {"prefix": prefix, "retries": 0, "socket_timeout": 5}
    sync_threads = [[Thread(f"s{w}-{i}") for i in range(plan.sync_threads)] for w in range(plan.sync_workers)]
    async_threads = [Thread(f"a-{i}") for i in range(plan.async_threads)]
    t0 = time.monotonic()
    stop = [float("inf")]

    per_task = [async_threads[i :: plan.tasks] for i in range(plan.tasks)]

    def sync_worker(w: int) -> None:
        plain = w == plan.sync_workers - 1  # compress=False, with run ids
        with RedisSaver.from_conn_string(url, compress=not plain, **opts) as saver:
            asyncio.run(work(Api(saver, report, lock, run_ids=plain), sync_threads[w], stop, w))

    async def async_load() -> None:
        async with AsyncRedisSaver.from_conn_string(url, **opts) as saver:
            api = Api(saver, report, lock)
            await asyncio.gather(*[work(api, p, stop, 100 + i) for i, p in enumerate(per_task)])

    workers = [threading.Thread(target=sync_worker, args=(w,)) for w in range(plan.sync_workers)]
    workers.append(threading.Thread(target=lambda: asyncio.run(async_load())))
    for w in workers:
        w.start()
    try:
        time.sleep(plan.settle)
        with lock:
            before, r0 = sum(report.ops.values()), time.monotonic()
        (atomic_rounds if plan.atomic else reshard_rounds)(cluster, plan.rounds, plan.round_slots, report)
        with lock:
            report.during_rounds, report.rounds_s = sum(report.ops.values()) - before, time.monotonic() - r0
        tids = [t.tid for ts in [*sync_threads, *per_task] for t in ts if t.ids and not t.broken]
        slow_round(cluster, tids, plan.slow_slots, plan.hold, report)
        time.sleep(plan.settle)
    finally:
        stop[0] = time.monotonic()
        for w in workers:
            w.join()
    report.seconds = time.monotonic() - t0
    client = cluster.client(socket_timeout=10)
    saver = RedisSaver(client, prefix=prefix)
    check(saver, client, prefix, [t for ts in [*sync_threads, *per_task] for t in ts], report)
    client.close()
    return report
