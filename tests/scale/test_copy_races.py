"""copy_thread among many savers and processes, against real redis-server processes.

Savers keep per-process caches of the streams they read and wrote (by thread and stream id),
so every way a thread can end and start again (delete, expiry, prune, delete_for_runs, a
copy into it) is a chance for a cache to trust bytes that are not there any more. Two tests:

* a seeded random run of rounds, each a few operations on distinct threads run concurrently
  by different savers (in this process, each with its own cache, one with compression off,
  one with a ttl; and one in a spawned process), checked against a reference model: every
  read, by any saver, returns exactly what was last written;
* a writer process putting to a thread in a tight loop while another saver copies it to fresh
  targets again and again, snapshot and paged: every copy is readable, a cut of the source
  (every checkpoint up to its newest, none missing), and each copied checkpoint equals the
  source's checkpoint of the same id, values included.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from langgraph.checkpoint.base.id import uuid6

import redis_saver.core.plans.budgets as plans
from devkit import copyrace
from redis_saver import RedisSaver
from tests.lifecycle._util import check_stream_hash

TEXT = "".join(f"line {i}: the quick brown fox jumps over the lazy dog. " for i in range(200))
THREADS = [f"T{i}" for i in range(8)] + ["{x}:T", "ünï 😀"]
RUNS = ["r0", "r1", "r2", "r3"]
SEED = int(os.environ.get("COPY_RACE_SEED", "30"))


@dataclass
class Cp:
    parent: str | None
    msgs: tuple
    step: int
    run: str
    writes: list = field(default_factory=list)

    def copy(self) -> Cp:
        return Cp(self.parent, self.msgs, self.step, self.run, list(self.writes))


class Model:
    def __init__(self) -> None:
        self.threads: dict[str, dict[str, Cp]] = {}

    def view(self, thread: str, cid: str) -> tuple:
        c = self.threads[thread][cid]
        return (cid, c.parent, c.msgs, c.step, c.run, tuple(c.writes))

    def latest(self, thread: str) -> str | None:
        cps = self.threads.get(thread)
        return max(cps) if cps else None

    def read(self, thread: str) -> tuple:
        cps = self.threads.get(thread) or {}
        hist = [self.view(thread, c) for c in sorted(cps, reverse=True)]
        return (hist[0] if hist else None), hist


class Executors:
    """Savers in this process (each its own cache) and one in a spawned process."""

    def __init__(self, target: tuple, prefix: str) -> None:
        client = copyrace.client_for(target)
        self.client = client
        self.local = [
            copyrace.Ops(RedisSaver(client, prefix=prefix)),
            copyrace.Ops(RedisSaver(copyrace.client_for(target), prefix=prefix)),
            copyrace.Ops(RedisSaver(client, prefix=prefix, compress=False)),
            copyrace.Ops(RedisSaver(client, prefix=prefix, ttl={"default_ttl": 10})),
        ]
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=copyrace.serve, args=(child, target, prefix, {}), daemon=True)
        self.proc.start()
        self.keys = self.local[0].saver.keys

    def __len__(self) -> int:
        return len(self.local) + 1

    def call(self, i: int, name: str, *args: Any) -> Any:
        if i < len(self.local):
            return getattr(self.local[i], name)(*args)
        self.conn.send((name, args))
        if not self.conn.poll(60):
            raise TimeoutError(f"the child saver did not answer {name}{args}")
        status, *rest = self.conn.recv()
        if status == "err":
            raise AssertionError(f"child saver: {rest[0]}: {rest[1]}")
        return rest[0]

    def close(self) -> None:
        self.conn.send(None)
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()


def _first_msgs(rng: random.Random) -> list:
    n = rng.randint(3, 8)
    return [("h" if i % 2 == 0 else "a", TEXT[i * 97 : i * 97 + rng.randint(60, 140)], f"f{i}") for i in range(n)]


def _expire(client: Any, keys: list[bytes]) -> None:
    """The thread's ttl runs out: every key expires (as a unit, as a ttl expires them)."""
    for k in keys:
        client.pexpire(k, 1)
    deadline = time.monotonic() + 5
    while any(client.exists(k) for k in keys):
        assert time.monotonic() < deadline, "keys did not expire"
        time.sleep(0.005)


