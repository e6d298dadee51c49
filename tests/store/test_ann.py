"""RedisStore on Redis 8: the opt-in approximate search (``index["ann_index_config"]``,
redis_saver/store/_vset.py "Approximate search").

Every test runs on real Redis 8 servers (the ``redis8`` fixtures: skipped with the reason when
they cannot be installed). The exact answer is a scan of the same keys (a store with
``vector_sets=False`` that only reads); each test says which path answered (the VSIM commands
sent, ``vset_stats``, the sets' HNSW M as ``VINFO`` reports it).
"""

from __future__ import annotations

import dataclasses
import io
import json
import random
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from langgraph.store.base import PutOp

from redis_saver import RedisStore
from redis_saver.store import _semantics as sem
from redis_saver.store import _vset
from redis_saver.store._keys import enc_ns

D = 32
N = 3000
rng = random.Random(7)
VECS = {f"d{i}": [rng.gauss(0, 1) for _ in range(D)] for i in range(N)}
QUERIES = {f"q{i}": [rng.gauss(0, 1) for _ in range(D)] for i in range(30)}
ANN = {"kind": "hnsw", "m": 16, "ef_construction": 64, "ef_search": 100}
# the build before the approximate search: a writer of the previous release (VADD ... M 4 always)
PREVIOUS = "c792dcb"


def embed(texts):
    return [VECS.get(t) or QUERIES.get(t) or [1.0] * D for t in texts]


def store(client, prefix, ann=ANN, **kw):
    index = {"dims": D, "embed": embed, "fields": ["t"]}
    if ann is not None:
        index["ann_index_config"] = ann
    kw.setdefault("vector_cache_bytes", 0)
    return RedisStore(client, prefix=prefix, index=index, **kw)


def scan(client, prefix):
    """Exact answers: a scan of the same keys (reads only)."""
    return store(client, prefix, None, vector_sets=False)


def load(s, ns, keys):
    keys = list(keys)
    for i in range(0, len(keys), 500):
        s.batch([PutOp(ns, k, {"t": k}) for k in keys[i : i + 500]])


@pytest.fixture
def vsim_calls(monkeypatch):
    """Every VSIM command a search sends (the pipelines of _vset.VsetSearch.pipe), and the VSIM
    an approximate search's "A" read asks the script to run, as the command it runs."""
    calls: list[tuple] = []
    pipe, request = _vset.VsetSearch.pipe, _vset.VsetSearch.request

    def spy(self):
        p = pipe(self)
        if p is not None:
            calls.extend(p.commands)
        return p

    def spy_request(self):
        args = request(self)
        if args is not None and args[0] == b"A":  # A e(prefix) dims M count ef query
            calls.append(("VSIM", args[1], "FP32", args[6], "COUNT", int(args[4]), "EF", int(args[5])))
        return args

    monkeypatch.setattr(_vset.VsetSearch, "pipe", spy)
    monkeypatch.setattr(_vset.VsetSearch, "request", spy_request)
    return calls


def calls_of(client, *names):
    """How many times the server ran each command so far (INFO commandstats; a script's own
    commands included)."""
    stats = {k.lower(): v for k, v in client.info("commandstats").items()}  # (modules' are upper case)
    return [int(stats.get(f"cmdstat_{n}", {}).get("calls", 0)) for n in names]


def hnsw_m(client, key) -> int:
    info = client.execute_command("VINFO", key)
    info = dict(zip(info[::2], info[1::2], strict=True)) if isinstance(info, list) else info
    return int(info[b"hnsw-m"])


def exact_scores(items, qv):
    """The scores a scan gives the items (float64 on the stored float32 values)."""
    return sem.best_scores(qv, [[_pack(VECS[x.key])] for x in items])


def _pack(v):
    import struct

    return struct.pack(f"<{len(v)}f", *v)


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "ivfflat"},
        {"kind": "hnsw", "vector_type": "halfvec"},
        {"m": 4},
        {"m": 101},
        {"m": "16"},
        {"m": True},
        {"ef_construction": 3},
        {"ef_construction": 1001},
        {"ef_search": 0},
        {"ef_search": 1001},
        {"lists": 100},
        ["hnsw"],
    ],
)
def test_bad_config_is_refused_before_anything_is_written(r8, prefix, bad):
    with pytest.raises((ValueError, TypeError), match="ann_index_config"):
        store(r8, prefix, bad).put(("ns",), "d0", {"t": "d0"})
    assert r8.keys(prefix + "*") == []
    # the scripts check too, before writing (a client of another build could send them)
    ok = store(r8, prefix)
    ok.put(("ns",), "d0", {"t": "d0"})
    ok._cfg = dataclasses.replace(ok._cfg, ann=(4, 64, 100))
    with pytest.raises(ValueError, match="bad HNSW parameters"):
        ok.put(("ns",), "d1", {"t": "d1"})
    assert ok.get(("ns",), "d1") is None


