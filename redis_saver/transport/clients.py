"""Clients built by ``from_conn_string``, with sane timeouts and a bounded retry.

redis-py's default retry (10 attempts with backoff, on connect *and* per command, timeouts
included, nested so they multiply) can stall one call for a minute against a dead server.
These clients do not retry by themselves; the saver retries a whole script call, which is
safe because every script is idempotent, only on ``ConnectionError`` (refused / reset: fails
fast, and a retry can reach a promoted replica), at most ``retries`` times (saver option,
default 3 here) with a short backoff. A timeout is not retried, so a call against a hung
server fails after about ``socket_timeout`` (connect: ``socket_connect_timeout``).

URL forms: ``redis://``, ``rediss://`` (TLS), ``unix://``; ``redis+cluster://host:port``
(or ``cluster=True``) for Redis Cluster; ``redis+sentinel://host:port[,host:port]/<master>``
for a Sentinel-managed primary.
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

from redis.backoff import NoBackoff
from redis.retry import Retry

DEFAULTS: dict[str, Any] = {
    "socket_timeout": 5.0,
    "socket_connect_timeout": 2.0,
    "health_check_interval": 30,
}


def _driver_info() -> dict[str, Any]:
    """Name this library in ``CLIENT SETINFO`` (``CLIENT LIST`` shows
    ``lib-name=redis-py(redis-saver_v<version>)``; servers without the command, such as Redis
    7.0, ignore it). redis-py < 7 has no ``driver_info``: nothing is added."""
    try:
        from importlib.metadata import version

        from redis.driver_info import DriverInfo
    except ImportError:
        return {}
    try:
        ours = version("redis-saver")
    except Exception:  # not installed as a distribution (a source checkout on the path)
        ours = "dev"
    return {"driver_info": DriverInfo().add_upstream_driver("redis-saver", ours)}


def _split(url: str, options: dict[str, Any], aio: bool = False) -> tuple[str, str, dict[str, Any]]:
    opts = {**DEFAULTS, **_driver_info(), **options}
    if "retry" not in opts:
        if aio:  # the asyncio clients' own class (redis-py 8.2's cluster client warns of the other)
            from redis.asyncio.retry import Retry as AsyncRetry

            opts["retry"] = AsyncRetry(NoBackoff(), 0)
        else:
            opts["retry"] = Retry(NoBackoff(), 0)
    cluster = bool(opts.pop("cluster", False))
    parts = urlsplit(url)
    kind = "cluster" if cluster else "single"
    if parts.scheme in ("redis+cluster", "rediss+cluster"):
        kind = "cluster"
        url = urlunsplit(parts._replace(scheme=parts.scheme.split("+")[0]))
    elif parts.scheme in ("redis+sentinel", "rediss+sentinel"):
        kind = "sentinel"
    return kind, url, opts


def _sentinel_args(url: str) -> tuple[list[tuple[str, int]], str, bool]:
    parts = urlsplit(url)
    hosts = []
    for hp in parts.netloc.split("@")[-1].split(","):
        host, _, port = hp.rpartition(":")
        hosts.append((host or "localhost", int(port or 26379)))
    master = parts.path.strip("/") or "mymaster"
    return hosts, master, parts.scheme.startswith("rediss")


def make_sync_client(url: str, **options: Any) -> Any:
    import redis
    from redis.cluster import RedisCluster
    from redis.sentinel import Sentinel

    kind, url, opts = _split(url, dict(options))
    if kind == "cluster":
        opts.pop("health_check_interval", None)
        return RedisCluster.from_url(url, **opts)
    if kind == "sentinel":
        hosts, master, tls = _sentinel_args(url)
        sentinel_kwargs = {k: opts[k] for k in ("socket_timeout", "socket_connect_timeout") if k in opts}
        # (untyped before redis-py 8.2, typed since: called as Any, the check passes on both)
        s = cast(Any, Sentinel)(hosts, sentinel_kwargs=sentinel_kwargs, ssl=tls, **opts)
        return s.master_for(master)
    return redis.Redis.from_url(url, **opts)


async def make_async_client(url: str, **options: Any) -> Any:
    import redis.asyncio as aredis
    from redis.asyncio.cluster import RedisCluster
    from redis.asyncio.sentinel import Sentinel

    kind, url, opts = _split(url, dict(options), aio=True)
    if kind == "cluster":
        opts.pop("health_check_interval", None)
        client = RedisCluster.from_url(url, **opts)
        await client.initialize()
        return client
    if kind == "sentinel":
        hosts, master, tls = _sentinel_args(url)
        sentinel_kwargs = {k: opts[k] for k in ("socket_timeout", "socket_connect_timeout") if k in opts}
        s = cast(Any, Sentinel)(hosts, sentinel_kwargs=sentinel_kwargs, ssl=tls, **opts)  # (see make_sync_client)
        return s.master_for(master)
    return aredis.Redis.from_url(url, **opts)
