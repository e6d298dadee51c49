"""Rebuilding the vector set of a namespace that is out of sets (lua/store_rebuild.lua,
redis_saver/store/_rebuild.py), on a real Redis 8 (the ``redis8`` fixture: skipped with the
reason when it cannot be installed).

Each test checks what a rebuild promises: when it says "done", the set holds exactly the
namespace's vectors (``VCARD`` equals the count and every element of every item's ``v:`` hash is
a member) and searches are answered from it (``vset_stats``) with the scan's results; when
something made the set incomplete meanwhile, the rebuild ends with the namespace out and
searches still equal the scan.
"""

from __future__ import annotations

import json
import random
import re
import time

import pytest
import redis
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

from devkit.servers import client_kwargs
from redis_saver import RedisStore
from redis_saver.keys import enc
from redis_saver.store import _rebuild
from redis_saver.store._keys import enc_ns
from tests.store import test_differential as diff
from tests.store.test_differential import WORDS, embed
from tests.store.test_vector_sets import (
    INDEX,
    _reference_in_python,  # noqa: F401 (an autouse fixture, the same here)
    fill,
    queries,
    same,
)

INDEX2 = {"dims": 8, "embed": embed, "fields": ["text", "other"]}


def three(r8, prefix, index=INDEX):
    """A store with sets, one without (an older writer: its puts take namespaces out), and a
    scan of the same keys (reads only)."""
    vs = RedisStore(r8, prefix=prefix, index=index, vector_cache_bytes=0)
    old = RedisStore(r8, prefix=prefix, index=index, vector_cache_bytes=0, vector_sets=False)
    scan = RedisStore(r8, prefix=prefix, index=index, vector_cache_bytes=0, vector_sets=False)
    vs._vsets()
    return vs, old, scan


def page(store, ns, token, start, budget=16):
    """One store_rebuild call: (status, token, elements)."""

    def plan():
        return _rebuild.parse_page((yield _rebuild.page_call(store._cfg, 0, enc_ns(ns), token, start, budget)))

    return store._driver.run(plan())


def count(r8, store, ns):
    return r8.hget(store.keys.base(0) + b"c", enc_ns(ns))


def assert_exact_set(r8, store, ns):
    """The set is complete and exact: the count is VCARD, and its elements are those of the
    namespace's items' vectors (k: entries' v: hashes), no more, no fewer."""
    base, ens = store.keys.base(0), enc_ns(ns)
    sk = store.keys.vset(0, ens)
    want = set()
    for ekey in r8.zrange(base + b"k:" + ens, 0, -1):
        for path in r8.hkeys(base + b"v:" + ens + ekey):
            want.add(ekey + enc(path.decode()))
    assert count(r8, store, ns) == str(len(want)).encode()
    assert r8.execute_command("VCARD", sk) == len(want)
    assert all(r8.execute_command("VISMEMBER", sk, e) for e in want)


def searches_equal(vs, other, prefix, n=6, seed=1):
    for q, limit, offset in queries(seed, n):
        got = vs.search(prefix, query=q, limit=limit, offset=offset)
        assert same(got, other.search(prefix, query=q, limit=limit, offset=offset)), (q, limit, offset)


def test_namespace_written_without_sets_is_rebuilt(r8, prefix):
    vs, old, scan = three(r8, prefix)
    ref = diff.reference(True)
    fill(old, ref, 150, [("u", "a"), ("u", "b")])
    fill(vs, ref, 40, [("u", "c")], seed=3)  # a namespace made with a set: left alone
    searches_equal(vs, ref, ("u",), n=3)
    assert vs._cfg.state.vset_stats == {"hits": 0, "scans": 3}
    assert vs.rebuild_vector_sets(("u",), budget=7) == {("u", "a"): "done", ("u", "b"): "done", ("u", "c"): "done"}
    for ns in [("u", "a"), ("u", "b"), ("u", "c")]:
        assert_exact_set(r8, vs, ns)
    searches_equal(vs, ref, ("u",), n=10)
    searches_equal(vs, scan, ("u", "a"), n=5, seed=2)
    assert vs._cfg.state.vset_stats == {"hits": 15, "scans": 3}
    assert vs.rebuild_vector_sets(()) == {("u", "a"): "done", ("u", "b"): "done", ("u", "c"): "done"}


