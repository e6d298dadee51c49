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
        plain = redis_saver.RedisSaver(r, prefix=prefix)
        namespaces = json.loads(sys.argv[6])  # (found by the test: reading them here may raise)
        out = {}
        for name, call in [
            ("list", lambda: [norm(t) for t in saver.list({"configurable": {"thread_id": "by-this"}})]),
            *[(f"get_tuple {ns!r}", lambda ns=ns: norm(saver.get_tuple(
                {"configurable": {"thread_id": "by-this", "checkpoint_ns": ns}}))) for ns in namespaces],
            ("list, no key", lambda: [norm(t) for t in plain.list({"configurable": {"thread_id": "by-this"}})]),
            ("store", lambda: [repr(store.get(("docs", "a"), k).value) for k in ("small", "big")]),
            ("cache", lambda: repr(cache.get([(("n", "a"), "k")]))),
        ]:
            try:
                out[name] = ["ok", call()]
            except Exception as exc:
                out[name] = [type(exc).__name__, str(exc)[:200]]
        print(json.dumps(out))
    """
)


def test_tags_of_the_first_tagged_build_verify_here(tmp_path: Path, redis_url: str, prefix: str) -> None:
    """What the first build with tags signed verifies here: checkpoints in two namespaces,
    stream and plain values, pending writes, store items (plain and compressed) and a cache
    entry. What this build signs, that build refuses with IntegrityError where the tag format
    changed (checkpoint records, values) and reads where it did not (store items, cache
    entries)."""
    got = subprocess.run(["git", "-C", str(ROOT), "archive", FIRST_TAGS, "redis_saver", "lua"], capture_output=True)
    if got.returncode != 0:
        pytest.fail(f"the build {FIRST_TAGS} is not in this checkout's git history: {got.stderr.decode()}")
    with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tar:
        tar.extractall(tmp_path)
    key = os.urandom(32)

    def first(mode: str, *extra: str) -> Any:
        proc = subprocess.run(
            [sys.executable, "-c", SIGNER, redis_url, prefix, str(ROOT), key.hex(), mode, *extra],
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
    # and the other way: this build signs, the first tagged build refuses its checkpoints
    run_thread(keyed, "by-this")
    store.put(("docs", "a"), "small", {"n": 2})
    cache.set({(("n", "a"), "k"): ({"v": [4]}, None)})
    _assert_refused_there(r, prefix, first)
    r.close()


def _assert_refused_there(r: Any, prefix: str, there: Any) -> None:
    """An earlier build (``there``: SIGNER in it) given thread "by-this", which this build
    signed: every read of it raises IntegrityError with the key and raises without it (its
    serializer is handed a type it does not know), and none writes; store items and cache
    entries (their tags unchanged) read back as this build stored them."""
    before = _contents(r, prefix, "by-this")
    plain = redis_saver.RedisSaver(r, prefix=prefix)
    namespaces = sorted({t.config["configurable"]["checkpoint_ns"]
                         for t in plain.list({"configurable": {"thread_id": "by-this"}})})
    got = there("read", json.dumps(namespaces))
    assert _contents(r, prefix, "by-this") == before  # nothing written
    reads = [k for k in got if k.startswith(("list", "get_tuple"))]
    assert len(reads) >= 4  # list, two namespaces' get_tuple, list without a key
    for name in reads:
        kind, text = got[name]
        if name.endswith("no key"):
            assert kind in ("UnicodeDecodeError", "NotImplementedError", "ValueError"), (name, kind, text)
        else:
            assert kind == "IntegrityError", (name, kind, text)
    assert got["store"] == ["ok", [repr({"n": 2}), repr({"text": "word " * 300})]]
    assert got["cache"] == ["ok", repr({(("n", "a"), "k"): {"v": [4]}})]


# the build before checkpoint records' tags hashed the record once and values' tags were stored
# as bytes (CP_MARK, VALUE_MARK): its tags must verify here in place, beside the new ones
PREVIOUS = "df11781"


def _types(r: Any, prefix: str, thread: str) -> tuple[list[bytes], list[bytes]]:
    """The type parts of a thread's stored checkpoint records and value records."""
    cps = [redis_saver.core.codec.checkpoint_head(v)[1] for v in r.hvals(f"{prefix}:{{{thread}}}:cp")]
    blobs = []
    for v in r.hvals(f"{prefix}:{{{thread}}}:blob"):
        try:
            t, _ = redis_saver.core.codec.unpack_blob(v)
        except Exception:  # a stream's directory or frame
            continue
        blobs.append(t)
    return cps, blobs


