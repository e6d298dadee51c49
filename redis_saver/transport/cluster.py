"""FCALL on Redis Cluster clients, sent to the node of the thread's slot.

redis-py places a command on a cluster node by its keys. It reads EVAL's and EVALSHA's keys
itself, but asks a server for an FCALL's (``COMMAND GETKEYS``, twice per call: two round trips
more per saver call). So an FCALL goes to the node of its first key, from redis-py's slot map
(``target_nodes``); a redirect (MOVED, ASK) is still followed by redis-py, and a failure redis-py
would retry (``ERRORS_ALLOW_RETRY``: connection lost, cluster down, slot not covered; redis-py
has refreshed its slot map by then) is sent again as redis-py sends a command again (its
client's retry count), to the node the refreshed map names. Every script is idempotent.

redis-py's asyncio cluster client before 8.2 closes every connection it holds on every 5th MOVED,
under the commands using them (8.2 only patches its slot map, but any task's ``aclose()`` does
the same): such a command fails with ``ConnectionError`` or with whatever the closed connection
object raises (``AttributeError``). The asyncio paths raise ``ClientClosedConnection`` instead
(``closed_by_client``), which the engine sends again as a call refused while its slot moves.

redis-py 8.2 also paces the slot-map refreshes its errors ask for (``refresh_pending``,
``request_refresh``): until one is due, its commands use the current map, and so do the
saver's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from redis.exceptions import ConnectionError, RedisClusterException, RedisError

from ..core.engine import ClientClosedConnection
from . import wire

T = TypeVar("T")


def _target(client: Any, args: Sequence[Any]) -> dict[str, Any]:
    """``execute_command`` keywords for an FCALL (``args``: function, numkeys, keys...,
    arguments...): the node of its first key; none without keys (any node, which redis-py
    picks without asking)."""
    return {"target_nodes": client.get_node_from_key(args[2])} if len(args) > 2 and int(args[1]) else {}


def _again(client: Any, exc: Exception, attempt: int) -> bool:
    """Whether redis-py would send a command again after ``exc`` on attempt ``attempt`` (0-based)."""
    return attempt < wire.retries(getattr(client, "retry", None)) and type(exc) in type(client).ERRORS_ALLOW_RETRY


def run_requested_refresh(client: Any) -> None:
    """Run the slot-map refresh an error asked redis-py's sync cluster client for, once due, as
    it does before each attempt of a command (redis-py 8.2; before, the error refreshed the map
    itself): a command placed by the saver reads the map first (``_target``, ``_by_node``)."""
    nodes_manager = client.nodes_manager
    if getattr(nodes_manager, "_refresh_requested", False):
        nodes_manager._run_requested_refresh(client.retry)


def cluster_fcall(client: Any, args: Sequence[Any]) -> Any:
    """``FCALL *args`` on a ``redis.cluster.RedisCluster``."""
    attempt = 0
    while True:
        try:
            run_requested_refresh(client)
            return client.execute_command("FCALL", *args, **_target(client, args))
        except Exception as exc:
            if not _again(client, exc, attempt):
                raise
            attempt += 1


def refresh_pending(client: Any) -> bool:
    """Whether redis-py's asyncio cluster client refreshes its slot map before its next command.
    Before 8.2 it does whenever ``_initialize`` is set (an error set it); since 8.2 an error only
    asks for a refresh, run once due (``topology_refresh_min_interval`` after the previous one,
    ``_initialize_due()``), the current slot map serving until then."""
    due = getattr(client, "_initialize_due", None)
    return bool(due()) if due is not None else bool(getattr(client, "_initialize", False))


def request_refresh(client: Any, node_name: str | None) -> None:
    """Ask redis-py's asyncio cluster client for a slot-map refresh after a connection error on
    node ``node_name``, as its own command path does (``_request_refresh`` since 8.2, which keeps
    the failed node to be tried last and paces refreshes; ``_initialize`` before)."""
    request = getattr(client, "_request_refresh", None)
    if request is not None:
        request(last_failed_node_name=node_name)
    else:
        client._initialize = True


def closed_by_client(exc: BaseException) -> BaseException:
    """``exc`` of a command on an asyncio cluster client, or ClientClosedConnection when its
    connection was closed under it: an error that is neither Redis's nor the socket's (redis-py's
    connection object without its streams), or a ``ConnectionError`` of a connection that was
    established (not one failing to connect, whose message says "connecting to"). A node that
    went away looks the same; its call then goes again and fails to connect, which surfaces as
    the ``ConnectionError`` it is."""
    if isinstance(exc, ClientClosedConnection) or not isinstance(exc, Exception):
        return exc
    foreign = not isinstance(exc, (RedisError, RedisClusterException, OSError))
    if foreign or (isinstance(exc, ConnectionError) and " connecting to " not in str(exc)):
        closed = ClientClosedConnection(f"the connection was closed under the call ({type(exc).__name__}: {exc})")
        closed.__cause__ = exc
        return closed
    return exc


async def closed_as_lost(aw: Awaitable[T]) -> T:
    """``await aw`` (a command on an asyncio cluster client), a connection closed under it
    raised as ClientClosedConnection (``closed_by_client``)."""
    try:
        return await aw
    except Exception as exc:
        err = closed_by_client(exc)
        if err is exc:
            raise
        raise err from exc


async def acluster_fcall(client: Any, args: Sequence[Any]) -> Any:
    """``FCALL *args`` on a ``redis.asyncio.cluster.RedisCluster``."""
    attempt = 0
    while True:
        try:
            if refresh_pending(client):  # redis-py refreshes its slot map before a command: _target reads it
                await client.initialize()
            return await client.execute_command("FCALL", *args, **_target(client, args))
        except Exception as exc:
            if not _again(client, exc, attempt):
                err = closed_by_client(exc)
                if err is exc:
                    raise
                raise err from exc
            attempt += 1
