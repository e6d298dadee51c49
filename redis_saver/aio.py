"""AsyncRedisSaver: the asyncio saver (its sync methods work from other threads)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from ._base import SAVER_OPTIONS, RedisSaverBase
from ._clients import make_async_client
from ._drivers import AsyncDriver
from ._plans import Plan, RewriteStats

T = TypeVar("T")

# the default of AsyncRedisSaver(auto_pipeline=...): on, as it measured faster at concurrency 1 too
# (docs/architecture.md#automatic-pipelining-asyncredissaver)
AUTO_PIPELINE = True


class AsyncRedisSaver(RedisSaverBase):
    """Asyncio twin of :class:`redis_saver.RedisSaver` over ``redis.asyncio`` clients.

    It can be constructed outside a running event loop; it binds to the running loop at
    construction, else to the loop of its first async call. Its sync methods (``get_tuple``,
    ``put``, ...) may be called from other threads while that loop runs (as
    ``AsyncPostgresSaver``); on the loop's own thread they raise ``asyncio.InvalidStateError``
    instead of deadlocking.

    Script calls of concurrent tasks are pipelined automatically (``auto_pipeline``, on by
    default): one connection per server (per cluster primary) carries them, those issued in
    the same event-loop iteration in one write.
    """

    _driver_cls = AsyncDriver
    _driver: AsyncDriver
    loop: asyncio.AbstractEventLoop | None

    def _set_auto_pipeline(self, auto_pipeline: bool | None) -> None:
        if auto_pipeline is None:
            auto_pipeline = AUTO_PIPELINE
        if not isinstance(auto_pipeline, bool):
            raise TypeError("auto_pipeline must be True or False")
        self.auto_pipeline = auto_pipeline
        self._driver.set_auto_pipeline(auto_pipeline)

    def _bound(self) -> None:
        try:  # bound now when built inside a running loop (as AsyncPostgresSaver), else lazily
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None

    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls, url: str, **options: Any) -> AsyncIterator[AsyncRedisSaver]:
        """Async twin of :meth:`RedisSaver.from_conn_string`; the client is closed on exit."""
        saver_opts = {k: options.pop(k) for k in SAVER_OPTIONS if k in options}
        saver_opts.setdefault("retries", 3)
        client = await make_async_client(url, **options)
        try:
            yield cls(client, **saver_opts)
        finally:
            await client.aclose()

    def _bind(self) -> None:
        if self.loop is None or self.loop.is_closed():
            self.loop = asyncio.get_running_loop()

    async def _run(self, plan: Plan[T], op: str) -> T:
        self._bind()
        return await self._driver.run(plan, op)

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and running is self.loop:
            coro.close()
            raise asyncio.InvalidStateError(
                "Synchronous calls to AsyncRedisSaver are only allowed from a different thread. "
                "From the main thread, use the async interface (e.g. `await saver.aget_tuple(...)`, "
                "`await graph.ainvoke(...)`)."
            )
        if self.loop is None or self.loop.is_closed() or not self.loop.is_running():
            coro.close()
            raise asyncio.InvalidStateError(
                "AsyncRedisSaver's sync methods run on the saver's event loop from another thread; "
                "that loop is not running. Use RedisSaver for synchronous code."
            )
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def asetup(self) -> None:
        """Optional, idempotent: load the scripts and check the server and storage format."""
        self._bind()
        await self._driver.setup()

    # ---- async API -------------------------------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async :meth:`RedisSaver.get_tuple`: the same semantics and errors."""
        return await self._run(self._plan_get_tuple(config), "get_tuple")

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async :meth:`RedisSaver.list`: the same semantics and errors."""
        self._bind()
        plan = self._plan_list(config, filter=filter, before=before, limit=limit)
        async for item in self._driver.iterate(plan, "list"):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async :meth:`RedisSaver.put`: the same semantics and errors."""
        return await self._run(self._plan_put(config, checkpoint, metadata, new_versions), "put")

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Async :meth:`RedisSaver.put_writes`: the same semantics and errors."""
        await self._run(self._plan_put_writes(config, writes, task_id, task_path), "put_writes")

    async def adelete_thread(self, thread_id: str) -> None:
        """Async :meth:`RedisSaver.delete_thread`: the same semantics and errors."""
        await self._run(self._plan_delete_thread(thread_id), "delete_thread")

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async :meth:`RedisSaver.delete_for_runs`: the same semantics and errors."""
        await self._run(self._plan_delete_for_runs(run_ids), "delete_for_runs")

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async :meth:`RedisSaver.copy_thread`: the same semantics and errors."""
        await self._run(self._plan_copy_thread(source_thread_id, target_thread_id), "copy_thread")

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async :meth:`RedisSaver.prune`: the same semantics and errors."""
        await self._run(self._plan_prune(thread_ids, strategy), "prune")

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async :meth:`RedisSaver.get_delta_channel_history`: the same semantics and errors."""
        return await self._run(self._plan_delta_history(config, channels), "get_delta_channel_history")

    async def arewrite_values(self, thread_id: str) -> RewriteStats:
        """Async :meth:`RedisSaver.rewrite_values`: the same semantics and errors."""
        return await self._run(self._plan_rewrite_values(thread_id), "rewrite_values")

    async def apin(self, thread_id: str) -> None:
        """Pin a thread: it never expires (even under ``default_ttl``) until unpinned."""
        await self._run(self._plan_pin(thread_id, True), "pin")

    async def aunpin(self, thread_id: str) -> None:
        """Unpin a thread: it expires again ``default_ttl`` after this call."""
        await self._run(self._plan_pin(thread_id, False), "unpin")

    # ---- sync API: bridged onto the saver's loop from other threads ---------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Sync :meth:`aget_tuple`, for other threads while the saver's event loop runs."""
        return self._sync(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Sync :meth:`alist`, for other threads while the saver's event loop runs."""

        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.alist(config, filter=filter, before=before, limit=limit)]

        yield from self._sync(collect())

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Sync :meth:`aput`, for other threads while the saver's event loop runs."""
        return self._sync(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Sync :meth:`aput_writes`, for other threads while the saver's event loop runs."""
        self._sync(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Sync :meth:`adelete_thread`, for other threads while the saver's event loop runs."""
        self._sync(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Sync :meth:`adelete_for_runs`, for other threads while the saver's event loop runs."""
        self._sync(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Sync :meth:`acopy_thread`, for other threads while the saver's event loop runs."""
        self._sync(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Sync :meth:`aprune`, for other threads while the saver's event loop runs."""
        self._sync(self.aprune(thread_ids, strategy=strategy))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Sync :meth:`aget_delta_channel_history`, for other threads while the saver's event loop runs."""
        return self._sync(self.aget_delta_channel_history(config=config, channels=channels))

    def rewrite_values(self, thread_id: str) -> RewriteStats:
        """Sync :meth:`arewrite_values`, for other threads while the saver's event loop runs."""
        return self._sync(self.arewrite_values(thread_id))

    def pin(self, thread_id: str) -> None:
        """Sync :meth:`apin`, for other threads while the saver's event loop runs."""
        self._sync(self.apin(thread_id))

    def unpin(self, thread_id: str) -> None:
        """Sync :meth:`aunpin`, for other threads while the saver's event loop runs."""
        self._sync(self.aunpin(thread_id))

    def setup(self) -> None:
        """Sync :meth:`asetup`, for other threads while the saver's event loop runs."""
        self._sync(self.asetup())
