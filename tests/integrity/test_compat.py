"""The build before integrity tags (storage format 6 too) given a thread this version signed:
every read raises, none returns a value read wrongly, and nothing is written; and the thread it
wrote is read in place by this version without a key (with a key it is refused as untagged)."""

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

import redis_saver
from tests.integrity._graphs import keys_of, run_thread

ROOT = Path(__file__).resolve().parents[2]
BEFORE_TAGS = "2ae9453"  # the last build before integrity tags (it reads and writes format 6)

OLD = textwrap.dedent(
    """
    import json, sys
    import redis
    from redis_saver import RedisSaver
    sys.path.insert(0, sys.argv[3])
    from tests.integrity._graphs import run_thread
    url, prefix = sys.argv[1], sys.argv[2]
    s = RedisSaver(redis.Redis.from_url(url), prefix=prefix)
    out = {}
    for name, call in [
        ("get_tuple", lambda: s.get_tuple({"configurable": {"thread_id": "signed"}})),
        ("list", lambda: list(s.list({"configurable": {"thread_id": "signed"}}))),
    ]:
        try:
            out[name] = ["ok", repr(call())[:200]]
        except Exception as exc:
            out[name] = [type(exc).__name__, str(exc)[:200]]
    run_thread(s, "old")
    print(json.dumps(out))
    """
)


def _contents(r: Any, prefix: str, thread: str) -> dict[bytes, Any]:
    """What a thread's keys hold (DUMP's bytes of a hash may differ between two reads: a
    hashtable rehashes step by step on reads too)."""
    out: dict[bytes, Any] = {}
    for k in keys_of(r, prefix):
        if b"{" + thread.encode() + b"}" in k:
            t = r.type(k)
            out[k] = r.hgetall(k) if t == b"hash" else r.zrange(k, 0, -1, withscores=True) if t == b"zset" else r.get(k)
    return out


@pytest.fixture(scope="module")
def before_tags(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("redis_saver-before-tags")
    got = subprocess.run(["git", "-C", str(ROOT), "archive", BEFORE_TAGS, "redis_saver", "lua"], capture_output=True)
    if got.returncode != 0:
        pytest.fail(f"the build {BEFORE_TAGS} is not in this checkout's git history: {got.stderr.decode()}")
    with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tar:
        tar.extractall(out)
    return out


def test_the_build_before_tags_refuses_signed_data(before_tags: Path, redis_url: str, prefix: str) -> None:
    r = redis.Redis.from_url(redis_url)
    run_thread(redis_saver.RedisSaver(r, prefix=prefix, integrity_key=os.urandom(32)), "signed")
    signed = _contents(r, prefix, "signed")
    env = {**os.environ, "PYTHONPATH": str(before_tags)}
    proc = subprocess.run(
        [sys.executable, "-c", OLD, redis_url, prefix, str(ROOT)],
        env=env, capture_output=True, text=True, timeout=300, cwd=str(before_tags),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, (kind, text) in got.items():
        # the tagged type name is not text (the tag is random bytes), or its serializer does not know it
        assert kind in ("UnicodeDecodeError", "NotImplementedError"), (name, kind, text)
    assert _contents(r, prefix, "signed") == signed  # nothing written
    # what it wrote reads in place here without a key, and is refused as untagged with one
    plain = redis_saver.RedisSaver(r, prefix=prefix)
    assert len(list(plain.list({"configurable": {"thread_id": "old"}}))) > 3
    with pytest.raises(redis_saver.IntegrityError, match="no integrity tag"):
        redis_saver.RedisSaver(r, prefix=prefix, integrity_key=os.urandom(32)).get_tuple(
            {"configurable": {"thread_id": "old"}}
        )
    r.close()


FORMAT_5 = "bfd9476"  # the last build that wrote storage format 5 (framed checkpoint records)

WRITER = textwrap.dedent(
    """
    import sys
    import redis
    from redis_saver import RedisSaver
    sys.path.insert(0, sys.argv[3])
    from tests.integrity._graphs import run_thread
    run_thread(RedisSaver(redis.Redis.from_url(sys.argv[1]), prefix=sys.argv[2]), "f5")
    print("{}")
    """
)


def test_sign_thread_signs_a_format_5_thread_in_place(tmp_path: Path, redis_url: str, prefix: str) -> None:
    """A thread the format-5 build wrote (framed checkpoint records) reads the same with a key
    once signed: its checkpoint records are stored signed as format-6 records beside the rest."""
    got = subprocess.run(["git", "-C", str(ROOT), "archive", FORMAT_5, "redis_saver", "lua"], capture_output=True)
    if got.returncode != 0:
        pytest.fail(f"the build {FORMAT_5} is not in this checkout's git history: {got.stderr.decode()}")
    with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tar:
        tar.extractall(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", WRITER, redis_url, prefix, str(ROOT)],
        env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, timeout=300,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = redis.Redis.from_url(redis_url)
    cp = f"{prefix}:{{f5}}:cp"
    assert all(v[:1].isdigit() for v in r.hvals(cp))  # framed records, as format 5 wrote them
    plain = redis_saver.RedisSaver(r, prefix=prefix)
    before = [(t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
              for t in plain.list({"configurable": {"thread_id": "f5"}})]
    keyed = redis_saver.RedisSaver(r, prefix=prefix, integrity_key=os.urandom(32))
    with pytest.raises(redis_saver.IntegrityError):
        keyed.get_tuple({"configurable": {"thread_id": "f5"}})
    assert keyed.sign_thread("f5") > 0
    after = [(t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
             for t in keyed.list({"configurable": {"thread_id": "f5"}})]
    assert after == before and len(after) > 3
    assert all(v[:1] == b"\x9a" for v in r.hvals(cp))
    r.close()
