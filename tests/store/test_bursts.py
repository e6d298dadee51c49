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
