"""Run plans against a client: the only place that talks to Redis.

``SyncDriver`` serves ``redis.Redis`` and ``redis.cluster.RedisCluster``; ``AsyncDriver``
serves their asyncio twins. Both send a plan's ``Call`` as one EVALSHA and a list of calls
as one non-transactional pipeline (in a cluster, redis-py splits it by node). A NOSCRIPT reply
(the server lost its script cache: restart, failover to a replica that never loaded the
scripts, ``SCRIPT FLUSH``) is answered by sending that command again as EVAL of the script's
body, which cannot get NOSCRIPT (and caches the script again), so it never reaches the caller;
the hot path (EVALSHA succeeds) is unchanged.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from redis.exceptions import (
    AskError,
    ClusterDownError,
    ConnectionError,
    MovedError,
    NoScriptError,
    RedisError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from . import _policy
from ._plans import Call, IndexSlots, Out, Plan
from ._scripts import Script, load_all
from .errors import (
    LUA_ERROR_CLASSES,
    ReplicationTimeoutError,
    SchemaMismatchError,
    UnsupportedServerError,
)
from .keys import FORMAT_VERSION, READ_FORMATS, SLOTS, KeySchema

PIPELINE_CHUNK = 2000
# Cross-thread operations find the slot-index keys with SCAN while the keyspace is small,
# and query all 16384 slots (a fixed cost, independent of the number of threads) beyond.
SCAN_MAX_KEYS = 200_000
_SUFFIX = re.compile(r"\s*script: [0-9a-f]{40}, on @user_script:\d+\.?\s*$")


def map_error(exc: ResponseError) -> Exception:
    msg = str(exc)
    code = msg.split(" ", 1)[0]
    cls = LUA_ERROR_CLASSES.get(code)
    if cls is None:
        # fakeredis wraps script errors: "Error running script (...): ... RS_X msg"
        for c, k in LUA_ERROR_CLASSES.items():
            if c + " " in msg:
                code, cls = c, k
                msg = msg[msg.index(c) :]
                break
    if cls is None:
        return exc
    text = _SUFFIX.sub("", msg[len(code) :].strip())
    err = cls(text)
    err.__cause__ = exc
    return err


def _is_cluster(client: Any) -> bool:
    return hasattr(client, "get_node_from_key")


CLUSTER_ATTEMPTS = 3


def _redirected(reply: Any) -> bool:
    """A node's reply saying the slot is served elsewhere (or not at all) right now."""
    return isinstance(reply, (MovedError, AskError, TryAgainError, ClusterDownError))


def _check_acks(call: Call, acked: Any) -> None:
    assert call.wait is not None
    if isinstance(acked, Exception):
        raise acked
    if int(acked) < call.wait[0]:
        raise ReplicationTimeoutError(
            f"{call.script}: {acked} of {call.wait[0]} replicas acknowledged within {call.wait[1]} ms",
            int(acked),
        )


def _is_fake(client: Any) -> bool:
    return type(client).__module__.startswith("fakeredis")


def _backoff(attempt: int) -> float:
    return min(0.5, 0.05 * 2**attempt)


