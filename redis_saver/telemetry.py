"""OpenTelemetry for the savers, through ``opentelemetry-api`` only (the ``otel`` extra).

One CLIENT span per saver call, named after the operation (``put``, ``get_tuple``, ...), with
the database semantic conventions (``db.system.name`` = ``redis``, the Lua script as
``db.stored_procedure.name``, ``db.operation.name``), the thread id (``thread_id=False``
leaves it out), the bytes sent and received, and the error on failure; a duration histogram
per operation, byte-size histograms, and counters of fencing conflicts, replication timeouts
and script reloads (a NOSCRIPT answered with EVAL, a missing function library loaded), and of
the attempts sent again while a Redis Cluster slot moved.
Without ``opentelemetry-api``, or with no SDK provider configured, every hook is a no-op (the
API's non-recording span and instruments).
"""

from __future__ import annotations

import time
from typing import Any

try:
    from opentelemetry import metrics as _metrics
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - the extra is not installed
    _metrics = _trace = None  # type: ignore[assignment]

from .errors import ConflictError, ReplicationTimeoutError

_SCOPE = "redis_saver"


def _api_placeholders() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """The provider classes of the API itself: its proxies (what the globals are until the
    application sets a provider) and its no-op providers. Any other provider records. Judged by
    class, never by which object was global when this module was imported: an application (or
    ``opentelemetry-instrument``) usually sets its SDK providers before importing redis_saver."""
    if _trace is None:  # pragma: no cover - the extra is not installed
        return (), ()
    tp: list[type] = [_trace.ProxyTracerProvider, _trace.NoOpTracerProvider]
    mp: list[type] = [_metrics.NoOpMeterProvider]
    try:  # the metrics proxy is private in the API; found by name, as it has been since 1.12
        from opentelemetry.metrics import _internal as _mi

        mp.append(_mi._ProxyMeterProvider)
    except (ImportError, AttributeError):  # pragma: no cover - a later API moved it
        pass
    return tuple(tp), tuple(mp)


_PLACEHOLDER_TP, _PLACEHOLDER_MP = _api_placeholders()


def _size(v: Any) -> int:
    """Bytes of a reply or an argument list, roughly as they cross the wire (payloads only)."""
    if isinstance(v, (bytes, bytearray, str)):
        return len(v)
    if isinstance(v, (list, tuple)):
        return sum(_size(x) for x in v)
    if isinstance(v, int):
        return 8
    return 0


