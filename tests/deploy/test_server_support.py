"""setup() detects server support by trying it, never by the version string.

Whatever server ``redis_url`` points at (scripts/matrix runs this against Redis 6.0 to
Valkey 9): if the server rejects a ``#!lua`` script, setup() must raise
UnsupportedServerError (sync and async); if it accepts it, setup() must succeed.
"""

from __future__ import annotations

import pytest
import redis

import redis_saver


def _supports_shebang(client) -> bool:
    try:
        return client.eval("#!lua flags=no-writes\nreturn 1", 0) == 1
    except redis.ResponseError:
        return False


async def test_setup_matches_probed_support(sync_client, async_client, prefix):
    supported = _supports_shebang(sync_client)
    saver = redis_saver.RedisSaver(sync_client, prefix=prefix)
    asaver = redis_saver.AsyncRedisSaver(async_client, prefix=prefix)
    try:
        if supported:
            saver.setup()
            await asaver.asetup()
        else:
            with pytest.raises(redis_saver.UnsupportedServerError):
                saver.setup()
            with pytest.raises(redis_saver.UnsupportedServerError):
                await asaver.asetup()
            assert sync_client.get(f"{prefix}:schema") is None, "nothing written on an unsupported server"
    finally:
        sync_client.delete(f"{prefix}:schema")


def _supports_setinfo(client) -> bool:
    try:
        client.execute_command("CLIENT", "SETINFO", "LIB-NAME", "probe")
        return True
    except redis.ResponseError:
        return False


async def test_from_conn_string_names_the_library_in_client_list(redis_url, sync_client, prefix):
    """Redis >= 7.2 and Valkey list a connection's library (CLIENT SETINFO): the clients that
    from_conn_string makes say redis-saver; an older server (Debian's 7.0) has no such field
    and the connection works all the same. scripts/matrix runs this on every server version."""
    supported = _supports_setinfo(sync_client)
    with redis_saver.RedisSaver.from_conn_string(redis_url, prefix=prefix) as saver:
        assert saver.client.ping()  # the connection works on every server, SETINFO or not
        sync_info = saver.client.client_info() if supported else {}
    async with redis_saver.AsyncRedisSaver.from_conn_string(redis_url, prefix=prefix) as asaver:
        assert await asaver.client.ping()
        async_info = await asaver.client.client_info() if supported else {}
    if supported:  # Redis >= 7.2, Valkey; older servers have no lib-name to show
        for info in (sync_info, async_info):
            assert str(info.get("lib-name", "")).startswith("redis-py(redis-saver_v"), info
