"""Errors raised by redis_saver for its own conditions.

Misuse (a missing ``thread_id``, a wrong argument type) raises the standard ``ValueError`` /
``TypeError`` as LangGraph's own savers do, and errors from Redis itself (connection
failures, OOM, ...) propagate unchanged as ``redis.exceptions.RedisError``.
"""

from __future__ import annotations

from redis.exceptions import ClusterError

from .core.replies import Err


class RedisSaverError(Exception):
    """Base class of the conditions that redis_saver itself detects."""


class SchemaMismatchError(RedisSaverError):
    """Data in Redis was written in a storage format this version does not read."""


class MalformedReplyError(RedisSaverError):
    """A script returned a reply this version cannot parse (usually a version mix-up)."""


class IntegrityError(RedisSaverError):
    """With ``integrity_key`` set: stored data failed its integrity check (tampered, moved from
    another thread, checkpoint, channel, version, namespace or key, signed with a key not given,
    or written without a key). Nothing of it was deserialized or returned, and nothing was written."""


class ConflictError(RedisSaverError):
    """``put`` with fencing found that another writer already moved the thread on."""


class ThreadExistsError(RedisSaverError, ValueError):
    """``copy_thread`` into a thread that already exists (any of its keys is present) is refused
    before anything is written: a copy never merges into another thread (a target that was
    deleted, or expired, is a fresh thread). It is a ``ValueError`` too, as other misuse is."""


class CopyConflictError(RedisSaverError):
    """``copy_thread`` of a thread too large for one snapshot call saw its source changed
    destructively (prune, delete_for_runs, delete, expiry, a checkpoint re-put with other
    content...) on every attempt, or its target deleted or written by another while it copied:
    nothing of the copy is left in the target."""


class ParentCycleError(RedisSaverError):
    """The stored parent links of a thread form a cycle (data written by a buggy or hostile
    client): a walk of the chain stops with this error instead of running forever."""


class ReplicationTimeoutError(RedisSaverError):
    """``wait_for_replicas``: fewer replicas than asked acknowledged the write in time.

    The write is on the primary; it is not yet durable to the degree asked for."""

    def __init__(self, message: str, acked: int) -> None:
        super().__init__(message)
        self.acked = acked


class SlotMovingError(RedisSaverError, ClusterError):
    """A call on a Redis Cluster kept being refused because the hash slot of its keys was moving
    (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, redis-py's ``TTL exhausted``) for longer than the
    ``slot_move_timeout`` option. Each refusal means the call did not run, so nothing of it was
    stored; the last refusal is the ``__cause__``. A ``redis.exceptions.ClusterError`` too, as the
    refusals it stands for are."""

    def __init__(self, message: str, slot: int | None = None, key: bytes | None = None, waited: float = 0.0) -> None:
        super().__init__(message)
        self.slot = slot
        self.key = key
        self.waited = waited


class UnsupportedServerError(RedisSaverError):
    """The server lacks a feature redis_saver needs (Redis >= 7.0 / Valkey >= 7.2), or (with
    ``eviction_check="raise"``) its ``maxmemory-policy`` may evict single keys of a thread."""


class DamagedThreadError(RedisSaverError):
    """A read script found that a key of the thread was lost while the rest of it remains
    (Redis evicts whole keys: under an ``allkeys-*`` or ``volatile-*`` ``maxmemory-policy`` one
    key of a thread can go while the others stay). The saver handles it itself: it sends the
    read again in a variant that forgets the thread whole, and the read answers as if the
    thread had expired (``None``, no items). Applications do not see it; it stays exported for
    code that caught it in earlier releases."""


class ThreadEvictedError(RedisSaverError):
    """A write continues a thread that is gone: the checkpoint ``put`` names as its parent is
    not stored because the thread holds no checkpoint any more (evicted under memory pressure,
    expired, or deleted while a run used it), or the thread lost a key and this call forgot it
    whole (``put_writes``). Nothing was stored; the thread now reads as absent. Storing would
    have left a checkpoint whose unchanged channels (or DeltaChannel history) are gone, so it
    is refused: catch it to start the session again (a run from a config without
    ``checkpoint_id`` starts the thread afresh)."""

    def __init__(self, message: str, thread_id: str = "") -> None:
        super().__init__(message)
        self.thread_id = thread_id


class EvictionPolicyWarning(UserWarning):
    """The server's ``maxmemory-policy`` may evict keys of threads that must stay: ``allkeys-*``
    evicts pinned threads and threads saved without a ttl too, which are otherwise kept until
    deleted. A thread that loses a key is forgotten whole (reads answer as if it had expired),
    so nothing is read back wrong; but for durable use, choose ``noeviction`` (and size
    ``maxmemory`` for the data), or a ``volatile-*`` policy with a ttl for a session cache."""


# The error codes the Lua scripts raise (named in core/replies.py) -> their exception classes.
LUA_ERROR_CLASSES: dict[str, type[Exception]] = {
    Err.SCHEMA: SchemaMismatchError,
    Err.CONFLICT: ConflictError,
    Err.BADARG: ValueError,
    Err.CYCLE: ParentCycleError,
    Err.DAMAGED: DamagedThreadError,
    Err.EXISTS: ThreadExistsError,
}
