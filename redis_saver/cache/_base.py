"""What RedisCache and AsyncRedisCache share: options, key schema, serializer, driver."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langgraph.cache.base import BaseCache, FullKey, Namespace, ValueT

from .._shell import Options, Shell
from ..core.engine import Engine
from ..core.integrity import Integrity
from ..core.scripts import Registry
from . import _core as core
from .keys import CacheKeys

if TYPE_CHECKING:
    from typing_extensions import Unpack

class RedisCacheBase(Shell, BaseCache[ValueT]):
    """A LangGraph node cache (``BaseCache``) on plain Redis (>= 7.0, no modules).

    Args:
        client: a redis-py client (``RedisCache``: ``redis.Redis``, ``RedisCluster`` or a
            Sentinel ``master_for`` client; ``AsyncRedisCache``: their asyncio twins), with
            ``decode_responses=False``.
        prefix: the key prefix (no braces); every key is ``<prefix>:cache{<namespace>}...``,
            so it never meets a saver's or a store's key, whatever the two prefixes.
        serde: the serializer of the values (default: LangGraph's ``JsonPlusSerializer``).
        integrity_key: bytes of at least 32, or a sequence of such keys (the first signs): each
            entry then carries a tag of its namespace and key, checked before it is
            decompressed or deserialized (``IntegrityError``: never another key's value).
        compress: store values of 256 bytes or more as one zstd frame when that saves an
            eighth or more (default); ``False`` stores the serializer's bytes as they are. Both
            read everything.
        retries: retries of a call that failed with ``ConnectionError`` (every call is
            idempotent); ``from_conn_string`` defaults to 3.
        telemetry: OpenTelemetry spans and metrics of every call (``cache_get``,
            ``cache_set``, ``cache_clear``), as the saver's: ``True`` (the global providers),
            ``False``, or a ``redis_saver.Telemetry``.
    """

    def __init__(self, client: Any, **options: Unpack[Options]) -> None:
        shared = self._options(options)
        super().__init__(serde=shared["serde"])
        self.keys = CacheKeys(shared["prefix"])
        key = shared["integrity_key"]
        self._integrity = None if key is None else Integrity(key, shared["prefix"])
        # the saver's driver and engine, running the cache's scripts as EVALSHA (EVAL after NOSCRIPT)
        self._engine: Engine = self._attach(client, shared, None, Registry(core.scripts())).engine

    # the plans of the three operations, which the shells hand to their driver's run()
    def _get(self, keys: Sequence[FullKey]) -> core.Plan[dict[FullKey, ValueT]]:
        return core.get(self.keys, self.serde, keys, self._engine.cluster, self._integrity)

    def _set(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> core.Plan[None]:
        return core.set_(self.keys, self.serde, pairs, self.compress, self._engine.cluster, self._integrity)

    def _clear(self, namespaces: Sequence[Namespace] | None) -> core.Plan[None]:
        return core.clear(self.keys, namespaces)
