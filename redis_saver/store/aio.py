"""AsyncRedisStore: the asyncio store (its sync methods run on its loop from other threads)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from langgraph.store.base import Op, Result

from .._shell import LoopBound, async_owner
from ..transport.drivers import AsyncDriver
from ._base import STORE_OPTIONS, RedisStoreBase, op_name
from ._plans import batch_plan, prepare
from ._transfer import StoredItem, export_plan, import_plan

T = TypeVar("T")


class AsyncRedisStore(LoopBound, RedisStoreBase):
    """Asyncio twin of :class:`RedisStore` over ``redis.asyncio`` clients.

    It binds to the running loop at construction, else to the loop of its first async call;
    its sync methods may be called from other threads while that loop runs (as
    ``AsyncPostgresStore``), and raise ``asyncio.InvalidStateError`` on the loop's own thread.
    """

    _driver_cls = AsyncDriver
    _driver: AsyncDriver
    _async_hint = "the async interface (`await store.aget(...)`)"

    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls, url: str, **options: Any) -> AsyncIterator[AsyncRedisStore]:
        """Async twin of :meth:`RedisStore.from_conn_string`; the client is closed on exit."""
        async with async_owner(cls, url, options, STORE_OPTIONS) as store:
            yield store

    async def setup(self) -> None:
        """Async :meth:`RedisStore.setup`."""
        self._bind()
        await self._driver._run(self._setup(self._driver.engine))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        self._bind()
        prep = prepare(self._cfg, ops)
        if not prep.ops:
            return []
        await self._avsets()
        return await self._driver.run(batch_plan(self._cfg, prep, *await self._aembed(prep)), op_name(prep.ops))

    async def _avsets(self) -> None:
        if self._cfg.vsets is None:
            try:
                await self.client.execute_command(*self._vsets_probe())
            except Exception as exc:  # noqa: BLE001 (the answer is "no", unless the connection failed)
                self._vsets_answer(exc)
            else:
                self._vsets_answer(None)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._sync(self.abatch(list(ops)))

    async def aexport_items(self, namespace_prefix: tuple[str, ...] = ()) -> AsyncIterator[StoredItem]:
        """Async :meth:`RedisStore.export_items`."""
        self._bind()
        async for item in self._driver.iterate(export_plan(self._cfg, tuple(namespace_prefix)), "store.export"):
            yield item

    async def aimport_items(self, items: Iterable[StoredItem]) -> int:
        """Async :meth:`RedisStore.import_items`."""
        self._bind()
        await self._avsets()
        return await self._driver.run(import_plan(self._cfg, list(items)), "store.import")

