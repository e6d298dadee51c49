"""RedisSaver: the synchronous saver (its ``a*`` methods run the sync code in a worker thread)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeVar

from ._api import SaverAPI
from ._shell import SyncShell
from .core.plans import Plan

T = TypeVar("T")


class RedisSaver(SyncShell, SaverAPI):
    """LangGraph checkpoint saver on plain Redis (>= 7.0, no modules).

    Every call is one EVALSHA of a Lua script (``lua/``) in the common case; every key of
    a thread shares one hash slot, so it runs unchanged on Redis Cluster. Its async methods
    (``aget_tuple``, ``aput``, ...) run the sync code in a worker thread.

    Options: see :class:`redis_saver._base.RedisSaverBase` (``prefix``, ``serde``, ``ttl``,
    ``history``, ``fencing``, ``wait_for_replicas``, ``wait_timeout_ms``, ``retries``).

    Example:
        >>> with RedisSaver.from_conn_string("redis://localhost:6379") as saver:
        ...     graph = builder.compile(checkpointer=saver)
    """

    def setup(self) -> None:
        """Optional, idempotent: load the scripts and check the server and storage format."""
        self._driver.setup()

    async def asetup(self) -> None:
        """Async :meth:`setup` (it runs the sync code in a worker thread)."""
        await asyncio.to_thread(self.setup)

    # ---- the I/O shell: the sync driver, in a worker thread for async callers ----------
    def _call(self, plan: Plan[T], op: str) -> T:
        return self._driver.run(plan, op)

    def _iter(self, plan: Plan[Any], op: str) -> Iterator[Any]:
        return self._driver.iterate(plan, op)

    async def _acall(self, plan: Plan[T], op: str) -> T:
        return await asyncio.to_thread(self._driver.run, plan, op)

    async def _aiter(self, plan: Plan[Any], op: str) -> AsyncIterator[Any]:
        it = self._driver.iterate(plan, op)
        while (item := await asyncio.to_thread(next, it, None)) is not None:
            yield item
