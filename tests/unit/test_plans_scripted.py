"""The plans' decisions, driven by scripted script replies (no socket): what put does for each
of put.lua's replies (stored; a paged prune; streams changed under it, sent again with new ones;
the parent gone), put_writes' lean call and its fallbacks, prune and delete_for_runs paging,
a damaged thread read again by the forgetting variant, list pages, the delta-history walk, and
a stored checkpoint read back from exactly the bytes put sent."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from langgraph.checkpoint.base import empty_checkpoint, get_checkpoint_metadata
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from redis_saver import RedisSaver
from redis_saver.core import codec
from redis_saver.core.plans import Call, IndexSlots, Out, Plans, budgets
from redis_saver.core.replies import (
    DeleteRuns,
    DeleteRunsFinish,
    Export,
    Import,
    Prune,
    PruneDetach,
    Put,
    PutWrites,
    Rewrite,
)
from redis_saver.core.ttl import TTLConfig
from redis_saver.errors import CopyConflictError, DamagedThreadError, ParentCycleError, ThreadEvictedError
from redis_saver.keys import FORMAT_VERSION, KeySchema, enc

from .scripted import asserting, converse

SCHEMA = KeySchema("t")
KEYS = SCHEMA.thread_keys("th")  # put.lua's KEYS, in keys.py's order
HEAD = [FORMAT_VERSION, "th", 0, "0"]  # the header of every per-thread call: format, thread, ttl ms, refresh


def plans(**kw) -> Plans:
    return Plans(JsonPlusSerializer(), SCHEMA, **kw)


def cfg(cid: str | None = None, ns: str = "") -> dict:
    conf = {"thread_id": "th", "checkpoint_ns": ns}
    if cid is not None:
        conf["checkpoint_id"] = cid
    return {"configurable": conf}


def checkpoint(values: dict | None = None) -> dict:
    cp = empty_checkpoint()
    cp["id"] = str(uuid.uuid4())
    cp["channel_values"] = dict(values or {})
    cp["channel_versions"] = {ch: "1" for ch in cp["channel_values"]}
    return cp


def a_put(script: str = "put", wait: tuple[int, int] | None = None):
    """An expectation: a put call of thread "th", its header first."""
    return asserting(
        lambda op: isinstance(op, Call)
        and (op.script, list(op.keys), list(op.args[:4]), op.wait) == (script, KEYS, HEAD, wait),
        f"a {script} call of thread 'th'",
    )


def prune_step(name: str, *args) -> Call:
    return Call("prune", KEYS, [*HEAD, "keep_latest", name, budgets.WORK_BUDGET, *args])


# ---- put and its replies ----------------------------------------------------------------------
def test_put_stored_is_one_call_answering_the_new_config():
    p = plans(compress=False)
    cp = checkpoint({"x": [1, 2]})
    got = converse(p._plan_put(cfg(), cp, {"step": 1}, {"x": "1"}), [(a_put(), Put.STORED)])
    assert got == cfg(cp["id"])


def test_put_sends_the_call_header_options_and_wait():
    p = plans(compress=False, history="latest", fencing=True, wait=(2, 500))
    cp = checkpoint()
    sent: list[Call] = []
    converse(p._plan_put(cfg("parent"), cp, {}, {}), [(sent.append, Put.STORED)])
    (call,) = sent
    assert (call.script, list(call.keys), call.wait) == ("put", KEYS, (2, 500))
    assert call.args[:7] == [*HEAD, "", cp["id"], "parent"]
    assert call.args[8:10] == ["latest", "1"]  # history, fencing


def test_put_answered_2_prunes_the_thread_in_bounded_pages():
    p = plans(compress=False, history="latest")
    ns_e, field = enc(""), enc("") + enc("x") + b"1"
    turns = [
        (a_put(), Put.PRUNE_IN_PAGES),
        (prune_step("ns", b""), [ns_e]),  # fewer than a page of namespaces: the last page
        (prune_step("walk", ns_e, b""), [b"c3", [b"c3", b"c2"], b"", [], b"c1"]),
        (prune_step("drop", ns_e, b"c3", b"", "0", b"c2", b"c3"), [5, b"", [field]]),
        (prune_step("detach", ns_e, b"c2"), PruneDetach.DONE),  # c1 was not kept: the oldest kept one loses it
        (prune_step("orphans", ns_e, b"c3", b""), b""),
        (Call("gc", KEYS, [*HEAD, "refs", ns_e, b"", budgets.WORK_BUDGET]), [b"", []]),
        (Call("gc", KEYS, [*HEAD, "hdel", field]), 1),  # no kept checkpoint names it
    ]
    cp = checkpoint()
    assert converse(p._plan_put(cfg(), cp, {}, {}), turns) == cfg(cp["id"])


def _chat(n: int) -> list[str]:
    return [f"message number {i}: " + "words " * 8 for i in range(n)]  # a list: stored as a stream


def _stream_mode(call: Call) -> bytes:
    """The mode of a put's one stream change (its last 5 arguments: directory, mode, base, length, frame)."""
    assert call.args[-6] == 1, "one stream change"
    return call.args[-4]


