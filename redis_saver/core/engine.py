"""Every decision about talking to Redis, without doing any I/O (sans-IO).

The engine runs a plan (``plans.py``) and turns its steps into *operations* (``ops.py``): a client method
call (``Cmd``), a pipeline (``Pipe``), a pause (``Sleep``), a cluster slot-map refresh
(``Refresh``), a key scan (``Scan``), the nodes to ask about the memory policy (``Targets``),
or items for the caller (``Emit``). It yields each operation and is sent its result, or thrown
the exception the I/O raised, exactly like a plan. Its generators decide everything else: the
EVAL fallback after NOSCRIPT, pipelining and chunking of fan-outs, the WAIT follow-up and its
cluster retry, retries on ConnectionError, waiting out a cluster slot that is moving
(``moving.py``), the index-slot search and when the maxmemory-policy check runs (what runs
once, setup() and that check, is ``setup.py``'s).
``transport/drivers.py`` has the two drivers (sync and asyncio) that only perform operations,
so nothing here is written twice.

A NOSCRIPT reply (the server lost its script cache: restart, failover to a replica that never
loaded the scripts, ``SCRIPT FLUSH``) is answered by sending that command again as EVAL of the
script's body, which cannot get NOSCRIPT (and caches the script again), so it never reaches
the caller; the hot path (EVALSHA succeeds) costs nothing more.

By default the scripts run as one Redis function library instead (``_scripts.library()``:
FCALL, the library loaded once per server with FUNCTION LOAD): the same code, without
re-creating its helpers on every call. A call answered "Function not found" (a server that never
loaded it, a restart without persistence, FUNCTION FLUSH) loads the library and is sent again;
where FUNCTION LOAD is refused (an ACL without it, a managed service that forbids it) the
engine goes on with EVALSHA, as with ``functions=False``. A pipelined command answered so goes
again as EVAL of its script's body, as after NOSCRIPT.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from functools import partial
from typing import Any, NoReturn, TypeVar

from redis.exceptions import (
    AskError,
    ClusterDownError,
    ConnectionError,
    MovedError,
    NoPermissionError,
    NoScriptError,
    RedisError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from ..errors import (
    LUA_ERROR_CLASSES,
    DamagedThreadError,
    ReplicationTimeoutError,
)
from ..keys import SLOTS, KeySchema
from ..telemetry import Recording, Telemetry
from . import policy as _policy
from . import setup as _setup
from .moving import SLOT_MOVE_TIMEOUT as SLOT_MOVE_TIMEOUT  # (these re-exported: the drivers and lanes)
from .moving import SLOT_MOVING, SlotWaits, key_of, moving_reply
from .moving import ClientClosedConnection as ClientClosedConnection
from .ops import Cmd as Cmd
from .ops import Emit as Emit
from .ops import Io as Io
from .ops import Op as Op
from .ops import Pipe as Pipe
from .ops import Refresh as Refresh
from .ops import Scan as Scan
from .ops import Sleep as Sleep
from .ops import Targets as Targets
from .plans import Call, IndexSlots, LoadScripts, Out
from .policy import logger
from .scripts import Library, Registry, Script, where

T = TypeVar("T")

PIPELINE_CHUNK = 2000  # calls per pipeline of a fan-out
# Cross-thread operations find the slot-index keys with SCAN while the keyspace is small,
# and query all 16384 slots (a fixed cost, independent of the number of threads) beyond.
SCAN_MAX_KEYS = 200_000
CLUSTER_ATTEMPTS = 3  # the WAIT pipeline on the node that serves a thread: tries in all
# the Cmd names of script calls -> their commands (the sync driver's direct path and
# AsyncRedisSaver's lanes send these themselves)
SCRIPT_COMMANDS = {"fcall": "FCALL", "evalsha": "EVALSHA", "eval": "EVAL"}


# ---- errors and replies ----------------------------------------------------------------
def map_error(exc: ResponseError) -> Exception:
    """The saver's own error for a script's ``RS_<CODE>`` reply, else ``exc`` itself."""
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
    return cls(where(msg[len(code) :].strip()))  # the file and line Redis ran


def raise_mapped(exc: ResponseError) -> NoReturn:
    """Raise the saver's own error for ``exc`` with ``exc`` as its cause (``raise ... from None``
    would drop it), or ``exc`` itself."""
    err = map_error(exc)
    if err is exc:
        raise exc
    raise err from exc


def _redirected(reply: Any) -> bool:
    """A node's reply saying the slot is served elsewhere (or not at all) right now."""
    return isinstance(reply, (MovedError, AskError, TryAgainError, ClusterDownError))


