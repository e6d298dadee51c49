"""Waiting out a Redis Cluster slot that is moving: the engine's part (``engine.Engine`` takes
``SlotWaits``), and what counts as a refusal because of it.

While a slot moves key by key (``redis-cli --cluster reshard``, a managed service's online
resharding), Redis answers a script whose declared keys are only partly on the node with
TRYAGAIN, and ASK where none are; redis-py follows MOVED and ASK and retries TRYAGAIN for ~0.4 s,
then gives up (``ClusterError: TTL exhausted.``). A step refused so is sent again after a pause,
until it is answered or ``slot_move_timeout`` seconds have passed since the first refusal, then
``SlotMovingError``. Safe to send again: a refusal means the command did not run; a call whose
connection the client closed under it (``ClientClosedConnection``) may have run, which every
script allows (it is idempotent: the same call again leaves the same data).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterError,
    ConnectionError,
    RedisClusterException,
    RedisError,
    SlotNotCoveredError,
    TryAgainError,
)

from ..errors import SlotMovingError
from .ops import Cmd, Io, Pipe, Refresh, Sleep
from .plans import Call

if TYPE_CHECKING:
    from ..telemetry import Telemetry

T = TypeVar("T")

# how long a call refused because its slot is moving is sent again (``slot_move_timeout``): a
# ``redis-cli --cluster reshard`` holds a slot open for as long as it takes to move its keys in
# batches of 10 (milliseconds for a thread's few keys, seconds for a slot of thousands of keys)
SLOT_MOVE_TIMEOUT = 30.0
SLOT_PAUSE, SLOT_PAUSE_MAX = 0.02, 0.25  # the pause before each such attempt: doubling, capped
SLOT_REFRESH_EVERY = 0.5  # seconds between the slot-map refreshes of one engine while a slot moves


class ClientClosedConnection(ConnectionError):
    """A connection the client library closed while a call used it (redis-py's asyncio cluster
    client closes every connection it holds on every 5th MOVED; a pool disconnected by its
    owner). Raised by the automatic-pipelining lanes for the calls on it that were not answered:
    the server is fine, so the call goes again as a call refused while its slot moves does."""


# what a cluster answers (or redis-py raises) while a call's slot is moving or the slot map is
# being fixed: the call did not run (a redirect, TRYAGAIN, CLUSTERDOWN, an uncovered slot, redis-py's
# own redirect loop giving up), or its connection was closed by the client (ClientClosedConnection)
SLOT_MOVING: tuple[type[Exception], ...] = (
    AskError,  # MovedError included
    TryAgainError,
    ClusterError,  # ClusterDownError and redis-py's "TTL exhausted."
    SlotNotCoveredError,
    ClientClosedConnection,
)


def moving_reply(reply: Any) -> bool:
    """A pipelined command refused because its slot is moving (it did not run)."""
    return isinstance(reply, SLOT_MOVING) and not isinstance(reply, SlotMovingError)


def key_of(step: Any) -> bytes | None:
    """The first key a step (a call, a fan-out, a plain command) names, for SlotMovingError."""
    if isinstance(step, list):
        step = step[0] if step else None
    if isinstance(step, Call):
        return step.keys[0] if step.keys else None
    if isinstance(step, Cmd) and step.args and isinstance(step.args[0], bytes):
        return step.args[0]
    if isinstance(step, Pipe) and step.commands and len(step.commands[0]) > 1:
        first = step.commands[0][1]
        return first if isinstance(first, bytes) else None
    return None


class SlotWaits:
    """The engine's waiting while a slot moves (a base of ``Engine``, which has the rest)."""

    cluster: bool
    slot_move_timeout: float
    telemetry: Telemetry | None
    _refreshed = 0.0  # time.monotonic() of the last slot-map refresh while a slot moved

    if TYPE_CHECKING:

        def pipeline(self, commands: Sequence[Any], node_key: bytes | None = None) -> Io[list[Any]]: ...

        def _evalsha(self, call: Call) -> Any: ...

    def while_moving(self, again: Callable[[], Io[T]], exc: Exception, key: bytes | None) -> Io[T]:
        """A step refused with ``exc`` because its slot is moving (``SLOT_MOVING``), sent again
        (``again()``) after a pause that doubles from SLOT_PAUSE to SLOT_PAUSE_MAX, until it is
        answered or ``slot_move_timeout`` seconds have passed since the first refusal; then
        ``SlotMovingError`` (the last refusal as its cause). A slot map fixed by redis-py (MOVED)
        needs nothing more; after the other refusals the engine refreshes it, at most every
        SLOT_REFRESH_EVERY seconds."""
        if isinstance(exc, SlotMovingError) or not (self.cluster or isinstance(exc, ClientClosedConnection)):
            raise exc  # (a redirect from a server the client does not take for a cluster: misconfigured)
        start = time.monotonic()
        deadline = start + self.slot_move_timeout
        pause = SLOT_PAUSE
        while (now := time.monotonic()) < deadline:
            stale_map = self.cluster and not isinstance(exc, (TryAgainError, AskError))
            if stale_map and now - self._refreshed > SLOT_REFRESH_EVERY:
                self._refreshed = now
                try:
                    yield Refresh()
                except (RedisError, RedisClusterException):
                    pass  # the next attempt tells
            yield Sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(SLOT_PAUSE_MAX, pause * 2)
            if self.telemetry is not None:
                self.telemetry.slot_retried()
            try:
                return (yield from again())
            except SlotMovingError:
                raise
            except SLOT_MOVING as refused:
                exc = refused
        slot = None if key is None else key_slot(key)
        waited = time.monotonic() - start
        where = "a slot" if key is None else f"slot {slot} (key {key!r})"
        raise SlotMovingError(
            f"{where} was still moving {waited:.1f} s after the first refusal "
            f"(slot_move_timeout={self.slot_move_timeout:g} s); last error: {type(exc).__name__}: {exc}",
            slot,
            key,
            waited,
        ) from exc

    def again_refused(self, calls: Sequence[Call], res: list[Any]) -> Io[list[Any]]:
        """A fan-out's calls refused because their slots moved (they did not run) sent again, as
        ``while_moving`` sends a step; the calls answered keep their replies."""
        positions = [i for i, r in enumerate(res) if moving_reply(r)]

        def again() -> Io[list[Any]]:
            nonlocal positions
            replies = yield from self.pipeline([self._evalsha(calls[i]) for i in positions])
            for i, r in zip(positions, replies, strict=True):
                res[i] = r
            positions = [i for i in positions if moving_reply(res[i])]
            if positions:
                raise res[positions[0]]
            return res

        return (yield from self.while_moving(again, res[positions[0]], calls[positions[0]].keys[0]))