def test_put_answered_3_sends_the_values_again_in_new_streams():
    p = plans()  # compressed: a list channel's versions share a stream
    first = checkpoint({"m": _chat(20)})
    new_stream = asserting(lambda op: _stream_mode(op) == b"n", "a new stream")
    converse(p._plan_put(cfg(), first, {}, {"m": "1"}), [(new_stream, Put.STORED)])
    sent: list[Call] = []
    second = checkpoint({"m": _chat(30)})
    second["channel_versions"] = {"m": "2"}
    turns = [(sent.append, Put.STREAMS_MOVED), (sent.append, Put.STORED)]  # another writer changed the stream
    assert converse(p._plan_put(cfg(first["id"]), second, {}, {"m": "2"}), turns) == cfg(second["id"])
    assert [_stream_mode(c) for c in sent] == [b"a", b"n"]  # an append to the known stream, then a new one
    assert sent[0].args[-5] != sent[1].args[-5]  # another stream id
    assert sent[0].args[:11] == sent[1].args[:11]  # the same checkpoint


def test_put_answered_4_raises_thread_evicted_and_forgets_its_streams():
    p = plans()
    converse(p._plan_put(cfg(), checkpoint({"m": _chat(20)}), {}, {"m": "1"}), [(a_put(), Put.STORED)])
    assert len(p.streams) == 1
    with pytest.raises(ThreadEvictedError, match="no longer holds") as info:
        converse(p._plan_put(cfg("gone"), checkpoint({"m": _chat(21)}), {}, {"m": "2"}), [(a_put(), Put.THREAD_GONE)])
    assert info.value.thread_id == "th"
    assert len(p.streams) == 0


def test_put_refuses_bad_input_before_any_call():
    p = plans()
    with pytest.raises(ValueError, match="own parent"):
        converse(p._plan_put(cfg("same"), {**checkpoint(), "id": "same"}, {}, {}), [])
    with pytest.raises(ValueError, match="thread_id"):
        converse(p._plan_put({"configurable": {}}, checkpoint(), {}, {}), [])


# ---- put_writes ------------------------------------------------------------------------------
def _writes_turns(lean_reply, full_reply=None):
    lean_keys = list(SCHEMA.lean_keys("th"))
    lean = asserting(lambda op: op.script == "put_writes+lean" and list(op.keys) == lean_keys, "lean")
    turns = [(lean, lean_reply)]
    if full_reply is not None:
        turns.append((asserting(lambda op: op.script == "put_writes" and list(op.keys) == KEYS, "full"), full_reply))
    return turns


def test_put_writes_is_one_lean_call_in_the_steady_state():
    assert converse(plans()._plan_put_writes(cfg("c1"), [("x", 1)], "task"), _writes_turns(1)) is None


def test_put_writes_answered_nil_by_the_lean_call_sends_the_full_one():
    assert converse(plans()._plan_put_writes(cfg("c1"), [("x", 1)], "task"), _writes_turns(None, 1)) is None


def test_put_writes_to_a_forgotten_thread_raises_thread_evicted():
    with pytest.raises(ThreadEvictedError, match="forgotten"):
        converse(plans()._plan_put_writes(cfg("c1"), [("x", 1)], "task"), _writes_turns(None, PutWrites.FORGOTTEN))


