"""migrate out of Redis (``--to sqlite:///... | postgresql://...``): threads written by real
graphs through RedisSaver (an interrupt pending inside a subgraph namespace, a DeltaChannel)
land in SqliteSaver and a real PostgreSQL, and go on there as they would have on Redis."""

from __future__ import annotations

import re
import sqlite3

import pytest

from redis_saver.cli import _ops as ops
from tests.cli.conftest import build_graph, run_threads

pytest.importorskip("langgraph.checkpoint.sqlite", reason="migrate needs the 'migrate' extra")

# (thread of tests/lifecycle's graph: DeltaChannel, interrupted in its subgraph;
#  threads of tests/cli's graph: the first stopped at its interrupt (subgraph), the second resumed)
IDS = ("d-0", ("t-0", "t-1"))
DELTA, SIMPLE = IDS
PADDED = re.compile(r"^\d{32}\.")


def _fill(saver, ids=IDS) -> None:
    from langgraph.types import Command

    from tests.lifecycle.graphs import build, turn_input

    delta, simple = ids
    app = build(saver, interrupt_in="sub")
    cfg = {"configurable": {"thread_id": delta}}
    for t in range(3):
        app.invoke(turn_input(t), cfg)
        app.invoke(Command(resume=f"r{t}"), cfg)
    app.invoke(turn_input(3), cfg)
    run_threads(saver, list(simple), resume={simple[1]})


def _view(saver, tid: str, delta: bool):
    """What a user sees of a thread: state (subgraphs too), next steps, interrupts, history."""
    from tests.lifecycle.graphs import build

    app = build(saver, interrupt_in="sub") if delta else build_graph().compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": tid}}
    st = app.get_state(cfg, subgraphs=True)
    return (st.values, st.next, [t.interrupts for t in st.tasks],
            [(s.config, s.values, s.next, s.metadata) for s in app.get_state_history(cfg)])


def _out(res: dict) -> dict:
    """A graph's output, its interrupts by value (their ids come from the new checkpoints' ids)."""
    return {k: [i.value for i in v] if k == "__interrupt__" else v for k, v in res.items()}


def _go_on(saver, ids=IDS) -> list:
    """Resume every thread and run more turns: the outputs, then the final states and next steps."""
    from langgraph.types import Command

    from tests.lifecycle.graphs import build, turn_input

    delta, simple_ids = ids
    app = build(saver, interrupt_in="sub")
    cfg = {"configurable": {"thread_id": delta}}
    outs = [_out(app.invoke(Command(resume="x"), cfg))]
    for t in range(4, 7):
        outs += [_out(app.invoke(turn_input(t), cfg)), _out(app.invoke(Command(resume=f"r{t}"), cfg))]
    st = app.get_state(cfg)
    outs.append((st.values, st.next))
    simple = build_graph().compile(checkpointer=saver)
    for tid in simple_ids:
        c = {"configurable": {"thread_id": tid}}
        if tid == simple_ids[0]:
            outs.append(_out(simple.invoke(Command(resume="ok"), c)))
        outs += [_out(simple.invoke({"msgs": ["again"], "n": 0}, c)), _out(simple.invoke(Command(resume="y"), c))]
        st = simple.get_state(c)
        outs.append((st.values, st.next))
    return outs


def _check_target(target, rsaver, ids=IDS) -> None:
    """The target reads as Redis does, and every thread goes on there as it does on Redis."""
    for tid in [ids[0], *ids[1]]:
        assert _view(target, tid, tid == ids[0]) == _view(rsaver, tid, tid == ids[0]), tid
        latest = target.get_tuple({"configurable": {"thread_id": tid}})
        assert latest.checkpoint["channel_versions"]
        assert all(PADDED.match(v) for v in latest.checkpoint["channel_versions"].values()), latest.checkpoint
    there = _go_on(target, ids)
    assert there == _go_on(rsaver, ids)
    assert len(there[-8][0]["items"]) == 11  # the DeltaChannel thread went on: 6 items before, 5 added


