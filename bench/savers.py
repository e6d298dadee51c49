"""Saver entries: each one owns its saver, its own fresh server (Redis-based ones) and a uniform call API.

Async savers are driven on one shared event loop with ``loop.run_until_complete``; their floor is the async
floor, so the loop overhead is paid on both sides of every ratio.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import redis
import redis.asyncio as aioredis

from bench.infra import Server, Unavailable, start_plain, start_stack

FLOOR_SYNC, FLOOR_ASYNC = "floor (sync)", "floor (async)"
MIN_FLOOR_SYNC, MIN_FLOOR_ASYNC = "minimal floor (sync)", "minimal floor (async)"  # bench/floor_min.py


def _rkw() -> dict:
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return {"socket_timeout": 30, "socket_connect_timeout": 5, "retry": Retry(NoBackoff(), 0)}


def _akw() -> dict:
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    return {"socket_timeout": 30, "socket_connect_timeout": 5, "retry": Retry(NoBackoff(), 0)}


@dataclass
class Entry:
    name: str
    mode: str  # sync | async
    kind: str  # redis | stack | postgres | sqlite | memory
    saver: Any
    loop: asyncio.AbstractEventLoop | None
    server: Server | None = None
    floor: str = ""
    make_probe: Callable[[str, int], tuple[Any, Callable[[], None]]] | None = None
    probe_target: tuple[str, int] | None = None
    closers: list = field(default_factory=list)
    admin: Any = None  # direct sync redis client to the entry's own server (INFO, MEMORY)
    notes: list = field(default_factory=list)
    pg_schema: str | None = None

    # ---- uniform call API (sync from the caller's point of view)
    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def put(self, *a, saver=None):
        s = saver or self.saver
        return s.put(*a) if self.mode == "sync" else self.run(s.aput(*a))

    def put_writes(self, *a, saver=None):
        s = saver or self.saver
        return s.put_writes(*a) if self.mode == "sync" else self.run(s.aput_writes(*a))

    def get_tuple(self, config, saver=None):
        s = saver or self.saver
        return s.get_tuple(config) if self.mode == "sync" else self.run(s.aget_tuple(config))

    def list(self, config, saver=None, **kw):
        s = saver or self.saver
        if self.mode == "sync":
            return list(s.list(config, **kw))

        async def go():
            return [x async for x in s.alist(config, **kw)]

        return self.run(go())

    def delta(self, config, channels, saver=None):
        s = saver or self.saver
        if self.mode == "sync":
            return s.get_delta_channel_history(config=config, channels=channels)
        return self.run(s.aget_delta_channel_history(config=config, channels=channels))

    def invoke(self, graph, inp, cfg):
        return graph.invoke(inp, cfg) if self.mode == "sync" else self.run(graph.ainvoke(inp, cfg))

    def do(self, call, saver=None):
        """Replay one recorded Call."""
        if call.op == "put":
            return self.put(*call.args, saver=saver)
        if call.op == "put_writes":
            return self.put_writes(*call.args, saver=saver)
        if call.op == "get_tuple":
            return self.get_tuple(call.args[0], saver=saver)
        if call.op == "list":
            return self.list(call.args[0], saver=saver, **call.kwargs)
        if call.op == "get_delta_channel_history":
            return self.delta(call.kwargs["config"], call.kwargs["channels"], saver=saver)
        raise ValueError(call.op)

    def close(self) -> None:
        for c in reversed(self.closers):
            try:
                c()
            except Exception:
                pass
        if self.server is not None:
            self.server.stop()


# --------------------------------------------------------------------------- factories


def _redis_entry(name, mode, ctx, make, kind="redis", floor=None) -> Entry:
    server = start_stack() if kind == "stack" else start_plain()
    try:
        saver, close = make(server.host, server.port)
    except BaseException:
        server.stop()
        raise
    e = Entry(name, mode, kind, saver, ctx["loop"], server=server,
              floor=floor or (FLOOR_SYNC if mode == "sync" else FLOOR_ASYNC),
              make_probe=make, probe_target=(server.host, server.port))
    e.closers.append(close)
    e.admin = redis.Redis(host=server.host, port=server.port, **_rkw())
    e.closers.append(e.admin.close)
    return e


def _sync_close(client):
    return client.close


def _async_close(ctx, client):
    return lambda: ctx["loop"].run_until_complete(client.aclose())


def _on_client(name, mode, ctx, build, **entry) -> Entry:
    """An entry whose saver is ``build(client)``, on a client of the entry's own server: a
    ``redis.Redis`` (sync) or a ``redis.asyncio.Redis`` (async), closed with the entry."""

    def make(h, p):
        if mode == "sync":
            c = redis.Redis(host=h, port=p, **_rkw())
            return build(c), _sync_close(c)
        c = aioredis.Redis(host=h, port=p, **_akw())
        return build(c), _async_close(ctx, c)

    return _redis_entry(name, mode, ctx, make, **entry)


def make_floor_sync(ctx):
    from bench.floor import FloorSaver

    return _on_client(FLOOR_SYNC, "sync", ctx, FloorSaver)


def make_floor_async(ctx):
    from bench.floor import AsyncFloorSaver

    return _on_client(FLOOR_ASYNC, "async", ctx, AsyncFloorSaver)


def make_min_floor_sync(ctx):
    from bench.floor_min import MinFloorSaver

    return _on_client(MIN_FLOOR_SYNC, "sync", ctx, MinFloorSaver)


def make_min_floor_async(ctx):
    from bench.floor_min import AsyncMinFloorSaver

    return _on_client(MIN_FLOOR_ASYNC, "async", ctx, AsyncMinFloorSaver)


def _import_redis_saver():
    try:
        from redis_saver import AsyncRedisSaver, RedisSaver
    except Exception as e:  # the package is being written concurrently
        raise Unavailable(f"redis_saver import failed: {type(e).__name__}: {e}") from e
    return RedisSaver, AsyncRedisSaver


def make_redis_saver_sync(ctx, name: str = "redis_saver RedisSaver"):
    RedisSaver, _ = _import_redis_saver()
    return _on_client(name, "sync", ctx, partial(RedisSaver, prefix="lg"))


CONTROL = "redis_saver RedisSaver (control)"


def make_redis_saver_sync_control(ctx):
    """The default sync saver again, as an entry of its own (its own server): how far two identical
    entries' ratios lie apart in one run, the spread any ratio of the run carries (bench/report.py)."""
    return make_redis_saver_sync(ctx, CONTROL)