def test_interrupted_rebuild_resumes(r8, prefix):
    """A rebuilder stops after some pages (its process died); searches scan meanwhile; another
    store's rebuild joins it and goes on from its cursor."""
    vs, old, scan = three(r8, prefix)
    ns = ("r",)
    fill(old, None, 100, [ns])
    assert page(vs, ns, "aaa", True, 10) == ("more", "aaa", 10)
    assert page(vs, ns, "aaa", False, 10) == ("more", "aaa", 20)
    assert count(r8, vs, ns).split(b" ")[:2] == [b"20", b"aaa"]
    searches_equal(vs, scan, ns, n=3)
    assert vs._cfg.state.vset_stats == {"hits": 0, "scans": 3}
    other = RedisStore(r8, prefix=prefix, index=INDEX, vector_cache_bytes=0)
    calls = []
    run = other._driver.run

    def counting(plan, op=None):
        def wrapped():
            reply = None
            step = plan.send(None)
            while True:
                if getattr(step, "script", "") == "store_rebuild":
                    calls.append(step.args)
                reply = yield step
                try:
                    step = plan.send(reply)
                except StopIteration as stop:
                    return stop.value

        return run(wrapped(), op)

    other._driver.run = counting
    assert other.rebuild_vector_sets(ns, budget=10) == {ns: "done"}
    assert calls[0][3] == b"1" and calls[1][2] == "aaa"  # the first call joined the rebuild: its token
    assert len(calls) == 9  # 80 vectors left: 8 pages, and the one that finds k: done
    assert_exact_set(r8, vs, ns)
    searches_equal(vs, scan, ns)
    assert vs._cfg.state.vset_stats["hits"] == 6


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_writers_between_pages_keep_the_set_exact(r8, prefix, seed):
    """Puts (new keys), deletes, overwrites with other paths, index=False puts between pages:
    the writers keep the set in step, so the finished set is complete and exact."""
    vs, old, scan = three(r8, prefix, INDEX2)
    ref = InMemoryStore(index=INDEX2)
    ref._data = diff._Namespaces()
    rng = random.Random(seed)
    ns = ("w", "x")

    def value():
        return {"text": " ".join(rng.sample(WORDS, 2)), "other": rng.choice(WORDS)}

    def put(store, key, ix):
        v = value()
        store.put(ns, key, v, index=ix)
        ref.put(ns, key, v, index=ix)

    for i in range(80):
        put(old, f"k{i}", [None, ["text"], ["other"]][i % 3])
    status, token, _ = page(vs, ns, "tok1", True, 8)
    pages = 1
    while status == "more":
        for _ in range(rng.randint(1, 4)):
            op = rng.random()
            key = f"k{rng.randrange(120)}"
            if op < 0.35:
                put(vs, key, rng.choice([None, ["text"], ["other"], False]))
            elif op < 0.6:
                vs.delete(ns, key)
                ref.delete(ns, key)
            else:  # a batch of several writes in one call
                ks = [f"k{i}" for i in rng.sample(range(120), 3)]
                vals = [value() for _ in ks]
                vs.batch([PutOp(ns, k, v, index=["other"]) for k, v in zip(ks, vals, strict=True)])
                for k, v in zip(ks, vals, strict=True):
                    ref.put(ns, k, v, index=["other"])
        status, token, _ = page(vs, ns, token, False, 8)
        pages += 1
    assert status == "done" and pages > 5
    assert_exact_set(r8, vs, ns)
    searches_equal(vs, ref, ("w",), n=8, seed=seed)
    searches_equal(vs, scan, ns, n=4, seed=seed + 10)
    assert vs._cfg.state.vset_stats == {"hits": 12, "scans": 0}
    put(vs, "k0", ["text"])  # after the rebuild: a plain count again, kept as before
    assert_exact_set(r8, vs, ns)


