"""The vector cache filled in pages while other workers write (redis_saver/store/_plans.py
``fill_plan``, ``_vcache.keep_pages``), on Redis 7 and Redis 8.

A fill reads the prefix a bounded page per call; other workers put, overwrite, move (delete
and put again: read twice), delete, expire and evict items between its pages. The entry is
kept at the first page's version token, so the cached reads that follow must bring every
change since (patches) and answer exactly as the scan path does on what Redis holds: never
an item Redis no longer holds, never stale vectors. On Redis 8 the fill is started by a
repeated search and runs in the background (a thread of RedisStore, a task of
AsyncRedisStore) while the sets answer.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis

from devkit.servers import client_kwargs
from redis_saver import RedisStore
from redis_saver.keys import enc
from redis_saver.store import _base, _budgets, _plans
from redis_saver.store._keys import enc_ns

from .test_vector_cache import (
    INDEX,
    NS,
    QUERIES,
    SERVERS,
    _numpy,  # noqa: F401 (an autouse fixture: numpy, InMemoryStore's Python path)
    check,
    check_all,
    fill,
    norm,
    server_client,
    stores,
)

client = pytest.fixture(params=SERVERS)(server_client)


def racing(fill_plan: Any, between: Any) -> Any:
    """``fill_plan`` with ``between(page)`` run after each of its calls' replies (the other
    workers' writes land between the fill's pages)."""

    def plan(cfg: Any, key: Any, dims: int) -> Any:
        inner = fill_plan(cfg, key, dims)
        reply, page = None, 0
        try:
            while True:
                call = inner.send(reply)
                reply = yield call
                between(page)
                page += 1
        except StopIteration as stop:
            return stop.value

    return plan


def test_fill_racing_writes_deletes_expiry_and_eviction(client, prefix, monkeypatch):
    a, b, c = stores(client, prefix)
    fill(b, 40)
    monkeypatch.setattr(_budgets, "VECTOR_PAGE", 4)  # 10+ pages: writes land between them
    base = b.keys.base(0)
    gone = ["k1", "k30", "k5", "k2-old-place"]

    def between(page: int) -> None:
        if page == 1:
            b.put(NS, "k0", {"text": "apple melon apple melon apple"})  # read already: new vectors
            b.delete(NS, "k1")  # read already
            b.delete(NS, "k30")  # not read yet
            b.put(NS, "new1", {"text": "apple melon melon"})
        elif page == 2:
            b.delete(NS, "k2")  # read already, then put again: last in order, read twice
            b.put(NS, "k2", {"text": "melon apple apple"})
        elif page == 3:
            b.put(NS, "short", {"text": "apple melon melon melon"}, ttl=0.005)  # expires in 300 ms
        elif page == 4:  # evicted (no version bump): read already
            client.delete(base + b"i:" + enc_ns(NS) + enc("k5"), base + b"v:" + enc_ns(NS) + enc("k5"))

    vc = a._cfg.state.vcache
    key = (0, enc_ns(NS))
    kept = a._driver.run(racing(_plans.fill_plan, between)(a._cfg, key, INDEX["dims"]), "store.fill")
    assert kept and vc.fills == 1
    entry = vc.get(key)
    assert entry is not None and len(entry.keys) > len(entry.index)  # k2 read twice, one copy dead
    time.sleep(0.6)  # "short" expired
    for q in ("apple melon", "melon apple", "kiwi"):
        got = check(a, c, q, ref=False, limit=50)
        keys = [r[1] for r in got]
        assert not {"k1", "k30", "k5", "short"} & set(keys) and keys.count("k2") == 1, gone
    assert vc.misses == 0 and vc.patches >= 1 and vc.hits == 3  # patched to current, no scan
    b.delete(NS, "k0")  # the best item, deleted after the fill: never served
    got = check(a, c, "apple melon", ref=False, limit=5)
    assert "k0" not in [r[1] for r in got]
    check_all(a, c, ref=False)
    assert vc.misses == 0 and vc.fills == 1


def test_fill_of_two_incarnations_is_not_kept(client, prefix, monkeypatch):
    """The version key lost between pages (a new incarnation): the pages are not kept."""
    a, b, c = stores(client, prefix)
    fill(b, 20)
    monkeypatch.setattr(_budgets, "VECTOR_PAGE", 4)
    w = b.keys.base(0) + b"w"

    def between(page: int) -> None:
        if page == 1:
            client.delete(w)
            b.put(NS, "k3", {"text": "fig"})  # a new token, of a new incarnation

    kept = a._driver.run(racing(_plans.fill_plan, between)(a._cfg, (0, enc_ns(NS)), INDEX["dims"]), "store.fill")
    assert kept is False and a._cfg.state.vcache.fills == 0
    check_all(a, c)


def test_redis8_background_fill_while_another_worker_writes(redis8, prefix, monkeypatch):
    """Redis 8: repeated searches of a prefix are answered from the sets while the cache fills
    in the background (small pages, so the fill spans many calls); another worker puts and
    deletes meanwhile, in its own thread. Every answer, before, during and after the fill,
    equals the scan path's; once the fill is in, searches are answered from the cache."""
    monkeypatch.setattr(_budgets, "VECTOR_PAGE", 8)
    r = redis.Redis.from_url(redis8.url, **client_kwargs(5.0, 5.0))
    a, b, c = stores(r, prefix)
    fill(b, 200)
    scans = a._cfg.state.vset_stats["scans"]  # (stores()'s search of the empty prefix)
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            b.put(NS, f"w{i}", {"text": "apple melon kiwi"[: 5 + i % 11]})
            b.delete(NS, f"k{i % 200}")
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    started = []
    try:
        for n in range(60):
            q, kw = QUERIES[n % len(QUERIES)]
            a.search(NS, query=q, **kw)  # while the writer writes (and the fill reads)
            started.append(bool(a._background))
            # compared with the scan path on what Redis holds: the writer paused
            stop.set()
            t.join()
            assert norm(a.search(NS, query=q, **kw)) == norm(c.search(NS, query=q, **kw))
            stop.clear()
            t = threading.Thread(target=writer)
            t.start()
    finally:
        stop.set()
        t.join()
    a._settle()
    vc = a._cfg.state.vcache
    assert any(started) and vc.fills >= 1 and vc.hits > 0
    assert a._cfg.state.vset_stats["scans"] == scans  # no search scanned: the sets, then the cache
    check_all(a, c, ref=False)
    r.close()


