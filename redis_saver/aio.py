"""AsyncRedisSaver: the asyncio saver (its sync methods work from other threads)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeVar

from ._api import SaverAPI
from ._shell import LoopBound
from .core.plans import Plan

T = TypeVar("T")


class AsyncRedisSaver(LoopBound, SaverAPI):
    """Asyncio twin of :class:`redis_saver.RedisSaver` over ``redis.asyncio`` clients.

    It can be constructed outside a running event loop; it binds to the running loop at
    construction, else to the loop of its first async call. Its sync methods (``get_tuple``,
    ``put``, ...) may be called from other threads while that loop runs (as
    ``AsyncPostgresSaver``); on the loop's own thread they raise ``asyncio.InvalidStateError``
    instead of deadlocking.

    Script calls of concurrent tasks are pipelined automatically (``auto_pipeline``, on by
    default): one connection per server (per cluster primary) carries them, those issued in
    the same event-loop iteration in one write.
    """

    _async_hint = "the async interface (`await saver.aget_tuple(...)`, `await graph.ainvoke(...)`)"

    async def asetup(self) -> None:
        """Optional, idempotent: load the scripts and check the server and storage format."""
        self._bind()
        await self._driver.setup()

    def setup(self) -> None:
        """Sync :meth:`asetup`, for other threads while the saver's event loop runs."""
        self._sync(self.asetup())

    # ---- the I/O shell: the asyncio driver, bridged onto the saver's loop for sync callers
    async def _acall(self, plan: Plan[T], op: str) -> T:
        self._bind()
        return await self._driver.run(plan, op)

    def _aiter(self, plan: Plan[Any], op: str) -> AsyncIterator[Any]:
        self._bind()  # called on the loop: by alist's first step, or by _iter's collect
        return self._driver.iterate(plan, op)

    def _call(self, plan: Plan[T], op: str) -> T:
        return self._sync(self._acall(plan, op))

    def _iter(self, plan: Plan[Any], op: str) -> Iterator[Any]:
        async def collect() -> list[Any]:
            return [item async for item in self._aiter(plan, op)]

        yield from self._sync(collect())
