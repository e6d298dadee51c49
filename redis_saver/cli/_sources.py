"""The other savers of ``redis-saver migrate``: LangGraph's SqliteSaver and PostgresSaver (as
sources, ``--from``, and as targets, ``--to``), and the plain-Redis saver of
``langgraph-checkpoint-plainredis`` (another Redis saver that needs no server modules; a source).

Checkpoints are read only through a saver's ``list`` and written only through its ``put`` and
``put_writes``; the list of a source's thread ids is the one thing read directly (SQL
``SELECT DISTINCT thread_id``; the plain-Redis saver's documented ``<prefix>:threads``
registry), as no saver has an API for it. A source is never written (no ``setup()``); a target
gets its saver's own ``setup()`` (tables, migrations; idempotent).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit, urlunsplit

INSTALL_HINT = "pip install 'redis-saver[migrate]'"
TARGET_SCHEMES = ("sqlite", "postgres", "postgresql")
# the package each saver comes from: (what, its distribution) for the error when it is missing
_PACKAGES = {
    "sqlite": ("SqliteSaver", "langgraph-checkpoint-sqlite"),
    "postgres": ("PostgresSaver", "langgraph-checkpoint-postgres and psycopg"),
    "plainredis": ("the plain-Redis saver", "langgraph-checkpoint-plainredis"),
}


class SourceError(RuntimeError):
    """A source or target store that cannot be used (missing package, file, tables, server)."""


def _saver_class(kind: str) -> Any:
    """The saver class of a kind of store, or a SourceError naming the package to install."""
    try:
        if kind == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver

            return SqliteSaver
        if kind == "postgres":
            import psycopg  # noqa: F401
            from langgraph.checkpoint.postgres import PostgresSaver

            return PostgresSaver
        from langgraph_checkpoint_plainredis import RedisSaver as PlainRedisSaver

        return PlainRedisSaver
    except ImportError as exc:
        what, package = _PACKAGES[kind]
        raise SourceError(f"{what} needs {package} ({INSTALL_HINT}): {exc}") from None


def sqlite_path(url: str) -> str:
    """``sqlite:///relative/path`` or ``sqlite:////absolute/path`` (SQLAlchemy style)."""
    rest = url[len("sqlite://") :]
    if not rest.startswith("/"):
        raise SourceError(f"bad SQLite URL {url!r}: use sqlite:///relative/path or sqlite:////absolute/path")
    return rest[1:]


class _HeldCommits:
    """A sqlite3 connection whose ``commit()`` waits while ``held`` (SqliteSaver commits after
    every ``put`` and ``put_writes``; ``one_transaction`` makes a whole thread one transaction)."""

    def __init__(self, conn: Any) -> None:
        self.raw = conn
        self.held = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)

    def commit(self) -> None:
        if not self.held:
            self.raw.commit()


@contextmanager
def one_transaction(saver: Any) -> Iterator[bool]:
    """The writes to a SqliteSaver or PostgresSaver target made in the block as one
    transaction: committed at its end, rolled back on any exception (Ctrl-C included; a killed
    process's open transaction is rolled back by the database). Yields False (nothing redone)."""
    conn: Any = getattr(saver, "conn", None)
    if isinstance(conn, _HeldCommits):
        conn.held = True
        try:
            yield False
        except BaseException:
            conn.held = False
            conn.raw.rollback()
            raise
        conn.held = False
        conn.raw.commit()
    elif hasattr(conn, "transaction"):  # a psycopg Connection (PostgresSaver.from_conn_string)
        with conn.transaction():
            yield False
    else:  # a dry run's empty saver
        yield False


@contextmanager
def _sqlite(url: str, create: bool) -> Iterator[Any]:
    """A SqliteSaver on the file of ``url`` (made when ``create``, then writes go through
    ``one_transaction``); its connection closed on exit."""
    import sqlite3

    path = sqlite_path(url)
    if not create and not os.path.isfile(path):
        raise SourceError(f"SQLite file not found: {path}")
    cls = _saver_class("sqlite")
    try:
        conn = sqlite3.connect(path, check_same_thread=False)
    except sqlite3.Error as exc:
        raise SourceError(f"cannot open {path}: {exc}") from None
    try:
        yield cls(_HeldCommits(conn) if create else conn)
    finally:
        conn.close()


