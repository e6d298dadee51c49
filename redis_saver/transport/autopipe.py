"""Automatic pipelining of script calls for AsyncRedisSaver (its ``auto_pipeline`` option).

redis-py's asyncio client sends every command on its own: take a pooled connection, write,
wait for the reply, give the connection back. Here, as with ioredis' ``enableAutoPipelining``
or rueidis, the EVALSHA / FCALL calls that concurrent tasks issue in the same event-loop
iteration leave together, in one write on each of at most two connections per server (in a cluster,
per primary: the node that serves the thread's slot), and each reply goes back to the call it
answers.

A *lane* owns one connection to one server and one worker task that does all its I/O: it
writes every call queued so far in one write, then reads the replies in order, each
resolving the future of the call it answers (Redis answers one connection's commands in the
order they arrived). The calls are packed by hiredis, as redis-py's sync client packs them
(its asyncio client packs in Python, at about five times the cost), and on redis-py's own
connection classes the lane writes the socket and reads replies with the connection's hiredis
reader itself, without redis-py's per-command layers (``wire.direct()``). The
first call queued on an idle lane starts the worker, whose first step runs at the next
iteration of the loop, so every call queued in the same iteration leaves in that write. One
write is in flight at a time: the calls queued while its replies come back leave together
right after the last of them. (Writing after every reply instead settles, under load, into one
call per write: replies trickle in one by one, each wakes one caller, whose next call goes
alone, and the server answers it alone again.) Each server has ``LANES`` (two) lanes: a call
takes the first while it is idle, else the two in turn, so that while one lane's write runs on
the server the client serves the replies of the other (with one lane, the two take turns and
neither is ever fully busy; see ``LANES``). Hence:

- each call is still one round trip; at concurrency 1 it costs less than redis-py's own path
  (no pool round trip per command), and under concurrency the client spends about half the
  CPU per call (``bench/autopipeline.py``);
- a caller that is cancelled (or whose own timeout fires) only stops waiting: its command is
  dropped if not written yet, else its reply is read and thrown away, so the connection's
  reply stream stays in step for every other call;
- a reply that is an error (a script error, NOSCRIPT, OOM...) goes to its own call only: the
  engine then does its EVAL fallback, error mapping and retries per call, as without lanes;
- a socket timeout runs from each call's own write and fails that call only; the connection
  stays (a late reply is read and dropped) while another call still waits on it, and is
  replaced once none does (so a call queued behind a write to a server that hangs fails
  within twice the socket timeout: the rest of that write's, then its own);
- only a failure of the connection itself (reset, refused) fails the calls written on it and
  not answered yet (their replies are lost with it); calls not written yet go out on a new
  connection. A connection the client library closed under the lane (redis-py's asyncio cluster
  client closes every connection it holds on every 5th MOVED) fails them with
  ``ClientClosedConnection``, whatever redis-py's objects raised on it (an ``AttributeError`` of a
  connection whose streams are gone): the engine sends those calls again, as calls refused while
  a slot moves (every script is idempotent).

Not through a lane: a call of more than ``LARGE`` bytes, packed (the calls behind it
would wait for its bytes), WAIT (it blocks its connection for up to ``wait_timeout_ms``: the
script and its WAIT keep their own pooled connection), fan-out pipelines, scans and setup. In a
cluster, a call whose reply redirects (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) or whose connection
failed is sent again through redis-py's cluster path, which follows the redirect and
refreshes the slot map (every script is idempotent); while redis-py has a refresh pending,
calls take that path directly.

A lane keeps its connection between bursts and gives it back to its pool after ``IDLE``
seconds without calls. Lanes belong to the client (savers sharing a client share its lanes)
and to the running event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import (
    AskError,
    ClusterDownError,
    ConnectionError,
    MovedError,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.engine import SCRIPT_COMMANDS, ClientClosedConnection
from . import wire
from .cluster import acluster_fcall, closed_as_lost, closed_by_client, refresh_pending, request_refresh

# the commands lanes carry: the script calls, and MGET (AsyncRedisCache's get)
LANE_COMMANDS = {**SCRIPT_COMMANDS, "mget": "MGET"}

# a call whose arguments hold more bytes than this takes a pooled connection of its own (redis-py's
# path): in a lane, the calls queued behind it would wait while its bytes are written and its reply
# read (a chat turn of AsyncRedisSaver(compress=False) with 50 KB puts is ~2% slower through the
# lane); alone, such a call costs the same either way. Compressed puts stay far below it.
LARGE = 16 * 1024
# lanes per server (per primary in a cluster). A lane has one write in flight, so with one lane
# the client and the server take turns: the server runs a batch while the callers wait, then the
# callers build their next calls while the server waits (put + put_writes steps of 8 tasks:
# client 70% and server 30% busy, one core's worth of two). With two, one lane's batch runs on
# the server while the client serves the other's replies (~1.3x the steps/s of one lane at 8
# tasks, in an A/B of the two rules). Calls take the first lane while it is idle, so
# one call at a time is sent exactly as with one lane (alternating lanes cost put_writes ~2% of
# latency there); a pool too small to hold a connection between bursts (_hold()) gets one lane.
LANES = 2
IDLE = 1.0  # seconds without calls after which a lane gives its connection back
SMALL_POOL = 8  # a lane gives its connection back at once, not after IDLE, to a pool of fewer connections
_REDIRECTS = (MovedError, AskError, TryAgainError, ClusterDownError)


def supported(client: Any) -> bool:
    """A redis-py asyncio client (standalone, Sentinel ``master_for`` or cluster); not a fake."""
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

    return isinstance(client, (Redis, RedisCluster)) and not type(client).__module__.startswith("fakeredis")


def _closed_under(exc: BaseException, conn: Any) -> BaseException:
    """A lane's failure as its calls get it: an error that is neither the socket's nor Redis's
    means redis-py's connection object failed because the client closed it meanwhile (its reader
    or writer is gone), which is ClientClosedConnection; any other, as it is."""
    if isinstance(exc, Exception) and not isinstance(exc, (RedisError, OSError)):
        closed = ClientClosedConnection(
            f"the connection to {wire.peer(conn)} was closed by the client under a call ({type(exc).__name__}: {exc})"
        )
        closed.__cause__ = exc
        return closed
    return exc


def _copy(exc: BaseException) -> BaseException:
    """One instance per failed call (each caller's traceback is its own)."""
    if isinstance(exc, asyncio.CancelledError):
        err: BaseException = ConnectionError("the connection's worker task was cancelled")
    else:
        try:
            err = type(exc)(*exc.args)
        except Exception:  # an exception type with another constructor
            err = ConnectionError(str(exc))
    err.__cause__ = exc
    return err


class Lane:
    """One connection to one server, shared by every call to it (see the module docstring).

    Args:
        loop: the event loop the lane serves.
        acquire: coroutine function returning a connection (from the client's pool).
        release: gives a connection back to its pool.
        callbacks: the client's response callbacks (applied as redis-py does).
        node: the cluster node served (None: standalone).
        hold: seconds the connection is kept between bursts (0: given back at once).
    """

    __slots__ = (
        "_acquire", "_release", "callbacks", "conn", "hold", "idle", "loop", "node", "queue", "sent", "worker",
    )  # fmt: skip

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        acquire: Callable[[], Awaitable[Any]],
        release: Callable[[Any], Awaitable[None]],
        callbacks: dict[Any, Any],
        node: Any = None,
        hold: float = IDLE,
    ) -> None:
        self.loop = loop
        self._acquire = acquire
        self._release = release
        self.callbacks = callbacks
        self.node = node  # the cluster node served (None: standalone)
        self.hold = hold  # seconds the connection is kept without calls
        # not written yet: (command, its packed bytes or None, future)
        self.queue: list[tuple[tuple[Any, ...], bytes | None, asyncio.Future[Any]]] = []
        # written, reply not read yet: (command name, future, deadline of the reply or None)
        self.sent: deque[tuple[Any, asyncio.Future[Any], float | None]] = deque()
        self.conn: Any = None
        self.worker: asyncio.Task[None] | None = None
        self.idle: asyncio.TimerHandle | None = None

    def submit(self, command: tuple[Any, ...], packed: bytes | None = None) -> asyncio.Future[Any]:
        """Queue one command (``packed``: its bytes, when the caller packed it already); the
        future gets its reply (an error reply as its exception)."""
        fut = self.loop.create_future()
        self.queue.append((command, packed, fut))
        if self.worker is None:
            self.worker = self.loop.create_task(self._work())
        return fut

    async def _work(self) -> None:
        sent = self.sent
        loop = self.loop
        conn = None
        try:
            if self.idle is not None:
                self.idle.cancel()
                self.idle = None
            conn = self.conn
            try:
                if conn is None:
                    conn = self.conn = await self._acquire()  # connected, and checked by the pool
                elif conn.is_connected and await wire.stale(conn):
                    await conn.disconnect()  # the next write connects again
                timeout = conn.socket_timeout or None
                direct = wire.direct(conn)
            except BaseException as exc:
                # nothing was written: the calls waiting get the error (left queued, a failure
                # that recurs started the next worker at once, and so on without end)
                self._fail_queued(exc)
                raise
            expired = 0  # calls at the head of `sent` past their deadline: failed, replies still to skip
            while True:
                if self.queue and not sent:  # one write in flight: calls queued meanwhile go together
                    direct = await self._write_queued(conn, direct, timeout)
                if not sent:
                    if not self.hold and not self.queue:  # a small pool: the connection goes back now
                        self.conn = None
                        await self._release(conn)
                    return
                deadline = sent[expired][2]
                try:
                    if direct:
                        reply = await wire.read(conn, deadline, loop)
                    elif deadline is None:
                        reply = await conn.read_response(disconnect_on_error=False)
                    else:
                        # each call's own socket timeout, from its write: the reply may still come after
                        # it, so the connection stays (read_response would close it on its own timeout)
                        async with wire.timeout(deadline - loop.time()):
                            reply = await conn.read_response(timeout=math.inf, disconnect_on_error=False)
                except ResponseError as exc:  # an error reply: the call's own error
                    reply = exc
                except (asyncio.TimeoutError, RedisTimeoutError):
                    expired = await self._expire(conn, expired)
                    continue
                name, fut, _ = sent.popleft()
                if expired:
                    expired -= 1
                if not fut.done():  # else its caller was cancelled or timed out: the reply is dropped
                    self._deliver(name, fut, reply)
        except BaseException as exc:
            # the connection failed: the replies of the calls written on it are lost with it; calls
            # queued since go out on a new connection (the next worker)
            exc = _closed_under(exc, conn)
            while sent:
                fut = sent.popleft()[1]
                if not fut.done():
                    fut.set_exception(_copy(exc))
            if conn is not None and conn.is_connected:
                with contextlib.suppress(BaseException):
                    await conn.disconnect(nowait=True)
            if not isinstance(exc, Exception):  # cancelled (the loop is shutting down) or exiting
                self._fail_queued(exc)
                self.conn = None  # closed above; no task is started to give it back now
                raise
        finally:
            self.worker = None
            if self.queue:
                self.worker = loop.create_task(self._work())
            elif self.conn is not None and not loop.is_closed():
                if self.hold:
                    self.idle = loop.call_later(self.hold, self._on_idle)
                else:
                    self._on_idle()

    async def _write_queued(self, conn: Any, direct: bool, timeout: float | None) -> bool:
        """The queued calls (less those cancelled meanwhile, never sent) in one write, each added
        to ``sent`` with the deadline of its reply; returns whether the connection is still
        written directly (not after send_packed_command connected it again: its parser is new)."""
        batch, self.queue = self.queue, []
        sent, loop = self.sent, self.loop
        commands = []
        packs: list[bytes] | None = []
        deadline = None if timeout is None else loop.time() + timeout
        for command, packed, fut in batch:
            if not fut.done():  # a caller cancelled before the write: not sent at all
                commands.append(command)
                if packed is None:
                    packs = None
                elif packs is not None:
                    packs.append(packed)
                sent.append((command[0], fut, deadline))
        if not commands:
            return direct
        data = packs if packs is not None else wire.packed(conn, commands)
        # a health-check PING (redis-py, after health_check_interval idle) reads its own
        # reply: only when no reply of ours is still on the way
        alone = len(sent) == len(commands)
        if direct and conn.is_connected and not (
            alone and conn.health_check_interval and loop.time() > conn.next_health_check
        ):
            # send_packed_command's work when it has none to do but write
            writer = conn._writer
            writer.writelines(data)
            if writer.transport.get_write_buffer_size() > wire.DRAIN_OVER:
                await wire.drain(conn, writer)
            return True
        await conn.send_packed_command(data, check_health=alone)
        return wire.direct(conn)

    async def _expire(self, conn: Any, expired: int) -> int:
        """After a read timed out: the calls at the head of ``sent`` past their deadline fail (their
        replies, should they come, are read and dropped); returns how many such calls lead
        ``sent``. When no call is left waiting, the connection starts afresh."""
        sent = self.sent
        now = self.loop.time() + 0.001  # a timer may fire up to the clock's resolution early
        while expired < len(sent) and (sent[expired][2] or math.inf) <= now:
            fut = sent[expired][1]
            if not fut.done():
                fut.set_exception(RedisTimeoutError(f"Timeout reading from {wire.peer(conn)}"))
            expired += 1
        if expired == len(sent):  # no call is waiting on this connection: start afresh
            sent.clear()
            expired = 0
            await conn.disconnect(nowait=True)
        return expired

    def _deliver(self, name: Any, fut: asyncio.Future[Any], reply: Any) -> None:
        """A call's reply to its caller, through the client's response callback as redis-py applies it."""
        callback = self.callbacks.get(name)
        if callback is not None and not isinstance(reply, ResponseError):
            try:
                reply = callback(reply)
            except Exception as exc:  # the call's own error, as with redis-py
                reply = exc
        if isinstance(reply, Exception):
            fut.set_exception(reply)
        else:
            fut.set_result(reply)

    def _fail_queued(self, exc: BaseException) -> None:
        queued, self.queue = self.queue, []
        for _, _, fut in queued:
            if not fut.done():
                fut.set_exception(_copy(exc))

    def _on_idle(self) -> None:
        self.idle = None
        if self.worker is None and self.conn is not None:
            conn, self.conn = self.conn, None
            task: asyncio.Task[None] = self.loop.create_task(_released(self._release, conn))
            _background.add(task)
            task.add_done_callback(_background.discard)


