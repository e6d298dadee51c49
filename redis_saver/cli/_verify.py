"""``verify``: read every checkpoint of threads with the integrity key and report what fails its
check (nothing is deserialized from a record that fails, nothing is written)."""

from __future__ import annotations

import click

from ._common import State, _fail, _progress, err, json_option, out, pass_state
from ._write import _targets


@click.command()
@click.argument("thread_ids", nargs=-1, metavar="[THREAD]...")
@click.option("--all", "all_threads", is_flag=True, help="Every thread under the prefix.")
@json_option
@pass_state
def verify(st: State, thread_ids: tuple[str, ...], all_threads: bool, as_json: bool) -> None:
    """Check every checkpoint, value and pending write of threads against the integrity key.

    Each thread is read whole (every namespace, every checkpoint) as a worker reads it; a
    thread whose data fails (tampered, moved from elsewhere, written without the key or under
    another) is reported with its first failure. Exit code 1 when any failed.
    """
    import json

    from redis_saver.errors import IntegrityError, MalformedReplyError

    if st.integrity_key is None:
        raise click.UsageError("verify needs the key: --integrity-key-file or REDIS_SAVER_INTEGRITY_KEY")
    saver = st.saver()
    targets, _what, missing = _targets(saver, thread_ids, all_threads, "verify")
    ok, failed = 0, {}
    with _progress() as prog:
        task = prog.add_task("verify", total=len(targets) if isinstance(targets, list) else None, rate="")
        for t in targets:
            try:
                for _ in saver.list({"configurable": {"thread_id": t}}):
                    pass
                ok += 1
            except (IntegrityError, MalformedReplyError, ValueError) as exc:
                failed[t] = f"{type(exc).__name__}: {exc}"
                err.print(f"{t}: FAILED {failed[t]}")
            prog.advance(task)
    if as_json:
        out.print_json(json.dumps({"verified": ok, "failed": failed, "missing": missing}))
    else:
        click.echo(f"verified {ok + len(failed)} thread(s): {ok} passed, {len(failed)} failed")
    if failed:
        raise _fail(f"{len(failed)} thread(s) failed their integrity check")
    if missing:
        raise click.exceptions.Exit(1)


COMMANDS = (verify,)