def test_tags_of_the_previous_build_verify_in_place_beside_new_ones(
    tmp_path: Path, redis_url: str, prefix: str
) -> None:
    """The previous build signs a thread (two namespaces, stream and plain values, pending
    writes, an interrupt pending), store items and a cache entry; this build reads them in
    place with the key (and with it second in a key list), then continues the same thread: the
    thread then holds records of both tag formats, which read back whole, by a saver that did
    not write them. The previous build refuses what this build signed (IntegrityError)."""
    got = subprocess.run(["git", "-C", str(ROOT), "archive", PREVIOUS, "redis_saver", "lua"], capture_output=True)
    if got.returncode != 0:
        pytest.fail(f"the build {PREVIOUS} is not in this checkout's git history: {got.stderr.decode()}")
    with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tar:
        tar.extractall(tmp_path)
    key = os.urandom(32)

    def prev(mode: str, *extra: str) -> Any:
        proc = subprocess.run(
            [sys.executable, "-c", SIGNER, redis_url, prefix, str(ROOT), key.hex(), mode, *extra],
            env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, timeout=300,
            cwd=str(tmp_path),
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    r = redis.Redis.from_url(redis_url)
    prev("write")
    thread = "by-first"  # (SIGNER's name for the thread it writes)
    cps, blobs = _types(r, prefix, thread)
    assert cps and all(b"\x1fk" in t and b"\x1fj" not in t for t in cps)  # the previous format's tags
    assert blobs and all(b"\x1fk" in t and not t.startswith(b"\x1fb") for t in blobs)
    cfg = {"configurable": {"thread_id": thread}}

    def whole(saver: Any) -> list[Any]:
        return [(t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes) for t in saver.list(cfg)]

    plain = redis_saver.RedisSaver(r, prefix=prefix)
    want = whole(plain)
    assert len(want) > 3 and any(t[4] for t in want)
    for keys in (key, [os.urandom(32), key]):
        assert whole(redis_saver.RedisSaver(r, prefix=prefix, integrity_key=keys)) == want
    namespaces = {t[0]["configurable"]["checkpoint_ns"] for t in want}
    assert len(namespaces) >= 2 and "" in namespaces
    store = redis_saver.RedisStore(r, prefix=prefix, serde=SERDE, integrity_key=key)
    assert store.get(("docs", "a"), "big").value == {"text": "word " * 300}
    cache = redis_saver.RedisCache(r, prefix=prefix, integrity_key=key)
    assert cache.get([(("n", "a"), "k")]) == {(("n", "a"), "k"): {"v": [1, 2, 3]}}

    # this build continues the thread: new records beside the previous build's
    run_thread(redis_saver.RedisSaver(r, prefix=prefix, integrity_key=key), thread, turns=1)
    cps, blobs = _types(r, prefix, thread)
    assert any(b"\x1fk" in t for t in cps) and any(b"\x1fj" in t for t in cps)
    assert any(t.startswith(b"\x1fb") for t in blobs) and any(b"\x1fk" in t for t in blobs)
    want = whole(plain)
    assert len(want) > 6
    fresh = redis_saver.RedisSaver(r, prefix=prefix, integrity_key=key)  # remembers nothing it signed
    assert whole(fresh) == want
    for ns in namespaces:
        latest = fresh.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ns}})
        assert latest is not None and latest.checkpoint["channel_values"]
    # a checkpoint of this build that reads a value the previous build wrote (a channel it did not
    # write again): the thread's latest root checkpoint holds values of both formats
    latest = fresh.get_tuple(cfg)
    assert latest is not None
    # and another key alone refuses both formats
    with pytest.raises(redis_saver.IntegrityError):
        redis_saver.RedisSaver(r, prefix=prefix, integrity_key=os.urandom(32)).get_tuple(cfg)
    with pytest.raises(redis_saver.IntegrityError):
        whole(redis_saver.RedisSaver(r, prefix=prefix, integrity_key=os.urandom(32)))

    # the previous build given what this build signed
    keyed = redis_saver.RedisSaver(r, prefix=prefix, integrity_key=key)
    run_thread(keyed, "by-this")
    store.put(("docs", "a"), "small", {"n": 2})
    cache.set({(("n", "a"), "k"): ({"v": [4]}, None)})
    _assert_refused_there(r, prefix, prev)
    r.close()
