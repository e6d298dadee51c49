"""Chain entries (the ``chain`` hash: what delta history reads of each ancestor), on a real server.

Threads an earlier format started keep them, and so do threads a saver with ``compress=False``
starts (its put sends each entry: delta history then reads ~300 bytes per ancestor instead of
its uncompressed record); a thread a compressing saver starts keeps none (it reads the records,
which compression made small). These tests start their threads as each, and check that all
give the same answers.

put and prune build an entry inside Lua from the checkpoint record (lua/_lib.lua
chain_entry); ``entry()`` below spells the layout independently, and the two must agree. Delta
history must give InMemorySaver's answer (when the chain key was lost, e.g. evicted, the thread
is forgotten whole: tests/faults/test_eviction_lost_key.py).
"""

from __future__ import annotations

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver

from redis_saver import RedisSaver, ThreadExistsError
from redis_saver.core import codec
from redis_saver.keys import enc

AWKWARD = ["messages", "a\x00b", "\x01x\x02", "", "ünï"]  # NUL, \x01, \x02, empty, unicode
PLAIN = ["messages", "branch:to:chat", "__start__", "ünï"]


def _fill(saver, tid: str, n: int = 12, names: list = AWKWARD, seed_every: int = 5, legacy: bool = True) -> dict:
    """A linear thread over ``names``; "a\\x00b" also gets versions holding a NUL. ``legacy``: a
    thread an earlier format started (its meta says format 4, without "nc"), which keeps its
    chain entries; a thread format 5 starts keeps none (``legacy=False``)."""
    cfg = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    if legacy and isinstance(saver, RedisSaver):
        saver.client.hset(saver.keys.thread_keys(tid)[0], mapping={"tid": tid, "v": "4"})
    for i in range(n):
        cp = empty_checkpoint()
        cp["id"] = str(uuid6())
        cp["channel_versions"] = {
            ch: f"{i:03}.\x00{j}" if ch == "a\x00b" else f"{i:03}.{j}" for j, ch in enumerate(names)
        }
        cp["channel_values"] = {ch: [i, ch] for ch in names} if i % seed_every == 0 else {}
        cfg = saver.put(cfg, cp, {"step": i}, dict(cp["channel_versions"]))
        saver.put_writes(cfg, [(ch, f"w{i}:{ch}") for ch in names], f"task{i}", "p")
    return cfg


def _last(saver, tid: str) -> dict:
    return saver.get_tuple({"configurable": {"thread_id": tid, "checkpoint_ns": ""}}).config


def entry(parent: str, versions: dict) -> bytes:
    """A checkpoint's chain entry: e(parent), then \\x01 e(channel) \\x02 e(version) per channel."""
    out = [enc(parent)]
    for ch, ver in versions.items():
        out += [b"\x01", enc(ch), b"\x02", enc(str(ver))]
    return b"".join(out)


def _chain(client, saver, tid: str) -> dict:
    key = saver.keys.thread_keys(tid)[8]
    assert key.endswith(b":chain")
    return {k: v for k, v in client.hgetall(key).items() if k != b""}  # without the chain mark


def _checked_chain(client, saver, tid: str, n: int) -> dict:
    """The thread's chain entries, checked: n of them, each ``entry()`` of its checkpoint."""
    mine = _chain(client, saver, tid)
    assert len(mine) == n
    for t in saver.list({"configurable": {"thread_id": tid}}):
        c = t.config["configurable"]
        want = entry(t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else "",
                     t.checkpoint["channel_versions"])
        assert mine[enc(c["checkpoint_ns"]) + enc(c["checkpoint_id"])] == want
    return mine


def test_client_and_script_build_the_same_entries(sync_client, prefix):
    saver = RedisSaver(sync_client, prefix=prefix)
    saver.setup()
    for names, src in ((AWKWARD, "awkward"), (PLAIN, "plain")):  # the client's slow and fast paths
        _fill(saver, src, names=names)
        mine = _checked_chain(sync_client, saver, src, 12)
        first = min(mine)
        assert mine[first].startswith(enc("") + b"\x01")  # the root has no parent
        # copy_thread copies into a new thread only, which keeps no chain: its records serve
        # (a target an earlier format started is a thread that exists: refused)
        sync_client.hset(saver.keys.thread_keys(src + "-old")[0], mapping={"tid": src + "-old", "v": "4"})
        with pytest.raises(ThreadExistsError):
            saver.copy_thread(src, src + "-old")
        saver.copy_thread(src, src + "-copy")
        assert _chain(sync_client, saver, src + "-copy") == {}
        got = saver.get_delta_channel_history(config=_last(saver, src + "-copy"), channels=names)
        assert got == saver.get_delta_channel_history(config=_last(saver, src), channels=names)


def test_delta_history_matches_in_memory_and_a_lost_chain_is_reported(sync_client, prefix):
    saver = RedisSaver(sync_client, prefix=prefix)
    saver.setup()
    ref = InMemorySaver()
    last = _fill(saver, "t")
    _fill(ref, "t")
    chans = ["messages", "a\x00b", "\x01x\x02", "", "ünï", "missing"]
    with_chain = saver.get_delta_channel_history(config=last, channels=chans)
    assert len(with_chain["messages"]["writes"]) == 1 and "seed" in with_chain["messages"]
    # same answer as InMemorySaver's (ids differ, so compare the values)
    ref_last = next(iter(ref.list({"configurable": {"thread_id": "t"}}, limit=1))).config
    expected = ref.get_delta_channel_history(config=ref_last, channels=chans)
    assert with_chain == expected
    # the chain key alone lost (eviction): the thread is forgotten, as for every lost key (tests/faults)
    sync_client.delete(saver.keys.thread_keys("t")[8])
    assert saver.get_delta_channel_history(config=last, channels=chans) == {c: {"writes": []} for c in chans}
    assert sync_client.exists(*saver.keys.thread_keys("t")[:9]) == 0


