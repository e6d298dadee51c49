"""AsyncRedisStore: the asyncio store (its sync methods run on its loop from other threads)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Iterable, Sequence
from typing import Any, TypeVar

import redis.exceptions
from langgraph.store.base import Op, PutOp, Result

from .._shell import LoopBound
from ..core.plans import Plan
from ._base import RedisStoreBase, op_name
from ._plans import Embedding, Prepared, as_namespace, batch_plan, merged, prepare, probe_plan
from ._rebuild import BUDGET, rebuild_plan
from ._transfer import StoredItem, export_plan, import_plan

T = TypeVar("T")

Puts = dict[tuple[tuple[str, ...], str], tuple[int, PutOp, list[bytes]]]
Texts = dict[str, list[tuple[int, str]]]
# a merged batch that failed so gives each call its error (the connection or the server failed
# it, not one call's input: each call alone would only retry what the engine's retries did)
_LOST = (OSError, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
MERGE_OPS = 2048  # puts one merged batch takes at most (``_Writes``)


class _Writes:
    """The write-only calls of one event-loop iteration, run as one batch (``AsyncRedisStore._ajoin``)."""

    __slots__ = ("loop", "calls", "keys", "nops", "done", "before")

    def __init__(self, loop: asyncio.AbstractEventLoop, before: asyncio.Future[None] | None) -> None:
        self.loop = loop
        # each call's future, its count of ops and its prepared puts and texts to embed (the
        # rest of its ``Prepared`` is freed: fewer objects per waiting call)
        self.calls: list[tuple[asyncio.Future[list[Result]], int, Puts, Texts]] = []
        self.keys: set[tuple[tuple[str, ...], str]] = set()
        self.nops = 0
        self.done: asyncio.Future[None] = loop.create_future()  # set once the batch ended
        self.before = before  # the batch before this one, which this one waits for

    def prepared(self, at: int | None = None) -> Prepared:
        """The batch of call ``at``, or of all of them (merged)."""
        calls = self.calls if at is None else [self.calls[at]]
        preps = [Prepared([op for _, op, _ in puts.values()], puts, Embedding(texts)) for _, _, puts, texts in calls]
        return preps[0] if len(preps) == 1 else merged(preps)


class AsyncRedisStore(LoopBound, RedisStoreBase):
    """Asyncio twin of :class:`RedisStore` over ``redis.asyncio`` clients.

    It binds to the running loop at construction, else to the loop of its first async call;
    its sync methods may be called from other threads while that loop runs (as
    ``AsyncPostgresStore``), and raise ``asyncio.InvalidStateError`` on the loop's own thread.
    """

    _async_hint = "the async interface (`await store.aget(...)`)"

    async def setup(self) -> None:
        """Async :meth:`RedisStore.setup`."""
        self._bind()
        await self._driver.run(self._setup())
        await self._avsets()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        self._bind()
        prep = prepare(self._cfg, ops)
        if not prep.ops:
            return []
        if all(type(op) is PutOp for op in prep.ops):
            w, joined = self._ajoin(prep)
            del ops, prep  # (not kept alive while the call waits)
            if w is None:
                return await joined
            return await self._alead(w, joined)
        return await self._arun(prep)

    async def _arun(self, prep: Prepared) -> list[Result]:
        await self._avsets()
        out = await self._driver.run(batch_plan(self._cfg, prep, *await self._aembed(prep)), op_name(prep.ops))
        for key, plan in self._fills():
            self._spawn(self._afill(key, plan))
        return out

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    _writes: _Writes | None = None  # the write-only calls of this loop iteration
    _last_writes: _Writes | None = None  # the last batch of them made

    def _ajoin(self, prep: Prepared) -> tuple[_Writes | None, asyncio.Future[list[Result]]]:
        """A write-only call (puts and deletes, checked and encoded: its own input errors were
        raised to it alone) joins the other write-only calls of this event-loop iteration, as
        AsyncPostgresStore and AsyncSqliteStore batch the calls of one iteration: a burst of N
        concurrent puts costs a few script calls and N small waiting calls (not N plans, each of
        dozens of objects the garbage collector walks again and again while they wait). The
        call that opens a batch leads it (``_alead``: the batch is returned to it). The calls of
        one batch put disjoint keys (a call that puts a key the batch has opens the next
        batch), so the batch writes what the calls would in their order; a batch starts once
        the one before it ended, so the calls of a burst are applied in the order they were
        made. If a batch fails, each of its calls runs alone and gets its own outcome (unless
        the connection failed it)."""
        loop = asyncio.get_running_loop()
        w, lead = self._writes, False
        if w is None or w.loop is not loop or w.nops >= MERGE_OPS or not w.keys.isdisjoint(prep.puts):
            last = self._last_writes
            before = last.done if last is not None and last.loop is loop and not last.done.done() else None
            w = self._writes = self._last_writes = _Writes(loop, before)
            lead = True
        fut: asyncio.Future[list[Result]] = loop.create_future()
        w.calls.append((fut, len(prep.ops), prep.puts, prep.embed.texts))
        w.keys.update(prep.puts)
        w.nops += len(prep.puts)
        return (w if lead else None), fut

    async def _alead(self, w: _Writes, fut: asyncio.Future[list[Result]]) -> list[Result]:
        """Run the batch this call opened, once the other calls of the iteration joined it: a
        lone call in this task, as without batching; several in a task of their own (so that a
        cancelled leader does not leave the others waiting)."""
        try:
            await asyncio.sleep(0)  # the other tasks of this iteration run: they join
        except BaseException:
            if self._writes is w:
                self._writes = None
            w.calls.pop(0)  # cancelled before anything was sent: this call's puts go too
            self._spawn(self._arun_writes(w))
            raise
        if self._writes is w:
            self._writes = None
        if len(w.calls) > 1:
            self._spawn(self._arun_writes(w))
            return await asyncio.shield(fut)
        try:
            if w.before is not None:
                await asyncio.wait([w.before])
            await self._arun(w.prepared())
            return [None] * w.calls[0][1]  # (a put's result; one per op, a key put twice too)
        finally:
            w.done.set_result(None)

    async def _arun_writes(self, w: _Writes) -> None:
        calls = w.calls
        try:
            if w.before is not None:
                await asyncio.wait([w.before])  # (its outcome is its calls'; waiting does not cancel it)
            if not calls:
                return
            try:
                await self._arun(w.prepared())
                outcomes: list[Any] = [None] * len(calls)
            except Exception as e:
                if len(calls) == 1 or isinstance(e, _LOST):  # (each call alone would retry what failed)
                    outcomes = [e] * len(calls)
                else:  # each call alone: an error of one call's puts (its embedding...) is its own
                    outcomes = await asyncio.gather(
                        *[self._arun(w.prepared(at)) for at in range(len(calls))], return_exceptions=True
                    )
        except BaseException:  # cancelled (the loop closing): so are the calls waiting
            for fut, _, _, _ in calls:
                fut.cancel()
            raise
        finally:
            w.done.set_result(None)
        for (fut, nops, _, _), out in zip(calls, outcomes, strict=True):
            if fut.done():  # (its caller was cancelled)
                continue
            if isinstance(out, BaseException):
                fut.set_exception(out)
            else:
                fut.set_result([None] * nops)

    async def _afill(self, key: tuple[int, bytes], plan: Plan[bool]) -> None:
        """A background fill of the vector cache (``_fills``), as a task of the store's loop."""
        error: BaseException | None = None
        try:
            await self._driver.run(plan, "store.fill")
        except Exception as e:  # noqa: BLE001 - searches go on from the sets; the next repeated one asks again
            error = e
        finally:
            self._filled(key, error)

    async def _arelease(self) -> None:
        """``from_conn_string``'s exit: no fill starts any more, and those under way end at their
        next page (one bounded call) before the client closes."""
        self._cfg.state.closed = True
        await self._asettle()

    async def _asettle(self) -> None:
        """Wait for the background fills under way (tests, benchmarks)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    _probing: asyncio.Future[bool] | None = None  # the probe under way

    async def _avsets(self) -> None:
        """Async :meth:`RedisStore._vsets`: the first call's probe, which the calls of other
        tasks meanwhile await (shielded: a cancelled caller does not cancel it)."""
        if self._cfg.state.vsets is not None:
            return
        if self._probing is None or self._probing.get_loop() is not asyncio.get_running_loop():  # (a new loop)
            self._probing = asyncio.ensure_future(self._driver.run(probe_plan(self._cfg), "store.probe"))
        probing = self._probing
        try:
            self._cfg.state.vsets = await asyncio.shield(probing)
        finally:
            failed = probing.done() and (probing.cancelled() or probing.exception() is not None)
            if failed and self._probing is probing:
                self._probing = None  # the next call asks again

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._sync(self.abatch(list(ops)))

    async def aexport_items(
        self, namespace_prefix: Sequence[str] = (), *, failed: list[tuple[tuple[str, ...], str, str]] | None = None
    ) -> AsyncIterator[StoredItem]:
        """Async :meth:`RedisStore.export_items`."""
        self._bind()
        plan = export_plan(self._cfg, as_namespace(namespace_prefix, "prefix"), failed)
        async for item in self._driver.iterate(plan, "store.export"):
            yield item

    async def aimport_items(self, items: Iterable[StoredItem]) -> int:
        """Async :meth:`RedisStore.import_items`."""
        self._bind()
        await self._avsets()
        return await self._driver.run(import_plan(self._cfg, list(items)), "store.import")

    async def arebuild_vector_sets(
        self, namespace_prefix: Sequence[str] = (), *, budget: int = BUDGET, hnsw: tuple[int, int] | None = None
    ) -> dict[tuple[str, ...], str]:
        """Async :meth:`RedisStore.rebuild_vector_sets`."""
        self._bind()
        await self._avsets()
        if not self._cfg.state.vsets:
            raise ValueError("vector sets are off (vector_sets=False, or the server has no VADD)")
        return await self._driver.run(
            rebuild_plan(self._cfg, as_namespace(namespace_prefix, "prefix"), budget, hnsw), "store.rebuild"
        )
