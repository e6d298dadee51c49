"""What the command-line tool's command groups share: the consoles, the global State (client and
savers made on first use), the error-mapping Group, and the formatting and prompting helpers."""

from __future__ import annotations

import base64
import dataclasses
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import _ops as ops
from . import _stream as stream
from ._urls import redact

PAGE = 50  # rows per table while streaming threads
out = Console()
err = Console(stderr=True)


def _width(stream: Any) -> int | None:
    """A terminal's own width (None: rich asks the terminal), else ``$COLUMNS`` or 200: piped
    output (scripts, files) gets wide lines rather than truncated ids."""
    try:
        if stream.isatty():
            return None
    except (AttributeError, ValueError):  # a closed or replaced stream
        pass
    return int(os.environ.get("COLUMNS") or 200)


def size_consoles() -> None:
    """Size both consoles for this run's streams and environment, not the ones at import: a process
    may run the tool many times (click's CliRunner, an embedding application) with other streams."""
    out.width = _width(sys.stdout)  # type: ignore[assignment]
    err.width = _width(sys.stderr)  # type: ignore[assignment]


size_consoles()
ID_WIDTH = 36  # a uuid6 checkpoint id: never truncated in tables


# --------------------------------------------------------------------------- state


class State:
    """Global options; the client and savers are made on first use and closed at exit."""

    def __init__(
        self, url: str | None, prefix: str, ttl: float | None, serde: Any = None, integrity_key: Any = None
    ) -> None:
        self.url, self.prefix, self.ttl, self.serde = url, prefix, ttl, serde
        self.integrity_key = integrity_key  # a list of keys (the first signs), or None
        self._client: Any = None
        self._saver: Any = None

    def require_url(self) -> str:
        if not self.url:
            raise click.UsageError("no Redis URL: pass --url redis://host:port or set REDIS_URL")
        return self.url

    @property
    def client(self) -> Any:
        if self._client is None:
            from redis_saver.transport.clients import make_sync_client

            self._client = make_sync_client(self.require_url())
        return self._client

    def saver(self, ttl_minutes: float | None = None) -> Any:
        """The reading saver (no TTL, so reads never touch expiry), or a writer with a TTL.
        (No maxmemory-policy warning from the tool's savers: ``stats`` reports the policy.)"""
        from redis_saver import RedisSaver

        opts: dict[str, Any] = {"prefix": self.prefix, "retries": 3, "serde": self.serde, "eviction_check": "off"}
        if self.integrity_key is not None:
            opts["integrity_key"] = self.integrity_key
        if ttl_minutes is None:
            if self._saver is None:
                self._saver = RedisSaver(self.client, **opts)
            return self._saver
        return RedisSaver(self.client, ttl={"default_ttl": ttl_minutes}, **opts)

    def writer_for(self, thread_id: str) -> Any:
        """A saver whose writes keep the thread's expiry: ``--ttl`` if given, else the
        thread's remaining time to live (so a prune never makes an expiring thread
        persistent, nor a persistent one expire)."""
        if self.ttl is not None:
            return self.saver(self.ttl)
        left = ops.expiry_ms(self.saver(), thread_id)
        if left is None or left < 0:
            return self.saver()
        return self.saver(max(left, 1000) / 60_000)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def load_integrity_key(path: str | None) -> list[bytes] | None:
    """The keys of ``--integrity-key-file`` (one key a line, hex, the first signs), else of the
    environment variable REDIS_SAVER_INTEGRITY_KEY (hex keys separated by commas), else None."""
    if path is not None:
        try:
            with open(path, encoding="ascii") as f:
                text, where = f.read(), path
        except (OSError, UnicodeDecodeError) as exc:
            raise click.BadParameter(f"cannot read the key file: {exc}", param_hint="--integrity-key-file") from None
        lines = [x.strip() for x in text.splitlines() if x.strip() and not x.strip().startswith("#")]
    elif os.environ.get("REDIS_SAVER_INTEGRITY_KEY"):
        where = "REDIS_SAVER_INTEGRITY_KEY"
        lines = [x.strip() for x in os.environ["REDIS_SAVER_INTEGRITY_KEY"].split(",") if x.strip()]
    else:
        return None
    try:
        keys = [bytes.fromhex(x) for x in lines]
    except ValueError:
        raise click.BadParameter(f"{where}: each key must be hex (64 hex digits or more)") from None
    if not keys or any(len(k) < 32 for k in keys):
        raise click.BadParameter(f"{where}: give one or more keys of at least 32 bytes (64 hex digits)")
    return keys


def _fail(msg: str) -> click.ClickException:
    return click.ClickException(msg)


