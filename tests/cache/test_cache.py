"""RedisCache / AsyncRedisCache against real servers (standalone and the local Redis Cluster),
with LangGraph's InMemoryCache as the reference: get/set/TTL/clear, hostile names, bad input,
errors, two workers on one server, the key layout (slots, prefixes)."""

from __future__ import annotations

import asyncio
import time

import pytest
from langgraph.cache.memory import InMemoryCache

from redis_saver.cache import _core as core
from redis_saver.cache.keys import CacheKeys
from redis_saver.keys import key_slot
from tests.cache.conftest import keys_under

HOSTILE = ["", "{", "}", "{x}", "%", "%7B", "*", "?", "[a]", "\\", "a:b", ":", "\x00", "\x00\xff", "é", "日本", " "]
NAMESPACES = [(), ("",), ("a",), ("a", ""), ("", "a"), ("a", "b"), ("a:b",), ("{",), ("}",), ("%",), ("*",),
              ("\x00",), ("\x00", ""), ("__pregel_ns_writes", "node")]


def _pairs(ttl=None):
    out = {}
    for i, ns in enumerate(NAMESPACES):
        for j, key in enumerate(HOSTILE):
            out[(ns, key)] = ({"ns": list(ns), "key": key, "i": i, "j": j}, ttl)
    return out


async def test_get_set_like_in_memory_cache(make_cache, raw, prefix):
    c = await make_cache()
    ref = InMemoryCache()
    pairs = _pairs()
    pairs[(("big",), "list")] = (["the same message"] * 2000, None)  # compressed (zstd) when stored
    pairs[(("big",), "bytes")] = (b"\x00\xff" * 5000, 60)
    await c.set(pairs)
    ref.set(pairs)
    wanted = list(pairs) + [(("missing",), "k"), (("a",), "missing"), (("a",), "")]
    assert await c.get(wanted) == ref.get(wanted)
    assert await c.get([]) == {}
    # overwrite some, read a single namespace (one MGET)
    again = {(("a",), k): (f"new {k}", None) for k in HOSTILE}
    await c.set(again)
    ref.set(again)
    assert await c.get(list(again)) == ref.get(list(again))
    assert await c.get(wanted) == ref.get(wanted)
    # every key is under <prefix>:cache{, and a namespace's keys share its slot
    stored = keys_under(raw, prefix)
    assert len(stored) == len(pairs) + len(NAMESPACES) + 1  # entries + one index per namespace
    ck = CacheKeys(prefix)
    for ns in NAMESPACES:
        names = [ck.index(ns)] + [ck.entry(ns, k) for k in HOSTILE]
        assert set(names) <= set(stored)
        assert {raw.cluster_keyslot(n) if hasattr(raw, "get_node_from_key") else key_slot(_tag(n)) for n in names} == {
            ck.slot(ns)
        }
    big = raw.get(ck.entry(("big",), "list"))
    assert b"\x1fz" in big[:20] and len(big) < 1000  # stored as a zstd frame


def _tag(name: bytes) -> bytes:
    start = name.index(b"{") + 1
    return name[start : name.index(b"}", start)]


async def test_ttl_per_key_and_expiry(make_cache, raw, prefix):
    c = await make_cache()
    ns = ("n",)
    await c.set({(ns, "short"): (1, 1), (ns, "long"): (2, 30), (ns, "none"): (3, None), (("m",), "short"): (4, 1)})
    ck = CacheKeys(prefix)
    assert 0 < raw.pttl(ck.entry(ns, "short")) <= 1000
    assert 29_000 < raw.pttl(ck.entry(ns, "long")) <= 30_000
    assert raw.pttl(ck.entry(ns, "none")) == -1
    assert raw.pttl(ck.index(ns)) == -1  # an entry without expiry: the index stays
    assert 0 < raw.pttl(ck.index(("m",))) <= 1000  # the index lives as long as its last entry
    assert await c.get([(ns, "short"), (ns, "long"), (ns, "none")]) == {(ns, "short"): 1, (ns, "long"): 2,
                                                                         (ns, "none"): 3}
    await asyncio.sleep(1.3)
    assert await c.get([(ns, "short"), (ns, "long"), (ns, "none"), (("m",), "short")]) == {(ns, "long"): 2,
                                                                                           (ns, "none"): 3}
    assert raw.exists(ck.index(("m",))) == 0
    # the next set drops the expired entry's index member
    assert raw.zscore(ck.index(ns), b"short") is not None
    await c.set({(ns, "other"): (5, 10)})
    assert raw.zscore(ck.index(ns), b"short") is None
    # ttl 0: expired at once, as InMemoryCache (the stored value goes too)
    await c.set({(ns, "none"): (6, 0)})
    assert await c.get([(ns, "none")]) == {}
    assert raw.exists(ck.entry(ns, "none")) == 0 and raw.zscore(ck.index(ns), b"none") is None
    # a no-expiry entry replaced by an expiring one: the index expires with its entries again
    await c.set({(ns, "long"): (7, 5), (ns, "other"): (8, 5)})
    assert 0 < raw.pttl(ck.index(ns)) <= 5000


