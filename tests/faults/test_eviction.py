"""Real eviction under maxmemory, and the maxmemory-policy check.

Redis evicts whole keys: under ``allkeys-*`` (and ``volatile-*`` for threads with a ttl) one
key of a thread may go while the others stay, and a later write may create it again. A thread
that lost a key is forgotten whole: reads answer exactly what was last written or as if the
thread did not exist (never with channels or writes left out), and a write that continues it
raises ``ThreadEvictedError``. (Each key lost in turn, the legit cases that must not be taken
for a loss, and a real graph are in ``test_eviction_lost_key.py``; the session workloads under
every policy in ``test_eviction_sessions.py``.)

- ``test_eviction_reads_exact_or_absent``: a real server with an evicting policy and a small
  ``maxmemory``, 40 threads written round-robin until keys are evicted, every read compared
  with an ``InMemorySaver`` that received the same calls (prints the counts; run with -s).
- the policy check: the warning an evicting policy gives (sync, async, cluster, Sentinel),
  ``eviction_check="raise"``, and the policy read from INFO when CONFIG is disabled.
"""

from __future__ import annotations

import asyncio
import warnings
from collections import Counter
from typing import Any

import pytest
import redis
from langgraph.checkpoint.memory import InMemorySaver

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
from tests.faults._eviction import Writer, cfg, norm

# --------------------------------------------------------------------------- real eviction


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
        ("allkeys-random", 1_000_000, 0),
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

# --------------------------------------------------------------------------- the policy check


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