def test_recall_and_exact_scores_at_defaults(r8, prefix, vsim_calls):
    """3,000 random 32-d vectors in one namespace: recall@10 >= 0.9 over 30 queries at the
    defaults; every score is the exact one, the results ranked as a scan ranks them."""
    s, exact = store(r8, prefix, {"kind": "hnsw"}), scan(r8, prefix)
    load(s, ("ns",), VECS)
    assert hnsw_m(r8, s.keys.vset(0, enc_ns(("ns",)))) == 16
    assert r8.hget(s.keys.base(0) + b"c", enc_ns(("ns",))) == b"h16:64:%d" % N
    found = 0
    for q, qv in QUERIES.items():
        got = s.search(("ns",), query=q, limit=10)
        want = exact.search(("ns",), query=q, limit=10)
        found += len({x.key for x in got} & {x.key for x in want})
        assert [x.score for x in got] == exact_scores(got, qv)
        assert [x.score for x in got] == sorted((x.score for x in got), reverse=True)
    assert found / (10 * len(QUERIES)) >= 0.9
    assert s._cfg.state.vset_stats == {"hits": len(QUERIES), "scans": 0}
    assert vsim_calls and all(c[-2] == "EF" and c[-1] == 100 and "TRUTH" not in c for c in vsim_calls)


