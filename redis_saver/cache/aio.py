"""AsyncRedisCache: the asyncio node cache (its sync methods, from other threads, run on its loop)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from langgraph.cache.base import FullKey, Namespace, ValueT

from .._shell import LoopBound
from ._base import RedisCacheBase

T = TypeVar("T")


class AsyncRedisCache(LoopBound, RedisCacheBase[ValueT]):
    """LangGraph node cache on plain Redis, for an asyncio client: :class:`RedisCache`'s
    behaviour with native ``aget`` / ``aset`` / ``aclear``. Its sync methods are for other
    threads (they run on its loop: the one running when it was made, else that of its first
    async call); on that loop's own thread they raise ``asyncio.InvalidStateError``, as
    ``AsyncRedisSaver``'s. ``auto_pipeline`` (on by default) as ``AsyncRedisSaver``'s: the calls
    concurrent tasks issue in one event-loop iteration leave in one write per server
    (``transport/autopipe.py``), on the lanes it shares with the savers on the same client.
    """

    _async_hint = "the async interface (`await cache.aget(...)`)"

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """Async :meth:`RedisCache.get`."""
        self._bind()
        return await self._driver.run(self._get(keys), "cache_get")

    async def aset(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        """Async :meth:`RedisCache.set`."""
        self._bind()
        await self._driver.run(self._set(pairs), "cache_set")

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """Async :meth:`RedisCache.clear`."""
        self._bind()
        await self._driver.run(self._clear(namespaces), "cache_clear")

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """:meth:`aget` from another thread, on the cache's loop."""
        return self._sync(self.aget(keys))

    def set(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        """:meth:`aset` from another thread, on the cache's loop."""
        self._sync(self.aset(pairs))

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """:meth:`aclear` from another thread, on the cache's loop."""
        self._sync(self.aclear(namespaces))
