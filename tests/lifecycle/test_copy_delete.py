"""copy_thread and delete_for_runs on real multi-turn graphs (DeltaChannel + subgraph), both savers.

(The randomized reference-model differential of these operations lives in tests/contract.)
"""

from __future__ import annotations

import uuid
from collections import defaultdict

from langgraph.checkpoint.memory import InMemorySaver

from redis_saver.keys import dec_first, enc
from tests.lifecycle._util import (
    alist,
    blob_fields,
    call,
    cfg,
    dump_prefix,
    get_state,
    invoke,
    referenced_blob_fields,
    state_history,
    thread_key_prefix,
    view,
)
from tests.lifecycle.graphs import build, turn_input


def _tuple_view(t) -> tuple:
    return (
        t.config["configurable"]["checkpoint_ns"],
        t.config["configurable"]["checkpoint_id"],
        t.checkpoint,
        t.metadata,
        t.pending_writes,
        t.parent_config,
    )


async def _history_by_ns(graph, saver, tuples, thread_id) -> dict:
    """Root history views plus, per subgraph namespace, its state history views (namespaces keyed
    by the root step that created them, since task ids differ between savers)."""
    out = {"": [view(s) for s in await state_history(graph, saver, cfg(thread_id))]}
    subs = defaultdict(list)
    for t in tuples:
        ns = t.config["configurable"]["checkpoint_ns"]
        if ns:
            subs[ns].append((t.metadata["step"], t.checkpoint["channel_values"].get("messages")))
    # ordered by steps, then message texts (messages themselves do not order: ties must not reach them)
    out["subs"] = sorted(
        (sorted(v, key=lambda x: x[0]) for v in subs.values()),
        key=lambda v: [(step, [getattr(m, "content", m) for m in msgs or []]) for step, msgs in v],
    )
    return out


async def test_copy_thread_then_diverge(saver, sync_client, prefix, work_budget):
    src, dst = f"src-{uuid.uuid4().hex[:6]}", f"dst-{uuid.uuid4().hex[:6]}"
    g = build(saver)
    mem_a, mem_b = InMemorySaver(), InMemorySaver()
    ga, gb = build(mem_a), build(mem_b)
    for t in range(5):
        await invoke(g, saver, turn_input(t), cfg(src))
        ga.invoke(turn_input(t), cfg("x"))
        gb.invoke(turn_input(t), cfg("x"))

    src_tuples = await alist(saver, cfg(src))
    meta = thread_key_prefix(prefix, src) + b"meta"
    src_meta = sync_client.hgetall(meta)
    src_dump = dump_prefix(sync_client, prefix, only=thread_key_prefix(prefix, src))
    await call(saver, "copy_thread", src, dst)
    # the source is unchanged, byte for byte, but a paged copy's guard in its meta (field "g")
    after = dump_prefix(sync_client, prefix, only=thread_key_prefix(prefix, src))
    assert {k: v for k, v in after.items() if k != meta} == {k: v for k, v in src_dump.items() if k != meta}
    got_meta = sync_client.hgetall(meta)
    assert b"g" in got_meta if work_budget == "tiny" else got_meta == src_meta
    assert {k: v for k, v in got_meta.items() if k != b"g"} == src_meta
    assert [_tuple_view(t) for t in await alist(saver, cfg(src))] == [_tuple_view(t) for t in src_tuples]
    # the target has every checkpoint (all namespaces), with the same data
    dst_tuples = await alist(saver, cfg(dst))

    def _strip(t):
        v = list(_tuple_view(t))
        v[5] = v[5] and {k: v2 for k, v2 in v[5]["configurable"].items() if k != "thread_id"}
        return v

    assert [_strip(t) for t in dst_tuples] == [_strip(t) for t in src_tuples]
    assert all(t.config["configurable"]["thread_id"] == dst for t in dst_tuples)
    assert view(await get_state(g, saver, cfg(dst))) == view(await get_state(g, saver, cfg(src)))

    # diverge: different inputs on each side
    for t in range(5, 8):
        await invoke(g, saver, turn_input(t, "A"), cfg(src))
        ga.invoke(turn_input(t, "A"), cfg("x"))
        await invoke(g, saver, turn_input(t, "B"), cfg(dst))
        gb.invoke(turn_input(t, "B"), cfg("x"))

    got_a = await _history_by_ns(g, saver, await alist(saver, cfg(src)), src)
    got_b = await _history_by_ns(g, saver, await alist(saver, cfg(dst)), dst)
    ref_a = await _history_by_ns(ga, mem_a, list(mem_a.list(cfg("x"))), "x")
    ref_b = await _history_by_ns(gb, mem_b, list(mem_b.list(cfg("x"))), "x")
    assert got_a == ref_a
    assert got_b == ref_b
    assert got_a != got_b
    # the shared prefix is still shared, the new parts are disjoint
    ids_a = {(t.config["configurable"]["checkpoint_ns"], t.checkpoint["id"]) for t in await alist(saver, cfg(src))}
    ids_b = {(t.config["configurable"]["checkpoint_ns"], t.checkpoint["id"]) for t in await alist(saver, cfg(dst))}
    shared = {(t.config["configurable"]["checkpoint_ns"], t.checkpoint["id"]) for t in src_tuples}
    assert ids_a & ids_b == shared


