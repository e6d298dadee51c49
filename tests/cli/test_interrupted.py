"""import and migrate stopped at any moment (SIGKILL, SIGINT, SIGTERM of the real process, at
chosen script calls counted on a proxy), then the tool's own next step: every thread exact,
none partial; a saver reading meanwhile never sees a thread in part."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from devkit.wire import CountingProxy
from redis_saver import RedisSaver
from redis_saver.cli._ops import diff_threads, padded_versions, tuple_view
from tests.cli.conftest import build_graph

ROOT = Path(__file__).resolve().parents[2]
SCRIPT_CALLS = {b"FCALL", b"FCALL_RO", b"EVALSHA", b"EVALSHA_RO", b"EVAL", b"EVAL_RO"}
N_THREADS = 12


def _fill(saver: Any, n: int = N_THREADS) -> list[str]:
    """Threads of a real graph (two namespaces, pending writes, interrupts), 1 to 3 turns each;
    the even ones stopped at an interrupt."""
    from langgraph.types import Command

    app = build_graph().compile(checkpointer=saver)
    tids = [f"user-{i:03d}" for i in range(n)]
    for i, tid in enumerate(tids):
        cfg = {"configurable": {"thread_id": tid}}
        for turn in range(1 + i % 3):
            app.invoke({"msgs": [f"hi {tid} {turn}"], "n": 0}, cfg)
            if i % 2 or turn < i % 3:
                app.invoke(Command(resume=f"yes-{turn}"), cfg)
    return tids


def _view(saver: Any, tid: str) -> list[Any]:
    return [tuple_view(t) for t in saver.list({"configurable": {"thread_id": tid}})]


class Stopper:
    """A proxy hook: counts script calls, remembers the thread the last one named, and sends
    ``sig`` to ``proc`` at call number ``at`` (the call itself still reaches the server)."""

    def __init__(self, at: int | None = None, sig: int = signal.SIGKILL, delay: float = 0.0) -> None:
        self.at, self.sig, self.delay = at, sig, delay
        self.calls = 0
        self.steps: dict[bytes, list[int]] = {}  # import.lua step -> the calls that sent it
        self.thread: str | None = None
        self.proc: subprocess.Popen[str] | None = None

    def __call__(self, cmd: list[bytes]) -> None:
        if cmd[0].upper() not in SCRIPT_CALLS:
            return
        self.calls += 1
        nkeys = int(cmd[2])
        if nkeys == 11 and len(cmd) > 7 + nkeys:  # a per-thread script: ARGV[2] names the thread
            self.thread = cmd[4 + nkeys].decode()
            if cmd[7 + nkeys] in (b"stage", b"reveal"):
                self.steps.setdefault(cmd[7 + nkeys], []).append(self.calls)
        if self.delay:
            time.sleep(self.delay)
        if self.calls == self.at and self.proc is not None:
            self.proc.send_signal(self.sig)


def _run(url: str, prefix: str, *args: str, stopper: Stopper | None = None) -> subprocess.CompletedProcess[str]:
    """The tool as a user runs it (``python -m redis_saver``), in its own process."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "redis_saver", "--url", url, "--prefix", prefix, *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"},
    )
    if stopper is not None:
        stopper.proc = proc
    out, err = proc.communicate(timeout=180)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _proxy_url(proxy: CountingProxy, url: str) -> str:
    p = urlsplit(url)
    return p._replace(netloc=f"{proxy.host}:{proxy.port}").geturl()


def _cli(url: str, prefix: str, *args: str, code: int = 0) -> Any:
    from redis_saver.cli._app import cli as app

    res = CliRunner().invoke(app, ["--url", url, "--prefix", prefix, *args], env={"COLUMNS": "200"},
                             catch_exceptions=False)
    assert res.exit_code == code, f"exit {res.exit_code}\n{res.stdout}\n{res.stderr}"
    return res


@pytest.fixture(scope="module")
def exported(redis_url, tmp_path_factory):
    """(source saver, thread ids, their views, the export file) of a source prefix."""
    prefix = "src" + uuid.uuid4().hex[:8]
    path = tmp_path_factory.mktemp("interrupted") / "all.jsonl"
    with RedisSaver.from_conn_string(redis_url, prefix=prefix) as src:
        tids = _fill(src)
        views = {t: _view(src, t) for t in tids}
        _cli(redis_url, prefix, "export", "-o", str(path))
        src.prefix_name = prefix
        yield src, tids, views, path