@pytest.mark.parametrize("what", ["set", "count", "old writer", "unfit vector"])
def test_set_made_incomplete_mid_rebuild_ends_it(r8, prefix, what):
    """The set or count deleted (or evicted), a writer without sets, a vector the set cannot
    hold: the rebuild ends, the namespace stays out (searches scan, exactly); a new one works."""
    scale = {"v": 1.0}
    index = {"dims": 8, "embed": lambda ts: [[x * scale["v"] for x in e] for e in embed(ts)], "fields": ["text"]}
    vs, old, scan = three(r8, prefix, index)
    ns = ("d",)
    fill(old, None, 60, [ns])
    status, token, _ = page(vs, ns, "t1", True, 10)
    assert status == "more"
    vs.put(ns, "mid", {"text": "apple"})  # a writer in step
    base = vs.keys.base(0)
    if what == "set":
        r8.delete(vs.keys.vset(0, enc_ns(ns)))
    elif what == "count":
        r8.hdel(base + b"c", enc_ns(ns))
    elif what == "old writer":
        old.put(ns, "k3", {"text": "kiwi fig"})
    else:
        scale["v"] = 1e17
        vs.put(ns, "big", {"text": "fig"})
        scale["v"] = 1.0
        vs.delete(ns, "big")  # gone again: a rebuild can finish
    if what in ("set", "count"):  # the next write finds it incomplete too (or the next page)
        vs.put(ns, "k4", {"text": "lemon"})
    assert page(vs, ns, token, False, 10)[0] == "ended"
    assert count(r8, vs, ns) is None
    searches_equal(vs, scan, ns, n=4)
    assert vs._cfg.state.vset_stats == {"hits": 0, "scans": 4}
    assert vs.rebuild_vector_sets(ns, budget=10) == {ns: "done"}
    assert_exact_set(r8, vs, ns)
    searches_equal(vs, scan, ns, n=4)
    assert vs._cfg.state.vset_stats == {"hits": 4, "scans": 4}


def test_set_deleted_between_pages_without_writes(r8, prefix):
    """Nobody writes: the next page itself finds the set short of its count."""
    vs, old, scan = three(r8, prefix)
    ns = ("e",)
    fill(old, None, 40, [ns])
    _, token, _ = page(vs, ns, "t1", True, 10)
    r8.delete(vs.keys.vset(0, enc_ns(ns)))
    assert page(vs, ns, token, False, 10) == ("ended", token, 0)
    assert count(r8, vs, ns) is None
    searches_equal(vs, scan, ns, n=3)


def test_two_rebuilders(r8, prefix):
    """Two rebuilders at once: the second joins the first's rebuild (its token), their pages
    interleave on the one cursor; a rebuilder whose rebuild ended does not go on with another's."""
    vs, old, scan = three(r8, prefix)
    ns = ("two",)
    fill(old, None, 90, [ns])
    a = page(vs, ns, "A", True, 7)
    b = page(vs, ns, "B", True, 7)
    assert a == ("more", "A", 7) and b == ("more", "A", 14)
    sa = sb = "more"
    while sa == "more" or sb == "more":
        if sa == "more":
            sa = page(vs, ns, "A", False, 7)[0]
            vs.put(ns, f"n{random.random()}", {"text": "kiwi"})
        if sb == "more":
            sb = page(vs, ns, "A", False, 7)[0]
    assert sa == sb == "done"
    assert_exact_set(r8, vs, ns)
    searches_equal(vs, scan, ns, n=4)
    assert vs._cfg.state.vset_stats == {"hits": 4, "scans": 0}
    # A's rebuild ends (an old writer), B starts another: A's next page is "ended", not B's page
    ns2 = ("two2",)
    fill(old, None, 40, [ns2])
    assert page(vs, ns2, "A", True, 5)[0] == "more"
    old.put(ns2, "k1", {"text": "fig"})
    assert page(vs, ns2, "B", True, 5) == ("more", "B", 5)
    assert page(vs, ns2, "A", False, 5) == ("ended", "A", 0)
    assert count(r8, vs, ns2).split(b" ")[:2] == [b"5", b"B"]  # B's rebuild goes on
    assert vs.rebuild_vector_sets(ns2) == {ns2: "done"}
    assert_exact_set(r8, vs, ns2)


def test_script_checks_arguments_before_writing(r8, prefix):
    vs, old, _ = three(r8, prefix)
    fill(old, None, 5, [("z",)])
    before = count(r8, vs, ("z",))
    for token, start, budget in [("bad token", True, 4), ("t", True, 0), ("t", True, 5000), ("x" * 65, True, 4)]:
        with pytest.raises(ValueError, match="bad token|budget"):
            page(vs, ("z",), token, start, budget)
    assert count(r8, vs, ("z",)) == before
    with pytest.raises(ValueError):
        vs.rebuild_vector_sets(("z",), budget=0)
    with pytest.raises(ValueError):
        old.rebuild_vector_sets(("z",))
    assert vs.rebuild_vector_sets(("nothing",)) == {}


