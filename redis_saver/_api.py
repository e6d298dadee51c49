"""The public methods of both savers, written once.

Each method builds its operation's plan (``core/plans.py``) and hands it to one of four hooks,
the saver class's I/O shell: ``_call`` / ``_iter`` from sync code, ``_acall`` / ``_aiter``
from async code. ``RedisSaver`` performs plans with its sync driver (its ``a*`` methods in a
worker thread); ``AsyncRedisSaver`` with its asyncio driver (its sync methods bridged onto the
saver's loop from other threads). A plan does nothing until it is driven, so its argument
checks run where the hook runs it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from ._base import RedisSaverBase
from .core.plans import Plan, RewriteStats

T = TypeVar("T")


class SaverAPI(RedisSaverBase):
    """``BaseCheckpointSaver``'s methods (and redis_saver's own: ``pin``, ``rewrite_values``...),
    sync and async, over the four hooks a saver class defines."""

    # ---- the I/O shell: defined by RedisSaver and AsyncRedisSaver ----------------------
    def _call(self, plan: Plan[T], op: str) -> T:
        raise NotImplementedError

    def _iter(self, plan: Plan[Any], op: str) -> Iterator[Any]:
        raise NotImplementedError

    async def _acall(self, plan: Plan[T], op: str) -> T:
        raise NotImplementedError

    def _aiter(self, plan: Plan[Any], op: str) -> AsyncIterator[Any]:
        raise NotImplementedError

    # ---- sync API --------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """A checkpoint with its channel values, metadata, parent and pending writes.

        Args:
            config: ``{"configurable": {"thread_id": ..., "checkpoint_ns": ...}}``, with
                ``checkpoint_id`` for that checkpoint, else the namespace's latest.

        Returns:
            The checkpoint tuple (pending writes in ``writes_sort_key`` order), or ``None``.

        Raises:
            (A thread that lost a key to eviction reads as absent: it is forgotten whole.)

        Example:
            >>> saver.get_tuple({"configurable": {"thread_id": "t-1"}}).checkpoint["id"]
        """
        return self._call(self._plans._plan_get_tuple(config), "get_tuple")

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by id), filtered inside Redis, a page per round trip.

        Args:
            config: one thread (``thread_id``; with ``checkpoint_ns`` only that namespace,
                with ``checkpoint_id`` only that checkpoint), or ``None`` for every thread.
            filter: metadata key/value pairs that must all match (``None`` also matches a
                missing key).
            before: only checkpoints whose id sorts before this config's ``checkpoint_id``.
            limit: at most this many.

        Example:
            >>> [t.metadata["step"] for t in saver.list({"configurable": {"thread_id": "t-1"}}, limit=3)]
        """
        return self._iter(self._plans._plan_list(config, filter=filter, before=before, limit=limit), "list")

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint and the values of the channels in ``new_versions``, in one atomic
        script (and, with ``history="latest"``, drop what the latest no longer needs).

        Args:
            config: the parent's config (its ``checkpoint_id`` becomes the parent).
            checkpoint: the checkpoint; its ``id`` must not be its parent's.
            metadata: its metadata (a dict with str keys).
            new_versions: the channels whose values changed, with their new versions.

        Returns:
            The stored checkpoint's config.

        Raises:
            ValueError / TypeError: bad arguments (nothing is written).
            ConflictError: ``fencing=True`` and another writer moved the thread on.
            ReplicationTimeoutError: fewer replicas than ``wait_for_replicas`` acknowledged.
        """
        return self._call(self._plans._plan_put(config, checkpoint, metadata, new_versions), "put")

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Store a task's pending writes against a checkpoint: the first write of a
        (task, index) wins, special writes (errors, interrupts) overwrite. One atomic script.

        Args:
            config: the checkpoint's config (``checkpoint_id`` required).
            writes: ``(channel, value)`` pairs.
            task_id: the task's id.
            task_path: the task's path (it orders writes as ``writes_sort_key`` does).
        """
        self._call(self._plans._plan_put_writes(config, writes, task_id, task_path), "put_writes")

    def delete_thread(self, thread_id: str) -> None:
        """Remove every checkpoint, write and value of the thread (all namespaces), in one
        script; works when Redis is out of memory."""
        self._call(self._plans._plan_delete_thread(thread_id), "delete_thread")

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove the checkpoints whose metadata ``run_id`` is one of ``run_ids``, with their
        writes and the values nothing else references, in every thread (found through the
        per-slot run index); a thread left empty disappears."""
        self._call(self._plans._plan_delete_for_runs(run_ids), "delete_for_runs")

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every namespace, checkpoint, write and value of one thread into a new thread:
        a snapshot of the source (one read when it holds up to 256 checkpoints; a larger one
        in pages, started again if the source changes destructively meanwhile), written
        values and writes before the checkpoints that reference them.

        Raises:
            ThreadExistsError: the target exists (nothing is written); delete it first.
            CopyConflictError: a large source kept changing destructively (prune, delete...)
                during every attempt; nothing is left in the target.
        """
        self._call(self._plans._plan_copy_thread(source_thread_id, target_thread_id), "copy_thread")

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Shrink threads: ``"keep_latest"`` keeps each namespace's latest checkpoint with its
        writes and the ancestors its DeltaChannels need to rebuild their values; ``"delete"``
        removes the threads. A thread of up to 256 checkpoints is done in one atomic script, a
        larger one in bounded pages.

        Example:
            >>> saver.prune(["t-1", "t-2"])                      # keep_latest
            >>> saver.prune(["t-3"], strategy="delete")
        """
        self._call(self._plans._plan_prune(thread_ids, strategy), "prune")

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """For each channel, the writes since its nearest stored value (the seed) along the
        checkpoint's parent chain, oldest first: the base class's walk, done inside Redis (one
        call per 256 ancestors).

        Raises:
            ParentCycleError: the stored parent links form a cycle.
        """
        return self._call(self._plans._plan_delta_history(config, channels), "get_delta_channel_history")

    def pin(self, thread_id: str) -> None:
        """Pin a thread: it never expires (even under ``default_ttl``) until unpinned."""
        self._call(self._plans._plan_pin(thread_id, True), "pin")

    def unpin(self, thread_id: str) -> None:
        """Unpin a thread: it expires again ``default_ttl`` after this call."""
        self._call(self._plans._plan_pin(thread_id, False), "unpin")

    def rewrite_values(self, thread_id: str) -> RewriteStats:
        """Re-encode the values of a thread that an earlier release (or ``compress=False``)
        stored raw, in place, as this version stores them: zstd, and for a list's versions one
        stream per channel. Optional: raw values are read as they are. Bounded calls, each
        atomic; a value a writer changed meanwhile is left alone; calling it again goes on where
        a stopped call left off. The thread's expiry is left as it is.

        Returns:
            What was done: values replaced, their bytes before and the bytes written for them.
        """
        return self._call(self._plans._plan_rewrite_values(thread_id), "rewrite_values")

    def sign_thread(self, thread_id: str) -> int:
        """Sign every stored checkpoint, value and pending write of a thread with the saver's
        ``integrity_key`` (its first key), unchecked: the caller vouches for what is stored
        (data written before the key was set, or under a key being retired). Bounded calls, each
        atomic; a record a writer changed meanwhile is left alone (run it again). The thread's
        expiry is left as it is. Returns the number of records signed."""
        return int(self._call(self._plans._plan_sign_thread(thread_id), "sign_thread"))

    # ---- async API: the same semantics and errors ---------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async :meth:`get_tuple`: the same semantics and errors."""
        return await self._acall(self._plans._plan_get_tuple(config), "get_tuple")

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async :meth:`list`: the same semantics and errors."""
        plan = self._plans._plan_list(config, filter=filter, before=before, limit=limit)
        async for item in self._aiter(plan, "list"):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async :meth:`put`: the same semantics and errors."""
        return await self._acall(self._plans._plan_put(config, checkpoint, metadata, new_versions), "put")

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Async :meth:`put_writes`: the same semantics and errors."""
        await self._acall(self._plans._plan_put_writes(config, writes, task_id, task_path), "put_writes")

    async def adelete_thread(self, thread_id: str) -> None:
        """Async :meth:`delete_thread`: the same semantics and errors."""
        await self._acall(self._plans._plan_delete_thread(thread_id), "delete_thread")

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async :meth:`delete_for_runs`: the same semantics and errors."""
        await self._acall(self._plans._plan_delete_for_runs(run_ids), "delete_for_runs")

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async :meth:`copy_thread`: the same semantics and errors."""
        await self._acall(self._plans._plan_copy_thread(source_thread_id, target_thread_id), "copy_thread")

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async :meth:`prune`: the same semantics and errors."""
        await self._acall(self._plans._plan_prune(thread_ids, strategy), "prune")

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async :meth:`get_delta_channel_history`: the same semantics and errors."""
        return await self._acall(self._plans._plan_delta_history(config, channels), "get_delta_channel_history")

    async def apin(self, thread_id: str) -> None:
        """Async :meth:`pin`: the same semantics and errors."""
        await self._acall(self._plans._plan_pin(thread_id, True), "pin")

    async def aunpin(self, thread_id: str) -> None:
        """Async :meth:`unpin`: the same semantics and errors."""
        await self._acall(self._plans._plan_pin(thread_id, False), "unpin")

    async def arewrite_values(self, thread_id: str) -> RewriteStats:
        """Async :meth:`rewrite_values`: the same semantics and errors."""
        return await self._acall(self._plans._plan_rewrite_values(thread_id), "rewrite_values")

    async def asign_thread(self, thread_id: str) -> int:
        """Async :meth:`sign_thread`: the same semantics and errors."""
        return int(await self._acall(self._plans._plan_sign_thread(thread_id), "sign_thread"))