def test_prune_detaches_the_oldest_kept_entry(sync_client, prefix):
    saver = RedisSaver(sync_client, prefix=prefix)
    saver.setup()
    _fill(saver, "t")
    saver.prune(["t"], strategy="keep_latest")
    entries = _chain(sync_client, saver, "t")
    cps = sync_client.hgetall(saver.keys.thread_keys("t")[1])
    assert set(entries) == set(cps), "one entry per stored checkpoint"
    # every entry starts with its record's parent; the oldest kept one was detached (parent "")
    for field, raw in cps.items():
        assert entries[field].startswith(enc(codec.checkpoint_head(raw)[0]) + b"\x01")
    oldest = min(cps)
    assert codec.checkpoint_head(cps[oldest])[0] == b"" and entries[oldest].startswith(b"\x00\x01")


# channel names that end like one another: a write's sort member ends with idx8 e(channel),
# and delta history picks a channel's writes by that suffix (lua/delta_history.lua)
LOOKALIKES = ["messages", "xmessages", "\x0012345678messages", "a\x001234567messages", "0000000amessages",
              "messages\x00", "s", ""]


def test_delta_history_tells_lookalike_channels_apart(sync_client, prefix):
    saver = RedisSaver(sync_client, prefix=prefix)
    saver.setup()
    ref = InMemorySaver()
    last = _fill(saver, "t", names=LOOKALIKES, seed_every=100)  # one seed, at the root
    _fill(ref, "t", names=LOOKALIKES, seed_every=100)
    ref_last = next(iter(ref.list({"configurable": {"thread_id": "t"}}, limit=1))).config
    for chans in [[c] for c in LOOKALIKES] + [LOOKALIKES]:
        got = saver.get_delta_channel_history(config=last, channels=chans)
        assert got == ref.get_delta_channel_history(config=ref_last, channels=chans), chans
        assert all(w[1] == c for c in chans for w in got[c]["writes"])
    # the root's seed, then the writes of all 11 ancestors
    assert len(saver.get_delta_channel_history(config=last, channels=["messages"])["messages"]["writes"]) == 11


def test_a_thread_format_5_starts_keeps_no_chain_and_answers_the_same(sync_client, prefix):
    saver = RedisSaver(sync_client, prefix=prefix)
    ref = InMemorySaver()
    last = _fill(saver, "new", legacy=False)
    old = _fill(saver, "old")
    _fill(ref, "t")
    assert _chain(sync_client, saver, "new") == {} and len(_chain(sync_client, saver, "old")) == 12
    assert sync_client.hget(saver.keys.thread_keys("new")[0], "nc") == b"1"
    chans = ["messages", "a\x00b", "\x01x\x02", "", "ünï", "missing"]
    ref_last = next(iter(ref.list({"configurable": {"thread_id": "t"}}, limit=1))).config
    expected = ref.get_delta_channel_history(config=ref_last, channels=chans)
    assert saver.get_delta_channel_history(config=last, channels=chans) == expected
    assert saver.get_delta_channel_history(config=old, channels=chans) == expected
    # prune and the blob collection read the records: the latest checkpoint reads the same after
    before = saver.get_tuple(last)
    saver.prune(["new"], strategy="keep_latest")
    after = saver.get_tuple(last)
    assert after.checkpoint == before.checkpoint and after.pending_writes == before.pending_writes
    assert len(list(saver.list({"configurable": {"thread_id": "new"}}))) == 1


def test_a_thread_compress_false_starts_keeps_the_entries_its_puts_send(sync_client, prefix):
    off = RedisSaver(sync_client, prefix=prefix, compress=False)
    on = RedisSaver(sync_client, prefix=prefix)
    ref = InMemorySaver()
    chans = ["messages", "a\x00b", "\x01x\x02", "", "ünï", "missing"]
    for names, tid in ((AWKWARD, "awkward"), (PLAIN, "plain")):  # the client's slow and fast paths
        last = _fill(off, tid, names=names, legacy=False)
        assert sync_client.hget(off.keys.thread_keys(tid)[0], "nc") is None
        _checked_chain(sync_client, off, tid, 12)
        if names is AWKWARD:
            ref_last = _fill(ref, tid, names=names)
            expected = ref.get_delta_channel_history(config=ref_last, channels=chans)
            assert off.get_delta_channel_history(config=last, channels=chans) == expected
            assert on.get_delta_channel_history(config=last, channels=chans) == expected
    # a compressing saver continues such a thread: its entries are built from the records
    _fill(on, "plain", n=3, names=PLAIN, legacy=False)
    assert len(_chain(sync_client, on, "plain")) == 15
    # and a thread it starts keeps none, even when a saver with compress=False continues it
    _fill(on, "fresh", n=2, names=PLAIN, legacy=False)
    _fill(off, "fresh", n=2, names=PLAIN, legacy=False)
    assert _chain(sync_client, on, "fresh") == {}
    assert sync_client.hget(on.keys.thread_keys("fresh")[0], "nc") == b"1"
    # the chain key lost: the thread is forgotten, as an earlier format's thread
    latest = off.get_tuple({"configurable": {"thread_id": "plain"}}).config
    sync_client.delete(off.keys.thread_keys("plain")[8])
    assert off.get_delta_channel_history(config=latest, channels=["messages"]) == {"messages": {"writes": []}}
    assert off.get_tuple({"configurable": {"thread_id": "plain"}}) is None
