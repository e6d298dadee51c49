"""Many writer *processes* advancing the same threads concurrently against a real redis-server.

Each worker (``devkit.workers.many_writers_worker``) loops: read the latest checkpoint of a random
thread, put a child of it (bumping 1-2 channels, so older channel blobs stay referenced), then put_writes
against the new checkpoint and against the parent it read. Afterwards every acknowledged put and write
must be readable, list() strictly descending, every parent link resolvable, every channel value present.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import Counter, defaultdict

import pytest

from devkit import workers as W
from devkit.servers import client_kwargs
from redis_saver import RedisSaver

N_PROCS = 4
TIME_BUDGET = 30.0


def _run(redis_url: str, prefix: str, threads: list[str], n_ops: int, fencing: bool) -> list[W.WorkerResult]:
    ctx = multiprocessing.get_context("spawn")
    deadline = time.time() + TIME_BUDGET - 8  # leave time for the checks
    # (the workers start together: devkit.workers.many_writers_worker's start line)
    args = [(redis_url, prefix, threads, n_ops, fencing, seed, deadline, N_PROCS) for seed in range(N_PROCS)]
    with ctx.Pool(N_PROCS) as pool:
        results = pool.map_async(W.many_writers_worker, args).get(timeout=TIME_BUDGET)
    for r in results:
        assert not r.errors, r.errors
    return results


def _saver(redis_url: str, prefix: str, **kw) -> RedisSaver:
    import redis

    return RedisSaver(redis.Redis.from_url(redis_url, **client_kwargs(5, 5)), prefix=prefix, **kw)


def _group(results: list[W.WorkerResult]) -> tuple[dict, dict]:
    puts, writes = defaultdict(list), defaultdict(list)
    for r in results:
        for p in r.puts:
            puts[p[0]].append(p)
        for w in r.writes:
            writes[w[0]].append(w)
    return puts, writes


def test_many_processes_no_lost_writes(redis_url, prefix):
    t0 = time.monotonic()
    threads = [f"thread-{i}" for i in range(6)]
    results = _run(redis_url, prefix, threads, n_ops=60, fencing=False)
    puts, writes = _group(results)
    total_puts = sum(len(v) for v in puts.values())
    assert total_puts == N_PROCS * 60
    # several processes really advanced the same thread
    writers_per_thread = {t: len({cid_writer for cid_writer in _writers(results, t)}) for t in threads}
    assert max(writers_per_thread.values()) >= 2, writers_per_thread

    saver = _saver(redis_url, prefix)
    try:
        problems = []
        listed = 0
        for t in threads:
            out = W.check_thread(saver, t, puts[t], writes[t])
            problems += out["problems"]
            listed += out["n"]
        assert not problems, "\n".join(problems[:20])
        assert listed == total_puts  # nothing but the acknowledged puts exists
    finally:
        saver.client.close()
    assert time.monotonic() - t0 < TIME_BUDGET


def _writers(results: list[W.WorkerResult], thread: str) -> set[int]:
    return {i for i, r in enumerate(results) if any(p[0] == thread for p in r.puts)}


@pytest.mark.parametrize("n_threads", [1, 2])
def test_fencing_keeps_a_single_chain(redis_url, prefix, n_threads):
    t0 = time.monotonic()
    threads = [f"fenced-{i}" for i in range(n_threads)]
    seed_saver = _saver(redis_url, prefix, fencing=True)
    try:
        for t in threads:  # a root so every worker starts from "read latest, put a child"
            cp, md, nv = W.make_child(seed_saver, {}, "seed", -1)
            seed_saver.put(W.cfg(t), cp, md, nv)
        results = _run(redis_url, prefix, threads, n_ops=80, fencing=True)
        puts, writes = _group(results)
        conflicts = sum(r.conflicts for r in results)
        successes = sum(len(v) for v in puts.values())
        assert successes + conflicts == N_PROCS * 80
        assert conflicts > 0, "4 processes on the same thread(s) never conflicted: contention not exercised"

        problems = []
        for t in threads:
            out = W.check_thread(seed_saver, t, puts[t], writes[t])
            problems += out["problems"]
            tuples = out["tuples"]
            # single chain: the walk from the latest visits every checkpoint, no parent has 2 children
            chain = W.chain_from_latest(tuples)
            assert len(chain) == len(tuples) == len(puts[t]) + 1, (t, len(chain), len(tuples), len(puts[t]))
            parents = Counter(tp.parent_config["configurable"]["checkpoint_id"] for tp in tuples if tp.parent_config)
            assert not [p for p, n in parents.items() if n > 1], f"{t}: forked history"
            # the chain, oldest first, is exactly the acknowledged puts in parent order
            assert set(chain) == {cid for _, cid, _ in puts[t]} | {chain[-1]}
        assert not problems, "\n".join(problems[:20])
    finally:
        seed_saver.client.close()
    assert time.monotonic() - t0 < TIME_BUDGET


def test_retried_put_and_put_writes_are_idempotent(redis_url, prefix):
    """What every retry loop (and the failover test) relies on: repeating a put / put_writes with the
    same arguments after an ambiguous failure changes nothing."""
    saver = _saver(redis_url, prefix)
    try:
        root, md, nv = W.make_child(saver, {}, "r", 0)
        saver.put(W.cfg("t"), root, md, nv)
        child, md, nv = W.make_child(saver, root["channel_versions"], "r", 1)
        for _ in range(3):  # the retry repeats the identical call
            saver.put(W.cfg("t", root["id"]), child, md, nv)
            saver.put_writes(W.cfg("t", child["id"]), [("a", "x"), ("b", "y")], "task-1")
        out = W.check_thread(
            saver,
            "t",
            [("t", root["id"], ""), ("t", child["id"], root["id"])],
            [("t", child["id"], "task-1", 0, "a", "x"), ("t", child["id"], "task-1", 1, "b", "y")],
        )
        assert not out["problems"], out["problems"]
        assert out["n"] == 2
        assert len(saver.get_tuple(W.cfg("t", child["id"])).pending_writes) == 2
    finally:
        saver.client.close()


@pytest.mark.parametrize("n", [99, 100, 101, 120, 127, 128, 200, 215])
def test_list_returns_every_checkpoint_across_pages(redis_url, prefix, n):
    """list() pages through Redis (page size 100, chunks of 64): no count may lose the tail."""
    saver = _saver(redis_url, prefix)
    try:
        parent, versions = None, {}
        for i in range(n):
            cp, md, nv = W.make_child(saver, versions, "l", i)
            saver.put(W.cfg("t", parent), cp, md, nv)
            parent, versions = cp["id"], cp["channel_versions"]
        listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(W.cfg("t"))]
        assert len(listed) == n
        assert listed == sorted(listed, reverse=True)
    finally:
        saver.client.close()