async def test_clear_some_namespaces_then_all(make_cache, raw, prefix):
    c = await make_cache()
    other = await make_cache(prefix=prefix + "x")  # another prefix on the same server: never touched
    pairs = _pairs(ttl=60)
    await c.set(pairs)
    await other.set(pairs)
    # a namespace larger than one clear page
    big = {(("big",), str(i)): (i, None) for i in range(core.CLEAR_PAGE * 2 + 7)}
    await c.set(big)
    gone = [("a",), ("{",), ("big",), ("never set",)]
    await c.clear(gone)
    got = await c.get(list(pairs) + list(big))
    assert got == {k: v for k, (v, _) in pairs.items() if k[0] not in gone}
    ck = CacheKeys(prefix)
    assert not [k for k in keys_under(raw, prefix) if k.startswith(ck.base(("big",)))]
    await c.clear()
    assert await c.get(list(pairs)) == {}
    assert keys_under(raw, prefix) == []
    assert await other.get(list(pairs)) == {k: v for k, (v, _) in pairs.items()}
    await other.clear([])  # nothing
    assert len(await other.get(list(pairs))) == len(pairs)


async def test_two_workers_see_each_others_sets_and_clears(make_cache):
    a, b = await make_cache(), await make_cache()
    k = (("__pregel_ns_writes", "node"), "h1")
    await a.set({k: ("from a", None)})
    assert await b.get([k]) == {k: "from a"}
    await b.set({k: ("from b", None)})
    assert await a.get([k]) == {k: "from b"}
    await b.clear([k[0]])
    assert await a.get([k]) == {}
    await a.set({k: ("again", None)})
    await b.clear()
    assert await a.get([k]) == {}


@pytest.mark.parametrize(
    "bad, error",
    [
        ({(("ok",), "k"): (1, -1)}, ValueError),  # negative ttl
        ({(("ok",), "k"): (1, float("nan"))}, ValueError),
        ({(("ok",), "k"): (1, "10")}, TypeError),
        ({(("ok",), "k"): (1, True)}, TypeError),
        ({(("ok",), 3): (1, None)}, TypeError),  # key not a str
        ({(("ok", 1), "k"): (1, None)}, TypeError),  # namespace part not a str
        ({("ok", "k"): (1, None)}, TypeError),  # namespace a str
        ({(("ok",), "k"): 1}, TypeError),  # not a (value, ttl) pair
        ({(("ok",), "k\ud800"): (1, None)}, UnicodeEncodeError),  # not encodable
        ({(("ok",), "k"): (object(), None)}, TypeError),  # not serializable
    ],
)
async def test_bad_input_writes_nothing(make_cache, raw, prefix, bad, error):
    c = await make_cache()
    good = {(("ok",), f"g{i}"): (i, None) for i in range(3)} | {(("other",), "g"): (1, None)}
    with pytest.raises(error):
        await c.set(good | bad)
    assert keys_under(raw, prefix) == []
    with pytest.raises(TypeError):
        await c.get([("ok", "k")])
    with pytest.raises(TypeError):
        await c.clear("ok")


async def test_errors_reach_the_caller(make_cache):
    """A stopped server: every call raises (langgraph.cache.redis.RedisCache returns {} instead)."""
    import redis.exceptions

    from devkit.servers import start_standalone

    server = start_standalone()
    # 2 s: a connect to the live server must not time out on a loaded machine (parallel workers);
    # the stopped server refuses connections at once
    c = await make_cache(server.url, retries=1, socket_connect_timeout=2.0, socket_timeout=2.0)
    k = (("n",), "k")
    await c.set({k: (1, None)})
    assert await c.get([k]) == {k: 1}
    server.stop()
    t0 = time.monotonic()
    for call in (c.get([k]), c.set({k: (2, None)}), c.clear([("n",)]), c.clear()):
        with pytest.raises(redis.exceptions.ConnectionError):
            await call
    assert time.monotonic() - t0 < 10


