"""The conformance suite and the differential test with an ``integrity_key``: every redis_saver
saver they make signs what it writes and checks what it reads (``CONTRACT_INTEGRITY_KEY=1``, as
``new_saver`` reads it), on a standalone server and on the Redis Cluster. The whole contract
suite runs with a key under ``CONTRACT_INTEGRITY_KEY=1``; these keep the two central checks
in every run (the conformance suite with a key found prune's repacked records refused)."""

from __future__ import annotations

import pytest

from tests.contract import test_conformance as conformance
from tests.contract import test_differential as differential


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTRACT_INTEGRITY_KEY", "1")


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_conformance_with_a_key(kind: str, contract_redis_url: str, keyed: None) -> None:
    await conformance.test_conformance(kind, contract_redis_url)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_differential_with_a_key(kind: str, contract_redis_url: str, keyed: None) -> None:
    differential.test_differential(contract_kind=kind, contract_url=contract_redis_url)
