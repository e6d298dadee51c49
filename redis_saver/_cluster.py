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


def _node(client: Any, args: Sequence[Any]) -> Any:
    """The node of an FCALL's first key (``args``: function, numkeys, keys..., arguments...), or
    None without keys."""
    return client.get_node_from_key(args[2]) if len(args) > 2 and int(args[1]) else None


def cluster_fcall(client: Any, args: Sequence[Any]) -> Any:
    """``FCALL *args`` on a ``redis.cluster.RedisCluster``."""
    attempts = 1 + client.retry.get_retries()
    for attempt in range(attempts):
        try:
            node = _node(client, args)
            if node is None:  # no key: any node, which redis-py picks without asking
                return client.execute_command("FCALL", *args)
            return client.execute_command("FCALL", *args, target_nodes=node)
        except Exception as exc:
            if attempt + 1 == attempts or type(exc) not in type(client).ERRORS_ALLOW_RETRY:
                raise
    raise AssertionError("unreachable")


async def acluster_fcall(client: Any, args: Sequence[Any]) -> Any:
    """``FCALL *args`` on a ``redis.asyncio.cluster.RedisCluster``."""
    attempts = 1 + client.retry.get_retries()
    for attempt in range(attempts):
        try:
            if client._initialize:  # a slot-map refresh pending (redis-py does it before a command)
                await client.initialize()
            node = _node(client, args)
            if node is None:
                return await client.execute_command("FCALL", *args)
            return await client.execute_command("FCALL", *args, target_nodes=node)
        except Exception as exc:
            if attempt + 1 == attempts or type(exc) not in type(client).ERRORS_ALLOW_RETRY:
                raise
    raise AssertionError("unreachable")