async def test_async_background_fill(redis8, prefix, monkeypatch):
    """AsyncRedisStore on Redis 8: the fill is a task of its loop; searches meanwhile are
    answered from the sets, then from the cache; a delete after it is never served."""
    import redis.asyncio as aredis

    from redis_saver import AsyncRedisStore

    monkeypatch.setattr(_budgets, "VECTOR_PAGE", 4)
    r = redis.Redis.from_url(redis8.url, **client_kwargs(5.0, 5.0))
    ac = aredis.Redis.from_url(redis8.url, socket_timeout=5.0)
    a = AsyncRedisStore(ac, prefix=prefix, index=INDEX)
    b = RedisStore(r, prefix=prefix, index=INDEX)
    c = RedisStore(r, prefix=prefix, index=INDEX, vector_cache_bytes=0)
    fill(b, 40)
    for n, (q, kw) in enumerate(QUERIES):  # from the sets; the 2nd starts the fill
        assert norm(await a.asearch(NS, query=q, **kw)) == norm(c.search(NS, query=q, **kw))
        if n == 1:  # the task is made, it runs at the next await
            assert a._background and a._cfg.state.vcache.fills == 0
    await a._asettle()
    vc = a._cfg.state.vcache
    assert vc.fills == 1 and not a._background
    # the fill runs beside the first round's last query: on a loaded machine it can finish
    # within that query's round trips and serve it, so the hits are counted from here
    hits = vc.hits
    b.delete(NS, "k0")
    b.delete(NS, "k7")
    for q, kw in QUERIES:
        got = norm(await a.asearch(NS, query=q, **kw))
        assert got == norm(c.search(NS, query=q, **kw)) and not {"k0", "k7"} & {g[1] for g in got}
    assert vc.hits - hits == len(QUERIES) and vc.patches == 1 and vc.misses == 0
    await ac.aclose()
    r.close()