@pytest.fixture(scope="module")
def probe(redis_url, exported):
    """A whole import through the proxy: its script calls and where its steps fall."""
    count = Stopper()
    host, port = urlsplit(redis_url).hostname, urlsplit(redis_url).port
    with CountingProxy(host, port, on_command=count) as proxy:
        res = _run(_proxy_url(proxy, redis_url), "p" + uuid.uuid4().hex[:8], "import", str(exported[3]))
    assert res.returncode == 0, res.stderr
    assert len(count.steps[b"stage"]) == len(count.steps[b"reveal"]) == N_THREADS
    return count


def _states(saver: Any, client: Any, tids: list[str], views: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(whole threads, threads written in part but invisible); fails on a thread visible in part."""
    whole, hidden = [], []
    for t in tids:
        got = _view(saver, t)
        if got:
            assert got == views[t], f"{t} is visible in part: {len(got)} of {len(views[t])} checkpoints"
            whole.append(t)
        elif client.exists(saver.keys.thread_keys(t)[0]):
            hidden.append(t)
    return whole, hidden


def test_a_reader_never_sees_a_thread_in_part(redis_url, exported):
    """While the import runs (slowed on the proxy), a saver reads the thread being written
    again and again: every read is the whole thread or nothing."""
    _, tids, views, path = exported
    prefix = "dst" + uuid.uuid4().hex[:8]
    hook = Stopper(delay=0.003)
    seen = {"none": 0, "whole": 0}
    partial: list[str] = []  # asserted in this thread (an assert in the reader's would only end it)
    done = threading.Event()
    host, port = urlsplit(redis_url).hostname, urlsplit(redis_url).port
    with CountingProxy(host, port, on_command=hook) as proxy, \
            RedisSaver.from_conn_string(redis_url, prefix=prefix) as reader:
        def read() -> None:
            while not done.is_set():
                tid = hook.thread
                if tid in views:
                    got = _view(reader, tid)
                    if got not in ([], views[tid]):
                        partial.append(f"{tid}: {len(got)} of {len(views[tid])} checkpoints")
                    seen["whole" if got else "none"] += 1

        t = threading.Thread(target=read)
        t.start()
        try:
            res = _run(_proxy_url(proxy, redis_url), prefix, "import", str(path))
        finally:
            done.set()
            t.join()
        assert res.returncode == 0, res.stderr
        assert partial == []
        assert seen["none"] > 20 and seen["whole"] > 0, seen  # it did read threads being written
        for tid in tids:
            assert _view(reader, tid) == views[tid]


def _points(probe: Stopper, n: int, seed: int) -> list[int]:
    """Script calls to stop at: the first stage (it runs: a thread staged, nothing in it), the
    first put, a reveal (it runs: the thread is whole), then ``n`` seeded random ones."""
    stages, reveals = probe.steps[b"stage"], probe.steps[b"reveal"]
    rnd = random.Random(seed)
    fixed = [stages[0], stages[0] + 1, reveals[len(reveals) // 2]]
    return sorted({*fixed, *rnd.sample(range(stages[0] + 2, probe.calls), n)})


@pytest.mark.slow  # many processes of the tool, each stopped then run again
@pytest.mark.parametrize(("sig", "n"), [(signal.SIGKILL, 4), (signal.SIGINT, 1), (signal.SIGTERM, 0)],
                         ids=["kill", "int", "term"])
def test_import_stopped_anywhere_then_run_again(redis_url, exported, probe, sig, n):
    src, tids, views, path = exported
    host, port = urlsplit(redis_url).hostname, urlsplit(redis_url).port
    points = _points(probe, n, seed=int(sig))
    if sig != signal.SIGKILL:
        points = points[1:]  # Ctrl-C at the stage itself: as at the put after it
    for at in points:
        prefix = "dst" + uuid.uuid4().hex[:8]
        stop = Stopper(at, sig)
        with CountingProxy(host, port, on_command=stop) as proxy:
            res = _run(_proxy_url(proxy, redis_url), prefix, "import", str(path), stopper=stop)
        with RedisSaver.from_conn_string(redis_url, prefix=prefix) as dst:
            whole, hidden = _states(dst, dst.client, tids, views)
            assert res.returncode != 0, (at, res.stdout)
            if sig != signal.SIGKILL:
                assert res.returncode == 130 and "run the same command again" in res.stderr, (at, res.stderr)
                assert hidden == [], at  # the thread being written was removed
            elif at == probe.steps[b"stage"][0] or at == probe.steps[b"stage"][0] + 1:
                assert whole == [] and hidden == [tids[0]], at
            elif at in probe.steps[b"reveal"]:
                assert hidden == [] and len(whole) == probe.steps[b"reveal"].index(at) + 1, at
            assert len(whole) + len(hidden) < len(tids) or at in probe.steps[b"reveal"], at
            # the tool's own next step: the same command
            out = _cli(redis_url, prefix, "import", str(path)).stdout
            if whole:
                assert f"{len(whole)} thread(s) already complete" in out, (at, out)
            if hidden:
                assert f"{len(hidden)} thread(s) left unfinished by a stopped run" in out, (at, out)
            assert f"imported {len(tids) - len(whole)} thread(s)" in out, (at, out)
            for t in tids:
                assert _view(dst, t) == views[t], (at, t)
            # and again: nothing left to do
            assert f"{len(tids)} thread(s) already complete" in _cli(redis_url, prefix, "import", str(path)).stdout


def test_skip_existing_writes_an_unfinished_thread_again(redis_url, exported, probe):
    _, tids, views, path = exported
    host, port = urlsplit(redis_url).hostname, urlsplit(redis_url).port
    prefix = "dst" + uuid.uuid4().hex[:8]
    stop = Stopper(probe.steps[b"stage"][N_THREADS // 2] + 2)  # a put of a thread in the middle
    with CountingProxy(host, port, on_command=stop) as proxy:
        _run(_proxy_url(proxy, redis_url), prefix, "import", str(path), stopper=stop)
    with RedisSaver.from_conn_string(redis_url, prefix=prefix) as dst:
        whole, hidden = _states(dst, dst.client, tids, views)
        assert hidden == [tids[N_THREADS // 2]] and len(whole) == N_THREADS // 2
        # the unfinished thread does not read as existing: it is written again, whole
        out = _cli(redis_url, prefix, "import", str(path), "--skip-existing").stdout
        assert f"import {len(tids) - len(whole)} thread(s)" in out and "1 thread(s) left unfinished" in out
        for t in tids:
            assert _view(dst, t) == views[t], t


def test_import_after_a_lost_connection_then_run_again(redis_url, exported, probe):
    """The proxy closes every connection (and refuses new ones) at a put in the middle of a
    thread: the import fails on that thread, which no reader sees; the same command, on a
    working connection, writes it again whole and the threads after it."""
    _, tids, views, path = exported
    host, port = urlsplit(redis_url).hostname, urlsplit(redis_url).port
    prefix = "dst" + uuid.uuid4().hex[:8]
    stage = probe.steps[b"stage"][3]
    holder: list[CountingProxy] = []

    def cut(cmd: list[bytes]) -> None:
        counter(cmd)
        if counter.calls == stage + 3:
            threading.Thread(target=holder[0].close).start()

    counter = Stopper()
    with CountingProxy(host, port, on_command=cut) as proxy:
        holder.append(proxy)
        res = _run(_proxy_url(proxy, redis_url), prefix, "import", str(path))
    assert res.returncode == 1 and "run the same command again" in res.stderr.replace("\n", " "), res.stderr
    with RedisSaver.from_conn_string(redis_url, prefix=prefix) as dst:
        whole, hidden = _states(dst, dst.client, tids, views)
        assert whole == tids[:3] and hidden == [tids[3]], (whole, hidden)
        out = _cli(redis_url, prefix, "import", str(path)).stdout
        assert "3 thread(s) already complete" in out and "1 thread(s) left unfinished" in out, out
        for t in tids:
            assert _view(dst, t) == views[t], t


def _sqlite_source(path: Path) -> list[str]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        return _fill(SqliteSaver(conn), 8)
    finally:
        conn.close()


def _sqlite_views(path: Path, tids: list[str]) -> dict[str, list[Any]]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        s = SqliteSaver(conn)
        return {t: list(s.list({"configurable": {"thread_id": t}})) for t in tids}
    finally:
        conn.close()


@pytest.mark.slow  # many processes of the tool, each stopped then run again
def test_migrate_into_redis_stopped_anywhere_then_run_again(redis_url, tmp_path):
    pytest.importorskip("langgraph.checkpoint.sqlite", reason="migrate needs the 'migrate' extra")
    db = tmp_path / "src.db"
    tids = _sqlite_source(db)
    src = _sqlite_views(db, tids)
    host, port = urlsplit(redis_url).hostname, urlsplit(redis_url).port
    args = ("migrate", "--from", f"sqlite:///{db}")
    count = Stopper()
    with CountingProxy(host, port, on_command=count) as proxy:
        assert _run(_proxy_url(proxy, redis_url), "p" + uuid.uuid4().hex[:8], *args).returncode == 0
    for sig, at in [(signal.SIGKILL, a) for a in _points(count, 2, 7)] + [(signal.SIGINT, count.calls // 2)]:
        prefix = "dst" + uuid.uuid4().hex[:8]
        stop = Stopper(at, sig)
        with CountingProxy(host, port, on_command=stop) as proxy:
            res = _run(_proxy_url(proxy, redis_url), prefix, *args, stopper=stop)
        assert res.returncode != 0, (at, res.stdout)
        with RedisSaver.from_conn_string(redis_url, prefix=prefix) as dst:
            for t in tids:
                got = list(dst.list({"configurable": {"thread_id": t}}))
                assert not got or diff_threads(src[t], got) == [], (at, t)
            out = _cli(redis_url, prefix, *args).stdout
            assert "0 failed" in out, out
            for t in tids:
                assert diff_threads(src[t], list(dst.list({"configurable": {"thread_id": t}}))) == [], (at, t)


@pytest.mark.slow  # many processes of the tool, each stopped then run again
@pytest.mark.parametrize("target", ["sqlite", "postgres"])
def test_migrate_out_of_redis_stopped_anywhere_then_run_again(redis_url, exported, tmp_path, target, request):
    """Out of Redis, each thread is one transaction of the target: the process killed or
    interrupted right after any put (the thread's later checkpoints not written), the target
    holds whole threads only; the same command then completes them."""
    pytest.importorskip("langgraph.checkpoint.sqlite", reason="migrate needs the 'migrate' extra")
    src, tids, views, _ = exported
    total = sum(len(v) for v in views.values())
    first = len(views[tids[0]])
    rnd = random.Random(11)
    stops = [(signal.SIGKILL, 1), (signal.SIGKILL, first + 1), *((signal.SIGKILL, a) for a in rnd.sample(
        range(first + 2, total), 2)), (signal.SIGINT, first + 2), (signal.SIGTERM, rnd.randrange(2, total))]
    for n, (sig, at) in enumerate(stops):
        if target == "sqlite":
            url = f"sqlite:///{tmp_path}/out{n}.db"
        else:
            pytest.importorskip("langgraph.checkpoint.postgres", reason="migrate needs the 'migrate' extra")
            url = _fresh_pg_database(request.getfixturevalue("postgres_url"), f"out_{uuid.uuid4().hex[:8]}")
        res = subprocess.run(
            [sys.executable, "-m", "tests.cli._stop_at", str(at), sig.name, "--url", redis_url,
             "--prefix", src.prefix_name, "migrate", "--to", url],
            cwd=ROOT, capture_output=True, text=True, timeout=180, env={**os.environ, "COLUMNS": "200"},
        )
        assert res.returncode != 0, (at, res.stdout)
        if sig != signal.SIGKILL:
            assert res.returncode == 130 and "run the same command again" in res.stderr, (at, res.stderr)
        with _target(url) as dst:
            present = 0
            for t in tids:
                got = list(dst.list({"configurable": {"thread_id": t}}))
                present += bool(got)
                assert not got or diff_threads(list(src.list({"configurable": {"thread_id": t}})), got, None,
                                               padded_versions) == [], (at, t, len(got))
            assert present < len(tids), at
        out = _cli(redis_url, src.prefix_name, "migrate", "--to", url, "--verify").stdout
        assert f"{len(tids) - present} copied, {present} already copied, 0 failed" in out, out
        assert f"verify: {len(tids)} thread(s) identical" in out, out


def _target(url: str) -> Any:
    from redis_saver.cli._sources import open_target

    return open_target(url)


def _fresh_pg_database(base: str, name: str) -> str:
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return urlsplit(base)._replace(path="/" + name).geturl()
