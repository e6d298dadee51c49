"""What the saver, the store and the cache classes share around their drivers, written once:
the options every one of them takes, ``from_conn_string``'s client lifetime, and the asyncio
twins' event loop (their sync methods run on it from other threads)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

from .telemetry import Telemetry
from .transport.clients import make_async_client, make_sync_client

T = TypeVar("T")
C = TypeVar("C")

# the default of auto_pipeline in AsyncRedisSaver, AsyncRedisStore and AsyncRedisCache: on, as it
# measured faster at concurrency 1 too (docs/architecture.md#automatic-pipelining-asyncredissaver)
AUTO_PIPELINE = True

def check_options(retries: Any, telemetry: Any, compress: Any = True, functions: Any = True) -> Telemetry | None:
    """The options every class checks the same way; returns the telemetry to record with."""
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError("retries must be an int >= 0")
    if not isinstance(compress, bool):
        raise TypeError("compress must be a bool")
    if not isinstance(functions, bool):
        raise TypeError("functions must be a bool")
    if telemetry is True:
        return Telemetry()
    if telemetry is not False and not isinstance(telemetry, Telemetry):
        raise TypeError("telemetry must be True, False or a redis_saver.Telemetry")
    return telemetry or None


def own_options(options: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """``from_conn_string``'s options split: the class's own are taken out of ``options`` (the
    rest go to the client), with ``retries`` 3 unless given."""
    own = {k: options.pop(k) for k in names if k in options}
    own.setdefault("retries", 3)
    return own


@contextmanager
def sync_owner(cls: Callable[..., C], url: str, options: dict[str, Any], names: Iterable[str]) -> Iterator[C]:
    """``cls`` on a sync client made from ``url``, which is closed on exit."""
    own = own_options(options, names)
    client = make_sync_client(url, **options)
    try:
        yield cls(client, **own)
    finally:
        client.close()


@asynccontextmanager
async def async_owner(
    cls: Callable[..., C], url: str, options: dict[str, Any], names: Iterable[str]
) -> AsyncIterator[C]:
    """``cls`` on an asyncio client made from ``url``, which is closed on exit."""
    own = own_options(options, names)
    client = await make_async_client(url, **options)
    try:
        yield cls(client, **own)
    finally:
        await client.aclose()


class LoopBound:
    """The asyncio twins' event loop. Built inside a running loop, the object binds to it (as
    ``AsyncPostgresSaver``), else to the loop of its first async call (and again after that loop
    closed). Its sync methods run their coroutine on that loop from another thread; on the
    loop's own thread they raise ``asyncio.InvalidStateError`` instead of deadlocking."""

    loop: asyncio.AbstractEventLoop | None = None
    auto_pipeline: bool = True
    _driver: Any
    # how the error messages name the object and its async interface
    _async_hint = "the async interface"

    def _set_auto_pipeline(self, auto_pipeline: bool | None) -> None:
        if auto_pipeline is None:
            auto_pipeline = AUTO_PIPELINE
        if not isinstance(auto_pipeline, bool):
            raise TypeError("auto_pipeline must be True or False")
        self.auto_pipeline = auto_pipeline
        self._driver.set_auto_pipeline(auto_pipeline)

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
