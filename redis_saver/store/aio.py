"""AsyncRedisStore: the asyncio store (its sync methods run on its loop from other threads)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TypeVar

from langgraph.store.base import Op, Result

from .._shell import LoopBound
from ..core.plans import Plan
from ._base import RedisStoreBase, op_name
from ._plans import as_namespace, batch_plan, prepare, probe_plan
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
        await self._avsets()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        self._bind()
        prep = prepare(self._cfg, ops)
        if not prep.ops:
            return []
        await self._avsets()
        out = await self._driver.run(batch_plan(self._cfg, prep, *await self._aembed(prep)), op_name(prep.ops))
        for key, plan in self._fills():
            task = asyncio.ensure_future(self._afill(key, plan))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return out

    async def _afill(self, key: tuple[int, bytes], plan: Plan[bool]) -> None:
        """A background fill of the vector cache (``_fills``), as a task of the store's loop."""
        error: BaseException | None = None
        try:
            await self._driver.run(plan, "store.fill")
        except Exception as e:  # noqa: BLE001 - searches go on from the sets; the next repeated one asks again
            error = e
        finally:
            self._filled(key, error)

    async def _arelease(self) -> None:
        """``from_conn_string``'s exit: no fill starts any more, and those under way end at their
        next page (one bounded call) before the client closes."""
        self._cfg.state.closed = True
        await self._asettle()

    async def _asettle(self) -> None:
        """Wait for the background fills under way (tests, benchmarks)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    _probing: asyncio.Future[bool] | None = None  # the probe under way

    async def _avsets(self) -> None:
        """Async :meth:`RedisStore._vsets`: the first call's probe, which the calls of other
        tasks meanwhile await (shielded: a cancelled caller does not cancel it)."""
        if self._cfg.state.vsets is not None:
            return
        if self._probing is None or self._probing.get_loop() is not asyncio.get_running_loop():  # (a new loop)
            self._probing = asyncio.ensure_future(self._driver.run(probe_plan(self._cfg), "store.probe"))
        probing = self._probing
        try:
            self._cfg.state.vsets = await asyncio.shield(probing)
        finally:
            failed = probing.done() and (probing.cancelled() or probing.exception() is not None)
            if failed and self._probing is probing:
                self._probing = None  # the next call asks again

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._sync(self.abatch(list(ops)))

    async def aexport_items(
        self, namespace_prefix: Sequence[str] = (), *, failed: list[tuple[tuple[str, ...], str, str]] | None = None
    ) -> AsyncIterator[StoredItem]:
        """Async :meth:`RedisStore.export_items`."""
        self._bind()
        plan = export_plan(self._cfg, as_namespace(namespace_prefix, "prefix"), failed)
        async for item in self._driver.iterate(plan, "store.export"):
            yield item

    async def aimport_items(self, items: Iterable[StoredItem]) -> int:
        """Async :meth:`RedisStore.import_items`."""
        self._bind()
        await self._avsets()
        return await self._driver.run(import_plan(self._cfg, list(items)), "store.import")

    async def arebuild_vector_sets(
        self, namespace_prefix: Sequence[str] = (), *, budget: int = BUDGET, hnsw: tuple[int, int] | None = None
    ) -> dict[tuple[str, ...], str]:
        """Async :meth:`RedisStore.rebuild_vector_sets`."""
        self._bind()
        await self._avsets()
        if not self._cfg.state.vsets:
            raise ValueError("vector sets are off (vector_sets=False, or the server has no VADD)")
        return await self._driver.run(
            rebuild_plan(self._cfg, as_namespace(namespace_prefix, "prefix"), budget, hnsw), "store.rebuild"
        )