class Group(click.Group):
    """Turns library and server errors into one clear line and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        import redis

        from redis_saver.errors import RedisSaverError

        from ._sources import SourceError

        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except redis.exceptions.ConnectionError as exc:
            raise _fail(f"cannot reach Redis at {_safe_url(ctx)}: {exc}") from None
        except (redis.exceptions.RedisError, RedisSaverError, SourceError, stream.StreamError, OSError) as exc:
            raise _fail(f"{type(exc).__name__}: {exc}") from None
        except Exception as exc:  # e.g. stored bytes this serializer cannot read (see --serde)
            raise _fail(f"unexpected {type(exc).__name__}: {exc}") from exc


def _safe_url(ctx: click.Context) -> str:
    st = ctx.find_object(State)
    return redact((st.url if st else None) or "?")


pass_state = click.make_pass_decorator(State)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON on stdout.")
yes_option = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
dry_option = click.option("--dry-run", is_flag=True, help="Say what would change; change nothing.")


def _load_serde(spec: str) -> Any:
    import importlib

    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise click.BadParameter("use MODULE:NAME, e.g. myapp.checkpointing:serde", param_hint="--serde")
    if os.getcwd() not in sys.path:  # like `python -m`: modules of the current directory
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(mod_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise click.BadParameter(f"cannot import {spec}: {exc}", param_hint="--serde") from None
    if isinstance(obj, type) or (not hasattr(obj, "dumps_typed") and callable(obj)):
        obj = obj()  # a class or a factory
    if not (hasattr(obj, "dumps_typed") and hasattr(obj, "loads_typed")):
        raise click.BadParameter(f"{spec} is not a serializer (no dumps_typed/loads_typed)", param_hint="--serde")
    return obj


# --------------------------------------------------------------------------- helpers


def _ts(ts: str | None) -> str:
    return (ts or "")[:19].replace("T", " ")


def _ttl_text(s: ops.ThreadSummary, app_ttl: float | None = None) -> str:
    if s.expires_in_ms is None:
        # with --ttl, threads expire; one that does not is pinned (the API cannot say it)
        return "pinned" if app_ttl is not None else "none"
    return _duration(s.expires_in_ms / 1000)


def _duration(sec: float) -> str:
    sec = int(round(sec))
    if sec < 60:
        return f"{sec}s"
    if sec < 3600:
        return f"{sec // 60}m{sec % 60:02d}s"
    if sec < 86400:
        return f"{sec // 3600}h{sec % 3600 // 60:02d}m"
    return f"{sec // 86400}d{sec % 86400 // 3600:02d}h"


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _ns_text(ns: dict[str, int]) -> str:
    return ", ".join(repr(k) if k == "" else k for k in ns) if len(ns) <= 3 else f"{len(ns)} namespaces"


def _progress(transient: bool = True) -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=err,
        transient=transient,
    )


def jsonable(v: Any, depth: int = 0) -> Any:
    """A JSON-safe view of a deserialized value (for --json output, not for round trips)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if depth > 50:
        return repr(v)
    if isinstance(v, dict):
        return {str(k): jsonable(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [jsonable(x, depth + 1) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return {"base64": base64.b64encode(bytes(v)).decode()}
    dump = getattr(v, "model_dump", None)
    if callable(dump):
        try:
            return jsonable(dump(), depth + 1)
        except Exception:  # noqa: BLE001 - a view, best effort
            pass
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {"__type__": type(v).__name__, **jsonable(dataclasses.asdict(v), depth + 1)}
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return repr(v)


def _short(v: Any, width: int = 80) -> str:
    text = repr(v)
    return text if len(text) <= width else text[: width - 1] + "…"


def _confirm(what: str, yes: bool) -> None:
    if yes:
        return
    try:
        ok = click.confirm(what, default=False, err=True)
    except click.exceptions.Abort:  # end of input, Ctrl-C
        ok = False
        err.print()
    if not ok:
        err.print("aborted: nothing changed (pass --yes to skip this question)")
        raise click.exceptions.Exit(1)


@contextmanager
def output_file(path: str) -> Iterator[Any]:
    """A text file to export into: ``-`` is stdout; a path is written as ``<path>.part`` and
    renamed to ``path`` once complete, so a failed export never leaves a truncated file."""
    if path == "-":
        yield sys.stdout
        return
    tmp = f"{path}.part"
    f = open(tmp, "w", encoding="utf-8")  # noqa: SIM115 - closed below on every path
    try:
        yield f
    except BaseException:
        f.close()
        os.unlink(tmp)
        raise
    f.close()
    os.replace(tmp, path)


def _threads_arg(saver: Any, threads: Iterable[str]) -> tuple[list[str], list[str]]:
    found: list[str] = []
    missing: list[str] = []
    for t in threads:
        (found if ops.thread_exists(saver, t) else missing).append(t)
    return found, missing