def make_redis_saver_sync_no_telemetry(ctx):
    """The same saver with telemetry=False: what the OpenTelemetry hooks cost without a provider."""
    RedisSaver, _ = _import_redis_saver()
    return _on_client(
        "redis_saver RedisSaver (telemetry off)", "sync", ctx, partial(RedisSaver, prefix="lg", telemetry=False)
    )


def make_redis_saver_sync_evalsha(ctx):
    """The same saver with functions=False: its scripts as EVALSHA, not the function library's FCALL."""
    from bench.previous import supports

    RedisSaver, _ = _import_redis_saver()
    if not supports(RedisSaver, "functions"):
        raise Unavailable("this redis_saver has no functions option (its scripts always run as EVALSHA)")
    return _on_client(
        "redis_saver RedisSaver (EVALSHA)", "sync", ctx, partial(RedisSaver, prefix="lg", functions=False)
    )


def make_redis_saver_async(ctx):
    _, AsyncRedisSaver = _import_redis_saver()
    return _on_client("redis_saver AsyncRedisSaver", "async", ctx, partial(AsyncRedisSaver, prefix="lg"))


def _compress_off(cls) -> dict:
    """``compress=False`` when this redis_saver's constructor takes it (the zstd storage format), else Unavailable."""
    from bench.previous import supports

    if not supports(cls, "compress"):
        raise Unavailable("this redis_saver has no compress option (it stores serde bytes as they are)")
    return {"compress": False}


def make_redis_saver_sync_no_compress(ctx):
    """The working tree's saver with compression off: what compressing costs or saves, same code otherwise."""
    RedisSaver, _ = _import_redis_saver()
    kw = _compress_off(RedisSaver)
    return _on_client("redis_saver RedisSaver (compress=False)", "sync", ctx, partial(RedisSaver, prefix="lg", **kw))


