"""RedisSaver: the synchronous saver (its ``a*`` methods run the sync code in a worker thread)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from ._base import SAVER_OPTIONS, RedisSaverBase
from ._clients import make_sync_client
from ._drivers import SyncDriver


class RedisSaver(RedisSaverBase):
    """LangGraph checkpoint saver on plain Redis (>= 7.0, no modules).

    Every call is one EVALSHA of a Lua script (``lua/``) in the common case; every key of
    a thread shares one hash slot, so it runs unchanged on Redis Cluster.

    Options: see :class:`redis_saver._base.RedisSaverBase` (``prefix``, ``serde``, ``ttl``,
    ``history``, ``fencing``, ``wait_for_replicas``, ``wait_timeout_ms``, ``retries``).

    Example:
        >>> with RedisSaver.from_conn_string("redis://localhost:6379") as saver:
        ...     graph = builder.compile(checkpointer=saver)
    """

    _driver_cls = SyncDriver
    _driver: SyncDriver

    @classmethod
    @contextmanager
    def from_conn_string(cls, url: str, **options: Any) -> Iterator[RedisSaver]:
        """Create a saver that owns its client (``redis://``, ``rediss://``, ``unix://``,
        ``redis+cluster://`` / ``cluster=True``, ``redis+sentinel://``); closed on exit.

        Saver options (``prefix``, ``serde``, ``ttl``, ``history``, ``fencing``) are taken
        from ``options``; the rest go to the client.
        """
        saver_opts = {k: options.pop(k) for k in SAVER_OPTIONS if k in options}
        saver_opts.setdefault("retries", 3)
        client = make_sync_client(url, **options)
        try:
            yield cls(client, **saver_opts)
        finally:
            client.close()

    def setup(self) -> None:
        """Optional, idempotent: load the scripts and check the server and storage format."""
        self._driver.setup()

    # ---- sync API --------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._driver.run(self._plan_get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self._driver.iterate(self._plan_list(config, filter=filter, before=before, limit=limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._driver.run(self._plan_put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._driver.run(self._plan_put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._driver.run(self._plan_delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._driver.run(self._plan_delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._driver.run(self._plan_copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._driver.run(self._plan_prune(thread_ids, strategy))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self._driver.run(self._plan_delta_history(config, channels))

    def pin(self, thread_id: str) -> None:
        """Pin a thread: it never expires (even under ``default_ttl``) until unpinned."""
        self._driver.run(self._plan_pin(thread_id, True))

    def unpin(self, thread_id: str) -> None:
        """Unpin a thread: it expires again ``default_ttl`` after this call."""
        self._driver.run(self._plan_pin(thread_id, False))

    # ---- async API: the sync code in a worker thread -----------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        it = self.list(config, filter=filter, before=before, limit=limit)
        while (item := await asyncio.to_thread(next, it, None)) is not None:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await asyncio.to_thread(self.get_delta_channel_history, config=config, channels=channels)

    async def asetup(self) -> None:
        await asyncio.to_thread(self.setup)

    async def apin(self, thread_id: str) -> None:
        await asyncio.to_thread(self.pin, thread_id)

    async def aunpin(self, thread_id: str) -> None:
        await asyncio.to_thread(self.unpin, thread_id)