def test_put_writes_with_a_ttl_goes_straight_to_the_full_call():
    p = plans(ttl=TTLConfig(default_ttl=1))
    turns = [(asserting(lambda op: op.script == "put_writes" and op.args[2] == 60_000, "full, ttl 60 s"), 1)]
    assert converse(p._plan_put_writes(cfg("c1"), [("x", 1)], "task"), turns) is None


def test_put_writes_of_nothing_sends_nothing():
    assert converse(plans()._plan_put_writes(cfg("c1"), [], "task"), []) is None


# ---- prune, delete_for_runs ---------------------------------------------------------------------
def test_prune_fans_out_and_pages_only_the_threads_that_need_it():
    other = SCHEMA.thread_keys("big")
    big_head = [FORMAT_VERSION, "big", 0, "0"]
    fanout = [
        Call("prune", KEYS, [*HEAD, "keep_latest", "all", budgets.WORK_BUDGET]),
        Call("prune", other, [*big_head, "keep_latest", "all", budgets.WORK_BUDGET]),
    ]
    step = [*big_head, "keep_latest"]
    turns = [
        (fanout, [[3], [Prune.PAGED]]),
        (Call("prune", other, [*step, "ns", budgets.WORK_BUDGET, b""]), []),  # no namespace left
    ]
    assert converse(plans()._plan_prune(["th", "big"]), turns) == 3


def test_prune_walk_meeting_an_id_twice_is_a_parent_cycle():
    ns_e = enc("")
    turns = [
        (prune_step("ns", b""), [ns_e]),
        (prune_step("walk", ns_e, b""), [b"c3", [b"c3", b"c2"], b"c1", [], b"c0"]),
        (prune_step("walk", ns_e, b"c1"), [b"c3", [b"c1", b"c2"], b"", [], b"c0"]),
    ]
    with pytest.raises(ParentCycleError):
        converse(plans()._plan_prune_paged("th"), turns)


def test_delete_for_runs_finds_the_threads_then_pages_a_large_one():
    field = enc("") + enc("x") + b"1"
    runs_head = [*HEAD, "drop", budgets.WORK_BUDGET, "r1"]
    turns = [
        (IndexSlots(), [5]),
        ([Call("ix_query", SCHEMA.index_keys(5), ["runs", "r1"])], [[b"th"]]),
        ([Call("delete_runs", KEYS, [*HEAD, "all", budgets.WORK_BUDGET, "r1"])], [[DeleteRuns.PAGED]]),
        (Call("delete_runs", KEYS, runs_head), [2, DeleteRuns.MORE, []]),
        (Call("delete_runs", KEYS, runs_head), [1, b"0", [field]]),
        (Call("delete_runs", KEYS, [*HEAD, "finish", budgets.WORK_BUDGET]), DeleteRunsFinish.KEPT),
        (Call("gc", KEYS, [*HEAD, "refs", enc(""), b"", budgets.WORK_BUDGET]), [b"", [field]]),  # still named
    ]
    assert converse(plans()._plan_delete_for_runs(["r1"]), turns) == 3


def test_delete_for_runs_on_no_live_thread_stops_after_the_index():
    queries = [Call("ix_query", SCHEMA.index_keys(s), ["runs", "r"]) for s in (1, 2)]
    turns = [(IndexSlots(), [1, 2]), (queries, [[], []])]
    assert converse(plans()._plan_delete_for_runs(["r"]), turns) == 0


def test_copy_thread_changed_during_every_attempt_raises_and_aborts_nothing_it_did_not_start(monkeypatch):
    monkeypatch.setattr(budgets, "COPY_ATTEMPTS", 2)
    src = SCHEMA.thread_keys("a")
    is_ = lambda script, keys, arg: asserting(  # noqa: E731
        lambda op: (op.script, list(op.keys), op.args[4]) == (script, keys, arg), f"{script} {arg}"
    )
    turns = [(is_("export", src, "all"), [Export.PAGED])]
    for _ in range(2):
        turns += [
            (is_("import", SCHEMA.thread_keys("b"), "import"), Import.WRITTEN),  # the target checked: empty
            (is_("import", src, "guard"), b"7"),
            (is_("export", src, "page"), [Export.CHANGED]),  # the guard moved: a destructive change
        ]
    with pytest.raises(CopyConflictError, match="each of 2 attempts"):
        converse(plans()._plan_copy_thread("a", "b"), turns)


