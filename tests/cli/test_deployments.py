"""The tool on Redis Cluster (redis+cluster://) and through Sentinel (redis+sentinel://)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from redis_saver.cli._app import cli as app
from tests.cli.conftest import run_threads


def _run(url, prefix, *args, code=0):
    res = CliRunner().invoke(app, ["--url", url, "--prefix", prefix, *args], env={"COLUMNS": "200"},
                             catch_exceptions=False)
    assert res.exit_code == code, f"{res.stdout}\n{res.stderr}"
    return res


@pytest.mark.cluster
def test_cluster(cluster, prefix, tmp_path):
    from redis_saver import RedisSaver

    host, port = cluster.startup_nodes[0]
    url = f"redis+cluster://{host}:{port}"
    tids = [f"c-{i}" for i in range(6)]  # spread over slots, hence over the 3 primaries
    with RedisSaver.from_conn_string(url, prefix=prefix) as saver:
        run_threads(saver, tids, resume=set(tids[::2]))
        rows = json.loads(_run(url, prefix, "threads", "--json").stdout)
        assert sorted(r["thread_id"] for r in rows) == tids and all(r["bytes"] > 0 for r in rows)
        doc = json.loads(_run(url, prefix, "stats", "--json").stdout)
        assert doc["threads"] == 6 and len(doc["server"]) == 3 and doc["keys"]["cp"]["count"] == 6
        assert json.loads(_run(url, prefix, "show", "c-0", "--json").stdout)["checkpoints"]
        before = {t: [x for x in saver.list({"configurable": {"thread_id": t}})] for t in tids}
        path = tmp_path / "c.jsonl"
        _run(url, prefix, "export", "-o", str(path))
        _run(url, prefix, "delete", *tids, "--yes")
        assert json.loads(_run(url, prefix, "threads", "--json").stdout) == []
        _run(url, prefix, "import", str(path))
        assert "6 thread(s) already complete" in _run(url, prefix, "import", str(path)).stdout
        for t in tids:
            after = list(saver.list({"configurable": {"thread_id": t}}))
            assert [(a.config, a.checkpoint, a.metadata, a.pending_writes) for a in after] == \
                   [(b.config, b.checkpoint, b.metadata, b.pending_writes) for b in before[t]]
        _run(url, prefix, "expire", "c-1", "10", "--yes")
        assert 0 < json.loads(_run(url, prefix, "threads", "--json", "--match", "c-1").stdout)[0]["expires_in_ms"]
        _run(url, prefix, "prune", "--all", "--yes")
        # the function library: on every primary (the saver's calls loaded it where they ran)
        from redis_saver.core.scripts import library

        _run(url, prefix, "functions", "--load")
        libs = json.loads(_run(url, prefix, "functions", "--json").stdout)["libraries"]
        assert len(libs[library().name]) == 3


@pytest.mark.sentinel
def test_sentinel(sentinel, prefix):
    from redis_saver import RedisSaver

    host, port = sentinel.sentinels[0]
    url = f"redis+sentinel://{host}:{port}/{sentinel.master_name}"
    with RedisSaver.from_conn_string(url, prefix=prefix) as saver:
        run_threads(saver, ["s-0"])
    assert [r["thread_id"] for r in json.loads(_run(url, prefix, "threads", "--json").stdout)] == ["s-0"]
    assert json.loads(_run(url, prefix, "stats", "--json").stdout)["threads"] == 1
    _run(url, prefix, "delete", "s-0", "--yes")
    assert json.loads(_run(url, prefix, "threads", "--json").stdout) == []
