"""The tool with an integrity key: verify reports what fails, rewrite --sign vouches for what
is stored, export / import / migrate between prefixes keep working, the store commands take
the key; the key comes from --integrity-key-file or the environment."""

from __future__ import annotations

import json
import os

import pytest

import redis_saver
from redis_saver.cli._ops import tuple_view
from tests.cli.conftest import run_threads

K1, K2 = os.urandom(32), os.urandom(32)


def _view(saver, tid):
    return [tuple_view(t) for t in saver.list({"configurable": {"thread_id": tid}})]


@pytest.fixture
def keyfile(tmp_path):
    p = tmp_path / "keys"
    p.write_text(f"# the first key signs\n{K2.hex()}\n{K1.hex()}\n")
    return str(p)


def test_verify_and_sign(cli, redis_url, prefix, sync_client, keyfile):
    run_threads(redis_saver.RedisSaver(sync_client, prefix=prefix), ["plain"], resume={"plain"})
    run_threads(redis_saver.RedisSaver(sync_client, prefix=prefix, integrity_key=K1), ["k1"])
    res = cli("--integrity-key-file", keyfile, "verify", "--all", code=1)
    assert "plain: FAILED IntegrityError" in res.stderr and "1 passed, 1 failed" in res.stdout
    cli("verify", "plain", code=2)  # no key: a usage error
    cli("rewrite", "--sign", "plain", "--yes", code=2)
    res = cli("--integrity-key-file", keyfile, "rewrite", "--sign", "--all", "--yes")
    assert "signed 2 thread(s)" in res.stdout
    # everything now carries K2's tags: K2 alone verifies it (the key from the environment)
    cli("verify", "--all", env={"REDIS_SAVER_INTEGRITY_KEY": K2.hex()})
    keyed = redis_saver.RedisSaver(sync_client, prefix=prefix, integrity_key=K2)
    assert _view(keyed, "plain") == _view(redis_saver.RedisSaver(sync_client, prefix=prefix), "plain")
    # a record moved from one thread onto another is reported
    cp_a, cp_b = f"{prefix}:{{plain}}:cp", f"{prefix}:{{k1}}:cp"
    field = max(sync_client.hkeys(cp_a))
    sync_client.hset(cp_a, field, sync_client.hget(cp_b, max(sync_client.hkeys(cp_b))))
    res = cli("--integrity-key-file", keyfile, "verify", "plain", "k1", "--json", code=1)
    assert '"plain"' in res.stdout and "fails its integrity check" in res.stdout
    cli("--integrity-key-file", str(keyfile) + "-missing", "verify", "--all", code=2)
    bad = os.path.join(os.path.dirname(keyfile), "bad")
    with open(bad, "w") as f:
        f.write("abcd\n")
    cli("--integrity-key-file", bad, "verify", "--all", code=2)


def test_export_import_with_a_key(cli, redis_url, prefix, sync_client, keyfile, tmp_path):
    keyed = redis_saver.RedisSaver(sync_client, prefix=prefix, integrity_key=K2)
    run_threads(keyed, ["a", "b"], resume={"b"})
    before = {t: _view(keyed, t) for t in ("a", "b")}
    path = tmp_path / "dump.jsonl"
    cli("--integrity-key-file", keyfile, "export", "-o", str(path))
    cli("delete", "a", "b", "--yes")
    cli("--integrity-key-file", keyfile, "import", str(path))
    assert {t: _view(keyed, t) for t in ("a", "b")} == before
    cli("--integrity-key-file", keyfile, "verify", "--all")
    # a tampered thread stops the export
    cp = f"{prefix}:{{a}}:cp"
    f = max(sync_client.hkeys(cp))
    v = sync_client.hget(cp, f)
    sync_client.hset(cp, f, v[:-1] + bytes([v[-1] ^ 1]))
    res = cli("--integrity-key-file", keyfile, "export", "-o", str(tmp_path / "x.jsonl"), code=1)
    assert "IntegrityError" in res.stderr or "IntegrityError" in res.stdout


def test_store_commands_take_the_key(cli, redis_url, prefix, sync_client, keyfile):
    store = redis_saver.RedisStore(sync_client, prefix=prefix, integrity_key=K2)
    store.setup()
    store.put(("docs",), "k", {"text": "hello"})
    res = cli("--integrity-key-file", keyfile, "store", "show", "docs", "k")
    assert "hello" in res.stdout
    redis_saver.RedisStore(sync_client, prefix=prefix).put(("docs",), "k", {"text": "planted"})
    res = cli("--integrity-key-file", keyfile, "store", "show", "docs", "k", code=1)
    assert "IntegrityError" in res.stderr or "IntegrityError" in res.stdout