# ---- reads -----------------------------------------------------------------------------------
def test_a_damaged_thread_is_read_again_by_the_forgetting_variant():
    turns = [
        (Call("get_tuple", KEYS, [*HEAD, "", "", 0]), DamagedThreadError("lost a key")),
        (Call("get_tuple+forget", KEYS, [FORMAT_VERSION, "th", 0, "f", "", "", 0]), None),
    ]
    assert converse(plans()._plan_get_tuple(cfg()), turns) is None


def test_refresh_on_read_uses_the_writable_variant():
    p = plans(ttl=TTLConfig(default_ttl=2, refresh_on_read=True))
    turns = [(Call("get_tuple+rw", KEYS, [FORMAT_VERSION, "th", 120_000, "1", "", "c1", 0]), None)]
    assert converse(p._plan_get_tuple(cfg("c1")), turns) is None


def _stored(p: Plans, values: dict, writes: list) -> tuple[dict, list]:
    """A checkpoint put by ``p`` and its writes; the put and put_writes calls' arguments."""
    cp = checkpoint(values)
    sent: list[Call] = []
    plan = p._plan_put(cfg(), cp, {"step": 4, "source": "loop"}, dict.fromkeys(values, "1"))
    conf = converse(plan, [(sent.append, Put.STORED)])
    if writes:
        converse(p._plan_put_writes(conf, writes, "task-1"), [(sent.append, len(writes))])  # the lean call stored them
    return cp, sent


def test_get_tuple_reads_back_exactly_what_put_sent():
    p = plans(compress=False)
    cp, (put, writes) = _stored(p, {"x": [1, "two"], "y": {"k": None}}, [("x", 3), ("__interrupt__", "why")])
    record, n = put.args[7], put.args[11]
    blobs = [put.args[13 + 2 * i] for i in range(n)]
    assert [put.args[12 + 2 * i] for i in range(n)] == [b"x\x001", b"y\x001"]
    # get_tuple.lua's flat reply: id, record, 2n + n (channel, blob position), m + m writes, no stream, blobs
    wrecs = writes.args[-3::2]
    reply = [cp["id"].encode(), record, 4, b"x", 1, b"y", 2, len(wrecs), *wrecs, 0, *blobs]
    got = converse(p._plan_get_tuple(cfg()), [(Call("get_tuple", KEYS, [*HEAD, "", "", 0]), reply)])
    assert got.config == cfg(cp["id"]) and got.parent_config is None
    assert got.checkpoint == cp
    assert got.metadata == get_checkpoint_metadata(cfg(), {"step": 4, "source": "loop"})
    assert got.pending_writes == [("task-1", "x", 3), ("task-1", "__interrupt__", "why")]


def test_list_pages_follow_the_cursor_up_to_the_limit(monkeypatch):
    monkeypatch.setattr(budgets, "PAGE_SIZE", 2)
    p = plans(compress=False)
    cp, (put,) = _stored(p, {}, [])
    item = [enc(""), enc(cp["id"]), put.args[7], [], []]

    def page(upper, size):
        return Call("list", KEYS, [*HEAD, "id", upper, b"-", size, budgets.SCAN_BUDGET, b"0"])  # b"0": no filter

    def out(n):
        return asserting(lambda op: isinstance(op, Out) and [t.checkpoint for t in op.items] == [cp] * n, f"{n} items")

    turns = [
        (page(b"+", 2), [b"(c9", [], [], item, item]),
        (out(2), None),
        (page(b"(c9", 2), [b"(c7"]),  # a page that found nothing within its scan budget: go on
        (page(b"(c7", 2), [b"(c5", [], [], item]),
        (out(1), None),
        (page(b"(c5", 1), [b"(c3", [], [], item]),  # one item left to the limit: a page of one
        (out(1), None),  # the limit reached: no further page
    ]
    assert converse(p._plan_list({"configurable": {"thread_id": "th"}}, limit=4), turns) is None


