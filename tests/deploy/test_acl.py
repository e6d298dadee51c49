"""The saver as an ACL user restricted to its key prefix and the commands it needs.

``SAVER_ACL_COMMANDS`` is the minimal command set, found by running every saver flow as
a user with ``-@all`` plus these commands and removing each in turn (every one is
needed): EVALSHA runs the scripts, EVAL of the body answers a NOSCRIPT reply, SCRIPT LOAD
is setup()'s; inside the scripts ACL checks every redis.call(), hence the hash/zset/expiry
commands (the ones lua/*.lua call); SET/GET are setup()'s schema-version key;
DBSIZE + SCAN find the slot-index keys for list(None) / delete_for_runs; WAIT only with
``wait_for_replicas``. Keys: ``~<prefix>:{* ~<prefix>:ix:{* ~<prefix>:schema``, exactly the
saver's keys (``KeySchema.scan_patterns()``): ``~<prefix>:*`` would also reach a nested prefix
such as ``<prefix>:tenant2``.

Full rule (the README quotes it)::

    ACL SETUSER <user> reset on ><password> ~<prefix>:{* ~<prefix>:ix:{* ~<prefix>:schema resetchannels -@all <SAVER_ACL_COMMANDS>

Note: SCAN and DBSIZE are keyless, so such a user still sees the *names* (not the
values) of other keys and the key count of the database.
"""  # noqa: E501 (the full ACL rule above, left whole)

from __future__ import annotations

import re
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
import redis.asyncio

import redis_saver
import redis_saver.core.scripts
from devkit.servers import async_client_kwargs, client_kwargs
from tests.deploy.helpers import aput_chain, cfg, put_chain, tcfg

SAVER_ACL_COMMANDS = (
    "+evalsha +eval +script|load "  # run the scripts; EVAL after NOSCRIPT; setup() loads them
    "+get +set "  # setup(): <prefix>:schema
    "+dbsize +scan "  # cross-thread: find the slot-index keys
    "+wait "  # only with wait_for_replicas > 0
    # called from inside the Lua scripts (ACL applies to redis.call):
    "+time +unlink +persist +pexpire +pexpireat +exists +pttl +touch "
    "+hget +hmget +hset +hsetnx +hdel +hexists +hlen +hscan +hstrlen +hincrby "
    "+zadd +zcard +zrange +zlexcount +zrem +zscore"
)


CLIENT_SIDE_COMMANDS = {"evalsha", "eval", "script|load", "get", "set", "dbsize", "scan", "wait"}


def test_rule_lists_exactly_the_commands_the_scripts_call():
    """Keeps SAVER_ACL_COMMANDS in step with lua/: every redis.call in a script, nothing more."""
    lua = Path(redis_saver.core.scripts.lua_dir())
    called = set()
    for f in lua.glob("*.lua"):
        if f.name.startswith(("store_", "_store")):  # the store's: its own rule (tests/store/test_acl.py)
            continue
        called |= {c.lower() for c in re.findall(r"redis\.p?call\(\s*['\"]([A-Za-z]+)['\"]", f.read_text())}
    rule = {c.lstrip("+") for c in SAVER_ACL_COMMANDS.split()}
    assert rule - CLIENT_SIDE_COMMANDS == called


def _user_url(url: str, user: str, password: str) -> str:
    p = urlsplit(url)
    host = p.netloc.rsplit("@", 1)[-1]
    return urlunsplit(p._replace(netloc=f"{user}:{password}@{host}"))


@pytest.fixture
def acl_user(sync_client, redis_url, prefix):
    """(url, user) for a fresh ACL user limited to ``prefix`` and SAVER_ACL_COMMANDS; returns a
    factory so a test can drop commands."""
    made: list[str] = []

    def make(commands: str = SAVER_ACL_COMMANDS) -> str:
        user = f"saver-{uuid.uuid4().hex[:8]}"
        password = uuid.uuid4().hex
        keys = " ".join(f"~{prefix}:{p}" for p in ("{*", "ix:{*", "schema"))
        rule = f"reset on >{password} {keys} resetchannels -@all {commands}"
        sync_client.execute_command("ACL", "SETUSER", user, *rule.split())
        made.append(user)
        return _user_url(redis_url, user, password)

    yield make
    for u in made:
        sync_client.execute_command("ACL", "DELUSER", u)
    for k in sync_client.scan_iter(match=f"{prefix}:*"):
        sync_client.delete(k)