def test_failed_fill_is_harmless(redis8, prefix, monkeypatch):
    """A background fill that fails (a connection error...) leaves no entry and no fill under
    way; searches go on from the sets, and a later repeated search asks again."""
    r = redis.Redis.from_url(redis8.url, **client_kwargs(5.0, 5.0))
    a, b, c = stores(r, prefix)
    fill(b, 20)

    def broken(cfg: Any, key: Any, dims: int) -> Any:
        yield from ()
        raise ConnectionError("boom")

    monkeypatch.setattr(_base, "fill_plan", broken)
    check_all(a, c)
    vc = a._cfg.state.vcache
    assert vc.fills == 0 and not vc.filling and not a._background
    monkeypatch.undo()
    check_all(a, c)
    assert vc.fills == 1
    r.close()



def test_one_fill_a_prefix_and_none_once_it_is_in():
    """A search that started before a fill ended (its prefix not yet in) asks for none more."""
    from redis_saver.store import _vcache

    vc = _vcache.VectorCache(1 << 20)
    key = (0, b"p")
    assert vc.want_fill(key, 8) and not vc.want_fill(key, 8)  # one under way
    vc.put(key, _vcache.Entry(b"t:1", [], [], 8))
    vc.fill_done(key)
    assert not vc.want_fill(key, 8) and vc.take_wanted() == [(key, 8)] and vc.take_wanted() == []


def test_closing_a_store_ends_its_fill_before_the_client_closes(redis8, prefix, monkeypatch):
    """``from_conn_string``'s exit: a background fill under way ends at its next page (no call
    after the exit began), nothing half-read is kept, and no fill thread outlives the exit."""
    monkeypatch.setattr(_budgets, "VECTOR_PAGE", 4)
    inner_plan = _base.fill_plan
    in_fill, after_close = threading.Event(), []

    def slow(cfg: Any, key: Any, dims: int) -> Any:
        inner = inner_plan(cfg, key, dims)
        reply = None
        try:
            while True:
                call = inner.send(reply)
                if cfg.state.closed:
                    after_close.append(call)
                reply = yield call
                in_fill.set()
                deadline = time.monotonic() + 5
                while not cfg.state.closed and time.monotonic() < deadline:
                    time.sleep(0.01)  # a page in flight while the store closes
        except StopIteration as stop:
            return stop.value

    monkeypatch.setattr(_base, "fill_plan", slow)
    with RedisStore.from_conn_string(redis8.url, prefix=prefix, index=INDEX) as a:
        fill(a, 40)
        a.search(NS, query="apple")  # from the sets
        a.search(NS, query="apple")  # again: the fill starts in the background
        assert in_fill.wait(5)
        threads = list(a._background)
        assert threads
    assert not any(t.is_alive() for t in threads) and not a._background
    assert after_close == [] and a._cfg.state.vcache.fills == 0
    assert not any(t.name == "redis_saver.store fill" for t in threading.enumerate())


async def test_closing_an_async_store_ends_its_fill_task(redis8, prefix, monkeypatch):
    """AsyncRedisStore: the fill task made by a repeated search is over when
    ``from_conn_string``'s exit returns (no task left pending on a closed client)."""
    from redis_saver import AsyncRedisStore

    monkeypatch.setattr(_budgets, "VECTOR_PAGE", 4)
    async with AsyncRedisStore.from_conn_string(redis8.url, prefix=prefix, index=INDEX) as a:
        for i in range(40):
            await a.aput(NS, f"k{i}", {"text": "apple melon"[: 5 + i % 7]})
        await a.asearch(NS, query="apple")
        await a.asearch(NS, query="apple")  # the task is made; it runs at the next await
        tasks = list(a._background)
        assert tasks
    assert all(t.done() for t in tasks) and not a._background
    assert a._cfg.state.vcache.fills == 0
