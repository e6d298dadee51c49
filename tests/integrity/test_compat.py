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
from tests.integrity._graphs import SERDE, keys_of, run_thread

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


# the build whose tags this one must keep verifying (and writing): tags as integrity_key first
# shipped them, in storage format 6; a faster tag path must hash the same bytes
FIRST_TAGS = "9a7856d"

SIGNER = textwrap.dedent(
    """
    import json, sys
    import redis
    import redis_saver
    sys.path.insert(0, sys.argv[3])
    from tests.integrity._graphs import SERDE, run_thread
    url, prefix, key, mode = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[4]), sys.argv[5]
    r = redis.Redis.from_url(url)
    saver = redis_saver.RedisSaver(r, prefix=prefix, integrity_key=key)
    store = redis_saver.RedisStore(r, prefix=prefix, serde=SERDE, integrity_key=key)
    cache = redis_saver.RedisCache(r, prefix=prefix, integrity_key=key)
    if mode == "write":
        run_thread(saver, "by-first")
        store.setup()
        store.put(("docs", "a"), "small", {"n": 1})
        store.put(("docs", "a"), "big", {"text": "word " * 300})
        cache.set({(("n", "a"), "k"): ({"v": [1, 2, 3]}, None)})
        print("{}")
    else:
        def norm(t):
            return repr((t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes))
        out = {
            "list": [norm(t) for t in saver.list({"configurable": {"thread_id": "by-this"}})],
            "store": [repr(store.get(("docs", "a"), k).value) for k in ("small", "big")],
            "cache": repr(cache.get([(("n", "a"), "k")])),
        }
        print(json.dumps(out))
    """
)


def test_tags_stay_those_of_the_first_tagged_build(tmp_path: Path, redis_url: str, prefix: str) -> None:
    """What the first build with tags signed verifies here, and what this build signs verifies
    there: checkpoints in two namespaces, stream and plain values, pending writes, store items
    (plain and compressed) and a cache entry."""
    got = subprocess.run(["git", "-C", str(ROOT), "archive", FIRST_TAGS, "redis_saver", "lua"], capture_output=True)
    if got.returncode != 0:
        pytest.fail(f"the build {FIRST_TAGS} is not in this checkout's git history: {got.stderr.decode()}")
    with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tar:
        tar.extractall(tmp_path)
    key = os.urandom(32)

    def first(mode: str) -> Any:
        proc = subprocess.run(
            [sys.executable, "-c", SIGNER, redis_url, prefix, str(ROOT), key.hex(), mode],
            env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, timeout=300,
            cwd=str(tmp_path),
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    r = redis.Redis.from_url(redis_url)
    first("write")
    keyed = redis_saver.RedisSaver(r, prefix=prefix, integrity_key=key)
    plain = redis_saver.RedisSaver(r, prefix=prefix)
    cfg = {"configurable": {"thread_id": "by-first"}}
    got_list = [(t.checkpoint, t.metadata, t.parent_config, t.pending_writes) for t in keyed.list(cfg)]
    want = [(t.checkpoint, t.metadata, t.parent_config, t.pending_writes) for t in plain.list(cfg)]
    assert got_list == want and len(want) > 3
    assert {t.config["configurable"]["checkpoint_ns"] for t in keyed.list(cfg)} != {""}  # two namespaces
    assert any(t.pending_writes for t in keyed.list(cfg))
    for ns in {t.config["configurable"]["checkpoint_ns"] for t in plain.list(cfg)}:
        latest = keyed.get_tuple({"configurable": {"thread_id": "by-first", "checkpoint_ns": ns}})
        assert latest is not None
    store = redis_saver.RedisStore(r, prefix=prefix, serde=SERDE, integrity_key=key)
    assert store.get(("docs", "a"), "small").value == {"n": 1}
    assert store.get(("docs", "a"), "big").value == {"text": "word " * 300}
    cache = redis_saver.RedisCache(r, prefix=prefix, integrity_key=key)
    assert cache.get([(("n", "a"), "k")]) == {(("n", "a"), "k"): {"v": [1, 2, 3]}}
    # and the other way: this build signs, the first tagged build verifies
    run_thread(keyed, "by-this")
    store.put(("docs", "a"), "small", {"n": 2})
    cache.set({(("n", "a"), "k"): ({"v": [4]}, None)})
    there = first("read")
    mine = [repr((t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes))
            for t in keyed.list({"configurable": {"thread_id": "by-this"}})]
    assert there["list"] == mine and len(mine) > 3
    assert there["store"] == [repr({"n": 2}), repr({"text": "word " * 300})]
    assert there["cache"] == repr({(("n", "a"), "k"): {"v": [4]}})
    r.close()
