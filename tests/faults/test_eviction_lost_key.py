"""Keys of a thread lost one by one (each deleted by the test, as an eviction under maxmemory would).

A thread that lost a key is forgotten whole: reads answer exactly what was last written or as
if the thread did not exist (never with channels or writes left out), and a write that
continues it raises ``ThreadEvictedError``. (Real eviction and the maxmemory-policy check are
in ``test_eviction.py``.)

- ``test_lost_key``: each of the thread keys deleted in turn; then the async saver, a put, a
  thread an earlier release marked damaged, and a full server.
- the legit cases that must not be taken for a loss.
- a real LangGraph graph with a DeltaChannel: never rebuilt from part of its history.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

import pytest
import redis
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from devkit.servers import async_client_kwargs, client_kwargs, start_standalone
from redis_saver import (
    AsyncRedisSaver,
    DamagedThreadError,
    RedisSaver,
    ThreadEvictedError,
)
from redis_saver.keys import THREAD_SUFFIXES
from tests.faults._eviction import Writer, cfg, norm

# --------------------------------------------------------------------------- one key lost

@pytest.fixture(scope="module")
def server():
    with start_standalone() as s:
        yield s


@pytest.fixture
def client(server):
    r = redis.Redis(host=server.host, port=server.port, **client_kwargs())
    yield r
    r.close()


def _build(saver: RedisSaver, mem: InMemorySaver, thread: str) -> list[str]:
    w = Writer([saver, mem], seed=1)
    return [w.step(thread) for _ in range(5)]


def _reads(saver: Any, thread: str, ids: list[str]) -> dict[str, Any]:
    """Every read of the thread, each a function."""
    return {
        "latest": lambda: norm(saver.get_tuple(cfg(thread))),
        "by id": lambda: norm(saver.get_tuple(cfg(thread, "", ids[1]))),
        "list": lambda: [norm(x) for x in saver.list({"configurable": {"thread_id": thread}})],
        "list ns": lambda: [norm(x) for x in saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})],
        "list(None)": lambda: [norm(x) for x in saver.list(None) if x.config["configurable"]["thread_id"] == thread],
        "delta": lambda: saver.get_delta_channel_history(
            config=cfg(thread, "", ids[-1]), channels=["messages", "summary", "route"]
        ),
    }


@pytest.mark.parametrize("lost", THREAD_SUFFIXES)
def test_lost_key(client, lost):
    """One key of the thread deleted: the first read that notices forgets the thread whole (its
    keys and its slot-index entry go); from then on every read answers as for an absent thread.
    A key no read needs (runs; chain, which threads of this format keep empty) leaves reads exact."""
    prefix = f"lk{lost}"
    saver = RedisSaver(client, prefix=prefix, eviction_check="off")
    mem = InMemorySaver()
    ids = _build(saver, mem, "t")
    expected = {name: read() for name, read in _reads(mem, "t", ids).items()}
    before = {name: read() for name, read in _reads(saver, "t", ids).items()}
    assert before == expected
    keys = saver.keys.thread_keys("t")
    client.delete(keys[THREAD_SUFFIXES.index(lost)])
    got = {name: read() for name, read in _reads(saver, "t", ids).items()}
    if lost in ("runs", "chain"):
        assert got == expected
        return
    # the first read (get_tuple of the latest) noticed: the thread is gone, whole
    assert got == {name: None if name.startswith(("latest", "by id")) else [] for name in got if name != "delta"} | {
        "delta": {c: {"writes": []} for c in ("messages", "summary", "route")}
    }
    assert not any(client.exists(k) for k in keys[:9])
    assert client.zscore(keys[9], "t") is None  # nor listed by list(None)
    # the run that was going on cannot continue it: its next put is refused, nothing stored
    w = Writer([saver], seed=1)
    w.state["t|"] = {"cfg": cfg("t", "", ids[-1]), "cp": mem.get_tuple(cfg("t")).checkpoint, "step": 4}
    with pytest.raises(ThreadEvictedError, match="no longer holds"):
        w.step("t")
    assert not any(client.exists(k) for k in keys[:9])
    # a new session (no checkpoint_id) starts it afresh
    w.state.pop("t|")
    w.step("t")
    assert saver.get_tuple(cfg("t")) is not None


def test_lost_key_async(server):
    async def main() -> None:
        import redis.asyncio as aredis

        r = aredis.Redis(host=server.host, port=server.port, **async_client_kwargs())
        try:
            saver = AsyncRedisSaver(r, prefix="lka", eviction_check="off")
            cp = {**empty_checkpoint(), "id": "1", "channel_values": {"x": 1}, "channel_versions": {"x": "1"}}
            conf = await saver.aput(cfg("a"), cp, {}, {"x": "1"})
            await r.delete(saver.keys.thread_keys("a")[THREAD_SUFFIXES.index("blob")])
            assert [x async for x in saver.alist(cfg("a"))] == []
            assert await saver.aget_tuple(cfg("a")) is None
            assert await r.exists(*saver.keys.thread_keys("a")[:9]) == 0
            with pytest.raises(ThreadEvictedError):
                await saver.aput(conf, {**cp, "id": "2"}, {}, {})
        finally:
            await r.aclose()

    asyncio.run(main())


def test_put_on_a_thread_that_lost_its_blobs_forgets_it(client):
    """A put finds the blob hash gone: it forgets the thread before storing (its unchanged
    channels would name values no longer stored) and, continuing from a parent, refuses."""
    saver = RedisSaver(client, prefix="putlost", eviction_check="off")
    ids = _build(saver, InMemorySaver(), "t")
    keys = saver.keys.thread_keys("t")
    client.delete(keys[THREAD_SUFFIXES.index("blob")])
    c = {**empty_checkpoint(), "id": "9", "channel_values": {}, "channel_versions": {"messages": "99"}}
    with pytest.raises(ThreadEvictedError, match=ids[-1]):
        saver.put(cfg("t", "", ids[-1]), c, {}, {})
    assert not any(client.exists(k) for k in keys[:9])
    # a put without a parent starts afresh
    c0 = {**empty_checkpoint(), "id": "10", "channel_values": {"x": 1}, "channel_versions": {"x": "1"}}
    saver.put(cfg("t"), c0, {}, {"x": "1"})
    assert saver.get_tuple(cfg("t")).checkpoint["channel_values"] == {"x": 1}


def test_damaged_thread_error_never_reaches_the_caller(client):
    """The read that raised RS_DAMAGED is sent again as its forgetting variant: the plan sees
    DamagedThreadError, the caller never does (on a thread damaged by an earlier release, too)."""
    saver = RedisSaver(client, prefix="dmg", eviction_check="off")
    _build(saver, InMemorySaver(), "t")
    client.hset(saver.keys.thread_keys("t")[0], "dmg", "wr")  # what an earlier release recorded
    sent = []
    call = saver._driver.engine.call

    def spy(c):
        sent.append(c.script)
        return call(c)

    saver._driver.engine.call = spy
    assert saver.get_tuple(cfg("t")) is None
    assert sent == ["get_tuple", "get_tuple+forget"]
    assert DamagedThreadError.__doc__ and "Applications do not see it" in DamagedThreadError.__doc__


def test_a_damaged_thread_is_forgotten_on_a_full_server(client):
    """Under noeviction at maxmemory, writes are refused, but the forgetting read (allow-oom: it
    only deletes) still runs: the damaged thread reads as absent and its keys go."""
    saver = RedisSaver(client, prefix="dmgoom", eviction_check="off")
    ids = _build(saver, InMemorySaver(), "t")
    keys = saver.keys.thread_keys("t")
    client.delete(keys[THREAD_SUFFIXES.index("wr_ord")])
    policy = client.config_get("maxmemory-policy")["maxmemory-policy"]
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "1")
    try:
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            saver.put_writes(cfg("t", "", ids[-1]), [("x", 1)], "task")
        assert saver.get_tuple(cfg("t")) is None
        assert not any(client.exists(k) for k in keys[:9])
    finally:
        client.config_set("maxmemory", "0")
        client.config_set("maxmemory-policy", policy)


# --------------------------------------------------------------------------- legit cases


def test_legit_cases_do_not_raise(client):
    saver = RedisSaver(client, prefix="legit", eviction_check="off")
    # writes before the first checkpoint; pin before the first put
    saver.put_writes(cfg("w", "", "future"), [("x", 1)], "task")
    assert saver.get_tuple(cfg("w")) is None
    assert list(saver.list(cfg("w"))) == []
    saver.pin("p")
    assert saver.get_tuple(cfg("p")) is None
    # a hand-made checkpoint naming a version no put stored, in a thread that stored blobs
    c1 = {**empty_checkpoint(), "id": "1", "channel_values": {"a": 1}, "channel_versions": {"a": "1"}}
    saver.put(cfg("h"), c1, {}, {"a": "1"})
    c2 = {**empty_checkpoint(), "id": "2", "channel_values": {}, "channel_versions": {"a": "1", "b": "7"}}
    saver.put(cfg("h", "", "1"), c2, {}, {})
    got = saver.get_tuple(cfg("h"))
    assert got.checkpoint["channel_values"] == {"a": 1}  # as InMemorySaver: b skipped
    assert saver.get_delta_channel_history(config=cfg("h"), channels=["b"]) == {"b": {"writes": []}}
    # the thread's checkpoints all deleted, the thread pinned: empty, not damaged
    saver.pin("d")
    saver.put(cfg("d"), {**c1, "id": "5"}, {"run_id": "r1"}, {"a": "1"})
    saver.delete_for_runs(["r1"])
    assert saver.get_tuple(cfg("d")) is None
    # copy_thread copies blobs without the blob mark and marks the target
    saver.copy_thread("h", "h2")
    assert norm(saver.get_tuple(cfg("h2")))[1] == got.checkpoint


def test_ttl_expiry_under_way_is_absent_not_damaged(client):
    """Redis 7.0 sets each PEXPIRE from its own clock reading: a thread's keys may expire a
    millisecond apart. A read in between answers None (the thread is going), not damage."""
    saver = RedisSaver(client, prefix="ttlskew", ttl={"default_ttl": 1 / 60}, eviction_check="off")  # 1 s
    Writer([saver]).step("t")
    Writer([saver], seed=3).step("t")
    keys = dict(zip(THREAD_SUFFIXES, saver.keys.thread_keys("t"), strict=False))  # 9 of its 11 keys
    for gone in ("cp", "meta", "wr_ord"):
        client.delete(keys[gone])  # as if it expired first
        assert saver.get_tuple(cfg("t")) is None
        assert list(saver.list(cfg("t"))) == []
    # a write then starts the thread afresh (the expiry is finished first)
    Writer([saver], seed=4).step("t")
    assert saver.get_tuple(cfg("t")) is not None
    time.sleep(1.3)
    assert saver.get_tuple(cfg("t")) is None


def test_meta_lost_then_written_starts_afresh(client):
    saver = RedisSaver(client, prefix="metalost", eviction_check="off")
    ids = _build(saver, InMemorySaver(), "m")
    client.delete(saver.keys.thread_keys("m")[0])
    Writer([saver], seed=9).step("m")  # a new session's put: the rest of the thread is forgotten first
    assert saver.get_tuple(cfg("m", "", ids[0])) is None
    assert [x.config["configurable"]["checkpoint_id"] for x in saver.list(cfg("m"))] == [
        saver.get_tuple(cfg("m")).config["configurable"]["checkpoint_id"]
    ]

# --------------------------------------------------------------------------- a real graph

def _concat(state: list, writes: list) -> list:
    return [*state, *(x for w in writes for x in (w if isinstance(w, list) else [w]))]


class _DeltaState(TypedDict, total=False):
    items: Annotated[list, DeltaChannel(_concat, snapshot_frequency=3)]
    n: int


def _delta_graph(checkpointer: Any, on_work: Any) -> Any:
    """START -> work -> more -> END over a DeltaChannel list; ``on_work(thread)`` runs inside
    the node "work" (a test makes it evict a key there)."""

    def work(state: _DeltaState, config: RunnableConfig) -> dict:
        on_work(config["configurable"]["thread_id"])
        return {"items": [f"w{len(state.get('items', []))}"], "n": state.get("n", 0) + 1}

    g = StateGraph(_DeltaState)
    g.add_node("work", work)
    g.add_node("more", lambda state: {"items": ["m"]})
    g.add_edge(START, "work")
    g.add_edge("work", "more")
    g.add_edge("more", END)
    return g.compile(checkpointer=checkpointer)


@pytest.mark.parametrize("lost", ["blob", "cp_ns", "wr_ord", "meta"])
def test_delta_channel_graph_never_rebuilds_a_wrong_state(client, lost):
    """A LangGraph graph with a DeltaChannel on the saver: after a key of its thread is lost,
    its state reads empty (never rebuilt from part of the history), and the next turn starts
    the session afresh exactly as on a new thread. A key lost while a run goes on (a node
    deletes it, as an eviction between two of the run's calls would): the run either raises
    ThreadEvictedError at its next put (its values are gone: blob, meta) or finishes, and in
    both cases the thread then reads empty, never partial."""
    evict: dict[str, Any] = {}  # thread id -> the key its next "work" node deletes
    saver = RedisSaver(client, prefix=f"dg{lost}", eviction_check="off")

    def on_work(thread: str) -> None:
        if evict.pop(thread, None):  # an eviction while the node runs
            client.delete(saver.keys.thread_keys(thread)[THREAD_SUFFIXES.index(lost)])

    def build(checkpointer: Any) -> Any:
        return _delta_graph(checkpointer, on_work)

    graph, ref = build(saver), build(InMemorySaver())
    conf = {"configurable": {"thread_id": "g"}}
    for t in range(5):
        graph.invoke({"items": [f"in{t}"]}, conf)
        ref.invoke({"items": [f"in{t}"]}, conf)
    assert graph.get_state(conf).values == ref.get_state(conf).values
    client.delete(saver.keys.thread_keys("g")[THREAD_SUFFIXES.index(lost)])
    assert graph.get_state(conf).values == {}
    # the next turn starts afresh: the state a new thread gets from the same turn
    graph.invoke({"items": ["in5"]}, conf)
    ref.invoke({"items": ["in5"]}, {"configurable": {"thread_id": "fresh"}})
    assert graph.get_state(conf).values == ref.get_state({"configurable": {"thread_id": "fresh"}}).values

    # a key lost in the middle of a run
    conf2 = {"configurable": {"thread_id": "g2"}}
    for t in range(4):
        graph.invoke({"items": [f"in{t}"]}, conf2)
    evict["g2"] = True
    try:
        graph.invoke({"items": ["in4"]}, conf2)
        refused = False
    except ThreadEvictedError:
        refused = True
    assert refused == (lost in ("blob", "meta")), refused
    assert graph.get_state(conf2).values == {}
    # no checkpoint or value of it is left (a refused run's error writes may be stored against
    # its checkpoint id, as writes before a first checkpoint are: no read returns them)
    left = {n for n, k in zip(THREAD_SUFFIXES, saver.keys.thread_keys("g2"), strict=False) if client.exists(k)}
    assert not left & {"cp", "cp_ns", "cp_id", "blob", "runs", "chain"}, left
