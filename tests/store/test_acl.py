"""RedisStore as an ACL user restricted to its keys (``~<prefix>:store#{*``) and the commands
it needs: the store's scripts run, the saver's keys stay out of reach.

Rule::

    ACL SETUSER <user> reset on ><password> ~<prefix>:store#{* resetchannels -@all <STORE_ACL_COMMANDS>

EVALSHA / EVAL / SCRIPT LOAD run the scripts (FCALL where FUNCTION LOAD is allowed: with this
rule the store goes on with EVALSHA), GET / SET are setup()'s layout key, the rest is what
lua/store_*.lua call (ACL checks every redis.call()).
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
import redis

import redis_saver.core.scripts
from devkit.servers import client_kwargs
from redis_saver import RedisSaver, RedisStore
from tests.deploy.test_acl import _user_url

STORE_ACL_COMMANDS = (
    "+evalsha +eval +script|load "  # run the scripts; EVAL after NOSCRIPT; setup() loads them
    "+get +set "  # setup(): the layout key
    # called from inside lua/store_*.lua
    "+time +del +exists +pexpire +persist +hget +hset +hgetall "
    "+mget +zadd +zcard +zcount +zmscore +zrange +zrem +zscore"
)
# and on a server with vector sets (Redis 8: the store probes VCARD, sends VSIM itself and from
# store_read (approximate mode), and its
# scripts keep the sets); without them, the probe is refused and the store scans
STORE_ACL_VSET_COMMANDS = "+vcard +vsim +vadd +vrem +vdim +sadd +smembers +unlink +hdel"


def test_rule_lists_exactly_the_commands_the_store_scripts_call():
    lua = Path(redis_saver.core.scripts.lua_dir())
    called = set()
    for f in [*lua.glob("store_*.lua"), lua / "_store_lib.lua"]:
        called |= {c.lower() for c in re.findall(r"redis\.p?call\(\s*['\"]([A-Za-z]+)['\"]", f.read_text())}
    rule = {c.lstrip("+") for c in STORE_ACL_COMMANDS.split()}
    rule |= {c.lstrip("+") for c in STORE_ACL_VSET_COMMANDS.split()}
    assert rule - {"evalsha", "eval", "script|load"} == called | {"set"} and "get" in called


@pytest.fixture
def store_user(sync_client, redis_url, prefix):
    user, password = f"store-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    rule = f"reset on >{password} ~{prefix}:store#{{* resetchannels -@all {STORE_ACL_COMMANDS}"
    sync_client.execute_command("ACL", "SETUSER", user, *rule.split())
    yield _user_url(redis_url, user, password)
    sync_client.execute_command("ACL", "DELUSER", user)


def test_store_works_as_restricted_user(store_user, prefix, sync_client):
    client = redis.Redis.from_url(store_user, **client_kwargs(5.0, 5.0))
    store = RedisStore(client, prefix=prefix, ttl={"default_ttl": 5})
    store.setup()
    store.put(("u", "{1}"), "k", {"v": 1})
    store.put(("u", "2"), "k", {"v": 2}, ttl=None)
    assert store.get(("u", "{1}"), "k").value == {"v": 1}
    assert [i.value for i in store.search(("u",), filter={"v": 2})] == [{"v": 2}]
    assert store.list_namespaces() == [("u", "2"), ("u", "{1}")]
    sync_client.script_flush()  # NOSCRIPT answered with EVAL as this user
    store.delete(("u", "2"), "k")
    assert store.list_namespaces() == [("u", "{1}")]
    # the saver's keys under the same prefix are out of this user's reach
    with pytest.raises(redis.exceptions.NoPermissionError):
        RedisSaver(client, prefix=prefix).get_tuple({"configurable": {"thread_id": "t"}})
    client.close()
