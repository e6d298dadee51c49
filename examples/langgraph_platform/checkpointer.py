"""The checkpointer factory that langgraph.json names (``"checkpointer": {"path": ...}``).

The LangGraph server loads this module once and enters ``redis_checkpointer()`` (an async
context manager) once per server thread with an event loop, at startup; the saver it yields
serves every run, state read, history, copy, rollback and delete of that thread, and the
context exits (closing the Redis connections) when the server stops.

Environment:
    REDIS_URL                  redis://, rediss://, redis+cluster://, redis+sentinel://... (required)
    REDIS_SAVER_PREFIX         key namespace (default "lg"); one per application sharing a Redis
    REDIS_SAVER_TTL_MINUTES    idle minutes after which a thread's checkpoints expire (default
                               10080 = 7 days; 0 = never)
    REDIS_SAVER_REFRESH_ON_READ  "1" (default) / "0": reads of a thread extend its expiry too
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis_saver import AsyncRedisSaver


def _ttl() -> dict | None:
    minutes = float(os.environ.get("REDIS_SAVER_TTL_MINUTES", 7 * 24 * 60))
    if minutes <= 0:
        return None  # never expire: delete threads through the API (DELETE /threads/<id>)
    return {
        # every write to a thread (a checkpoint, a pending write, a copy into it) sets this
        # expiry on all of the thread's keys at once: the thread expires as a unit when idle
        "default_ttl": minutes,
        # reads of the thread (get state, history) extend it too: "idle" means not even read
        "refresh_on_read": os.environ.get("REDIS_SAVER_REFRESH_ON_READ", "1") != "0",
    }


@asynccontextmanager
async def redis_checkpointer() -> AsyncIterator[AsyncRedisSaver]:
    async with AsyncRedisSaver.from_conn_string(
        os.environ["REDIS_URL"],
        prefix=os.environ.get("REDIS_SAVER_PREFIX", "lg"),
        ttl=_ttl(),
    ) as saver:
        await saver.asetup()  # fail at startup, not at the first run, if Redis is unusable
        yield saver
