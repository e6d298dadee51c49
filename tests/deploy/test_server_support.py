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