def test_header_documents_the_arguments():
    from redis_saver.core.scripts import lua_dir
    from redis_saver.store._keys import StoreKeys
    from redis_saver.store._plans import Config

    header = (lua_dir() / "store_rebuild.lua").read_text().split("]]", 1)[0]
    documented = {int(x) for x in re.findall(r"ARGV\[(\d+)\]", header)}
    cfg = Config(StoreKeys("h", 1, None), None, False, False, None)  # type: ignore[arg-type]
    call = _rebuild.page_call(cfg, 0, b"ns\x00", "tok", True, 9)
    assert documented == set(range(1, len(call.args) + 1))
    assert list(call.args)[0] == "1v" and list(call.args)[3:] == [b"1", b"9"]


async def test_async_rebuild(redis8, prefix):
    import redis.asyncio as aredis

    from redis_saver import AsyncRedisStore

    client = aredis.Redis.from_url(redis8.url, socket_timeout=5.0)
    store = AsyncRedisStore(client, prefix=prefix, index=INDEX, vector_cache_bytes=0)
    old = AsyncRedisStore(client, prefix=prefix, index=INDEX, vector_cache_bytes=0, vector_sets=False)
    for i in range(30):
        await old.aput(("as",), f"k{i}", {"text": " ".join(random.Random(i).sample(WORDS, 2))})
    assert await store.arebuild_vector_sets(("as",), budget=4) == {("as",): "done"}
    got = await store.asearch(("as",), query="apple", limit=3)
    assert same(got, await old.asearch(("as",), query="apple", limit=3))
    assert store._cfg.state.vset_stats == {"hits": 1, "scans": 0}
    await client.aclose()


def test_rebuilds_under_eviction(redis8_binary):
    """A real maxmemory with allkeys-random: records, vectors, index keys, counts and sets vanish
    while a worker writes (namespaces drift out of sets) and rebuilds run a few pages at a time;
    every search equals the scan of what the server holds (compared when no key was evicted
    between the two searches), and rebuilds bring namespaces back (searches from sets)."""
    from devkit.servers import start_standalone

    server = start_standalone(redis8_binary, ["--maxmemory", "3mb", "--maxmemory-policy", "allkeys-random"])
    try:
        cl = redis.Redis.from_url(server.url, **client_kwargs(5.0, 5.0))
        vs, old, scan = three(cl, "ev")
        rng = random.Random(7)
        pad = "".join(rng.choice("0123456789abcdef") for _ in range(3000))  # not compressible
        nss = [("e", str(i)) for i in range(4)]

        def put(store, i: int) -> None:
            store.put(nss[i % 4], f"k{i}", {"text": " ".join(rng.sample(WORDS, rng.randint(1, 3))), "pad": pad})

        for i in range(300):
            put(old if i % 2 else vs, i)  # both kinds of writer: every namespace out of sets
        before = cl.info("stats")["evicted_keys"]
        compared, outcomes = 0, []
        tokens: dict[tuple[str, ...], tuple[str, bool]] = {}
        for step in range(80):
            ns = nss[step % 4]
            token, start = tokens.get(ns, (f"t{step}", True))
            status, token, _ = page(vs, ns, token, start, 8)  # a few pages of a rebuild each step
            outcomes.append(status)
            tokens[ns] = (token, False) if status == "more" else (f"t{step}", True)
            for i in range(rng.choice([0, 0, 5])):
                put(vs, 300 + 10 * step + i)
            if step % 10 == 9:
                old.put(nss[step % 4], f"k{step}", {"text": "fig"})  # takes one out again
            q = " ".join(rng.sample(WORDS, 2))
            kw = {"limit": rng.choice([3, 10]), "offset": rng.choice([0, 2])}
            prefix = ("e",) if step % 2 else ns
            e0 = cl.info("stats")["evicted_keys"]
            got, want = vs.search(prefix, query=q, **kw), scan.search(prefix, query=q, **kw)
            if cl.info("stats")["evicted_keys"] == e0:  # else the two searches saw different data
                assert same(got, want), (step, q, kw)
                compared += 1
        assert cl.info("stats")["evicted_keys"] - before > 50
        assert compared >= 20 and "done" in outcomes and vs._cfg.state.vset_stats["hits"] > 0, (compared, outcomes)
        print("outcomes", {s: outcomes.count(s) for s in set(outcomes)}, "compared", compared, vs._cfg.state.vset_stats)
        cl.close()
    finally:
        server.stop()


