"""``FaultProxy``: a threaded TCP proxy on 127.0.0.1 in front of one server, with faults on demand.

    with FaultProxy(server.host, server.port) as proxy:      # clients connect to proxy.port
        proxy.freeze()      # forward nothing either way (new connections are accepted, then hang)
        proxy.thaw()
        proxy.reset_all()   # RST every open connection (SO_LINGER 0): ECONNRESET in the client
        proxy.cut_next()    # the next request reaches the server; its reply is swallowed and the
                            # client's connection is reset (the server did the work, the ack is lost)
        proxy.close_next()  # the next request is swallowed and the connection closed (FIN) unsent

It forwards bytes unchanged and knows nothing of RESP: "the next request" is the next chunk a
client sends (one command or one pipeline, as redis-py writes each in one go).
"""

from __future__ import annotations

import socket
import struct
import threading

from devkit.wire import accept_pairs, listen

__all__ = ["FaultProxy"]


class FaultProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()
        self._mode: str | None = None  # "cut" | "close": applies to the next request
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self.connections = 0
        self.faults = 0  # cut_next / close_next faults that fired
        self._closed = False
        self._listener = listen()
        self.host, self.port = self._listener.getsockname()[:2]
        threading.Thread(target=self._accept_loop, name="FaultProxy", daemon=True).start()

    # ---- faults
    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    def cut_next(self) -> None:
        self._mode = "cut"

    def close_next(self) -> None:
        self._mode = "close"

    def reset_all(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for client, upstream in pairs:
            _reset(client)
            _close(upstream)

    # ---- plumbing
    def _accept_loop(self) -> None:
        for client, upstream in accept_pairs(self._listener, self.target, lambda: self._closed):
            with self._lock:
                self.connections += 1
                self._pairs.append((client, upstream))
            swallow = threading.Event()  # set: the next reply is dropped and the client reset
            threading.Thread(target=self._requests, args=(client, upstream, swallow), daemon=True).start()
            threading.Thread(target=self._replies, args=(upstream, client, swallow), daemon=True).start()

    def _take_mode(self) -> str | None:
        with self._lock:
            mode, self._mode = self._mode, None
            if mode:
                self.faults += 1
            return mode

    def _requests(self, client: socket.socket, upstream: socket.socket, swallow: threading.Event) -> None:
        try:
            while data := client.recv(262144):
                self._flowing.wait()
                mode = self._take_mode()
                if mode == "close":
                    break
                if mode == "cut":  # the server does the work, _replies drops the reply
                    swallow.set()
                    upstream.sendall(data)
                    return
                upstream.sendall(data)
        except OSError:
            pass
        _close(client)
        _close(upstream)

    def _replies(self, upstream: socket.socket, client: socket.socket, swallow: threading.Event) -> None:
        try:
            while data := upstream.recv(262144):
                self._flowing.wait()
                if swallow.is_set():  # (its start is enough: the client gets RST instead)
                    _reset(client)
                    break
                client.sendall(data)
        except OSError:
            pass
        _close(client)
        _close(upstream)

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        for op in (lambda: self._listener.shutdown(socket.SHUT_RDWR), self._listener.close):
            try:
                op()
            except OSError:
                pass
        self.reset_all()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reset(s: socket.socket) -> None:
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    _close(s)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
