"""The vector cache's change log (redis_saver/store/_vcache.py ``Entry.patch``): writes of other
workers patched into the cached entries, on Redis 7 and Redis 8 (``test_vector_cache``'s
stores and checks: every answer the scan path's and InMemoryStore's on what Redis holds)."""

from __future__ import annotations

import time

import pytest
from langgraph.store.base import PutOp

from redis_saver import RedisStore
from redis_saver.keys import enc
from redis_saver.store._keys import enc_ns

from .test_vector_cache import (
    INDEX,
    NS,
    SERVERS,
    WORDS,
    _numpy,  # noqa: F401 (an autouse fixture: numpy, InMemoryStore's Python path)
    check,
    check_all,
    embed,
    fill,
    norm,
    server_client,
    stores,
)

client = pytest.fixture(params=SERVERS)(server_client)


def test_three_caches_and_a_writer(client, prefix):
    """Three stores with caches of their own search in turns while a fourth worker puts,
    overwrites, deletes, imports, and items expire or vanish behind the store's back: every
    search equals the scan's, and no write sends a cache back to a scan."""
    import random

    a, b, c = stores(client, prefix)
    d = RedisStore(client, prefix=prefix, index=INDEX)
    w = RedisStore(client, prefix=prefix, index=INDEX, vector_cache_bytes=0)
    rng = random.Random(11)
    fill(w, 40)
    exported = list(c.export_items(NS))
    base = w.keys.base(0)
    for step in range(90):
        op, key = rng.random(), f"k{rng.randrange(50)}"
        if op < 0.35:
            w.put(NS, key, {"text": " ".join(rng.sample(WORDS, rng.randint(1, 3)))})
        elif op < 0.45:
            w.put(NS, key, {"text": rng.choice(WORDS)}, index=False if rng.random() < 0.3 else None)
        elif op < 0.6:
            w.delete(NS, key)
        elif op < 0.68:
            w.import_items([rng.choice(exported)])
        elif op < 0.72:
            client.delete(base + b"i:" + enc_ns(NS) + enc(key))  # evicted: no bump
        elif op < 0.76:
            w.batch([])
        if step % 30 == 29:  # items that expire (300 ms), each cache searches, they expire
            fill(w, 4, start=300 + step, ttl=0.005)
            for r in (a, b, d):
                check(r, c, "apple melon", ref=False, limit=10)
            time.sleep(0.6)
        r = (a, b, d)[step % 3]
        check(r, c, " ".join(rng.sample(WORDS, 2)), ref=False, limit=rng.choice([1, 3, 10]), offset=rng.choice([0, 2]))
    for s in (a, b, d):
        vc = s._cfg.state.vcache
        assert vc.fills == 1 and vc.misses == 0 and vc.patches >= 20, (vc.fills, vc.misses, vc.patches)


def test_change_log_lost_is_never_taken_for_no_change(client, prefix):
    """The log key evicted (or deleted): a cache behind it must scan, not believe it current;
    the token and the log vanishing together start a new incarnation."""
    a, b, c = stores(client, prefix)
    fill(b, 30)
    check_all(a, c)
    vc, base = a._cfg.state.vcache, b.keys.base(0)
    log = base + b"l"
    assert client.exists(log)
    client.delete(log)
    check_all(a, c)  # nothing changed since: the token alone says current
    assert vc.misses == 0 and vc.fills == 1
    b.put(NS, "best", {"text": "apple melon apple melon"})  # logged in the lost log: lost too
    client.delete(log)
    b.put(NS, "k2", {"text": "fig"})  # a new log, floor at the counter before it
    assert "best" in [r[1] for r in check(a, c, "apple melon", limit=3)]
    assert vc.misses == 1
    if a._cfg.state.vsets:  # Redis 8: the sets answered that search (no scan), the next one refills
        assert vc.fills == 1 and a._cfg.state.vset_stats["hits"] == 2
        check(a, c, "kiwi", limit=3)
    assert vc.fills == 2
    b.put(NS, "k3", {"text": "kiwi"})
    check_all(a, c)
    assert vc.misses == 1 and vc.patches == 1  # the new log covers the refilled entry
    client.delete(log, base + b"w")
    b.put(NS, "k4", {"text": "apple melon melon"})
    check_all(a, c)
    assert vc.misses == 2


