"""The options the saver, the store and the cache share (``redis_saver._shell.Options``): one
declaration, the same defaults and checks in all six classes, shown in their signatures, and
split from a URL's client options by ``from_conn_string``. No server: the clients are made but
never connected (every check runs at construction)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import redis
import redis.asyncio

from redis_saver import AsyncRedisSaver, AsyncRedisStore, RedisSaver, RedisStore
from redis_saver._shell import Options
from redis_saver.cache import AsyncRedisCache, RedisCache

SYNC = (RedisSaver, RedisStore, RedisCache)
ASYNC = (AsyncRedisSaver, AsyncRedisStore, AsyncRedisCache)
DEFAULTS = {
    "prefix": "lg", "serde": None, "compress": True, "retries": 0, "slot_move_timeout": 30.0, "telemetry": True,
    "auto_pipeline": None, "integrity_key": None,
}  # fmt: skip


def _client(cls: type) -> Any:
    return (redis.asyncio.Redis if cls in ASYNC else redis.Redis)(port=1)


def test_every_class_shows_the_shared_options_with_their_defaults() -> None:
    assert set(Options.__annotations__) == set(DEFAULTS)
    for cls in SYNC + ASYNC:
        params = inspect.signature(cls).parameters
        assert not any(p.kind is p.VAR_KEYWORD for p in params.values()), cls
        got = {n: params[n].default for n in DEFAULTS}
        assert got == DEFAULTS and all(params[n].kind is params[n].KEYWORD_ONLY for n in DEFAULTS), cls


@pytest.mark.parametrize("cls", SYNC + ASYNC, ids=lambda c: c.__name__)
def test_every_class_refuses_a_short_integrity_key(cls: type) -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        cls(_client(cls), integrity_key=b"k" * 31)
    with pytest.raises(TypeError, match="integrity_key"):
        cls(_client(cls), integrity_key="k" * 40)


@pytest.mark.parametrize("cls", SYNC + ASYNC, ids=lambda c: c.__name__)
def test_every_class_checks_the_shared_options_alike(cls: type) -> None:
    with pytest.raises(TypeError, match=f"{cls.__name__}\\(\\) got an unexpected keyword argument 'prefx'"):
        cls(_client(cls), prefx="x")
    with pytest.raises(ValueError, match="retries must be an int >= 0"):
        cls(_client(cls), retries=-1)
    with pytest.raises(TypeError, match="compress must be a bool"):
        cls(_client(cls), compress="yes")
    for bad in (-1, "5", True, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="slot_move_timeout must be a number of seconds >= 0"):
            cls(_client(cls), slot_move_timeout=bad)
    with pytest.raises(TypeError, match="telemetry must be True, False"):
        cls(_client(cls), telemetry="on")
    with pytest.raises(ValueError, match="decode_responses=False"):
        cls(redis.Redis(port=1, decode_responses=True))
    obj = cls(_client(cls), prefix="app", retries=2, compress=False, telemetry=False, slot_move_timeout=2)
    assert (obj.retries, obj.compress, obj.slot_move_timeout) == (2, False, 2.0)
    assert obj._driver.engine.slot_move_timeout == 2.0
    assert obj.keys.prefix == "app"


@pytest.mark.parametrize("cls", SYNC, ids=lambda c: c.__name__)
def test_sync_classes_refuse_auto_pipeline(cls: type) -> None:
    cls(_client(cls), auto_pipeline=None)
    with pytest.raises(TypeError, match=f"auto_pipeline is an Async{cls.__name__} option"):
        cls(_client(cls), auto_pipeline=True)


@pytest.mark.parametrize("cls", ASYNC, ids=lambda c: c.__name__)
def test_async_classes_pipeline_by_default(cls: type) -> None:
    assert cls(_client(cls)).auto_pipeline is True
    assert cls(_client(cls), auto_pipeline=False).auto_pipeline is False
    with pytest.raises(TypeError, match="auto_pipeline must be True or False"):
        cls(_client(cls), auto_pipeline="yes")


def test_from_conn_string_takes_the_class_options_and_leaves_the_client_ones() -> None:
    options = {"prefix": "p", "history": "latest", "socket_timeout": 2, "compress": False}
    assert RedisSaver._split(options) == {"prefix": "p", "history": "latest", "compress": False, "retries": 3}
    assert options == {"socket_timeout": 2}
    options = {"index": None, "shards": 4, "history": "latest", "retries": 0}
    assert RedisStore._split(options) == {"index": None, "shards": 4, "retries": 0}
    assert options == {"history": "latest"}  # not a store option: left for the client (which refuses it)
    options = {"prefix": "c", "functions": False}
    assert RedisCache._split(options) == {"prefix": "c", "retries": 3}
    assert options == {"functions": False}
    for cls in SYNC + ASYNC:
        options = {"slot_move_timeout": 5, "socket_timeout": 2}
        assert cls._split(options) == {"slot_move_timeout": 5, "retries": 3}, cls
        assert options == {"socket_timeout": 2}


def test_a_subclass_passing_options_on_keeps_every_option() -> None:
    class Mine(RedisSaver):
        def __init__(self, client: Any, **options: Any) -> None:
            super().__init__(client, **options)

    params = inspect.signature(Mine).parameters
    assert {"ttl", "history", "functions", *DEFAULTS} <= set(params) and params["history"].default == "full"
    options = {"ttl": {"default_ttl": 5}, "prefix": "m", "socket_timeout": 1}
    assert Mine._split(options) == {"ttl": {"default_ttl": 5}, "prefix": "m", "retries": 3}
    assert Mine(redis.Redis(port=1), history="latest", prefix="m").history == "latest"
