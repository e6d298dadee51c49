"""Keys of a thread lost one by one (eviction under maxmemory), and the maxmemory-policy check.

Redis evicts whole keys: under ``allkeys-*`` (and ``volatile-*`` for threads with a ttl) one
key of a thread may go while the others stay, and a later write may create it again. A thread
that lost a key is forgotten whole: reads answer exactly what was last written or as if the
thread did not exist (never with channels or writes left out), and a write that continues it
raises ``ThreadEvictedError``. (The session workloads under every policy are in
``test_eviction_sessions.py``.)

- ``test_eviction_reads_exact_or_absent``: a real server with an evicting policy and a small
  ``maxmemory``, 40 threads written round-robin until keys are evicted, every read compared
  with an ``InMemorySaver`` that received the same calls (prints the counts; run with -s).
- ``test_lost_key``: each of the 9 thread keys deleted in turn.
- the legit cases that must not be taken for a loss, and the policy warning.
"""

from __future__ import annotations

import asyncio
import random
import time
import warnings
from collections import Counter
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
    EvictionPolicyWarning,
    RedisSaver,
    ThreadEvictedError,
    UnsupportedServerError,
)
from redis_saver.keys import THREAD_SUFFIXES


def cfg(thread: str, ns: str = "", cid: str | None = None) -> dict:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if cid is not None:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def norm(t: Any) -> Any:
    if t is None:
        return None
    key = lambda c: c and tuple(c["configurable"].get(k) for k in ("thread_id", "checkpoint_ns", "checkpoint_id"))  # noqa: E731
    return (key(t.config), t.checkpoint, t.metadata, key(t.parent_config), [tuple(w) for w in t.pending_writes or []])