def test_change_log_trimmed(client, prefix):
    """More items changed in the shard than the log keeps since a cache's token: a scan."""
    from redis_saver.store._vcache import CHANGE_LOG

    a, b, c = stores(client, prefix)
    fill(b, 20)
    check_all(a, c)
    vc = a._cfg.state.vcache
    b.put(NS, "k1", {"text": "apple apple melon"})
    other = RedisStore(client, prefix=prefix)  # no index: fast puts
    other.batch([PutOp(("other",), f"o{i}", {"i": i}) for i in range(CHANGE_LOG - 2)])
    check_all(a, c)
    assert vc.misses == 0 and vc.patches == 1  # 2047 changed: covered (one under the prefix)
    assert client.zcard(b.keys.base(0) + b"l") == CHANGE_LOG + 1  # the items and the floor
    b.put(NS, "k2", {"text": "apple apple melon"})
    other.batch([PutOp(("other",), f"p{i}", {"i": i}) for i in range(CHANGE_LOG)])
    check_all(a, c)
    assert vc.misses == 1 and vc.fills == 2
    assert client.zcard(b.keys.base(0) + b"l") == CHANGE_LOG + 1


def test_change_budget(client, prefix, monkeypatch):
    """More changed items under the prefix than one read brings: a scan."""
    from redis_saver.store import _vcache

    monkeypatch.setattr(_vcache, "CHANGE_BUDGET", 3)
    a, b, c = stores(client, prefix)
    fill(b, 20)
    check_all(a, c)
    vc = a._cfg.state.vcache
    fill(b, 3, start=50)
    check_all(a, c)
    assert vc.misses == 0 and vc.patches == 1
    fill(b, 4, start=60)
    check_all(a, c)
    assert vc.misses == 1 and vc.fills == 2


def test_changes_under_the_prefix_only(client, prefix):
    """Changes to namespaces beside the prefix (a shorter one whose key spells the prefix's
    last label, a label that starts like it, one holding NUL) are not the prefix's; a deeper
    namespace's are."""
    a, b, c = stores(client, prefix)
    fill(b, 20)
    check_all(a, c)
    vc = a._cfg.state.vcache
    text = {"text": "apple melon apple melon"}
    b.put(("mem",), "u1", text)
    b.put(("mem", "u10"), "x", text)
    b.batch([PutOp(("mem", "u1\x00"), "y", text), PutOp(("mem", "u1", "deep"), "z", text)])
    got = check(a, c, "apple melon", ref=False, limit=5)  # (the reference holds one namespace)
    assert (("mem", "u1", "deep"), "z") in [g[:2] for g in got] and {g[0] for g in got} <= {NS, NS + ("deep",)}
    assert vc.misses == 0 and vc.patches == 1
    entry = next(iter(vc.entries.values()))
    assert {k for k in entry.index} >= {(enc_ns(("mem", "u1", "deep")), enc("z"))}
    assert len(entry.index) == 21
    check_all(a, c, ref=False)
    b.delete(("mem", "u1", "deep"), "z")
    check_all(a, c)
    assert vc.misses == 0 and vc.patches == 2 and len(entry.index) == 20


def test_many_overwrites_compact_the_entry(client, prefix):
    """Each overwrite leaves a dead row; once more are dead than live (and over 1024) the
    entry is rebuilt from the live ones."""
    a, b, c = stores(client, prefix)
    fill(b, 40)
    check_all(a, c)
    vc = a._cfg.state.vcache
    first = next(iter(vc.entries.values()))
    for r in range(30):
        b.batch([PutOp(NS, f"k{i}", {"text": f"{WORDS[(i + r) % 10]} {WORDS[r % 10]}"}) for i in range(40)])
        check(a, c, WORDS[r % 10], limit=5)
    entry = next(iter(vc.entries.values()))
    assert entry is not first and len(entry.keys) < 1024 + 80 and vc.misses == 0 and vc.patches == 30
    check_all(a, c)
    assert vc.nbytes == entry.nbytes