def _full_flow(s) -> None:
    s.setup()
    s.setup()  # idempotent
    a = put_chain(s, "a{1}", 3, run_id="r1") + put_chain(s, "a{1}", 2, ns="child:1", run_id="r1")
    b = put_chain(s, "b:*", 2, run_id="r2")
    t = s.get_tuple(cfg("a{1}"))
    assert t is not None and t.config == a[2] and t.pending_writes == [("task-2", "msg", "w2")]
    assert s.get_tuple(a[0]).config == a[0]
    assert len(list(s.list(tcfg("a{1}")))) == 5
    assert len(list(s.list(None))) == 7
    assert [x.config for x in s.list(None, filter={"run_id": "r2"})] == b[::-1]
    assert s.get_delta_channel_history(config=a[2], channels=["msg"]) is not None
    s.copy_thread("a{1}", "a-copy")
    assert len(list(s.list(tcfg("a-copy")))) == 5
    s.prune(["a{1}", "a-copy"], strategy="keep_latest")
    assert len(list(s.list(None))) == 2 * 2 + 2
    s.delete_for_runs(["r2"])
    assert s.get_tuple(cfg("b:*")) is None
    s.pin("a{1}")
    s.unpin("a{1}")
    s.delete_thread("a-copy")
    s.delete_thread("a{1}")
    assert list(s.list(None)) == []


def test_saver_works_as_restricted_user(acl_user, prefix, sync_client):
    url = acl_user()
    client = redis.Redis.from_url(url, **client_kwargs(5.0, 5.0))
    try:
        _full_flow(redis_saver.RedisSaver(client, prefix=prefix))
        # TTL / latest-only / fencing variants use the same commands
        _full_flow(redis_saver.RedisSaver(client, prefix=prefix, ttl={"default_ttl": 5, "refresh_on_read": True}))
        latest = redis_saver.RedisSaver(client, prefix=prefix, history="latest", fencing=True)
        put_chain(latest, "l", 3)
        assert len(list(latest.list(tcfg("l")))) == 1
        latest.delete_thread("l")
        # scripts flushed: NOSCRIPT is answered with EVAL as this user
        sync_client.script_flush()
        s = redis_saver.RedisSaver(client, prefix=prefix)
        put_chain(s, "after-flush", 1)
        sync_client.script_flush()
        assert len(list(s.list(None))) == 1
        s.delete_thread("after-flush")
        # WAIT as this user: no replica here, so the saver times out cleanly
        waiting = redis_saver.RedisSaver(client, prefix=prefix, wait_for_replicas=1, wait_timeout_ms=10)
        replicas = int(sync_client.info("replication").get("connected_slaves", 0))
        if replicas == 0:
            with pytest.raises(redis_saver.ReplicationTimeoutError):
                put_chain(waiting, "w", 1)
        else:
            put_chain(waiting, "w", 1)
        waiting.delete_thread("w")
    finally:
        client.close()


