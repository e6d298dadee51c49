"""What a lane (``autopipe.py``) does to a redis-py asyncio connection itself, written apart from
the lanes' logic because it leans on redis-py's internals: packing calls with hiredis, the check of
a connection held between bursts, the direct write and read of a connection's socket with its own
hiredis reader (``direct()``), and taking connections from a pool or a cluster node. A redis-py
release that changes those internals changes this file; the lanes stay as they are."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import ConnectionError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.engine import ClientClosedConnection

try:
    from hiredis import pack_command as pack_command  # (re-exported: autopipe packs with it)
except ImportError:  # pragma: no cover - redis without the hiredis extra
    pack_command = None  # type: ignore[assignment]

try:  # what a lane needs to read and write a connection itself (see direct())
    from redis._parsers.hiredis import NOT_ENOUGH_DATA as _NOT_ENOUGH_DATA
    from redis._parsers.hiredis import _AsyncHiredisParser
    from redis._parsers.socket import SERVER_CLOSED_CONNECTION_ERROR as SERVER_CLOSED
    from redis.asyncio.connection import AbstractConnection as _AbstractConnection
except ImportError:  # pragma: no cover - an older redis-py, or no hiredis: redis-py's methods
    _AsyncHiredisParser = None  # type: ignore[assignment, misc]

if sys.version_info >= (3, 11, 3):  # as redis-py: asyncio.timeout before 3.11.3 mishandles cancellation
    from asyncio import timeout as timeout  # type: ignore[attr-defined, unused-ignore]
else:  # a redis-py dependency on these versions
    from async_timeout import timeout as timeout  # type: ignore[import-not-found, no-redef, unused-ignore]


async def stale(conn: Any) -> bool:
    """A connection held since the lane's last burst that must not be written to as it is: the
    server closed it (idle ``timeout``, restart, ``CLIENT KILL``), it has unread data, or redis-py
    marked it for reconnection (failover); the check the pool makes when it hands one out."""
    marked = getattr(conn, "should_reconnect", None)
    if marked is not None and marked():
        return True
    check = getattr(conn, "can_read", None) or conn.can_read_destructive  # (7.4.1 asyncio: the latter only)
    try:
        return bool(await check())
    except (ConnectionError, RedisTimeoutError, OSError):
        return True


def packed(conn: Any, commands: list[tuple[Any, ...]]) -> list[bytes]:
    """``conn.pack_commands(commands)``, by hiredis' C packer when the connection encodes as it
    does (UTF-8, strict errors), as redis-py's sync connections do: its asyncio connection packs
    in Python, argument by argument (a timeit of the benchmark's call shapes: a put 37 -> 7 us,
    a get_tuple 22 -> 4 us); its sync one checks each argument in Python first (a put 6 -> 3 us;
    the sync driver's direct path packs here too). Script commands only (no command name to
    split)."""
    if hiredis_packs(getattr(conn, "encoder", None)):
        try:
            return [b"".join([pack_command(c) for c in commands])]
        except TypeError:  # an argument hiredis does not take: redis-py's packer says what is wrong
            pass
    packed: list[bytes] = conn.pack_commands(commands)
    return packed


def hiredis_packs(enc: Any) -> bool:
    """Whether hiredis' packer encodes as redis-py's ``enc`` does (UTF-8, strict errors)."""
    return (
        pack_command is not None
        and enc is not None
        and enc.encoding_errors == "strict"
        and enc.encoding.lower().replace("-", "").replace("_", "") == "utf8"
    )


def peer(conn: Any) -> str:
    host, port = getattr(conn, "host", None), getattr(conn, "port", None)
    return f"{host}:{port}" if host is not None else str(getattr(conn, "path", "the server"))


_DIRECT: dict[type, bool] = {}


def direct(conn: Any) -> bool:
    """Whether a lane writes ``conn``'s stream and reads its replies with the connection's own
    hiredis reader itself, rather than through ``send_packed_command`` / ``read_response``.

    Those two cost ~20 us of CPU a call in redis-py's layers (a task per write with a socket
    timeout; a timeout context, a parser call and its checks per reply): about as much as the
    rest of a lane's work. The lane does what they do for a connection of redis-py's own classes
    with the hiredis parser, and nothing else: connect when disconnected (and PING when the
    health check is due), write, read into the same hiredis reader (so redis-py's state stays as
    its own reads would leave it), hand RESP3 push messages to the parser's handler, raise what
    they raise, and move the health-check deadline. A subclass that changes either (Sentinel's
    connections turn READONLY into a ConnectionError) or another parser keeps redis-py's
    methods."""
    parser = getattr(conn, "_parser", None)
    if _AsyncHiredisParser is None or type(parser) is not _AsyncHiredisParser:
        return False
    if not all(hasattr(parser, a) for a in ("_reader", "_stream", "_read_size")):  # another redis-py's
        return False
    if str(getattr(conn, "protocol", 2)) not in ("2", "3", "None"):
        return False
    kind = type(conn)
    ok = _DIRECT.get(kind)
    if ok is None:
        # a method redis-py lacks (_read_response_from_parser: not in 8.0) is one no subclass changed
        ok = _DIRECT[kind] = all(
            getattr(kind, name, None) is getattr(_AbstractConnection, name, None)
            for name in ("read_response", "send_packed_command", "_read_response_from_parser")
        )
    return ok


def _closed_here(conn: Any) -> ClientClosedConnection:
    return ClientClosedConnection(f"the connection to {peer(conn)} was closed by the client while a call waited")


async def _fill(conn: Any) -> Any:
    """The next reply, reading the socket until the reader holds one (the hiredis parser's
    ``read_response``, as redis-py's connection calls it, with its errors). A connection that
    the client closed meanwhile (``disconnect()`` tells the parser) is ClientClosedConnection:
    the server did not close it."""
    parser = conn._parser
    reader, stream = parser._reader, parser._stream
    if not getattr(parser, "_connected", True):
        raise _closed_here(conn)
    try:
        while True:
            data = await stream.read(parser._read_size)
            if not data:
                if not getattr(parser, "_connected", True):
                    raise _closed_here(conn)
                raise ConnectionError(SERVER_CLOSED)
            reader.feed(data)
            reply = reader.gets()
            if reply is not _NOT_ENOUGH_DATA:
                return reply
    except OSError as e:
        raise ConnectionError(f"Error while reading from {peer(conn)} : {e.args}") from None


async def read(conn: Any, deadline: float | None, loop: asyncio.AbstractEventLoop) -> Any:
    """The next reply on a ``direct`` connection, as ``read_response`` would give it (an error
    reply raised); a reply already read off the socket (most of a batch's) is taken without
    waiting, so no timeout is armed for it. ``deadline``: the loop time the socket timeout ends."""
    parser = conn._parser
    reply = parser._reader.gets()
    while True:
        if reply is _NOT_ENOUGH_DATA:
            if deadline is None:
                reply = await _fill(conn)
            else:
                async with timeout(deadline - loop.time()):
                    reply = await _fill(conn)
        push = getattr(parser, "_hiredis_PushNotificationType", None)
        if push is None or not isinstance(reply, push):
            break
        # RESP3: a push message (a client-side cache invalidation, a maintenance notice) goes to
        # redis-py's handler, as its own read would send it
        await parser.handle_push_response(reply)
        reply = parser._reader.gets()
    if isinstance(reply, ConnectionError):  # as the parser: e.g. LOADING
        raise reply
    if isinstance(reply, list) and reply and isinstance(reply[0], ConnectionError):
        raise reply[0]
    if conn.health_check_interval:
        conn.next_health_check = loop.time() + conn.health_check_interval
    if isinstance(reply, ResponseError):
        raise reply
    return reply


DRAIN_OVER = 64 * 1024  # a direct write waits for the socket once this much is buffered (asyncio's high-water mark)


async def drain(conn: Any, writer: Any) -> None:
    """``send_packed_command``'s wait for the socket to take a write, with its errors."""
    try:
        if conn.socket_timeout:
            async with timeout(conn.socket_timeout):
                await writer.drain()
        else:
            await writer.drain()
    except asyncio.TimeoutError:
        await conn.disconnect(nowait=True)
        raise RedisTimeoutError("Timeout writing to socket") from None
    except OSError as e:
        await conn.disconnect(nowait=True)
        raise ConnectionError(f"Error while writing to {peer(conn)}: {e.args}") from e


def retries(retry: Any) -> int:
    """How many times a redis-py ``Retry`` retries (None: no retry)."""
    if retry is None:
        return 0
    return int(retry.get_retries())


def node_acquire(node: Any) -> Callable[[], Awaitable[Any]]:
    async def acquire() -> Any:
        return node.acquire_connection()

    return acquire


def node_release(node: Any) -> Callable[[Any], Awaitable[None]]:
    async def release(conn: Any) -> None:
        node.release(conn)

    return release
