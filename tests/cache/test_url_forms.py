"""``from_conn_string`` of both caches with every URL form the saver takes: ``unix://``,
``rediss://`` (TLS), ``redis+sentinel://`` (and ``redis://`` / ``redis+cluster://`` in the
other tests): a set, a get, a clear, each on the real server."""

from __future__ import annotations

import pytest

from redis_saver import AsyncRedisCache, RedisCache


def _sentinel_url(sentinel) -> str:
    hosts = ",".join(f"{h}:{p}" for h, p in sentinel.sentinels)
    return f"redis+sentinel://{hosts}/{sentinel.master_name}"


@pytest.fixture(params=["unix", "tls", pytest.param("sentinel", marks=pytest.mark.sentinel)])
def url_and_options(request, tmp_path):
    if request.param == "unix":
        from devkit.servers import start_standalone

        sock = tmp_path / "redis.sock"
        with start_standalone(extra_args=["--unixsocket", str(sock), "--unixsocketperm", "700"]):
            yield f"unix://{sock}", {}
    elif request.param == "tls":
        server = request.getfixturevalue("tls_server")
        yield server.url, {"ssl_ca_certs": server.ca_file}
    else:
        yield _sentinel_url(request.getfixturevalue("sentinel")), {}


async def test_url_forms(url_and_options, prefix):
    url, options = url_and_options
    k = (("n", "{x}"), "k")
    with RedisCache.from_conn_string(url, prefix=prefix, **options) as cache:
        cache.set({k: ("sync", 60)})
        assert cache.get([k]) == {k: "sync"}
    async with AsyncRedisCache.from_conn_string(url, prefix=prefix, **options) as acache:
        assert await acache.aget([k]) == {k: "sync"}
        await acache.aset({k: ("async", None)})
        assert await acache.aget([k]) == {k: "async"}
        await acache.aclear()
        assert await acache.aget([k]) == {}
