"""The cache's Lua scripts (lua/cache/): they refuse bad arguments before their first write;
and the cache runs as an ACL user limited to ``~<prefix>:cache{*`` and the commands it needs."""

from __future__ import annotations

import re
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
import redis.exceptions

from redis_saver import RedisCache
from redis_saver.cache import _core as core
from redis_saver.cache.keys import CacheKeys
from redis_saver.core.replies import CacheClear
from redis_saver.core.scripts import lua_dir
from tests.cache.conftest import keys_under

# EVALSHA runs the scripts, EVAL answers NOSCRIPT, MGET is get, SCAN finds the namespaces for
# clear(); the rest are what the scripts call (ACL checks every redis.call)
CACHE_ACL_COMMANDS = (
    "+evalsha +eval +mget +scan "
    "+time +set +unlink +zadd +zrem +zrange +zcard +zscore +persist +pexpireat +exists +rename"
)
CLIENT_SIDE = {"evalsha", "eval", "mget", "scan"}


def test_acl_rule_lists_exactly_the_commands_the_scripts_call():
    called = set()
    for f in (lua_dir() / "cache").glob("*.lua"):
        called |= {c.lower() for c in re.findall(r"rcall\('([A-Za-z]+)'", f.read_text())}
    assert {c.lstrip("+") for c in CACHE_ACL_COMMANDS.split()} - CLIENT_SIDE == called


@pytest.mark.parametrize(
    "keys, args",
    [
        (["i", "e1", "e2"], [2, -1, "v1"]),  # fewer arguments than entries
        (["i", "e1"], [1, -1, "v1", "extra"]),
        (["i", "e1", "e2"], [1, -1, "v1"]),  # a key no group describes
        (["i", "e1", "e2"], [2, -1, "v1", -2, "v2"]),  # a bad ttl after a good entry
        (["i", "e1", "e2"], [2, -1, "v1", "1.5", "v2"]),
        (["i", "e1", "other"], [2, -1, "v1", -1, "v2"]),  # a key of another namespace
        (["i", "e1", "e2", "i2"], [2, -1, "v1", -1, "v2", 0]),  # an empty group
        (["i", "e1", "e2"], [1, -1, "v1", 1, -1, "v2"]),  # a group whose first key is no index
        (["i", "e1", "i2", "e2"], [1, -1, "v1", 1, 5, "v2", 1]),  # a bad count after good groups
        ([], []),
    ],
)
def test_set_script_checks_everything_before_writing(sync_client, prefix, keys, args):
    ck, other = CacheKeys(prefix), CacheKeys(prefix + "x")
    by = {"i": ck.index(("n",)), "i2": ck.index(("m",)), "e1": ck.entry(("n",), "1"), "e2": ck.entry(("n",), "2"),
          "other": other.entry(("n",), "o")}
    names = [by[k] for k in keys]
    src = core.scripts()["cache_set"].source
    with pytest.raises(redis.exceptions.ResponseError, match="RS_BADARG"):
        sync_client.eval(src, len(names), *names, *args)
    assert keys_under(sync_client, prefix) == []
    with pytest.raises(redis.exceptions.ResponseError, match="RS_BADARG"):
        sync_client.eval(core.scripts()["cache_clear"].source, 2, by["i"], ck.snapshot(("n",)), 0)
    with pytest.raises(redis.exceptions.ResponseError, match="RS_BADARG"):  # another namespace's snapshot
        sync_client.eval(core.scripts()["cache_clear"].source, 2, by["i"], ck.snapshot(("m",)), 5)
    # well formed, the same script writes: two groups in one call (standalone)
    both = [by["i"], by["e1"], by["i2"], ck.entry(("m",), "x")]
    assert sync_client.eval(src, 4, *both, 1, 60_000, b"v", 1, -1, b"w") == 2
    assert len(keys_under(sync_client, prefix)) == 4


def test_noscript_is_answered_with_eval(sync_client, prefix):
    cache = RedisCache(sync_client, prefix=prefix)
    sync_client.script_flush()
    k = (("n",), "k")
    cache.set({k: (1, None)})
    cache.clear()
    sync_client.script_flush()
    cache.set({k: (2, None), (("m",), "k"): (3, None)})  # a pipeline answered NOSCRIPT
    assert cache.get([k]) == {k: 2}


def _user_url(url: str, user: str, password: str) -> str:
    p = urlsplit(url)
    return urlunsplit(p._replace(netloc=f"{user}:{password}@{p.netloc.rsplit('@', 1)[-1]}"))


def test_cache_works_as_a_restricted_acl_user(sync_client, redis_url, prefix):
    user, password = f"cache-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    pattern = CacheKeys(prefix).acl_pattern().decode()
    rule = f"reset on >{password} ~{pattern} resetchannels -@all {CACHE_ACL_COMMANDS}"
    sync_client.execute_command("ACL", "SETUSER", user, *rule.split())
    try:
        with RedisCache.from_conn_string(_user_url(redis_url, user, password), prefix=prefix) as cache:
            sync_client.script_flush()  # the first calls go as EVAL
            pairs = {((ns,), k): (f"{ns}{k}", t) for ns in ("a", "b{", "") for k in ("x", "}i") for t in (None, 60)}
            cache.set(pairs)
            assert cache.get(list(pairs)) == {k: v for k, (v, _) in pairs.items()}
            cache.clear([("a",)])
            assert len(cache.get(list(pairs))) == 4
            cache.clear()
            assert cache.get(list(pairs)) == {}
            with pytest.raises(redis.exceptions.NoPermissionError):  # nothing outside the pattern
                cache.client.set(f"{prefix}:{{t}}:meta", b"x")
        assert keys_under(sync_client, prefix) == []
    finally:
        sync_client.execute_command("ACL", "DELUSER", user)


def test_clear_script_keeps_what_was_set_after_the_clear_began(sync_client, prefix):
    cache = RedisCache(sync_client, prefix=prefix)
    ck, ns = CacheKeys(prefix), ("n",)
    cache.set({(ns, f"k{i}"): (i, None) for i in range(10)})
    src, keys = core.scripts()["cache_clear"].source, [ck.index(ns), ck.snapshot(ns)]
    assert sync_client.eval(src, 2, *keys, 1) == [9, CacheClear.TOOK_INDEX]  # 9 left: deleted one entry
    cache.set({(ns, "k7"): ("again", None), (ns, "k99"): ("new", None)})  # into a new index
    while True:
        left, took = sync_client.eval(src, 2, *keys, 3)
        assert took == CacheClear.INDEX_TAKEN
        if left == 0:
            break
    assert cache.get([(ns, f"k{i}") for i in range(10)] + [(ns, "k99")]) == {(ns, "k7"): "again", (ns, "k99"): "new"}
    assert sync_client.exists(ck.snapshot(ns)) == 0
    cache.clear([ns])
    assert keys_under(sync_client, prefix) == []
