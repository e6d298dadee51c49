"""OpenTelemetry spans and metrics of the savers, read back with the SDK's in-memory exporters
against a real server: one CLIENT span per saver call with the database conventions, the error
on failure, duration and byte histograms, and the conflict / script-reload counters."""

from __future__ import annotations

import os

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from redis_saver import AsyncRedisSaver, ConflictError, RedisSaver, Telemetry
from tests.lifecycle._util import alist, call


@pytest.fixture
def otel():
    spans = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    return tp, mp, spans, reader


def _metrics(reader) -> dict:
    out = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = m.data.data_points
    return out


def _cfg(thread: str, cid: str | None = None) -> dict:
    conf = {"thread_id": thread, "checkpoint_ns": ""}
    if cid:
        conf["checkpoint_id"] = cid
    return {"configurable": conf}


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_spans_and_metrics_of_saver_calls(kind, otel, redis_url, make_saver, sync_client):
    tp, mp, spans, reader = otel
    saver = make_saver(kind, telemetry=Telemetry(tp, mp), fencing=True)
    cp = empty_checkpoint()
    cp["channel_values"], cp["channel_versions"] = {"x": os.urandom(1500).hex()}, {"x": "1"}
    cfg = await call(saver, "put", _cfg("t-1"), cp, {"step": 0}, {"x": "1"})
    await call(saver, "put_writes", cfg, [("x", "w")], "task")
    await call(saver, "get_tuple", _cfg("t-1"))
    assert len(await alist(saver, _cfg("t-1"))) == 1
    with pytest.raises(ConflictError):  # a second root on a fenced thread
        await call(saver, "put", _cfg("t-1"), empty_checkpoint(), {"step": 0}, {})
    sync_client.function_flush()  # the next call is answered "Function not found": the library is loaded again
    sync_client.script_flush()
    await call(saver, "get_tuple", _cfg("t-1"))

    got = {s.name: s for s in spans.get_finished_spans()}
    names = [s.name for s in spans.get_finished_spans()]
    assert names == ["put", "put_writes", "get_tuple", "list", "put", "get_tuple"]
    put = got["put_writes"]
    assert put.kind == SpanKind.CLIENT and put.attributes["db.system.name"] == "redis"
    assert put.attributes["db.operation.name"] == "put_writes"
    assert put.attributes["db.stored_procedure.name"] == "put_writes+lean"
    assert put.attributes["redis_saver.thread_id"] == "t-1"
    first_put = spans.get_finished_spans()[0]
    assert first_put.attributes["redis_saver.bytes_sent"] > 1500  # the value went out (zstd: ~1.5 KB of 3 KB hex)
    assert got["get_tuple"].attributes["redis_saver.bytes_received"] > 1000  # and came back
    failed = spans.get_finished_spans()[4]
    assert failed.status.status_code == StatusCode.ERROR and failed.attributes["error.type"] == "ConflictError"
    assert any(e.name == "exception" for e in failed.events)

    m = _metrics(reader)
    ops = {dp.attributes["db.operation.name"]: dp.count for dp in m["db.client.operation.duration"]
           if "error.type" not in dp.attributes}
    assert ops == {"put": 1, "put_writes": 1, "get_tuple": 2, "list": 1}
    assert sum(dp.count for dp in m["redis_saver.bytes_sent"]) == 6
    assert [dp.value for dp in m["redis_saver.conflicts"]] == [1]
    assert sum(dp.value for dp in m["redis_saver.script_reloads"]) >= 1


def test_thread_ids_can_be_left_out(otel, sync_client, prefix):
    tp, mp, spans, _ = otel
    saver = RedisSaver(sync_client, prefix=prefix, telemetry=Telemetry(tp, mp, thread_id=False))
    saver.get_tuple(_cfg("secret-thread"))
    (span,) = spans.get_finished_spans()
    assert "redis_saver.thread_id" not in span.attributes
    assert "secret-thread" not in repr(dict(span.attributes))


def test_telemetry_off_and_bad_option(sync_client, prefix):
    RedisSaver(sync_client, prefix=prefix, telemetry=False).get_tuple(_cfg("t"))
    with pytest.raises(TypeError):
        RedisSaver(sync_client, prefix=prefix, telemetry="yes")
    with pytest.raises(TypeError):
        AsyncRedisSaver(sync_client, prefix=prefix, telemetry=object())


# Global providers can be set once per process, so each order runs in a fresh interpreter.
_GLOBAL_ORDER = r'''
import asyncio, sys, time
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

order, url, prefix = sys.argv[1:4]
spans, reader = InMemorySpanExporter(), InMemoryMetricReader()


def configure():
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(tp)
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))


if order == "before":
    configure()  # as an application or opentelemetry-instrument does, before importing the library
import redis
from langgraph.checkpoint.base import empty_checkpoint
from redis_saver import AsyncRedisSaver, RedisSaver

cfg = {"configurable": {"thread_id": "t-" + order, "checkpoint_ns": ""}}
saver = RedisSaver(redis.Redis.from_url(url), prefix=prefix)
asaver = AsyncRedisSaver(redis.asyncio.Redis.from_url(url), prefix=prefix)
if order == "after":
    saver.get_tuple(cfg)  # a call before any provider: nothing records
    configure()
    time.sleep(1.1)  # a provider set later is picked up within a second
saver.put(cfg, empty_checkpoint(), {"step": 0}, {})
saver.get_tuple(cfg)


async def main():
    await asaver.aget_tuple(cfg)
    await asaver.aput_writes({"configurable": {**cfg["configurable"], "checkpoint_id": "x"}}, [("c", 1)], "task")


asyncio.run(main())
print(",".join(s.name for s in spans.get_finished_spans()))
counts = {}
for rm in reader.get_metrics_data().resource_metrics:
    for sm in rm.scope_metrics:
        for m in sm.metrics:
            if m.name == "db.client.operation.duration":
                for dp in m.data.data_points:
                    counts[dp.attributes["db.operation.name"]] = dp.count
print(",".join(f"{k}={v}" for k, v in sorted(counts.items())))
'''


@pytest.mark.parametrize("order", ["before", "after"])
def test_global_providers_set_before_or_after_import(order, redis_url, prefix):
    """The global SDK providers record whether the application sets them before the first
    import of redis_saver (the usual order, and opentelemetry-instrument's) or after it."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _GLOBAL_ORDER, order, redis_url, prefix],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert out.returncode == 0, out.stderr
    names, durations = out.stdout.strip().splitlines()
    assert names.split(",") == ["put", "get_tuple", "get_tuple", "put_writes"]
    assert durations == "get_tuple=2,put=1,put_writes=1"


def test_only_per_thread_scripts_name_a_thread():
    """The span's thread id comes from the script's declared interface (a script including
    _lib.lua takes the saver's header, thread id in ARGV[2]), not from its name."""
    from redis_saver.core.scripts import load_all

    scripts = load_all()
    per_thread = {n for n, s in scripts.items() if s.per_thread}
    assert {"put", "put_writes", "get_tuple", "list", "delete_thread", "prune"} <= per_thread
    assert not per_thread & {"ix_query", "store_read", "store_write", "store_delete"}
    assert all(s.per_thread == (n.split("+")[0] in per_thread) for n, s in scripts.items())
    assert all(s.without_shebang().per_thread == s.per_thread for s in scripts.values())