def make_redis_saver_async_no_compress(ctx):
    _, AsyncRedisSaver = _import_redis_saver()
    kw = _compress_off(AsyncRedisSaver)
    return _on_client(
        "redis_saver AsyncRedisSaver (compress=False)", "async", ctx, partial(AsyncRedisSaver, prefix="lg", **kw)
    )


def make_previous_sync(ctx):
    """The previous release (bench/previous.py: 0.1.0, storage format 3), installed beside the working tree."""
    return _previous(ctx, "sync")


def make_previous_async(ctx):
    return _previous(ctx, "async")


def _previous(ctx, mode):
    from bench import previous

    cls = previous.savers()[0 if mode == "sync" else 1]
    e = _on_client(f"{previous.LABEL} {cls.__name__}", mode, ctx, partial(cls, prefix="lg"))
    e.notes.append(f"git {previous.PREVIOUS_COMMIT}, installed as {previous.PACKAGE}")
    return e


def make_memory(ctx):
    from langgraph.checkpoint.memory import InMemorySaver

    return Entry("InMemorySaver", "sync", "memory", InMemorySaver(), ctx["loop"], floor=FLOOR_SYNC)


def make_sqlite(ctx):
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError as e:
        raise Unavailable(f"langgraph-checkpoint-sqlite not installed: {e}") from e
    path = os.path.join(ctx["tmp"], "bench.sqlite")
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    e = Entry("SqliteSaver", "sync", "sqlite", saver, ctx["loop"], floor=FLOOR_SYNC)
    e.closers.append(conn.close)
    e.notes.append("file database in a temp dir")
    return e


def _pg(ctx):
    if not ctx.get("pg_url"):
        raise Unavailable(ctx.get("pg_reason") or "no Postgres")
    try:
        import psycopg  # noqa: F401
        from langgraph.checkpoint.postgres import PostgresSaver  # noqa: F401
        from psycopg_pool import ConnectionPool  # noqa: F401
    except ImportError as e:
        raise Unavailable(f"langgraph-checkpoint-postgres / psycopg[binary,pool] not installed: {e}") from e


