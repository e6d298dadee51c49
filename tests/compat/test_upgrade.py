"""Stored data is a promise: what the previous release wrote is read and continued in place.

The previous release (0.1.0, storage format 3), and the last build that wrote storage format 5
(``main`` before format 6), each run from their own source, extracted from git, on their own
PYTHONPATH in a separate process, against the same server as this version. The old build
writes threads of every kind (full history with a pending interrupt, TTL, pinned, latest-only,
a large metadata value, one left untouched); this version then reads them exactly as the old
build reads them, filters, walks delta history, copies and prunes them, and continues them;
and the old build, given a thread this version wrote, refuses it with SchemaMismatchError and
writes nothing."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
import redis
from langgraph.types import Command

from devkit.servers import client_kwargs
from redis_saver import FORMAT_VERSION, RedisSaver
from redis_saver.core.codec import unpack_blob
from redis_saver.errors import MalformedReplyError
from tests.compat._shared import BIG, build, dump_threads

# name -> (commit, the storage format it writes)
OLD_RELEASES = {
    "0.1.0": ("ff43c4b", "3"),  # the previous release
    "format-5": ("bfd9476", "5"),  # the last build of main that wrote format 5 (framed checkpoint records)
}
ROOT = Path(__file__).resolve().parents[2]
OLD_WRITER = textwrap.dedent(
    '''
    import json, sys, redis, redis_saver
    from _shared import BIG, build, dump_threads as dump
    from langchain_core.messages import HumanMessage
    assert redis_saver.FORMAT_VERSION == sys.argv[4], redis_saver.FORMAT_VERSION
    assert redis_saver.__file__.startswith(sys.argv[3]), redis_saver.__file__
    from redis_saver import RedisSaver
    c = redis.Redis.from_url(sys.argv[1])
    prefix = sys.argv[2]
    def turn(graph, tid, text, **md):
        cfg = {"configurable": {"thread_id": tid}, "metadata": md}
        return graph.invoke({"messages": [HumanMessage(content=text)]}, cfg)
    full = RedisSaver(c, prefix=prefix)
    full.setup()
    g = build(full)
    turn(g, "full", "hello", big=BIG)
    turn(g, "full", "how are you")
    turn(g, "full", "order a pizza")          # stops at the interrupt: a pending write
    turn(g, "untouched", "hello")
    ttl = RedisSaver(c, prefix=prefix, ttl={"default_ttl": 60})
    turn(build(ttl), "ttl", "hello")
    full.pin("pinned")
    turn(g, "pinned", "hello")
    latest = RedisSaver(c, prefix=prefix, history="latest")
    gl = build(latest)
    for text in ("one", "two", "three"):
        turn(gl, "latest", text)
    print(json.dumps(dump(full, ["full", "untouched", "ttl", "pinned", "latest"])))
    '''
)

OLD_READER = textwrap.dedent(
    '''
    import json, sys, redis
    from redis_saver import RedisSaver, SchemaMismatchError
    c = redis.Redis.from_url(sys.argv[1])
    s = RedisSaver(c, prefix=sys.argv[2])
    out = {}
    for name, call in [
        ("setup", lambda: s.setup()),
        ("get_tuple", lambda: s.get_tuple({"configurable": {"thread_id": "full"}})),
        ("put_writes", lambda: s.put_writes({"configurable": {"thread_id": "full", "checkpoint_ns": "",
                                             "checkpoint_id": "x"}}, [("a", 1)], "task")),
        ("untouched", lambda: len(list(s.list({"configurable": {"thread_id": "untouched"}})))),
    ]:
        try:
            out[name] = ["ok", repr(call())]
        except SchemaMismatchError as exc:
            out[name] = ["SchemaMismatchError", str(exc)]
    print(json.dumps(out))
    '''
)


@pytest.fixture(scope="module", params=list(OLD_RELEASES))
def old_release(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The old build's source tree, and the storage format it writes."""
    commit, fmt = OLD_RELEASES[request.param]
    out = tmp_path_factory.mktemp(f"redis_saver-{request.param}")
    got = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "redis_saver", "lua"], capture_output=True)
    if got.returncode != 0:
        pytest.fail(f"the old build {commit} is not in this checkout's git history: {got.stderr.decode()}")
    with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tar:
        tar.extractall(out)
    return out, fmt


