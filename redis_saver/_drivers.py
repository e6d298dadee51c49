"""The two drivers: the only code that talks to Redis, and all it does is perform operations.

``SyncDriver`` serves ``redis.Redis`` and ``redis.cluster.RedisCluster`` (and Sentinel
``master_for`` clients); ``AsyncDriver`` serves their asyncio twins. Each runs an engine
generator (``_engine.py``, where every decision lives) and performs the operations it yields:
a client method call, a pipeline (on the client, or on one connection to a cluster node), a
pause, a slot-map refresh, a key scan. An exception from the I/O is thrown back into the
generator, which decides what follows (EVAL after NOSCRIPT, a retry, or the caller's error).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, TypeVar

import redis

from . import _autopipe, _policy
from ._cluster import acluster_fcall, cluster_fcall
from ._engine import SCRIPT_COMMANDS, Cmd, Emit, Engine, Io, Op, Pipe, Refresh, Scan, Sleep, Targets
from ._plans import Call, Plan
from ._telemetry import Telemetry
from .keys import KeySchema

T = TypeVar("T")


class _Driver:
    def __init__(
        self,
        client: Any,
        keys: KeySchema,
        retries: int = 0,
        telemetry: Telemetry | None = None,
        functions: bool = True,
    ) -> None:
        self.client = client
        self.engine = Engine(
            keys,
            retries,
            cluster=hasattr(client, "get_node_from_key"),
            plain_scripts=type(client).__module__.startswith("fakeredis"),  # it refuses #!lua lines
            telemetry=telemetry,
            functions=functions,
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


def _direct_pool(client: Any) -> Any:
    """The pool a sync driver may take connections from for script calls, or None."""
    if type(client) is not redis.Redis or client.connection is not None:
        return None
    if hasattr(_PLAIN_EXECUTE, "__wrapped__") or any(c in client.response_callbacks for c in SCRIPT_COMMANDS.values()):
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
            packed = _autopipe._packed(conn, [(command, *args)])
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
                and op.name in SCRIPT_COMMANDS
                and redis.Redis.execute_command is _PLAIN_EXECUTE
                and op.kwargs is None
            ):
                return self._script(SCRIPT_COMMANDS[op.name], op.args)
            if op.name == "fcall" and self.engine.cluster:
                return cluster_fcall(self.client, op.args)
            if op.kwargs is None:
                return getattr(self.client, op.name)(*op.args)
            return getattr(self.client, op.name)(*op.args, **op.kwargs)
        if isinstance(op, Pipe):
            client = self.client
            if op.node_key is not None:
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

    def _advance(self, gen: Io[Any], end: list[Any]) -> list[Any] | None:
        """Perform ``gen``'s operations up to its next Emit (its items) or its end (None, and
        its value appended to ``end``)."""
        reply: Any = None
        error: Exception | None = None
        while True:
            try:
                op = gen.send(reply) if error is None else gen.throw(error)
            except StopIteration as stop:
                end.append(stop.value)
                return None
            if isinstance(op, Emit):
                return op.items
            error = reply = None
            try:
                reply = self._do(op)
            except Exception as exc:  # the engine decides: retry, EVAL, or the caller's error
                error = exc

    def _run(self, gen: Io[T]) -> T:
        end: list[Any] = []
        while self._advance(gen, end) is not None:
            pass  # items nobody asked for (run, not iterate)
        return end[0]  # type: ignore[no-any-return]

    def run(self, plan: Plan[T], op: str | None = None) -> T:
        return self._run(self.engine.drive(plan, op))

    def iterate(self, plan: Plan[Any], op: str | None = None) -> Iterator[Any]:
        gen = self.engine.drive(plan, op)
        end: list[Any] = []  # the plan's value: unused by iterate
        while (items := self._advance(gen, end)) is not None:
            yield from items

    def call(self, call: Call) -> Any:
        return self._run(self.engine.call(call))

    def batch(self, calls: Sequence[Call]) -> list[Any]:
        return self._run(self.engine.batch(calls))

    def setup(self) -> None:
        self._run(self.engine.setup())


class AsyncDriver(_Driver):
    router: _autopipe.Router | None = None  # auto-pipelining of script calls (_autopipe.py), when on

    def set_auto_pipeline(self, on: bool) -> None:
        self.router = _autopipe.router_for(self.client) if on and _autopipe.supported(self.client) else None

    async def _do(self, op: Op) -> Any:
        if isinstance(op, Cmd):
            if self.router is not None and op.name in SCRIPT_COMMANDS:
                return await self.router.call(op.name, tuple(op.args))
            if op.name == "fcall" and self.engine.cluster:
                return await acluster_fcall(self.client, op.args)
            if op.kwargs is None:
                return await getattr(self.client, op.name)(*op.args)
            return await getattr(self.client, op.name)(*op.args, **op.kwargs)
        if isinstance(op, Pipe):
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
            return await pipe.execute(raise_on_error=False)
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

    async def _advance(self, gen: Io[Any], end: list[Any]) -> list[Any] | None:
        """See SyncDriver._advance."""
        reply: Any = None
        error: Exception | None = None
        while True:
            try:
                op = gen.send(reply) if error is None else gen.throw(error)
            except StopIteration as stop:
                end.append(stop.value)
                return None
            if isinstance(op, Emit):
                return op.items
            error = reply = None
            try:
                reply = await self._do(op)
            except Exception as exc:  # the engine decides: retry, EVAL, or the caller's error
                error = exc

    async def _run(self, gen: Io[T]) -> T:
        end: list[Any] = []
        while await self._advance(gen, end) is not None:
            pass
        return end[0]  # type: ignore[no-any-return]

    async def run(self, plan: Plan[T], op: str | None = None) -> T:
        return await self._run(self.engine.drive(plan, op))

    async def iterate(self, plan: Plan[Any], op: str | None = None) -> AsyncIterator[Any]:
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
        await self._run(self.engine.setup())
