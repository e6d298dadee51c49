"""Invalid ttl / history options fail at construction with ValueError."""

from __future__ import annotations

import pytest

import redis_saver
from redis_saver import TTLConfig

BAD = [
    ({"ttl": {"default_ttl": -1}}, "default_ttl"),
    ({"ttl": {"default_ttl": 0}}, "default_ttl"),
    ({"ttl": {"bogus": 1}}, "bogus"),
    ({"ttl": {"default_ttl": 1, "refresh_on_read": True, "extra": 2}}, "extra"),
    ({"ttl": TTLConfig(default_ttl=-0.5)}, "default_ttl"),
    ({"history": "nope"}, "history"),
    ({"history": "LATEST"}, "history"),
]


@pytest.mark.parametrize("cls", ["RedisSaver", "AsyncRedisSaver"])
@pytest.mark.parametrize("kwargs,word", BAD, ids=[f"{k}" for k, _ in BAD])
async def test_bad_options_raise_value_error(cls, kwargs, word, sync_client, async_client):
    client = sync_client if cls == "RedisSaver" else async_client
    with pytest.raises(ValueError, match=word):
        getattr(redis_saver, cls)(client, prefix="bad", **kwargs)


@pytest.mark.parametrize("ttl", [{"default_ttl": 0.02}, {"default_ttl": 1, "refresh_on_read": True},
                                 TTLConfig(default_ttl=2, refresh_on_read=False), None, {}])
def test_good_options_accepted(ttl, sync_client):
    for history in ("full", "latest"):
        redis_saver.RedisSaver(sync_client, prefix="ok", ttl=ttl, history=history)
