"""langgraph-checkpoint-conformance against RedisSaver and AsyncRedisSaver.

Every one of the eight capabilities must be detected and every test must pass.
InMemorySaver runs too (``memory``), as a check of this harness: it implements only
the five base capabilities.
"""

from __future__ import annotations

import contextlib
import io
import itertools

import pytest
from langgraph.checkpoint.conformance import validate
from langgraph.checkpoint.conformance.capabilities import (
    ALL_CAPABILITIES,
    BASE_CAPABILITIES,
    DetectedCapabilities,
)
from langgraph.checkpoint.conformance.initializer import RegisteredCheckpointer
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from tests.contract.conftest import delete_prefix, new_saver, unique_prefix


async def test_conformance(contract_kind: str, contract_url: str | None) -> None:
    prefixes: list[str] = []

    async def factory():
        prefix = unique_prefix()
        prefixes.append(prefix)
        saver = new_saver(contract_kind, contract_url, prefix=prefix)
        try:
            yield saver
        finally:
            client = getattr(saver, "client", None) or getattr(saver, "_client", None)
            if client is not None and contract_kind == "async":
                with contextlib.suppress(Exception):
                    await client.aclose()

    registered = RegisteredCheckpointer(name=f"redis_saver[{contract_kind}]", factory=factory)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        report = await validate(registered, progress=ProgressCallbacks.verbose())
        report.print_report()
    text = out.getvalue()

    try:
        if contract_kind == "memory":
            expected = BASE_CAPABILITIES
        else:
            expected = ALL_CAPABILITIES
        detected = {name for name, r in report.results.items() if r.detected}
        assert detected == {c.value for c in expected}, (
            f"detected {sorted(detected)}, expected {sorted(c.value for c in expected)}\n{text}"
        )
        failures = {
            name: r.failures for name, r in report.results.items() if r.detected and not r.passed
        }
        assert not failures, f"conformance failures: {failures}\n{text}"
        if contract_kind != "memory":
            assert report.conformance_level() == "FULL", text
            assert sum(r.tests_passed for r in report.results.values()) > 50, text
    finally:
        if contract_url:
            for p in prefixes:
                delete_prefix(contract_url, p)


def test_all_capabilities_detected_statically() -> None:
    """Both classes override every async capability method of BaseCheckpointSaver."""
    from tests.contract.conftest import redis_saver_module

    mod = redis_saver_module()
    for cls in (mod.RedisSaver, mod.AsyncRedisSaver):
        det = DetectedCapabilities.from_instance(cls.__new__(cls))
        assert not det.missing, f"{cls.__name__} misses {sorted(c.value for c in det.missing)}"
        for name in (
            "get_tuple", "list", "put", "put_writes", "delete_thread", "delete_for_runs",
            "copy_thread", "prune", "get_delta_channel_history", "get_next_version",
        ):
            for meth in (name, "a" + name) if name != "get_next_version" else (name,):
                assert getattr(cls, meth) is not getattr(
                    __import__("langgraph.checkpoint.base", fromlist=["x"]).BaseCheckpointSaver,
                    meth,
                    None,
                ), f"{cls.__name__}.{meth} not implemented"


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_get_next_version_monotonic(kind: str) -> None:
    """Versions strictly increase, both as the saver compares them and as strings
    (LangGraph compares versions with ``>``; ints and InMemorySaver-style strings in
    stored checkpoints must be accepted as ``current``)."""
    from tests.contract.conftest import redis_saver_module

    mod = redis_saver_module()
    cls = mod.RedisSaver if kind == "sync" else mod.AsyncRedisSaver
    saver = cls.__new__(cls)
    v = saver.get_next_version(None, None)
    seen = [v]
    for _ in range(30):
        v = saver.get_next_version(v, None)
        seen.append(v)
    assert all(type(x) is type(seen[0]) for x in seen)
    assert all(a < b for a, b in itertools.pairwise(seen)), seen
    # accepts what other savers (and earlier releases) stored, and sorts above it
    from redis_saver._base import _counter

    nxt = saver.get_next_version(5, None)
    assert _counter(nxt) == 6
    old = "00000000000000000000000000000009.0123"
    nxt = saver.get_next_version(old, None)
    assert _counter(nxt) == 10 and nxt > old
    twelve = "000000000041.5e2a"
    assert _counter(saver.get_next_version(twelve, None)) == 42 and saver.get_next_version(twelve, None) > twelve