class _Base:
    # the maxmemory-policy check (_policy.py): the saver sets the mode; pending until it ran
    eviction_check = "off"
    _policy_pending = False

    def set_eviction_check(self, mode: str) -> None:
        self.eviction_check = _policy.check_mode(mode)
        self._policy_pending = mode != "off"

    def __init__(self, client: Any, keys: KeySchema, retries: int = 0) -> None:
        self.keys = keys
        self.retries = retries
        self.client = client
        scripts = dict(load_all())  # a copy: the loaded scripts are shared by every driver
        if _is_fake(client):
            scripts = {k: v.without_shebang() for k, v in scripts.items()}
        self.scripts: dict[str, Script] = scripts

    def _unsupported(self, exc: ResponseError) -> Exception:
        text = str(exc)
        if "near '#'" not in text and "shebang" not in text.lower():
            return exc  # e.g. NOPERM: not a server-version problem
        return UnsupportedServerError(
            "redis_saver needs Redis >= 7.0 or Valkey >= 7.2 (Lua scripts with #!lua flags); "
            f"loading its scripts failed: {exc}"
        )

    @staticmethod
    @staticmethod
    def _check_schema(keys: KeySchema, stored: Any) -> bool:
        """True when ``<prefix>:schema`` holds an older format this version reads (setup()
        then records FORMAT_VERSION: from then on a release that reads only the older format
        refuses the prefix); raises for a format it does not read."""
        if stored is None:
            return False
        fmt = stored.decode() if isinstance(stored, bytes) else str(stored)
        if fmt not in READ_FORMATS:
            raise SchemaMismatchError(
                f"keys under prefix {keys.prefix!r} use storage format {fmt!r}; this redis_saver "
                f"reads formats {', '.join(READ_FORMATS)} and writes {FORMAT_VERSION}: use another prefix"
            )
        return fmt != FORMAT_VERSION

    def _argv(self, call: Call) -> tuple[Script, list[Any]]:
        s = self.scripts[call.script]
        return s, [s.sha, len(call.keys), *call.keys, *call.args]

    def _evalsha(self, call: Call) -> tuple[Script, tuple[Any, ...]]:
        s, argv = self._argv(call)
        return s, ("EVALSHA", *argv)

    @staticmethod
    def _eval_argv(s: Script, argv: list[Any]) -> list[Any]:
        """``_argv``'s EVALSHA arguments for EVAL: the body (as loaded, shebang or not) for the sha."""
        return [s.source, *argv[1:]]

    @staticmethod
    def _resend(
        commands: Sequence[tuple[Script | None, tuple[Any, ...]]], res: list[Any], last: bool
    ) -> tuple[list[int], list[tuple[Any, ...]]]:
        """What to send again after a pipeline's NOSCRIPT replies: (positions, commands).

        Only the commands answered NOSCRIPT, as EVAL of the script body, plus the commands that
        are not scripts (WAIT) after the first of them: WAIT counts the replicas that caught up
        with the writes before it on the connection. Unless ``last``, only the first command of
        each script is sent as EVAL and the rest stay EVALSHA behind it (a fan-out of 2000 calls
        does not send 2000 bodies); the ``last`` round sends EVAL only, which cannot fail so.
        """
        positions: list[int] = []
        again: list[tuple[Any, ...]] = []
        evaled: set[str] = set()
        for i, ((script, cmd), r) in enumerate(zip(commands, res)):
            if script is None:
                if positions:
                    positions.append(i)
                    again.append(cmd)
            elif isinstance(r, NoScriptError):
                positions.append(i)
                if last or script.name not in evaled:
                    evaled.add(script.name)
                    again.append(("EVAL", script.source, *cmd[2:]))
                else:
                    again.append(cmd)
        return positions, again

    @staticmethod
    def _raise_first(res: list[Any]) -> list[Any]:
        for r in res:
            if isinstance(r, ResponseError):
                raise map_error(r) from None
            if isinstance(r, Exception):
                raise r
        return res

    @staticmethod
    def _chunks(calls: Sequence[Call]) -> list[Sequence[Call]]:
        return [calls[i : i + PIPELINE_CHUNK] for i in range(0, len(calls), PIPELINE_CHUNK)]


