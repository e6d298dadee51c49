"""AsyncRedisCache: the asyncio node cache (its sync methods, from other threads, run on its loop)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from langgraph.cache.base import FullKey, Namespace, ValueT

from .._shell import LoopBound, async_owner
from ..transport.drivers import AsyncDriver
from ._base import CACHE_OPTIONS, RedisCacheBase

T = TypeVar("T")


class AsyncRedisCache(LoopBound, RedisCacheBase[ValueT]):
    """LangGraph node cache on plain Redis, for an asyncio client: :class:`RedisCache`'s
    behaviour with native ``aget`` / ``aset`` / ``aclear``. Its sync methods are for other
    threads (they run on the loop of the cache's last async call); on that loop's own thread
    they raise ``asyncio.InvalidStateError``, as ``AsyncRedisSaver``'s.
    """

    _driver_cls = AsyncDriver
    _driver: AsyncDriver
    _async_hint = "the async interface (`await cache.aget(...)`)"

    def __init__(self, client: Any, *, auto_pipeline: bool | None = None, **options: Any) -> None:
        """``auto_pipeline``: as ``AsyncRedisSaver``'s (on by default): the calls concurrent tasks
        issue in one event-loop iteration leave in one write per server (``transport/autopipe.py``); it
        shares the client's lanes with the savers on that client. Other options:
        :class:`RedisCacheBase`."""
        super().__init__(client, **options)
        self._set_auto_pipeline(auto_pipeline)

    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls, url: str, **options: Any) -> AsyncIterator[AsyncRedisCache[Any]]:
        """Async twin of :meth:`RedisCache.from_conn_string`; the client is closed on exit."""
        async with async_owner(cls, url, options, CACHE_OPTIONS) as cache:
            yield cache

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """Async :meth:`RedisCache.get`."""
        self._bind()
        return await self._driver._run(self._get(keys))

    async def aset(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        """Async :meth:`RedisCache.set`."""
        self._bind()
        await self._driver._run(self._set(pairs))

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """Async :meth:`RedisCache.clear`."""
        self._bind()
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