def test_delta_history_of_a_thread_forgotten_mid_walk_is_the_absent_threads():
    ty, data = JsonPlusSerializer().dumps_typed(5)
    write = codec.write_record(b"task", b"x", ty.encode(), data, b"", b"0")
    call = asserting(lambda op: op.script == "delta_history" and op.args[6] == "0", "the first call")
    again = asserting(lambda op: op.script == "delta_history" and op.args[5:7] == ["c5", "1"], "the continuation")
    # the first page: one ancestor holding a write of x; the walk goes on at c5, which is gone
    turns = [(call, [[[write]], [], b"c5", [b"c9"], []]), (again, [[], [], b"", []])]
    assert converse(plans()._plan_delta_history(cfg("c9"), ["x"]), turns) == {"x": {"writes": []}}


def test_delta_history_collects_the_writes_oldest_first_up_to_the_seed():
    serde = JsonPlusSerializer()

    def write(value):
        ty, data = serde.dumps_typed(value)
        return codec.write_record(b"task", b"x", ty.encode(), data, b"", b"0")

    ty, data = serde.dumps_typed([1])
    seed = codec.blob_record(ty.encode(), data)
    first = [[[write(4)], [write(3)]], [], b"c5", [b"c9", b"c7"], []]  # two ancestors, newest first
    last = [[[write(2)]], [b"x", seed], b"", [b"c5"]]  # the seed found: the walk ends
    turns = [
        (asserting(lambda op: op.args[5:7] == ["c9", "0"], "from c9"), first),
        (asserting(lambda op: op.args[5:7] == ["c5", "1"], "from c5"), last),
    ]
    got = converse(plans()._plan_delta_history(cfg("c9"), ["x"]), turns)
    assert got == {"x": {"seed": [1], "writes": [("task", "x", 2), ("task", "x", 3), ("task", "x", 4)]}}


def test_stored_records_carry_the_channel_versions_the_reads_restore():
    p = plans()  # compressed: the checkpoint's versions travel in the record, not the serialized checkpoint
    cp, (put,) = _stored(p, {"x": 1}, [])
    head = codec.checkpoint_head(put.args[7])
    assert codec.str_pairs(head[5]) == {"x": "1"}


# ---- the frozen context ------------------------------------------------------------------------
def test_a_savers_plans_are_a_frozen_context_that_follows_a_copy_with_another_serde():
    class NoClient:  # a saver's plans never touch the client; its driver does
        def get_connection_kwargs(self):
            return {}

    serde = JsonPlusSerializer(allowed_msgpack_modules=None)  # strict: an allowlist makes another serde
    saver = RedisSaver(NoClient(), prefix="t", serde=serde, history="latest", wait_for_replicas=1, telemetry=False)
    ctx = saver._plans
    assert (ctx.history, ctx.wait, ctx.keys.prefix, ctx.serde) == ("latest", (1, 1000), "t", saver.serde)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.history = "full"  # type: ignore[misc]
    clone = saver.with_allowlist([("my_app.state", "Thing")])
    assert clone is not saver and clone.serde is not saver.serde
    assert clone._plans.serde is clone.serde and clone._plans.streams is ctx.streams
    assert saver._plans is ctx  # the original keeps its own
    assert (saver.history, saver.keys) == ("latest", ctx.keys)  # read from the context, once
    with pytest.raises(AttributeError):
        saver.history = "full"  # type: ignore[misc]  # a change the plans would not see: refused


def test_copy_thread_of_a_small_thread_is_one_export_and_one_import():
    src, dst = SCHEMA.thread_keys("a"), SCHEMA.thread_keys("b")
    sent: list[Call] = []
    turns = [
        (Call("export", src, [FORMAT_VERSION, "a", 0, "0", "all", budgets.WORK_BUDGET,
                              budgets.SNAPSHOT * budgets.COPY_FIELDS, 2 * budgets.COPY_BYTES]),
         [Export.ALL, [], [], []]),
        (sent.append, Import.WRITTEN),
    ]
    assert converse(plans()._plan_copy_thread("a", "b"), turns) is None
    (imported,) = sent
    assert (imported.script, list(imported.keys)) == ("import", dst)
    token = imported.args[5]
    assert imported.args == [FORMAT_VERSION, "b", 0, "0", "import", token, "1", "1", 0, 0, 0, 0]  # first and last


