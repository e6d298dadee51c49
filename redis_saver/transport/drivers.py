"""The two drivers: the only code that talks to Redis, and all it does is perform operations.

``SyncDriver`` serves ``redis.Redis`` and ``redis.cluster.RedisCluster`` (and Sentinel
``master_for`` clients); ``AsyncDriver`` serves their asyncio twins. Each runs an engine
generator (``core/engine.py``, where every decision lives) and performs the operations it yields:
a client method call, a pipeline (on the client, or on one connection to a cluster node), a
pause, a slot-map refresh, a key scan. An exception from the I/O is thrown back into the
generator, which decides what follows (EVAL after NOSCRIPT, a retry, or the caller's error).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Generator, Iterator, Sequence
from typing import Any, TypeVar

import redis
from redis.exceptions import AskError, ClusterDownError, MovedError, TryAgainError

from ..core import policy as _policy
from ..core import setup as _setup
from ..core.engine import (
    SCRIPT_COMMANDS,
    SLOT_MOVE_TIMEOUT,
    Cmd,
    Emit,
    Engine,
    Io,
    Op,
    Pipe,
    Refresh,
    Scan,
    Sleep,
    Targets,
)
from ..core.plans import Call
from ..core.scripts import Registry
from ..keys import KeySchema
from ..telemetry import Telemetry
from . import autopipe as _autopipe
from . import wire
from .cluster import (
    acluster_fcall,
    closed_as_lost,
    closed_by_client,
    cluster_fcall,
    refresh_pending,
    run_requested_refresh,
)

T = TypeVar("T")
_SCRIPT_NAMES = frozenset(SCRIPT_COMMANDS.values())


# A cluster pipeline of script calls goes as one plain pipeline per node, each command to the
# node of its first key (from redis-py's slot map): redis-py's ClusterPipeline asks a server
# for the keys of every FCALL (COMMAND GETKEYS, twice a call: a search over 16 store shards took
# 32 of them, 12.7 ms) and refuses EVALSHA. A command a node answers with a redirect (MOVED,
# ASK, TRYAGAIN, CLUSTERDOWN: the slot moved), or that a node lost its connection for, goes
# again through redis-py's ClusterPipeline, which follows it and fixes the slot map.
_AGAIN = (MovedError, AskError, TryAgainError, ClusterDownError, redis.ConnectionError)


def _script_fanout(commands: Sequence[tuple[Any, ...]]) -> bool:
    """Every command a script call with keys (its first key at position 3)."""
    return all(c[0] in _SCRIPT_NAMES and len(c) > 3 and int(c[2]) > 0 for c in commands)


def _by_node(client: Any, commands: Sequence[tuple[Any, ...]]) -> dict[str, tuple[Any, list[int]]]:
    groups: dict[str, tuple[Any, list[int]]] = {}
    for i, cmd in enumerate(commands):
        node = client.get_node_from_key(cmd[3])
        groups.setdefault(node.name, (node, []))[1].append(i)
    return groups


def _step(gen: Io[Any], reply: Any, error: Exception | None, end: list[Any]) -> Op | Emit | None:
    """What ``gen`` asks for next, given the reply to (or the error of) its last operation: an
    operation to perform, an Emit (items for the caller), or None when it has returned (its
    value appended to ``end``). The pump both drivers share; they differ only in performing."""
    try:
        return gen.send(reply) if error is None else gen.throw(error)
    except StopIteration as stop:
        end.append(stop.value)
        return None


class _Driver:
    def __init__(
        self,
        client: Any,
        keys: KeySchema | None,
        registry: Registry,
        retries: int = 0,
        telemetry: Telemetry | None = None,
        slot_move_timeout: float = SLOT_MOVE_TIMEOUT,
    ) -> None:
        self.client = client
        self.engine = Engine(
            keys,
            registry.plain() if type(client).__module__.startswith("fakeredis") else registry,  # it refuses #!lua
            retries,
            cluster=hasattr(client, "get_node_from_key"),
            telemetry=telemetry,
            slot_move_timeout=slot_move_timeout,
        )
        self.scripts = self.engine.scripts

    def set_eviction_check(self, mode: str, ttl: bool = False) -> None:
        self.engine.set_eviction_check(mode, ttl)


# Script calls of a plain ``redis.Redis`` go straight to a pooled connection: what
# ``Redis.execute_command`` does for them (take a connection, send, read, retry on the connection
# errors the client's ``Retry`` names, give the connection back) minus its per-command hooks,
# about 10 us of client CPU a call. The client's own path is kept where it does more than that:
# a subclass, a client bound to one connection, response callbacks for FCALL/EVAL/EVALSHA, and
# ``execute_command`` patched by an instrumentation (OpenTelemetry, ddtrace, Sentry: checked per
# call) or redis-py's own metrics turned on (checked when the saver is made).
_PLAIN_EXECUTE = redis.Redis.execute_command
# the commands sent that way: the script calls, and MGET (RedisCache's get)
DIRECT_COMMANDS = {**SCRIPT_COMMANDS, "mget": "MGET"}


def _direct_pool(client: Any) -> Any:
    """The pool a sync driver may take connections from for script calls, or None."""
    if type(client) is not redis.Redis or client.connection is not None:
        return None
    if hasattr(_PLAIN_EXECUTE, "__wrapped__") or any(c in client.response_callbacks for c in DIRECT_COMMANDS.values()):
        return None
    try:
        from redis.observability.recorder import _get_or_create_collector

        if _get_or_create_collector() is not None:
            return None
    except Exception:  # pragma: no cover - an older redis-py without observability
        pass
    return client.connection_pool


class SyncDriver(_Driver):
    def __init__(self, *args: Any, **kwargs: Any) -> None:  # _Driver's
        super().__init__(*args, **kwargs)
        self._pool = _direct_pool(self.client)

    def _script(self, command: str, args: Sequence[Any]) -> Any:
        pool = self._pool
        conn = pool.get_connection()
        try:
            # packed by hiredis in one call (redis-py's send_command checks every argument in Python
            # first: 6 -> 3 us for a put's FCALL)
            packed = wire.packed(conn, [(command, *args)])
            return conn.retry.call_with_retry(
                lambda: (conn.send_packed_command(packed), conn.read_response())[1],
                lambda _error: conn.disconnect(),
            )
        finally:
            marked = getattr(conn, "should_reconnect", None)  # redis-py >= 6: the server announced maintenance
            if marked is not None and marked():
                conn.disconnect()
            pool.release(conn)

    def _do(self, op: Op) -> Any:
        if isinstance(op, Cmd):
            if (
                self._pool is not None
                and op.name in DIRECT_COMMANDS
                and redis.Redis.execute_command is _PLAIN_EXECUTE
                and op.kwargs is None
            ):
                return self._script(DIRECT_COMMANDS[op.name], op.args)
            if op.name == "fcall" and self.engine.cluster:
                return cluster_fcall(self.client, op.args)
            if op.kwargs is None:
                return getattr(self.client, op.name)(*op.args)
            return getattr(self.client, op.name)(*op.args, **op.kwargs)
        if isinstance(op, Pipe):
            client = self.client
            if op.node_key is None and self.engine.cluster and _script_fanout(op.commands):
                return self._cluster_fanout(op.commands)
            if op.node_key is not None and self.engine.cluster:
                run_requested_refresh(client)
                client = client.get_redis_connection(client.get_node_from_key(op.node_key))
            pipe = client.pipeline(transaction=False)
            for cmd in op.commands:
                pipe.execute_command(*cmd)
            return pipe.execute(raise_on_error=False)
        if isinstance(op, Sleep):
            time.sleep(op.seconds)
            return None
        if isinstance(op, Refresh):
            return self.client.nodes_manager.initialize()
        if isinstance(op, Scan):
            return list(self.client.scan_iter(match=op.pattern, count=10_000))
        if isinstance(op, Targets):
            return _policy.targets(self.client)
        raise TypeError(f"unknown operation {op!r}")

    def _cluster_fanout(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """One plain pipeline per node, in turn (see _AGAIN for the commands sent again)."""
        run_requested_refresh(self.client)  # (redis-py 8.2 runs it before a command: _by_node reads the map)
        results: list[Any] = [None] * len(commands)
        for node, positions in _by_node(self.client, commands).values():
            pipe = self.client.get_redis_connection(node).pipeline(transaction=False)
            for i in positions:
                pipe.execute_command(*commands[i])
            try:
                replies = pipe.execute(raise_on_error=False)
            except redis.ConnectionError as exc:  # the node is gone: the cluster pipeline finds the new one
                replies = [exc] * len(positions)
            for i, r in zip(positions, replies, strict=True):
                results[i] = r
        again = [i for i, r in enumerate(results) if isinstance(r, _AGAIN)]
        if again:
            pipe = self.client.pipeline(transaction=False)
            for i in again:
                pipe.execute_command(*commands[i])
            for i, r in zip(again, pipe.execute(raise_on_error=False), strict=True):
                results[i] = r
        return results

    def _perform(self, op: Op) -> tuple[Any, Exception | None]:
        try:
            return self._do(op), None
        except Exception as exc:  # the engine decides: retry, EVAL, or the caller's error
            return None, exc

    def _advance(self, gen: Io[Any], end: list[Any]) -> list[Any] | None:
        """Perform ``gen``'s operations up to its next Emit (its items) or its end (None, and
        its value appended to ``end``)."""
        reply, error = None, None
        while (op := _step(gen, reply, error, end)) is not None and not isinstance(op, Emit):
            reply, error = self._perform(op)
        return None if op is None else op.items

    def _run(self, gen: Io[T]) -> T:
        end: list[Any] = []
        while self._advance(gen, end) is not None:
            pass  # items nobody asked for (run, not iterate)
        return end[0]  # type: ignore[no-any-return]

    def run(self, plan: Generator[Any, Any, T], op: str | None = None) -> T:
        return self._run(self.engine.drive(plan, op))

    def iterate(self, plan: Generator[Any, Any, Any], op: str | None = None) -> Iterator[Any]:
        gen = self.engine.drive(plan, op)
        end: list[Any] = []  # the plan's value: unused by iterate
        while (items := self._advance(gen, end)) is not None:
            yield from items

    def call(self, call: Call) -> Any:
        return self._run(self.engine.call(call))

    def batch(self, calls: Sequence[Call]) -> list[Any]:
        return self._run(self.engine.batch(calls))

    def setup(self) -> None:
        self._run(_setup.setup(self.engine))


class AsyncDriver(_Driver):
    router: _autopipe.Router | None = None  # auto-pipelining of script calls (autopipe.py), when on

    def set_auto_pipeline(self, on: bool) -> None:
        self.router = _autopipe.router_for(self.client) if on and _autopipe.supported(self.client) else None

    async def _do(self, op: Op) -> Any:
        if isinstance(op, Cmd):
            if self.router is not None and op.name in _autopipe.LANE_COMMANDS:
                return await self.router.call(op.name, tuple(op.args))
            if op.name == "fcall" and self.engine.cluster:
                return await acluster_fcall(self.client, op.args)
            if not self.engine.cluster:
                return await self._command(op)
            return await closed_as_lost(self._command(op))  # redis-py may close it under us: see cluster.py
        if isinstance(op, Pipe):
            if not self.engine.cluster:
                pipe = self.client.pipeline(transaction=False)
                for cmd in op.commands:
                    pipe.execute_command(*cmd)
                return await pipe.execute(raise_on_error=False)
            return await closed_as_lost(self._cluster_pipe(op))
        if isinstance(op, Sleep):
            await asyncio.sleep(op.seconds)
            return None
        if isinstance(op, Refresh):
            return await self.client.nodes_manager.initialize()
        if isinstance(op, Scan):
            return [k async for k in self.client.scan_iter(match=op.pattern, count=10_000)]
        if isinstance(op, Targets):
            return _policy.targets(self.client)
        raise TypeError(f"unknown operation {op!r}")

    async def _command(self, op: Cmd) -> Any:
        if op.kwargs is None:
            return await getattr(self.client, op.name)(*op.args)
        return await getattr(self.client, op.name)(*op.args, **op.kwargs)

    async def _cluster_pipe(self, op: Pipe) -> list[Any]:
        if op.node_key is None and _script_fanout(op.commands):
            return await self._cluster_fanout(op.commands)
        if op.node_key is not None:
            # one connection to the cluster node that serves the thread (WAIT counts its writes)
            from redis.asyncio.cluster import PipelineCommand

            node = self.client.get_node_from_key(op.node_key)
            cmds = [PipelineCommand(i, *cmd) for i, cmd in enumerate(op.commands)]
            await node.execute_pipeline(cmds)
            return [c.result for c in cmds]
        pipe = self.client.pipeline(transaction=False)
        for cmd in op.commands:
            pipe.execute_command(*cmd)
        return await pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]

    async def _cluster_fanout(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """One pipeline per node, all at once (see _AGAIN for the commands sent again). A command
        whose connection was closed under it (``closed_by_client``) is answered so, for the
        engine to send again."""
        from redis.asyncio.cluster import PipelineCommand

        if refresh_pending(self.client):  # redis-py refreshes its slot map before a command: _by_node reads it
            await self.client.initialize()
        results: list[Any] = [None] * len(commands)
        groups = list(_by_node(self.client, commands).values())
        per_node = [[PipelineCommand(i, *commands[i]) for i in positions] for _, positions in groups]
        done = await asyncio.gather(
            *[node.execute_pipeline(cmds) for (node, _), cmds in zip(groups, per_node, strict=True)],
            return_exceptions=True,
        )
        for cmds, outcome in zip(per_node, done, strict=True):
            if isinstance(outcome, BaseException):
                outcome = closed_by_client(outcome)
            if isinstance(outcome, BaseException) and not isinstance(outcome, redis.ConnectionError):
                raise outcome
            for c in cmds:  # a node that is gone: the cluster pipeline finds the new one
                results[c.position] = outcome if isinstance(outcome, BaseException) else c.result
        again = [i for i, r in enumerate(results) if isinstance(r, _AGAIN)]
        if again:
            pipe = self.client.pipeline(transaction=False)
            for i in again:
                pipe.execute_command(*commands[i])
            for i, r in zip(again, await pipe.execute(raise_on_error=False), strict=True):
                results[i] = closed_by_client(r) if isinstance(r, redis.ConnectionError) else r
        return results

    async def _advance(self, gen: Io[Any], end: list[Any]) -> list[Any] | None:
        """See SyncDriver._advance (here performing inline: a coroutine per operation costs ~0.3 us)."""
        reply, error = None, None
        while (op := _step(gen, reply, error, end)) is not None and not isinstance(op, Emit):
            try:
                reply, error = await self._do(op), None
            except Exception as exc:  # the engine decides: retry, EVAL, or the caller's error
                reply, error = None, exc
        return None if op is None else op.items

    async def _run(self, gen: Io[T]) -> T:
        end: list[Any] = []
        while await self._advance(gen, end) is not None:
            pass
        return end[0]  # type: ignore[no-any-return]

    async def run(self, plan: Generator[Any, Any, T], op: str | None = None) -> T:
        return await self._run(self.engine.drive(plan, op))

    async def iterate(self, plan: Generator[Any, Any, Any], op: str | None = None) -> AsyncIterator[Any]:
        gen = self.engine.drive(plan, op)
        end: list[Any] = []  # the plan's value: unused by iterate
        while (items := await self._advance(gen, end)) is not None:
            for item in items:
                yield item

    async def call(self, call: Call) -> Any:
        return await self._run(self.engine.call(call))

    async def batch(self, calls: Sequence[Call]) -> list[Any]:
        return await self._run(self.engine.batch(calls))

    async def setup(self) -> None:
        await self._run(_setup.setup(self.engine))
