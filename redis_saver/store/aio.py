"""AsyncRedisStore: the asyncio store (its sync methods run on its loop from other threads)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Iterable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from langgraph.store.base import Op, Result

from .._clients import make_async_client
from .._drivers import AsyncDriver
from ._base import STORE_OPTIONS, RedisStoreBase, op_name
from ._plans import batch_plan, prepare
from ._transfer import StoredItem, export_plan, import_plan

T = TypeVar("T")


class AsyncRedisStore(RedisStoreBase):
    """Asyncio twin of :class:`RedisStore` over ``redis.asyncio`` clients.

    It binds to the running loop at construction, else to the loop of its first async call;
    its sync methods may be called from other threads while that loop runs (as
    ``AsyncPostgresStore``), and raise ``asyncio.InvalidStateError`` on the loop's own thread.
    """

    _driver_cls = AsyncDriver
    _driver: AsyncDriver
    loop: asyncio.AbstractEventLoop | None

    def _set_auto_pipeline(self, auto_pipeline: bool | None) -> None:
        from .. import aio

        if auto_pipeline is None:
            auto_pipeline = aio.AUTO_PIPELINE
        if not isinstance(auto_pipeline, bool):
            raise TypeError("auto_pipeline must be True or False")
        self.auto_pipeline = auto_pipeline
        self._driver.set_auto_pipeline(auto_pipeline)

    def _bound(self) -> None:
        try:
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None

    def _bind(self) -> None:
        if self.loop is None or self.loop.is_closed():
            self.loop = asyncio.get_running_loop()

    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls, url: str, **options: Any) -> AsyncIterator[AsyncRedisStore]:
        """Async twin of :meth:`RedisStore.from_conn_string`; the client is closed on exit."""
        opts = {k: options.pop(k) for k in STORE_OPTIONS if k in options}
        opts.setdefault("retries", 3)
        client = await make_async_client(url, **options)
        try:
            yield cls(client, **opts)
        finally:
            await client.aclose()

    async def setup(self) -> None:
        """Async :meth:`RedisStore.setup`."""
        self._bind()
        await self._driver._run(self._setup(self._driver.engine))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        self._bind()
        prep = prepare(self._cfg, ops)
        if not prep.ops:
            return []
        docs: list[list[float]] = []
        queries: dict[str, list[float]] = {}
        if self.embeddings is not None:
            texts = self._doc_texts(prep.embed)
            docs = await self.embeddings.aembed_documents(texts) if texts else []
            qs = prep.embed.queries
            queries = dict(zip(qs, await asyncio.gather(*[self.embeddings.aembed_query(q) for q in qs]), strict=True))
        return await self._driver.run(batch_plan(self._cfg, prep, docs, queries), op_name(prep.ops))

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
        return await self._driver.run(import_plan(self._cfg, list(items)), "store.import")

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and running is self.loop:
            coro.close()
            raise asyncio.InvalidStateError(
                "Synchronous calls to AsyncRedisStore are only allowed from a different thread; "
                "on the event loop, use the async interface (await store.aget(...))."
            )
        if self.loop is None or self.loop.is_closed() or not self.loop.is_running():
            coro.close()
            raise asyncio.InvalidStateError(
                "AsyncRedisStore's sync methods run on the store's event loop from another thread; "
                "that loop is not running. Use RedisStore for synchronous code."
            )
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()
