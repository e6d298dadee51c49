"""Out of memory: write scripts are refused before their first write, reads keep working.

Every write script that adds data starts with a bare ``#!lua`` line, so Redis refuses it up
front when ``used_memory > maxmemory`` (noeviction); reads carry ``flags=no-writes`` and still
run, and so do the scripts that free memory (``flags=allow-oom``: delete_thread, prune,
delete_runs; see tests/faults/test_oom.py). Runs on its own server, because it lowers maxmemory.
"""

from __future__ import annotations

import pytest
import redis
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata

from devkit.servers import client_kwargs, start_standalone
from redis_saver import RedisSaver


@pytest.fixture
def oom_server():
    with start_standalone(extra_args=("--maxmemory-policy", "noeviction")) as server:
        yield server


def _snapshot(r: redis.Redis, saver: RedisSaver) -> dict[bytes, bytes | None]:
    return {k: r.dump(k) for k in r.scan_iter(match=saver.keys.scan_pattern(), count=1000)}


def test_writes_refused_up_front_reads_still_served(oom_server):
    r = redis.Redis(host=oom_server.host, port=oom_server.port, **client_kwargs())
    try:
        saver = RedisSaver(r, prefix="oom")
        saver.setup()
        cp = generate_checkpoint(channel_values={"x": "v" * 1000}, channel_versions={"x": "1"})
        cfg = saver.put(generate_config("t"), cp, generate_metadata(step=0), {"x": "1"})
        saver.put_writes(cfg, [("x", "w")], "task")
        before = _snapshot(r, saver)

        r.config_set("maxmemory", "1")  # below what is used: every write is refused
        try:
            cp2 = generate_checkpoint(channel_values={"x": "big" * 1000}, channel_versions={"x": "2"})
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                saver.put(cfg, cp2, generate_metadata(step=1), {"x": "2"})
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                saver.put_writes(cfg, [("y", 1)], "task2")
            # reads are no-writes scripts: still served
            tup = saver.get_tuple(generate_config("t"))
            assert tup is not None and tup.checkpoint["channel_values"] == {"x": "v" * 1000}
            assert tup.pending_writes == [("task", "x", "w")]
            assert [t.config for t in saver.list(generate_config("t"))] == [cfg]
            assert saver.get_delta_channel_history(config=cfg, channels=["x"]) == {"x": {"writes": []}}
        finally:
            r.config_set("maxmemory", "0")
        assert _snapshot(r, saver) == before  # nothing was written by the refused calls
        cfg2 = saver.put(cfg, cp2, generate_metadata(step=1), {"x": "2"})  # and it recovers
        assert saver.get_tuple(generate_config("t")).config == cfg2
    finally:
        r.close()