def _run_rounds(ex: Executors, rng: random.Random, seconds: float) -> dict[str, int]:
    model = Model()
    counts: dict[str, int] = {}
    task_n = 0
    kinds = (["put"] * 30 + ["fork"] * 4 + ["writes"] * 8 + ["read"] * 14 + ["copy"] * 14 + ["delete"] * 4
             + ["expire"] * 4 + ["prune"] * 5 + ["prune_all"] * 2 + ["runs"] * 3 + ["rewrite"] * 3)
    deadline = time.monotonic() + seconds
    pool = ThreadPoolExecutor(max_workers=len(ex))
    try:
        while time.monotonic() < deadline:
            ops: list[tuple] = []
            busy: set[str] = set()
            workers = list(range(len(ex)))
            rng.shuffle(workers)
            for w in workers[: rng.randint(1, len(ex))]:
                kind = rng.choice(kinds)
                free = [t for t in THREADS if t not in busy]
                if kind == "runs":
                    if ops:
                        continue  # it touches every thread: alone in its round
                    ops.append((w, kind, rng.sample(RUNS, rng.randint(1, 2))))
                    busy.update(THREADS)
                    break
                if len(free) < 2:
                    break
                t = rng.choice(free)
                busy.add(t)
                if kind == "copy":
                    absent = [x for x in free if x != t and not model.threads.get(x)]
                    present = [x for x in free if x != t and model.threads.get(x)]
                    pick = absent if absent and (rng.random() < 0.7 or not present) else present
                    if not pick:
                        continue
                    dst = rng.choice(pick)
                    busy.add(dst)
                    ops.append((w, kind, t, dst))
                elif kind in ("put", "fork"):
                    cps = model.threads.get(t) or {}
                    base = rng.choice(sorted(cps)[:-1]) if kind == "fork" and len(cps) > 1 else None
                    letter = "ABCDEFGH"[w]  # every saver appends messages of one length: same raw lengths
                    add = ("a", letter * 80, f"m{len(counts)}-{rng.random()}")
                    ops.append((w, "put", t, str(uuid6()), add, rng.choice(RUNS), base, _first_msgs(rng)))
                elif kind == "writes":
                    if not model.threads.get(t):
                        continue
                    task_n += 1
                    cid = rng.choice(sorted(model.threads[t])[-2:])
                    ops.append((w, kind, t, cid, f"task{task_n:06d}", ("a", f"write {task_n}", f"w{task_n}")))
                else:
                    ops.append((w, kind, t))
            futures = [pool.submit(_do, ex, op) for op in ops]
            for op, fut in zip(ops, futures, strict=True):
                _apply(model, op, fut.result())
                counts[op[1]] = counts.get(op[1], 0) + 1
        # the end: every saver reads every thread back exactly
        for w in range(len(ex)):
            for t in THREADS:
                assert ex.call(w, "read", t) == model.read(t), (w, t)
        for t in THREADS:
            check_stream_hash(ex.client.hgetall(ex.keys.thread_keys(t)[4]))
    finally:
        pool.shutdown()
    return counts


def _do(ex: Executors, op: tuple) -> Any:
    w, kind, *args = op
    if kind == "put":
        t, cid, add, run, base, first = args
        return ex.call(w, "put", t, cid, add, run, base, first)
    if kind == "writes":
        return ex.call(w, "put_writes", *args)
    if kind == "read":
        return ex.call(w, "read", args[0])
    if kind == "copy":
        return ex.call(w, "copy", *args)
    if kind == "delete":
        return ex.call(w, "delete", args[0])
    if kind == "expire":
        return _expire(ex.client, ex.keys.thread_keys(args[0])[:9])
    if kind == "prune":
        return ex.call(w, "prune", [args[0]], "keep_latest")
    if kind == "prune_all":
        return ex.call(w, "prune", [args[0]], "delete")
    if kind == "runs":
        return ex.call(w, "delete_runs", args[0])
    if kind == "rewrite":
        return ex.call(w, "rewrite", args[0])
    raise AssertionError(kind)