def _run_old(old_release: tuple[Path, str], code: str, url: str, prefix: str) -> Any:
    """Run ``code`` with the old build first on the path (and _shared.py importable)."""
    root, fmt = old_release
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(Path(__file__).parent)])}
    proc = subprocess.run(
        [sys.executable, "-c", code, url, prefix, str(root), fmt],
        env=env, capture_output=True, text=True, timeout=180, cwd=str(root),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _snapshot(c: redis.Redis, prefix: str) -> dict:
    from redis_saver import KeySchema

    return {k: c.dump(k) for p in KeySchema(prefix).scan_patterns() for k in c.scan_iter(match=p, count=1000)}


def test_the_previous_release_data_is_read_and_continued_in_place(old_release, redis_url, prefix):
    old = _run_old(old_release, OLD_WRITER, redis_url, prefix)
    old_fmt = old_release[1].encode()
    c = redis.Redis.from_url(redis_url, **client_kwargs())
    try:
        keys = RedisSaver(c, prefix=prefix).keys
        meta = lambda t: c.hget(keys.thread_keys(t)[0], "v")  # noqa: E731
        assert {meta(t) for t in old} == {old_fmt}
        assert _record_kinds(c, keys, "full") == {"framed"}
        saver = RedisSaver(c, prefix=prefix)
        # 1. read exactly what the old release reads, thread by thread, checkpoint by checkpoint
        assert dump_threads(saver, list(old)) == old
        assert len(old["full"]) >= 6 and len(old["latest"]) == 1
        # reads write nothing, and the threads stay in their format
        assert {meta(t) for t in old} == {old_fmt}
        # server-side filters match the old records (the old release kept a large value's JSON)
        found = [t.config["configurable"]["checkpoint_id"] for t in saver.list(None, filter={"big": BIG})]
        assert found and set(found) <= {cp["config"]["configurable"]["checkpoint_id"] for cp in old["full"]}
        tup = saver.get_tuple({"configurable": {"thread_id": "full"}})
        assert [w[1] for w in tup.pending_writes] == ["__interrupt__"]
        hist = saver.get_delta_channel_history(config=tup.config, channels=["messages"])
        assert "seed" in hist["messages"]
        # 2. continue every kind of thread with this version
        saver.setup()  # records the new format under the prefix
        assert c.get(keys.schema_key()) == FORMAT_VERSION.encode()
        g = build(saver)
        state = g.invoke(Command(resume="yes"), {"configurable": {"thread_id": "full"}})
        assert state["messages"][-1].content == "approved: yes"
        state = g.invoke({"messages": [("user", "and a salad")]}, {"configurable": {"thread_id": "full"}})
        assert [m.content for m in state["messages"]][-2:] == ["and a salad", "echo: and a salad"]
        assert len(list(saver.list({"configurable": {"thread_id": "full"}}))) > len(old["full"])
        # new writes are encoded: a long message makes the thread's message list a stream
        # record; its older versions stay raw, as 0.1.0 wrote them
        long = " ".join(f"word{i}" for i in range(600))
        state = g.invoke({"messages": [("user", long)]}, {"configurable": {"thread_id": "full"}})
        assert state["messages"][-1].content == "echo: " + long
        types = _blob_types(c.hgetall(keys.thread_keys("full")[4]))
        assert any(t.endswith(b"\x1fs") for t in types) and any(b"\x1f" not in t for t in types)
        # the thread now holds the old build's checkpoint records and this version's, and reads
        # back every one: the old ones exactly as the old build read them
        assert _record_kinds(c, keys, "full") == {"framed", "msgpack"}
        # (the newest old checkpoint took the resume's writes since)
        now = dump_threads(saver, ["full"])["full"][-len(old["full"]):]
        assert [{**x, "writes": None} for x in now] == [{**x, "writes": None} for x in old["full"]]
        assert now[1:] == old["full"][1:]
        build(RedisSaver(c, prefix=prefix, ttl={"default_ttl": 60})).invoke(
            {"messages": [("user", "again")]}, {"configurable": {"thread_id": "ttl"}}
        )
        assert all(0 < c.pttl(k) <= 3_600_000 for k in keys.thread_keys("ttl")[:9] if c.exists(k))
        g.invoke({"messages": [("user", "again")]}, {"configurable": {"thread_id": "pinned"}})
        assert all(c.pttl(k) == -1 for k in keys.thread_keys("pinned")[:9] if c.exists(k))
        latest = RedisSaver(c, prefix=prefix, history="latest")
        build(latest).invoke({"messages": [("user", "four")]}, {"configurable": {"thread_id": "latest"}})
        lst = list(latest.list({"configurable": {"thread_id": "latest"}}))
        assert len(lst) == 1
        assert [m.content for m in lst[0].checkpoint["channel_values"]["messages"]][-1] == "echo: four"
        # copy_thread copies the old records as they are; prune keeps their encoding
        saver.copy_thread("untouched", "copied")
        assert _record_kinds(c, keys, "copied") == {"framed"}
        strip = lambda d: [{k: v for k, v in x.items() if k not in ("config", "parent")} for x in d]  # noqa: E731
        assert strip(dump_threads(saver, ["copied"])["copied"]) == strip(old["untouched"])
        saver.prune(["copied"], strategy="keep_latest")
        kept = dump_threads(saver, ["copied"])["copied"]
        assert len(kept) == 1 and kept[0]["parent"] is None
        assert strip(kept) == strip(old["untouched"][:1])
        assert _record_kinds(c, keys, "copied") == {"framed"}
        # the threads this version wrote are in its format now; the untouched one is still the old one's
        new_fmt = FORMAT_VERSION.encode()
        assert {t: meta(t) for t in old} == {
            "full": new_fmt, "ttl": new_fmt, "pinned": new_fmt, "latest": new_fmt, "untouched": old_fmt
        }
        # 3. the old release refuses what this version wrote, and writes nothing
        before = _snapshot(c, prefix)
        got = _run_old(old_release, OLD_READER, redis_url, prefix)
        assert got["setup"][0] == "SchemaMismatchError"
        assert got["get_tuple"][0] == "SchemaMismatchError" and f"format {FORMAT_VERSION}" in got["get_tuple"][1]
        assert got["put_writes"][0] == "SchemaMismatchError"
        assert got["untouched"] == ["ok", str(len(old["untouched"]))]  # an untouched format-3 thread it still reads
        assert _snapshot(c, prefix) == before
    finally:
        c.close()


def _record_kinds(c: redis.Redis, keys: Any, thread: str) -> set[str]:
    """How a thread's checkpoint records are encoded: "framed" (formats 3-5), "msgpack" (6)."""
    return {"msgpack" if v[:1] == b"\x9a" else "framed" for v in c.hvals(keys.thread_keys(thread)[1])}


def _blob_types(blob_hash: dict[bytes, bytes]) -> list[bytes]:
    """The serde types of a blob hash's value records (not its mark, stream directories or frames)."""
    out = []
    for v in blob_hash.values():
        try:
            out.append(unpack_blob(v)[0])
        except MalformedReplyError:
            continue
    return [t for t in out if t]
