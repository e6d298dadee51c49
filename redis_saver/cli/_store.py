"""``redis-saver store ...``: the RedisStore's namespaces and items (ls, show, export, import, migrate
from PostgresStore or SqliteStore, reindex: rebuild vector sets on Redis 8). Namespaces are written
``users.u1.memories`` (LangGraph's text form: labels hold no dot) or as a JSON array (``'["users",
"u1"]'``)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import click

from ._common import Group, State, _confirm, _fail, err, jsonable, out, output_file
from ._urls import option_check

FORMAT = 1  # the export stream's version
pass_state = click.make_pass_decorator(State)


def parse_ns(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    if text.startswith("["):
        try:
            v = json.loads(text)
        except ValueError as exc:
            raise click.BadParameter(f"not a JSON array: {exc}") from None
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise click.BadParameter("a namespace is a JSON array of strings")
        return tuple(v)
    return tuple(text.split("."))


def _store(st: State) -> Any:
    """A RedisStore on the tool's client and prefix, with the layout recorded under the prefix
    (shards, shard depth: ``setup()`` wrote them), else the defaults for the client."""
    from redis_saver import RedisStore
    from redis_saver.store import StoreKeys

    opts: dict[str, Any] = {"prefix": st.prefix, "retries": 3, "telemetry": False}
    if st.serde is not None:
        opts["serde"] = st.serde
    if st.integrity_key is not None:
        opts["integrity_key"] = st.integrity_key
    recorded = st.client.get(StoreKeys(st.prefix, 1, None).schema())
    if recorded:
        _fmt, shards, depth = recorded.decode().split(" ")
        opts["shards"], opts["shard_depth"] = int(shards), int(depth) or None
    return RedisStore(st.client, **opts)


@click.group(cls=Group)
def store() -> None:
    """The RedisStore's items (LangGraph long-term memory) under the prefix."""


@store.command("ls")
@click.argument("prefix", required=False, metavar="[NAMESPACE]")
@click.option("--suffix", metavar="NAMESPACE", help="Only namespaces ending so ('*' matches any label).")
@click.option("--max-depth", type=click.IntRange(min=1), metavar="N", help="Truncate namespaces to N labels.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON on stdout.")
@pass_state
def ls(st: State, prefix: str | None, suffix: str | None, max_depth: int | None, limit: int, as_json: bool) -> None:
    """List namespaces (under NAMESPACE, '*' matching any label)."""
    names = _store(st).list_namespaces(
        prefix=parse_ns(prefix) or None, suffix=parse_ns(suffix) or None, max_depth=max_depth, limit=limit
    )
    if as_json:
        click.echo(json.dumps([list(n) for n in names], ensure_ascii=False))
        return
    for n in names:
        out.print(".".join(n), markup=False, highlight=False)


@store.command()
@click.argument("namespace", metavar="NAMESPACE")
@click.argument("key", required=False)
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Items of a namespace.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON on stdout.")
@pass_state
def show(st: State, namespace: str, key: str | None, limit: int, as_json: bool) -> None:
    """Show one item, or the items under a namespace (in search order). Reads leave expiries alone."""
    s = _store(st)
    ns = parse_ns(namespace)
    if key is not None:
        item = s.get(ns, key, refresh_ttl=False)
        if item is None:
            raise _fail(f"no item {key!r} in namespace {list(ns)}")
        items = [item]
    else:
        items = s.search(ns, limit=limit, refresh_ttl=False)
    rows = [
        {
            "namespace": list(i.namespace),
            "key": i.key,
            "value": jsonable(i.value),
            "created_at": i.created_at.isoformat(),
            "updated_at": i.updated_at.isoformat(),
        }
        for i in items
    ]
    if as_json:
        click.echo(json.dumps(rows if key is None else rows[0], ensure_ascii=False))
        return
    for r in rows:
        out.print(f"[bold]{'.'.join(r['namespace'])}[/bold] {r['key']}  (created {r['created_at'][:19]}, "
                  f"updated {r['updated_at'][:19]})", highlight=False)
        out.print_json(json.dumps(r["value"], ensure_ascii=False))


