"""``redis-saver store ...``: namespaces and items of a RedisStore through the tool (ls, show,
export / import across prefixes and shard layouts, migrate from a PostgresStore, verified)."""

from __future__ import annotations

import json
import uuid

import pytest
import redis
from click.testing import CliRunner

from devkit.servers import client_kwargs
from redis_saver import RedisStore
from redis_saver.cli._app import cli as app


def embed(texts):
    return [[float(t.count(c)) for c in "aeiou"] for t in texts]


INDEX = {"dims": 5, "embed": embed, "fields": ["text"]}
NS = ("users", "{u1}", "memories")


@pytest.fixture
def rstore(redis_url, prefix):
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    s = RedisStore(client, prefix=prefix, index=INDEX)
    s.setup()
    for j in range(4):
        s.put(NS, f"k{j}", {"text": "aeiou"[j] * (j + 1), "n": j}, ttl=30 if j == 3 else None)
    s.put(("users", "u:2"), "k", {"text": "other"})
    s.put(("docs",), "readme", {"text": "日本語", "n": 9})
    yield s
    client.close()


def test_ls_and_show(cli, rstore):
    res = cli("store", "ls")
    assert res.stdout.splitlines() == ["docs", "users.u:2", "users.{u1}.memories"]
    assert json.loads(cli("store", "ls", "users", "--max-depth", "2", "--json").stdout) == [
        ["users", "u:2"], ["users", "{u1}"],
    ]
    assert json.loads(cli("store", "ls", "--suffix", "memories", "--json").stdout) == [list(NS)]
    item = json.loads(cli("store", "show", json.dumps(list(NS)), "k2", "--json").stdout)
    assert item["value"] == {"text": "iii", "n": 2} and item["key"] == "k2"
    rows = json.loads(cli("store", "show", "users.{u1}.memories", "--json").stdout)
    assert [r["key"] for r in rows] == ["k0", "k1", "k2", "k3"]
    assert "no item" in cli("store", "show", "docs", "missing", code=1).stderr


def test_export_import_across_prefixes(cli, rstore, redis_url, tmp_path):
    path = tmp_path / "store.jsonl"
    cli("store", "export", "-o", str(path))
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["type"] == "store-header" and json.loads(lines[-1]) == {"type": "end", "items": 6}
    other = "t" + uuid.uuid4().hex[:12]
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    RedisStore(client, prefix=other, shards=4).setup()  # another layout: the tool reads it from the prefix
    res = CliRunner().invoke(
        app,
        ["--url", redis_url, "--prefix", other, "store", "import", str(path), "--yes"],
        catch_exceptions=False,
    )
    assert res.exit_code == 0 and "imported 6 item(s)" in res.stdout, res.output
    dst = RedisStore(client, prefix=other, shards=4, index=INDEX)
    for ns in (NS, ("users", "u:2"), ("docs",)):
        want = [(i.key, i.value, i.created_at, i.updated_at, i.score) for i in rstore.search(ns, query="ooo")]
        assert [(i.key, i.value, i.created_at, i.updated_at, i.score) for i in dst.search(ns, query="ooo")] == want
    assert 0 < client.pttl(dst.keys.item(NS, "k3")) <= 30 * 60_000
    # a truncated file is refused before anything is written
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines[:-1]) + "\n")
    third = "t" + uuid.uuid4().hex[:12]
    res = CliRunner().invoke(
        app,
        ["--url", redis_url, "--prefix", third, "store", "import", str(bad), "--yes"],
    )
    assert res.exit_code == 1 and "truncated" in res.output
    assert RedisStore(client, prefix=third).list_namespaces() == []
    client.close()


def test_migrate_from_postgres_store(cli, postgres_url, prefix):
    pytest.importorskip("langgraph.store.postgres", reason="migrate needs langgraph-checkpoint-postgres")
    import psycopg
    from langgraph.store.postgres import PostgresStore

    schema = "s" + uuid.uuid4().hex[:10]
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            url = postgres_url + ("&" if "?" in postgres_url else "?") + f"options=-csearch_path%3D{schema}"
            with PostgresStore.from_conn_string(url) as pg:
                pg.setup()
                pg.put(("users", "u{1}", "prefs"), "theme", {"dark": True, "size": 12})
                pg.put(("users", "u{1}", "prefs"), "lang", {"code": "日本"}, index=False)
                pg.put(("docs",), "a", {"text": "x" * 2000, "n": [1, 2.5, None]})
                res = cli("store", "migrate", "--from", url, "--verify")
                assert "migrated 3 item(s)" in res.stdout and "verified 3 item(s)" in res.stderr
                want = {(i.namespace, i.key): i.value for i in pg.search(("users",))}
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")
    rows = json.loads(cli("store", "show", "users.u{1}.prefs", "--json").stdout)
    assert {(tuple(r["namespace"]), r["key"]): r["value"] for r in rows} == want
    names = json.loads(cli("store", "ls", "--json").stdout)
    assert [tuple(n) for n in names] == [("docs",), ("users", "u{1}", "prefs")]



def test_migrate_from_sqlite_store(cli, tmp_path, redis_url, prefix):
    pytest.importorskip("langgraph.store.sqlite", reason="migrate needs langgraph-checkpoint-sqlite")
    from langgraph.store.sqlite import SqliteStore

    path = tmp_path / "store.db"
    with SqliteStore.from_conn_string(str(path)) as sq:
        sq.setup()
        sq.put(("users", "u{1}", "prefs"), "theme", {"dark": True, "size": 12})
        sq.put(("users", "u{1}", "prefs"), "lang", {"code": "日本"}, ttl=30)
        sq.put(("docs",), "a", {"text": "x" * 2000, "n": [1, 2.5, None]})
        want = {(i.namespace, i.key): i for i in sq.search(("users",))}
    res = cli("store", "migrate", "--from", f"sqlite:///{path}", "--verify")
    assert "migrated 3 item(s)" in res.stdout and "verified 3 item(s)" in res.stderr
    rows = json.loads(cli("store", "show", "users.u{1}.prefs", "--json").stdout)
    assert {(tuple(r["namespace"]), r["key"]): r["value"] for r in rows} == {k: i.value for k, i in want.items()}
    names = json.loads(cli("store", "ls", "--json").stdout)
    assert [tuple(n) for n in names] == [("docs",), ("users", "u{1}", "prefs")]
    client = redis.Redis.from_url(redis_url, **client_kwargs(5.0, 5.0))
    rs = RedisStore(client, prefix=prefix)
    for (ns, key), item in want.items():
        got = rs.get(ns, key, refresh_ttl=False)
        assert got is not None
        # SqliteStore's times are UTC text without a zone
        assert got.created_at.replace(tzinfo=None) == item.created_at.replace(tzinfo=None)
    ttls = [s.ttl_ms for s in rs.export_items(("users",))]
    assert sorted(ttls) == [0, 30 * 60_000]
    client.close()


def test_migrate_from_sqlite_refuses_other_files(cli, tmp_path):
    bad = tmp_path / "x.db"
    bad.write_bytes(b"not a database" * 100)
    res = cli("store", "migrate", "--from", f"sqlite:///{bad}", code=None)
    assert res.exit_code != 0 and "not a SqliteStore database" in res.stderr
    res = cli("store", "migrate", "--from", f"sqlite:///{tmp_path}/missing.db", code=None)
    assert res.exit_code != 0 and "no such SQLite database" in res.stderr
    res = cli("store", "migrate", "--from", "mysql://x", code=2)  # a usage error naming the forms
    assert "unknown scheme 'mysql://'" in res.stderr and "postgresql://" in res.stderr
