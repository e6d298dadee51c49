"""The ``redis-saver`` group (click + rich): its global options, and its commands gathered from
``_read`` (threads, show, stats, functions), ``_write`` (delete, prune, rewrite, pin, unpin,
expire), ``_move`` (export, import, migrate) and ``_store`` (store ...). Imported only by
``redis_saver.cli.main``."""

from __future__ import annotations

import click

from . import _move, _read, _verify, _write
from ._common import Group, State, _load_serde, load_integrity_key, size_consoles
from ._store import store as _store_group
from ._urls import option_check


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--url", envvar="REDIS_URL", metavar="URL", callback=option_check("redis"),
              help="redis://, rediss://, unix://, redis+cluster://, redis+sentinel://host:port/master "
                   "[env REDIS_URL]")
@click.option("--prefix", envvar="REDIS_SAVER_PREFIX", default="lg", show_default=True,
              help="The saver's key prefix [env REDIS_SAVER_PREFIX].")
@click.option("--ttl", type=click.FloatRange(min=0, min_open=True), envvar="REDIS_SAVER_TTL", metavar="MINUTES",
              help="Your application's default_ttl, for commands that write (prune, unpin, import, migrate): "
                   "the threads they write get this expiry. Without it, prune keeps each thread's "
                   "remaining expiry and import/migrate write threads without one [env REDIS_SAVER_TTL].")
@click.option("--serde", envvar="REDIS_SAVER_SERDE", metavar="MODULE:NAME",
              help="Your application's serializer: a SerializerProtocol object, or a callable returning "
                   "one, imported from MODULE (e.g. EncryptedSerializer); default JsonPlusSerializer "
                   "[env REDIS_SAVER_SERDE].")
@click.option("--integrity-key-file", envvar="REDIS_SAVER_INTEGRITY_KEY_FILE", metavar="PATH",
              help="Your application's integrity_key: a file of hex keys, one a line, the first signs "
                   "(or hex keys, comma-separated, in env REDIS_SAVER_INTEGRITY_KEY). Reads check every "
                   "tag, writes sign, verify and rewrite --sign use it [env REDIS_SAVER_INTEGRITY_KEY_FILE].")
@click.version_option(package_name="redis-saver", prog_name="redis-saver")
@click.pass_context
def cli(
    ctx: click.Context, url: str | None, prefix: str, ttl: float | None, serde: str | None,
    integrity_key_file: str | None,
) -> None:
    """Inspect and operate LangGraph checkpoints stored by redis_saver."""
    from redis_saver.keys import KeySchema

    size_consoles()

    try:
        KeySchema(prefix)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--prefix") from None
    st = State(url, prefix, ttl, _load_serde(serde) if serde else None, load_integrity_key(integrity_key_file))
    ctx.obj = st
    ctx.call_on_close(st.close)




for _cmd in (*_read.COMMANDS, *_write.COMMANDS, *_move.COMMANDS, *_verify.COMMANDS, _store_group):
    cli.add_command(_cmd)
