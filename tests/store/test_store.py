"""RedisStore / AsyncRedisStore on a real server: the public methods, one round trip per batch,
bad input refused before anything is written, the key layout (its own slot per shard, never a
saver's key), setup's layout check, from_conn_string, telemetry spans."""

from __future__ import annotations

import asyncio
import random
from datetime import datetime, timezone
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from langgraph.store.base import GetOp, InvalidNamespaceError, ListNamespacesOp, PutOp, SearchOp
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from devkit.servers import client_kwargs
from redis_saver import AsyncRedisStore, KeySchema, RedisStore, SchemaMismatchError, Telemetry
from redis_saver.store import StoreKeys
from redis_saver.store._keys import dec_ns, enc_ns

HOSTILE = ("{user}", "a:b", "*?[x]", "日本語", "%7B", "}{", "\\", " ")


@pytest.fixture
def store(redis_url, prefix):
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    s = RedisStore(client, prefix=prefix)
    s.setup()
    yield s
    client.close()


def prefix_keys(client: Any, prefix: str) -> list[bytes]:
    return sorted(client.scan_iter(match=StoreKeys(prefix, 1, None).scan_pattern(), count=1000))


def count_round_trips(store: Any) -> list[Any]:
    """Each operation the driver performs is one round trip (a pipeline is one)."""
    ops: list[Any] = []
    do = store._driver._do

    def counted(op: Any) -> Any:
        ops.append(op)
        return do(op)

    store._driver._do = counted
    return ops


def test_public_methods(store):
    ns = ("users", *HOSTILE[:3])
    store.put(ns, "k{1}", {"a": 1, "text": "hello"})
    store.put(ns, "k2", {"a": 2})
    store.put(("users", "other"), "k", {"a": 3})
    item = store.get(ns, "k{1}")
    assert item.value == {"a": 1, "text": "hello"} and item.namespace == ns and item.key == "k{1}"
    assert item.created_at == item.updated_at and item.created_at.tzinfo == timezone.utc
    assert abs((datetime.now(timezone.utc) - item.created_at).total_seconds()) < 5
    store.put(ns, "k{1}", {"a": 10})
    again = store.get(ns, "k{1}")
    assert again.created_at == item.created_at and again.updated_at > item.updated_at  # as PostgresStore
    assert [i.key for i in store.search(("users",))] == ["k{1}", "k2", "k"]  # insertion order
    assert [i.key for i in store.search(("users",), filter={"a": {"$gte": 3}})] == ["k{1}", "k"]
    assert [i.key for i in store.search(("users",), limit=1, offset=1)] == ["k2"]
    assert store.list_namespaces() == sorted([ns, ("users", "other")])
    assert store.list_namespaces(prefix=("users", "*"), max_depth=2) == sorted([ns[:2], ("users", "other")])
    assert store.list_namespaces(suffix=(HOSTILE[2],)) == [ns]
    store.delete(ns, "k{1}")
    assert store.get(ns, "k{1}") is None
    store.delete(ns, "k2")
    assert store.list_namespaces() == [("users", "other")]
    with pytest.raises(InvalidNamespaceError):  # BaseStore's rules: no dots, empty labels, NUL
        store.put(("a.b",), "k", {})


async def test_async_public_methods(redis_url, prefix):
    client = aredis.Redis.from_url(redis_url, socket_timeout=5.0)
    store = AsyncRedisStore(client, prefix=prefix)
    await store.setup()
    ns = ("u", *HOSTILE)
    await store.aput(ns, "k", {"x": 1})
    assert (await store.aget(ns, "k")).value == {"x": 1}
    assert [i.value for i in await store.asearch(("u",))] == [{"x": 1}]
    assert await store.alist_namespaces(prefix=("u",)) == [ns]
    # the sync methods from another thread, on the store's loop
    assert (await asyncio.to_thread(store.get, ns, "k")).value == {"x": 1}
    with pytest.raises(asyncio.InvalidStateError):
        store.get(ns, "k")
    await store.adelete(ns, "k")
    assert await store.aget(ns, "k") is None and await store.alist_namespaces() == []
    await client.aclose()


