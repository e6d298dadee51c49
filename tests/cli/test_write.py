"""delete / prune / pin / unpin / expire: confirmation, --dry-run, --yes, expiry kept."""

from __future__ import annotations

import json

from redis_saver.cli._ops import count_checkpoints, own_keys


def _ids(cli):
    return sorted(t["thread_id"] for t in json.loads(cli("threads", "--json").stdout))


def test_delete(cli, filled):
    res = cli("delete", "t-0", "--dry-run")
    assert "would delete thread t-0" in res.stdout
    assert _ids(cli) == ["t-0", "t-1", "t-2"]
    res = cli("delete", "t-0", input="n\n", code=1)  # declined at the prompt
    assert "nothing changed" in res.stderr
    assert _ids(cli) == ["t-0", "t-1", "t-2"]
    cli("delete", "t-0", input="y\n")
    assert _ids(cli) == ["t-1", "t-2"]
    res = cli("delete", "t-1", "missing", "--yes", code=1)  # t-1 goes, the missing one is reported
    assert "'missing': not found" in res.stderr
    assert _ids(cli) == ["t-2"]
    cli("delete", "missing", "--yes", code=1)


def test_prune(cli, filled):
    cfg = {"configurable": {"thread_id": "t-1"}}
    before = count_checkpoints(filled, "t-1")
    res = cli("prune", "t-1", "--dry-run")
    assert "would prune thread t-1" in res.stdout and count_checkpoints(filled, "t-1") == before
    latest = filled.get_tuple(cfg)
    res = cli("prune", "t-1", "--yes")
    assert f"{before - 2} checkpoint(s) removed" in res.stdout  # the latest of each of 2 namespaces stays
    after = filled.get_tuple(cfg)
    assert after.config == latest.config and after.checkpoint == latest.checkpoint
    cli("prune", "--all", "--strategy", "delete", "--yes")
    assert _ids(cli) == []


def test_prune_keeps_expiry(cli, filled, sync_client):
    """A prune through the CLI must neither make an expiring thread persistent nor the reverse."""
    sync_client_keys = own_keys(filled, "t-1")
    cli("expire", "t-1", "30", "--yes")
    ttls = [sync_client.pttl(k) for k in sync_client_keys if sync_client.exists(k)]
    assert ttls and all(25 * 60_000 < t <= 30 * 60_000 for t in ttls)
    cli("prune", "t-1", "--yes")
    ttls = [sync_client.pttl(k) for k in sync_client_keys if sync_client.exists(k)]
    assert ttls and all(25 * 60_000 < t <= 30 * 60_000 for t in ttls)
    cli("prune", "t-2", "--yes")
    assert all(sync_client.pttl(k) == -1 for k in own_keys(filled, "t-2") if sync_client.exists(k))
    row = {r["thread_id"]: r for r in json.loads(cli("threads", "--json").stdout)}
    assert 25 * 60_000 < row["t-1"]["expires_in_ms"] <= 30 * 60_000 and row["t-2"]["expires_in_ms"] is None


def test_pin_unpin_expire(cli, filled, sync_client):
    keys = [k for k in own_keys(filled, "t-0") if sync_client.exists(k)]
    assert "would set thread t-0" in cli("expire", "t-0", "10", "--dry-run").stdout
    assert all(sync_client.pttl(k) == -1 for k in keys)
    cli("expire", "t-0", "10", input="y\n")
    assert all(0 < sync_client.pttl(k) <= 600_000 for k in keys)
    assert "would pin thread t-0" in cli("pin", "t-0", "--dry-run").stdout
    cli("pin", "t-0", input="n\n", code=1)
    assert all(0 < sync_client.pttl(k) <= 600_000 for k in keys)
    cli("pin", "t-0", "--yes")
    assert all(sync_client.pttl(k) == -1 for k in keys)
    row = json.loads(cli("--ttl", "5", "threads", "--json", "--match", "t-0").stdout)[0]
    assert row["pinned"] is True and row["expires_in_ms"] is None
    assert "pinned" in cli("--ttl", "5", "threads", "--match", "t-0").stdout
    assert "would unpin thread t-0" in cli("--ttl", "5", "unpin", "t-0", "--dry-run").stdout
    cli("--ttl", "5", "unpin", "t-0", "--yes")
    assert all(0 < sync_client.pttl(k) <= 300_000 for k in keys)
    cli("pin", "nope", "--yes", code=1)
    cli("expire", "nope", "5", "--yes", code=1)
    cli("expire", "t-0", "0", "--yes", code=2)


def test_rewrite_compresses_raw_threads_in_place(cli, redis_url, prefix, sync_client):
    """Threads written raw (compress=False, as 0.1.x did) are compressed by `rewrite`; reads are
    unchanged; a second run finds nothing to do; --after resumes after a thread."""
    import asyncio

    from redis_saver import RedisSaver
    from tests.memory.test_encoded_values import _chat, check_streams

    raw = RedisSaver(sync_client, prefix=prefix, compress=False)
    for t in ("r-1", "r-2", "r-3"):
        asyncio.run(_chat([raw], 12, thread=t))
    before = {t: [x.checkpoint for x in raw.list({"configurable": {"thread_id": t}})] for t in ("r-1", "r-2", "r-3")}
    size = lambda: sum(sync_client.memory_usage(raw.keys.thread_keys(t)[4], samples=0) for t in before)  # noqa: E731
    b0 = size()
    res = cli("rewrite", "--all", "--after", "r-1", "--yes")
    assert "rewrote 2 thread(s)" in res.stdout
    assert "r-1:" not in res.stderr and "r-2:" in res.stderr
    res = cli("rewrite", "r-1", "--yes")
    assert "rewrote 1 thread(s): 12 value(s)" in res.stdout
    assert size() < b0 / 4
    for t, cps in before.items():
        assert [x.checkpoint for x in raw.list({"configurable": {"thread_id": t}})] == cps
        assert check_streams(sync_client, raw, t)["streams"] == 1
    res = cli("rewrite", "--all", "--yes")
    assert "rewrote 3 thread(s): 0 value(s)" in res.stdout


def test_functions_lists_loads_and_deletes_stale_libraries(cli, redis_url, prefix):
    import redis as _redis

    from redis_saver.core.scripts import library

    client = _redis.Redis.from_url(redis_url)
    try:
        client.function_flush()
        assert json.loads(cli("functions", "--json").stdout)["libraries"] == {}
        loaded = json.loads(cli("functions", "--load", "--json").stdout)
        assert loaded["current"] == library().name and list(loaded["libraries"]) == [library().name]
        # a library an older version left (its own name and function names)
        old = library().source.decode().replace(library().name, "redis_saver_0123456789abcdef")
        client.function_load(old)
        listed = cli("functions").stdout
        assert "redis_saver_0123456789abcdef  (stale)" in listed and f"{library().name}  (this version)" in listed
        cli("functions", "--delete-stale", input="n\n", code=1)  # asked, declined: nothing deleted
        assert len(json.loads(cli("functions", "--json").stdout)["libraries"]) == 2
        left = json.loads(cli("functions", "--delete-stale", "--yes", "--json").stdout)
        assert list(left["libraries"]) == [library().name]
    finally:
        client.close()
