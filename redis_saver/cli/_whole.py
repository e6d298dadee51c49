"""Whole threads only, whenever a copy stops: what ``import`` and ``migrate`` share.

Into Redis, a thread that is new to the target is written between two calls of import.lua:
"stage" makes it under a token with its meta field "xp" set, which makes every read answer as
for a thread that does not exist; ``put`` and ``put_writes`` then write it as usual (bounded
calls, however big the thread); "reveal" clears the field, so the thread appears whole in one
call. A run stopped in between (Ctrl-C, SIGTERM, SIGKILL, a lost connection) leaves that
thread invisible; the next run's "stage" removes it and writes it again. Into SQLite or
PostgreSQL, a thread is one transaction.
"""

from __future__ import annotations

import secrets
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from redis_saver.core.replies import Import

from ._common import err

INTERRUPTED = 130  # the exit code of a run stopped by Ctrl-C or SIGTERM (128 + SIGINT)


class ThreadLost(RuntimeError):
    """The thread being written was deleted, expired or staged again by another writer."""


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the block, as Ctrl-C does, so that both stop the
    run between whole threads (only where signals can be handled: the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextmanager
def staged(writer: Any, thread_id: str) -> Iterator[bool]:
    """Write a thread new to Redis in the block, invisible until the block ends: then it
    appears whole. Yields True when an unfinished earlier copy of it was removed first (a run
    stopped midway). On any exception (Ctrl-C included) the thread is removed again."""
    drv, token = writer._driver, secrets.token_hex(12)
    try:
        yield drv.run(writer._plans._plan_staged(thread_id, "stage", token)) == Import.REDONE
    except BaseException:  # abort removes it only if staged and not yet shown
        try:
            drv.run(writer._plans._plan_staged(thread_id, "abort", token))
        except Exception:  # noqa: BLE001 - it stays invisible; the next run removes it
            pass
        raise
    if drv.run(writer._plans._plan_staged(thread_id, "reveal", token)) != Import.WRITTEN:
        raise ThreadLost(f"thread {thread_id!r} was deleted, expired or written by another import meanwhile")


def resumed_text(complete: int, redone: int) -> str:
    """What a run found of an earlier one ("" when nothing)."""
    parts = []
    if complete:
        parts.append(f"{complete} thread(s) already complete (skipped)")
    if redone:
        parts.append(f"{redone} thread(s) left unfinished by a stopped run, written again whole")
    return "resumed an earlier run: " + ", ".join(parts) if parts else ""


def stopped(done: int | None, todo: int | None, current: str | None, command: str) -> click.exceptions.Exit:
    """Say what a stopped run did and how to finish it; the exit to raise. ``done`` None: it
    stopped outside the copy (before it began, or while verifying)."""
    err.print()
    counted = "" if done is None else f": {done}{f' of {todo}' if todo is not None else ''} thread(s) done"
    where = f" (stopped while writing thread {current!r})" if current is not None else ""
    err.print(f"[red]interrupted[/]{counted}{where}; no thread is partly written or visible. To finish, run the "
              f"same command again ({command}, same options): it skips the threads already complete and "
              "writes the others")
    return click.exceptions.Exit(INTERRUPTED)
