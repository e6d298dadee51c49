"""``redis-saver export / import / migrate``: threads out of and into Redis (a JSON-lines
stream, or another saver: Postgres, SQLite, another Redis)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from typing import Any

import click

from . import _ops as ops
from . import _stream as stream
from ._common import (
    State,
    _confirm,
    _fail,
    _progress,
    _threads_arg,
    dry_option,
    err,
    output_file,
    pass_state,
    yes_option,
)
from ._sources import one_transaction
from ._urls import option_check, redact
from ._whole import interruptible, resumed_text, staged, stopped


@click.command("export")
@click.argument("thread_ids", nargs=-1, metavar="[THREAD]...")
@click.option("-o", "--output", "path", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="File to write ('-' = stdout).")
@pass_state
def export_cmd(st: State, thread_ids: tuple[str, ...], path: str) -> None:
    """Export threads (all of them by default) as a versioned JSON-lines stream."""
    saver = st.saver()
    if thread_ids:
        found, missing = _threads_arg(saver, thread_ids)
        if missing:
            raise click.UsageError(f"not found: {', '.join(missing)}")
        ids: Iterable[str] = found
    else:
        ids = ops.iter_thread_ids(saver)
    n_t = n_c = n_w = 0
    t0 = time.monotonic()
    with output_file(path) as f:
        stream.write_line(f, stream.header(st.prefix, saver.serde))
        with _progress() as prog:
            task = prog.add_task("export", total=len(thread_ids) or None, rate="")
            for tid in ids:
                items = ops.items_from_tuples(list(saver.list(ops.thread_config(tid))))
                for it in items:
                    stream.write_line(f, stream.encode_item(saver.serde, it))
                    n_w += len(it.writes)
                n_t += 1 if items else 0
                n_c += len(items)
                prog.update(task, advance=1, rate=_rate(n_c, t0))
        stream.write_line(f, {"type": "end", "threads": n_t, "checkpoints": n_c, "writes": n_w})
    err.print(f"exported {n_t} thread(s), {n_c} checkpoint(s), {n_w} pending write(s) to {path}")


def _rate(n: int, t0: float) -> str:
    dt = time.monotonic() - t0
    return f"{n / dt:,.0f} checkpoints/s" if dt > 0 and n else ""


@click.command("import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, allow_dash=False))
@click.option("--replace", is_flag=True, help="Delete threads that already exist before importing them.")
@click.option("--skip-existing", is_flag=True, help="Leave threads that already exist as they are.")
@yes_option
@dry_option
@pass_state
def import_cmd(st: State, path: str, replace: bool, skip_existing: bool, yes: bool, dry_run: bool) -> None:
    """Import an export stream (checkpoints with their ids, parents, metadata, pending writes).

    Each thread appears whole or not at all, whenever the import stops (Ctrl-C, a kill, a lost
    connection): run the same command again to finish it. Threads that already hold exactly
    what the file holds (imported by an earlier run) are skipped.
    """
    if replace and skip_existing:
        raise click.UsageError("--replace and --skip-existing exclude each other")
    progress = [0, 0]  # threads done, threads to do
    current: list[str | None] = [None]
    try:
        with interruptible():
            _import(st, path, replace, skip_existing, yes, dry_run, progress, current)
    except KeyboardInterrupt:
        raise stopped(progress[0], progress[1], current[0], f"import {path}") from None


def _import(
    st: State, path: str, replace: bool, skip_existing: bool, yes: bool, dry_run: bool,
    progress: list[int], current: list[str | None],
) -> None:
    """import's work; ``progress`` and ``current`` say where it stands, for the message of a
    stopped run."""
    saver = st.saver()
    with open(path, encoding="utf-8") as f:
        info = stream.check_file(f)
    existing = {t for t in info["threads"] if ops.thread_exists(saver, t)}
    complete = _holding_the_file(saver, path, existing)
    differ = [t for t in info["threads"] if t in existing and t not in complete]
    if differ and not (replace or skip_existing):
        raise _fail(f"{len(differ)} thread(s) already exist ({', '.join(differ[:5])}"
                    f"{'...' if len(differ) > 5 else ''}) with other contents than the file's: pass --replace "
                    "or --skip-existing; nothing was written")
    todo = [t for t in info["threads"] if t not in complete and not (skip_existing and t in existing)]
    progress[1] = len(todo)
    click.echo(f"{'would import' if dry_run else 'import'} {len(todo)} thread(s) of {len(info['threads'])} in "
               "the file" + (f"; {len(differ)} existing thread(s) " + ("replaced" if replace else "skipped")
                            if differ else ""))
    if complete:
        click.echo(resumed_text(len(complete), 0))
    if dry_run:
        return
    if replace and differ:
        _confirm(f"Replace {len(differ)} existing thread(s)?", yes)
    replaced = set(differ) if replace else set()
    n_c = n_w = redone = 0
    t0 = time.monotonic()
    writer = st.saver(st.ttl) if st.ttl is not None else saver
    with open(path, encoding="utf-8") as f, _progress() as prog:
        task = prog.add_task("import", total=len(todo), rate="")
        for tid, items in stream.iter_threads(saver.serde, f, only=set(todo)):
            current[0] = tid
            try:
                if tid in replaced:
                    saver.delete_thread(tid)
                with staged(writer, tid) as again:
                    for it in items:
                        n_w += ops.write_item(writer, it)
                        n_c += 1
            except Exception as exc:
                raise _fail(f"importing thread {tid!r} failed ({type(exc).__name__}: {exc}); nothing of it "
                            f"was written; imported: {progress[0]} thread(s); not touched: "
                            f"{len(todo) - progress[0] - 1}; run the same command again to go on") from None
            current[0] = None
            redone += again
            progress[0] += 1
            prog.update(task, advance=1, rate=_rate(n_c, t0))
    click.echo(f"imported {progress[0]} thread(s), {n_c} checkpoint(s), {n_w} pending write(s)")
    if redone:
        click.echo(resumed_text(0, redone))


def _holding_the_file(saver: Any, path: str, tids: set[str]) -> set[str]:
    """The threads of ``tids`` that hold exactly what the file holds for them (checkpoints,
    parents, metadata, pending writes in order): imported whole by an earlier run."""
    if not tids:
        return set()
    same: set[str] = set()
    with open(path, encoding="utf-8") as f:
        for tid, items in stream.iter_threads(saver.serde, f, only=tids):
            stored = ops.items_from_tuples(list(saver.list(ops.thread_config(tid))))
            # equal values, or equal bytes for values whose class has no equality of its own
            if stored == items or [stream.encode_item(saver.serde, x) for x in stored] == [
                stream.encode_item(saver.serde, x) for x in items
            ]:
                same.add(tid)
    return same


# --------------------------------------------------------------------------- migrate


@click.command()
@click.option("--from", "source", metavar="SOURCE", callback=option_check("sql", "plainredis"),
              help="Into Redis: sqlite:///path/to/file.db (SqliteSaver), postgresql://... (PostgresSaver) or "
              "plainredis://host:port/db?prefix=lg (langgraph-checkpoint-plainredis).")
@click.option("--to", "target", metavar="URL", callback=option_check("sql", "redis"),
              help="Out of Redis (--url): sqlite:///path/to/file.db (SqliteSaver; made if missing) or "
              "postgresql://... (PostgresSaver; its tables are set up). With --from: the target Redis URL "
              "(default: --url / REDIS_URL).")
@click.option("--threads", "thread_opt", multiple=True, metavar="ID[,ID...]", help="Only these threads (repeatable).")
@click.option("--verify", is_flag=True, help="Afterwards, compare every migrated thread checkpoint by checkpoint.")
@dry_option
@pass_state
def migrate(
    st: State, source: str | None, target: str | None, thread_opt: tuple[str, ...], verify: bool, dry_run: bool
) -> None:
    """Copy threads from SqliteSaver / PostgresSaver into Redis (--from), or out of Redis into
    them (--to sqlite:///... | postgresql://...), oldest checkpoint first.

    Ids, parents, metadata and pending writes (in order) are preserved; going out, channel
    versions are rewritten into the target saver's form, in the same order, so a thread goes on
    there. Resumable: checkpoints already copied (same id, same number of pending writes) are
    skipped, and so are threads already complete. The source is only read.
    """
    from urllib.parse import urlsplit

    from ._sources import TARGET_SCHEMES, open_source, open_target

    out_of_redis = target is not None and urlsplit(target).scheme in TARGET_SCHEMES
    if source and out_of_redis:
        raise click.UsageError("--from and --to sqlite/postgresql: one side is Redis (--url / REDIS_URL)")
    if not source and not out_of_redis:
        raise click.UsageError("give --from SOURCE (into Redis) or --to sqlite:///... | postgresql://... (out of it)")
    if target and not out_of_redis:
        st.url = target
    st.require_url()
    wanted = [t for opt in thread_opt for t in opt.split(",") if t]
    saver = st.saver()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(interruptible())
            if out_of_redis:
                assert target is not None
                if wanted:
                    unknown = [t for t in wanted if not ops.thread_exists(saver, t)]
                    if unknown:
                        raise click.UsageError(f"not in Redis: {', '.join(unknown)}")
                    ids = wanted
                else:
                    ids = list(ops.iter_thread_ids(saver))
                src = saver
                dst = writer = stack.enter_context(open_target(target, dry_run))
                err.print(f"Redis {redact(st.require_url())} -> {redact(target)}: {len(ids)} thread(s)")
            else:
                assert source is not None
                src, ids = stack.enter_context(open_source(source))
                dst, writer = saver, st.saver(st.ttl) if st.ttl is not None else saver
                if wanted:
                    unknown = [t for t in wanted if t not in set(ids)]
                    if unknown:
                        raise click.UsageError(f"not in the source: {', '.join(unknown)}")
                    ids = wanted
                err.print(f"source {redact(source)}: {len(ids)} thread(s)")
            _copy_threads(src, dst, writer, ids, other_saver=out_of_redis, verify=verify, dry_run=dry_run)
    except KeyboardInterrupt:  # before or after the copy (the copy says where it stopped itself)
        raise stopped(None, None, None, "migrate") from None


def _copy_threads(
    src: Any, dst: Any, writer: Any, ids: list[str], *, other_saver: bool, verify: bool, dry_run: bool
) -> None:
    """migrate's copy, either way: each thread read from ``src`` oldest first, the checkpoints
    ``dst`` lacks (or holds with fewer pending writes) written through ``writer``; then, with
    ``verify``, every thread compared through both savers. Exits 1 on a failure or difference."""
    versions = ops.padded_versions if other_saver else ops.our_versions
    t0 = time.monotonic()
    copied = skipped = failed = n_c = n_w = redone = 0
    failures: list[str] = []
    current: str | None = None
    try:
        with interruptible(), _progress(transient=False) as prog:
            task = prog.add_task("migrate", total=len(ids), rate="")
            for tid in ids:
                current = tid
                try:
                    src_items = ops.items_from_tuples(list(src.list(ops.thread_config(tid))),
                                                      other_saver=other_saver)
                    have = {(t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"]):
                            len(t.pending_writes or ()) for t in dst.list(ops.thread_config(tid))}
                    todo = [it for it in src_items if have.get((it.ns, it.checkpoint_id)) != len(it.writes)]
                    if not todo:
                        skipped += 1
                    elif dry_run:
                        click.echo(f"would copy thread {tid}: {len(todo)} of {len(src_items)} checkpoint(s)")
                        copied += 1
                    else:
                        with _whole_thread(dst, writer, tid, other_saver, bool(have)) as again:
                            for it in todo:
                                n_w += ops.write_item(writer, it)
                                n_c += 1
                        copied += 1
                        redone += again
                except Exception as exc:  # noqa: BLE001 - report and go on with the next thread
                    failed += 1
                    failures.append(f"{tid}: {type(exc).__name__}: {exc}")
                current = None
                prog.update(task, advance=1, rate=_rate(n_c, t0))
    except KeyboardInterrupt:
        raise stopped(copied + skipped, len(ids), current, "migrate") from None
    mismatches: list[str] = []
    notes: list[str] = []
    if verify and not dry_run:
        with _progress() as prog:
            task = prog.add_task("verify", total=len(ids), rate="")
            for tid in ids:
                diffs = ops.diff_threads(list(src.list(ops.thread_config(tid))),
                                         list(dst.list(ops.thread_config(tid))), notes, versions)
                mismatches.extend(f"{tid}: {d}" for d in diffs)
                prog.advance(task)
    dt = time.monotonic() - t0
    click.echo(f"{'dry run: ' if dry_run else ''}{len(ids)} thread(s): {copied} "
               f"{'to copy' if dry_run else 'copied'}, {skipped} already copied, {failed} failed; "
               f"{n_c} checkpoint(s), {n_w} pending write(s) in {dt:.1f}s"
               + (f" ({n_c / dt:,.0f} checkpoints/s)" if n_c and dt > 0 else ""))
    if redone:
        click.echo(resumed_text(0, redone))
    for f_ in failures:
        err.print(f"[red]failed[/] {f_} (rerun to resume)")
    if verify and not dry_run:
        if mismatches:
            for m in mismatches[:50]:
                err.print(f"[red]mismatch[/] {m}")
            click.echo(f"verify: {len(mismatches)} difference(s)")
        else:
            click.echo(f"verify: {len(ids)} thread(s) identical, checkpoint by checkpoint")
            if notes:
                click.echo(f"  ({len(notes)} checkpoint(s) differ only by a DeltaChannel snapshot: SqliteSaver keeps "
                           "it only in the checkpoint that took it, redis_saver and PostgresSaver store values per "
                           "version and return it with every checkpoint at that version; LangGraph reads the same "
                           "state)")
    if failures or mismatches:
        raise click.exceptions.Exit(1)


def _whole_thread(dst: Any, writer: Any, tid: str, other_saver: bool, present: bool) -> Any:
    """The context a thread is copied in, so that it is whole in the target or not there: one
    transaction of the other saver; into Redis, a thread new to it staged (``staged``), one it
    holds in part (written by an earlier release) completed in place. Yields True when an
    unfinished earlier copy was removed first."""
    if other_saver:
        return one_transaction(dst)
    return contextlib.nullcontext(False) if present else staged(writer, tid)


COMMANDS = (export_cmd, import_cmd, migrate)