def test_copy_thread_into_a_target_another_writer_took_raises():
    src = SCHEMA.thread_keys("a")
    export = asserting(lambda op: (op.script, list(op.keys), op.args[4]) == ("export", src, "all"), "export")
    an_import = asserting(lambda op: op.script == "import", "import")
    turns = [(export, [Export.ALL, [], [], []]), (an_import, Import.NOT_WRITTEN)]
    with pytest.raises(CopyConflictError, match="into 'b'"):
        converse(plans()._plan_copy_thread("a", "b"), turns)


def test_list_of_all_threads_reads_again_forgetting_damaged_ones_and_merges_newest_first():
    p = plans(compress=False)
    cp, (put,) = _stored(p, {}, [])

    def item(cid):
        return [enc(""), enc(cid), put.args[7], [], []]

    keys_b = SCHEMA.thread_keys("b")
    page = [FORMAT_VERSION, 0, "0", "id", b"+", b"-", 2, budgets.SCAN_BUDGET, b"0"]

    def call(script, tid, keys, refresh="0"):
        return Call(script, keys, [page[0], tid, 0, refresh, *page[3:]])

    fanout = [call("list", "th", KEYS), call("list", "b", keys_b)]
    forgetting = [call("list+forget", "th", KEYS, "f"), call("list+forget", "b", keys_b, "f")]
    def ids(op):
        return [t.config["configurable"]["checkpoint_id"] for t in op.items]

    newest = asserting(lambda op: isinstance(op, Out) and ids(op) == ["c9", "c8"], "the two newest, across threads")
    turns = [
        (IndexSlots(), [7]),
        ([Call("ix_query", SCHEMA.index_keys(7), ["threads"])], [[b"th", b"b"]]),
        (fanout, DamagedThreadError("thread b lost a key")),
        (forgetting, [[b"", [], [], item("c1"), item("c9")], [b"", [], [], item("c8")]]),
        (newest, None),
    ]
    assert converse(p._plan_list(None, limit=2), turns) is None


def test_rewrite_values_sends_a_channel_again_in_new_streams_when_its_stream_moved():
    serde = JsonPlusSerializer()
    ns_e, ch_e = enc(""), enc("m")
    raw = [codec.blob_record(*(lambda t, d: (t.encode(), d))(*serde.dumps_typed(_chat(n)))) for n in (20, 30)]
    fields = [ns_e + ch_e + b"1", ns_e + ch_e + b"2"]
    scan = Call("rewrite", KEYS, [*HEAD, "scan", 0, budgets.EXPORT_COUNT, 256])
    get = Call("rewrite", KEYS, [*HEAD, "get", *fields])
    sets: list[Call] = []
    turns = [
        (scan, [b"0", [fields[0], len(raw[0]), fields[1], len(raw[1])]]),
        (get, raw),
        (sets.append, Rewrite.STREAMS_MOVED),  # a stream it appends to changed meanwhile
        (get, raw),
        (sets.append, 2),
    ]
    stats = converse(plans()._plan_rewrite_values("th"), turns)
    assert (stats.thread_id, stats.values) == ("th", 2)
    for s in sets:  # both versions re-encoded in one call
        assert s.args[4:7] == ["set", ns_e, 2] and [s.args[7], s.args[10]] == fields
    # first a new stream and an append to it; again, streams that depend on no earlier call: a
    # new one per version, none of them the first attempt's
    assert [sets[0].args[14], sets[0].args[19]] == [b"n", b"a"] and sets[0].args[13] == sets[0].args[18]
    assert [sets[1].args[14], sets[1].args[19]] == [b"n", b"n"]
    assert sets[0].args[13] not in (sets[1].args[13], sets[1].args[18])


def test_get_tuple_flat_reply_splits_into_its_parts():
    from redis_saver.core.plans.read import _unflatten_tuple

    flat = [b"id", b"rec", 4, b"a", 1, b"m", 2, 1, b"w1", 2, b"s1", b"dir1", 0, b"s2", b"dir2", 2, b"f1", b"f2",
            b"blob1", b"blob2"]
    assert _unflatten_tuple(flat) == (
        b"id", b"rec", [b"a", 1, b"m", 2], [b"w1"], [[b"s1", b"dir1"], [b"s2", b"dir2", b"f1", b"f2"]],
        [b"blob1", b"blob2"])
    assert _unflatten_tuple([b"id", b"rec", 0, 0, 0]) == (b"id", b"rec", [], [], [], [])