def test_migrate_with_a_key(cli, redis_url, prefix, sync_client, keyfile, tmp_path):
    """migrate --from with the key signs what it writes (the first key); migrate --to reads
    with it, so a thread that fails its check is reported and not copied, the others are."""
    pytest.importorskip("langgraph.checkpoint.sqlite", reason="migrate needs the 'migrate' extra")
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    from redis_saver.cli._ops import diff_threads

    src = tmp_path / "src.db"
    with sqlite3.connect(str(src), check_same_thread=False) as conn:
        run_threads(SqliteSaver(conn), ["s-0", "s-1"], resume={"s-1"})
    res = cli("--integrity-key-file", keyfile, "migrate", "--from", f"sqlite:///{src}", "--verify")
    assert "2 copied" in res.stdout and "verify: 2 thread(s) identical" in res.stdout, res.stdout
    keyed = redis_saver.RedisSaver(sync_client, prefix=prefix, integrity_key=K2)
    with sqlite3.connect(str(src), check_same_thread=False) as conn:
        for t in ("s-0", "s-1"):
            cfg = {"configurable": {"thread_id": t}}
            assert diff_threads(list(SqliteSaver(conn).list(cfg)), list(keyed.list(cfg))) == []
    cli("--integrity-key-file", keyfile, "verify", "--all")
    # signed with the first key of the file (K2): K1 alone refuses it
    with pytest.raises(redis_saver.IntegrityError):
        redis_saver.RedisSaver(sync_client, prefix=prefix, integrity_key=K1).get_tuple(
            {"configurable": {"thread_id": "s-0"}}
        )
    # out of Redis: s-1 tampered (s-0's latest record moved onto it) is refused, s-0 is copied
    cp_0, cp_1 = f"{prefix}:{{s-0}}:cp", f"{prefix}:{{s-1}}:cp"
    sync_client.hset(cp_1, max(sync_client.hkeys(cp_1)), sync_client.hget(cp_0, max(sync_client.hkeys(cp_0))))
    out = tmp_path / "out.db"
    res = cli("--integrity-key-file", keyfile, "migrate", "--to", f"sqlite:///{out}", code=1)
    assert "IntegrityError" in res.stdout + res.stderr and "1 copied" in res.stdout, res.stdout + res.stderr
    with sqlite3.connect(str(out), check_same_thread=False) as conn:
        target = SqliteSaver(conn)
        assert list(target.list({"configurable": {"thread_id": "s-1"}})) == []
        cfg = {"configurable": {"thread_id": "s-0"}}
        assert len(list(target.list(cfg))) == len(list(keyed.list(cfg))) > 0


def test_store_verify(cli, redis_url, prefix, sync_client, keyfile):
    """store verify reports every item that fails (moved from another key, written without the
    key), checks the others, and needs the key."""
    store = redis_saver.RedisStore(sync_client, prefix=prefix, integrity_key=K2)
    store.setup()
    for ns in (("docs",), ("docs", "a"), ("users",)):
        for k in ("k1", "k2"):
            store.put(ns, k, {"text": f"{ns} {k}"})
    res = cli("--integrity-key-file", keyfile, "store", "verify")
    assert "verified 6 item(s): 6 passed, 0 failed" in res.stdout
    cli("store", "verify", code=2)  # no key: a usage error
    items = {k: sync_client.get(k) for k in sync_client.scan_iter(match=f"{prefix}:store#*:i:*", count=1000)}
    assert len(items) == 6
    a, b = sorted(k for k in items if b":i:docs\x00" in k)[:2]
    sync_client.set(a, items[b], keepttl=True)  # another item's record (of docs), onto one of docs
    redis_saver.RedisStore(sync_client, prefix=prefix).put(("users",), "k2", {"text": "planted"})
    res = cli("--integrity-key-file", keyfile, "store", "verify", "--json", code=1)
    got = json.loads(res.stdout)
    assert got["verified"] == 4 and len(got["failed"]) == 2, got
    assert {"namespace": ["users"], "key": "k2"}.items() <= next(
        f for f in got["failed"] if f["namespace"] == ["users"]).items()
    assert "fails its integrity check" in res.stderr and "no integrity tag" in res.stderr
    res = cli("--integrity-key-file", keyfile, "store", "verify", "users", code=1)  # under a namespace
    assert "verified 2 item(s): 1 passed, 1 failed" in res.stdout
