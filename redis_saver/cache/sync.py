"""RedisCache: the synchronous node cache (its ``a*`` methods run the sync code in a worker thread)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langgraph.cache.base import FullKey, Namespace, ValueT

from .._shell import Options, SyncShell
from ._base import RedisCacheBase

if TYPE_CHECKING:
    from typing_extensions import Unpack


class RedisCache(SyncShell, RedisCacheBase[ValueT]):
    """LangGraph node cache on plain Redis, for a sync client (options: :class:`RedisCacheBase`).

    ``get`` and ``set`` of a batch are one round trip (one command per namespace, pipelined),
    every entry has its own TTL (Redis key expiry), ``clear`` pages through a per-namespace
    index (no ``KEYS``), and errors reach the caller.

    Example:
        >>> with RedisCache.from_conn_string("redis://localhost:6379") as cache:
        ...     graph = builder.compile(cache=cache)
    """

    def __init__(self, client: Any, **options: Unpack[Options]) -> None:
        if inspect.iscoroutinefunction(getattr(client, "execute_command", None)):
            raise TypeError("RedisCache needs a sync redis client; use AsyncRedisCache for redis.asyncio")
        super().__init__(client, **options)

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """The cached values of ``keys`` (``(namespace, key)`` pairs); missing or expired keys
        are left out. One round trip."""
        return self._driver.run(self._get(keys), "cache_get")

    def set(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        """Store values with their TTLs in seconds (``None``: no expiry; ``0``: expired at
        once). One round trip; bad input raises before anything is sent."""
        self._driver.run(self._set(pairs), "cache_set")

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """Delete the entries of ``namespaces``, or every entry under the prefix when ``None``
        (found with SCAN); a bounded page of entries per script call."""
        self._driver.run(self._clear(namespaces), "cache_clear")

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """:meth:`get`, in a worker thread."""
        return await asyncio.to_thread(self.get, keys)

    async def aset(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        """:meth:`set`, in a worker thread."""
        await asyncio.to_thread(self.set, pairs)

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """:meth:`clear`, in a worker thread."""
        await asyncio.to_thread(self.clear, namespaces)
