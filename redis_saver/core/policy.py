"""The server's ``maxmemory-policy``: warn (or refuse) where eviction puts data at risk.

Redis evicts whole keys: under ``allkeys-*`` any key may go, under ``volatile-*`` any key with
a ttl (the keys of threads saved with a ttl). A thread that loses a key is forgotten whole
(see "Lost keys" in lua/_lib_thread.lua): reads answer as if it had expired, and a write that
continues it raises ``ThreadEvictedError``; nothing is ever read back partial. So:

- ``noeviction``: nothing to say (a full Redis refuses writes with an OOM error).
- ``volatile-*``: nothing to say. Threads with a ttl are a cache and go whole, least
  recently used (or least often, nearest expiry, random) first; threads without a ttl and
  pinned threads have no ttl, so they are never evicted.
- ``allkeys-*``, saver with a ttl: nothing to say (a session cache), but pinned threads are
  evicted too (docs/deployment.md).
- ``allkeys-*``, saver without a ttl: a warning. Its threads are meant to stay until deleted,
  and Redis evicts them under memory pressure.

The drivers ask once per saver (``setup()`` or the first call: one round trip per primary),
with ``CONFIG GET maxmemory-policy``, else ``INFO memory`` (managed services often disable
CONFIG); when neither answers, nothing is said.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from types import FrameType
from typing import Any

from redis.exceptions import ConnectionError, TimeoutError

from ..errors import EvictionPolicyWarning, UnsupportedServerError

logger = logging.getLogger("redis_saver")

MODES = ("warn", "raise", "off")
# errors that mean "the server is not reachable now": the check is tried again on the next call
UNREACHABLE = (ConnectionError, TimeoutError)


def check_mode(mode: Any) -> str:
    if mode not in MODES:
        raise ValueError(f"eviction_check must be 'warn', 'raise' or 'off', got {mode!r}")
    return str(mode)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _find(reply: Any, name: str) -> str | None:
    """The value of ``name`` in a CONFIG GET / INFO reply (also when nested per node)."""
    if not isinstance(reply, dict):
        return None
    for k, v in reply.items():
        if _text(k) == name and not isinstance(v, dict):
            return _text(v)
    for v in reply.values():
        found = _find(v, name)
        if found is not None:
            return found
    return None


def targets(client: Any) -> list[tuple[str, dict[str, Any]]]:
    """(name, command kwargs) per server to ask: every primary of a cluster, else the client's."""
    if hasattr(client, "get_primaries"):
        return [(f"{n.host}:{n.port}", {"target_nodes": n}) for n in client.get_primaries()]
    return [("", {})]


def from_config(reply: Any) -> str | None:
    return _find(reply, "maxmemory-policy")


def from_info(reply: Any) -> str | None:
    return _find(reply, "maxmemory_policy")


def evicts_keys(policy: str, ttl: bool = False) -> bool:
    """Whether ``policy`` evicts threads a saver (with a ttl or not) expects to keep."""
    return policy.startswith("allkeys-") and not ttl


def report(policies: dict[str, str | None], mode: str, ttl: bool = False) -> None:
    """Warn (mode "warn") or raise ``UnsupportedServerError`` (mode "raise") when a server's
    policy evicts threads a saver without a ttl keeps until deleted (``allkeys-*``);
    ``policies``: server name -> policy (None = unknown); ``ttl``: the saver has a ttl."""
    bad = {node: p for node, p in policies.items() if p is not None and evicts_keys(p, ttl)}
    if not bad:
        return
    where = ", ".join(f"{p} on {node}" if node else p for node, p in sorted(bad.items()))
    msg = (
        f"redis_saver: maxmemory-policy {where} lets Redis evict threads under memory pressure, "
        "and this saver has no ttl: its threads (and pinned threads) are meant to stay until "
        "deleted. An evicted thread is forgotten whole (reads answer as if it had expired; a put "
        "that continues it raises ThreadEvictedError). For durable threads use maxmemory-policy "
        "noeviction (writes then fail with an OOM error and nothing is lost) and size maxmemory "
        "for the data; for a session cache give the saver a ttl (a volatile-* policy then "
        "evicts only threads with a ttl)."
    )
    if mode == "raise":
        raise UnsupportedServerError(msg + " (eviction_check='raise')")
    logger.warning(msg)
    warnings.warn(msg, EvictionPolicyWarning, stacklevel=_caller_level())


def _caller_level() -> int:
    """The stacklevel of the first frame outside this package: the warning points at the
    application's call, however deep the saver's own frames are."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # redis_saver/, not core/
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level


# the questions, in order: CONFIG GET, then INFO memory (when CONFIG is disabled or denied)
QUESTIONS = (("config_get", "maxmemory-policy", from_config), ("info", "memory", from_info))
