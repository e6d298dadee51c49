"""migrate from SqliteSaver files and PostgresSaver tables written by real graphs."""

from __future__ import annotations

import sqlite3

import pytest

from redis_saver.cli._ops import diff_threads
from tests.cli.conftest import build_graph, run_threads

pytest.importorskip("langgraph.checkpoint.sqlite", reason="migrate needs the 'migrate' extra")


@pytest.fixture
def sqlite_file(tmp_path):
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = tmp_path / "graph.db"
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        run_threads(SqliteSaver(conn), ["s-0", "s-1", "s-2"], resume={"s-1", "s-2"})
    finally:
        conn.close()
    return path


def _same(src_saver, dst_saver, tids):
    for t in tids:
        cfg = {"configurable": {"thread_id": t}}
        a, b = list(src_saver.list(cfg)), list(dst_saver.list(cfg))
        assert a and diff_threads(a, b) == [], t
        # pending writes in the same order, with their task ids
        assert [x.pending_writes for x in a] == [x.pending_writes for x in b]


def test_migrate_sqlite(cli, rsaver, sqlite_file):
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.types import Command

    url = f"sqlite:///{sqlite_file}"  # tmp_path is absolute: sqlite:////abs/path
    res = cli("migrate", "--from", url, "--threads", "s-1", "--verify")
    assert "1 copied" in res.stdout and "identical" in res.stdout
    res = cli("migrate", "--from", url, "--verify")  # resumes: s-1 is already there
    assert "2 copied, 1 already copied" in res.stdout and "verify: 3 thread(s) identical" in res.stdout
    res = cli("migrate", "--from", url)
    assert "0 copied, 3 already copied" in res.stdout
    with sqlite3.connect(str(sqlite_file), check_same_thread=False) as conn:
        _same(SqliteSaver(conn), rsaver, ["s-0", "s-1", "s-2"])
    # the interrupted thread resumes on Redis
    graph = build_graph().compile(checkpointer=rsaver)
    out = graph.invoke(Command(resume="ok"), {"configurable": {"thread_id": "s-0"}})
    assert out["msgs"][-2:] == ["answer:ok", "b"]