@store.command("export")
@click.argument("prefix", required=False, metavar="[NAMESPACE]")
@click.option("-o", "--output", "path", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="File to write ('-' = stdout).")
@pass_state
def export_cmd(st: State, prefix: str | None, path: str) -> None:
    """Export the items (under NAMESPACE) as JSON lines: values as the serializer's bytes,
    created/updated times, ttl and vectors, as stored."""
    s = _store(st)
    n = 0
    with output_file(path) as f:
        f.write(json.dumps({"type": "store-header", "format": FORMAT, "prefix": st.prefix}) + "\n")
        for item in s.export_items(parse_ns(prefix)):
            f.write(json.dumps(item.to_json(), ensure_ascii=False) + "\n")
            n += 1
        f.write(json.dumps({"type": "end", "items": n}) + "\n")
    err.print(f"exported {n} item(s) to {path}")


@store.command()
@click.argument("prefix", required=False, metavar="[NAMESPACE]")
@click.option("--budget", type=click.IntRange(1, 4096), default=512, show_default=True,
              help="Vectors a script call adds at most (a page).")
@click.option("--hnsw-m", "hnsw_m", type=int, default=None,
              help="Make the sets HNSW graphs of this M (5-100) for the approximate search "
                   "(ann_index_config), and remake complete sets made with another M.")
@click.option("--ef-construction", "ef_construction", type=int, default=64, show_default=True,
              help="With --hnsw-m: VADD EF of the sets made (4-1000).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON on stdout.")
@pass_state
def reindex(
    st: State, prefix: str | None, budget: int, hnsw_m: int | None, ef_construction: int, as_json: bool
) -> None:
    """Rebuild the vector sets (Redis 8) of the namespaces (under NAMESPACE) whose searches scan:
    sets evicted or deleted, namespaces written before sets or by a store with vector_sets=False.
    Bounded pages, safe while applications write; a namespace left out ("ended": an eviction or
    such a writer meanwhile) can be reindexed again. Exits 1 if any ended. With --hnsw-m, sets
    made with another M are made again (their searches scan meanwhile)."""
    s = _store(st)
    try:
        hnsw = (hnsw_m, ef_construction) if hnsw_m is not None else None
        res = s.rebuild_vector_sets(parse_ns(prefix), budget=budget, hnsw=hnsw)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        click.echo(json.dumps([{"namespace": list(ns), "status": v} for ns, v in res.items()], ensure_ascii=False))
    else:
        for ns, v in res.items():
            out.print(f"{'.'.join(ns)}  {v}", markup=False, highlight=False)
        err.print(f"{sum(v == 'done' for v in res.values())} of {len(res)} namespace(s) in vector sets")
    if any(v == "ended" for v in res.values()):
        raise SystemExit(1)


@store.command("verify")
@click.argument("prefix", required=False, metavar="[NAMESPACE]")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON on stdout.")
@pass_state
def verify_cmd(st: State, prefix: str | None, as_json: bool) -> None:
    """Check every item (under NAMESPACE) against the integrity key and report each one that
    fails (tampered, moved from another namespace or key, written without the key or under
    another); nothing is deserialized, nothing written. Exit code 1 when any failed."""
    if st.integrity_key is None:
        raise click.UsageError("store verify needs the key: --integrity-key-file or REDIS_SAVER_INTEGRITY_KEY")
    failed: list[tuple[tuple[str, ...], str, str]] = []
    ok = sum(1 for _ in _store(st).export_items(parse_ns(prefix), failed=failed))
    for ns, key, error in failed:
        err.print(f"{'.'.join(ns)} {key}: FAILED {error}", markup=False, highlight=False)
    if as_json:
        click.echo(json.dumps({"verified": ok, "failed": [{"namespace": list(ns), "key": k, "error": e}
                                                         for ns, k, e in failed]}, ensure_ascii=False))
    else:
        click.echo(f"verified {ok + len(failed)} item(s): {ok} passed, {len(failed)} failed")
    if failed:
        raise _fail(f"{len(failed)} item(s) failed their integrity check")


def _read_stream(path: str) -> Iterator[Any]:
    from redis_saver.store import StoredItem

    with open(path, encoding="utf-8") as f:
        first = json.loads(f.readline() or "{}")
        if first.get("type") != "store-header" or first.get("format") != FORMAT:
            raise _fail(f"{path}: not a store export of format {FORMAT} (first line {first!r:.80})")
        n, ended = 0, False
        for lineno, line in enumerate(f, 2):
            d = json.loads(line)
            if d.get("type") == "end":
                if d.get("items") != n:
                    raise _fail(f"{path}: the end line says {d.get('items')} items, the file holds {n}")
                ended = True
                break
            try:
                yield StoredItem.from_json(d)
            except (KeyError, ValueError, TypeError) as exc:
                raise _fail(f"{path}:{lineno}: {type(exc).__name__}: {exc}") from None
            n += 1
        if not ended:
            raise _fail(f"{path}: truncated (no end line)")


