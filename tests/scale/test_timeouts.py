"""A saver from ``from_conn_string`` fails a call in bounded time against a hung server.

Faults: a server paused with SIGSTOP (TCP still accepts, nothing answers; both an already-open
connection and a fresh one), and a listener that accepts but never answers. Each call runs in a
daemon thread joined with a hard limit, so a stalling saver fails the test quickly instead of hanging it.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import pytest
import redis

from devkit import workers as W
from devkit.servers import start_standalone
from redis_saver import RedisSaver

BOUND = 20.0  # seconds, with the from_conn_string defaults (socket_timeout 5, bounded retry)


def _timed(fn) -> tuple[float, BaseException | None, bool]:
    """Run fn in a daemon thread; (elapsed, exception, finished) after at most BOUND + 1 s."""
    box: dict = {}

    def run() -> None:
        t = time.monotonic()
        try:
            fn()
        except BaseException as e:  # noqa: BLE001
            box["exc"] = e
        box["t"] = time.monotonic() - t

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(BOUND + 1)
    return box.get("t", float("inf")), box.get("exc"), not th.is_alive()


@pytest.fixture
def paused_server():
    """A dedicated server (never the session one); ``pause()`` SIGSTOPs it; SIGCONT + kill at teardown."""
    s = start_standalone()
    paused = []

    def pause() -> None:
        os.kill(s.proc.pid, signal.SIGSTOP)
        paused.append(True)

    try:
        yield s, pause
    finally:
        if paused:
            os.kill(s.proc.pid, signal.SIGCONT)
        s.stop()


@pytest.fixture
def silent_port():
    """A port whose listener accepts TCP connections (kernel backlog) but never reads or answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def _assert_bounded(elapsed: float, exc: BaseException | None, finished: bool, bound: float = BOUND) -> None:
    assert finished, f"call still blocked after {BOUND + 1:.0f} s"
    assert isinstance(exc, (redis.exceptions.TimeoutError, redis.exceptions.ConnectionError)), repr(exc)
    assert elapsed < bound, f"failed only after {elapsed:.1f} s (bound {bound} s)"


@pytest.mark.parametrize("connection", ["open", "fresh"])
def test_paused_server_fails_fast_with_defaults(paused_server, prefix, connection):
    server, pause = paused_server
    with RedisSaver.from_conn_string(server.url, prefix=prefix) as saver:
        if connection == "open":
            assert saver.get_tuple(W.cfg("t")) is None  # the pool now holds a live connection
        pause()
        elapsed, exc, finished = _timed(lambda: saver.get_tuple(W.cfg("t")))
        if finished:
            _assert_bounded(elapsed, exc, finished)
        else:
            pytest.fail(f"get_tuple against a paused server still blocked after {BOUND + 1:.0f} s")


def test_silent_port_fails_fast_with_defaults(silent_port, prefix):
    with RedisSaver.from_conn_string(f"redis://127.0.0.1:{silent_port}/0", prefix=prefix) as saver:
        cp, md, nv = W.make_child(saver, {}, "t", 0)
        _assert_bounded(*_timed(lambda: saver.put(W.cfg("t"), cp, md, nv)))


def test_socket_timeout_is_configurable(paused_server, prefix):
    server, pause = paused_server
    with RedisSaver.from_conn_string(server.url, prefix=prefix, socket_timeout=0.3) as saver:
        assert saver.get_tuple(W.cfg("t")) is None  # open a connection first
        pause()
        elapsed, exc, finished = _timed(lambda: saver.get_tuple(W.cfg("t")))
        _assert_bounded(elapsed, exc, finished, bound=1.0)
        assert elapsed >= 0.25  # socket_timeout=0.3 was honoured (not an instant failure)


@pytest.fixture
def slamming_port():
    """A port that accepts every connection and closes it at once (ConnectionError); counts accepts."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    accepted = [0]

    def loop() -> None:
        while True:
            try:
                c, _ = sock.accept()
            except OSError:
                return
            accepted[0] += 1
            c.close()

    threading.Thread(target=loop, daemon=True).start()
    try:
        yield sock.getsockname()[1], accepted
    finally:
        sock.close()


@pytest.mark.parametrize("retries", [0, 2, None], ids=["retries0", "retries2", "default"])
def test_retries_kwarg_bounds_connection_attempts(slamming_port, prefix, retries):
    """``retries=N``: a ConnectionError is retried at most N times, i.e. N+1 connection attempts."""
    port, accepted = slamming_port
    kw = {} if retries is None else {"retries": retries}
    expected = 1 + (3 if retries is None else retries)  # default: 3 retries
    with RedisSaver.from_conn_string(f"redis://127.0.0.1:{port}/0", prefix=prefix, **kw) as saver:
        elapsed, exc, finished = _timed(lambda: saver.get_tuple(W.cfg("t")))
        _assert_bounded(elapsed, exc, finished, bound=5.0)
    assert accepted[0] == expected, f"retries={retries}: {accepted[0]} connection attempts, expected {expected}"
