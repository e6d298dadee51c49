"""Fixtures private to tests/contract (names prefixed ``contract_`` so they never shadow
the project-wide fixtures of tests/conftest.py).

Every contract test runs against three kinds of saver:

* ``memory`` - ``InMemorySaver``: validates the test itself (it must pass there,
  except where a documented, intended difference exists);
* ``sync``   - ``RedisSaver`` on a real redis-server;
* ``async``  - ``AsyncRedisSaver`` on a real redis-server.

The Redis URL comes from the project fixture ``redis_url`` when tests/conftest.py
provides it; otherwise this file starts its own redis-server (devkit/servers.py).
Each saver gets a unique key prefix, so tests never see each other's keys.

``CONTRACT_INTEGRITY_KEY=1`` runs every redis_saver saver of the suite with an
``integrity_key`` (every record signed and checked).

Hypothesis knobs (environment): ``CONTRACT_EXAMPLES`` (default 35) and
``CONTRACT_EXAMPLES_SMALL`` (default 20) set ``max_examples``; ``CONTRACT_NO_SHRINK=1``
skips shrinking (fast stress runs), e.g.::

    CONTRACT_NO_SHRINK=1 CONTRACT_EXAMPLES=800 pytest tests/contract/test_differential.py
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import StateGraph

from tests.contract._graphs import Pair

KINDS = ["memory", "sync", "async"]
INTEGRITY_KEY = os.urandom(32)


def redis_saver_module() -> Any:
    import redis_saver  # an import error fails the tests (it must never skip them)

    return redis_saver


# The whole contract suite runs twice: on a standalone server and on the session's local
# Redis Cluster (3 primaries + 3 replicas, through redis.cluster.RedisCluster clients).
# CONTRACT_DEPLOYMENTS=standalone (or =cluster) runs one of them only.
DEPLOYMENTS = [d for d in os.environ.get("CONTRACT_DEPLOYMENTS", "standalone,cluster").split(",") if d]


@pytest.fixture(scope="session", params=DEPLOYMENTS)
def contract_redis_url(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "cluster":
        cluster = request.getfixturevalue("cluster")
        yield f"redis+cluster://127.0.0.1:{cluster.nodes[0].port}"
        return
    try:
        url = request.getfixturevalue("redis_url")
    except pytest.FixtureLookupError:
        url = None
    if url:
        yield url
        return
    try:
        from devkit.servers import start_standalone
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no redis_url fixture and devkit.servers unavailable: {e!r}")
    with start_standalone() as server:
        yield server.url


def contract_settings(env: str, default: int, *suppress: Any) -> Any:
    """The contract suite's hypothesis settings: ``max_examples`` from ``env`` (else
    ``default``), no deadline, shrinking skipped under ``CONTRACT_NO_SHRINK=1``, and the fixture,
    speed (and ``suppress``) health checks off."""
    from hypothesis import HealthCheck, Phase, settings

    return settings(
        max_examples=int(os.environ.get(env, str(default))),
        deadline=None,
        report_multiple_bugs=False,
        phases=[Phase.explicit, Phase.reuse, Phase.generate] if os.environ.get("CONTRACT_NO_SHRINK") else list(Phase),
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, *suppress],
    )


def unique_prefix() -> str:
    # hostile on purpose: colon, glob characters, space, unicode (braces are refused)
    return f"lgc:{uuid.uuid4().hex[:10]}:*?[x] ü"


def glob_escape(s: str) -> str:
    out = []
    for ch in s:
        if ch in "*?[]\\":
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _kwargs(name: str) -> dict:
    try:
        import devkit.servers as servers

        return getattr(servers, name)(5.0, 5.0)
    except Exception:  # noqa: BLE001
        return {}


def _cluster_url(url: str) -> str | None:
    return "redis" + url[len("redis+cluster") :] if url.startswith("redis+cluster://") else None


def sync_redis(url: str) -> Any:
    import redis

    if (plain := _cluster_url(url)) is not None:
        from redis.cluster import RedisCluster

        kw = {k: v for k, v in _kwargs("client_kwargs").items() if k != "health_check_interval"}
        return RedisCluster.from_url(plain, **kw)
    return redis.Redis.from_url(url, **_kwargs("client_kwargs"))


def async_redis(url: str) -> Any:
    import redis.asyncio as aredis

    if (plain := _cluster_url(url)) is not None:
        from redis.asyncio.cluster import RedisCluster

        kw = {k: v for k, v in _kwargs("async_client_kwargs").items() if k != "health_check_interval"}
        return RedisCluster.from_url(plain, **kw)
    return aredis.Redis.from_url(url, **_kwargs("async_client_kwargs"))


def new_saver(kind: str, url: str | None, prefix: str | None = None, **kwargs: Any) -> Any:
    """A fresh saver of ``kind``; for async it must be called inside the event loop
    that will use it."""
    if kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        return InMemorySaver(**{k: v for k, v in kwargs.items() if k == "serde"})
    mod = redis_saver_module()
    prefix = prefix or unique_prefix()
    if os.environ.get("CONTRACT_INTEGRITY_KEY") == "1":
        kwargs.setdefault("integrity_key", INTEGRITY_KEY)
    if kind == "sync":
        return mod.RedisSaver(sync_redis(url), prefix=prefix, **kwargs)
    if kind == "async":
        return mod.AsyncRedisSaver(async_redis(url), prefix=prefix, **kwargs)
    raise ValueError(kind)


def delete_prefix(url: str, prefix: str) -> int:
    r = sync_redis(url)
    n = 0
    try:
        keys = list(r.scan_iter(match=glob_escape(prefix) + "*", count=1000))
        for i in range(0, len(keys), 500):
            n += r.delete(*keys[i : i + 500])
    finally:
        r.close()
    return n


@pytest.fixture(params=KINDS)
def contract_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def contract_url(contract_kind: str, contract_redis_url: str) -> str | None:
    if contract_kind == "memory":
        return None
    redis_saver_module()
    return contract_redis_url


# the graph tests (test_graphs*.py): the same graph compiled with InMemorySaver and with a fresh saver of
# ``contract_kind`` (see _graphs.Pair); each saver's keys deleted afterwards
@pytest.fixture
async def pair_factory(contract_kind: str, contract_url: str | None):
    made: list[tuple[Any, str]] = []

    def make(builder: StateGraph, **compile_kw: Any) -> Pair:
        prefix = unique_prefix()
        target = new_saver(contract_kind, contract_url, prefix=prefix)
        made.append((target, prefix))
        mode = "async" if contract_kind == "async" else "sync"
        return Pair(builder, InMemorySaver(), target, mode, **compile_kw)

    yield make
    for target, prefix in made:
        client = getattr(target, "client", None)
        if client is not None:
            if contract_kind == "async":
                await client.aclose()
            else:
                client.close()
        if contract_url:
            delete_prefix(contract_url, prefix)
