"""Fixtures for the CLI tests: the tool driven through click's CliRunner, real LangGraph
graphs (an interrupt inside a subgraph, so threads have two namespaces) checkpointed by
RedisSaver, SqliteSaver and PostgresSaver, and a PostgreSQL server started for the session."""

from __future__ import annotations

import operator
import os
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("click", reason="the CLI tests need the 'cli' extra (click, rich)")
pytest.importorskip("rich", reason="the CLI tests need the 'cli' extra (click, rich)")

from click.testing import CliRunner


class State(TypedDict):
    msgs: Annotated[list, operator.add]
    n: int


def build_graph() -> Any:
    """START -> a -> sub(ask: interrupt) -> b -> END; ``ask`` runs inside a subgraph."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    def a(s: State) -> dict:
        return {"msgs": ["a"], "n": s.get("n", 0) + 1}

    def ask(s: State) -> dict:
        answer = interrupt({"question": "approve?", "n": s["n"]})
        return {"msgs": [f"answer:{answer}"]}

    def b(s: State) -> dict:
        return {"msgs": ["b"]}

    sub = StateGraph(State)
    sub.add_node("ask", ask)
    sub.add_edge(START, "ask")
    sub.add_edge("ask", END)
    g = StateGraph(State)
    g.add_node("a", a)
    g.add_node("sub", sub.compile())
    g.add_node("b", b)
    g.add_edge(START, "a")
    g.add_edge("a", "sub")
    g.add_edge("sub", "b")
    g.add_edge("b", END)
    return g


def run_threads(checkpointer: Any, ids: list[str], resume: set[str] = frozenset()) -> None:
    """One turn per thread (stopping at the interrupt); resumed for the ids in ``resume``."""
    from langgraph.types import Command

    app = build_graph().compile(checkpointer=checkpointer)
    for tid in ids:
        cfg = {"configurable": {"thread_id": tid}}
        app.invoke({"msgs": [f"hi {tid}"], "n": 0}, cfg)
        if tid in resume:
            app.invoke(Command(resume=f"yes-{tid}"), cfg)


@pytest.fixture
def cli(redis_url, prefix):
    """``cli(*args, input=None, code=0)``: run the tool with --url/--prefix of this test."""
    from redis_saver.cli._app import cli as app

    runner = CliRunner()

    def run(*args: str, input: str | None = None, code: int | None = 0, env: dict | None = None):
        res = runner.invoke(app, ["--url", redis_url, "--prefix", prefix, *args], input=input,
                            env={"COLUMNS": "200", **(env or {})}, catch_exceptions=False)
        if code is not None:
            assert res.exit_code == code, (
                f"exit {res.exit_code}, expected {code}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
            )
        return res

    return run


@pytest.fixture
def rsaver(redis_url, prefix):
    """A RedisSaver on the test's prefix (own client)."""
    from redis_saver import RedisSaver

    with RedisSaver.from_conn_string(redis_url, prefix=prefix) as s:
        yield s


@pytest.fixture
def filled(rsaver):
    """Three threads written by a real graph: t-0 stopped at its interrupt, t-1 and t-2 resumed."""
    run_threads(rsaver, ["t-0", "t-1", "t-2"], resume={"t-1", "t-2"})
    return rsaver


@pytest.fixture(scope="session")
def postgres_url():
    """``$POSTGRES_URL`` if set, else a PostgreSQL started for the session (skip if impossible)."""
    url = os.environ.get("POSTGRES_URL")
    if url:
        yield url
        return
    from tests.cli.pg import Unavailable, start_postgres

    try:
        server = start_postgres()
    except Unavailable as exc:
        pytest.skip(f"no PostgreSQL for the migrate test: {exc}")
    try:
        yield server.url
    finally:
        server.stop()