def test_one_round_trip_per_batch(store):
    ops = count_round_trips(store)
    store.put(("a", "b"), "k", {"v": 1})
    store.get(("a", "b"), "k")
    store.search(("a",), filter={"v": 1})
    store.search(("a",), query="ignored without an index")
    store.list_namespaces(prefix=("a",))
    store.delete(("a", "b"), "k")
    # gets and puts of several namespaces in one batch: one script call per shard (one here)
    store.batch([PutOp(("x", str(i)), "k", {"i": i}) for i in range(20)] + [GetOp(("x", "1"), "k")])
    assert len(ops) == 7, ops
    ops.clear()
    store.batch([SearchOp(("x",), limit=5), PutOp(("x", "1"), "k", None), ListNamespacesOp((), limit=3)])
    assert len(ops) == 2  # reads first (they see the store before the batch), then the writes
    assert [i.key for i in store.search(("x", "1"))] == []


def test_namespaces_may_be_any_sequence_of_str(store):
    """Lists (any sequence of str) where tuples are expected, as PostgresStore and SqliteStore
    take them: every public method; results carry tuples."""
    store.put(["users", "u1"], "k", {"text": "hello"})
    store.batch([PutOp(["users", "u2"], "k", {"v": 2})])
    assert store.get(["users", "u1"], "k").namespace == ("users", "u1")
    assert [i.namespace for i in store.search(["users"])] == [("users", "u1"), ("users", "u2")]
    assert [i.key for i in store.batch([SearchOp(["users", "u2"])])[0]] == ["k"]
    assert store.list_namespaces(prefix=["users"], suffix=["u1"]) == [("users", "u1")]
    assert store.list_namespaces(prefix=["users", "*"], max_depth=1) == [("users",)]
    assert [i.namespace for i in store.export_items(["users", "u1"])] == [("users", "u1")]
    store.delete(["users", "u1"], "k")
    assert store.get(("users", "u1"), "k") is None and len(store.search(("users",))) == 1


async def test_async_namespaces_may_be_any_sequence_of_str(redis_url, prefix):
    async with AsyncRedisStore.from_conn_string(redis_url, prefix=prefix) as store:
        await store.aput(["a", "b"], "k", {"v": 1})
        assert (await store.aget(["a", "b"], "k")).namespace == ("a", "b")
        assert [i.key for i in await store.asearch(["a"])] == ["k"]
        assert await store.alist_namespaces(prefix=["a"]) == [("a", "b")]
        assert [i.namespace async for i in store.aexport_items(["a"])] == [("a", "b")]
        await store.adelete(["a", "b"], "k")
        assert await store.asearch(["a"]) == []


def test_a_batch_sees_the_store_before_its_puts(store):
    got = store.batch([PutOp(("n",), "k", {"v": 1}), GetOp(("n",), "k"), SearchOp(("n",)), ListNamespacesOp(())])
    assert got == [None, None, [], []]
    got = store.batch([PutOp(("n",), "k", {"v": 2}), PutOp(("n",), "k", {"v": 3}), GetOp(("n",), "k")])
    assert got[2].value == {"v": 1} and store.get(("n",), "k").value == {"v": 3}  # the last put wins


@pytest.mark.parametrize(
    "bad",
    [
        PutOp(("n",), "k", {"v": 1}, ttl=-1),
        PutOp(("n",), "k", {"v": 1}, ttl=float("nan")),
        PutOp(("n",), "k", ["not", "a", "dict"]),  # type: ignore[arg-type]
        PutOp(("n",), 7, {"v": 1}),  # type: ignore[arg-type]
        PutOp("n", "k", {"v": 1}),  # type: ignore[arg-type] (a str is no namespace: its characters are not labels)
        SearchOp(b"n"),  # type: ignore[arg-type]
        PutOp(("n", 3), "k", {"v": 1}),  # type: ignore[arg-type]
        PutOp(("n",), "k", {"v": object()}),
        SearchOp(("n",), filter={"v": {"$regex": "x"}}),
        SearchOp(("n",), limit="3"),  # type: ignore[arg-type]
        ListNamespacesOp((), max_depth="2"),  # type: ignore[arg-type]
        "not an op",
    ],
)
def test_bad_input_writes_nothing(store, redis_url, prefix, bad):
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    before = prefix_keys(client, prefix)
    with pytest.raises((TypeError, ValueError)):
        store.batch([PutOp(("n",), "good", {"v": 1}), bad])
    assert prefix_keys(client, prefix) == before
    client.close()