def test_migrate_resumes_a_partial_thread(cli, rsaver, sqlite_file):
    """A thread cut short mid-copy (oldest checkpoints only, the last without its writes) is completed."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    from redis_saver.cli._ops import items_from_tuples, write_item

    with sqlite3.connect(str(sqlite_file), check_same_thread=False) as conn:
        items = items_from_tuples(list(SqliteSaver(conn).list({"configurable": {"thread_id": "s-1"}})))
    for it in items[:3]:
        write_item(rsaver, it)
    rsaver.put({"configurable": {"thread_id": "s-1", "checkpoint_ns": items[3].ns,
                                 "checkpoint_id": items[3].parent_id}},
               items[3].checkpoint, items[3].metadata, items[3].new_versions)  # no writes yet
    res = cli("migrate", "--from", f"sqlite:///{sqlite_file}", "--threads", "s-1", "--verify")
    assert "1 copied" in res.stdout and "identical" in res.stdout


def test_migrate_errors(cli, tmp_path, sqlite_file):
    res = cli("migrate", "--from", f"sqlite:///{tmp_path}/nope.db", code=1)
    assert "not found" in res.stderr
    res = cli("migrate", "--from", "mysql://x", code=2)
    assert "unknown scheme" in res.stderr and "sqlite:///" in res.stderr and "plainredis://" in res.stderr
    cli("migrate", "--from", f"sqlite:///{sqlite_file}", "--threads", "zzz", code=2)
    (tmp_path / "junk.db").write_bytes(b"not a database" * 100)
    res = cli("migrate", "--from", f"sqlite:///{tmp_path}/junk.db", code=1)
    assert "SqliteSaver" in res.stderr
    res = cli("migrate", "--from", f"sqlite:///{sqlite_file}", "--dry-run")
    assert "would copy thread s-0" in res.stdout


def test_migrate_postgres(cli, rsaver, postgres_url, prefix):
    pytest.importorskip("langgraph.checkpoint.postgres", reason="migrate needs the 'migrate' extra")
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.types import Command

    from tests.lifecycle.graphs import build, turn_input

    tids = [f"{prefix}-p0", f"{prefix}-p1", f"{prefix}-delta"]
    with PostgresSaver.from_conn_string(postgres_url) as pg:
        pg.setup()
        run_threads(pg, tids[:2], resume={tids[1]})
        app = build(pg, interrupt_in="sub")  # DeltaChannel, interrupted in a subgraph
        dcfg = {"configurable": {"thread_id": tids[2]}}
        for t in range(3):
            app.invoke(turn_input(t), dcfg)
            app.invoke(Command(resume=f"r{t}"), dcfg)
        app.invoke(turn_input(3), dcfg)
        res = cli("migrate", "--from", postgres_url, "--threads", ",".join(tids), "--verify")
        assert "3 copied" in res.stdout and "verify: 3 thread(s) identical" in res.stdout
        assert "DeltaChannel" not in res.stdout  # both store values per version: exactly equal
        _same(pg, rsaver, tids)
        expected = app.invoke(Command(resume="x"), dcfg)
    assert build(rsaver, interrupt_in="sub").invoke(Command(resume="x"), dcfg) == expected
    res = cli("migrate", "--from", postgres_url, "--threads", tids[0])
    assert "1 already copied" in res.stdout


def test_migrate_sqlite_delta_channels(cli, rsaver, tmp_path):
    """The DeltaChannel graph of tests/lifecycle, interrupted in a subgraph: the same state,
    history and pending interrupt read through RedisSaver as through SqliteSaver."""
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.types import Command

    from tests.lifecycle.graphs import build, turn_input

    path = tmp_path / "delta.db"
    cfg = {"configurable": {"thread_id": "d-0"}}

    def view(app):
        st = app.get_state(cfg, subgraphs=True)
        return (st.values, st.next, [t.interrupts for t in st.tasks],
                [(s.config, s.values, s.next, s.metadata) for s in app.get_state_history(cfg)])

    with sqlite3.connect(str(path), check_same_thread=False) as conn:
        src_app = build(SqliteSaver(conn), interrupt_in="sub")
        for t in range(3):
            src_app.invoke(turn_input(t), cfg)
            src_app.invoke(Command(resume=f"r{t}"), cfg)
        src_app.invoke(turn_input(3), cfg)
        expected = view(src_app)
        res = cli("migrate", "--from", f"sqlite:///{path}", "--verify")
        assert "verify: 1 thread(s) identical" in res.stdout and "DeltaChannel snapshot" in res.stdout
        dst_app = build(rsaver, interrupt_in="sub")
        assert view(dst_app) == expected
        a = src_app.invoke(Command(resume="x"), cfg)
    b = dst_app.invoke(Command(resume="x"), cfg)
    assert a == b


def test_migrate_plainredis(cli, rsaver, redis_url):
    """Another Redis saver that needs no server modules (langgraph-checkpoint-plainredis), on
    the same server under its own prefix: migrated, verified, resumable, and it resumes."""
    import uuid
    from urllib.parse import urlsplit

    plain_mod = pytest.importorskip("langgraph_checkpoint_plainredis", reason="migrate needs the 'migrate' extra")
    from langgraph.types import Command

    prefix = "plain" + uuid.uuid4().hex[:8]
    src = plain_mod.RedisSaver(url=redis_url, prefix=prefix)
    try:
        run_threads(src, ["p-0", "p-1"], resume={"p-1"})
        parts = urlsplit(redis_url)
        url = f"plainredis://{parts.netloc}{parts.path}?prefix={prefix}"
        res = cli("migrate", "--from", url, "--verify")
        assert "2 copied" in res.stdout and "verify: 2 thread(s) identical" in res.stdout, res.stdout
        assert "0 copied, 2 already copied" in cli("migrate", "--from", url).stdout
        # every checkpoint with its pending writes, by id (the two savers order lists their own way)
        for t in ("p-0", "p-1"):
            cfg = {"configurable": {"thread_id": t}}
            a = {x.config["configurable"]["checkpoint_id"]: x for x in src.list(cfg)}
            b = {x.config["configurable"]["checkpoint_id"]: x for x in rsaver.list(cfg)}
            assert a.keys() == b.keys() and a
            for cid in a:
                assert a[cid].checkpoint["channel_values"] == b[cid].checkpoint["channel_values"], (t, cid)
                assert sorted(map(repr, a[cid].pending_writes)) == sorted(map(repr, b[cid].pending_writes)), (t, cid)
        graph = build_graph().compile(checkpointer=rsaver)
        out = graph.invoke(Command(resume="ok"), {"configurable": {"thread_id": "p-0"}})
        assert out["msgs"][-2:] == ["answer:ok", "b"]
    finally:
        for k in src.client.scan_iter(match=f"{prefix}:*"):
            src.client.delete(k)
        src.client.close()
    res = cli("migrate", "--from", f"plainredis://{urlsplit(redis_url).netloc}/0?prefix=nothing-here")
    assert "0 copied" in res.stdout
