"""The README's quick start: a graph compiled with both checkpointer= and store=, the store
sharing memory across threads (sync and async)."""

from __future__ import annotations

from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from redis_saver import AsyncRedisSaver, AsyncRedisStore, RedisSaver, RedisStore


class State(TypedDict):
    user: str
    said: str
    seen: list[str]


def remember(state: State, *, store: BaseStore) -> dict:
    ns = ("users", state["user"], "memories")
    seen = [item.value["said"] for item in store.search(ns)]
    store.put(ns, str(len(seen)), {"said": state["said"]})
    return {"seen": seen}


async def aremember(state: State, *, store: BaseStore) -> dict:
    ns = ("users", state["user"], "memories")
    seen = [item.value["said"] for item in await store.asearch(ns)]
    await store.aput(ns, str(len(seen)), {"said": state["said"]})
    return {"seen": seen}


def build(node):
    g = StateGraph(State)
    g.add_node("remember", node)
    g.add_edge(START, "remember")
    g.add_edge("remember", END)
    return g


def test_graph_with_saver_and_store(redis_url, prefix):
    with RedisSaver.from_conn_string(redis_url, prefix=prefix) as saver, RedisStore.from_conn_string(
        redis_url, prefix=prefix
    ) as store:
        graph = build(remember).compile(checkpointer=saver, store=store)
        out1 = graph.invoke({"user": "u{1}", "said": "hi", "seen": []}, {"configurable": {"thread_id": "t1"}})
        out2 = graph.invoke({"user": "u{1}", "said": "again", "seen": []}, {"configurable": {"thread_id": "t2"}})
        assert out1["seen"] == [] and out2["seen"] == ["hi"]  # across threads: the store's memory
        assert saver.get_tuple({"configurable": {"thread_id": "t2"}}).checkpoint["channel_values"]["said"] == "again"


async def test_async_graph_with_saver_and_store(redis_url, prefix):
    async with AsyncRedisSaver.from_conn_string(redis_url, prefix=prefix) as saver, AsyncRedisStore.from_conn_string(
        redis_url, prefix=prefix
    ) as store:
        graph = build(aremember).compile(checkpointer=saver, store=store)
        await graph.ainvoke({"user": "u", "said": "a", "seen": []}, {"configurable": {"thread_id": "t1"}})
        out = await graph.ainvoke({"user": "u", "said": "b", "seen": []}, {"configurable": {"thread_id": "t2"}})
        assert out["seen"] == ["a"]
        assert await store.alist_namespaces() == [("users", "u", "memories")]
