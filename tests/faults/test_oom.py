"""Out of memory (maxmemory reached, ``noeviction``): adding data is refused, freeing it is not.

The server is filled through the saver itself until ``put`` gets ``OutOfMemoryError``; then
maxmemory is set a margin below used_memory less what the clients' buffers hold (Redis shrinks an
idle query buffer on its own clock, which could bring used_memory back under the limit), before
each step too. Then
``put`` and ``put_writes`` are refused with nothing written (the DUMP of every key of the
prefix is unchanged), while ``delete_thread``, ``prune(keep_latest)``, ``prune(delete)`` and
``delete_for_runs`` (``#!lua flags=allow-oom``) each succeed while the server is over the
limit and bring ``used_memory`` down; afterwards writes work again. Sync and async savers.
"""

from __future__ import annotations

import base64
import os
import time

import pytest
import redis
import redis.asyncio

from devkit.servers import async_client_kwargs, client_kwargs, start_standalone
from redis_saver import AsyncRedisSaver, RedisSaver
from tests.faults._util import call, cfg, checkpoint, info, listed, version

# random text: it must take memory, compressed or not (zstd takes a repeated letter to ~nothing)
VALUE = base64.b64encode(os.urandom(15_000)).decode()  # 20,000 characters
HEADROOM = 3_000_000  # bytes of maxmemory above what the empty server uses
MARGIN = 200_000  # how far over the limit each step runs


@pytest.fixture
def server():
    with start_standalone(extra_args=("--maxmemory-policy", "noeviction")) as s:
        yield s


def used_memory(server) -> int:
    return int(info(server, "memory")["used_memory"])


def snapshot(r: redis.Redis, prefix: str) -> dict[bytes, bytes | None]:
    return {k: r.dump(k) for k in r.scan_iter(match=f"{prefix}:*", count=1000)}


async def fill(saver, name: str, state: dict) -> list[str]:
    """Put checkpoints (4 per thread, one run per thread) until the server refuses even a small
    one: OOM reached (a big put's own query buffer counts in used_memory, so it is refused first)."""
    threads: list[str] = []
    value = VALUE
    for n in range(10_000):
        tid = f"{name}-{n}"
        conf = cfg(tid)
        for k in range(4):
            try:
                args = checkpoint(value + str(k), version(k + 1), step=k, run_id=f"run-{tid}")
                conf = await call(saver, "put", conf, *args)
            except redis.exceptions.OutOfMemoryError:
                if value == "s":
                    return threads
                value = "s"
                break
            if k == 0:
                threads.append(tid)
            state[tid] = conf
    raise AssertionError("maxmemory never reached")


async def freed(server, before: int) -> int:
    """used_memory once it went below ``before`` (UNLINK may free in a background thread)."""
    deadline = time.monotonic() + 2
    while (now := used_memory(server)) >= before and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.02)  # settled
    return min(now, used_memory(server))


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_oom_refuses_writes_but_deletes_free_memory(server, kind, capsys):
    r = redis.Redis(host=server.host, port=server.port, **client_kwargs())
    if kind == "sync":
        client = redis.Redis(host=server.host, port=server.port, **client_kwargs())
        saver = RedisSaver(client, prefix="oom")
    else:
        client = redis.asyncio.Redis(host=server.host, port=server.port, **async_client_kwargs())
        saver = AsyncRedisSaver(client, prefix="oom")
    try:
        await call(saver, "setup")
        limit = used_memory(server) + HEADROOM
        r.config_set("maxmemory", limit)
        state: dict = {}
        threads = await fill(saver, "fill", state)
        assert len(threads) >= 8, threads
        assert used_memory(server) > limit - MARGIN

        def over_limit() -> None:
            # below what the clients' buffers hold too: Redis shrinks an idle query buffer on its
            # own clock (~200-230 KB here after the fill's 20 KB puts), which alone would bring
            # used_memory back under a limit set MARGIN below it
            m = info(server, "memory")
            r.config_set("maxmemory", int(m["used_memory"]) - int(m["mem_clients_normal"]) - MARGIN)

        over_limit()
        victim = threads[0]
        latest = state[victim]

        # over the limit: put and put_writes are refused before writing anything
        before = snapshot(r, "oom")
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            await call(saver, "put", latest, *checkpoint("x", version(9), step=9))
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            await call(saver, "put_writes", latest, [("x", "w")], "task")
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            await call(saver, "put", cfg("new-thread"), *checkpoint("x", version(1)))
        assert snapshot(r, "oom") == before
        assert (await call(saver, "get_tuple", cfg(victim))).config == latest  # reads still served

        figures = []

        async def still_oom() -> None:
            """Every delete below runs over the limit (a previous one made room)."""
            over_limit()
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                await call(saver, "put", cfg(victim), *checkpoint("x", version(9)))

        async def freeing(what: str, name: str, *args, **kwargs) -> None:
            await still_oom()
            m0 = used_memory(server)
            await call(saver, name, *args, **kwargs)
            m1 = await freed(server, m0)
            figures.append(f"{what}: used_memory {m0} -> {m1}")
            assert m1 < m0, figures[-1]

        await freeing("delete_thread", "delete_thread", threads[1])
        assert await call(saver, "get_tuple", cfg(threads[1])) is None
        await freeing("prune(keep_latest)", "prune", [threads[2], threads[3]], strategy="keep_latest")
        for t in threads[2:4]:
            assert [x.config for x in await listed(saver, cfg(t))] == [state[t]]
        await freeing("prune(delete)", "prune", [threads[4]], strategy="delete")
        assert await listed(saver, cfg(threads[4])) == []
        await freeing("delete_for_runs", "delete_for_runs", [f"run-{threads[5]}", f"run-{threads[6]}"])
        for t in threads[5:7]:
            assert await call(saver, "get_tuple", cfg(t)) is None

        # the deletes made room below the limit the fill reached: writes work again
        r.config_set("maxmemory", limit)
        conf = await call(saver, "put", latest, *checkpoint("after", version(9), step=9))
        await call(saver, "put_writes", conf, [("x", "w")], "task")
        tup = await call(saver, "get_tuple", cfg(victim))
        assert tup.config == conf and tup.pending_writes == [("task", "x", "w")]
        with capsys.disabled():
            print(f"\n{kind}: {len(threads)} threads filled {HEADROOM} bytes; " + "; ".join(figures))
    finally:
        r.close()
        if kind == "sync":
            client.close()
        else:
            await client.aclose()