def test_padded_versions_keep_the_order(rsaver):
    """Versions rewritten into the other savers' form sort as they did, and those savers count on
    from them (a short version given as it is makes one that sorts below it)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    old = [f"{i:032}.{0.25 * (i % 3):016}" for i in range(1, 8)]  # zero-padded: earlier releases
    chain = [old[-1]]
    for _ in range(120):  # 2 to 3 digit counters, and forks: two versions of one counter
        chain.append(rsaver.get_next_version(chain[-1], None))
        chain.append(rsaver.get_next_version(chain[-2], None))
    versions = sorted(set(old + chain))
    padded = [ops.padded_version(v) for v in versions]
    assert sorted(padded) == padded and len(set(padded)) == len(padded)
    assert [ops.padded_version(p) for p in padded] == padded  # already in that form: unchanged
    assert ops.padded_version(7) == f"{7:032}.{0:016}"
    sq = SqliteSaver(sqlite3.connect(":memory:", check_same_thread=False))
    short = chain[-1]
    assert short.startswith("3127.")  # counter 127
    assert sq.get_next_version(short, None) < short  # the hazard: int("3127") + 1, zero-padded
    assert sq.get_next_version(ops.padded_version(short), None) > ops.padded_version(short)


def test_migrate_out_sqlite(cli, rsaver, tmp_path):
    from langgraph.checkpoint.sqlite import SqliteSaver

    _fill(rsaver)
    path = tmp_path / "out.db"  # made by migrate
    url = f"sqlite:///{path}"
    res = cli("migrate", "--to", url, "--threads", SIMPLE[1], "--verify")
    assert "1 copied" in res.stdout and "verify: 1 thread(s) identical" in res.stdout, res.stdout
    res = cli("migrate", "--to", url, "--verify")  # resumes: t-1 is there already
    assert "2 copied, 1 already copied" in res.stdout and "verify: 3 thread(s) identical" in res.stdout
    # SqliteSaver keeps a DeltaChannel snapshot in the checkpoint that took it only, as LangGraph wrote it
    assert "DeltaChannel snapshot" in res.stdout
    res = cli("migrate", "--to", url)
    assert "0 copied, 3 already copied" in res.stdout
    with sqlite3.connect(str(path), check_same_thread=False) as conn:
        target = SqliteSaver(conn)
        for tid in [DELTA, *SIMPLE]:
            cfg = {"configurable": {"thread_id": tid}}
            a, b = list(rsaver.list(cfg)), list(target.list(cfg))
            assert a and ops.diff_threads(a, b, versions=ops.padded_versions) == [], tid
            assert [x.pending_writes for x in a] == [x.pending_writes for x in b]  # in order, task ids too
            assert {x.config["configurable"]["checkpoint_ns"] for x in b} == \
                {x.config["configurable"]["checkpoint_ns"] for x in a}
        delta = list(target.list({"configurable": {"thread_id": DELTA}}))  # (SqliteSaver locks while listing)
        assert any(x.config["configurable"]["checkpoint_ns"] for x in delta)  # the subgraph's namespace
        _check_target(target, rsaver)


def test_migrate_out_postgres(cli, rsaver, postgres_url, prefix):
    pytest.importorskip("langgraph.checkpoint.postgres", reason="migrate needs the 'migrate' extra")
    from langgraph.checkpoint.postgres import PostgresSaver

    # the PostgreSQL database is shared by the session: this test's thread ids are its own
    ids = (f"{prefix}-d", (f"{prefix}-t0", f"{prefix}-t1"))
    _fill(rsaver, ids)
    res = cli("migrate", "--to", postgres_url, "--verify")
    assert "3 copied" in res.stdout and "verify: 3 thread(s) identical" in res.stdout, res.stdout
    assert "DeltaChannel" not in res.stdout  # both store values per version: exactly equal
    assert "0 copied, 3 already copied" in cli("migrate", "--to", postgres_url).stdout
    with PostgresSaver.from_conn_string(postgres_url) as pg:
        for tid in [ids[0], *ids[1]]:
            cfg = {"configurable": {"thread_id": tid}}
            assert [x.pending_writes for x in rsaver.list(cfg)] == [x.pending_writes for x in pg.list(cfg)]
        _check_target(pg, rsaver, ids)


def test_versions_not_rewritten_stop_the_thread(rsaver, tmp_path):
    """The control for the tests above: the same copy with redis_saver's versions left as they
    are reads back the same, but the DeltaChannel thread no longer goes on as on Redis."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    _fill(rsaver)
    cfg = {"configurable": {"thread_id": DELTA}}
    tuples = list(rsaver.list(cfg))
    by_id = {t.config["configurable"]["checkpoint_id"]: t for t in tuples}
    with sqlite3.connect(str(tmp_path / "hand.db"), check_same_thread=False) as conn:
        target = SqliteSaver(conn)
        for it in ops.items_from_tuples(tuples, other_saver=True):
            raw = by_id[it.checkpoint_id].checkpoint
            it.checkpoint["channel_versions"] = dict(raw["channel_versions"])
            it.checkpoint["versions_seen"] = raw["versions_seen"]
            it.new_versions = {c: raw["channel_versions"][c] for c in it.new_versions}
            ops.write_item(target, it)
        assert _view(target, DELTA, True) == _view(rsaver, DELTA, True)
        from langgraph.types import Command

        from tests.lifecycle.graphs import build, turn_input

        outs = {}
        for name, saver in (("hand", target), ("redis", rsaver)):
            app = build(saver, interrupt_in="sub")
            app.invoke(Command(resume="x"), cfg)
            for t in range(4, 7):
                app.invoke(turn_input(t), cfg)
                app.invoke(Command(resume=f"r{t}"), cfg)
            outs[name] = len(app.get_state(cfg).values["items"])
    assert outs == {"hand": 6, "redis": 11}


