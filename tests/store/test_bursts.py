"""A burst of concurrent calls on a new store: every call succeeds, and the store asks the server
whether it keeps vector sets once (inside the engine), whatever the number of early callers:
asyncio tasks on AsyncRedisStore, threads on RedisStore, standalone and Cluster."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from redis_saver import AsyncRedisStore, RedisStore
from redis_saver.store import _plans

BURST = 10_000


@pytest.fixture
def probes(monkeypatch):
    """The probe plans run (each a call of the "P" read)."""
    runs: list[int] = []
    real = _plans.probe_plan

    def counted(cfg: Any) -> Any:
        runs.append(1)
        return real(cfg)

    for module in ("redis_saver.store.sync", "redis_saver.store.aio"):
        monkeypatch.setattr(f"{module}.probe_plan", counted)
    return runs


def _url(request: pytest.FixtureRequest, where: str) -> str:
    if where == "cluster":
        host, port = request.getfixturevalue("cluster").startup_nodes[0]
        return f"redis+cluster://{host}:{port}"
    if where == "redis8":
        return str(request.getfixturevalue("redis8").url)
    return str(request.getfixturevalue("redis_url"))


WHERE = ["standalone", pytest.param("cluster", marks=pytest.mark.cluster), "redis8"]


@pytest.mark.parametrize("where", WHERE)
async def test_a_burst_of_tasks_on_a_new_async_store(request, where, prefix, probes):
    async with AsyncRedisStore.from_conn_string(_url(request, where), prefix=prefix) as store:
        ns = ("burst", "tasks")
        calls = [store.aput(ns, str(i), {"v": i}) for i in range(BURST // 2)]
        calls += [store.aget(ns, str(i)) for i in range(BURST // 2)]
        results = await asyncio.gather(*calls)
        assert len(results) == BURST and probes == [1]
        assert store._cfg.state.vsets is (where == "redis8")
        items = await store.abatch([*_gets(ns, [0, BURST // 2 - 1])])
        assert [it.value["v"] for it in items] == [0, BURST // 2 - 1]
        assert len(await store.asearch(ns, limit=BURST)) == BURST // 2


@pytest.mark.parametrize("where", WHERE)
def test_a_burst_of_threads_on_a_new_sync_store(request, where, prefix, probes):
    with RedisStore.from_conn_string(_url(request, where), prefix=prefix) as store:
        ns = ("burst", "threads")
        with ThreadPoolExecutor(32) as pool:
            done = list(pool.map(lambda i: store.put(ns, str(i), {"v": i}), range(BURST)))
        assert len(done) == BURST and probes == [1]
        assert store._cfg.state.vsets is (where == "redis8")
        assert len(store.search(ns, limit=BURST)) == BURST


async def test_a_failed_probe_is_asked_again_by_the_next_call(redis_url, prefix, probes, monkeypatch):
    async with AsyncRedisStore.from_conn_string(redis_url, prefix=prefix) as store:
        real = store._driver.run
        fail = [False, True]  # popped: the first probe fails

        async def flaky(plan: Any, op: str | None = None) -> Any:
            if op == "store.probe" and fail and fail.pop():
                plan.close()
                raise ConnectionError("the probe's connection dropped")
            return await real(plan, op)

        monkeypatch.setattr(store._driver, "run", flaky)
        results = await asyncio.gather(*[store.aput(("a",), str(i), {}) for i in range(50)], return_exceptions=True)
        assert all(isinstance(r, ConnectionError) for r in results) and probes == [1]
        await store.aput(("a",), "k", {"v": 1})
        assert probes == [1, 1] and store._cfg.state.vsets is False
        assert (await store.aget(("a",), "k")).value == {"v": 1}


def _gets(ns: tuple[str, ...], ids: list[int]) -> list[Any]:
    from langgraph.store.base import GetOp

    return [GetOp(ns, str(i)) for i in ids]


async def test_concurrent_writes_run_as_few_batches(redis_url, prefix, monkeypatch):
    """The write-only calls of one loop iteration run as one batch (up to MERGE_OPS puts): a
    burst of 3,000 puts is 2 batches, not 3,000; every put is stored."""
    from redis_saver.store import aio

    async with AsyncRedisStore.from_conn_string(redis_url, prefix=prefix) as store:
        await store.aget(("w",), "warm")  # (the probe)
        runs: list[str | None] = []
        real = store._driver.run

        async def counted(plan: Any, op: str | None = None) -> Any:
            runs.append(op)
            return await real(plan, op)

        monkeypatch.setattr(store._driver, "run", counted)
        n = 3000
        results = await asyncio.gather(*[store.aput(("w",), str(i), {"v": i}) for i in range(n)])
        assert results == [None] * n
        assert len(runs) == -(-n // aio.MERGE_OPS) and runs == ["store.batch"] * len(runs)
        monkeypatch.setattr(store._driver, "run", real)
        items = await store.asearch(("w",), limit=n + 1)
        assert [(it.key, it.value["v"]) for it in items] == [(str(i), i) for i in range(n)]


def _embed(texts: list[str]) -> list[list[float]]:
    if "boom" in texts:
        raise RuntimeError("the embedder failed on boom")
    return [[1.0 + len(t), 2.0] for t in texts]


async def test_a_failing_call_fails_alone(redis_url, prefix):
    """In a burst, a call whose input is refused (before the batch) or whose puts fail in the
    merged batch (its text's embedding raises) gets its error; every other call succeeds."""
    index = {"dims": 2, "embed": _embed, "fields": ["text"]}
    async with AsyncRedisStore.from_conn_string(redis_url, prefix=prefix, index=index) as store:
        ns = ("f",)
        calls = [store.aput(ns, str(i), {"text": f"t{i}"}) for i in range(200)]
        calls[50].close()
        calls[50] = store.aput(ns, "50", {"text": "boom"})
        calls[120].close()
        calls[120] = store.aput(ns, "120", ["not", "a", "dict"])  # type: ignore[arg-type]
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert isinstance(results[50], RuntimeError) and isinstance(results[120], TypeError)
        assert [i for i, r in enumerate(results) if r is not None] == [50, 120]
        keys = {it.key for it in await store.asearch(ns, limit=300)}
        assert keys == {str(i) for i in range(200)} - {"50", "120"}


@pytest.mark.parametrize("where", ["standalone", pytest.param("cluster", marks=pytest.mark.cluster)])
async def test_a_burst_writes_as_its_calls_in_order(request, where, prefix):
    """Concurrent puts, overwrites, deletes and re-puts of the same keys, batches among them:
    the items, values and search order are InMemoryStore's after the calls in their order."""
    import random

    from langgraph.store.base import PutOp
    from langgraph.store.memory import InMemoryStore

    rng = random.Random(3)
    ns = ("o",)
    calls: list[list[Any]] = []
    for i in range(400):
        if rng.random() < 0.1:
            calls.append([PutOp(ns, f"k{rng.randrange(30)}", {"v": i}) for _ in range(rng.randrange(1, 4))])
        else:
            calls.append([PutOp(ns, f"k{rng.randrange(30)}", None if rng.random() < 0.3 else {"v": i})])
    async with AsyncRedisStore.from_conn_string(_url(request, where), prefix=prefix) as store:
        await store.aput(ns, "k0", {"v": -1})  # an item of before the burst
        ref_first = InMemoryStore()
        ref_first.put(ns, "k0", {"v": -1})
        for ops in calls:
            ref_first.batch(ops)
        results = await asyncio.gather(*[store.abatch(ops) for ops in calls])
        assert results == [[None] * len(ops) for ops in calls]
        # a lone batch putting one key twice: a result per op
        assert await store.abatch([PutOp(ns, "d", {"x": 0}), PutOp(ns, "d", {"x": 1})]) == [None, None]
        ref_first.batch([PutOp(ns, "d", {"x": 0}), PutOp(ns, "d", {"x": 1})])
        got = [(it.key, it.value) for it in await store.asearch(ns, limit=100)]
        assert got == [(it.key, it.value) for it in ref_first.search(ns, limit=100)]
        assert {k for k, _ in got} != set()


async def test_a_cancelled_leader_hands_the_batch_on(redis_url, prefix):
    """The call that opened a batch is cancelled before the batch is sent: its put is not
    written, the calls that joined it still run."""
    async with AsyncRedisStore.from_conn_string(redis_url, prefix=prefix) as store:
        await store.aget(("c",), "warm")  # (the probe)
        leader = asyncio.ensure_future(store.aput(("c",), "lead", {"v": 0}))
        others = [asyncio.ensure_future(store.aput(("c",), str(i), {"v": i})) for i in range(5)]
        await asyncio.sleep(0)  # every task ran its first step: the leader waits for the others to join
        leader.cancel()
        done = await asyncio.wait_for(asyncio.gather(*others), 5)
        assert done == [None] * 5 and leader.cancelled()
        assert sorted(it.key for it in await store.asearch(("c",), limit=10)) == [str(i) for i in range(5)]
