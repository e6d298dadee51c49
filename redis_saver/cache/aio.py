"""AsyncRedisCache: the asyncio node cache (its sync methods, from other threads, run on its loop)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from langgraph.cache.base import FullKey, Namespace, ValueT

from .._clients import make_async_client
from .._drivers import AsyncDriver
from ._base import CACHE_OPTIONS, RedisCacheBase

T = TypeVar("T")


class AsyncRedisCache(RedisCacheBase[ValueT]):
    """LangGraph node cache on plain Redis, for an asyncio client: :class:`RedisCache`'s
    behaviour with native ``aget`` / ``aset`` / ``aclear``. Its sync methods are for other
    threads (they run on the loop of the cache's last async call); on that loop's own thread
    they raise ``asyncio.InvalidStateError``, as ``AsyncRedisSaver``'s.
    """

    _driver_cls = AsyncDriver
    _driver: AsyncDriver
    loop: asyncio.AbstractEventLoop | None = None

    def __init__(self, client: Any, *, auto_pipeline: bool | None = None, **options: Any) -> None:
        """``auto_pipeline``: as ``AsyncRedisSaver``'s (on by default): the calls concurrent tasks
        issue in one event-loop iteration leave in one write per server (``_autopipe.py``); it
        shares the client's lanes with the savers on that client. Other options:
        :class:`RedisCacheBase`."""
        super().__init__(client, **options)
        if auto_pipeline is None:
            from .. import aio

            auto_pipeline = aio.AUTO_PIPELINE
        if not isinstance(auto_pipeline, bool):
            raise TypeError("auto_pipeline must be True or False")
        self.auto_pipeline = auto_pipeline
        self._driver.set_auto_pipeline(auto_pipeline)

    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls, url: str, **options: Any) -> AsyncIterator[AsyncRedisCache[Any]]:
        """Async twin of :meth:`RedisCache.from_conn_string`; the client is closed on exit."""
        cache_opts = {k: options.pop(k) for k in CACHE_OPTIONS if k in options}
        cache_opts.setdefault("retries", 3)
        client = await make_async_client(url, **options)
        try:
            yield cls(client, **cache_opts)
        finally:
            await client.aclose()

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """Async :meth:`RedisCache.get`."""
        self.loop = asyncio.get_running_loop()
        return await self._driver._run(self._get(keys))

    async def aset(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        """Async :meth:`RedisCache.set`."""
        self.loop = asyncio.get_running_loop()
        await self._driver._run(self._set(pairs))

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """Async :meth:`RedisCache.clear`."""
        self.loop = asyncio.get_running_loop()
        await self._driver._run(self._clear(namespaces))

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """:meth:`aget` from another thread, on the cache's loop."""
        return self._sync(self.aget(keys))

    def set(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        """:meth:`aset` from another thread, on the cache's loop."""
        self._sync(self.aset(pairs))

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """:meth:`aclear` from another thread, on the cache's loop."""
        self._sync(self.aclear(namespaces))

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        loop = self.loop
        if running is not None and running is loop:
            coro.close()
            raise asyncio.InvalidStateError(
                "Synchronous calls to AsyncRedisCache are only allowed from a different thread; "
                "on its loop's thread use aget / aset / aclear (e.g. `await graph.ainvoke(...)`)."
            )
        if loop is None or loop.is_closed() or not loop.is_running():
            coro.close()
            raise asyncio.InvalidStateError(
                "AsyncRedisCache's sync methods run on the loop of its async calls, from another "
                "thread; that loop is not running. Use RedisCache for synchronous code."
            )
        return asyncio.run_coroutine_threadsafe(coro, loop).result()