def _raise_first(res: list[Any]) -> list[Any]:
    for r in res:
        if isinstance(r, ResponseError):
            raise_mapped(r)
        if isinstance(r, Exception):
            raise r
    return res


def _check_acks(call: Call, acked: Any) -> None:
    assert call.wait is not None
    if isinstance(acked, Exception):
        raise acked
    if int(acked) < call.wait[0]:
        raise ReplicationTimeoutError(
            f"{call.script}: {acked} of {call.wait[0]} replicas acknowledged within {call.wait[1]} ms",
            int(acked),
        )


def _plain_size(op: Cmd | Pipe | Scan) -> int:
    """The bytes of a plain command's keys (as a script call's arguments are counted)."""
    if isinstance(op, Cmd):
        return sum(len(k) for k in op.args)
    if isinstance(op, Pipe):
        return sum(len(a) for cmd in op.commands for a in cmd[1:])
    return len(op.pattern)


def backoff(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (0-based) of a call that failed to connect."""
    return min(0.5, 0.05 * 2.0**attempt)


Command = tuple[Script | None, tuple[Any, ...]]  # a pipelined command, with its script if any


def _function_missing(reply: Any) -> bool:
    """FCALL's reply when the server does not hold the library (never loaded, FUNCTION FLUSH)."""
    return isinstance(reply, ResponseError) and str(reply).startswith("Function not found")


def _fcall_denied(reply: Any) -> bool:
    """FCALL's reply when ACL denies it (e.g. a user set up for an earlier release's EVALSHA),
    or the server does not know it (Redis < 7, a proxy that does not pass it)."""
    if not isinstance(reply, ResponseError):
        return False
    text = str(reply).lower()
    return "fcall" in text and (isinstance(reply, NoPermissionError) or text.startswith("unknown command"))


def _resend(
    commands: Sequence[Command], res: list[Any], last: bool, as_they_are: bool = False
) -> tuple[list[int], list[tuple[Any, ...]]]:
    """What to send again after a pipeline's NOSCRIPT (or "Function not found", or FCALL
    denied) replies: (positions, commands).

    Only the commands answered so, as EVAL of the script body, plus the commands that
    are not scripts (WAIT) after the first of them: WAIT counts the replicas that caught up
    with the writes before it on the connection. Unless ``last``, only the first command of
    each script is sent as EVAL and the rest stay EVALSHA behind it (a fan-out of 2000 calls
    does not send 2000 bodies); the ``last`` round sends EVAL only, which cannot fail so.
    ``as_they_are``: the commands go again unchanged (FCALL, the library just loaded).
    """
    positions: list[int] = []
    again: list[tuple[Any, ...]] = []
    evaled: set[str] = set()
    for i, ((script, cmd), r) in enumerate(zip(commands, res, strict=True)):
        if script is None:
            if positions:
                positions.append(i)
                again.append(cmd)
        elif as_they_are:
            if _function_missing(r):
                positions.append(i)
                again.append(cmd)
        elif isinstance(r, NoScriptError) or _function_missing(r) or _fcall_denied(r):
            positions.append(i)
            if last or script.name not in evaled:
                evaled.add(script.name)
                again.append(("EVAL", script.source, *cmd[2:]))
            else:
                again.append(cmd)
    return positions, again


# ---- the engine ------------------------------------------------------------------------
class Engine(SlotWaits):
    """The connection logic of one saver, store or cache: its scripts, retry and policy-check
    state, and (a saver's) key schema.

    Args:
        keys: the saver's key schema (setup(), the slot index); None for the store and the cache.
        registry: the scripts it runs, and their function library (FCALL) or None (EVALSHA).
        retries: retries of a step that failed with ``ConnectionError``.
        cluster: the client is a Redis Cluster client (WAIT goes to the node of the thread).
        telemetry: spans and metrics of the saver's calls (``telemetry.py``), or None.
        slot_move_timeout: seconds a step refused because its slot is moving (``SLOT_MOVING``)
            is sent again, with backoff, before ``SlotMovingError``; 0: at once.
    """

    def __init__(
        self,
        keys: KeySchema | None,
        registry: Registry,
        retries: int = 0,
        *,
        cluster: bool = False,
        telemetry: Telemetry | None = None,
        slot_move_timeout: float = SLOT_MOVE_TIMEOUT,
    ):
        self.keys = keys
        self.slot_move_timeout = slot_move_timeout
        self.telemetry = telemetry
        self.retries = retries
        self.cluster = cluster
        self.scripts: dict[str, Script] = dict(registry.scripts)  # its own copy (bench/where.py swaps some)
        # the function library, while the engine uses it (None: EVALSHA)
        self.library: Library | None = registry.library
        self._loading = False  # a FUNCTION LOAD of this engine is under way
        # the maxmemory-policy check (policy.py): the saver sets the mode; pending until it ran
        self.eviction_check = "off"
        self.policy_pending = False
        self.saver_ttl = False  # the saver has a ttl (its threads are a cache: see policy.py)

    def set_eviction_check(self, mode: str, ttl: bool = False) -> None:
        self.eviction_check = _policy.check_mode(mode)
        self.policy_pending = mode != "off"
        self.saver_ttl = ttl

    # a plan (the saver's, the store's, or the node cache's, which also yields plain reads), run
    # to its end: the caller gets Emit operations for its items; ``op`` names the
    # saver call for telemetry (None: an internal plan, not recorded)
    def drive(self, plan: Generator[Any, Any, T], op: str | None = None) -> Io[T]:
        rec = self.telemetry.start(op) if op is not None and self.telemetry is not None else None
        if rec is None:
            return (yield from self._drive(plan, None))
        try:
            value = yield from self._drive(plan, rec)
        except BaseException as exc:
            rec.end(None if isinstance(exc, GeneratorExit) else exc)
            raise
        rec.end()
        return value

    def _drive(self, plan: Generator[Any, Any, T], rec: Recording | None) -> Io[T]:
        if self.policy_pending and self.eviction_check == "raise":
            yield from _setup.check_policy(self)  # refuse before the call; "warn" asks after one succeeded
        reply: Any = None
        lost: DamagedThreadError | None = None
        while True:
            try:
                # a read that found a thread damaged: the plan sends it again to forget the thread
                step = plan.send(reply) if lost is None else plan.throw(lost)
            except StopIteration as stop:
                if self.policy_pending:
                    yield from _setup.check_policy(self)
                return stop.value  # type: ignore[no-any-return]
            lost = None
            if rec is not None:
                for c in step if isinstance(step, list) else [step] if isinstance(step, Call) else []:
                    s = self.scripts.get(c.script)
                    rec.script(c.script, c.args, str(c.args[1]) if s is not None and s.per_thread else None)
            if isinstance(step, Out):
                if self.policy_pending:
                    yield from _setup.check_policy(self)
                yield Emit(step.items)
                reply = None
            elif isinstance(step, (Cmd, Pipe, Scan)):  # a plain read (the node cache's MGET, SCAN)
                if rec is not None:
                    rec.sent += _plain_size(step)
                try:
                    reply = yield from self.plain(step)
                except SLOT_MOVING as exc:
                    reply = yield from self.while_moving(partial(self.plain, step), exc, key_of(step))
            else:
                # (try costs nothing until it catches: the stable path is as it was)
                try:
                    if isinstance(step, Call) and not self.retries:
                        reply = yield from self.call(step)
                    else:
                        reply = yield from self.step(step)
                except DamagedThreadError as exc:
                    lost, reply = exc, None
                except SLOT_MOVING as exc:
                    try:
                        reply = yield from self.while_moving(partial(self.step, step), exc, key_of(step))
                    except DamagedThreadError as damaged:
                        lost, reply = damaged, None
            if rec is not None:
                rec.reply(reply)

    def plain(self, op: Cmd | Pipe | Scan) -> Io[Any]:
        """A plain command (a read): its reply, a pipeline's first error raised; retried on
        ``ConnectionError`` as a script call is."""
        for attempt in range(self.retries + 1):
            try:
                reply = yield op
                if isinstance(op, Pipe):
                    for r in reply:
                        if isinstance(r, Exception):
                            raise r
                return reply
            except ConnectionError:
                if attempt == self.retries:
                    raise
                yield Sleep(backoff(attempt))
        raise AssertionError("unreachable")

    def step(self, step: Any) -> Io[Any]:
        """One plan step, retried on ``ConnectionError`` (every script is idempotent)."""
        for attempt in range(self.retries + 1):
            try:
                if isinstance(step, IndexSlots):
                    return (yield from self.index_slots())
                if isinstance(step, LoadScripts):
                    return (yield from self.load_scripts(step.prefix))
                if isinstance(step, list):
                    return (yield from self.batch(step))
                return (yield from self.call(step))
            except ConnectionError:
                if attempt == self.retries:
                    raise
                yield Sleep(backoff(attempt))
        raise AssertionError("unreachable")

    def _evalsha(self, call: Call) -> Command:
        """A script call as a pipelined command: FCALL (the library in use), else EVALSHA."""
        s = self.scripts[call.script]
        lib = self.library
        if lib is not None:
            return s, ("FCALL", lib.functions[call.script], len(call.keys), *call.keys, *call.args)
        return s, ("EVALSHA", s.sha, len(call.keys), *call.keys, *call.args)

    def call(self, call: Call) -> Io[Any]:
        """One script call: FCALL (the library loaded first when the server lacks it), else
        EVALSHA, or EVAL of its body after NOSCRIPT."""
        if call.wait is not None:
            return (yield from self._call_and_wait(call))
        s = self.scripts[call.script]
        try:
            lib = self.library
            if lib is not None:
                fcall = (lib.functions[call.script], len(call.keys), *call.keys, *call.args)
                try:
                    return (yield Cmd("fcall", fcall))
                except ResponseError as exc:
                    if _fcall_denied(exc):
                        self._no_functions(exc)
                    elif not _function_missing(exc):
                        raise
                # one load at a time per saver: a call that finds another loading (concurrent
                # calls all answered "Function not found") goes on with EVALSHA meanwhile
                if self.library is not None and not self._loading and (yield from self.load_library(lib)):
                    try:
                        return (yield Cmd("fcall", fcall))
                    except ResponseError as exc:  # flushed again right away: EVAL below
                        if not _function_missing(exc):
                            raise
            try:
                return (yield Cmd("evalsha", (s.sha, len(call.keys), *call.keys, *call.args)))
            except NoScriptError:  # EVAL cannot get NOSCRIPT, even if the cache is flushed again
                if self.telemetry is not None:
                    self.telemetry.reloaded()
                return (yield Cmd("eval", (s.source, len(call.keys), *call.keys, *call.args)))
        except ResponseError as exc:
            raise_mapped(exc)

    def load_library(self, lib: Library, reload: bool = True) -> Io[bool]:
        """FUNCTION LOAD of the library (REPLACE: concurrent loads of the same text are
        harmless; in a cluster redis-py sends it to every primary). Refused (no permission, the
        command disabled or unknown): the engine uses EVALSHA from then on, and says False.
        ``reload``: it answers a missing library (counted as a script reload), not setup()."""
        if reload and self.telemetry is not None:
            self.telemetry.reloaded()
        self._loading = True
        try:
            yield Cmd("function_load", (lib.source,), {"replace": True})
        except ResponseError as exc:
            self._no_functions(exc)
            return False
        finally:
            self._loading = False
        return True

    def load_scripts(self, prefix: str) -> Io[None]:
        """The function library, or (functions off or refused) the scripts whose names start
        with ``prefix``, loaded: the store's setup() (``LoadScripts``)."""
        if self.library is not None:
            yield from self.load_library(self.library, reload=False)
        if self.library is None:
            for name, script in self.scripts.items():
                if name.startswith(prefix):
                    yield Cmd("script_load", (script.source,))

    def _no_functions(self, exc: ResponseError) -> None:
        self.library = None
        logger.info("redis_saver: %s; running the scripts with EVALSHA from now on", exc)

    def pipeline(self, commands: Sequence[Command], node_key: bytes | None = None) -> Io[list[Any]]:
        """One pipeline; the commands answered NOSCRIPT go again (see ``_resend``); those answered
        "Function not found" go again as they are once the library is loaded (as EVAL if it
        cannot be, or is gone again)."""
        res: list[Any] = yield Pipe([cmd for _, cmd in commands], node_key)
        if self.library is not None:
            if any(_fcall_denied(r) for r in res):
                self._no_functions(next(r for r in res if _fcall_denied(r)))
            elif (
                any(_function_missing(r) for r in res)
                and not self._loading
                and (yield from self.load_library(self.library))
            ):
                positions, again = _resend(commands, res, False, as_they_are=True)
                for i, r in zip(positions, (yield Pipe(again, node_key)), strict=True):
                    res[i] = r
        for last in (False, True):
            positions, again = _resend(commands, res, last)
            if not positions:
                break
            if self.telemetry is not None:
                self.telemetry.reloaded()
            for i, r in zip(positions, (yield Pipe(again, node_key)), strict=True):
                res[i] = r
        return res

    def _call_and_wait(self, call: Call) -> Io[Any]:
        # WAIT counts the replicas that caught up with the writes of *its own connection*, so
        # the script and WAIT go in one pipeline on one connection (one round trip); in a
        # cluster, on a connection to the primary that serves the thread's slot
        assert call.wait is not None
        commands = [self._evalsha(call), (None, ("WAIT", *call.wait))]
        if not self.cluster:
            reply, acked = yield from self.pipeline(commands)
        else:
            for attempt in range(CLUSTER_ATTEMPTS):
                try:
                    reply, acked = yield from self.pipeline(commands, call.keys[0])
                except (ConnectionError, TimeoutError):
                    if attempt == CLUSTER_ATTEMPTS - 1:
                        raise
                    reply = None
                if reply is not None and not _redirected(reply):
                    break
                if attempt == CLUSTER_ATTEMPTS - 1:
                    break
                try:  # the node failed or the slot moved: refresh the slot map, try again
                    yield Refresh()
                except RedisError:
                    yield Sleep(backoff(attempt))
        _raise_first([reply])
        _check_acks(call, acked)
        return reply

    def batch(self, calls: Sequence[Call]) -> Io[list[Any]]:
        """A fan-out: pipelines of up to PIPELINE_CHUNK calls (in a cluster, split by node)."""
        out: list[Any] = []
        for i in range(0, len(calls), PIPELINE_CHUNK):
            chunk = calls[i : i + PIPELINE_CHUNK]
            res = yield from self.pipeline([self._evalsha(c) for c in chunk])
            if self.cluster and any(moving_reply(r) for r in res):
                res = yield from self.again_refused(chunk, res)
            out.extend(_raise_first(res))
        return out

    def index_slots(self) -> Io[list[int]]:
        """The slots that may hold a cross-thread index key of this prefix."""
        keys = self.saver_keys()
        if (yield Cmd("dbsize")) > SCAN_MAX_KEYS:
            return list(range(SLOTS))
        found = yield Scan(keys.index_pattern())
        return sorted({keys.slot_of_index_key(k) for k in found})

    def saver_keys(self) -> KeySchema:
        if self.keys is None:
            raise TypeError("this engine serves no saver (it has no key schema)")
        return self.keys
