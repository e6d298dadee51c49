"""Source savers for ``redis-saver migrate``: LangGraph's SqliteSaver and PostgresSaver, and
the plain-Redis saver of ``langgraph-checkpoint-plainredis`` (another Redis saver that needs
no server modules).

Checkpoints are read only through the source saver's ``list`` (oldest first after sorting);
the list of thread ids is the one thing read directly (SQL ``SELECT DISTINCT thread_id``; the
plain-Redis saver's documented ``<prefix>:threads`` registry), as no saver has an API for it.
No ``setup()`` is called: the source is never written.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit, urlunsplit

INSTALL_HINT = "pip install 'redis-saver[migrate]'"


class SourceError(RuntimeError):
    pass


def sqlite_path(url: str) -> str:
    """``sqlite:///relative/path`` or ``sqlite:////absolute/path`` (SQLAlchemy style)."""
    rest = url[len("sqlite://") :]
    if not rest.startswith("/"):
        raise SourceError(f"bad SQLite URL {url!r}: use sqlite:///relative/path or sqlite:////absolute/path")
    return rest[1:]


@contextmanager
def open_source(url: str) -> Iterator[tuple[Any, list[str]]]:
    """(saver, thread ids) of a source URL; closed on exit."""
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        path = sqlite_path(url)
        if not os.path.isfile(path):
            raise SourceError(f"SQLite file not found: {path}")
        try:
            import sqlite3

            from langgraph.checkpoint.sqlite import SqliteSaver
        except ImportError as exc:
            raise SourceError(
                f"migrating from SQLite needs langgraph-checkpoint-sqlite ({INSTALL_HINT}): {exc}"
            ) from None
        conn = sqlite3.connect(path, check_same_thread=False)
        try:
            try:
                rows = conn.execute("SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id").fetchall()
            except sqlite3.DatabaseError as exc:
                raise SourceError(f"{path} is not a SqliteSaver database: {exc}") from None
            yield SqliteSaver(conn), [str(r[0]) for r in rows]
        finally:
            conn.close()
    elif scheme in ("postgres", "postgresql"):
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
        except ImportError as exc:
            raise SourceError(
                f"migrating from PostgreSQL needs langgraph-checkpoint-postgres and psycopg ({INSTALL_HINT}): {exc}"
            ) from None
        import psycopg

        try:
            cm = PostgresSaver.from_conn_string(url)
            saver = cm.__enter__()
        except psycopg.Error as exc:
            raise SourceError(f"cannot connect to PostgreSQL: {exc}") from None
        try:
            try:
                # from_conn_string opens one Connection (PostgresSaver.conn is typed Connection | ConnectionPool)
                pg = cast("psycopg.Connection[dict[str, Any]]", saver.conn)
                rows = pg.execute("SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id").fetchall()
            except psycopg.Error as exc:
                raise SourceError(f"no PostgresSaver tables there: {exc}") from None
            yield saver, [str(r["thread_id"]) for r in rows]
        finally:
            cm.__exit__(None, None, None)
    elif scheme in ("plainredis", "plainrediss"):
        # plainredis://host:port/db?prefix=lg : langgraph-checkpoint-plainredis's RedisSaver
        try:
            from langgraph_checkpoint_plainredis import RedisSaver as PlainRedisSaver
        except ImportError as exc:
            raise SourceError(
                f"migrating from the plain-Redis saver needs langgraph-checkpoint-plainredis ({INSTALL_HINT}): {exc}"
            ) from None
        import json

        import redis

        parts = urlsplit(url)
        prefix = parse_qs(parts.query).get("prefix", ["lg"])[0]
        redis_url = urlunsplit(parts._replace(scheme=scheme[len("plain") :], query=""))
        plain: Any = PlainRedisSaver(url=redis_url, prefix=prefix)
        try:
            try:
                # the saver's (thread, namespace) registry: a hash of JSON {"thread": ..., "ns": ...}
                raw = plain.client.hvals(f"{prefix}:threads")
                tids = sorted({str(json.loads(v)["thread"]) for v in raw})
            except redis.RedisError as exc:
                raise SourceError(f"cannot read the plain-Redis saver at {redis_url}: {exc}") from None
            except (ValueError, KeyError, TypeError) as exc:
                raise SourceError(f"{prefix}:threads is not a plain-Redis saver registry: {exc}") from None
            yield plain, tids
        finally:
            plain.client.close()
    else:
        raise SourceError(
            f"unsupported source {url!r}: use sqlite:///path, postgresql://... or plainredis://host:port/db?prefix=..."
        )