def test_keys_never_meet_saver_keys_or_other_prefixes():
    """For hostile prefix pairs, no cache key is a saver key (nor another cache prefix's key)."""
    from redis_saver.keys import KeySchema

    prefixes = ["", "a", "a:", "a:cache", "a:cache:", "a:ix", "lg", "lg:cache", ":", "::", "*", "a:store", "cache"]
    names: dict[bytes, tuple[str, str]] = {}
    for p in prefixes:
        ck = CacheKeys(p)
        mine = {ck.index(ns) for ns in NAMESPACES} | {ck.entry(ns, k) for ns in NAMESPACES for k in HOSTILE}
        mine |= {ck.snapshot(ns) for ns in NAMESPACES}
        mine |= {ck.entry(ns, k + t) for ns in NAMESPACES for k in HOSTILE for t in ("}i", "}c")}
        for n in mine:
            assert n.startswith(p.encode() + b":cache{")
            assert names.setdefault(n, ("cache", p)) == ("cache", p), n
        assert {ck.namespace_base(n) for n in mine} - {None} == {ck.base(ns) for ns in NAMESPACES}
        assert {n for n in mine if ck.namespace_base(n)} == {ck.index(ns) for ns in NAMESPACES} | {
            ck.snapshot(ns) for ns in NAMESPACES}
        if p.endswith(":ix"):
            continue  # not a saver prefix
        sk = KeySchema(p)
        saver = {k for t in ["", "a", "{", "cache", "}e"] for k in sk.thread_keys(t)} | {sk.schema_key()}
        for n in saver:
            assert names.setdefault(n, ("saver", p)) == ("saver", p), n
    with pytest.raises(ValueError):
        CacheKeys("a{b")


async def test_async_cache_sync_methods_from_another_thread(redis_url, prefix):
    from redis_saver import AsyncRedisCache

    async with AsyncRedisCache.from_conn_string(redis_url, prefix=prefix) as cache:
        k = (("n",), "k")
        await cache.aset({k: (1, None)})
        assert await asyncio.to_thread(cache.get, [k]) == {k: 1}
        await asyncio.to_thread(cache.set, {k: (2, None)})
        assert await cache.aget([k]) == {k: 2}
        with pytest.raises(asyncio.InvalidStateError):
            cache.get([k])  # on the loop's own thread


def test_sync_cache_refuses_an_async_client(redis_url):
    import redis.asyncio

    from redis_saver import RedisCache

    with pytest.raises(TypeError):
        RedisCache(redis.asyncio.Redis.from_url(redis_url))


def test_spans_and_metrics(redis_url, prefix):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind, StatusCode

    from redis_saver import RedisCache, Telemetry

    spans = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    tel = Telemetry(tracer_provider=tp, meter_provider=MeterProvider(metric_readers=[reader]))
    with RedisCache.from_conn_string(redis_url, prefix=prefix, telemetry=tel) as cache:
        k = (("n",), "k")
        cache.set({k: ("v" * 100, None)})
        cache.get([k])
        cache.clear()
        with pytest.raises(TypeError):
            cache.set({k: (1, "x")})
    got = {s.name: s for s in spans.get_finished_spans()}
    assert set(got) == {"cache_set", "cache_get", "cache_clear"}
    assert all(s.kind == SpanKind.CLIENT and s.attributes["db.system.name"] == "redis" for s in got.values())
    assert got["cache_get"].attributes["redis_saver.bytes_received"] > 100
    assert got["cache_clear"].attributes["db.stored_procedure.name"] == "cache_clear"
    # the cache's calls name no thread (its script's ARGV[2] is not one)
    assert all("redis_saver.thread_id" not in s.attributes for s in got.values())
    failed = [s for s in spans.get_finished_spans() if s.status.status_code == StatusCode.ERROR]
    assert len(failed) == 1 and failed[0].attributes["error.type"] == "TypeError"
    names = {m.name for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics
             for m in sm.metrics}
    assert "db.client.operation.duration" in names


