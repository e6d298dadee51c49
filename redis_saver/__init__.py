"""redis_saver: LangGraph checkpoints in plain Redis (>= 7.0, no modules).

One Lua round trip per call, every key of a thread in one hash slot (Redis Cluster,
proxies), whole-thread TTL with refresh-on-read and pinning, and a latest-only mode.
``RedisStore`` / ``AsyncRedisStore``: LangGraph's long-term memory (``BaseStore``) on the same
Redis (docs/store.md).
"""

from .aio import AsyncRedisSaver
from .cache import AsyncRedisCache, RedisCache
from .core.ttl import TTLConfig
from .errors import (
    ConflictError,
    CopyConflictError,
    DamagedThreadError,
    EvictionPolicyWarning,
    IntegrityError,
    MalformedReplyError,
    ParentCycleError,
    RedisSaverError,
    ReplicationTimeoutError,
    SchemaMismatchError,
    SlotMovingError,
    ThreadEvictedError,
    ThreadExistsError,
    UnsupportedServerError,
)
from .keys import FORMAT_VERSION, READ_FORMATS, KeySchema
from .saver import RedisSaver
from .store import AsyncRedisStore, RedisStore
from .telemetry import Telemetry

__all__ = [
    "FORMAT_VERSION",
    "READ_FORMATS",
    "AsyncRedisCache",
    "AsyncRedisSaver",
    "AsyncRedisStore",
    "ConflictError",
    "CopyConflictError",
    "DamagedThreadError",
    "EvictionPolicyWarning",
    "IntegrityError",
    "KeySchema",
    "MalformedReplyError",
    "ParentCycleError",
    "RedisCache",
    "RedisSaver",
    "RedisSaverError",
    "RedisStore",
    "ReplicationTimeoutError",
    "SchemaMismatchError",
    "SlotMovingError",
    "TTLConfig",
    "ThreadExistsError",
    "Telemetry",
    "ThreadEvictedError",
    "UnsupportedServerError",
]
