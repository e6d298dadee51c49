"""FCALL on Redis Cluster clients, sent to the node of the thread's slot.

redis-py places a command on a cluster node by its keys. It reads EVAL's and EVALSHA's keys
itself, but asks a server for an FCALL's (``COMMAND GETKEYS``, twice per call: two round trips
more per saver call). So an FCALL goes to the node of its first key, from redis-py's slot map
(``target_nodes``); a redirect (MOVED, ASK) is still followed by redis-py, and a failure redis-py
would retry (``ERRORS_ALLOW_RETRY``: connection lost, cluster down, slot not covered; redis-py
has refreshed its slot map by then) is sent again as redis-py sends a command again (its
client's retry count), to the node the refreshed map names. Every script is idempotent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _target(client: Any, args: Sequence[Any]) -> dict[str, Any]:
    """``execute_command`` keywords for an FCALL (``args``: function, numkeys, keys...,
    arguments...): the node of its first key; none without keys (any node, which redis-py
    picks without asking)."""
    return {"target_nodes": client.get_node_from_key(args[2])} if len(args) > 2 and int(args[1]) else {}


def _again(client: Any, exc: Exception, attempt: int) -> bool:
    """Whether redis-py would send a command again after ``exc`` on attempt ``attempt`` (0-based)."""
    return attempt < client.retry.get_retries() and type(exc) in type(client).ERRORS_ALLOW_RETRY


def cluster_fcall(client: Any, args: Sequence[Any]) -> Any:
    """``FCALL *args`` on a ``redis.cluster.RedisCluster``."""
    attempt = 0
    while True:
        try:
            return client.execute_command("FCALL", *args, **_target(client, args))
        except Exception as exc:
            if not _again(client, exc, attempt):
                raise
            attempt += 1


async def acluster_fcall(client: Any, args: Sequence[Any]) -> Any:
    """``FCALL *args`` on a ``redis.asyncio.cluster.RedisCluster``."""
    attempt = 0
    while True:
        try:
            if client._initialize:  # a slot-map refresh pending (redis-py does it before a command)
                await client.initialize()
            return await client.execute_command("FCALL", *args, **_target(client, args))
        except Exception as exc:
            if not _again(client, exc, attempt):
                raise
            attempt += 1
