"""copy_thread and stream identity , against a real redis-server.

A stream is known to a saver's cache by (thread, sid) and its raw length, and ``put.lua``
appends to it only at the raw length the client based the append on: both are sound only if a
sid never comes back with other bytes. These tests replay, step by step, the sequences that
used to read or store wrong values:
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
    """Two savers A and B share a prefix, each with its own stream cache: a target deleted and
    copied again gets fresh stream ids, so neither cache serves the first copy's bytes."""
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
    """One saver, no deletes: the second copy into U is refused
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


# ---- a paged copy under a guard ----------------------------------------------------------------
def _hooked(saver: RedisSaver, plan: Any, hook: Any) -> Any:
    """Run ``plan`` on the saver's driver, calling ``hook(step)`` before each step is sent; the
    hook may return "twice" to send a step again (a retried call) or raise to stop the copy."""

    def wrapped() -> Any:
        step = next(plan)
        while True:
            again = hook(step)
            reply = yield step
            if again == "twice":
                reply = yield step
            try:
                step = plan.send(reply)
            except StopIteration as stop:
                return stop.value

    return saver._driver.run(wrapped())


def _pages(step: Any) -> bool:
    return getattr(step, "script", "") == "export" and step.args[4] == "page"


def _copy_by_pages(saver: RedisSaver, action: Any) -> int:
    """``saver.copy_thread("T", "U")`` step by step, calling ``action(k)`` before its ``k``-th
    page (1-based, counted across restarts) is read; returns how many pages were read."""
    n = [0]

    def hook(step: Any) -> None:
        if _pages(step):
            n[0] += 1
            action(n[0])

    _hooked(saver, saver._plans._plan_copy_thread("T", "U"), hook)
    return n[0]


@pytest.fixture
def paged(monkeypatch):
    import redis_saver.core.plans.budgets as plans

    monkeypatch.setattr(plans, "WORK_BUDGET", 3)
    monkeypatch.setattr(plans, "COPY_FIELDS", 4)
    return plans


def _history(saver: RedisSaver, thread: str) -> list:
    return [(t.checkpoint["id"], t.parent_config and t.parent_config["configurable"]["checkpoint_id"],
             _texts(t.checkpoint["channel_values"]["messages"]), t.pending_writes) for t in saver.list(_cfg(thread))]


def _fill(saver: RedisSaver, thread: str, n: int) -> None:
    for k in range(3, 3 + n):
        cfg = _put(saver, thread, _msgs(k))
        saver.put_writes(cfg, [("messages", [AIMessage(f"w{k}", id=f"w{k}")])], f"task{k:03d}")


def test_a_destructive_change_mid_copy_starts_the_copy_again(sync_client, prefix, paged):
    s, other = RedisSaver(sync_client, prefix=prefix), RedisSaver(sync_client, prefix=prefix)
    _fill(s, "T", 12)

    def action(k: int) -> None:
        if k == 3:  # the copy has written two pages by now
            other.prune(["T"])

    assert _copy_by_pages(s, action) > 3  # started again
    assert _history(s, "U") == _history(s, "T") and len(_history(s, "U")) == 1
    check_stream_hash(_blobs(sync_client, s, "U"))


def test_a_source_changed_on_every_attempt_copies_nothing(sync_client, prefix, paged):
    from redis_saver import CopyConflictError

    s, other = RedisSaver(sync_client, prefix=prefix), RedisSaver(sync_client, prefix=prefix)
    _fill(s, "T", 30)

    def action(k: int) -> None:
        if k % 3 == 0:  # a checkpoint put again with other bytes moves the guard too
            t = s.get_tuple(_cfg("T"))
            cp = dict(t.checkpoint)
            cp["channel_values"] = {"messages": [*t.checkpoint["channel_values"]["messages"], HumanMessage("x")]}
            other.put(t.parent_config, cp, {"step": k}, {})

    with pytest.raises(CopyConflictError, match="changed destructively"):
        _copy_by_pages(s, action)
    assert not sync_client.exists(*s.keys.thread_keys("U")[:9])
    s.copy_thread("T", "U")  # undisturbed, it copies
    assert _history(s, "U") == _history(s, "T")


def test_a_source_deleted_mid_copy_leaves_no_target(sync_client, prefix, paged):
    s, other = RedisSaver(sync_client, prefix=prefix), RedisSaver(sync_client, prefix=prefix)
    _fill(s, "T", 12)
    _copy_by_pages(s, lambda k: k == 2 and other.delete_thread("T"))
    assert not sync_client.exists(*s.keys.thread_keys("U")[:9])


def test_new_checkpoints_and_writes_during_a_paged_copy_leave_it_whole(sync_client, prefix, paged):
    s, other = RedisSaver(sync_client, prefix=prefix), RedisSaver(sync_client, prefix=prefix)
    _fill(s, "T", 12)
    moment: list = []

    def action(k: int) -> None:
        _fill(other, "T", 1)  # puts and writes do not move the guard: no restart
        if k == 1:
            moment.append(_history(s, "T"))  # what the first page reads

    _copy_by_pages(s, action)
    assert len(_history(s, "T")) > len(moment[0]) + 2
    assert _history(s, "U") == moment[0]  # the source as the first page read it, writes included
    check_stream_hash(_blobs(sync_client, s, "U"))


def test_a_target_deleted_mid_copy_raises(sync_client, prefix, paged):
    from redis_saver import CopyConflictError

    s, other = RedisSaver(sync_client, prefix=prefix), RedisSaver(sync_client, prefix=prefix)
    _fill(s, "T", 12)
    with pytest.raises(CopyConflictError, match="target"):
        _copy_by_pages(s, lambda k: k == 3 and other.delete_thread("U"))


def test_an_unfinished_copy_is_invisible_named_and_deleted_before_copying_again(sync_client, prefix, paged):
    s = RedisSaver(sync_client, prefix=prefix)
    _fill(s, "T", 12)
    def action(k: int) -> None:
        if k == 3:
            raise ConnectionError("the client went away")

    with pytest.raises(ConnectionError):
        _copy_by_pages(s, action)
    # written in part, but no read sees it until its last call: the target reads as absent
    assert sync_client.hget(s.keys.thread_keys("U")[0], "xp") == b"1"
    assert _history(s, "U") == [] and s.get_tuple({"configurable": {"thread_id": "U"}}) is None
    with pytest.raises(ThreadExistsError, match="unfinished copy"):
        s.copy_thread("T", "U")
    s.delete_thread("U")
    s.copy_thread("T", "U")
    assert _history(s, "U") == _history(s, "T")
    assert sync_client.hget(s.keys.thread_keys("U")[0], "xp") is None


@pytest.mark.parametrize("pages", [False, True])
def test_retried_import_calls_count_nothing_twice(sync_client, prefix, pages, monkeypatch):
    """Every call may be sent again after a connection error (``retries``): a copy whose
    import calls all arrive twice is the same copy."""
    import redis_saver.core.plans.budgets as plans

    if pages:
        monkeypatch.setattr(plans, "WORK_BUDGET", 3)
        monkeypatch.setattr(plans, "COPY_FIELDS", 4)
    s = RedisSaver(sync_client, prefix=prefix)
    _fill(s, "T", 12)
    _hooked(s, s._plans._plan_copy_thread("T", "U"), lambda step: "twice" if step.script == "import" else None)
    assert _history(s, "U") == _history(s, "T")
    assert check_stream_hash(_blobs(sync_client, s, "U")) == check_stream_hash(_blobs(sync_client, s, "T"))


def test_a_target_whose_expiry_is_under_way_is_new(sync_client, prefix):
    s = RedisSaver(sync_client, prefix=prefix)
    _fill(s, "T", 3)
    _fill(s, "U", 2)
    for k in s.keys.thread_keys("U")[:9]:
        sync_client.pexpire(k, 1500)
    s.copy_thread("T", "U")
    assert _history(s, "U") == _history(s, "T")
    assert sync_client.pttl(s.keys.thread_keys("U")[1]) == -1  # the copy's own keys: no expiry


def test_a_real_graph_keeps_each_threads_own_turns(sync_client, prefix):
    """The copy-over-copy sequence with a StateGraph(add_messages): U's own turn stays in
    get_state_history(U), for this saver and a fresh one."""
    from langgraph.graph import START, MessagesState, StateGraph

    def chat(state: MessagesState) -> dict:
        return {"messages": [AIMessage("echo " + state["messages"][-1].content)]}

    def app(saver: RedisSaver) -> Any:
        g = StateGraph(MessagesState)
        g.add_node("chat", chat)
        g.add_edge(START, "chat")
        return g.compile(checkpointer=saver)

    s = RedisSaver(sync_client, prefix=prefix)
    a = app(s)
    conf = {"configurable": {"thread_id": "T"}}
    for i in range(5):
        a.invoke({"messages": [HumanMessage(TEXT[i * 200 : i * 200 + 200])]}, conf)
    s.copy_thread("T", "U")
    a.invoke({"messages": [HumanMessage("A" * 80)]}, {"configurable": {"thread_id": "U"}})
    a.invoke({"messages": [HumanMessage("B" * 80)]}, conf)
    with pytest.raises(ThreadExistsError):
        s.copy_thread("T", "U")
    for saver in (s, RedisSaver(sync_client, prefix=prefix)):
        texts = [
            [m.content for m in st.values.get("messages", [])]
            for st in app(saver).get_state_history({"configurable": {"thread_id": "U"}})
        ]
        assert texts[0][-2:] == ["A" * 80, "echo " + "A" * 80]
        assert not any("B" * 80 in t for ts in texts for t in ts)
