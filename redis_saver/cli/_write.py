"""``redis-saver delete / prune / rewrite / pin / unpin / expire``: commands that change stored
threads (each asks first; ``--dry-run`` says what it would do)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import click

from . import _ops as ops
from ._common import (
    State,
    _confirm,
    _duration,
    _fail,
    _progress,
    _size,
    _threads_arg,
    _ttl_text,
    dry_option,
    err,
    pass_state,
    yes_option,
)


@click.command()
@click.argument("thread_ids", nargs=-1, required=True, metavar="THREAD...")
@yes_option
@dry_option
@pass_state
def delete(st: State, thread_ids: tuple[str, ...], yes: bool, dry_run: bool) -> None:
    """Delete threads: every checkpoint, write and blob of them, in every namespace."""
    saver = st.saver()
    found, missing = _threads_arg(saver, thread_ids)
    for t in missing:
        err.print(f"thread {t!r}: not found")
    if not found:
        raise _fail("nothing to delete")
    sums = {t: ops.summarize(saver, t) for t in found}
    for t, s in sums.items():
        n = s.checkpoints if s else 0
        click.echo(f"{'would delete' if dry_run else 'to delete:'} thread {t}: {n} checkpoint(s), "
                   f"{_size(s.bytes if s else 0)}")
    if dry_run:
        return
    _confirm(f"Delete {len(found)} thread(s)?", yes)
    done: list[str] = []
    for t in found:
        try:
            saver.delete_thread(t)
        except Exception as exc:
            left = [x for x in found if x not in done]
            raise _fail(f"deleting {t!r} failed ({exc}); deleted: {done or 'none'}; left unchanged: {left}") from None
        done.append(t)
    click.echo(f"deleted {len(done)} thread(s)")
    if missing:
        raise click.exceptions.Exit(1)


def _targets(
    saver: Any, thread_ids: tuple[str, ...], all_threads: bool, verb: str
) -> tuple[Iterable[str], str, list[str]]:
    """The threads a command acts on: the given ids that exist (each missing one reported), or
    with --all every thread, streamed; (threads, how to name them, the missing ids)."""
    if bool(thread_ids) == all_threads:
        raise click.UsageError("give thread ids or --all (not both)")
    if all_threads:
        return ops.iter_thread_ids(saver), "every thread", []
    found, missing = _threads_arg(saver, thread_ids)
    for t in missing:
        err.print(f"thread {t!r}: not found")
    if not found:
        raise _fail(f"nothing to {verb}")
    return found, f"{len(found)} thread(s)", missing


@click.command()
@click.argument("thread_ids", nargs=-1, metavar="[THREAD]...")
@click.option("--all", "all_threads", is_flag=True, help="Every thread under the prefix.")
@click.option("--strategy", type=click.Choice(["keep_latest", "delete"]), default="keep_latest", show_default=True,
              help="keep_latest: per namespace, the latest checkpoint (and the ancestors its DeltaChannels "
                   "need) with its writes; delete: remove the threads.")
@yes_option
@dry_option
@pass_state
def prune(st: State, thread_ids: tuple[str, ...], all_threads: bool, strategy: str, yes: bool, dry_run: bool) -> None:
    """Prune threads' history (saver.prune), one atomic call per thread."""
    saver = st.saver()
    targets, what, missing = _targets(saver, thread_ids, all_threads, "prune")
    if dry_run:
        n = 0
        for t in targets:
            s = ops.summarize(saver, t, with_bytes=False)
            if s is None:
                continue
            n += 1
            if strategy == "delete":
                click.echo(f"would delete thread {t}: {s.checkpoints} checkpoint(s)")
            else:
                keep = len(s.namespaces)
                click.echo(f"would prune thread {t}: {s.checkpoints} checkpoint(s) in {keep} namespace(s); "
                           f"keeps the latest of each (plus ancestors its DeltaChannels need), "
                           f"drops up to {s.checkpoints - keep}")
        click.echo(f"dry run: {n} thread(s), nothing changed")
        return
    _confirm(f"Prune ({strategy}) {what}?", yes)
    done, removed = 0, 0
    todo = list(targets) if not all_threads else None
    with _progress() as prog:
        task = prog.add_task("prune", total=len(todo) if todo is not None else None, rate="")
        for t in todo if todo is not None else targets:
            before = ops.count_checkpoints(saver, t)
            try:
                st.writer_for(t).prune([t], strategy=strategy)
            except Exception as exc:
                raise _fail(f"pruning {t!r} failed ({exc}); {done} thread(s) pruned before it; "
                            f"{t!r} and the threads after it were left unchanged") from None
            removed += before - (0 if strategy == "delete" else ops.count_checkpoints(saver, t))
            done += 1
            prog.advance(task)
    click.echo(f"pruned {done} thread(s) ({strategy}): {removed} checkpoint(s) removed")
    if not all_threads and missing:
        raise click.exceptions.Exit(1)