def _pg_schema(ctx, tag):
    import psycopg

    schema = f"rsbench_{tag}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(ctx["pg_url"], autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{schema}"')

    def drop():
        with psycopg.connect(ctx["pg_url"], autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    return schema, drop


def _pg_kwargs(schema):
    from psycopg.rows import dict_row

    return {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row, "options": f"-c search_path={schema}"}


def _pg_url_at(url, h, p):
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    d = conninfo_to_dict(url)
    d.update(host=h, port=str(p))
    return make_conninfo(**d)


def make_pg_sync(ctx):
    _pg(ctx)
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool

    schema, drop = _pg_schema(ctx, "sync")

    def make(h, p):
        pool = ConnectionPool(_pg_url_at(ctx["pg_url"], h, p), min_size=1, max_size=8, kwargs=_pg_kwargs(schema),
                              open=True)
        return PostgresSaver(pool), pool.close

    saver, close = make(*_pg_addr(ctx["pg_url"], conninfo_to_dict))
    saver.setup()
    e = Entry("PostgresSaver", "sync", "postgres", saver, ctx["loop"], floor=FLOOR_SYNC, make_probe=make,
              probe_target=_pg_addr(ctx["pg_url"], conninfo_to_dict), pg_schema=schema)
    e.closers += [drop, close]
    e.notes.append("ConnectionPool max 8, autocommit")
    return e


def _pg_addr(url, conninfo_to_dict):
    d = conninfo_to_dict(url)
    return d.get("host") or "127.0.0.1", int(d.get("port") or 5432)


def make_pg_async(ctx):
    _pg(ctx)
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import AsyncConnectionPool

    schema, drop = _pg_schema(ctx, "async")
    loop = ctx["loop"]

    def make(h, p):
        async def mk():
            pool = AsyncConnectionPool(_pg_url_at(ctx["pg_url"], h, p), min_size=1, max_size=16,
                                       kwargs=_pg_kwargs(schema), open=False)
            await pool.open()
            return AsyncPostgresSaver(pool), pool  # the saver binds the running loop

        saver, pool = loop.run_until_complete(mk())
        return saver, lambda: loop.run_until_complete(pool.close())

    saver, close = make(*_pg_addr(ctx["pg_url"], conninfo_to_dict))
    loop.run_until_complete(saver.setup())
    e = Entry("AsyncPostgresSaver", "async", "postgres", saver, loop, floor=FLOOR_ASYNC, make_probe=make,
              probe_target=_pg_addr(ctx["pg_url"], conninfo_to_dict), pg_schema=schema)
    e.closers += [drop, close]
    e.notes.append("AsyncConnectionPool max 16, autocommit")
    return e


def _official():
    try:
        from langgraph.checkpoint.redis import RedisSaver
        from langgraph.checkpoint.redis.aio import AsyncRedisSaver
    except ImportError as e:
        raise Unavailable(f"langgraph-checkpoint-redis not installed: {e}") from e
    return RedisSaver, AsyncRedisSaver


def make_official_sync(ctx):
    RedisSaver, _ = _official()

    def build(c):
        s = RedisSaver(redis_client=c)
        s.setup()
        return s

    return _on_client("official RedisSaver", "sync", ctx, build, kind="stack")


def make_official_async(ctx):
    _, AsyncRedisSaver = _official()

    def make(h, p):
        async def mk():
            c = aioredis.Redis(host=h, port=p, **_akw())
            s = AsyncRedisSaver(redis_client=c)
            await s.asetup()
            return s, c

        s, c = ctx["loop"].run_until_complete(mk())
        return s, _async_close(ctx, c)

    return _redis_entry("official AsyncRedisSaver", "async", ctx, make, kind="stack")


def _plain():
    try:
        from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver
    except ImportError as e:
        raise Unavailable(f"langgraph-checkpoint-plainredis not installed: {e}") from e
    return RedisSaver, AsyncRedisSaver


def make_plain_sync(ctx):
    RedisSaver, _ = _plain()
    return _on_client("plainredis RedisSaver", "sync", ctx, lambda c: RedisSaver(client=c))


def make_plain_async(ctx):
    _, AsyncRedisSaver = _plain()
    return _on_client("plainredis AsyncRedisSaver", "async", ctx, lambda c: AsyncRedisSaver(client=c))


# order = display order; floors first (ratios need them)
FACTORIES: list[tuple[str, Callable]] = [
    (FLOOR_SYNC, make_floor_sync),
    (FLOOR_ASYNC, make_floor_async),
    (MIN_FLOOR_SYNC, make_min_floor_sync),
    (MIN_FLOOR_ASYNC, make_min_floor_async),
    ("redis_saver RedisSaver", make_redis_saver_sync),
    ("redis_saver AsyncRedisSaver", make_redis_saver_async),
    (CONTROL, make_redis_saver_sync_control),
    ("redis_saver RedisSaver (telemetry off)", make_redis_saver_sync_no_telemetry),
    ("redis_saver RedisSaver (EVALSHA)", make_redis_saver_sync_evalsha),
    ("redis_saver RedisSaver (compress=False)", make_redis_saver_sync_no_compress),
    ("redis_saver AsyncRedisSaver (compress=False)", make_redis_saver_async_no_compress),
    ("redis_saver 0.1.0 (format 3) RedisSaver", make_previous_sync),
    ("redis_saver 0.1.0 (format 3) AsyncRedisSaver", make_previous_async),
    ("InMemorySaver", make_memory),
    ("SqliteSaver", make_sqlite),
    ("PostgresSaver", make_pg_sync),
    ("AsyncPostgresSaver", make_pg_async),
    ("official RedisSaver", make_official_sync),
    ("official AsyncRedisSaver", make_official_async),
    ("plainredis RedisSaver", make_plain_sync),
    ("plainredis AsyncRedisSaver", make_plain_async),
]


def resolve_pg_url() -> tuple[str | None, str | None]:
    """BENCH_POSTGRES_URL, else the local trust-auth database `test` if it answers."""
    url = os.environ.get("BENCH_POSTGRES_URL")
    default = "postgresql://postgres@127.0.0.1:5432/test"
    try:
        import psycopg
    except ImportError:
        return None, "psycopg not installed"
    try:
        with psycopg.connect(url or default, connect_timeout=3) as c:
            c.execute("select 1")
        return url or default, None
    except Exception as e:
        src = "BENCH_POSTGRES_URL" if url else f"default {default}"
        return None, f"Postgres not reachable ({src}): {type(e).__name__}: {str(e).strip()[:150]}"