def test_threads_share_one_entry(client, prefix):
    """Searches from several threads on one store (one entry) after each write: one of them
    patches, the others find the entry patched meanwhile and rank it again, or patch it too
    from the same token; every answer is the scan's."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    a, b, c = stores(client, prefix)
    fill(b, 60)
    rng = random.Random(3)
    check_all(a, c)
    with ThreadPoolExecutor(4) as pool:
        for step in range(25):
            for _ in range(rng.randint(1, 3)):
                b.put(NS, f"k{rng.randrange(70)}", {"text": " ".join(rng.sample(WORDS, rng.randint(1, 3)))})
            if step % 5 == 4:
                b.delete(NS, f"k{rng.randrange(70)}")
            queries = [(" ".join(rng.sample(WORDS, 2)), rng.choice([1, 3, 10])) for _ in range(4)]
            got = list(pool.map(lambda qk: norm(a.search(NS, query=qk[0], limit=qk[1])), queries))
            assert got == [norm(c.search(NS, query=q, limit=k)) for q, k in queries]
    vc = a._cfg.state.vcache
    assert vc.misses == 0 and vc.fills == 1 and vc.patches >= 25


@pytest.mark.parametrize("seed", range(6))
def test_ranking_after_a_patch_is_the_head_of_the_exact_one(seed):
    """A ranking merged after a patch (the previous ranking's items still live, the patch's
    new items scored) is a head of the entry's whole ranking, for partial and whole ones."""
    import numpy as np

    from redis_saver.store._vcache import Entry

    rng = np.random.default_rng(seed)
    dims = [3, 8, 64][seed % 3]
    base = rng.standard_normal((20, dims)).astype(np.float32)

    def vec() -> list[bytes]:
        n = int(rng.integers(0, 3)) if seed % 2 else 1
        rows = [base[rng.integers(0, 20)] if rng.random() < 0.4 else rng.standard_normal(dims) for _ in range(n)]
        return [r.astype("<f4").tobytes() for r in rows]

    n = 800
    e = Entry(b"t", [(b"n\x00", b"%d\x00" % i) for i in range(n)], [vec() for _ in range(n)], dims)
    q = base[0].tolist() if seed % 3 else rng.standard_normal(dims).tolist()
    for k in (1, 10, 40, None):
        before = e.ranking(q, k)
        ranked, scores, _, whole = before
        flat: list = []
        for i in rng.choice(n, 30, replace=False):  # overwrites (some of the best), deletes, new items
            key = b"%d\x00" % i
            if rng.random() < 0.3:
                flat += [b"n\x00", key, b"", b"", None, []]
            else:
                v = vec()
                flat += [b"n\x00", key, b"0", str(int(i)).encode(), b"rec", [x for b in v for x in (b"p", b)]]
        for r in ranked[:5]:  # the best ones changed
            v1 = rng.standard_normal(dims).astype("<f4").tobytes()
            flat += [b"n\x00", e.keys[r][1], b"0", e.keys[r][1][:-1], b"rec", [b"p", v1]]
        first = len(e.keys)
        assert e.patch(b"t2", flat)
        got, got_scores, _, got_whole = e.reranked(q, ranked, scores, whole, first)
        full, full_scores, _, _ = e.ranking(q, None)
        assert got_whole == whole and got == full[: len(got)] and got_scores == full_scores[: len(got)]
        if whole:
            assert got == full
        n = len(e.keys)


def test_change_log_length_is_one_number():
    """The log length the Lua trims to and the one the client and docs assume agree."""
    import re

    from redis_saver.core.scripts import lua_dir
    from redis_saver.store._vcache import CHANGE_LOG

    lib = (lua_dir() / "_store_lib.lua").read_text()
    assert int(re.search(r"local CHANGE_LOG = (\d+)", lib).group(1)) == CHANGE_LOG


def test_cached_read_is_what_the_header_documents(client, prefix):
    """The "c" read the plan sends has the fixed arguments store_read.lua's header lists, then
    two per candidate (the header check in test_store.py sends no cached read)."""
    from langgraph.store.base import SearchOp

    from redis_saver.core.scripts import lua_dir
    from redis_saver.store._plans import batch_plan, prepare

    a, b, c = stores(client, prefix)
    fill(b, 30)
    check(a, c, "apple", limit=3)  # fills the cache
    cfg = a._cfg
    call = next(batch_plan(cfg, prepare(cfg, [SearchOp(NS, query="kiwi", limit=3)]), [], {"kiwi": embed(["kiwi"])[0]}))
    read = list(call.args)[3:]
    header = (lua_dir() / "store_read.lua").read_text().split("]]", 1)[0]
    line = next(x for x in header.splitlines() if x.strip().startswith('"c" '))
    words = line.split(":")[0].split()
    fixed = words.index("scored") + 1
    assert words[fixed : fixed + 2] == ["e(ns)", "e(key)"]
    assert read[0] == b"c" and len(read) == fixed + 2 * int(read[fixed - 2]) and int(read[fixed - 2]) > 0
    assert read[2] == enc_ns(NS) and int(read[3]) > 0  # the prefix, the change budget