def test_scripts_check_every_write_before_the_first(store, redis_url, prefix):
    """A malformed call (not one the plans send) fails with nothing written."""
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    before = prefix_keys(client, prefix)
    key = store.keys.index(0)
    good = [b"p", enc_ns(("n",)), b"k\0", b"0", b"0", b"json", b"{}", b"0"]
    for args in (
        [b"1", b"1", b"2", *good, b"p", b"x", b"y"],  # the second put misses its arguments
        [b"1", b"1", b"2", *good, b"z", b"x", b"y"],  # an unknown write
        [b"1", b"1", b"1", b"p", b"n\0", b"k\0", b"0", b"-5", b"json", b"{}", b"0"],  # a negative ttl
        [b"9", b"1", b"1", *good],  # another format
    ):
        with pytest.raises(redis.ResponseError):
            client.eval(store._driver.engine.scripts["store_write"].source, 1, key, *args)
    assert prefix_keys(client, prefix) == before
    client.close()


def test_namespace_encoding_is_injective_and_ordered():
    rng = random.Random(7)
    labels = ["", "a", "a\0", "\0", "\0\0", "b", "ab", "{", "}", "é", "\uffff", "a\0b"]
    seen: dict[bytes, tuple[str, ...]] = {}
    for _ in range(3000):
        ns = tuple(rng.choice(labels) for _ in range(rng.randint(0, 3)))
        e = enc_ns(ns)
        assert dec_ns(e) == ns
        assert seen.setdefault(e, ns) == ns
    names = sorted(seen.values())
    assert sorted(names, key=enc_ns) == names  # byte order of the encodings is tuple order


def test_keys_never_meet_a_savers():
    """A saver key's first "{" follows ":", a store key's follows ":store#"; no prefix holds a
    brace: whatever the two prefixes, no key is both (and the ACL patterns stay apart)."""
    prefixes = ["lg", "lg:store#", "lg:store", "lg:ix", "", ":", "a:store#:b", "x#", "store#"]
    for sp in prefixes:
        store_keys = StoreKeys(sp, 4, None)
        names = [store_keys.index(s) for s in range(4)] + [store_keys.schema(), store_keys.item(("{a}",), "k")]
        for p in prefixes:
            if p.endswith(":ix"):
                continue
            saver = KeySchema(p)
            saver_names = [*saver.thread_keys("t"), *saver.thread_keys(":store#{x}"), saver.schema_key()]
            assert not set(names) & set(saver_names)
            for n in names:
                head = n[: n.index(b"{")]
                assert head.endswith(b":store#") and not head.endswith(b":") and not head.endswith(b":ix:")