def _fields_by_cid(client, key: bytes, skip_components: int = 0) -> set[tuple[bytes, bytes]]:
    """(ns, cid) of every field/member of a per-thread hash or zset keyed e(ns)e(cid)..."""
    out = set()
    kind = client.type(key)
    members = client.hkeys(key) if kind == b"hash" else client.zrange(key, 0, -1) if kind == b"zset" else []
    for m in members:
        if m == b"" and kind == b"hash":
            continue  # wr's lean mark
        pos = 0
        for _ in range(skip_components):
            _, pos = dec_first(m, pos)
        ns, pos = dec_first(m, pos)
        cid, pos = dec_first(m, pos)
        out.add((ns, cid))
    return out


async def test_delete_for_runs_removes_exactly_one_run(saver, sync_client, prefix):
    tid = f"runs-{uuid.uuid4().hex[:6]}"
    other = f"other-{uuid.uuid4().hex[:6]}"
    g = build(saver)
    runs = [str(uuid.uuid4()) for _ in range(4)]
    for i, run in enumerate(runs):
        for t in (2 * i, 2 * i + 1):  # two invokes per run id
            await invoke(g, saver, turn_input(t), {**cfg(tid), "metadata": {"run_id": run}})
    # another thread shares one of the run ids: it must lose that run too, and only that
    await invoke(g, saver, turn_input(0), {**cfg(other), "metadata": {"run_id": runs[1]}})
    await invoke(g, saver, turn_input(1), {**cfg(other), "metadata": {"run_id": runs[2]}})

    before = await alist(saver, cfg(tid))
    by_run = defaultdict(list)
    for t in before:
        by_run[t.metadata.get("run_id")].append(t)
    assert set(by_run) == set(runs)
    assert all(any(t.config["configurable"]["checkpoint_ns"] for t in v) for v in by_run.values())
    victim = runs[1]
    doomed = {(t.config["configurable"]["checkpoint_ns"], t.checkpoint["id"]) for t in by_run[victim]}
    assert any(t.pending_writes for t in by_run[victim])

    tp = thread_key_prefix(prefix, tid)
    assert _fields_by_cid(sync_client, tp + b"wr") & {(n.encode(), c.encode()) for n, c in doomed}

    # unknown run ids change nothing
    snap = dump_prefix(sync_client, prefix)
    await call(saver, "delete_for_runs", [str(uuid.uuid4())])
    await call(saver, "delete_for_runs", [])
    assert dump_prefix(sync_client, prefix) == snap

    await call(saver, "delete_for_runs", [victim])

    after = await alist(saver, cfg(tid))
    kept = [t for t in before if (t.config["configurable"]["checkpoint_ns"], t.checkpoint["id"]) not in doomed]
    # the other runs' checkpoints are all there and read back unchanged (writes included)
    assert [_tuple_view(t)[:5] for t in after] == [_tuple_view(t)[:5] for t in kept]
    for t in kept:
        got = await call(saver, "get_tuple", t.config)
        assert got is not None and _tuple_view(got)[:5] == _tuple_view(t)[:5]
    for t in by_run[victim]:
        assert await call(saver, "get_tuple", t.config) is None
    # nothing of the victim's checkpoints is left in storage: records, indexes, writes
    doomed_b = {(n.encode(), c.encode()) for n, c in doomed}
    for suffix, skip in ((b"cp", 0), (b"cp_ns", 0), (b"wr", 0), (b"wr_ord", 0), (b"runs", 1)):
        assert not (_fields_by_cid(sync_client, tp + suffix, skip) & doomed_b), suffix
    assert not sync_client.zrangebylex(tp + b"runs", b"[" + enc(victim), b"[" + enc(victim) + b"\xff")
    # every blob left is referenced by a remaining checkpoint (a reference without a field is a
    # channel without a value: no blob is stored for those; reads are compared above)
    blobs = blob_fields(sync_client, tp + b"blob")  # value records (and the streams checked)
    assert blobs and blobs <= referenced_blob_fields(sync_client, tp)

    # the other thread lost exactly its checkpoints of that run
    other_left = await alist(saver, cfg(other))
    assert other_left and {t.metadata["run_id"] for t in other_left} == {runs[2]}


