"""What the engine records of a saver call, driven by scripted replies (no socket; the same
spans and metrics against real servers: tests/telemetry/): one CLIENT span per call naming the
scripts it ran and its thread, the error of a failed call, and the script-reload, conflict and
replication-timeout counters."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from redis.exceptions import ResponseError

from redis_saver import ConflictError, ReplicationTimeoutError, Telemetry
from redis_saver.core.engine import Engine, Pipe
from redis_saver.core.plans import Call
from redis_saver.core.scripts import lua_scripts
from redis_saver.keys import FORMAT_VERSION, KeySchema

from .scripted import command, converse, eval_, evalsha, fcall, noscript

KEYS = KeySchema("t").thread_keys("th")
ARGS = [FORMAT_VERSION, "th", 0, "0", "1"]
COUNTERS = ("redis_saver.script_reloads", "redis_saver.conflicts", "redis_saver.replication_timeouts")


@pytest.fixture
def recorded():
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    tel = Telemetry(tp, MeterProvider(metric_readers=[reader]))

    def counters() -> dict[str, int]:
        out: dict[str, int] = {}
        for rm in reader.get_metrics_data().resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name in COUNTERS:
                        out[m.name] = sum(dp.value for dp in m.data.data_points)
        return out

    return tel, spans, counters


def _engine(tel: Telemetry, functions: bool = True) -> Engine:
    return Engine(KeySchema("t"), lua_scripts(functions), telemetry=tel)


def _plan(*calls):
    out = []
    for c in calls:
        out.append((yield c))
    return out


def test_a_call_is_one_client_span_naming_its_scripts_and_thread(recorded):
    tel, spans, _ = recorded
    other = KeySchema("t").thread_keys("th2")
    plan = _plan(Call("pin", KEYS, ARGS), Call("pin", other, [FORMAT_VERSION, "th2", 0, "0", "1"]))
    turns = [(fcall("pin", KEYS, ARGS), 1), (fcall("pin", other, [FORMAT_VERSION, "th2", 0, "0", "1"]), 0)]
    assert converse(_engine(tel).drive(plan, "pin"), turns) == [1, 0]
    (span,) = spans.get_finished_spans()
    assert (span.name, span.kind, span.status.status_code) == ("pin", SpanKind.CLIENT, StatusCode.UNSET)
    assert span.attributes["db.system.name"] == "redis" and span.attributes["db.operation.name"] == "pin"
    assert span.attributes["db.stored_procedure.name"] == "pin"  # named once
    assert span.attributes["redis_saver.thread_id"] == "th2"  # the last thread it touched
    assert span.attributes["redis_saver.bytes_sent"] > 0


def test_an_internal_plan_records_nothing(recorded):
    tel, spans, _ = recorded
    assert converse(_engine(tel).drive(_plan(Call("pin", KEYS, ARGS))), [(fcall("pin", KEYS, ARGS), 1)]) == [1]
    assert spans.get_finished_spans() == ()


def test_noscript_counts_a_script_reload(recorded):
    tel, spans, counters = recorded
    turns = [(evalsha("pin", KEYS, ARGS), noscript()), (eval_("pin", KEYS, ARGS), 1)]
    assert converse(_engine(tel, functions=False).drive(_plan(Call("pin", KEYS, ARGS)), "pin"), turns) == [1]
    assert counters()["redis_saver.script_reloads"] == 1
    assert len(spans.get_finished_spans()) == 1


def test_a_fencing_conflict_is_the_spans_error_and_counted(recorded):
    tel, spans, counters = recorded
    with pytest.raises(ConflictError):
        converse(
            _engine(tel).drive(_plan(Call("pin", KEYS, ARGS)), "put"),
            [(fcall("pin", KEYS, ARGS), ResponseError("RS_CONFLICT the head moved"))],
        )
    (span,) = spans.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR and span.attributes["error.type"] == "ConflictError"
    assert [e.name for e in span.events] == ["exception"]
    assert counters()["redis_saver.conflicts"] == 1


def test_a_short_wait_is_counted_as_a_replication_timeout(recorded):
    tel, spans, counters = recorded
    waited = Call("pin", KEYS, ARGS, wait=(1, 100))
    pipe = Pipe([command("FCALL", "pin", KEYS, ARGS), ("WAIT", 1, 100)])
    with pytest.raises(ReplicationTimeoutError):
        converse(_engine(tel).drive(_plan(waited), "put_writes"), [(pipe, [1, 0])])
    (span,) = spans.get_finished_spans()
    assert span.attributes["error.type"] == "ReplicationTimeoutError"
    assert counters()["redis_saver.replication_timeouts"] == 1
