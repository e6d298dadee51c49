"""A LangGraph StateGraph whose node is cached with ``CachePolicy``, on RedisCache (sync graph)
and AsyncRedisCache (async graph): the node runs once, a second invoke is served from Redis, the
TTL's expiry and ``clear_cache`` make it run again; and one round trip per batch on the wire."""

from __future__ import annotations

import asyncio
from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import CachePolicy

from tests.cache.conftest import keys_under


class State(TypedDict):
    x: int
    y: int


def _graph(runs: list[int]):
    def slow_double(state: State) -> dict:
        runs.append(state["x"])
        return {"y": state["x"] * 2}

    def plus_one(state: State) -> dict:
        return {"y": state["y"] + 1}

    b = StateGraph(State)
    b.add_node("double", slow_double, cache_policy=CachePolicy(ttl=1))
    b.add_node("plus", plus_one)
    b.add_edge(START, "double")
    b.add_edge("double", "plus")
    b.add_edge("plus", END)
    return b


async def test_cached_node_runs_once_until_its_ttl(make_cache, raw, prefix):
    c = await make_cache()
    runs: list[int] = []
    graph = _graph(runs).compile(cache=c.cache)

    async def invoke(x: int):
        if make_cache.sync:
            return graph.invoke({"x": x})
        return await graph.ainvoke({"x": x})

    assert await invoke(5) == {"x": 5, "y": 11}
    assert runs == [5]
    assert await invoke(5) == {"x": 5, "y": 11}  # served from the cache
    assert runs == [5]
    assert keys_under(raw, prefix)  # the cached writes are in Redis
    assert await invoke(6) == {"x": 6, "y": 13}  # another input: another key
    assert runs == [5, 6]
    await asyncio.sleep(1.3)  # the TTL (1 s) expired
    assert await invoke(5) == {"x": 5, "y": 11}
    assert runs == [5, 6, 5]
    if make_cache.sync:
        graph.clear_cache()
    else:
        await graph.aclear_cache()
    assert keys_under(raw, prefix) == []
    assert await invoke(5) == {"x": 5, "y": 11}
    assert runs == [5, 6, 5, 5]


async def test_one_round_trip_per_batch(redis_url, wire, prefix):
    """get and set of a batch over three namespaces: one MGET / one EVALSHA on a standalone
    server (on a cluster, one per namespace in one pipeline: test_cache.py runs there too)."""
    from redis_saver import AsyncRedisCache, RedisCache
    from tests.conftest import _proxied_url

    url = _proxied_url(redis_url, wire)
    pairs = {((f"ns{i}",), f"k{j}"): (i * j, 60) for i in range(3) for j in range(4)}
    with RedisCache.from_conn_string(url, prefix=prefix) as cache:
        cache.set({(("warm",), "k"): (0, None)})  # the connection and the script cache
        for kind in ("sync", "async"):
            wire.reset()
            if kind == "sync":
                cache.set(pairs)
                got = cache.get(list(pairs))
            else:
                async with AsyncRedisCache.from_conn_string(url, prefix=prefix) as acache:
                    await acache.aget([])  # nothing sent
                    await acache.aset({(("warm",), "k"): (0, None)})
                    wire.reset()
                    await acache.aset(pairs)
                    got = await acache.aget(list(pairs))
            assert got == {k: v for k, (v, _) in pairs.items()}
            names = wire.names()
            assert names == ["EVALSHA", "MGET"], names
        wire.reset()
        cache.set({(("ns0",), "k0"): (1, None)})
        cache.get([(("ns0",), "k0"), (("ns0",), "k1")])
        assert wire.names() == ["EVALSHA", "MGET"]