@click.command()
@click.argument("thread_ids", nargs=-1, metavar="[THREAD]...")
@click.option("--all", "all_threads", is_flag=True, help="Every thread under the prefix.")
@click.option("--after", metavar="THREAD", help="With --all: start after this thread (resume a stopped run).")
@click.option("--sign", is_flag=True, help="Sign every stored record with the integrity key (saver.sign_thread).")
@yes_option
@pass_state
def rewrite(
    st: State, thread_ids: tuple[str, ...], all_threads: bool, after: str | None, sign: bool, yes: bool
) -> None:
    """Compress values stored raw (by 0.1.x, or with compress=False) in place (saver.rewrite_values).

    Optional: raw values are read as they are. Each thread is rewritten in bounded atomic calls,
    leaving its expiry as it is; a value written meanwhile is left alone. A stopped run can be
    run again (done values are skipped) or resumed with --after, the last thread it printed.

    With --sign (and --integrity-key-file): sign what is stored with the first key instead,
    unchecked: you vouch for it (data written before the key was set, or under a retired key).
    """
    if after is not None and not all_threads:
        raise click.UsageError("--after goes with --all")
    if sign:
        _sign(st, thread_ids, all_threads, after, yes)
        return
    saver = st.saver()
    targets, what, missing = _targets(saver, thread_ids, all_threads, "rewrite")
    _confirm(f"Rewrite the raw values of {what} compressed?", yes)
    total = [0, 0, 0]  # values, bytes before, bytes after

    def one(t: str) -> str:
        r = saver.rewrite_values(t)
        total[0], total[1], total[2] = total[0] + r.values, total[1] + r.bytes_before, total[2] + r.bytes_after
        return f"{t}: {r.values} value(s), {_size(r.bytes_before)} -> {_size(r.bytes_after)}"

    done = _each_thread(targets, after, "rewrite", "rewriting", "(rewritten values are skipped)", one)
    click.echo(f"rewrote {done} thread(s): {total[0]} value(s), {_size(total[1])} -> {_size(total[2])}")
    if not all_threads and missing:
        raise click.exceptions.Exit(1)


def _sign(st: State, thread_ids: tuple[str, ...], all_threads: bool, after: str | None, yes: bool) -> None:
    if st.integrity_key is None:
        raise click.UsageError("--sign needs the key: --integrity-key-file or REDIS_SAVER_INTEGRITY_KEY")
    saver = st.saver()
    targets, what, missing = _targets(saver, thread_ids, all_threads, "sign")
    _confirm(f"Sign every record of {what} with the integrity key, vouching for what is stored?", yes)
    records = [0]

    def one(t: str) -> str:
        n = saver.sign_thread(t)
        records[0] += n
        return f"{t}: {n} record(s) signed"

    done = _each_thread(targets, after, "sign", "signing", "", one)
    click.echo(f"signed {done} thread(s): {records[0]} record(s)")
    if not all_threads and missing:
        raise click.exceptions.Exit(1)