def _apply(model: Model, op: tuple, got: Any) -> None:
    """Check an operation's answer against the model, then apply it to the model."""
    w, kind, *args = op
    m = model.threads
    if kind == "put":
        t, cid, add, run, base, first = args
        parent = base or model.latest(t)
        want = model.view(t, parent) if parent else None
        assert got == want, f"saver {w} read {t}/{parent} wrong before its put"
        msgs = (m[t][parent].msgs if parent else tuple(first)) + (add,)
        m.setdefault(t, {})[cid] = Cp(parent, msgs, len(msgs), run)
    elif kind == "writes":
        t, cid, task, add = args
        m[t][cid].writes.append((task, "messages", (add,)))
    elif kind == "read":
        assert got == model.read(args[0]), f"saver {w} read {args[0]} wrong"
    elif kind == "copy":
        src, dst = args
        if m.get(dst):
            assert got == "exists", f"copy {src} -> {dst}: an existing target was not refused"
        else:
            assert got == "ok"
            if m.get(src):
                m[dst] = {c: cp.copy() for c, cp in m[src].items()}
    elif kind in ("delete", "expire", "prune_all"):
        m.pop(args[0], None)
    elif kind == "prune":
        cps = m.get(args[0])
        if cps:
            latest = max(cps)
            kept = cps[latest]
            kept.parent = None
            m[args[0]] = {latest: kept}
    elif kind == "runs":
        for t in list(m):
            m[t] = {c: cp for c, cp in m[t].items() if cp.run not in args[0]}
            if not m[t]:
                del m[t]


@pytest.mark.parametrize("budget", ["default", "paged"])
def test_random_multi_saver_runs_read_back_what_was_last_written(redis_url, prefix, budget, monkeypatch):
    if budget == "paged":  # every copy of more than 2 checkpoints pages (in this process's savers)
        monkeypatch.setattr(plans, "WORK_BUDGET", 2)
        monkeypatch.setattr(plans, "COPY_FIELDS", 5)
    ex = Executors(("standalone", redis_url), prefix)
    try:
        counts = _run_rounds(ex, random.Random(SEED), 10.0)
    finally:
        ex.close()
    assert counts.get("copy", 0) > 10 and counts.get("put", 0) > 50, counts


@pytest.mark.cluster
def test_random_multi_saver_runs_on_a_cluster(cluster, monkeypatch):
    monkeypatch.setattr(plans, "WORK_BUDGET", 3)
    prefix = "cr" + uuid6().hex[:10]
    ex = Executors(("cluster", cluster.startup_nodes), prefix)
    try:
        counts = _run_rounds(ex, random.Random(SEED + 1), 8.0)
    finally:
        ex.close()
    assert counts.get("copy", 0) > 5, counts


@pytest.mark.parametrize("budget", ["default", "paged"])
def test_copies_of_a_thread_being_written_are_cuts_of_it(redis_url, prefix, budget, monkeypatch):
    if budget == "paged":
        monkeypatch.setattr(plans, "WORK_BUDGET", 4)
        monkeypatch.setattr(plans, "COPY_FIELDS", 9)
    target = ("standalone", redis_url)
    first = _first_msgs(random.Random(1))
    ctx = multiprocessing.get_context("spawn")
    saver = RedisSaver(copyrace.client_for(target), prefix=prefix)
    ops = copyrace.Ops(saver, plain=True)
    ops.put("T", str(uuid6()), ("h", "hello " * 20, "h0"), "r", None, first)
    with ctx.Pool(1) as pool:
        stop_at = time.time() + 6
        res = pool.apply_async(copyrace.write_loop, (target, prefix, "T", stop_at, first, 500))
        t_keys = saver.keys.thread_keys("T")
        while saver.client.hlen(t_keys[1]) < 3 and not res.ready():  # the writer has started
            time.sleep(0.01)
        copies: list[str] = []
        while not res.ready() and len(copies) < 200:
            dst = f"copy-{len(copies)}"
            saver.copy_thread("T", dst)
            copies.append(dst)
        steps = res.get(timeout=30)
    sizes = {saver.client.hlen(saver.keys.thread_keys(d)[1]) for d in copies}
    assert steps > 50 and len(copies) > 5 and len(sizes) > 3, (steps, len(copies), sorted(sizes))
    _, source = ops.read("T")
    by_id = {v[0]: v for v in source}
    for dst in copies:
        latest, hist = copyrace.Ops(RedisSaver(copyrace.client_for(target), prefix=prefix), plain=True).read(dst)
        assert hist and latest == hist[0]
        ids = [v[0] for v in hist]
        # a cut: every checkpoint of the source up to the copy's newest, none missing
        assert ids == sorted((c for c in by_id if c <= ids[0]), reverse=True), dst
        for i, v in enumerate(hist):
            src = by_id[v[0]]
            assert v[:5] == src[:5], (dst, v[0])  # id, parent, messages, step, run id
            # writes: the writer stores a checkpoint's writes just after it; only the copy's
            # newest may have been cut before them
            assert v[5] == src[5] or (i == 0 and v[5] == ()), (dst, v[0])
        check_stream_hash(saver.client.hgetall(saver.keys.thread_keys(dst)[4]))
