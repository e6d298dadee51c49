"""The store factory that langgraph.json names (``"store": {"path": ...}``): the server's
long-term memory (``/store/...`` endpoints, ``store`` in graph nodes) in the same Redis.

The server enters ``redis_store()`` (an async context manager) once per server thread with an
event loop; the store it yields serves every store call of that thread.

Environment:
    REDIS_URL                  as checkpointer.py (required)
    REDIS_SAVER_PREFIX         key namespace (default "lg"); the store's keys are
                               "<prefix>:store#{...}", apart from the checkpoints' keys
    REDIS_STORE_TTL_MINUTES    idle minutes after which an item expires (default 0 = never)
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis_saver import AsyncRedisStore


@asynccontextmanager
async def redis_store() -> AsyncIterator[AsyncRedisStore]:
    minutes = float(os.environ.get("REDIS_STORE_TTL_MINUTES", 0))
    ttl = {"default_ttl": minutes, "refresh_on_read": True} if minutes > 0 else None
    async with AsyncRedisStore.from_conn_string(
        os.environ["REDIS_URL"], prefix=os.environ.get("REDIS_SAVER_PREFIX", "lg"), ttl=ttl
    ) as store:
        await store.setup()  # fail at startup if Redis is unusable, or holds another store layout
        yield store
