"""copy_thread and stream identity (issue 30, parts 1 and 2), against a real redis-server.

A stream is known to a saver's cache by (thread, sid) and its raw length, and ``put.lua``
appends to it only at the raw length the client based the append on: both are sound only if a
sid never comes back with other bytes. These tests are the issue's reproductions, step by step:
several savers (each with its own cache) copy, delete, expire and append, and every read must
return exactly what was last written, for every saver.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from redis_saver import RedisSaver, ThreadExistsError
from tests.lifecycle._util import check_stream_hash

TEXT = "".join(f"message {i} of a conversation that goes on and on. " for i in range(400))


def _msgs(n: int) -> list[Any]:
    return [
        (HumanMessage if i % 2 == 0 else AIMessage)(TEXT[i * 60 : i * 60 + 120], id=f"m{i}") for i in range(n)
    ]


def _cfg(thread: str) -> dict:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _put(saver: RedisSaver, thread: str, messages: list[Any], parent: dict | None = None) -> dict:
    """One checkpoint of thread ``thread`` holding ``messages``, as LangGraph puts it: after the
    latest checkpoint this saver reads (or ``parent``)."""
    latest = saver.get_tuple(_cfg(thread)) if parent is None else None
    cp = empty_checkpoint()
    prev = latest.checkpoint["channel_versions"] if latest else {}
    v = {"messages": saver.get_next_version(prev.get("messages"), None)}
    cp["channel_versions"] = {**prev, **v}
    cp["channel_values"] = {"messages": messages}
    conf = latest.config if latest else (parent or _cfg(thread))
    return saver.put(conf, cp, {"step": len(messages)}, v)


def _read(saver: RedisSaver, thread: str) -> list[Any]:
    return saver.get_tuple(_cfg(thread)).checkpoint["channel_values"]["messages"]


def _texts(messages: list[Any]) -> list[str]:
    return [m.content for m in messages]


def _blobs(client: Any, saver: RedisSaver, thread: str) -> dict:
    return client.hgetall(saver.keys.thread_keys(thread)[4])


def test_a_target_deleted_and_copied_again_never_reads_the_bytes_of_its_first_copy(sync_client, prefix):
    """Issue 30, first reproduction: A and B share a prefix, each with its own cache."""
    a, b, fresh = (RedisSaver(sync_client, prefix=prefix) for _ in range(3))
    _put(a, "T", _msgs(10))
    b.copy_thread("T", "U")
    _put(a, "U", [*_read(a, "U"), AIMessage("A" * 80, id="a")])
    b.delete_thread("U")
    b.copy_thread("T", "U")
    _put(b, "U", [*_read(b, "U"), AIMessage("B" * 80, id="b")])
    want = [*_texts(_msgs(10)), "B" * 80]
    assert _texts(_read(fresh, "U")) == want
    assert _texts(_read(a, "U")) == want  # A's cache held U's first copy
    # A's next put builds on what it read; what is stored is what it sent
    sent = [*_read(a, "U"), AIMessage("C" * 80, id="c")]
    _put(a, "U", sent)
    for s in (a, b, fresh):
        assert _texts(_read(s, "U")) == _texts(sent)
    check_stream_hash(_blobs(sync_client, a, "U"))


def test_a_target_expired_and_copied_again_never_reads_the_bytes_of_its_first_copy(sync_client, prefix):
    """The same with U expiring by its TTL instead of being deleted."""
    ttl = {"default_ttl": 0.02}  # 1.2 s
    a = RedisSaver(sync_client, prefix=prefix)
    b, fresh = RedisSaver(sync_client, prefix=prefix, ttl=ttl), RedisSaver(sync_client, prefix=prefix)
    _put(a, "T", _msgs(10))
    b.copy_thread("T", "U")
    _put(a, "U", [*_read(a, "U"), AIMessage("A" * 80, id="a")])  # a keeps no ttl: U's is b's
    keys = b.keys.thread_keys("U")[:9]
    for k in keys:  # U expires as a unit (a's put made its keys persistent again)
        sync_client.pexpire(k, 50)
    deadline = time.monotonic() + 5
    while sync_client.exists(*keys) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not sync_client.exists(*keys)
    b.copy_thread("T", "U")
    _put(b, "U", [*_read(b, "U"), AIMessage("B" * 80, id="b")])
    want = [*_texts(_msgs(10)), "B" * 80]
    assert _texts(_read(fresh, "U")) == want
    assert _texts(_read(a, "U")) == want
    sent = [*_read(a, "U"), AIMessage("C" * 80, id="c")]
    _put(a, "U", sent)
    for s in (a, b, fresh):
        assert _texts(_read(s, "U")) == _texts(sent)


def test_copying_into_a_thread_that_exists_is_refused_and_writes_nothing(sync_client, prefix):
    """Issue 30, second reproduction: one saver, no deletes. The second copy into U is refused
    before anything is written, so U's own turn stays U's for every saver."""
    s, fresh = RedisSaver(sync_client, prefix=prefix), RedisSaver(sync_client, prefix=prefix)
    _put(s, "T", _msgs(10))
    s.copy_thread("T", "U")
    _put(s, "U", [*_read(s, "U"), AIMessage("A" * 80, id="a")])
    _put(s, "T", [*_read(s, "T"), AIMessage("B" * 80, id="b")])
    before = {k: sync_client.dump(k) for k in s.keys.thread_keys("U")[:9]}
    with pytest.raises(ThreadExistsError, match="already exists"):
        s.copy_thread("T", "U")
    assert {k: sync_client.dump(k) for k in s.keys.thread_keys("U")[:9]} == before
    for saver in (s, fresh):
        assert _texts(_read(saver, "U")) == [*_texts(_msgs(10)), "A" * 80]
        assert _texts(_read(saver, "T")) == [*_texts(_msgs(10)), "B" * 80]
    history = [_texts(t.checkpoint["channel_values"]["messages"])[-1] for t in fresh.list(_cfg("U"))]
    assert history == ["A" * 80, _texts(_msgs(10))[-1]]


def test_a_copy_counts_its_own_stream_references(sync_client, prefix):
    """The copy's stream directories count the records the copy holds (not the source's count),
    so pruning the copy keeps the stream its latest checkpoint uses."""
    s, fresh = RedisSaver(sync_client, prefix=prefix), RedisSaver(sync_client, prefix=prefix)
    for n in range(4, 12):
        _put(s, "T", _msgs(n))
    s.copy_thread("T", "U")
    src, dst = _blobs(sync_client, s, "T"), _blobs(sync_client, s, "U")
    assert check_stream_hash(src) == check_stream_hash(dst)
    # fresh stream ids: no stream field of the copy is a field of the source
    assert not {f for f in dst if f and b"\0" in f.split(b"\0", 2)[-1]} & set(src)
    _put(s, "U", [*_read(s, "U"), AIMessage("A" * 80, id="a")])
    _put(s, "T", [*_read(s, "T"), AIMessage("B" * 80, id="b")])
    s.prune(["U"])
    check_stream_hash(_blobs(sync_client, s, "U"))
    assert _texts(_read(fresh, "U")) == [*_texts(_msgs(11)), "A" * 80]
    assert _texts(_read(fresh, "T")) == [*_texts(_msgs(11)), "B" * 80]
