"""RedisStore: the synchronous store (its ``a*`` methods run the sync code in a worker thread)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Iterator, Sequence

from langgraph.store.base import Op, Result

from .._shell import SyncShell
from ..core.plans import Plan
from ._base import RedisStoreBase, op_name
from ._plans import as_namespace, batch_plan, prepare, probe_plan
from ._rebuild import BUDGET, rebuild_plan
from ._transfer import StoredItem, export_plan, import_plan


class RedisStore(SyncShell, RedisStoreBase):
    """LangGraph long-term memory (``BaseStore``) on plain Redis (>= 7.0, no modules).

    A batch is one script call per shard it touches, sent in one round trip in the common case;
    semantics as InMemoryStore's (see docs/store.md). Options: :class:`RedisStoreBase`.

    Example:
        >>> with RedisStore.from_conn_string("redis://localhost:6379") as store:
        ...     graph = builder.compile(checkpointer=saver, store=store)
    """

    def setup(self) -> None:
        """Optional, idempotent: load the scripts; record the store's layout (shards) under its
        prefix, or raise ``SchemaMismatchError`` if another layout is recorded there; ask the
        server whether it keeps vector sets (else the first call asks)."""
        self._driver.run(self._setup())
        self._vsets()

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        prep = prepare(self._cfg, ops)
        if not prep.ops:
            return []
        self._vsets()
        out = self._driver.run(batch_plan(self._cfg, prep, *self._embed(prep)), op_name(prep.ops))
        for key, plan in self._fills():
            t = threading.Thread(target=self._fill, args=(key, plan), name="redis_saver.store fill", daemon=True)
            self._background.add(t)
            t.start()
        return out

    def _fill(self, key: tuple[int, bytes], plan: Plan[bool]) -> None:
        """A background fill of the vector cache (``_fills``), on its own thread."""
        error: BaseException | None = None
        try:
            self._driver.run(plan, "store.fill")
        except Exception as e:  # noqa: BLE001 - searches go on from the sets; the next repeated one asks again
            error = e
        finally:
            self._filled(key, error)
            self._background.discard(threading.current_thread())

    def _release(self) -> None:
        """``from_conn_string``'s exit: no fill starts any more, and those under way end at their
        next page (one bounded call) before the client closes."""
        self._cfg.state.closed = True
        self._settle()

    def _settle(self, timeout: float | None = None) -> None:
        """Wait for the background fills under way (tests, benchmarks)."""
        for t in list(self._background):
            t.join(timeout)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _vsets(self) -> None:
        """Ask the server once whether it keeps vector sets (``probe_plan``): the first call
        asks, calls of other threads meanwhile wait for its answer (a failed probe: the next
        call asks again)."""
        if self._cfg.state.vsets is None:
            with self._probe_lock:
                if self._cfg.state.vsets is None:
                    self._cfg.state.vsets = self._driver.run(probe_plan(self._cfg), "store.probe")

    def export_items(
        self, namespace_prefix: Sequence[str] = (), *, failed: list[tuple[tuple[str, ...], str, str]] | None = None
    ) -> Iterator[StoredItem]:
        """Every item under ``namespace_prefix`` as stored (value bytes, times, ttl, vectors),
        shard by shard, a page per call; for ``import_items`` (and the CLI's export). With an
        integrity key, an item failing its check raises ``IntegrityError``; given ``failed`` (a
        list), it is added there as (namespace, key, the error) and left out instead (the CLI's
        ``store verify``)."""
        plan = export_plan(self._cfg, as_namespace(namespace_prefix, "prefix"), failed)
        return self._driver.iterate(plan, "store.export")

    def import_items(self, items: Iterable[StoredItem]) -> int:
        """Write items as ``export_items`` gave them (replacing items already there), in one
        round trip per call of this method; returns how many."""
        self._vsets()
        return self._driver.run(import_plan(self._cfg, list(items)), "store.import")

    def rebuild_vector_sets(
        self, namespace_prefix: Sequence[str] = (), *, budget: int = BUDGET, hnsw: tuple[int, int] | None = None
    ) -> dict[tuple[str, ...], str]:
        """Bring the namespaces under ``namespace_prefix`` that are out of vector sets back into
        them (their semantic searches scan meanwhile): a resumable rebuild of each one's set, one
        script call per page of at most ``budget`` vectors, racing writers safely. Returns each
        namespace's outcome: ``"done"`` (its set is complete: searches use it), ``"ended"``
        (something made it incomplete meanwhile, an eviction, a writer with ``vector_sets=False``,
        a vector the set cannot hold: still out, call again), ``"none"`` (no items). Needs a
        server with vector sets (Redis 8) and ``vector_sets=True``. ``hnsw=(M, ef_construction)``
        (default: the index's ``ann_index_config``, if any): sets are made with these HNSW
        parameters, and complete sets made with others are made again."""
        self._vsets()
        if not self._cfg.state.vsets:
            raise ValueError("vector sets are off (vector_sets=False, or the server has no VADD)")
        return self._driver.run(
            rebuild_plan(self._cfg, as_namespace(namespace_prefix, "prefix"), budget, hnsw), "store.rebuild"
        )
