"""AsyncRedisStore: the asyncio store (its sync methods run on its loop from other threads)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import TypeVar

from langgraph.store.base import Op, Result

from .._shell import LoopBound
from ._base import RedisStoreBase, op_name
from ._plans import batch_plan, prepare
from ._rebuild import BUDGET, rebuild_plan
from ._transfer import StoredItem, export_plan, import_plan

T = TypeVar("T")


class AsyncRedisStore(LoopBound, RedisStoreBase):
    """Asyncio twin of :class:`RedisStore` over ``redis.asyncio`` clients.

    It binds to the running loop at construction, else to the loop of its first async call;
    its sync methods may be called from other threads while that loop runs (as
    ``AsyncPostgresStore``), and raise ``asyncio.InvalidStateError`` on the loop's own thread.
    """

    _async_hint = "the async interface (`await store.aget(...)`)"

    async def setup(self) -> None:
        """Async :meth:`RedisStore.setup`."""
        self._bind()
        await self._driver.run(self._setup())

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


    async def arebuild_vector_sets(
        self, namespace_prefix: tuple[str, ...] = (), *, budget: int = BUDGET, hnsw: tuple[int, int] | None = None
    ) -> dict[tuple[str, ...], str]:
        """Async :meth:`RedisStore.rebuild_vector_sets`."""
        self._bind()
        await self._avsets()
        if not self._cfg.vsets:
            raise ValueError("vector sets are off (vector_sets=False, or the server has no VADD)")
        return await self._driver.run(rebuild_plan(self._cfg, tuple(namespace_prefix), budget, hnsw), "store.rebuild")