def test_cli_reindex(redis8, r8, prefix):
    """``redis-saver store reindex [NAMESPACE]``: a namespace an old writer made gets its set."""
    pytest.importorskip("click", reason="the CLI needs the 'cli' extra (click, rich)")
    from click.testing import CliRunner

    from redis_saver.cli._app import cli as app

    vs, old, scan = three(r8, prefix)
    fill(old, None, 50, [("c", "1"), ("c", "2")])
    fill(old, None, 10, [("other",)], seed=4)
    runner = CliRunner()
    res = runner.invoke(app, ["--url", redis8.url, "--prefix", prefix, "store", "reindex", "c", "--budget", "9",
                              "--json"], catch_exceptions=False)  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == [{"namespace": ["c", "1"], "status": "done"},
                                      {"namespace": ["c", "2"], "status": "done"}]  # fmt: skip
    assert count(r8, vs, ("other",)) is None  # not under the prefix: untouched
    searches_equal(vs, scan, ("c",), n=3)
    assert vs._cfg.state.vset_stats == {"hits": 3, "scans": 0}
    res = runner.invoke(app, ["--url", redis8.url, "--prefix", prefix, "store", "reindex"], catch_exceptions=False)
    assert res.exit_code == 0 and "3 of 3 namespace(s) in vector sets" in res.stderr
    assert res.stdout.splitlines() == ["c.1  done", "c.2  done", "other  done"]


@pytest.mark.cluster
def test_rebuild_on_a_cluster(redis8_cluster):
    """16 shards over 3 primaries: each namespace's pages go to its shard's node."""
    from tests.deploy.helpers import delete_prefix, new_prefix

    client = redis8_cluster.client(socket_timeout=5.0, socket_connect_timeout=2.0)
    prefix = new_prefix("st")
    try:
        vs = RedisStore(client, prefix=prefix, index=INDEX, vector_cache_bytes=0, shard_depth=2)
        old = RedisStore(client, prefix=prefix, index=INDEX, vector_cache_bytes=0, shard_depth=2, vector_sets=False)
        nss = [("c", str(i)) for i in range(6)]
        fill(old, None, 120, nss)
        assert len({vs.keys.shard(ns) for ns in nss}) > 2
        assert vs.rebuild_vector_sets(("c",), budget=6) == {ns: "done" for ns in sorted(nss)}
        for ns in nss:
            searches_equal(vs, old, ns, n=2)
        assert vs._cfg.state.vset_stats == {"hits": 12, "scans": 0}
    finally:
        delete_prefix(client, prefix)
        client.close()


def test_expiring_items_during_a_rebuild(r8, prefix):
    """Items that expire before or after their page: the pages add what is still there, the
    writers' sweeps remove what expired (their elements too); the finished set is complete and
    every search equals the scan, from the set."""
    vs, old, scan = three(r8, prefix)
    ns = ("ttl",)
    fill(old, None, 60, [ns])
    old.batch([PutOp(ns, f"gone{i}", {"text": "lll"}, ttl=0.005) for i in range(30)])  # 0.3 s
    status, token, _ = page(vs, ns, "t", True, 40)  # the 60 items, then some that expire
    assert status == "more"
    status, token, _ = page(vs, ns, token, False, 20)
    time.sleep(0.5)
    vs.put(ns, "k0", {"text": "date"})  # sweeps 16 expired items (and their elements)
    while status == "more":
        status, token, _ = page(vs, ns, token, False, 7)
    assert status == "done"
    sk = vs.keys.vset(0, enc_ns(ns))
    assert count(r8, vs, ns) == str(r8.execute_command("VCARD", sk)).encode()
    for q, limit, offset in [("lll", 10, 0), ("lll kiwi", 3, 2), ("apple", 5, 0)]:
        got = vs.search(ns, query=q, limit=limit, offset=offset)
        assert same(got, scan.search(ns, query=q, limit=limit, offset=offset))
        assert not any(x.key.startswith("gone") for x in got)
    assert vs._cfg.state.vset_stats == {"hits": 3, "scans": 0}
    for _ in range(2):
        vs.put(ns, "k1", {"text": "fig"})  # the rest swept
    assert_exact_set(r8, vs, ns)
