"""Count the commands a client really sends, measured on the wire.

``CountingProxy`` is a threaded TCP proxy on 127.0.0.1 that forwards bytes unchanged to a real server and
parses the client-to-server stream as RESP (multibulk arrays, plus inline commands) to record each command.

    with CountingProxy("127.0.0.1", 6379) as proxy:
        r = redis.Redis(port=proxy.port, **client_kwargs())
        r.set("a", 1)
        proxy.reset()                      # forget the connection handshake, if any
        r.get("a")
        assert proxy.names() == ["GET"]
        proxy.commands  # -> [[b"GET", b"a"]]   (all args, bytes)

Exactness: a command is recorded *before* its last byte is forwarded, so by the time the client has the
reply, the command is already in ``proxy.commands``. Pipelines (many commands per write), commands split
across reads and large payloads are handled by an incremental parser. Works for sync and asyncio clients
(the proxy runs in its own threads). Plain TCP only (no TLS); one target (not a cluster).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Iterator

__all__ = ["CountingProxy", "RespRequestParser", "SETUP_COMMANDS"]

# Commands redis-py sends when it opens a connection (not part of the operation being measured).
SETUP_COMMANDS = frozenset(
    {"HELLO", "AUTH", "SELECT", "CLIENT SETINFO", "CLIENT SETNAME", "CLIENT MAINT_NOTIFICATIONS", "READONLY"}
)


class RespRequestParser:
    """Incremental parser for client requests (RESP arrays of bulk strings, or inline commands)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes) -> list[list[bytes]]:
        self._buf += data
        out: list[list[bytes]] = []
        while True:
            cmd = self._parse_one()
            if cmd is None:
                break
            if cmd:
                out.append(cmd)
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        return out

    def _line(self, pos: int) -> tuple[bytes, int] | None:
        end = self._buf.find(b"\r\n", pos)
        if end < 0:
            return None
        return bytes(self._buf[pos:end]), end + 2

    def _parse_one(self) -> list[bytes] | None:
        pos = self._pos
        if pos >= len(self._buf):
            return None
        if self._buf[pos : pos + 1] != b"*":  # inline command: one line, space separated
            end = self._buf.find(b"\n", pos)
            if end < 0:
                return None
            self._pos = end + 1
            return bytes(self._buf[pos:end]).strip().split()
        got = self._line(pos + 1)
        if got is None:
            return None
        count_s, pos = got
        n = int(count_s)
        args: list[bytes] = []
        for _ in range(max(n, 0)):
            if pos >= len(self._buf):
                return None
            if self._buf[pos : pos + 1] != b"$":
                raise ValueError(f"unexpected RESP request byte {self._buf[pos:pos+1]!r}")
            got = self._line(pos + 1)
            if got is None:
                return None
            len_s, pos = got
            ln = int(len_s)
            if len(self._buf) < pos + ln + 2:
                return None
            args.append(bytes(self._buf[pos : pos + ln]))
            pos += ln + 2
        self._pos = pos
        return args


def _name(cmd: list[bytes]) -> str:
    first = cmd[0].decode(errors="replace").upper()
    two_word = ("CLIENT", "CONFIG", "SCRIPT", "CLUSTER", "FUNCTION", "OBJECT", "MEMORY", "XINFO", "XGROUP")
    if first in two_word and len(cmd) > 1:
        return f"{first} {cmd[1].decode(errors='replace').upper()}"
    return first


def listen(host: str = "127.0.0.1") -> socket.socket:
    """A listening TCP socket on a free port of ``host`` (its address: ``getsockname()``)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, 0))
    listener.listen(128)
    return listener


def accept_pair(listener: socket.socket, target: tuple[str, int]) -> tuple[socket.socket, socket.socket] | None:
    """The next client and a new connection of its own to ``target`` (both TCP_NODELAY); None
    when ``target`` refused (the client is closed); OSError once the listener is closed."""
    client, _ = listener.accept()
    try:
        upstream = socket.create_connection(target, timeout=5)
        upstream.settimeout(None)
    except OSError:
        client.close()
        return None
    for s in (client, upstream):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client, upstream


def accept_pairs(
    listener: socket.socket, target: tuple[str, int], stopped: Callable[[], bool]
) -> Iterator[tuple[socket.socket, socket.socket]]:
    """``accept_pair`` until ``stopped()`` or the listener is closed (refused targets skipped)."""
    while not stopped():
        try:
            pair = accept_pair(listener, target)
        except OSError:
            return
        if pair is not None:
            yield pair


class CountingProxy:
    """TCP proxy recording every command sent through it. ``port`` is where clients should connect."""

    def __init__(
        self,
        target_host: str = "127.0.0.1",
        target_port: int = 6379,
        listen_host: str = "127.0.0.1",
        on_command: Callable[[list[bytes]], None] | None = None,
    ):
        """``on_command``, if given, is called with each command (in the proxy's thread) after it
        is recorded and before its last bytes are forwarded: it may delay or stop the client."""
        self.target = (target_host, target_port)
        self.on_command = on_command
        self._lock = threading.Lock()
        self._commands: list[list[bytes]] = []
        self._conn_ids: list[int] = []
        self.connections = 0  # client connections accepted so far (not reset by reset())
        self._socks: set[socket.socket] = set()
        self._closed = False
        self._listener = listen(listen_host)
        self.host, self.port = self._listener.getsockname()[:2]
        self._thread = threading.Thread(target=self._accept_loop, name="CountingProxy", daemon=True)
        self._thread.start()

    # ---- results
    @property
    def commands(self) -> list[list[bytes]]:
        """Every command recorded since the last ``reset()``, in arrival order, as lists of bytes."""
        with self._lock:
            return [list(c) for c in self._commands]

    def names(self, include_setup: bool = False) -> list[str]:
        """Upper-case command names (``"CLIENT SETINFO"``-style for container commands).

        Connection-setup commands (``SETUP_COMMANDS``) are left out unless ``include_setup``.
        """
        out = [_name(c) for c in self.commands]
        return out if include_setup else [n for n in out if n not in SETUP_COMMANDS]

    def count(self, name: str | Iterable[str] | None = None, include_setup: bool = False) -> int:
        """Number of recorded commands (optionally only those named ``name`` / in ``name``)."""
        names = self.names(include_setup)
        if name is None:
            return len(names)
        wanted = {name.upper()} if isinstance(name, str) else {n.upper() for n in name}
        return sum(1 for n in names if n in wanted)

    def reset(self) -> None:
        with self._lock:
            self._commands.clear()
            self._conn_ids.clear()

    # ---- plumbing
    def _accept_loop(self) -> None:
        for client, upstream in accept_pairs(self._listener, self.target, lambda: self._closed):
            with self._lock:
                self.connections += 1
                conn_id = self.connections
                self._socks.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream, conn_id), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, None), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, conn_id: int | None) -> None:
        parser = RespRequestParser() if conn_id is not None else None
        try:
            while True:
                data = src.recv(262144)
                if not data:
                    break
                if parser is not None:
                    cmds = parser.feed(data)  # record before forwarding: the reply can't precede the record
                    if cmds:
                        with self._lock:
                            self._commands.extend(cmds)
                            self._conn_ids.extend([conn_id] * len(cmds))
                        if self.on_command is not None:
                            for cmd in cmds:
                                self.on_command(cmd)
                dst.sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept() on Linux
        except OSError:
            pass
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            socks = list(self._socks)
            self._socks.clear()
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def __enter__(self) -> CountingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