def test_approximate_search_is_one_call(r8, prefix, vsim_calls):
    """An approximate search of two namespaces is one script call, whose VSIMs run inside it
    (none sent by the client), and answers with exact scores in a scan's order."""
    s, exact = store(r8, prefix), scan(r8, prefix)
    keys = list(VECS)[:1200]
    load(s, ("o", "a"), keys[:600])
    load(s, ("o", "b"), keys[600:])
    for q, qv in list(QUERIES.items())[:5]:
        before = calls_of(r8, "fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "vsim")
        got = s.search(("o",), query=q, limit=10, offset=1)
        after = calls_of(r8, "fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "vsim")
        delta = [a - b for a, b in zip(after, before, strict=True)]
        assert sum(delta[:5]) == 1 and delta[5] == 2, delta
        want = exact.search(("o",), query=q, limit=10, offset=1)
        assert [x.score for x in got] == exact_scores(got, qv)
        assert len(got) == 10 and len({x.key for x in got} & {x.key for x in want}) >= 8
        assert [x.score for x in got] == sorted((x.score for x in got), reverse=True)
    assert s._cfg.state.vset_stats == {"hits": 5, "scans": 0}
    assert len(vsim_calls) == 5 and all(c[0] == "VSIM" and c[-1] == 100 for c in vsim_calls)


def test_sets_of_another_m_are_searched_exactly(r8, prefix, vsim_calls):
    """A set made by an exact-mode store (M 4) is searched exactly by an approximate store, and
    each store of this release writes into the other's sets with their own M (no refusal)."""
    ann, plain, exact = store(r8, prefix), store(r8, prefix, None), scan(r8, prefix)
    keys = list(VECS)[:600]
    load(plain, ("x",), keys[:300])
    load(ann, ("y",), keys[300:])
    ann.put(("x",), "d900", {"t": "d900"})  # into the M 4 set
    plain.put(("y",), "d901", {"t": "d901"})  # into the M 16 set
    base, kx, ky = ann.keys.base(0), ann.keys.vset(0, enc_ns(("x",))), ann.keys.vset(0, enc_ns(("y",)))
    assert (hnsw_m(r8, kx), hnsw_m(r8, ky)) == (4, 16)
    assert r8.hmget(base + b"c", [enc_ns(("x",)), enc_ns(("y",))]) == [b"301", b"h16:64:301"]
    for q in list(QUERIES)[:5]:
        vsim_calls.clear()
        got = ann.search(("x",), query=q, limit=10, offset=2)
        want = exact.search(("x",), query=q, limit=10, offset=2)
        assert [(x.key, x.score) for x in got] == [(x.key, x.score) for x in want]
        # the "A" read found a set of another M (no VSIM run), then the exact search's VSIMs
        assert vsim_calls[0][-2] == "EF" and vsim_calls[1:] and all("TRUTH" in c for c in vsim_calls[1:])
        # the exact-mode store searches the M 16 set exactly
        vsim_calls.clear()
        got = plain.search(("y",), query=q, limit=10)
        assert [(x.key, x.score) for x in got] == [(x.key, x.score) for x in exact.search(("y",), query=q, limit=10)]
        assert vsim_calls and all("TRUTH" in c for c in vsim_calls)
    assert ann._cfg.state.vset_stats["scans"] == plain._cfg.state.vset_stats["scans"] == 0


def test_cache_first_when_small(r8, prefix, vsim_calls, monkeypatch):
    """With the vector cache holding a small prefix, the approximate store answers exactly
    from it; a cached prefix above ANN_CACHE_ITEMS goes to the graph."""
    s, exact = store(r8, prefix, vector_cache_bytes=64 << 20), scan(r8, prefix)
    load(s, ("c",), list(VECS)[:500])
    s.search(("c",), query="q0", limit=2100)  # beyond the sets' window: a scan, which fills the cache
    assert s._cfg.state.vset_stats["scans"] == 1 and s._cfg.state.vcache.fills == 1
    vsim_calls.clear()
    for q in list(QUERIES)[:5]:
        got = s.search(("c",), query=q, limit=10, offset=3)
        want = exact.search(("c",), query=q, limit=10, offset=3)
        assert [(x.key, x.score) for x in got] == [(x.key, x.score) for x in want]
    assert s._cfg.state.vcache.hits == 5 and not vsim_calls
    monkeypatch.setattr(_vset, "ANN_CACHE_ITEMS", 499)
    s.search(("c",), query="q1", limit=10)
    assert s._cfg.state.vcache.hits == 5 and s._cfg.state.vset_stats["hits"] == 1 and vsim_calls


def test_rebuild_remakes_sets_with_the_m_asked(r8, prefix, vsim_calls):
    """rebuild_vector_sets of an approximate store (or with hnsw=) remakes the complete sets
    made with another M; a plain rebuild leaves any complete set as it is."""
    plain, ann = store(r8, prefix, None), store(r8, prefix)
    load(plain, ("r",), list(VECS)[:400])
    sk = ann.keys.vset(0, enc_ns(("r",)))
    assert plain.rebuild_vector_sets(("r",)) == {("r",): "done"} and hnsw_m(r8, sk) == 4
    assert ann.rebuild_vector_sets(("r",), budget=64) == {("r",): "done"} and hnsw_m(r8, sk) == 16
    assert r8.hget(ann.keys.base(0) + b"c", enc_ns(("r",))) == b"h16:64:400"
    assert plain.rebuild_vector_sets(("r",)) == {("r",): "done"} and hnsw_m(r8, sk) == 16
    assert plain.rebuild_vector_sets(("r",), hnsw=(24, 32)) == {("r",): "done"} and hnsw_m(r8, sk) == 24
    with pytest.raises(ValueError, match="m must be"):
        plain.rebuild_vector_sets(("r",), hnsw=(2, 32))
    ann2 = store(r8, prefix, {"m": 24, "ef_construction": 32})
    ann2.search(("r",), query="q0", limit=10)
    assert "EF" in vsim_calls[-1] and ann2._cfg.state.vset_stats == {"hits": 1, "scans": 0}


def test_previous_release_writer_takes_the_namespace_out(r8, redis8, prefix, tmp_path):
    """A writer of the build before this one VADDs with M 4: on an M 16 set that would be
    refused mid-call. It reads no count in the marked field, so it takes the namespace out of
    sets instead (its put succeeds); searches scan (exact) until a rebuild."""
    root = Path(__file__).resolve().parents[2]
    got = subprocess.run(["git", "-C", str(root), "archive", PREVIOUS, "redis_saver", "lua"], capture_output=True)
    if got.returncode != 0:
        pytest.fail(f"the build {PREVIOUS} is not in this checkout's git history: {got.stderr.decode()}")
    with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tar:
        tar.extractall(tmp_path)
    ann, exact = store(r8, prefix), scan(r8, prefix)
    load(ann, ("p",), list(VECS)[:300])
    code = (
        "import sys, redis, redis_saver\n"
        "assert redis_saver.__file__.startswith(sys.argv[3]), redis_saver.__file__\n"
        "from redis_saver import RedisStore\n"
        f"idx = {{'dims': {D}, 'embed': lambda ts: [[1.0] + [0.0] * {D - 1} for _ in ts], 'fields': ['t']}}\n"
        "s = RedisStore(redis.Redis.from_url(sys.argv[1]), prefix=sys.argv[2], index=idx, vector_cache_bytes=0)\n"
        "s.put(('p',), 'old', {'t': 'old'})\n"
        "print('ok')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, redis8.url, prefix, str(tmp_path)],
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=120,
        cwd=str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    base, ens = ann.keys.base(0), enc_ns(("p",))
    assert r8.hget(base + b"c", ens) is None and not r8.exists(ann.keys.vset(0, ens))
    got = ann.search(("p",), query="q3", limit=10)
    assert [(x.key, x.score) for x in got] == [(x.key, x.score) for x in exact.search(("p",), query="q3", limit=10)]
    assert ann._cfg.state.vset_stats == {"hits": 0, "scans": 1}
    assert ann.rebuild_vector_sets(("p",)) == {("p",): "done"}
    assert r8.hget(base + b"c", ens) == b"h16:64:301"
    ann.search(("p",), query="q3", limit=10)
    assert ann._cfg.state.vset_stats == {"hits": 1, "scans": 1}


async def test_async_approximate(redis8, prefix, vsim_calls):
    import redis.asyncio as aredis

    from redis_saver import AsyncRedisStore

    client = aredis.Redis.from_url(redis8.url, socket_timeout=5.0)
    index = {"dims": D, "embed": embed, "fields": ["t"], "ann_index_config": ANN}
    s = AsyncRedisStore(client, prefix=prefix, index=index, vector_cache_bytes=0)
    keys = list(VECS)[:400]
    await s.abatch([PutOp(("a",), k, {"t": k}) for k in keys])
    got = await s.asearch(("a",), query="q2", limit=5)
    assert len(got) == 5 and [x.score for x in got] == exact_scores(got, QUERIES["q2"])
    assert s._cfg.state.vset_stats == {"hits": 1, "scans": 0} and "EF" in vsim_calls[-1]
    assert await s.arebuild_vector_sets(("a",)) == {("a",): "done"}
    await client.aclose()


@pytest.mark.cluster
def test_cluster_approximate(redis8_cluster):
    """On a Redis 8 cluster: each namespace's set in its shard's node, searched in its graph."""
    from tests.deploy.helpers import delete_prefix, new_prefix

    client = redis8_cluster.client(socket_timeout=5.0, socket_connect_timeout=2.0)
    prefix = new_prefix("st")
    try:
        s = store(client, prefix, shard_depth=1)
        exact = store(client, prefix, None, vector_sets=False, shard_depth=1)
        keys = list(VECS)[:1000]
        load(s, ("c", "x"), keys[:500])
        load(s, ("d", "y"), keys[500:])
        found = 0
        for q, qv in list(QUERIES.items())[:10]:
            for ns in (("c",), ("d",)):
                got = s.search(ns, query=q, limit=10)
                assert [x.score for x in got] == exact_scores(got, qv)
                found += len({x.key for x in got} & {x.key for x in exact.search(ns, query=q, limit=10)})
        assert found / 200 >= 0.9 and s._cfg.state.vset_stats == {"hits": 20, "scans": 0}
    finally:
        delete_prefix(client, prefix)
        client.close()


def test_cli_reindex_hnsw(redis8, r8, prefix):
    """``redis-saver store reindex --hnsw-m M [--ef-construction EF]`` remakes the sets with M."""
    pytest.importorskip("click", reason="the CLI needs the 'cli' extra (click, rich)")
    from click.testing import CliRunner

    from redis_saver.cli._app import cli as app

    plain = store(r8, prefix, None)
    load(plain, ("k", "1"), list(VECS)[:200])
    sk = plain.keys.vset(0, enc_ns(("k", "1")))
    args = ["--url", redis8.url, "--prefix", prefix, "store", "reindex", "k", "--json"]
    res = CliRunner().invoke(app, [*args, "--hnsw-m", "12", "--ef-construction", "40"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == [{"namespace": ["k", "1"], "status": "done"}]
    assert hnsw_m(r8, sk) == 12 and r8.hget(plain.keys.base(0) + b"c", enc_ns(("k", "1"))) == b"h12:40:200"
    res = CliRunner().invoke(app, [*args, "--hnsw-m", "3"], catch_exceptions=False)
    assert res.exit_code != 0 and "m must be an int from 5 to 100" in res.output
    assert hnsw_m(r8, sk) == 12
