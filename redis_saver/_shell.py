"""What the saver, the store and the cache classes share around their drivers, written once:
the options every one of them takes (``Options``: names, types, defaults and checks), the
attachment of a driver to the client, ``from_conn_string``'s client lifetime, and the two shells:
``SyncShell`` (the sync classes) and ``LoopBound`` (the asyncio twins, whose sync methods run on
their event loop from other threads)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, cast, get_type_hints

from langgraph.checkpoint.serde.base import SerializerProtocol

from .core.engine import SLOT_MOVE_TIMEOUT
from .core.scripts import Registry
from .keys import KeySchema
from .telemetry import Telemetry
from .transport.clients import make_async_client, make_sync_client
from .transport.drivers import AsyncDriver, SyncDriver

if TYPE_CHECKING:
    from typing_extensions import Self

T = TypeVar("T")

# the default of auto_pipeline in AsyncRedisSaver, AsyncRedisStore and AsyncRedisCache: on, as it
# measured faster at concurrency 1 too (docs/architecture.md#automatic-pipelining-asyncredissaver)
AUTO_PIPELINE = True


class Options(TypedDict, total=False):
    """The options RedisSaver, RedisStore and RedisCache (and their asyncio twins) take alike,
    as ``**options``: the same names, types, defaults and checks (``Shell._attach``).

    - ``prefix`` (``"lg"``): the keys' namespace; the saver's, the store's and the cache's keys
      never meet, whatever their prefixes.
    - ``serde`` (``None``: LangGraph's ``JsonPlusSerializer``): the values' serializer.
    - ``compress`` (``True``): store values zstd-compressed; ``False`` stores serde bytes as
      they are. Both read everything.
    - ``retries`` (``0``; ``from_conn_string``: 3): retries of a call that failed with
      ``ConnectionError`` (short exponential backoff); timeouts are never retried.
    - ``slot_move_timeout`` (``30.0``): Redis Cluster: seconds a call refused because the slot of
      its keys is moving (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, redis-py's ``TTL exhausted``) is
      sent again, with backoff, before ``SlotMovingError``; ``0``: at once. Independent of
      ``retries``.
    - ``telemetry`` (``True``): OpenTelemetry spans and metrics of every call: ``True`` (the
      global providers), ``False``, or a ``redis_saver.Telemetry``.
    - ``auto_pipeline`` (``None``: on): the asyncio classes only: the script calls concurrent
      tasks issue in one event-loop iteration leave in one write per server
      (``transport/autopipe.py``); ``False``: a pooled connection per call.
    - ``integrity_key`` (``None``): bytes of at least 32, or a sequence of such keys (the first
      signs new data, every one verifies: key rotation). Every stored value then carries a tag
      bound to where it belongs (the saver: prefix, thread, namespace, checkpoint id, channel and
      version, task id and write index; the store and the cache: namespace and key), checked
      before anything is deserialized: data that fails, or carries no tag, raises
      ``IntegrityError`` (docs/deployment.md "Trust model"). Without a key, tagged data reads
      as any other.
    """

    prefix: str
    serde: SerializerProtocol | None
    compress: bool
    retries: int
    slot_move_timeout: float
    telemetry: Telemetry | bool
    auto_pipeline: bool | None
    integrity_key: bytes | Sequence[bytes] | None


_DEFAULTS: Options = {
    "prefix": "lg", "serde": None, "compress": True, "retries": 0, "slot_move_timeout": SLOT_MOVE_TIMEOUT,
    "telemetry": True, "auto_pipeline": None, "integrity_key": None,
}  # fmt: skip
_SHARED: dict[str, Any] = get_type_hints(Options)  # name -> type


def check_options(
    retries: Any, telemetry: Any, compress: Any = True, slot_move_timeout: Any = 0.0
) -> Telemetry | None:
    """The options every class checks the same way; returns the telemetry to record with."""
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError("retries must be an int >= 0")
    if (
        isinstance(slot_move_timeout, bool)
        or not isinstance(slot_move_timeout, (int, float))
        or not 0 <= slot_move_timeout < float("inf")
    ):
        raise ValueError("slot_move_timeout must be a number of seconds >= 0")
    if not isinstance(compress, bool):
        raise TypeError("compress must be a bool")
    if telemetry is True:
        return Telemetry()
    if telemetry is not False and not isinstance(telemetry, Telemetry):
        raise TypeError("telemetry must be True, False or a redis_saver.Telemetry")
    return telemetry or None


def check_client(client: Any) -> None:
    kwargs: dict[str, Any] = {}
    try:
        kwargs = client.get_connection_kwargs()
    except Exception:  # cluster clients and fakes expose options differently
        pool = getattr(client, "connection_pool", None)
        kwargs = getattr(pool, "connection_kwargs", {}) or {}
    if kwargs.get("decode_responses"):
        raise ValueError(
            "redis_saver needs a client with decode_responses=False: checkpoints are stored as raw bytes"
        )


class Shell:
    """What a saver, store or cache object does with its client and the shared options; the
    I/O of its calls is its driver's (``_driver_cls``: set by ``SyncShell`` and ``LoopBound``)."""

    _driver_cls: type
    _driver: Any
    client: Any
    compress: bool
    retries: int
    slot_move_timeout: float

    @classmethod
    def _options(cls, given: Options) -> Options:
        """``given`` with the defaults of the options it leaves out; an unknown name is refused
        (``**options`` would take it silently)."""
        unknown = sorted(set(given) - set(_SHARED))
        if unknown:
            raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {unknown[0]!r}")
        options = _DEFAULTS.copy()
        options.update(given)
        return options

    def _attach(self, client: Any, options: Options, keys: KeySchema | None, registry: Registry) -> Any:
        """Checks the client and the shared options, then gives the object its driver over
        ``client`` (``keys``: a saver's key schema, None for the store and the cache;
        ``registry``: the scripts its engine runs); returns the driver."""
        check_client(client)
        timeout = options["slot_move_timeout"]
        tel = check_options(options["retries"], options["telemetry"], options["compress"], timeout)
        self.client = client
        self.compress = options["compress"]
        self.retries = options["retries"]
        self.slot_move_timeout = float(timeout)
        self._driver = self._driver_cls(client, keys, registry, self.retries, tel, self.slot_move_timeout)
        self._set_auto_pipeline(options["auto_pipeline"])
        self._bound()
        return self._driver

    def _set_auto_pipeline(self, auto_pipeline: bool | None) -> None:
        raise NotImplementedError

    def _bound(self) -> None:
        """Called at the end of ``_attach`` (``LoopBound`` binds to a running loop)."""

    @classmethod
    def _split(cls, options: dict[str, Any]) -> dict[str, Any]:
        """``from_conn_string``'s options: the class's own (its keyword parameters, shared options
        included) are taken out of ``options``, the rest go to the client; ``retries`` is 3
        unless given."""
        params = inspect.signature(cls).parameters.values()
        own = {p.name: options.pop(p.name) for p in params if p.kind is p.KEYWORD_ONLY and p.name in options}
        own.setdefault("retries", 3)
        return own

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A constructor taking ``**options`` shows them as the keyword parameters they stand
        for: the shared options, and those of the constructor it hands them to (a subclass's
        ``__init__(self, client, **options)`` shows its base's). So ``help()``, ``inspect``, an
        IDE at run time and ``from_conn_string``'s split see every option with its default."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return
        sig = inspect.signature(init)
        params = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
        if len(params) == len(sig.parameters):
            return
        kw = inspect.Parameter.KEYWORD_ONLY
        more = [inspect.Parameter(n, kw, default=_DEFAULTS.get(n), annotation=t) for n, t in _SHARED.items()]
        base = next(k.__dict__["__init__"] for k in cls.__mro__[1:] if "__init__" in k.__dict__)
        more += [p for p in inspect.signature(base).parameters.values() if p.kind is kw]
        for p in more:
            if p.name not in {q.name for q in params}:
                params.append(p)
        init.__signature__ = sig.replace(parameters=params)


class SyncShell(Shell):
    """The sync classes: each call is performed by the sync driver in the caller's thread."""

    _driver_cls = SyncDriver
    _driver: SyncDriver

    def _set_auto_pipeline(self, auto_pipeline: bool | None) -> None:
        if auto_pipeline is not None:
            # the library's class (RedisSaver...), also when an application subclassed it
            name = next(k.__name__ for k in type(self).__mro__ if k.__module__.startswith("redis_saver."))
            raise TypeError(f"auto_pipeline is an Async{name} option ({name} sends each call as it comes)")

    @classmethod
    @contextmanager
    def from_conn_string(cls, url: str, **options: Any) -> Iterator[Self]:
        """An object that owns its client, made from ``url`` (``redis://``, ``rediss://``,
        ``unix://``, ``redis+cluster://`` / ``cluster=True``, ``redis+sentinel://``) and closed
        on exit. The class's own options are taken from ``options`` (``retries``: 3 unless
        given), the rest go to the client."""
        own, make = cls._split(options), cast("Callable[..., Self]", cls)
        client = make_sync_client(url, **options)
        try:
            obj = make(client, **own)
            try:
                yield obj
            finally:
                obj._release()
        finally:
            client.close()

    def _release(self) -> None:
        """Before ``from_conn_string`` closes the client: end the object's background work
        (the store's vector cache fills); nothing by default."""


class LoopBound(Shell):
    """The asyncio twins' shell: the asyncio driver, and its event loop. Built inside a running
    loop, the object binds to it (as ``AsyncPostgresSaver``), else to the loop of its first
    async call (and again after that loop closed). Its sync methods run their coroutine on that
    loop from another thread; on the loop's own thread they raise ``asyncio.InvalidStateError``
    instead of deadlocking."""

    loop: asyncio.AbstractEventLoop | None = None
    auto_pipeline: bool = True
    _driver_cls = AsyncDriver
    _driver: AsyncDriver
    # how the error messages name the object and its async interface
    _async_hint = "the async interface"

    def _set_auto_pipeline(self, auto_pipeline: bool | None) -> None:
        if auto_pipeline is None:
            auto_pipeline = AUTO_PIPELINE
        if not isinstance(auto_pipeline, bool):
            raise TypeError("auto_pipeline must be True or False")
        self.auto_pipeline = auto_pipeline
        self._driver.set_auto_pipeline(auto_pipeline)

    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls, url: str, **options: Any) -> AsyncIterator[Self]:
        """Async twin of the sync class's ``from_conn_string``: an object on an asyncio client
        made from ``url``, closed on exit."""
        own, make = cls._split(options), cast("Callable[..., Self]", cls)
        client = await make_async_client(url, **options)
        try:
            obj = make(client, **own)
            try:
                yield obj
            finally:
                await obj._arelease()
        finally:
            await client.aclose()

    async def _arelease(self) -> None:
        """Async ``_release``: the object's background tasks ended before the client closes."""

    def _bound(self) -> None:
        try:
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None

    def _bind(self) -> None:
        if self.loop is None or self.loop.is_closed():
            self.loop = asyncio.get_running_loop()

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        name = type(self).__name__
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and running is self.loop:
            coro.close()
            raise asyncio.InvalidStateError(
                f"Synchronous calls to {name} are only allowed from a different thread. "
                f"From the event loop's thread, use {self._async_hint}."
            )
        if self.loop is None or self.loop.is_closed() or not self.loop.is_running():
            coro.close()
            raise asyncio.InvalidStateError(
                f"{name}'s sync methods run on its event loop from another thread; "
                f"that loop is not running. Use {name.replace('Async', '', 1)} for synchronous code."
            )
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()