@pytest.mark.parametrize("auto_pipeline", [True, False])
async def test_concurrent_async_calls_get_their_own_replies(deployment, prefix, auto_pipeline):
    """AsyncRedisCache's calls from many tasks at once (through the lanes when auto_pipeline is
    on): every task reads back exactly what it wrote."""
    from redis_saver import AsyncRedisCache

    async with AsyncRedisCache.from_conn_string(deployment, prefix=prefix, auto_pipeline=auto_pipeline) as cache:
        assert cache.auto_pipeline is auto_pipeline

        async def task(i: int) -> None:
            mine = {((f"ns{i % 7}",), f"k{i}"): (f"value {i}", 60), ((f"ns{i % 5}", "x"), f"k{i}"): (i, None)}
            for _ in range(5):
                await cache.aset(mine)
                assert await cache.aget(list(mine)) == {k: v for k, (v, _) in mine.items()}
                assert await cache.aget([((f"ns{i % 7}",), f"missing{i}")]) == {}

        await asyncio.gather(*(task(i) for i in range(40)))
        await cache.aclear()


async def test_clear_ends_while_another_worker_keeps_setting(make_cache):
    """A clear of a namespace larger than a page ends although another worker keeps adding to it;
    everything set before the clear began is gone."""
    c, writer = await make_cache(), await make_cache()
    ns = ("busy",)
    before = {(ns, f"old{i}"): (i, None) for i in range(core.CLEAR_PAGE * 2 + 50)}
    await c.set(before)
    stop = asyncio.Event()

    async def keep_setting() -> int:
        n = 0
        while not stop.is_set():
            await writer.set({(ns, f"new{n + j}"): (j, None) for j in range(50)})
            n += 50
            await asyncio.sleep(0)
        return n

    task = asyncio.create_task(keep_setting())
    await asyncio.sleep(0.01)
    if make_cache.sync:
        await asyncio.to_thread(c.cache.clear, [ns])  # the writer runs on the loop meanwhile
    else:
        await c.clear([ns])
    stop.set()
    await task
    assert await c.get(list(before)) == {}


async def test_clear_finishes_what_a_stopped_clear_left(make_cache, raw, prefix):
    """A clear that stopped after taking the index (its snapshot left behind): the next clear, of
    that namespace or of all, deletes the snapshot's entries and the index's."""
    c = await make_cache()
    ck = CacheKeys(prefix)
    ns = ("n",)
    await c.set({(ns, f"old{i}"): (i, None) for i in range(10)})
    raw.rename(ck.index(ns), ck.snapshot(ns))  # what clear.lua's first call does
    await c.set({(ns, "new"): ("new", 60), (ns, "old3"): ("set again", None)})
    assert len(await c.get([(ns, f"old{i}") for i in range(10)])) == 10
    for which in ([ns], None):
        await c.clear(which)
        assert keys_under(raw, prefix) == []
        await c.set({(ns, "old1"): (1, None)})
        raw.rename(ck.index(ns), ck.snapshot(ns))


@pytest.mark.parametrize("seed", [1, 2])
async def test_random_ops_match_in_memory_cache(make_cache, seed):
    """Seeded random sequences of set / get / clear (hostile namespaces and keys; TTLs none,
    long or 0) through the Redis cache and InMemoryCache: every get answers the same."""
    import random

    rng = random.Random(seed)
    c, ref = await make_cache(), InMemoryCache()
    keys = [(ns, k) for ns in NAMESPACES[:8] for k in HOSTILE[:8]]
    mismatches = []
    for step in range(120):
        op = rng.random()
        if op < 0.45:
            pairs = {k: ({"step": step, "v": rng.random()}, rng.choice([None, 3600, 0]))
                     for k in rng.sample(keys, rng.randint(1, 6))}
            await c.set(pairs)
            ref.set(pairs)
        elif op < 0.9:
            wanted = rng.sample(keys, rng.randint(1, 10))
            got, exp = await c.get(wanted), ref.get(wanted)
            if got != exp:
                mismatches.append((step, wanted, got, exp))
        elif op < 0.97:
            nss = rng.sample(NAMESPACES[:8], rng.randint(1, 3))
            await c.clear(nss)
            ref.clear(nss)
        else:
            await c.clear()
            ref.clear()
    assert await c.get(keys) == ref.get(keys)
    assert mismatches == []