_background: set[asyncio.Task[None]] = set()  # idle releases in flight (a task needs a reference)


async def _released(release: Callable[[Any], Awaitable[None]], conn: Any) -> None:
    await release(conn)


class Lanes(list[Lane]):
    """The lanes to one server (see ``LANES``): a call takes the first while it is idle (one call
    at a time never uses another), else the lanes in turn."""

    turn = 0

    def next(self) -> Lane:
        first = self[0]
        if len(self) == 1 or (first.worker is None and not first.queue):
            return first
        self.turn += 1
        return self[self.turn % len(self)]


def _lanes(make: Callable[[], Lane]) -> Lanes:
    first = make()
    return Lanes([first, *(make() for _ in range(LANES - 1))] if first.hold else [first])


class Router:
    """The lanes of one client on one event loop, and the choice of lane for each call."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.cluster = hasattr(client, "get_node_from_key")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.lanes: dict[Any, Lanes] = {}  # per server (None: standalone; a cluster node's name)
        get_encoder = getattr(client, "get_encoder", None)
        # calls are packed here, once, when hiredis packs as the client's connections would (their
        # size decides the lane; the lane writes the bytes)
        self.packs = get_encoder is not None and wire.hiredis_packs(get_encoder())

    def _lane(self, name: str, args: tuple[Any, ...]) -> Lane | None:
        loop = asyncio.get_running_loop()
        if loop is not self.loop:  # a new loop: the old lanes' connections belong to the old one
            self.loop, self.lanes = loop, {}
        if not self.cluster:
            lanes = self.lanes.get(None)
            if lanes is None:
                pool = self.client.connection_pool
                acquire, callbacks, hold = pool.get_connection, self.client.response_callbacks, _hold(pool)
                lanes = self.lanes[None] = _lanes(lambda: Lane(loop, acquire, pool.release, callbacks, hold=hold))
            return lanes.next()
        key = args[0] if name == "mget" else args[2] if args[1] else None  # a script's first key
        if not key or refresh_pending(self.client):
            return None  # no key to route by, or redis-py must refresh its slot map first
        try:
            node = self.client.get_node_from_key(key)
        except SlotNotCoveredError:
            return None
        lanes = self.lanes.get(node.name)
        if lanes is None or lanes[0].node is not node:  # a node object replaced by a slot-map refresh
            acquire, release, hold = wire.node_acquire(node), wire.node_release(node), _hold(node)
            lanes = self.lanes[node.name] = _lanes(
                lambda: Lane(loop, acquire, release, node.response_callbacks, node, hold)
            )
        return lanes.next()

    async def call(self, name: str, args: tuple[Any, ...]) -> Any:
        """``client.<name>(*args)`` (``name``: a key of ``LANE_COMMANDS``), through the call's lane, with the
        client's own retry policy, as redis-py would send it."""
        lane = self._lane(name, args)
        command = (LANE_COMMANDS[name], *args)
        if lane is None:
            return await self._unpiped(command)
        packed = None
        if self.packs:
            try:
                packed = wire.pack_command(command)
            except TypeError:  # an argument hiredis does not take: the lane packs it as redis-py would
                pass
        # (an EVAL's body, args[0], sent once after NOSCRIPT, is not counted)
        if packed is not None:
            size = len(packed) - len(args[0])
        else:
            size = sum([len(a) for a in args[2:] if isinstance(a, (bytes, str))])
        if size > LARGE:
            return await self._unpiped(command)  # alone: calls behind it in a lane would wait for its bytes
        if not self.cluster:
            retry = self.client.get_retry()
            if not wire.retries(retry):
                return await lane.submit(command, packed)
            # redis-py retries a command that failed with ConnectionError (and TimeoutError, by
            # default) after a backoff: the lane sends it again, on a new connection
            return await retry.call_with_retry(lambda: lane.submit(command, packed), _ignore)
        try:
            return await lane.submit(command, packed)
        except _REDIRECTS:
            pass  # redis-py's cluster path follows it (and fixes its slot map)
        except (ConnectionError, RedisTimeoutError) as exc:
            request_refresh(self.client, lane.node.name)  # as redis-py does: a command refreshes the slot map
            if not wire.retries(getattr(self.client, "retry", None)):
                err = closed_by_client(exc)  # (redis-py's aclose() on every 5th MOVED: see cluster.py)
                if err is exc:
                    raise
                raise err from exc
            # redis-py would retry after the refresh: its cluster path does
        return await self._unpiped(command)

    async def _unpiped(self, command: tuple[Any, ...]) -> Any:
        """A call through redis-py's own path (in a cluster, an FCALL to its key's node: see
        ``cluster.py``, whose ClientClosedConnection applies to every command here)."""
        if self.cluster and command[0] == "FCALL":
            return await acluster_fcall(self.client, command[1:])
        if not self.cluster:
            return await self.client.execute_command(*command)
        return await closed_as_lost(self.client.execute_command(*command))


async def _ignore(*_: Any) -> None:
    """``Retry.call_with_retry``'s failure handler: the lane has already dealt with the connection."""


def _hold(pool: Any) -> float:
    """How long a lane keeps its connection without calls: ``IDLE``, but not at all from a pool so
    small (or one that makes callers wait for a free connection) that the connection it holds
    would be missed by the saver's other commands (WAIT, fan-outs) or the application's."""
    from redis.asyncio import BlockingConnectionPool

    if isinstance(pool, BlockingConnectionPool) or getattr(pool, "max_connections", 0) < SMALL_POOL:
        return 0.0
    return IDLE


_routers: weakref.WeakKeyDictionary[Any, Router] = weakref.WeakKeyDictionary()


def router_for(client: Any) -> Router:
    """The client's router: savers on one client share its lanes."""
    try:
        router = _routers.get(client)
        if router is None:
            router = _routers[client] = Router(client)
    except TypeError:  # a client that cannot be weakly referenced: a router of its own
        router = Router(client)
    return router