@store.command("import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@pass_state
def import_cmd(st: State, path: str, yes: bool) -> None:
    """Import a store export: items written as they were (replacing items with the same
    namespace and key). The whole file is checked before anything is written."""
    items = list(_read_stream(path))
    s = _store(st)
    _confirm(f"Write {len(items)} item(s) under prefix {st.prefix!r}?", yes)
    n = 0
    for i in range(0, len(items), 1000):
        n += s.import_items(items[i : i + 1000])
    click.echo(f"imported {n} item(s)")


def _pg_rows(source: str) -> Iterator[tuple[str, str, Any, datetime, datetime, float | None]]:
    try:
        import psycopg
    except ImportError as exc:
        raise _fail(f"migrating from PostgreSQL needs psycopg: {exc}") from None
    with psycopg.connect(source, autocommit=True) as conn:
        yield from conn.execute(
            "SELECT prefix, key, value, created_at, updated_at, ttl_minutes FROM store ORDER BY created_at, prefix, key"
        )


def _sqlite_time(text: Any) -> datetime:
    """SqliteStore's timestamps: SQLite's ``CURRENT_TIMESTAMP`` text (UTC) or ISO text."""
    when = text if isinstance(text, datetime) else datetime.fromisoformat(str(text))
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _sqlite_rows(source: str) -> Iterator[tuple[str, str, Any, datetime, datetime, float | None]]:
    import sqlite3

    from ._sources import SourceError, sqlite_path

    try:
        path = sqlite_path(source)
    except SourceError as exc:
        raise _fail(str(exc)) from None
    if not os.path.exists(path):
        raise _fail(f"{path}: no such SQLite database")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        try:
            cur = conn.execute(
                "SELECT prefix, key, value, created_at, updated_at, ttl_minutes FROM store"
                " ORDER BY created_at, prefix, key"
            )
        except sqlite3.DatabaseError as exc:
            raise _fail(f"{path} is not a SqliteStore database: {exc}") from None
        for prefix, key, value, created, updated, ttl in cur:
            yield prefix, key, json.loads(value), _sqlite_time(created), _sqlite_time(updated), ttl
    finally:
        conn.close()


@store.command()
@click.option(
    "--from",
    "source",
    required=True,
    metavar="URL",
    callback=option_check("sql"),
    help="postgresql://... (a PostgresStore's database) or sqlite:///path (a SqliteStore's file).",
)
@click.option("--verify", is_flag=True, help="Afterwards, compare every item (value, times) with the source.")
@pass_state
def migrate(st: State, source: str, verify: bool) -> None:
    """Copy a PostgresStore's or SqliteStore's items into the RedisStore (values, created /
    updated times, ttl).

    The source is only read (its ``store`` table). Its vectors are not copied (pgvector's and
    sqlite-vec's formats are their own); put the items again with an index configured to embed
    them.
    """
    from redis_saver.store import StoredItem

    if source.startswith(("postgres://", "postgresql://")):
        rows = _pg_rows
    elif source.startswith("sqlite:"):
        rows = _sqlite_rows
    else:
        raise _fail(f"unsupported source {source!r}: use postgresql://... or sqlite:///path")
    s = _store(st)
    t0 = time.monotonic()
    n = 0
    batch: list[Any] = []
    for prefix, key, value, created, updated, ttl in rows(source):
        type_, data = s.serde.dumps_typed(value)
        ttl_ms = max(1, round(float(ttl) * 60_000)) if ttl else 0
        ns = tuple(prefix.split("."))
        batch.append(StoredItem(ns, key, type_, data, StoredItem.us(created), StoredItem.us(updated), ttl_ms))
        if len(batch) == 1000:
            n += s.import_items(batch)
            batch = []
    n += s.import_items(batch)
    err.print(f"copied {n} item(s) in {time.monotonic() - t0:.1f}s")
    if verify:
        bad = 0
        for prefix, key, value, created, updated, _ in rows(source):
            got = s.get(tuple(prefix.split(".")), key, refresh_ttl=False)
            if got is None or got.value != value or got.created_at != created or got.updated_at != updated:
                bad += 1
                err.print(f"mismatch: {prefix} {key}")
        if bad:
            raise _fail(f"verify: {bad} of {n} item(s) differ")
        err.print(f"verified {n} item(s)")
    click.echo(f"migrated {n} item(s)")