def test_each_shard_is_one_slot(store):
    keys = StoreKeys("p", 16, None)
    slots = {redis.cluster.key_slot(keys.index(s)) for s in range(16)}
    assert slots == {s * 16384 // 16 for s in range(16)}
    ns = ("a", "b")
    assert redis.cluster.key_slot(keys.item(ns, "k")) == redis.cluster.key_slot(keys.index(keys.shard(ns)))
    depth = StoreKeys("p", 16, 1)
    assert depth.shards_under(("a",)) == [depth.shard(("a", "x"))] == [depth.shard(("a", "y", "z"))]
    assert len(depth.shards_under(())) == 16 and len(keys.shards_under(("a",))) == 16


def test_setup_refuses_another_layout(redis_url, prefix, store):
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    RedisStore(client, prefix=prefix).setup()  # the same layout: fine
    with pytest.raises(SchemaMismatchError):
        RedisStore(client, prefix=prefix, shards=4).setup()
    client.close()


def test_from_conn_string(redis_url, prefix):
    with RedisStore.from_conn_string(redis_url, prefix=prefix, socket_timeout=3.0) as s:
        s.put(("n",), "k", {"v": 1})
        assert s.get(("n",), "k").value == {"v": 1}
        assert s._driver.engine.retries == 3


async def test_async_from_conn_string(redis_url, prefix):
    async with AsyncRedisStore.from_conn_string(redis_url, prefix=prefix) as s:
        await s.aput(("n",), "k", {"v": 1})
        assert (await s.aget(("n",), "k")).value == {"v": 1}


@pytest.mark.cluster
def test_cluster_url(cluster, cprefix):
    host, port = cluster.startup_nodes[0]
    with RedisStore.from_conn_string(f"redis+cluster://{host}:{port}", prefix=cprefix) as s:
        assert s.keys.shards == 16
        s.setup()
        s.batch([PutOp((f"n{i}",), "k", {"i": i}) for i in range(40)])
        assert len(s.list_namespaces(limit=100)) == 40
        assert [i.value["i"] for i in s.search((), limit=100)] == list(range(40))


def test_values_are_serializer_bytes_compressed_where_it_pays(store, redis_url, prefix):
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    store.put(("n",), "small", {"v": 1})
    store.put(("n",), "large", {"v": "x" * 5000})
    small = client.get(store.keys.item(("n",), "small"))
    large = client.get(store.keys.item(("n",), "large"))
    assert small.split(b"\n", 1)[0].endswith(b" msgpack") and len(small) < 60
    assert large.split(b"\n", 1)[0].endswith(b" msgpack\x1fz") and len(large) < 200
    assert store.get(("n",), "large").value == {"v": "x" * 5000}
    client.close()


def test_telemetry_spans(redis_url, prefix):
    spans = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    store = RedisStore(client, prefix=prefix, telemetry=Telemetry(tp))
    store.put(("n",), "k", {"v": 1})
    store.get(("n",), "k")
    store.search(("n",))
    store.list_namespaces()
    store.batch([GetOp(("n",), "k"), GetOp(("n",), "j")])
    got = [(s.name, s.attributes.get("db.stored_procedure.name")) for s in spans.get_finished_spans()]
    assert got == [
        ("store.probe", "store_read"),  # once, by the first call: does the server keep vector sets
        ("store.put", "store_write"),
        ("store.get", "store_read"),
        ("store.search", "store_read"),
        ("store.list_namespaces", "store_read"),
        ("store.batch", "store_read"),
    ]
    assert all("redis_saver.thread_id" not in s.attributes for s in spans.get_finished_spans())
    client.close()


def test_evalsha_path_after_script_flush(redis_url, prefix):
    """functions=False: EVALSHA, and EVAL of the body after NOSCRIPT (SCRIPT FLUSH)."""
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    store = RedisStore(client, prefix=prefix, functions=False)
    store.put(("n",), "k", {"v": 1})
    client.script_flush()
    ops = count_round_trips(store)
    assert store.get(("n",), "k").value == {"v": 1}
    store.put(("n",), "j", {"v": 2})
    assert [op.name for op in ops] == ["evalsha", "eval", "evalsha", "eval"]  # each script reloaded once
    ops.clear()
    store.put(("n",), "j", {"v": 3})
    assert [op.name for op in ops] == ["evalsha"] and store.get(("n",), "j").value == {"v": 3}
    client.close()


@pytest.mark.sentinel
def test_sentinel_url(sentinel, prefix):
    hosts = ",".join(f"{h}:{p}" for h, p in sentinel.sentinels)
    with RedisStore.from_conn_string(f"redis+sentinel://{hosts}/{sentinel.master_name}", prefix=prefix) as s:
        assert isinstance(s.client.connection_pool, redis.sentinel.SentinelConnectionPool)
        s.put(("n",), "k", {"v": 1})
        assert s.get(("n",), "k").value == {"v": 1} and s.list_namespaces() == [("n",)]
        s.delete(("n",), "k")


@pytest.mark.cluster
def test_cluster_fanout_goes_per_node_and_follows_redirects(cluster_client, cprefix, monkeypatch):
    """A fan-out over 16 shards is one plain pipeline per primary (no COMMAND GETKEYS); a
    command sent to the wrong node (a stale slot map) is answered MOVED and goes again through
    redis-py's cluster pipeline."""
    store = RedisStore(cluster_client, prefix=cprefix)
    store.batch([PutOp((f"n{i}",), "k", {"i": i}) for i in range(40)])
    real = cluster_client.get_node_from_key
    nodes = {n.name: n for n in cluster_client.get_primaries()}
    wrong = {store.keys.index(s) for s in range(0, 16, 3)}

    def stale(key, *args, **kwargs):
        node = real(key, *args, **kwargs)
        if key in wrong:  # another primary than the one that serves the key
            return next(n for name, n in nodes.items() if name != node.name)
        return node

    piped: list[tuple] = []  # the commands queued on redis-py's cluster pipelines
    cluster_pipeline = cluster_client.pipeline

    def counted(*args, **kwargs):
        pipe = cluster_pipeline(*args, **kwargs)
        queue = pipe.execute_command

        def queued(*cmd, **options):
            piped.append(cmd)
            return queue(*cmd, **options)

        pipe.execute_command = queued
        return pipe

    monkeypatch.setattr(cluster_client, "get_node_from_key", stale)
    monkeypatch.setattr(cluster_client, "pipeline", counted)
    stats = [n.redis_connection.info("commandstats") for n in nodes.values()]
    assert [i.value["i"] for i in store.search((), limit=100)] == list(range(40))
    assert store.list_namespaces(limit=100) == sorted((f"n{i}",) for i in range(40))
    after = [n.redis_connection.info("commandstats") for n in nodes.values()]
    getkeys = [a.get("cmdstat_command|getkeys", {}).get("calls", 0) - b.get("cmdstat_command|getkeys", {}).get(
        "calls", 0) for a, b in zip(after, stats, strict=True)]
    # only the redirected commands went through redis-py's cluster pipeline (once per fan-out: the
    # search's and the listing's), each of them
    assert {cmd[3] for cmd in piped} == wrong and len(piped) == 2 * len(wrong), piped
    # and only they may have cost a COMMAND GETKEYS (redis-py before 8.2 asks a server for an FCALL's
    # keys, twice; 8.2 reads them from the command's key specs): the per-node pipelines never do
    assert sum(getkeys) <= 2 * len(piped)


@pytest.mark.parametrize("auto_pipeline", [True, False], ids=["autopipe", "pooled"])
async def test_async_concurrent_calls(redis_url, prefix, auto_pipeline):
    """64 tasks at once: each gets its own answer (AsyncRedisStore's calls share lanes when on)."""
    client = aredis.Redis.from_url(redis_url, socket_timeout=5.0)
    store = AsyncRedisStore(client, prefix=prefix, auto_pipeline=auto_pipeline)
    assert (store._driver.router is not None) == auto_pipeline

    async def one(i: int) -> tuple[int, Any, list]:
        ns = ("u", f"n{i % 8}")
        await store.aput(ns, f"k{i}", {"i": i})
        got = await store.aget(ns, f"k{i}")
        found = await store.asearch(ns, filter={"i": i})
        return i, got.value, [x.value for x in found]

    results = await asyncio.gather(*[one(i) for i in range(64)])
    assert all(v == {"i": i} and f == [{"i": i}] for i, v, f in results)
    assert len(await store.alist_namespaces()) == 8
    with pytest.raises(TypeError):
        RedisStore(redis.Redis(), auto_pipeline=True)
    await client.aclose()


@pytest.mark.cluster
def test_cluster_fanout_survives_a_node_connection_error(cluster_client, cprefix, monkeypatch):
    """A node's pipeline that fails to connect goes again through redis-py's cluster pipeline."""
    from devkit.servers import free_port

    store = RedisStore(cluster_client, prefix=cprefix)
    store.batch([PutOp((f"n{i}",), "k", {"i": i}) for i in range(40)])
    real = cluster_client.get_redis_connection
    victim = cluster_client.get_primaries()[0].name
    dead = redis.Redis(port=free_port(), socket_connect_timeout=0.5, retry=None)
    calls = []

    def flaky(node):
        calls.append(node.name)
        return dead if node.name == victim else real(node)

    monkeypatch.setattr(cluster_client, "get_redis_connection", flaky)
    assert [i.value["i"] for i in store.search((), limit=100)] == list(range(40))
    assert victim in calls


def test_script_headers_name_what_the_plans_send(store):
    """Each read and write code the plans send is documented in its script's header, with the
    number of arguments the script takes for it."""
    from redis_saver.core.scripts import lua_dir
    from redis_saver.store._plans import Config, batch_plan, prepare
    from redis_saver.store._transfer import StoredItem, import_plan

    cfg: Config = store._cfg
    sent: dict[str, set[bytes]] = {"store_read": set(), "store_write": set()}

    def codes(call, widths):
        args = list(call.args)[3:]
        pos = 0
        while pos < len(args):
            code = args[pos]
            sent[call.script.split("+")[0]].add(code)
            pos += widths[code] + (2 * int(args[pos + widths[code] - 1]) if code in (b"p", b"P") else 0)
        assert pos == len(args)

    read_w = {b"g": 3, b"G": 3, b"s": 6, b"l": 4}
    write_w = {b"p": 8, b"P": 10, b"d": 3, b"r": 3}
    ops = [GetOp(("n",), "k"), SearchOp(("n",)), ListNamespacesOp(())]
    plan = batch_plan(cfg, prepare(cfg, ops), [], {})
    codes(next(plan), read_w)
    plan = batch_plan(cfg, prepare(cfg, [PutOp(("n",), "k", {"v": 1}), PutOp(("n",), "j", None)]), [], {})
    codes(next(plan), write_w)
    codes(next(import_plan(cfg, [StoredItem(("n",), "k", "json", b"{}", 1, 2)])), write_w)
    assert sent == {"store_read": {b"g", b"s", b"l"}, "store_write": {b"p", b"d", b"P"}}
    for script, widths in (("store_read", read_w), ("store_write", write_w)):
        header = (lua_dir() / f"{script}.lua").read_text().split("]]", 1)[0]
        for code, width in widths.items():
            line = next(x for x in header.splitlines() if x.strip().startswith(f'"{code.decode()}" '))
            words = line.split(":")[0].split()
            documented = words.index("nvec") + 1 if "nvec" in words else len(words)
            assert documented == width, (script, code, line)


def test_out_of_memory_reads_and_deletes_work_puts_write_nothing(redis_url, prefix):
    """Under maxmemory with noeviction: gets, searches and listings (no-writes scripts) and a
    batch of deletes (allow-oom) run; a put is refused before its first write."""
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    store = RedisStore(client, prefix=prefix)
    store.batch([PutOp(("n",), f"k{i}", {"i": i}) for i in range(5)])
    before = prefix_keys(client, prefix)
    used = int(client.info("memory")["used_memory"])
    old = client.config_get("maxmemory")["maxmemory"], client.config_get("maxmemory-policy")["maxmemory-policy"]
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", str(max(1, used - 100_000)))
    try:
        assert store.get(("n",), "k1").value == {"i": 1}
        assert len(store.search(("n",))) == 5 and store.list_namespaces() == [("n",)]
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            store.put(("n",), "new", {"i": 9})
        assert prefix_keys(client, prefix) == before
        store.batch([PutOp(("n",), f"k{i}", None) for i in range(4)])
        assert [i.key for i in store.search(("n",))] == ["k4"]
    finally:
        client.config_set("maxmemory", old[0])
        client.config_set("maxmemory-policy", old[1])
        client.close()


def test_rediss_url(tls_server, prefix):
    with RedisStore.from_conn_string(tls_server.url, prefix=prefix, ssl_ca_certs=tls_server.ca_file) as s:
        s.put(("n",), "k", {"v": 1})
        assert s.get(("n",), "k").value == {"v": 1}
        s.delete(("n",), "k")


async def test_unix_socket_url(prefix, tmp_path):
    """unix:// (a server of its own listening on a socket)."""
    from devkit.servers import start_standalone

    sock = tmp_path / "redis.sock"
    server = start_standalone(extra_args=["--unixsocket", str(sock), "--unixsocketperm", "700"])
    try:
        async with AsyncRedisStore.from_conn_string(f"unix://{sock}", prefix=prefix) as s:
            await s.aput(("n",), "k", {"v": 1})
            assert (await s.aget(("n",), "k")).value == {"v": 1}
    finally:
        server.stop()


def test_a_lost_namespace_index_is_filled_again_by_puts(store, redis_url, prefix):
    """The shard's namespace index (``n``) deleted or evicted (an allkeys policy takes any key)
    while the namespaces keep their items: list_namespaces (and the vector sets' rebuild, which
    lists through it) no longer find them, and the next put into each namespace, of a new item or
    of one it holds, lists it again. (Before, only a namespace's first item listed it, so under
    allkeys eviction namespaces dropped out of list_namespaces and reindex for good.)"""
    nss = [("u", "a"), ("u", "b"), ("v",)]
    for ns in nss:
        store.put(ns, "k", {"x": 1})
        store.put(ns, "k2", {"x": 2})
    assert store.list_namespaces() == sorted(nss)
    r = redis.Redis.from_url(redis_url)
    lost = [k for k in r.scan_iter(match=f"{prefix}:store#*:n")]
    assert lost and r.delete(*lost) == len(lost)
    r.close()
    assert store.list_namespaces() == []
    store.put(("u", "a"), "k", {"x": 3})  # an item it holds
    store.put(("v",), "new", {"x": 4})  # a new item
    assert store.list_namespaces() == [("u", "a"), ("v",)]
    store.put(("u", "b"), "k2", {"x": 5})
    assert store.list_namespaces() == sorted(nss)
    assert [store.get(ns, "k").value for ns in nss] == [{"x": 3}, {"x": 1}, {"x": 1}]
