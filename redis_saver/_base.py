"""Configuration shared by RedisSaver and AsyncRedisSaver."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver

from ._shell import Options, Shell
from .core.integrity import Integrity
from .core.plans import Plans
from .core.scripts import lua_scripts
from .core.ttl import TTLConfig
from .core.values import StreamCache
from .keys import KeySchema

if TYPE_CHECKING:
    from typing_extensions import Unpack


class RedisSaverBase(Shell, BaseCheckpointSaver[str]):
    """State and plans shared by both savers; subclasses add only the I/O shell. The plans are
    those of a frozen context of the saver's options (``_plans``).

    Args:
        client: a redis-py client created with ``decode_responses=False`` (the default):
            ``redis.Redis`` / ``redis.cluster.RedisCluster`` for ``RedisSaver``, their
            ``redis.asyncio`` twins for ``AsyncRedisSaver``; a Sentinel ``master_for`` client.
        prefix: namespace of all keys, to separate applications sharing one Redis.
        serde: serializer (default ``JsonPlusSerializer``); ``EncryptedSerializer`` works.
        ttl: ``{"default_ttl": minutes, "refresh_on_read": bool}`` or a ``TTLConfig``.
        history: ``"full"`` keeps every checkpoint; ``"latest"`` keeps only the latest of
            each namespace (plus the writes needed to resume it).
        fencing: when true, ``put`` fails with ``ConflictError`` if the thread's latest
            checkpoint is no longer the parent the writer started from. "Latest" is the
            namespace's head: the checkpoint its last fenced put stored, whatever the order
            of the ids (clock skew), else (none, deleted, or an unfenced put since) the
            greatest id; see lua/put.lua.
        wait_for_replicas: when > 0, ``put`` and ``put_writes`` return only after that
            many replicas acknowledged the write (Redis ``WAIT``), else raise
            ``ReplicationTimeoutError`` after ``wait_timeout_ms``.
        retries: how many times to retry a call that failed with ``ConnectionError``
            (short exponential backoff; safe, as every script is idempotent). Timeouts are
            never retried. ``from_conn_string`` defaults to 3.
        eviction_check: what ``setup()`` or the saver's first call does when the server's
            ``maxmemory-policy`` may evict single keys of a thread (``allkeys-*``; ``volatile-*``
            for threads with a ttl): ``"warn"`` (an ``EvictionPolicyWarning`` and a log
            record, once per saver), ``"raise"`` (``UnsupportedServerError`` on every call
            until the policy is changed) or ``"off"`` (not asked: no extra round trip).
        telemetry: OpenTelemetry spans and metrics of every call (``pip install
            'redis-saver[otel]'``; a no-op without the package or a configured provider):
            ``True`` (the global providers), ``False``, or a ``Telemetry(tracer_provider=...,
            meter_provider=..., thread_id=False)`` to choose providers or leave thread ids out.
        compress: store values compressed (default): writes and checkpoints as zstd frames,
            a channel's versions as one stream per channel (a new version of a list costs
            its new bytes). ``False`` stores serde bytes as they are; both read everything.
        auto_pipeline: ``AsyncRedisSaver`` only: script calls that concurrent tasks issue in the
            same event-loop iteration leave in one write on one connection per server (per
            cluster node), each reply going back to its own call (``transport/autopipe.py``); ``False``:
            each call takes a pooled connection of its own, as redis-py does; ``None``
            (default): on (``redis_saver._shell.AUTO_PIPELINE``).
        functions: run the Lua scripts as one Redis function library (default): loaded once
            per server with ``FUNCTION LOAD`` (by ``setup()`` or the first call that finds it
            missing), each call one ``FCALL``, which spares the server re-creating the scripts'
            helpers on every call (about a sixth of a put's script time). Where ``FUNCTION
            LOAD`` is refused, the saver goes on with ``EVALSHA``, as with ``False``.
        cache_bytes: bound of the per-saver cache of the streams last read or written (LRU,
            by the streams' raw bytes; a stream above a quarter of it is not kept). A put of
            a channel the saver has not seen starts a new stream instead of a delta.
        integrity_key: bytes of at least 32, or a sequence of such keys (the first signs new
            data, every one verifies: key rotation). Every checkpoint, value and pending write
            is then stored with a tag bound to where it belongs (prefix, thread, namespace,
            checkpoint id, channel and version, task id and write index), checked before
            anything is deserialized: data that fails, or carries no tag, raises
            ``IntegrityError`` (docs/deployment.md "Trust model"). ``None`` (default): no tags
            are written or checked; tagged data reads as any other. ``copy_thread`` with a
            key checks each record in the client and signs it for the target.
    """

    def __init__(
        self,
        client: Any,
        *,
        ttl: TTLConfig | Mapping[str, Any] | None = None,
        history: Literal["full", "latest"] = "full",
        fencing: bool = False,
        wait_for_replicas: int = 0,
        wait_timeout_ms: int = 1000,
        eviction_check: Literal["warn", "raise", "off"] = "warn",
        cache_bytes: int = 64 << 20,
        functions: bool = True,
        **options: Unpack[Options],
    ) -> None:
        shared = self._options(options)
        super().__init__(serde=shared["serde"])
        if isinstance(wait_for_replicas, bool) or not isinstance(wait_for_replicas, int) or wait_for_replicas < 0:
            raise ValueError("wait_for_replicas must be an int >= 0")
        if not isinstance(wait_timeout_ms, int) or wait_timeout_ms < 0:
            raise ValueError("wait_timeout_ms must be an int >= 0 (0 = wait forever)")
        wait = (wait_for_replicas, wait_timeout_ms) if wait_for_replicas else None
        keys = KeySchema(shared["prefix"])
        key = shared["integrity_key"]
        integrity = None if key is None else Integrity(key, keys.prefix)
        ttl_config = TTLConfig.coerce(ttl)
        if history not in ("full", "latest"):
            raise ValueError(f"history must be 'full' or 'latest', got {history!r}")
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0:
            raise ValueError("cache_bytes must be an int >= 0")
        driver = self._attach(client, shared, keys, lua_scripts(functions))
        driver.set_eviction_check(eviction_check, ttl_config.ttl_ms > 0)
        self._context = Plans(
            self.serde,
            keys,
            ttl_config,
            history,
            bool(fencing),
            self.compress,
            StreamCache(cache_bytes),
            wait,
            integrity,
        )

    # the options the plans read live in their frozen context, once: read-only views here
    keys = property(lambda self: self._context.keys, doc="The key schema (``KeySchema``).")
    ttl = property(lambda self: self._context.ttl, doc="The ``TTLConfig``.")
    history = property(lambda self: self._context.history, doc='``"full"`` or ``"latest"``.')
    fencing = property(lambda self: self._context.fencing, doc="Whether puts are fenced.")

    @property
    def _plans(self) -> Plans:
        """The plans over this saver's frozen context; built again with the saver's ``serde`` when
        that was replaced (``with_allowlist`` copies a saver and sets its ``serde``)."""
        plans = self._context
        if plans.serde is not self.serde:
            plans = self._context = dataclasses.replace(plans, serde=self.serde)
        return plans

    def get_next_version(self, current: str | None, channel: None) -> str:
        """String versions: the counter's digit count, its digits, ``.``, 6 random letters or digits
        (``"17.f0cA2z"`` for 7: 9 bytes; InMemorySaver's ``"<counter:032>.<random float>"`` takes 51).

        The digit count in front makes them sort like the counters, and every one of them sorts
        above any version in the zero-padded forms earlier releases wrote (which start with
        ``0``), so threads written with those go on. LangGraph compares versions as strings
        (``max`` over a checkpoint's versions, ``>`` against ``versions_seen``). A version
        appears some 20 times per checkpoint (records, serialized ``channel_versions`` and
        ``versions_seen``, blob field names): the short form saves ~0.5 KB of a 5-channel
        checkpoint. The random part (35 bits) keeps forks of one channel at the same counter apart.
        Other savers parse versions as zero-padded integers: a thread moved to one needs its
        versions rewritten, which ``redis-saver migrate --to`` does (redis_saver's own export /
        import and copies keep them).
        """
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = _counter(current)
        digits = str(current_v + 1)
        n = len(digits)
        r = random.getrandbits(36)
        tail = "".join([_B62[(r >> (6 * i)) % 62] for i in range(6)])
        return f"{n if n < 10 else chr(87 + n)}{digits}.{tail}"


_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _counter(version: str) -> int:
    """The counter of a version: ``get_next_version``'s form (a digit count, then the digits),
    or a plain (zero-padded) integer as InMemorySaver and earlier releases write."""
    head = version.split(".", 1)[0]
    if len(head) >= 2 and head[0] != "0":
        n = int(head[0]) if head[0].isdigit() else ord(head[0]) - 87
        if n == len(head) - 1:
            return int(head[1:])
    return int(head)
