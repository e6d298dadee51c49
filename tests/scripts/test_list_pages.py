"""list() reads a page's records, blobs and writes in batches (lua/list.lua, tuple_replies in
_lib.lua); without a filter, the writes of a one-namespace page are one range of wr_ord.
Checked against InMemorySaver on a real redis-server, with what that range must leave out:
writes of a checkpoint id that was never stored, lying between two listed checkpoints.
"""

from __future__ import annotations

import pytest
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.checkpoint.memory import InMemorySaver

from redis_saver import RedisSaver


def _view(tuples):
    return [
        (t.config["configurable"]["checkpoint_ns"], t.checkpoint["id"], t.checkpoint["channel_values"],
         t.metadata.get("step"), t.pending_writes)
        for t in tuples
    ]


def _fill(saver, ids, subs):
    """ns "": checkpoints at ids 0-2 and 4-7 (id 3 only has writes), ns "sub": 2 checkpoints."""
    parent = None
    for i, cid in enumerate(ids):
        cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": "",
                                **({"checkpoint_id": parent} if parent else {})}}
        if i != 3:
            cp = generate_checkpoint(checkpoint_id=cid, channel_values={"a": f"v{i}", "b": i % 2},
                                     channel_versions={"a": str(i + 1), "b": str(i % 2 + 1)})
            saver.put(cfg, cp, generate_metadata(step=i, source="loop" if i % 2 else "input"),
                      {"a": str(i + 1), **({"b": str(i % 2 + 1)} if i < 2 else {})})
            parent = cid
        if i % 2 == 1 or i == 3:
            wcfg = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": cid}}
            saver.put_writes(wcfg, [("a", f"w{i}"), ("b", i)], f"task-{i}", "~path")
            saver.put_writes(wcfg, [("a", f"early{i}")], "task-0", "")
            saver.put_writes(wcfg, [("__interrupt__", {"i": i})], f"task-{i}", "~path")
        if i in (2, 5):
            sub = subs[i]
            scfg = {"configurable": {"thread_id": "t", "checkpoint_ns": "sub"}}
            scp = generate_checkpoint(checkpoint_id=sub, channel_values={"s": i}, channel_versions={"s": "1"})
            saver.put(scfg, scp, generate_metadata(step=100 + i), {"s": "1"})
            saver.put_writes({"configurable": {"thread_id": "t", "checkpoint_ns": "sub", "checkpoint_id": sub}},
                             [("s", f"sub{i}")], "sub-task", "")


def test_list_pages_match_inmemory(sync_client, prefix):
    ids = [str(uuid6(clock_seq=i)) for i in range(8)]
    assert ids == sorted(ids)
    ours, ref = RedisSaver(sync_client, prefix=prefix), InMemorySaver()
    subs = {2: str(uuid6(clock_seq=1002)), 5: str(uuid6(clock_seq=1005))}
    _fill(ours, ids, subs)
    _fill(ref, ids, subs)
    t = {"configurable": {"thread_id": "t"}}
    t0 = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    cases = [
        dict(config=t0), dict(config=t), dict(config=t0, limit=3), dict(config=t, limit=4),
        dict(config=t0, before={"configurable": {"checkpoint_id": ids[5]}}),
        dict(config=t0, before={"configurable": {"checkpoint_id": ids[6]}}, limit=3),  # spans the orphan id
        dict(config=t, before={"configurable": {"checkpoint_id": ids[4]}}, limit=2),
        dict(config=t0, filter={"source": "loop"}), dict(config=t, filter={"source": "input"}, limit=2),
        dict(config={"configurable": {"thread_id": "t", "checkpoint_ns": "sub"}}),
    ]
    for kw in cases:
        got = _view(ours.list(**kw))
        # across namespaces InMemorySaver lists namespace by namespace; this saver (like
        # PostgresSaver) newest first over all of them: compare with its whole answer, sorted
        limit = kw.pop("limit", None)
        exp = sorted(_view(ref.list(**kw)), key=lambda v: v[1], reverse=True)[:limit]
        assert got == exp, kw
        assert got, kw
    # the page that covers the orphan id holds every write of its own checkpoints, none of id 3's
    page = _view(ours.list(t0, before={"configurable": {"checkpoint_id": ids[6]}}, limit=3))
    assert [p[1] for p in page] == [ids[5], ids[4], ids[2]]
    assert len(page[0][4]) == 4 and page[1][4] == [] and page[2][4] == []
    assert all("3" not in str(w) for p in page for w in p[4])


def _calls(client) -> dict[str, int]:
    return {k: v["calls"] for k, v in client.info("commandstats").items()}


