"""What the tool refuses before writing anything: export files cut anywhere (refused as
truncated, nothing imported) and bad URLs (a usage error naming the accepted forms)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner


@pytest.fixture
def export_lines(cli, filled, tmp_path):
    """The lines (with their newlines) of an export of three threads; the threads then deleted."""
    path = tmp_path / "all.jsonl"
    cli("export", "-o", str(path))
    cli("delete", "t-0", "t-1", "t-2", "--yes")
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def _boundary(lines: list[str]) -> int:
    """The number of lines up to the end of the first thread's records."""
    first = json.loads(lines[1])["thread_id"]
    return next(i for i, x in enumerate(lines[1:], start=1) if json.loads(x).get("thread_id") != first)


def _cuts(lines: list[str]) -> dict[str, str]:
    text = "".join(lines)
    head, body, end = lines[0], lines[1:-1], lines[-1]
    middle = len(body) // 2
    return {
        "at its start": "",
        "in the header": head[:10],
        "after the header": head,
        "in the first record": head + body[0][: len(body[0]) // 2],
        "between threads": "".join(lines[: _boundary(lines)]),
        "in a record mid-file": "".join(lines[: 1 + middle]) + body[middle][:-40],
        "in a record, at a closing brace": "".join(lines[: 1 + middle]) + body[middle].rstrip("\n"),
        "before the end record": text[: -len(end)],
        "in the end record": text[: -len(end) // 2],
    }


@pytest.mark.parametrize("where", list(_cuts(["{}\n", '{"thread_id":"a"}\n', '{"thread_id":"b"}\n', "{}\n"])))
def test_a_truncated_file_is_refused_whole(cli, export_lines, tmp_path, where):
    path = tmp_path / "cut.jsonl"
    path.write_text(_cuts(export_lines)[where], encoding="utf-8")
    res = cli("import", str(path), code=1)
    text = res.stderr.replace("\n", " ")
    assert "the file is truncated" in text and "Nothing was imported" in text, text
    assert json.loads(cli("threads", "--json").stdout) == []


def test_a_file_without_its_last_newline_imports(cli, export_lines, tmp_path):
    path = tmp_path / "whole.jsonl"
    path.write_text("".join(export_lines).rstrip("\n"), encoding="utf-8")
    assert "imported 3 thread(s)" in cli("import", str(path)).stdout


def test_an_end_record_that_counts_otherwise_is_refused(cli, export_lines, tmp_path):
    path = tmp_path / "lost.jsonl"
    boundary = _boundary(export_lines)
    path.write_text("".join(export_lines[:boundary] + export_lines[boundary + 1 :]), encoding="utf-8")
    res = cli("import", str(path), code=1)
    assert "the end record counts" in res.stderr
    assert json.loads(cli("threads", "--json").stdout) == []


def _tool(*args: str, env: dict[str, str] | None = None):
    from redis_saver.cli._app import cli as app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", **(env or {})}, catch_exceptions=False)


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--url", "foo://localhost", "threads"], "unknown scheme 'foo://'"),
        (["--url", "localhost:6379", "threads"], "not a URL"),
        (["--url", "redis://localhost:99999", "threads"], "Port out of range"),
        (["--url", "redis://[::1", "export", "-o", "-"], "Invalid IPv6 URL"),
        (["--url", "redis+sentinel://h:abc/mymaster", "threads"], "bad sentinel address"),
        (["--url", "unix+cluster:///tmp/x.sock", "stats"], "unknown scheme"),
        (["--url", "redis+foo://h:1", "store", "ls"], "unknown scheme"),
        (["migrate", "--from", "mysql://x/db"], "unknown scheme 'mysql://'"),
        (["migrate", "--from", "sqlite://file.db"], "no file path"),
        (["migrate", "--to", "mongodb://x"], "unknown scheme"),
        (["migrate", "--to", "postgresql://h:port/db"], "Port could not be cast"),
        (["store", "migrate", "--from", "redis://h:1"], "unknown scheme 'redis://'"),
    ],
)
def test_a_bad_url_is_a_usage_error_naming_the_accepted_forms(args, why):
    res = _tool(*args)
    text = res.stderr.replace("\n", " ")
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr)
    assert why in text and "Accepted forms" in text, text
    if args[0] == "--url":
        assert "redis+cluster://" in text and "redis+sentinel://" in text and "unix://" in text


def test_a_bad_url_from_the_environment_is_a_usage_error():
    res = _tool("threads", env={"REDIS_URL": "http://localhost:6379"})
    assert res.exit_code == 2 and "unknown scheme 'http://'" in res.stderr


def test_good_urls_pass_the_check():
    from redis_saver.cli._urls import check

    for url in ("redis://localhost:6379/0", "rediss://u:p@h:6380", "unix:///tmp/redis.sock",
                "redis+cluster://127.0.0.1:7000", "rediss+cluster://h:1", "redis+sentinel://a:26379,b:26380/mymaster"):
        assert check(url, "redis") is None, url
    for url in ("sqlite:///rel.db", "sqlite:////abs/x.db", "postgresql://u@h:5432/db", "postgres://h/db"):
        assert check(url, "sql") is None, url
    assert check("plainredis://h:6379/0?prefix=lg", "plainredis") is None
    # one that parses is left to connect: unreachable is exit 1, not a usage error
    res = _tool("--url", "unix:///nonexistent/redis.sock", "threads")
    assert res.exit_code == 1 and "cannot reach Redis" in res.stderr