async def test_copy_thread_degenerate(saver, sync_client, prefix):
    """Copying an unknown thread writes nothing; copying a thread onto itself changes nothing."""
    g = build(saver)
    await invoke(g, saver, turn_input(0), cfg("real"))
    snap = dump_prefix(sync_client, prefix)
    await call(saver, "copy_thread", "ghost", "target")
    await call(saver, "copy_thread", "real", "real")
    assert dump_prefix(sync_client, prefix) == snap
    assert await alist(saver, cfg("target")) == []


async def test_copy_thread_with_pending_subgraph_interrupt(saver):
    """A copy taken while a subgraph interrupt is pending resumes on its own: each side answers
    differently and matches an InMemorySaver replay of the same inputs."""
    from langgraph.types import Command

    src, dst = f"isrc-{uuid.uuid4().hex[:6]}", f"idst-{uuid.uuid4().hex[:6]}"
    g = build(saver, interrupt_in="sub")
    mem_a, mem_b = InMemorySaver(), InMemorySaver()
    ga, gb = build(mem_a, interrupt_in="sub"), build(mem_b, interrupt_in="sub")
    for t in range(3):
        for gr, sv, conf in ((g, saver, cfg(src)), (ga, None, cfg("x")), (gb, None, cfg("x"))):
            if sv is None:
                gr.invoke(turn_input(t), conf)
            else:
                await invoke(gr, sv, turn_input(t), conf)
        if t < 2:
            await invoke(g, saver, Command(resume=f"r{t}"), cfg(src))
            ga.invoke(Command(resume=f"r{t}"), cfg("x"))
            gb.invoke(Command(resume=f"r{t}"), cfg("x"))
    pending = await get_state(g, saver, cfg(src))
    assert pending.interrupts

    await call(saver, "copy_thread", src, dst)
    assert view(await get_state(g, saver, cfg(dst))) == view(pending)

    await invoke(g, saver, Command(resume="left"), cfg(src))
    ga.invoke(Command(resume="left"), cfg("x"))
    await invoke(g, saver, Command(resume="right"), cfg(dst))
    gb.invoke(Command(resume="right"), cfg("x"))
    got_a, got_b = await get_state(g, saver, cfg(src)), await get_state(g, saver, cfg(dst))
    assert view(got_a) == view(ga.get_state(cfg("x")))
    assert view(got_b) == view(gb.get_state(cfg("x")))
    assert got_a.values != got_b.values
