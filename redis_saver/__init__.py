"""redis_saver: LangGraph checkpoints in plain Redis (>= 7.0, no modules).

One Lua round trip per call, every key of a thread in one hash slot (Redis Cluster,
proxies), whole-thread TTL with refresh-on-read and pinning, and a latest-only mode.
"""

from ._base import TTLConfig
from ._telemetry import Telemetry
from .aio import AsyncRedisSaver
from .errors import (
    ConflictError,
    CopyConflictError,
    DamagedThreadError,
    EvictionPolicyWarning,
    MalformedReplyError,
    ParentCycleError,
    RedisSaverError,
    ReplicationTimeoutError,
    SchemaMismatchError,
    ThreadExistsError,
    UnsupportedServerError,
)
from .keys import FORMAT_VERSION, READ_FORMATS, KeySchema
from .saver import RedisSaver

__all__ = [
    "FORMAT_VERSION",
    "READ_FORMATS",
    "AsyncRedisSaver",
    "ConflictError",
    "CopyConflictError",
    "DamagedThreadError",
    "EvictionPolicyWarning",
    "KeySchema",
    "MalformedReplyError",
    "ParentCycleError",
    "RedisSaver",
    "RedisSaverError",
    "ReplicationTimeoutError",
    "SchemaMismatchError",
    "TTLConfig",
    "ThreadExistsError",
    "Telemetry",
    "UnsupportedServerError",
]