def _each_thread(
    targets: Iterable[str], after: str | None, task_name: str, doing: str, again_note: str, one: Callable[[str], str]
) -> int:
    """``one(thread)`` for each thread after ``after`` (a resumed --all run), its line printed,
    with a progress bar; a failure says how to resume. Returns the threads done."""
    done = 0
    skipping = after is not None
    with _progress() as prog:
        total = len(targets) if isinstance(targets, list) else None
        task = prog.add_task(task_name, total=total, rate="")
        for t in targets:
            if skipping:
                skipping = t != after
                continue
            try:
                line = one(t)
            except Exception as exc:
                note = f" {again_note}" if again_note else ""
                raise _fail(f"{doing} {t!r} failed ({exc}) after {done} thread(s); run the command "
                            f"again{note}, or with --all --after {t!r}") from None
            done += 1
            prog.advance(task)
            err.print(line)
    return done


def _expiry_now(st: State, thread: str) -> str:
    s = ops.summarize(st.saver(), thread)
    if s is None:
        raise _fail(f"thread {thread!r}: not found")
    return _ttl_text(s, st.ttl)


@click.command()
@click.argument("thread")
@yes_option
@dry_option
@pass_state
def pin(st: State, thread: str, yes: bool, dry_run: bool) -> None:
    """Pin a thread: it never expires until unpinned."""
    now = _expiry_now(st, thread)
    if dry_run:
        click.echo(f"would pin thread {thread} (expiry now: {now})")
        return
    _confirm(f"Pin thread {thread} (expiry now: {now}) so that it never expires?", yes)
    st.saver().pin(thread)
    click.echo(f"pinned {thread}")


@click.command()
@click.argument("thread")
@yes_option
@dry_option
@pass_state
def unpin(st: State, thread: str, yes: bool, dry_run: bool) -> None:
    """Unpin a thread: it expires again, --ttl minutes after this call."""
    now = _expiry_now(st, thread)
    then = "no expiry until your application's next write" if st.ttl is None else f"expires in {_duration(st.ttl * 60)}"
    if dry_run:
        click.echo(f"would unpin thread {thread} (expiry now: {now}; then: {then})")
        return
    _confirm(f"Unpin thread {thread} ({then})?", yes)
    st.saver(st.ttl).unpin(thread)
    click.echo(f"unpinned {thread}: {then}")
    if st.ttl is None:
        err.print("note: pass --ttl MINUTES (your application's default_ttl) to set its expiry now, "
                  "or run: redis-saver expire THREAD MINUTES")


@click.command()
@click.argument("thread")
@click.argument("minutes", type=click.FloatRange(min=0, min_open=True))
@yes_option
@dry_option
@pass_state
def expire(st: State, thread: str, minutes: float, yes: bool, dry_run: bool) -> None:
    """Make a whole thread expire MINUTES from now (every key at once; unpins it)."""
    saver = st.saver()
    s = ops.summarize(saver, thread)
    if s is None:
        raise _fail(f"thread {thread!r}: not found")
    now = "no expiry" if s.expires_in_ms is None else f"expires in {_duration(s.expires_in_ms / 1000)}"
    if s.expires_in_ms is None and st.ttl is not None:
        now = "pinned"
    if dry_run:
        click.echo(f"would set thread {thread} to expire in {_duration(minutes * 60)} (now: {now})")
        return
    _confirm(f"Thread {thread} ({now}) will expire in {_duration(minutes * 60)}. Continue?", yes)
    # unpin through a saver whose default_ttl is MINUTES: the pin script sets every key's
    # expiry (and the slot index) in one atomic call
    st.saver(minutes).unpin(thread)
    click.echo(f"thread {thread} expires in {_duration(minutes * 60)}")


COMMANDS = (delete, prune, rewrite, pin, unpin, expire)
