"""threads / show / stats, and the tool's usage conventions (exit codes, entry points)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from click.testing import CliRunner

from redis_saver.cli._app import cli as app


def test_no_url_is_a_usage_error():
    res = CliRunner().invoke(app, ["threads"], env={"REDIS_URL": ""})
    assert res.exit_code == 2
    assert "no Redis URL" in res.stderr


def test_consoles_are_sized_for_each_run():
    """The output width is the run's (its streams, ``$COLUMNS``), not the one of the process's first
    import: one process may run the tool many times (CliRunner here, under any test worker)."""
    from redis_saver.cli import _common

    for columns in ("77", "133", "77"):
        res = CliRunner().invoke(app, ["threads"], env={"REDIS_URL": "", "COLUMNS": columns})
        assert res.exit_code == 2  # the group's callback ran, the command refused
        assert (_common.out.width, _common.err.width) == (int(columns), int(columns))


def test_unreachable_server_fails_clearly(prefix):
    from redis_saver.demo_server import free_port

    res = CliRunner().invoke(app, ["--url", f"redis://127.0.0.1:{free_port()}", "--prefix", prefix, "threads"])
    assert res.exit_code == 1
    assert "cannot reach Redis" in res.stderr


def test_bad_option_exit_2(cli):
    cli("threads", "--limit", "0", code=2)
    cli("nosuchcommand", code=2)
    cli("prune", code=2)  # neither threads nor --all


def test_python_m_and_console_script(redis_url, prefix, filled):
    env = {**os.environ, "REDIS_URL": redis_url}
    r = subprocess.run([sys.executable, "-m", "redis_saver", "--prefix", prefix, "threads", "--json"],
                       capture_output=True, text=True, env=env, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert sorted(t["thread_id"] for t in json.loads(r.stdout)) == ["t-0", "t-1", "t-2"]
    exe = os.path.join(os.path.dirname(sys.executable), "redis-saver")
    if os.path.exists(exe):
        r = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 0 and "migrate" in r.stdout


def test_threads_table_and_json(cli, filled):
    res = cli("threads")
    for tid in ("t-0", "t-1", "t-2"):
        assert tid in res.stdout
    rows = json.loads(cli("threads", "--json").stdout)
    by = {r["thread_id"]: r for r in rows}
    assert set(by) == {"t-0", "t-1", "t-2"}
    n = sum(1 for _ in filled.list({"configurable": {"thread_id": "t-1"}}))
    assert by["t-1"]["checkpoints"] == n
    assert len(by["t-1"]["namespaces"]) == 2  # the root graph and the subgraph
    assert by["t-1"]["bytes"] > 0
    assert by["t-1"]["expires_in_ms"] is None
    assert by["t-1"]["latest"]["step"] == filled.get_tuple({"configurable": {"thread_id": "t-1"}}).metadata["step"]
    assert len(json.loads(cli("threads", "--json", "--limit", "2").stdout)) == 2
    assert [r["thread_id"] for r in json.loads(cli("threads", "--json", "--match", "*-2").stdout)] == ["t-2"]
    assert json.loads(cli("threads", "--json", "--match", "nope*").stdout) == []


def test_threads_streams_in_slot_batches(filled):
    """Small slot batches give the same ids as one pass (the --limit path never loads all)."""
    from redis_saver.cli._ops import iter_thread_ids

    assert sorted(iter_thread_ids(filled, batch=1)) == sorted(iter_thread_ids(filled)) == ["t-0", "t-1", "t-2"]


def test_show_timeline(cli, filled):
    cfg = {"configurable": {"thread_id": "t-0"}}
    ids = [t.config["configurable"]["checkpoint_id"] for t in filled.list(cfg)]
    doc = json.loads(cli("show", "t-0", "--json").stdout)
    assert [c["checkpoint_id"] for c in doc["checkpoints"]] == ids  # newest first, every namespace
    root = [c for c in doc["checkpoints"] if c["checkpoint_ns"] == ""]
    latest = root[0]
    assert latest["next"] == ["sub"]
    # the interrupt is a pending write of the root graph's latest checkpoint, with its value
    assert latest["interrupts"] and latest["interrupts"][0]["value"] == {"question": "approve?", "n": 1}
    assert root[-1]["source"] == "input" and root[-1]["parent_checkpoint_id"] is None
    text = cli("show", "t-0").stdout
    assert ids[0] in text and "approve?" in text
    doc = json.loads(cli("show", "t-0", "--json", "--ns", "", "--limit", "1").stdout)
    assert [c["checkpoint_id"] for c in doc["checkpoints"]] == [latest["checkpoint_id"]]
    res = cli("show", "nope", code=1)
    assert "no checkpoints" in res.stderr


def test_show_checkpoint_values(cli, filled):
    t = filled.get_tuple({"configurable": {"thread_id": "t-1"}})
    cid = t.config["configurable"]["checkpoint_id"]
    doc = json.loads(cli("show", "t-1", "--checkpoint", cid, "--json").stdout)
    assert doc["channels"]["msgs"]["value"] == t.checkpoint["channel_values"]["msgs"]
    assert doc["channels"]["msgs"]["type"] == filled.serde.dumps_typed(t.checkpoint["channel_values"]["msgs"])[0]
    raw = json.loads(cli("show", "t-1", "--checkpoint", cid, "--json", "--raw").stdout)
    assert "value" not in raw["channels"]["msgs"] and raw["channels"]["msgs"]["bytes"] > 0
    text = cli("show", "t-1", "--checkpoint", cid).stdout
    assert "answer:yes-t-1" in text
    assert "answer:yes-t-1" not in cli("show", "t-1", "--checkpoint", cid, "--raw").stdout
    cli("show", "t-1", "--checkpoint", "no-such-id", code=1)


def test_stats(cli, filled, sync_client):
    doc = json.loads(cli("stats", "--json").stdout)
    assert doc["threads"] == 3
    assert doc["checkpoints"] == sum(sum(1 for _ in filled.list({"configurable": {"thread_id": t}}))
                                     for t in ("t-0", "t-1", "t-2"))
    assert doc["bytes"] > 0 and "cp" in doc["keys"] and doc["keys"]["cp"]["count"] == 3
    assert any(k.startswith("index") for k in doc["keys"])
    node = doc["server"][0]
    assert node["version"] and node["maxmemory_policy"] == "noeviction"
    text = cli("stats")
    assert "noeviction" in text.stdout and "warning" not in text.stderr
    sync_client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        assert "warning" in cli("stats").stderr
    finally:
        sync_client.config_set("maxmemory-policy", "noeviction")


def test_core_does_not_import_the_cli_dependencies():
    code = "import sys, redis_saver; assert not {'click', 'rich'} & set(sys.modules), sorted(sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr


def test_without_the_cli_extra_says_what_to_install():
    code = "import sys; sys.modules['rich'] = None; from redis_saver.cli import main; main(['--help'])"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 1 and "pip install 'redis-saver[cli]'" in r.stderr


def test_postgres_helper_reports_missing_binaries(monkeypatch):
    import pytest

    from tests.cli import pg

    monkeypatch.setattr(pg, "find_binaries", lambda: None)
    with pytest.raises(pg.Unavailable, match="binaries"):
        pg.start_postgres()


def test_an_evicted_thread_is_skipped(cli, filled, sync_client):
    """A thread that lost a key (evicted) is forgotten whole: threads, show and stats skip it."""
    keys = filled.keys.thread_keys("t-2")
    sync_client.delete(keys[5])  # its writes hash, as an eviction would
    listed = json.loads(cli("threads", "--json").stdout)
    assert sorted(t["thread_id"] for t in listed) == ["t-0", "t-1"]
    assert not any(sync_client.exists(k) for k in keys[:9])  # forgotten by the read
    cli("show", "t-2", code=1)
    assert json.loads(cli("stats", "--json").stdout)["threads"] == 2
