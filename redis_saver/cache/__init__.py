"""LangGraph's node cache (``langgraph.cache.base.BaseCache``) on plain Redis.

``RedisCache`` (sync client) and ``AsyncRedisCache`` (asyncio client): per-entry TTL by Redis
key expiry, one round trip per batch, ``clear`` without ``KEYS`` in bounded pages, errors
raised, Cluster-safe keys under ``<prefix>:cache{...}`` (see ``keys.py`` and docs/cache.md).
"""

from .aio import AsyncRedisCache
from .keys import CacheKeys
from .sync import RedisCache

__all__ = ["AsyncRedisCache", "CacheKeys", "RedisCache"]