@contextmanager
def _postgres(url: str) -> Iterator[Any]:
    """A PostgresSaver on one connection to ``url``; closed on exit."""
    cls = _saver_class("postgres")
    import psycopg

    try:
        cm = cls.from_conn_string(url)
        saver = cm.__enter__()
    except psycopg.Error as exc:
        raise SourceError(f"cannot connect to PostgreSQL: {exc}") from None
    try:
        yield saver
    finally:
        cm.__exit__(None, None, None)


def _sql_thread_ids(saver: Any, url: str) -> list[str]:
    """The thread ids of a SqliteSaver / PostgresSaver (on ``url``), sorted."""
    query = "SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id"
    if url.startswith("sqlite:"):
        import sqlite3

        try:
            return [str(r[0]) for r in saver.conn.execute(query).fetchall()]
        except sqlite3.DatabaseError as exc:
            raise SourceError(f"{sqlite_path(url)} is not a SqliteSaver database: {exc}") from None
    import psycopg

    try:
        # from_conn_string opens one Connection (PostgresSaver.conn is typed Connection | ConnectionPool)
        pg = cast("psycopg.Connection[dict[str, Any]]", saver.conn)
        return [str(r["thread_id"]) for r in pg.execute(query).fetchall()]
    except psycopg.Error as exc:
        raise SourceError(f"no PostgresSaver tables there: {exc}") from None


@contextmanager
def open_source(url: str) -> Iterator[tuple[Any, list[str]]]:
    """(saver, thread ids) of a source URL; closed on exit."""
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        with _sqlite(url, create=False) as saver:
            yield saver, _sql_thread_ids(saver, url)
    elif scheme in ("postgres", "postgresql"):
        with _postgres(url) as saver:
            yield saver, _sql_thread_ids(saver, url)
    elif scheme in ("plainredis", "plainrediss"):
        # plainredis://host:port/db?prefix=lg : langgraph-checkpoint-plainredis's RedisSaver
        cls = _saver_class("plainredis")
        import json

        import redis

        parts = urlsplit(url)
        prefix = parse_qs(parts.query).get("prefix", ["lg"])[0]
        redis_url = urlunsplit(parts._replace(scheme=scheme[len("plain") :], query=""))
        plain: Any = cls(url=redis_url, prefix=prefix)
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


@contextmanager
def open_target(url: str, dry_run: bool = False) -> Iterator[Any]:
    """The saver of a target URL (``sqlite:///path``: the file is made if missing;
    ``postgresql://...``), set up (its tables made or migrated); closed on exit. With
    ``dry_run`` nothing is made: a target that does not exist yet reads as an empty saver."""
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        import sqlite3

        if dry_run and not os.path.isfile(sqlite_path(url)):
            yield _empty()
            return
        with _sqlite(url, create=True) as saver:
            try:
                if dry_run:  # SqliteSaver sets itself up on first use: not in a file without its tables
                    if not saver.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'checkpoints'").fetchone():
                        yield _empty()
                        return
                else:
                    saver.setup()
            except sqlite3.DatabaseError as exc:
                raise SourceError(f"{sqlite_path(url)} is not a SqliteSaver database: {exc}") from None
            yield saver
    elif scheme in ("postgres", "postgresql"):
        import psycopg

        with _postgres(url) as saver:
            if dry_run:
                if saver.conn.execute("SELECT to_regclass('checkpoint_migrations') AS t").fetchone()["t"] is None:
                    yield _empty()
                    return
            else:
                try:
                    saver.setup()
                except psycopg.Error as exc:
                    raise SourceError(f"cannot set up the PostgresSaver tables: {exc}") from None
            yield saver
    else:
        raise SourceError(f"unsupported target {url!r}: use sqlite:///path or postgresql://...")


def _empty() -> Any:
    """A target that does not exist yet, for a dry run: it holds no thread."""
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver()
