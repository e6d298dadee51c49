"""Keys of a thread lost one by one (eviction under maxmemory), and the maxmemory-policy check.

Redis evicts whole keys: under ``allkeys-*`` (and ``volatile-*`` for threads with a ttl) one
key of a thread may go while the others stay, and a later write may create it again. Reads
must then raise ``DamagedThreadError``, never answer with channels or writes left out, nor
with ``None`` for a thread whose records survive.

- ``test_eviction_reads_exact_or_damaged``: a real server with ``allkeys-lru`` and a small
  ``maxmemory``, 40 threads written round-robin until keys are evicted, every read compared
  with an ``InMemorySaver`` that received the same calls (prints the counts; run with -s).
- ``test_lost_key``: each of the 9 thread keys deleted in turn.
- the legit cases that must not raise, and the policy warning.
"""

from __future__ import annotations

import asyncio
import random
import time
import warnings
from collections import Counter
from typing import Any

import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from devkit.servers import async_client_kwargs, client_kwargs, start_standalone
from redis_saver import (
    AsyncRedisSaver,
    DamagedThreadError,
    EvictionPolicyWarning,
    RedisSaver,
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
def test_eviction_reads_exact_or_damaged(policy, headroom, limit_from):
    """maxmemory = used memory + headroom, set before round `limit_from` of 12 (volatile-*: the
    threads have a ttl, so their keys can be evicted)."""
    with start_standalone(extra_args=("--maxmemory-policy", policy, "--maxmemory-samples", "10")) as server:
        r = redis.Redis(host=server.host, port=server.port, **client_kwargs())
        try:
            with pytest.warns(EvictionPolicyWarning):
                ttl = {"default_ttl": 60} if policy.startswith("volatile-") else None
                saver = RedisSaver(r, prefix="ev", ttl=ttl)
                saver.setup()
            mem = InMemorySaver()
            w = Writer([saver, mem], seed=7)
            threads = [f"t{i:02d}" for i in range(40)]
            ids: dict[str, list[str]] = {t: [] for t in threads}
            for n in range(12):  # round-robin: every thread keeps being written after evictions start
                if n == limit_from:
                    r.config_set("maxmemory", str(int(r.info("memory")["used_memory"]) + headroom))
                for t in threads:
                    ids[t].append(w.step(t))
            evicted = int(r.info("stats")["evicted_keys"])
            r.config_set("maxmemory", "0")  # reads see what survived; nothing more is evicted
            assert evicted > 0

            counts: Counter = Counter()
            damaged_threads, lost_keys, missing = set(), 0, Counter()
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
                for name, (read, expected) in reads.items():
                    o = outcome(read, expected)
                    kind = name.split(" ")[0]
                    counts[kind, o] += 1
                    if o == "damaged":
                        damaged_threads.add(t)
                    if o == "WRONG":
                        got = read()
                        raise AssertionError(f"{t} {name} {present}: {_diff(expected, got)}")
                    if o == "none":
                        # absent only when no checkpoint of the thread survives anywhere
                        # the 9 thread keys (thread_keys adds the 2 slot-index keys)
                        keys = dict(zip(THREAD_SUFFIXES, saver.keys.thread_keys(t), strict=False))
                        cp_keys = ("cp", "cp_ns", "cp_id", "chain", "runs")
                        assert not any(r.exists(keys[k]) for k in cp_keys), (t, name, present)
            # list(None): every thread's items exactly, or DamagedThreadError
            try:
                everything = [norm(x) for x in saver.list(None)]
                counts["list(None)", "exact"] += 1
                assert everything == sorted(everything, key=lambda x: x[0][2], reverse=True)
            except DamagedThreadError:
                counts["list(None)", "damaged"] += 1
            print(
                f"\neviction ({policy}, maxmemory used+{headroom // 1000} KB from round {limit_from}): "
                f"{evicted} keys evicted, {lost_keys} of {40 * len(THREAD_SUFFIXES)} thread keys missing, "
                f"{len(damaged_threads)} of 40 threads reported damaged; missing now: {dict(missing)}"
            )
            for k in sorted(counts):
                print(f"  {k[0]:<10} {k[1]:<8} {counts[k]}")
            assert damaged_threads  # the test did exercise damage
            assert counts["latest", "exact"] + counts["latest", "damaged"] + counts["latest", "none"] == 40
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


# what each read needs: deleting that key must raise there; elsewhere the read raises or is exact
NEEDED = {
    "meta": {"latest", "by id", "list", "list ns", "list(None)", "delta"},
    "cp": {"latest", "by id", "list", "list ns", "list(None)"},
    "cp_ns": {"latest", "by id", "list ns", "delta"},
    "cp_id": {"list", "list(None)"},
    "blob": {"latest", "by id", "list", "list ns", "list(None)", "delta"},
    "wr": {"latest", "by id", "list", "list ns", "list(None)", "delta"},
    "wr_ord": {"latest", "by id", "list", "list ns", "list(None)", "delta"},
    "runs": set(),
    "chain": set(),
}


@pytest.mark.parametrize("lost", THREAD_SUFFIXES)
def test_lost_key(client, lost):
    prefix = f"lk{lost}"
    saver = RedisSaver(client, prefix=prefix, eviction_check="off")
    mem = InMemorySaver()
    ids = _build(saver, mem, "t")
    expected = {name: read() for name, read in _reads(mem, "t", ids).items()}
    before = {name: read() for name, read in _reads(saver, "t", ids).items()}
    assert before == expected
    client.delete(saver.keys.thread_keys("t")[THREAD_SUFFIXES.index(lost)])
    for name, read in _reads(saver, "t", ids).items():
        try:
            got = read()
        except DamagedThreadError as exc:
            assert "thread t:" in str(exc)
            continue
        assert name not in NEEDED[lost], f"{name} did not raise after losing {lost}"
        assert got == expected[name], f"{name} after losing {lost}"
    # a later write does not hide the loss (the key is created again, holding only new data)
    Writer([saver], seed=2).step("t")
    for name, read in _reads(saver, "t", ids).items():
        if name in NEEDED[lost]:
            with pytest.raises(DamagedThreadError):
                read()
    saver.delete_thread("t")  # the way out
    assert saver.get_tuple(cfg("t")) is None


def test_lost_key_async(server):
    async def main() -> None:
        import redis.asyncio as aredis

        r = aredis.Redis(host=server.host, port=server.port, **async_client_kwargs())
        try:
            saver = AsyncRedisSaver(r, prefix="lka", eviction_check="off")
            cp = {**empty_checkpoint(), "id": "1", "channel_values": {"x": 1}, "channel_versions": {"x": "1"}}
            await saver.aput(cfg("a"), cp, {}, {"x": "1"})
            await r.delete(saver.keys.thread_keys("a")[THREAD_SUFFIXES.index("blob")])
            with pytest.raises(DamagedThreadError, match="thread a: the blob of"):
                await saver.aget_tuple(cfg("a"))
            with pytest.raises(DamagedThreadError):
                [x async for x in saver.alist(cfg("a"))]
        finally:
            await r.aclose()

    asyncio.run(main())


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


def test_meta_lost_then_written_stays_damaged(client):
    saver = RedisSaver(client, prefix="metalost", eviction_check="off")
    ids = _build(saver, InMemorySaver(), "m")
    client.delete(saver.keys.thread_keys("m")[0])
    Writer([saver], seed=9).step("m")  # re-creates meta: remembers the loss
    with pytest.raises(DamagedThreadError, match="meta key was lost"):
        saver.get_tuple(cfg("m", "", ids[0]))
    saver.delete_thread("m")
    Writer([saver], seed=9).step("m")
    assert saver.get_tuple(cfg("m")) is not None


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
            if policy == "noeviction":
                assert found == []
            else:
                assert len(found) == 2
                assert policy in str(found[0].message) and "noeviction" in str(found[0].message)
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
    with start_standalone(extra_args=("--maxmemory-policy", "volatile-ttl", "--rename-command", "CONFIG", "")) as s:
        r = redis.Redis(host=s.host, port=s.port, **client_kwargs())
        try:
            with pytest.warns(EvictionPolicyWarning, match="volatile-ttl"):
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
        m.config_set("maxmemory-policy", "volatile-lfu")
        with pytest.warns(EvictionPolicyWarning, match="volatile-lfu"):
            RedisSaver(m, prefix="pol").get_tuple(cfg("x"))
    finally:
        m.config_set("maxmemory-policy", "noeviction")
        m.close()