class Writer:
    """Drives the saver API as a LangGraph run does (checkpoints whose changed channels get new
    versions, writes of tasks against them) on several savers at once, with the same values."""

    def __init__(self, savers: list[Any], seed: int = 0) -> None:
        self.savers = savers
        self.rnd = random.Random(seed)
        self.state: dict[str, dict[str, Any]] = {}

    def text(self, n: int) -> str:
        words = ["checkpoint", "redis", "graph", "node", "edge", "state", "value", "tool", "call", "reply"]
        return " ".join(self.rnd.choice(words) for _ in range(n // 6))

    def step(self, thread: str, ns: str = "") -> str:
        st = self.state.setdefault(thread + "|" + ns, {"cfg": cfg(thread, ns), "cp": None, "step": -1})
        prev = st["cp"]
        cp = empty_checkpoint() if prev is None else {**prev, "channel_values": dict(prev["channel_values"])}
        st["step"] += 1
        step = st["step"]
        cp["id"] = f"1ef{step:05d}-{self.rnd.randrange(16**8):08x}"
        values = cp["channel_values"]
        versions = dict(cp.get("channel_versions") or {})
        changed = ["messages"]
        reply = {"role": "ai", "content": self.text(self.rnd.randrange(300, 1500))}
        values["messages"] = [*values.get("messages", []), reply]
        if step % 3 == 0:
            values["summary"] = self.text(400)
            changed.append("summary")
        if step == 0:
            values["user"] = {"name": thread, "tier": "gold"}
            changed.append("user")
        new_versions = {}
        for ch in changed:
            versions[ch] = self.savers[0].get_next_version(versions.get(ch), None)
            new_versions[ch] = versions[ch]
        cp["channel_versions"] = versions
        md = {"source": "loop", "step": step, "run_id": f"run-{thread}-{step // 4}", "parents": {}}
        for s in self.savers:
            out = s.put(st["cfg"], cp, md, new_versions)
        st["cfg"], st["cp"] = out, cp
        if step % 2 == 0:  # pending writes of two tasks against the new checkpoint
            for task in ("agent", "tools"):
                writes = [("messages", {"role": "tool", "content": self.text(200)}), ("route", task)]
                for s in self.savers:
                    s.put_writes(out, writes, f"{task}-{step}", f"~__pregel_pull, {task}")
        return out["configurable"]["checkpoint_id"]


# --------------------------------------------------------------------------- (a) real eviction


def outcome(read, expected: Any) -> str:
    try:
        got = read()
    except DamagedThreadError:
        return "damaged"
    if got == expected:
        return "exact"
    # as if the thread did not exist (None, no items, no history): checked by the caller
    if got is None or got == [] or (isinstance(got, dict) and all(v == {"writes": []} for v in got.values())):
        return "none"
    return "WRONG"


def _diff(expected: Any, got: Any) -> str:
    if isinstance(expected, tuple) and isinstance(got, tuple):
        names = ("config", "checkpoint", "metadata", "parent", "writes")
        out = []
        for n, e, g in zip(names, expected, got, strict=True):
            if e != g:
                if n == "checkpoint":
                    e, g = e["channel_values"], g["channel_values"]
                    out.append(f"channels {sorted(e)} != {sorted(g)}")
                elif n == "writes":
                    out.append(f"{len(e)} writes != {len(g)}")
                else:
                    out.append(f"{n} {e} != {g}")
        return "; ".join(out)
    if isinstance(expected, list) and isinstance(got, list):
        return f"{len(expected)} items != {len(got)}: " + "; ".join(
            _diff(e, g) for e, g in zip(expected, got, strict=True) if e != g
        )
    return f"{expected!r:.300} != {got!r:.300}"


@pytest.mark.parametrize(
    "policy,headroom,limit_from",
    [
        ("allkeys-lru", 700_000, 0),
        ("allkeys-random", 1_200_000, 0),
        ("allkeys-lru", 0, 11),
        ("volatile-lru", 700_000, 0),
    ],
    ids=["lru-heavy", "random", "lru-last-round", "volatile-lru-ttl"],
)
def test_eviction_reads_exact_or_absent(policy, headroom, limit_from):
    """maxmemory = used memory + headroom, set before round `limit_from` of 12 (volatile-*: the
    threads have a ttl, so their keys can be evicted). A write the saver refuses
    (ThreadEvictedError: the thread was evicted) restarts that thread on both savers."""
    with start_standalone(extra_args=("--maxmemory-policy", policy, "--maxmemory-samples", "10")) as server:
        r = redis.Redis(host=server.host, port=server.port, **client_kwargs())
        try:
            ttl = {"default_ttl": 60} if policy.startswith("volatile-") else None
            saver = RedisSaver(r, prefix="ev", ttl=ttl, eviction_check="off")
            saver.setup()
            mem = InMemorySaver()
            w = Writer([saver, mem], seed=7)
            threads = [f"t{i:02d}" for i in range(40)]
            ids: dict[str, list[str]] = {t: [] for t in threads}
            refused = 0
            for n in range(12):  # round-robin: every thread keeps being written after evictions start
                if n == limit_from:
                    r.config_set("maxmemory", str(int(r.info("memory")["used_memory"]) + headroom))
                for t in threads:
                    for attempt in range(4):
                        try:
                            ids[t].append(w.step(t))
                            break
                        except ThreadEvictedError:
                            # the session starts again (in a run this short, Redis's LRU clock
                            # of whole seconds ranks every key alike: a new session's keys too)
                            refused += 1
                            mem.delete_thread(t)
                            w.state.pop(t + "|")
                            ids[t] = []
                            if attempt == 3:
                                raise
            evicted = int(r.info("stats")["evicted_keys"])
            r.config_set("maxmemory", "0")  # reads see what survived; nothing more is evicted
            assert evicted > 0

            counts: Counter = Counter()
            gone_threads, lost_keys, missing = set(), 0, Counter()
            # list(None) first: every item it returns reads back exactly
            everything = [norm(x) for x in saver.list(None)]
            assert everything == sorted(everything, key=lambda x: x[0][2], reverse=True)
            listed_threads = {x[0][0] for x in everything}
            for t in threads:
                present = [s for s in THREAD_SUFFIXES if r.exists(saver.keys.thread_keys(t)[THREAD_SUFFIXES.index(s)])]
                lost_keys += len(THREAD_SUFFIXES) - len(present)
                missing.update(set(THREAD_SUFFIXES) - set(present))
                reads = {"latest": (lambda t=t: norm(saver.get_tuple(cfg(t))), norm(mem.get_tuple(cfg(t))))}
                for cid in ids[t]:
                    reads["id " + cid] = (
                        lambda t=t, cid=cid: norm(saver.get_tuple(cfg(t, "", cid))),
                        norm(mem.get_tuple(cfg(t, "", cid))),
                    )
                reads["list"] = (
                    lambda t=t: [norm(x) for x in saver.list({"configurable": {"thread_id": t}})],
                    [norm(x) for x in mem.list(cfg(t))],
                )
                reads["list ns"] = (
                    lambda t=t: [norm(x) for x in saver.list({"configurable": {"thread_id": t, "checkpoint_ns": ""}})],
                    [norm(x) for x in mem.list(cfg(t))],
                )
                last = cfg(t, "", ids[t][-1])
                reads["delta"] = (
                    lambda last=last: saver.get_delta_channel_history(config=last, channels=["messages", "summary"]),
                    mem.get_delta_channel_history(config=last, channels=["messages", "summary"]),
                )
                outcomes = set()
                for name, (read, expected) in reads.items():
                    o = outcome(read, expected)
                    kind = name.split(" ")[0]
                    counts[kind, o] += 1
                    if outcome(lambda expected=expected: expected, None) != "none":
                        outcomes.add(o)  # a read whose right answer is "nothing" tells nothing
                    if o in ("WRONG", "damaged"):
                        got = read()
                        raise AssertionError(f"{t} {name} {present}: {o}: {_diff(expected, got)}")
                if "none" in outcomes:
                    gone_threads.add(t)
                    # whole or gone: no read of it answers, and none of its keys is left
                    assert outcomes == {"none"}, (t, outcomes)
                    assert not any(r.exists(k) for k in saver.keys.thread_keys(t)[:9]), t
                    assert t not in listed_threads, t
                else:
                    assert t in listed_threads, t
            print(
                f"\neviction ({policy}, maxmemory used+{headroom // 1000} KB from round {limit_from}): "
                f"{evicted} keys evicted, {refused} writes refused (thread evicted, restarted), "
                f"{lost_keys} of {40 * len(THREAD_SUFFIXES)} thread keys missing before the reads, "
                f"{len(gone_threads)} of 40 threads gone; missing then: {dict(missing)}"
            )
            for k in sorted(counts):
                print(f"  {k[0]:<10} {k[1]:<8} {counts[k]}")
            assert counts["latest", "exact"] + counts["latest", "none"] == 40
        finally:
            r.close()


# --------------------------------------------------------------------------- (b) one key lost


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


# --------------------------------------------------------------------------- (c) the policy check


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-lru", "noeviction"])
def test_policy_warning_sync(policy):
    with start_standalone(extra_args=("--maxmemory-policy", policy)) as s:
        r = redis.Redis(host=s.host, port=s.port, **client_kwargs())
        try:
            with warnings.catch_warnings(record=True) as got:
                warnings.simplefilter("always")
                saver = RedisSaver(r, prefix="pol")
                saver.setup()  # warns here
                saver.get_tuple(cfg("x"))  # not again
                saver2 = RedisSaver(r, prefix="pol")
                saver2.get_tuple(cfg("x"))  # a saver without setup(): its first call
                list(saver2.list(cfg("x")))
            found = [w for w in got if issubclass(w.category, EvictionPolicyWarning)]
            if not policy.startswith("allkeys-"):
                assert found == []  # volatile-*: threads without a ttl are never evicted
            else:
                assert len(found) == 2
                assert policy in str(found[0].message) and "noeviction" in str(found[0].message)
            # a saver with a ttl is a session cache: nothing to say, whatever the policy
            with warnings.catch_warnings(record=True) as got:
                warnings.simplefilter("always")
                RedisSaver(r, prefix="pol", ttl={"default_ttl": 5}).setup()
            assert [w for w in got if issubclass(w.category, EvictionPolicyWarning)] == []
        finally:
            r.close()


def test_policy_warning_async_and_raise():
    async def main(port: int) -> None:
        import redis.asyncio as aredis

        r = aredis.Redis(host="127.0.0.1", port=port, **async_client_kwargs())
        try:
            with pytest.warns(EvictionPolicyWarning, match="allkeys-lfu"):
                await AsyncRedisSaver(r, prefix="pol").aget_tuple(cfg("x"))
            with pytest.warns(EvictionPolicyWarning):
                await AsyncRedisSaver(r, prefix="pol").asetup()
            strict = AsyncRedisSaver(r, prefix="pol", eviction_check="raise")
            with pytest.raises(UnsupportedServerError, match="allkeys-lfu"):
                await strict.aget_tuple(cfg("x"))
            with pytest.raises(UnsupportedServerError):  # every call, until the policy is fixed
                await strict.aget_tuple(cfg("x"))
            await r.config_set("maxmemory-policy", "noeviction")
            assert await strict.aget_tuple(cfg("x")) is None
        finally:
            await r.aclose()

    with start_standalone(extra_args=("--maxmemory-policy", "allkeys-lfu")) as s:
        asyncio.run(main(s.port))


def test_policy_from_info_when_config_is_disabled():
    # managed services (ElastiCache, Azure) disable CONFIG: INFO memory answers
    with start_standalone(extra_args=("--maxmemory-policy", "allkeys-lfu", "--rename-command", "CONFIG", "")) as s:
        r = redis.Redis(host=s.host, port=s.port, **client_kwargs())
        try:
            with pytest.warns(EvictionPolicyWarning, match="allkeys-lfu"):
                RedisSaver(r, prefix="pol").get_tuple(cfg("x"))
        finally:
            r.close()
    # neither answers: nothing is said
    args = ("--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", "", "--rename-command", "INFO", "")
    with start_standalone(extra_args=args) as s:
        r = redis.Redis(host=s.host, port=s.port, **client_kwargs())
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", EvictionPolicyWarning)
                RedisSaver(r, prefix="pol").get_tuple(cfg("x"))
        finally:
            r.close()


@pytest.mark.cluster
def test_policy_warning_cluster(cluster):
    rc = cluster.client()
    node = rc.get_primaries()[1]
    try:
        rc.config_set("maxmemory-policy", "allkeys-random", target_nodes=node)
        with pytest.warns(EvictionPolicyWarning, match=f"allkeys-random on {node.host}:{node.port}"):
            RedisSaver(rc, prefix="pol").get_tuple(cfg("x"))

        async def main() -> None:
            arc = cluster.async_client()
            try:
                await arc.initialize()
                with pytest.warns(EvictionPolicyWarning, match=f"allkeys-random on {node.host}:{node.port}"):
                    await AsyncRedisSaver(arc, prefix="pol").aget_tuple(cfg("x"))
            finally:
                await arc.aclose()

        asyncio.run(main())
    finally:
        rc.config_set("maxmemory-policy", "noeviction", target_nodes=node)
        rc.close()


@pytest.mark.sentinel
def test_policy_warning_sentinel(sentinel):
    m = sentinel.client().master_for(sentinel.master_name, **client_kwargs())
    try:
        m.config_set("maxmemory-policy", "allkeys-lfu")
        with pytest.warns(EvictionPolicyWarning, match="allkeys-lfu"):
            RedisSaver(m, prefix="pol").get_tuple(cfg("x"))
    finally:
        m.config_set("maxmemory-policy", "noeviction")
        m.close()


# --------------------------------------------------------------------------- (d) a real graph


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
