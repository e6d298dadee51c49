"""State shared by RedisStore and AsyncRedisStore; the subclasses add only the I/O shell."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Generator, Mapping
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.store.base import BaseStore, GetOp, IndexConfig, ListNamespacesOp, Op, PutOp, SearchOp, TTLConfig
from langgraph.store.base.embed import ensure_embeddings

from .._shell import Options, Shell
from ..core.engine import Cmd
from ..core.integrity import Integrity
from ..core.plans import LoadScripts, Plan
from ..core.scripts import lua_scripts
from ..errors import SchemaMismatchError
from . import _semantics as sem
from . import _vcache, _vset
from ._keys import STORE_FORMAT, StoreKeys
from ._plans import Prepared, fill_plan
from ._records import Config, StoreState

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger(__name__)
CLUSTER_SHARDS = 16  # the default number of shards on a Redis Cluster client (1 elsewhere)
_INDEX_KEYS = {"dims", "embed", "fields", "distance_type", "ann_index_config"}  # docs/store.md: what each maps to
_TTL_KEYS = {"default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired"}
_OP_NAMES = {
    GetOp: "store.get",
    PutOp: "store.put",
    SearchOp: "store.search",
    ListNamespacesOp: "store.list_namespaces",
}


def op_name(ops: list[Op]) -> str:
    """The telemetry name of a batch: its op's kind when it holds one op (get, put, ...)."""
    return _OP_NAMES.get(type(ops[0]), "store.batch") if len(ops) == 1 else "store.batch"