def test_with_fcall_and_function_load_the_restricted_user_runs_the_library(acl_user, prefix, sync_client):
    """SAVER_ACL_COMMANDS runs the scripts as EVALSHA (FCALL denied: the saver switches by
    itself); adding +fcall +function|load lets the same user load and call the library."""
    client = redis.Redis.from_url(acl_user(SAVER_ACL_COMMANDS + " +fcall +function|load"), **client_kwargs(5.0, 5.0))
    try:
        sync_client.function_flush()
        before = int(sync_client.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0))
        s = redis_saver.RedisSaver(client, prefix=prefix)
        _full_flow(s)
        assert s._driver.engine.library is not None
        assert int(sync_client.info("commandstats")["cmdstat_fcall"]["calls"]) - before > 20
        # the documented rule alone: FCALL denied, every call answered through EVALSHA
        plain = redis.Redis.from_url(acl_user(), **client_kwargs(5.0, 5.0))
        try:
            t = redis_saver.RedisSaver(plain, prefix=prefix)
            put_chain(t, "x", 2)
            assert t._driver.engine.library is None and len(list(t.list(tcfg("x")))) == 2
            t.delete_thread("x")
        finally:
            plain.close()
    finally:
        client.close()


async def test_async_saver_works_as_restricted_user(acl_user, prefix):
    client = redis.asyncio.Redis.from_url(acl_user(), **async_client_kwargs(5.0, 5.0))
    try:
        s = redis_saver.AsyncRedisSaver(client, prefix=prefix)
        await s.asetup()
        cfgs = await aput_chain(s, "x", 2, run_id="r") + await aput_chain(s, "y", 1, run_id="q")
        assert (await s.aget_tuple(cfg("x"))).config == cfgs[1]
        assert len([t async for t in s.alist(None)]) == 3
        await s.acopy_thread("x", "x2")
        await s.aprune(["x", "x2"], strategy="keep_latest")
        await s.adelete_for_runs(["q"])
        assert len([t async for t in s.alist(None)]) == 2
        await s.adelete_thread("x")
        await s.adelete_thread("x2")
        assert [t async for t in s.alist(None)] == []
    finally:
        await client.aclose()


def test_keys_outside_the_prefix_are_not_accessible(acl_user, prefix, sync_client):
    other = f"{prefix}x"  # shares the text prefix, but not "<prefix>:"
    sync_client.set(f"{other}:secret", b"v")
    admin_saver = redis_saver.RedisSaver(sync_client, prefix=other)
    put_chain(admin_saver, "victim", 1)
    client = redis.Redis.from_url(acl_user(), **client_kwargs(5.0, 5.0))
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.get(f"{other}:secret")
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.set("unprefixed", b"x")
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.execute_command("FLUSHDB")
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.execute_command("KEYS", "*")
        intruder = redis_saver.RedisSaver(client, prefix=other)
        with pytest.raises(redis.exceptions.NoPermissionError):
            intruder.setup()  # SET <other>:schema
        with pytest.raises(redis.exceptions.NoPermissionError):
            intruder.get_tuple(cfg("victim"))  # EVALSHA with keys outside the pattern
        with pytest.raises(redis.exceptions.NoPermissionError):
            put_chain(intruder, "victim", 1)
        with pytest.raises(redis.exceptions.NoPermissionError):
            intruder.delete_thread("victim")
        # the victim's data is intact
        assert admin_saver.get_tuple(cfg("victim")) is not None
    finally:
        client.close()
        for k in sync_client.scan_iter(match=f"{other}:*"):
            sync_client.delete(k)


def test_wait_denied_surfaces_the_server_error(acl_user, prefix):
    """Without +wait, wait_for_replicas>0 must raise the server's NOPERM error, not a TypeError."""
    client = redis.Redis.from_url(acl_user(SAVER_ACL_COMMANDS.replace("+wait ", "")), **client_kwargs(5.0, 5.0))
    try:
        s = redis_saver.RedisSaver(client, prefix=prefix, wait_for_replicas=1, wait_timeout_ms=10)
        with pytest.raises(redis.exceptions.NoPermissionError):
            put_chain(s, "w", 1)
    finally:
        client.close()


def test_script_load_denied_is_not_reported_as_old_server(acl_user, prefix):
    """Without +script|load, setup() must not claim the server is too old."""
    client = redis.Redis.from_url(acl_user(SAVER_ACL_COMMANDS.replace("+script|load ", "")), **client_kwargs(5.0, 5.0))
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):
            redis_saver.RedisSaver(client, prefix=prefix).setup()
    finally:
        client.close()