class SyncDriver(_Base):
    def call(self, call: Call) -> Any:
        if call.wait is not None:
            return self._call_and_wait(call)
        s, argv = self._argv(call)
        try:
            try:
                return self.client.evalsha(*argv)
            except NoScriptError:  # EVAL cannot get NOSCRIPT, even if the cache is flushed again
                return self.client.eval(*self._eval_argv(s, argv))
        except ResponseError as exc:
            raise map_error(exc) from None

    @staticmethod
    def _send(client: Any, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for cmd in commands:
            pipe.execute_command(*cmd)
        return pipe.execute(raise_on_error=False)

    def _pipeline(self, commands: Sequence[tuple[Script | None, tuple[Any, ...]]], client: Any = None) -> list[Any]:
        """One non-transactional pipeline; the commands answered NOSCRIPT go again (see ``_resend``)."""
        client = client or self.client  # in a cluster's WAIT path: the node that serves the thread
        res = self._send(client, [cmd for _, cmd in commands])
        for last in (False, True):
            positions, again = self._resend(commands, res, last)
            if not positions:
                break
            for i, r in zip(positions, self._send(client, again)):
                res[i] = r
        return res

    def _call_and_wait(self, call: Call) -> Any:
        # WAIT counts the replicas that caught up with the writes of *its own connection*,
        # so the script and WAIT go in one pipeline on one connection (one round trip); in
        # a cluster, on a connection to the primary that serves the thread's slot
        assert call.wait is not None
        commands = [self._evalsha(call), (None, ("WAIT", *call.wait))]
        if not _is_cluster(self.client):
            reply, acked = self._pipeline(commands)
        else:
            for attempt in range(CLUSTER_ATTEMPTS):
                try:
                    node = self.client.get_redis_connection(self.client.get_node_from_key(call.keys[0]))
                    reply, acked = self._pipeline(commands, node)
                except (ConnectionError, TimeoutError):
                    if attempt == CLUSTER_ATTEMPTS - 1:
                        raise
                    reply = None
                if reply is not None and not _redirected(reply):
                    break
                if attempt == CLUSTER_ATTEMPTS - 1:
                    break
                try:  # the node failed or the slot moved: refresh the slot map, try again
                    self.client.nodes_manager.initialize()
                except RedisError:
                    time.sleep(_backoff(attempt))
        self._raise_first([reply])
        _check_acks(call, acked)
        return reply


    def batch(self, calls: Sequence[Call]) -> list[Any]:
        out: list[Any] = []
        for chunk in self._chunks(calls):
            out.extend(self._raise_first(self._pipeline([self._evalsha(c) for c in chunk])))
        return out

    def setup(self, keys: KeySchema) -> None:
        for s in self.scripts.values():
            try:
                self.client.script_load(s.source)
            except ResponseError as exc:
                raise self._unsupported(exc) from None
        self.client.set(keys.schema_key(), FORMAT_VERSION, nx=True)
        if self._check_schema(keys, self.client.get(keys.schema_key())):
            self.client.set(keys.schema_key(), FORMAT_VERSION)
        if self._policy_pending:
            self.check_policy()

    def check_policy(self) -> None:
        """Once per saver: setup(), or right after its first call that succeeded (before it, with
        eviction_check="raise"); one round trip per primary. A server that cannot be reached is
        asked again at the next call."""
        self._policy_pending = False
        try:
            _policy.report(_policy.ask_sync(self.client), self.eviction_check)
        except _policy.UNREACHABLE:
            self._policy_pending = True  # asked again on the next call, which reports the error
        except UnsupportedServerError:
            self._policy_pending = True  # eviction_check="raise": every call refuses until fixed
            raise

    def index_slots(self) -> list[int]:
        if self.client.dbsize() > SCAN_MAX_KEYS:
            return list(range(SLOTS))
        found = {
            self.keys.slot_of_index_key(k)
            for k in self.client.scan_iter(match=self.keys.index_pattern(), count=10_000)
        }
        return sorted(found)

    def _step(self, step: Any) -> Any:
        if isinstance(step, IndexSlots):
            return self.index_slots()
        return self.batch(step) if isinstance(step, list) else self.call(step)

    def step(self, step: Any) -> Any:
        for attempt in range(self.retries + 1):
            try:
                return self._step(step)
            except ConnectionError:
                if attempt == self.retries:
                    raise
                time.sleep(_backoff(attempt))

    def run(self, plan: Plan) -> Any:
        if self._policy_pending and self.eviction_check == "raise":
            self.check_policy()  # refuse before the call; "warn" asks after a call succeeded
        reply = None
        while True:
            try:
                step = plan.send(reply)
            except StopIteration as stop:
                if self._policy_pending:
                    self.check_policy()
                return stop.value
            if step.__class__ is Call and not self.retries:
                reply = self.call(step)  # what step() does for it, without its layers
            else:
                reply = None if isinstance(step, Out) else self.step(step)

    def iterate(self, plan: Plan) -> Iterator[Any]:
        if self._policy_pending and self.eviction_check == "raise":
            self.check_policy()
        reply = None
        while True:
            try:
                step = plan.send(reply)
            except StopIteration:
                if self._policy_pending:
                    self.check_policy()
                return
            if isinstance(step, Out):
                if self._policy_pending:
                    self.check_policy()
                reply = None
                yield from step.items
            else:
                reply = self.step(step)


class AsyncDriver(_Base):
    async def call(self, call: Call) -> Any:
        if call.wait is not None:
            return await self._call_and_wait(call)
        s, argv = self._argv(call)
        try:
            try:
                return await self.client.evalsha(*argv)
            except NoScriptError:  # EVAL cannot get NOSCRIPT, even if the cache is flushed again
                return await self.client.eval(*self._eval_argv(s, argv))
        except ResponseError as exc:
            raise map_error(exc) from None

    async def _send(self, commands: Sequence[tuple[Any, ...]], node: Any = None) -> list[Any]:
        if node is not None:  # a cluster node (redis.asyncio.cluster.ClusterNode): one connection
            from redis.asyncio.cluster import PipelineCommand

            cmds = [PipelineCommand(i, *cmd) for i, cmd in enumerate(commands)]
            await node.execute_pipeline(cmds)
            return [c.result for c in cmds]
        pipe = self.client.pipeline(transaction=False)
        for cmd in commands:
            pipe.execute_command(*cmd)
        return await pipe.execute(raise_on_error=False)

    async def _pipeline(self, commands: Sequence[tuple[Script | None, tuple[Any, ...]]], node: Any = None) -> list[Any]:
        """See ``SyncDriver._pipeline``; ``node``: a cluster node to send it to."""
        res = await self._send([cmd for _, cmd in commands], node)
        for last in (False, True):
            positions, again = self._resend(commands, res, last)
            if not positions:
                break
            for i, r in zip(positions, await self._send(again, node)):
                res[i] = r
        return res

    async def _call_and_wait(self, call: Call) -> Any:
        assert call.wait is not None  # see SyncDriver._call_and_wait
        commands = [self._evalsha(call), (None, ("WAIT", *call.wait))]
        if not _is_cluster(self.client):
            reply, acked = await self._pipeline(commands)
        else:
            for attempt in range(CLUSTER_ATTEMPTS):
                try:
                    reply, acked = await self._node_pipeline(call, commands)
                except (ConnectionError, TimeoutError):
                    if attempt == CLUSTER_ATTEMPTS - 1:
                        raise
                    reply = None
                if reply is not None and not _redirected(reply):
                    break
                if attempt == CLUSTER_ATTEMPTS - 1:
                    break
                try:
                    await self.client.nodes_manager.initialize()
                except RedisError:
                    await asyncio.sleep(_backoff(attempt))
        self._raise_first([reply])
        _check_acks(call, acked)
        return reply

    async def _node_pipeline(self, call: Call, commands: Sequence[tuple[Script | None, tuple[Any, ...]]]) -> list[Any]:
        # on the node that serves the thread (a promoted replica may lack the scripts: EVAL there)
        return await self._pipeline(commands, self.client.get_node_from_key(call.keys[0]))

    async def batch(self, calls: Sequence[Call]) -> list[Any]:
        out: list[Any] = []
        for chunk in self._chunks(calls):
            out.extend(self._raise_first(await self._pipeline([self._evalsha(c) for c in chunk])))
        return out

    async def setup(self, keys: KeySchema) -> None:
        for s in self.scripts.values():
            try:
                await self.client.script_load(s.source)
            except ResponseError as exc:
                raise self._unsupported(exc) from None
        await self.client.set(keys.schema_key(), FORMAT_VERSION, nx=True)
        if self._check_schema(keys, await self.client.get(keys.schema_key())):
            await self.client.set(keys.schema_key(), FORMAT_VERSION)
        if self._policy_pending:
            await self.check_policy()

    async def check_policy(self) -> None:
        """See SyncDriver.check_policy (pending is cleared first: concurrent first calls ask once)."""
        self._policy_pending = False
        try:
            _policy.report(await _policy.ask_async(self.client), self.eviction_check)
        except _policy.UNREACHABLE:
            self._policy_pending = True
        except UnsupportedServerError:
            self._policy_pending = True
            raise

    async def index_slots(self) -> list[int]:
        if await self.client.dbsize() > SCAN_MAX_KEYS:
            return list(range(SLOTS))
        found = set()
        async for k in self.client.scan_iter(match=self.keys.index_pattern(), count=10_000):
            found.add(self.keys.slot_of_index_key(k))
        return sorted(found)

    async def _step(self, step: Any) -> Any:
        if isinstance(step, IndexSlots):
            return await self.index_slots()
        return await (self.batch(step) if isinstance(step, list) else self.call(step))

    async def step(self, step: Any) -> Any:
        for attempt in range(self.retries + 1):
            try:
                return await self._step(step)
            except ConnectionError:
                if attempt == self.retries:
                    raise
                await asyncio.sleep(_backoff(attempt))

    async def run(self, plan: Plan) -> Any:
        if self._policy_pending and self.eviction_check == "raise":
            await self.check_policy()  # see SyncDriver.run
        reply = None
        while True:
            try:
                step = plan.send(reply)
            except StopIteration as stop:
                if self._policy_pending:
                    await self.check_policy()
                return stop.value
            if step.__class__ is Call and not self.retries:
                reply = await self.call(step)  # what step() does for it, without its layers
            else:
                reply = None if isinstance(step, Out) else await self.step(step)

    async def iterate(self, plan: Plan) -> AsyncIterator[Any]:
        if self._policy_pending and self.eviction_check == "raise":
            await self.check_policy()
        reply = None
        while True:
            try:
                step = plan.send(reply)
            except StopIteration:
                if self._policy_pending:
                    await self.check_policy()
                return
            if isinstance(step, Out):
                if self._policy_pending:
                    await self.check_policy()
                reply = None
                for item in step.items:
                    yield item
            else:
                reply = await self.step(step)