class RedisStoreBase(Shell, BaseStore):
    """A LangGraph ``BaseStore`` on plain Redis (>= 7.0, no modules).

    Args:
        client: a redis-py client with ``decode_responses=False`` (the default): ``redis.Redis``,
            ``redis.cluster.RedisCluster`` or a Sentinel ``master_for`` client for ``RedisStore``,
            their ``redis.asyncio`` twins for ``AsyncRedisStore``.
        prefix: the keys' prefix (no braces); the store's keys are ``<prefix>:store#{...}``,
            which no saver's or other store's key can be (docs/architecture.md).
        index: semantic search, as InMemoryStore takes it: ``{"dims": ..., "embed": ...,
            "fields": [...]}`` (``embed``: a LangChain ``Embeddings``, a function, or a
            ``"provider:model"`` string), and as PostgresStore takes them ``"distance_type"``:
            ``"cosine"`` (the default), ``"inner_product"`` or ``"l2"``, each scored as
            PostgresStore scores it (cosine similarity, the dot product, minus the Euclidean
            distance). Vectors are stored as float32 per item and scored exactly in the client:
            see docs/store.md for how it scales and which peer settings map to what.
        ttl: a ``TTLConfig``: ``default_ttl`` (minutes) for puts without ``ttl=``,
            ``refresh_on_read`` (default True, as LangGraph's stores). An item expires as a Redis
            key; there is no sweeper (``sweep_interval_minutes`` is accepted and unused).
        serde: the values' serializer (default ``JsonPlusSerializer``: what the saver uses);
            values are stored as its bytes, zstd-compressed from 256 bytes on when that saves
            an eighth (``compress=False``: never).
        shards: how many hash tags the namespaces are spread over (default: 1, or 16 on a
            Redis Cluster client). Every operation on the namespaces of one shard is one script
            call; searches and listings that may span shards ask each (in one pipeline).
            Part of the stored layout: keep it for the life of the data (``setup()`` checks).
        shard_depth: choose a namespace's shard by its first ``shard_depth`` labels (default:
            all): a search or listing whose prefix fixes those labels asks one shard only.
        retries: retries of a call that failed with ``ConnectionError`` (every script is
            idempotent but a put's, which a retry may apply twice: the same value, a later
            ``updated_at``).
        telemetry: spans and metrics as the saver's (``True``, ``False`` or a ``Telemetry``).
        functions: run the scripts as the Redis function library (FCALL; EVALSHA where refused).
        vector_cache_bytes: the bound of the client-side cache of the vectors of the prefixes
            this store searches (default 256 MiB; 0: off; needs numpy): a repeated semantic
            search scores locally and reads only its best items' records, in one round trip,
            exact whatever other workers write, expire or evict (docs/store.md).
        vector_sets: on a server with vector sets (``VADD``: Redis 8), keep each namespace's
            vectors also in one and answer semantic searches from it (``VSIM`` finds candidates,
            the client scores them exactly; docs/store.md); default on, probed once per store.
            ``False``: never (writes then take the namespaces they put vectors in out of sets).
            Searches from sets are exact unless ``index["ann_index_config"]`` is given
            (``{"kind": "hnsw", "m": 16, "ef_construction": 64, "ef_search": 100}``, the
            defaults): then the sets this store makes are HNSW graphs of that M, searched
            approximately (candidates still scored exactly); enable it only once every writer
            of the prefix runs this release (docs/store.md "Approximate search").
        auto_pipeline: ``AsyncRedisStore`` only: the script calls of concurrent tasks share one
            connection per server and leave together, as ``AsyncRedisSaver``'s (default: on).
    """

    supports_ttl: bool = True

    def __init__(
        self,
        client: Any,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        shards: int | None = None,
        shard_depth: int | None = None,
        functions: bool = True,
        vector_cache_bytes: int = 256 * 2**20,
        vector_sets: bool = True,
        **options: Unpack[Options],
    ) -> None:
        shared = self._options(options)
        if shards is None:
            shards = CLUSTER_SHARDS if hasattr(client, "get_node_from_key") else 1
        self.keys = StoreKeys(shared["prefix"], shards, shard_depth)
        if ttl is not None:
            if not isinstance(ttl, Mapping):
                raise TypeError("ttl must be a TTLConfig dict")
            unknown = set(ttl) - _TTL_KEYS
            if unknown:
                raise ValueError(f"unknown ttl option(s): {sorted(unknown)}")
            from ._plans import ttl_ms

            ttl_ms(ttl.get("default_ttl"))  # refused here rather than at the first put
        self.ttl_config = ttl
        self.index_config: dict[str, Any] | None = None
        ann: tuple[int, int, int] | None = None
        self.embeddings: Any = None
        if index:
            cfg: dict[str, Any] = dict(index)
            if "embed" not in cfg:
                raise ValueError("index needs 'embed' (and 'dims')")
            unknown = {k for k in cfg if not (isinstance(k, str) and k.startswith("__"))} - _INDEX_KEYS
            if unknown:
                raise ValueError(f"unknown index option(s): {sorted(map(str, unknown))}")
            distance = cfg.setdefault("distance_type", "cosine")
            if distance not in sem.DISTANCES:
                raise ValueError(f"index distance_type must be one of {sem.DISTANCES}, got {distance!r}")
            if cfg.get("ann_index_config") is not None:
                ann = _vset.ann_config(cfg["ann_index_config"])
                if ann is not None and distance != "cosine":
                    raise ValueError(
                        f"approximate search (ann_index_config kind 'hnsw') ranks by cosine only, not by "
                        f"{distance!r}: leave ann_index_config out (searches are exact) or use distance_type 'cosine'"
                    )
            self.embeddings = ensure_embeddings(cfg.get("embed"))
            cfg["__tokenized_fields"] = sem.tokenized_fields(cfg.get("fields"))
            self.index_config = cfg
        self.serde: SerializerProtocol = shared["serde"] or JsonPlusSerializer()
        default_ttl = bool(ttl and ttl.get("default_ttl"))
        if isinstance(vector_cache_bytes, bool) or not isinstance(vector_cache_bytes, int) or vector_cache_bytes < 0:
            raise ValueError(f"vector_cache_bytes must be an int >= 0, got {vector_cache_bytes!r}")
        vcache = _vcache.VectorCache(vector_cache_bytes) if index and _vcache.usable(vector_cache_bytes) else None
        integrity_key = shared["integrity_key"]
        integrity = Integrity(integrity_key, shared["prefix"]) if integrity_key is not None else None
        self._cfg = Config(
            self.keys,
            self.serde,
            shared["compress"],
            default_ttl,
            self.index_config,
            ann=ann,
            integrity=integrity,
            state=StoreState(vsets=None if vector_sets else False, vcache=vcache),
        )
        self._probe_lock = threading.Lock()  # RedisStore: one thread probes, the others wait
        self._background: set[Any] = set()  # vector cache fills under way (threads, or tasks)
        self._attach(client, shared, None, lua_scripts(functions))

    def _fills(self) -> list[tuple[tuple[int, bytes], Plan[bool]]]:
        """The background fills of the vector cache the last calls asked for (Redis 8, exact
        mode: a repeated search answered from the vector sets; ``_plans.fill_plan``): each runs
        on its own (a thread of RedisStore, a task of AsyncRedisStore), a bounded call a page,
        and ``_filled`` when it ends, whatever its outcome."""
        vcache = self._cfg.state.vcache
        if vcache is None or not vcache.wanted or self._cfg.state.closed:
            return []
        return [(key, fill_plan(self._cfg, key, dims)) for key, dims in vcache.take_wanted()]

    def _filled(self, key: tuple[int, bytes], error: BaseException | None) -> None:
        vcache = self._cfg.state.vcache
        assert vcache is not None
        vcache.fill_done(key)
        if error is not None:  # a failed fill costs the searches nothing: they use the sets
            logger.debug("vector cache fill of %r failed: %r", key, error)

    def _embed(self, prep: Prepared) -> tuple[list[list[float]], dict[str, list[float]]]:
        """The vectors of a batch's documents to index and of its queries (sync embeddings)."""
        if self.embeddings is None:
            return [], {}
        texts = list(prep.embed.texts)
        docs = self.embeddings.embed_documents(texts) if texts else []
        return docs, {q: self.embeddings.embed_query(q) for q in prep.embed.queries}

    async def _aembed(self, prep: Prepared) -> tuple[list[list[float]], dict[str, list[float]]]:
        """Async :meth:`_embed`: the queries embedded concurrently."""
        if self.embeddings is None:
            return [], {}
        texts = list(prep.embed.texts)
        docs = await self.embeddings.aembed_documents(texts) if texts else []
        qs = prep.embed.queries
        vectors = await asyncio.gather(*[self.embeddings.aembed_query(q) for q in qs])
        return docs, dict(zip(qs, vectors, strict=True))

    def _setup(self) -> Generator[Any, Any, None]:
        """Load the scripts, then record the store's layout under its prefix, or check it."""
        yield LoadScripts("store_")
        key = self.keys.schema()
        want = f"{STORE_FORMAT} {self.keys.shards} {self.keys.shard_depth or 0}".encode()
        yield Cmd("set", (key, want), {"nx": True})
        got = yield Cmd("get", (key,))
        if got != want:
            raise SchemaMismatchError(
                f"the store under prefix {self.keys.prefix!r} was written as {got!r} (format, shards, shard "
                f"depth); this store is {want!r}: use the same shards and shard_depth, or another prefix"
            )
