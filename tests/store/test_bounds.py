"""Bounded work per script call: a large batch is split into calls of at most 256 ops (in one
round trip still), and a search that filters a large namespace pages through it, each call
examining a bounded number of entries."""

from __future__ import annotations

import redis
from langgraph.store.base import GetOp, PutOp

from devkit.servers import client_kwargs
from redis_saver import RedisStore
from redis_saver.core.engine import Cmd, Pipe
from tests.store.test_store import count_round_trips

N = 3000


def script_calls(op) -> int:
    return len(op.commands) if isinstance(op, Pipe) else int(isinstance(op, Cmd) and op.name == "fcall")


def test_large_batches_and_namespaces_take_bounded_calls(redis_url, prefix):
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    store = RedisStore(client, prefix=prefix)
    store.setup()
    ops = count_round_trips(store)
    store.batch([PutOp(("big",), f"k{i}", {"i": i, "even": i % 2 == 0}) for i in range(N)])
    assert len(ops) == 1 and script_calls(ops[0]) == -(-N // 256)  # 12 calls, one pipeline
    ops.clear()
    got = store.batch([GetOp(("big",), f"k{i}") for i in range(0, N, 3)])
    assert [g.value["i"] for g in got] == list(range(0, N, 3)) and len(ops) == 1
    ops.clear()
    # a filter that matches nothing: every item is examined, 256 per call
    assert store.search(("big",), filter={"i": -1}, limit=10) == []
    assert len(ops) == -(-N // 256)
    ops.clear()
    found = store.search(("big",), filter={"even": True}, limit=10, offset=1000)
    assert [i.value["i"] for i in found] == list(range(2000, 2020, 2))
    assert len(ops) == -(-2020 // 256)  # it stops at the page that completes offset + limit
    ops.clear()
    # without a filter a page holds offset + limit items
    assert [i.value["i"] for i in store.search(("big",), limit=5, offset=2990)] == list(range(2990, 2995))
    assert len(ops) == -(-2995 // 256)
    # list_namespaces over many namespaces pages the same way
    store.batch([PutOp(("many", f"n{i:04d}"), "k", {"i": i}) for i in range(1500)])
    ops.clear()
    names = store.list_namespaces(prefix=("many",), limit=2000)
    assert names == [("many", f"n{i:04d}") for i in range(1500)] and len(ops) == 2  # 1024 a page
    # a search under more namespaces than one call sorts (1024) walks them in search order
    assert [i.value["i"] for i in store.search(("many",), limit=1500)] == list(range(1500))
    assert [i.namespace for i in store.search(("many",), filter={"i": 1499})] == [("many", "n1499")]
    assert [i.namespace for i in store.search(("many", "n0001"), limit=3)] == [("many", "n0001")]
    client.close()