class Telemetry:
    """Spans and metrics of one saver.

    Args:
        tracer_provider: an OpenTelemetry ``TracerProvider`` (default: the global one).
        meter_provider: an OpenTelemetry ``MeterProvider`` (default: the global one).
        thread_id: put the thread id on spans (``redis_saver.thread_id``); ``False`` for privacy.
    """

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None, *, thread_id: bool = True) -> None:
        self.enabled = _trace is not None
        self.thread_id = thread_id
        if not self.enabled:
            return
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("redis-saver")
        except PackageNotFoundError:  # pragma: no cover - a source checkout on the path
            v = "dev"
        self.tracer = _trace.get_tracer(_SCOPE, v, tracer_provider=tracer_provider)
        meter = _metrics.get_meter(_SCOPE, v, meter_provider=meter_provider)
        self.duration = meter.create_histogram(
            "db.client.operation.duration", unit="s", description="Duration of a saver call"
        )
        self.sent = meter.create_histogram(
            "redis_saver.bytes_sent", unit="By", description="Bytes sent by a saver call"
        )
        self.received = meter.create_histogram(
            "redis_saver.bytes_received", unit="By", description="Bytes received by a saver call"
        )
        self.conflicts = meter.create_counter("redis_saver.conflicts", description="Fencing conflicts (ConflictError)")
        self.replication_timeouts = meter.create_counter(
            "redis_saver.replication_timeouts", description="Writes fewer replicas acknowledged in time"
        )
        self._meter_provider = meter_provider
        self._tracer_provider = tracer_provider
        self._is_live, self._next_check = False, 0.0
        self.script_reloads = meter.create_counter(
            "redis_saver.script_reloads",
            description="scripts sent again: NOSCRIPT answered with EVAL of the body, a missing library loaded",
        )
        self.slot_retries = meter.create_counter(
            "redis_saver.slot_retries",
            description="steps sent again because their cluster slot was moving (MOVED, ASK, TRYAGAIN...)",
        )

    def start(self, op: str) -> Recording | None:
        """A call's span and clock, or None when nothing records (no SDK provider for traces
        nor metrics: then a call costs one check here and nothing else)."""
        if not self.enabled or not self._live():
            return None
        span = self.tracer.start_span(op, kind=_trace.SpanKind.CLIENT)
        span.set_attribute("db.system.name", "redis")
        span.set_attribute("db.operation.name", op)
        return Recording(self, op, span)

    def _live(self) -> bool:
        """Whether anything records. Once a provider is there it stays; without one the answer
        is looked up again at most once a second (the API's lookup reads the environment), so
        a provider the application sets after the saver was made is used within a second."""
        if self._is_live:
            return True
        now = time.monotonic()
        if now < self._next_check:
            return False
        self._next_check = now + 1.0
        self._is_live = self._traces_live() or self._metrics_live()
        return self._is_live

    # whether anything would record: an explicit provider, or a global one the application set,
    # before or after importing redis_saver (the API's global is its proxy until then, or a no-op
    # provider: checked by class, so the no-provider case costs two calls and two isinstance)
    def _traces_live(self) -> bool:
        if self._tracer_provider is not None:
            return not isinstance(self._tracer_provider, _PLACEHOLDER_TP)
        return not isinstance(_trace.get_tracer_provider(), _PLACEHOLDER_TP)

    def _metrics_live(self) -> bool:
        if self._meter_provider is not None:
            return not isinstance(self._meter_provider, _PLACEHOLDER_MP)
        return not isinstance(_metrics.get_meter_provider(), _PLACEHOLDER_MP)

    def reloaded(self) -> None:
        if self.enabled:
            self.script_reloads.add(1)

    def slot_retried(self) -> None:
        if self.enabled:
            self.slot_retries.add(1)


class Recording:
    """One saver call being recorded: the engine reports the scripts it sends and their replies."""

    __slots__ = ("tel", "op", "span", "t0", "sent", "received", "scripts")

    def __init__(self, tel: Telemetry, op: str, span: Any) -> None:
        self.tel, self.op, self.span = tel, op, span
        self.t0 = time.perf_counter()
        self.sent = self.received = 0
        self.scripts: list[str] = []

    def script(self, name: str, args: Any, thread_id: str | None) -> None:
        self.sent += _size(args)
        if name not in self.scripts:
            self.scripts.append(name)
        if thread_id is not None and self.tel.thread_id:
            self.span.set_attribute("redis_saver.thread_id", thread_id)

    def reply(self, reply: Any) -> None:
        self.received += _size(reply)

    def end(self, error: BaseException | None = None) -> None:
        attrs = {"db.system.name": "redis", "db.operation.name": self.op}
        if self.scripts:
            self.span.set_attribute("db.stored_procedure.name", ",".join(self.scripts))
        self.span.set_attribute("redis_saver.bytes_sent", self.sent)
        self.span.set_attribute("redis_saver.bytes_received", self.received)
        if error is not None:
            attrs["error.type"] = type(error).__qualname__
            self.span.record_exception(error)
            self.span.set_status(_trace.Status(_trace.StatusCode.ERROR, str(error)))
            self.span.set_attribute("error.type", attrs["error.type"])
            if isinstance(error, ConflictError):
                self.tel.conflicts.add(1, {"db.operation.name": self.op})
            elif isinstance(error, ReplicationTimeoutError):
                self.tel.replication_timeouts.add(1, {"db.operation.name": self.op})
        self.span.end()
        self.tel.duration.record(time.perf_counter() - self.t0, attrs)
        self.tel.sent.record(self.sent, attrs)
        self.tel.received.record(self.received, attrs)
