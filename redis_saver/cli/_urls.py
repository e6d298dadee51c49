"""The URLs the command-line tool takes (``--url``, ``migrate --from / --to``, ``store migrate
--from``), checked when the command line is read: an unknown scheme or a malformed URL is a
usage error (exit code 2) that names the accepted forms, before anything connects."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import click

REDIS_FORMS = ("redis://host:port/db, rediss://... (TLS), unix:///path/to/socket, redis+cluster://host:port, "
               "redis+sentinel://host:port[,host:port...]/master")
SQL_FORMS = "sqlite:///relative/path or sqlite:////absolute/path, postgresql://user@host:port/db"
PLAIN_FORMS = "plainredis://host:port/db?prefix=lg"


def _redis_problem(url: str, scheme: str) -> str | None:
    """What is wrong with a Redis URL (None: nothing)."""
    from redis.connection import parse_url

    base, _, variant = scheme.partition("+")
    if base not in ("redis", "rediss", "unix") or variant not in ("", "cluster", "sentinel") or (
        base == "unix" and variant
    ):
        return "unknown scheme"
    if variant == "sentinel":
        for hp in urlsplit(url).netloc.split("@")[-1].split(","):
            host, _, port = hp.rpartition(":")
            if not (host or hp) or (port and not port.isdigit()):
                return f"bad sentinel address {hp!r}"
        return None
    parse_url(base + url[len(scheme) :])  # type: ignore[no-untyped-call]  # ValueError: bad port, host, db
    return None


def _sql_problem(url: str, scheme: str) -> str | None:
    if scheme == "sqlite":
        return None if url.startswith("sqlite:///") and len(url) > len("sqlite:///") else "no file path"
    if scheme in ("postgres", "postgresql"):
        urlsplit(url).port  # noqa: B018 - raises ValueError for a bad port
        return None
    return "unknown scheme"


def check(url: str, *kinds: str) -> str | None:
    """Why ``url`` is not a URL of one of ``kinds`` ("redis", "sql", "plainredis"); None if it is."""
    try:
        if "://" not in url:
            return "not a URL"
        scheme = urlsplit(url).scheme.lower()
        if "redis" in kinds and scheme.split("+")[0] in ("redis", "rediss", "unix"):
            return _redis_problem(url, scheme)
        if "sql" in kinds and scheme in ("sqlite", "postgres", "postgresql"):
            return _sql_problem(url, scheme)
        if "plainredis" in kinds and scheme in ("plainredis", "plainrediss"):
            urlsplit(url).port  # noqa: B018 - raises ValueError for a bad port
            return None
        return f"unknown scheme {scheme + '://'!r}"
    except ValueError as exc:
        return str(exc)


def forms(*kinds: str) -> str:
    return "; ".join(f for k, f in (("sql", SQL_FORMS), ("plainredis", PLAIN_FORMS), ("redis", REDIS_FORMS))
                     if k in kinds)


def option_check(*kinds: str) -> Any:
    """A click callback refusing a URL that is not one of ``kinds`` (a usage error, exit 2)."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None
        why = check(value, *kinds)
        if why is not None:
            raise click.BadParameter(f"{_redacted(value)!r}: {why}. Accepted forms: {forms(*kinds)}")
        return value

    return callback


def redact(url: str) -> str:
    """``url`` with its password, if any, shown as ``***``."""
    p = urlsplit(url)
    return url.replace(":" + p.password + "@", ":***@") if p.password else url


def _redacted(url: str) -> str:
    try:
        return redact(url)
    except ValueError:  # a URL urlsplit refuses: shown as it is (the error says what is wrong)
        return url