def test_migrate_out_resumes_a_partial_thread(cli, rsaver, tmp_path):
    """A thread cut short mid-copy (oldest checkpoints only, the last without its writes) is completed."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    _fill(rsaver)
    path = tmp_path / "part.db"
    items = ops.items_from_tuples(list(rsaver.list({"configurable": {"thread_id": DELTA}})), other_saver=True)
    with sqlite3.connect(str(path), check_same_thread=False) as conn:
        target = SqliteSaver(conn)
        for it in items[:5]:
            ops.write_item(target, it)
        last = next(it for it in items[5:] if it.writes)
        target.put(ops.thread_config(DELTA, last.ns, last.parent_id), last.checkpoint, last.metadata,
                   last.new_versions)  # no writes yet
    res = cli("migrate", "--to", f"sqlite:///{path}", "--threads", DELTA, "--verify")
    assert "1 copied" in res.stdout and "identical" in res.stdout
    assert f"{len(items) - 5} checkpoint(s)" in res.stdout  # the first five were skipped
    with sqlite3.connect(str(path), check_same_thread=False) as conn:
        assert _view(SqliteSaver(conn), DELTA, True) == _view(rsaver, DELTA, True)


def test_migrate_out_errors(cli, rsaver, tmp_path):
    run_threads(rsaver, ["e-0"])
    db = f"sqlite:///{tmp_path}/x.db"
    res = cli("migrate", "--from", db, "--to", db, code=2)
    assert "one side is Redis" in res.stderr
    cli("migrate", code=2)
    res = cli("migrate", "--to", db, "--threads", "nope", code=2)
    assert "not in Redis: nope" in res.stderr
    res = cli("migrate", "--to", db, "--dry-run")
    assert "would copy thread e-0" in res.stdout and "1 to copy" in res.stdout
    assert not (tmp_path / "x.db").exists()  # a dry run makes nothing
    res = cli("migrate", "--to", f"sqlite:///{tmp_path}/no/such/dir/x.db", code=1)
    assert "cannot open" in res.stderr
    other = tmp_path / "other.db"  # an SQLite file of something else: a dry run leaves it alone
    with sqlite3.connect(str(other)) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    assert "would copy thread e-0" in cli("migrate", "--to", f"sqlite:///{other}", "--dry-run").stdout
    with sqlite3.connect(str(other)) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["t"]
    conn.close()
    (tmp_path / "junk.db").write_bytes(b"not a database" * 100)
    res = cli("migrate", "--to", f"sqlite:///{tmp_path}/junk.db", code=1)
    assert "not a SqliteSaver database" in res.stderr
    cli("migrate", "--to", db)
    res = cli("migrate", "--to", db, "--dry-run")
    assert "0 to copy, 1 already copied" in res.stdout