def test_a_page_costs_a_fixed_number_of_commands(sync_client, prefix):
    # a page of 6 checkpoints without a filter: ids (ZRANGE), records (HMGET), blobs (HMGET),
    # writes (ZRANGE + HMGET), whatever the page size; with a filter, one ZRANGE per checkpoint
    saver = RedisSaver(sync_client, prefix=prefix)
    ids = [str(uuid6(clock_seq=i)) for i in range(8)]
    _fill(saver, ids, {2: str(uuid6(clock_seq=1002)), 5: str(uuid6(clock_seq=1005))})
    cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    # (checkpoints listed, ZRANGE calls, HMGET calls: meta, records, blobs, writes)
    for kw, n, zranges in ((dict(limit=6), 6, 2), (dict(limit=6, filter={"source": "loop"}), 3, 1 + 3)):
        before = _calls(sync_client)
        got = list(saver.list(cfg, **kw))
        after = _calls(sync_client)
        spent = {k[len("cmdstat_"):]: c - before.get(k, 0) for k, c in after.items() if c != before.get(k, 0)}
        assert len(got) == n and all(t.pending_writes for t in got if t.metadata["step"] % 2)
        assert spent["fcall"] == 1 and spent["zrange"] == zranges and spent["hmget"] == 4, spent


def test_a_page_of_more_than_1000_blobs_and_writes(sync_client, prefix):
    # a full page (100 checkpoints) of 12 new channel versions and 11 writes each: the blob and
    # write lookups go over the 1,000 fields one HMGET takes (hmget() in _lib.lua chunks them)
    ours, ref = RedisSaver(sync_client, prefix=prefix), InMemorySaver()
    chans = [f"c{k}" for k in range(12)]
    ids = [str(uuid6(clock_seq=i)) for i in range(101)]
    for saver in (ours, ref):
        cfg = {"configurable": {"thread_id": "wide", "checkpoint_ns": ""}}
        for i in range(101):
            versions = {c: str(i + 1) for c in chans}
            cp = generate_checkpoint(checkpoint_id=ids[i],
                                     channel_values={c: f"{c}@{i}" for c in chans}, channel_versions=versions)
            cfg = saver.put(cfg, cp, generate_metadata(step=i), versions)
            saver.put_writes(cfg, [(c, i) for c in chans[:11]], f"task-{i}", "")
    q = {"configurable": {"thread_id": "wide", "checkpoint_ns": ""}}
    got, exp = _view(ours.list(q)), _view(ref.list(q))
    assert len(got) == 101 and got == exp
    assert all(len(v[2]) == 12 and len(v[4]) == 11 for v in got)


def _list_replies(saver, config, **kw):
    """Run list()'s plan by hand: the tuples, and each raw script reply."""
    from redis_saver.core.plans import Call, Out

    plan, replies, out, reply = saver._plans._plan_list(config, **kw), [], [], None
    try:
        while True:
            step = plan.send(reply)
            if isinstance(step, Out):
                out += step.items
                reply = None
                continue
            assert isinstance(step, Call)
            reply = saver._driver.call(step)
            replies.append(reply)
    except StopIteration:
        return out, replies


@pytest.mark.parametrize("compress", [True, False], ids=["compressed", "raw"])
def test_a_blob_shared_by_a_pages_checkpoints_comes_once_and_each_checkpoint_loads_its_own(
    sync_client, prefix, compress
):
    """Consecutive checkpoints share the blobs of the channels that did not change: a page's
    reply carries such a blob once; every tuple still gets its own value objects."""
    saver = RedisSaver(sync_client, prefix=prefix, compress=compress)
    big = [f"line {i} " + "x" * 40 for i in range(400)]  # ~20 KB serialized, one version for all
    ids = [str(uuid6(clock_seq=i)) for i in range(6)]
    parent = None
    for i, cid in enumerate(ids):
        cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": "", **({"checkpoint_id": parent} if parent else {})}}
        cp = generate_checkpoint(checkpoint_id=cid, channel_values={"big": big, "n": i},
                                 channel_versions={"big": "1", "n": str(i + 1)})
        saver.put(cfg, cp, generate_metadata(step=i), {"n": str(i + 1), **({"big": "1"} if i == 0 else {})})
        parent = cid
    got, replies = _list_replies(saver, {"configurable": {"thread_id": "t"}}, limit=5)
    assert [t.checkpoint["id"] for t in got] == list(reversed(ids))[:5]
    assert len(replies) == 1
    blobs = replies[0][2]
    assert len(blobs) == 6  # "big" once, and "n" of each of the 5 checkpoints
    items = replies[0][3:]
    assert len({i[3][i[3].index(b"big") + 1] for i in items}) == 1  # every item names the same blob
    for t in got:
        assert t.checkpoint["channel_values"]["big"] == big
    assert len({id(t.checkpoint["channel_values"]["big"]) for t in got}) == 5  # not shared
    got[0].checkpoint["channel_values"]["big"].append("changed by one caller")
    assert got[1].checkpoint["channel_values"]["big"] == big
    assert [t.checkpoint["channel_values"]["n"] for t in got] == [5, 4, 3, 2, 1]
