"""Bad input: a clear exception and NOTHING written.

What the reference savers do, and the choice made here:
* missing ``thread_id`` / ``configurable`` / ``checkpoint_id`` (put_writes):
  InMemorySaver and PostgresSaver raise a bare ``KeyError`` from ``config[...]``;
  redis_saver raises ``ValueError`` with a message naming the key (errors.py).
* wrong types: InMemorySaver silently stores whatever hashes (an int thread_id stays an
  int), PostgresSaver fails inside the driver.  redis_saver accepts ``str`` plus ``int``
  / ``UUID`` thread ids (normalised to ``str``, as LangGraph itself stringifies them)
  and raises ``TypeError`` for anything else (bool, float, bytes, list, dict, None ->
  ValueError as "missing").
* malformed arguments (metadata that is not a dict or has non-str keys, a checkpoint's
  channel_values / channel_versions that are not dicts, non-str channel names, writes or
  channels that are not sequences of them: a bare str used to be iterated): ``TypeError``
  naming the argument, where InMemorySaver raises ``AttributeError`` or, for non-str keys,
  stores them; what InMemorySaver accepts (int channel versions, None channel_values /
  channel_versions) is accepted.
* a value the serializer cannot encode: the serializer's own ``TypeError`` propagates,
  before anything reaches Redis (all-or-nothing even when other values of the same
  call were fine).

"Nothing written" is verified by dumping every key under the test's (glob-escaped)
prefix with the ``sync_client`` fixture before and after the failing call.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest
from langgraph.checkpoint.base.id import uuid6

from tests.contract.conftest import delete_prefix, glob_escape, new_saver, unique_prefix

KINDS = ["sync", "async"]


class Unserializable:
    pass


def ckpt(cid: str | None = None, values: dict | None = None, versions: dict | None = None) -> dict:
    return {
        "v": 4,
        "id": cid or str(uuid6()),
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": values or {},
        "channel_versions": versions or {},
        "versions_seen": {},
        "updated_channels": None,
    }


def cfg(thread: Any = "t:{1}", ns: Any = "", cid: Any = None) -> dict:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if cid is not None:
        c["checkpoint_id"] = cid
    return {"configurable": c}


class Ctx:
    def __init__(self, kind: str, saver: Any, client: Any, prefix: str) -> None:
        self.kind = kind
        self.saver = saver
        self.client = client
        self.prefix = prefix

    def snapshot(self) -> dict:
        keys = sorted(self.client.scan_iter(match=glob_escape(self.prefix) + "*", count=1000))
        return {k: self.client.dump(k) for k in keys}

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.kind == "async":
            if name == "list":
                return [t async for t in self.saver.alist(*args, **kwargs)]
            return await getattr(self.saver, "a" + name)(*args, **kwargs)
        if name == "list":
            return list(self.saver.list(*args, **kwargs))
        return getattr(self.saver, name)(*args, **kwargs)

    async def fails(self, exc: type[BaseException] | tuple, name: str, *args: Any, **kwargs: Any) -> BaseException:
        before = self.snapshot()
        with pytest.raises(exc) as info:
            await self.call(name, *args, **kwargs)
        after = self.snapshot()
        assert after == before, (
            f"{name} raised {info.value!r} but changed keys: {sorted(set(after) ^ set(before)) or 'values'}"
        )
        assert str(info.value), "exception without a message"
        return info.value


@pytest.fixture(params=KINDS)
async def ctx(request: pytest.FixtureRequest, contract_redis_url: str):
    from tests.contract.conftest import redis_saver_module

    redis_saver_module()
    from tests.contract.conftest import sync_redis

    url = contract_redis_url
    client = sync_redis(url)  # the same server the savers use (standalone or cluster)
    prefix = unique_prefix()
    saver = new_saver(request.param, url, prefix=prefix)
    yield Ctx(request.param, saver, client, prefix)
    if request.param == "async":
        await saver.client.aclose()
    else:
        saver.client.close()
    delete_prefix(url, prefix)


# --------------------------------------------------------------------------- missing keys
async def test_missing_thread_id(ctx: Ctx) -> None:
    c = ckpt()
    for bad in ({"configurable": {"checkpoint_ns": ""}}, {"configurable": {"thread_id": None, "checkpoint_ns": ""}}):
        e = await ctx.fails(ValueError, "put", bad, c, {}, {})
        assert "thread_id" in str(e)
        wbad = {**bad, "configurable": {**bad["configurable"], "checkpoint_id": c["id"]}}
        await ctx.fails(ValueError, "put_writes", wbad, [("a", 1)], "task")
        await ctx.fails(ValueError, "get_tuple", bad)
        await ctx.fails(ValueError, "list", bad)
    assert ctx.snapshot() == {}


async def test_missing_configurable(ctx: Ctx) -> None:
    await ctx.fails(ValueError, "put", {}, ckpt(), {}, {})
    await ctx.fails(ValueError, "get_tuple", {"metadata": {}})
    await ctx.fails(TypeError, "put", None, ckpt(), {}, {})
    assert ctx.snapshot() == {}


async def test_put_writes_without_checkpoint_id(ctx: Ctx) -> None:
    stored = await ctx.call("put", cfg(), ckpt(), {"source": "input"}, {})
    e = await ctx.fails(ValueError, "put_writes", cfg(), [("a", 1)], "task-1")
    assert "checkpoint_id" in str(e)
    await ctx.fails(ValueError, "put_writes", cfg(cid=""), [("a", 1)], "task-1")
    tup = await ctx.call("get_tuple", stored)
    assert tup.pending_writes == []


# --------------------------------------------------------------------------- wrong types
@pytest.mark.parametrize(
    "bad", [1.5, True, b"bytes", ["t"], {"t": 1}, object()], ids=lambda v: "object" if type(v) is object else repr(v)
)
async def test_thread_id_wrong_type(ctx: Ctx, bad: Any) -> None:
    c = ckpt()
    await ctx.fails(TypeError, "put", cfg(thread=bad), c, {}, {})
    await ctx.fails(TypeError, "put_writes", cfg(thread=bad, cid=c["id"]), [("a", 1)], "task")
    await ctx.fails(TypeError, "get_tuple", cfg(thread=bad))
    await ctx.fails(TypeError, "delete_thread", bad)
    await ctx.fails(TypeError, "copy_thread", "ok", bad)
    assert ctx.snapshot() == {}


@pytest.mark.parametrize("tid", [7, uuid.UUID("12345678-1234-5678-1234-567812345678")], ids=repr)
async def test_thread_id_int_or_uuid_is_normalised_to_str(ctx: Ctx, tid: Any) -> None:
    stored = await ctx.call("put", cfg(thread=tid), ckpt(), {"source": "input"}, {})
    assert stored["configurable"]["thread_id"] == str(tid)
    a = await ctx.call("get_tuple", cfg(thread=tid))
    b = await ctx.call("get_tuple", cfg(thread=str(tid)))
    assert a is not None and b is not None and a.checkpoint == b.checkpoint
    assert a.config["configurable"]["thread_id"] == str(tid)
    await ctx.call("delete_thread", tid)
    assert await ctx.call("get_tuple", cfg(thread=str(tid))) is None


async def test_other_wrong_types(ctx: Ctx) -> None:
    c = ckpt()
    await ctx.fails(TypeError, "put", cfg(ns=3), c, {}, {})
    await ctx.fails(TypeError, "put", cfg(), {**c, "id": 12345}, {}, {})
    await ctx.fails(TypeError, "put_writes", cfg(cid=c["id"]), [("a", 1)], 42)
    await ctx.fails(TypeError, "put_writes", cfg(cid=c["id"]), [("a", 1)], "task", 3)
    await ctx.fails(TypeError, "put_writes", cfg(cid=c["id"]), [("a", 1, 2)], "task")
    await ctx.fails(TypeError, "put_writes", cfg(cid=c["id"]), [(5, 1)], "task")
    assert ctx.snapshot() == {}


async def test_prune_argument_errors(ctx: Ctx) -> None:
    stored = await ctx.call("put", cfg(), ckpt(), {}, {})
    await ctx.call("put", stored, ckpt(), {}, {})
    await ctx.fails(TypeError, "prune", "t:{1}")
    await ctx.fails(TypeError, "prune", "t:{1}", strategy="delete")
    await ctx.fails(ValueError, "prune", ["t:{1}"], strategy="keep_all")
    await ctx.fails(ValueError, "prune", ["t:{1}"], strategy="")
    assert len(await ctx.call("list", cfg())) == 2


# --------------------------------------------------------------------------- serializer
async def test_unserializable_channel_value_writes_nothing(ctx: Ctx) -> None:
    c = ckpt(values={"a": 1, "b": Unserializable()}, versions={"a": "1", "b": "1"})
    await ctx.fails(TypeError, "put", cfg(), c, {}, {"a": "1", "b": "1"})
    assert ctx.snapshot() == {}
    assert await ctx.call("get_tuple", cfg()) is None


async def test_unserializable_metadata_writes_nothing(ctx: Ctx) -> None:
    await ctx.fails(
        TypeError, "put", cfg(), ckpt(values={"a": 1}, versions={"a": "1"}), {"bad": Unserializable()}, {"a": "1"}
    )
    assert ctx.snapshot() == {}


async def test_unserializable_checkpoint_field_writes_nothing(ctx: Ctx) -> None:
    c = ckpt()
    c["versions_seen"] = {"node": {"a": Unserializable()}}
    await ctx.fails(TypeError, "put", cfg(), c, {}, {})
    assert ctx.snapshot() == {}


async def test_unserializable_write_is_all_or_nothing(ctx: Ctx) -> None:
    stored = await ctx.call("put", cfg(), ckpt(), {}, {})
    await ctx.call("put_writes", stored, [("a", "kept")], "task-0")
    await ctx.fails(TypeError, "put_writes", stored, [("a", 1), ("b", Unserializable()), ("c", 3)], "task-1")
    await ctx.fails(TypeError, "put_writes", stored, [("__error__", Unserializable())], "task-0")
    tup = await ctx.call("get_tuple", stored)
    assert tup.pending_writes == [("task-0", "a", "kept")]


async def test_failed_put_leaves_existing_thread_intact(ctx: Ctx) -> None:
    stored = await ctx.call("put", cfg(), ckpt(values={"a": [1]}, versions={"a": "1"}), {"run_id": "r"}, {"a": "1"})
    before = await ctx.call("get_tuple", cfg())
    bad = ckpt(values={"a": Unserializable()}, versions={"a": "2"})
    await ctx.fails(TypeError, "put", stored, bad, {"run_id": "r"}, {"a": "2"})
    after = await ctx.call("get_tuple", cfg())
    assert after == before


# --------------------------------------------------------------------------- threads & loops
def test_async_saver_sync_call_before_any_async_call(contract_redis_url: str) -> None:
    """AsyncRedisSaver built inside a running loop; its sync methods, called from another
    thread before any async method ran, must work (AsyncPostgresSaver binds the loop in
    ``__init__``).  LangGraph does exactly this for ``graph.get_state`` from a worker."""
    from tests.contract.conftest import redis_saver_module

    redis_saver_module()
    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    prefix = unique_prefix()
    try:

        async def make() -> Any:
            return new_saver("async", contract_redis_url, prefix=prefix)

        saver = asyncio.run_coroutine_threadsafe(make(), loop).result(10)
        assert saver.get_tuple(cfg()) is None
        stored = saver.put(cfg(), ckpt(), {}, {})
        assert saver.get_tuple(stored) is not None
        asyncio.run_coroutine_threadsafe(saver.client.aclose(), loop).result(10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)
        loop.close()
        delete_prefix(contract_redis_url, prefix)


async def test_async_saver_sync_call_on_its_own_loop_is_refused(contract_redis_url: str) -> None:
    from tests.contract.conftest import redis_saver_module

    redis_saver_module()
    prefix = unique_prefix()
    saver = new_saver("async", contract_redis_url, prefix=prefix)
    try:
        await saver.aget_tuple(cfg())
        with pytest.raises(asyncio.InvalidStateError):
            saver.get_tuple(cfg())
    finally:
        await saver.client.aclose()
        delete_prefix(contract_redis_url, prefix)


async def test_sync_saver_async_methods_and_threads(contract_redis_url: str) -> None:
    """RedisSaver's a* methods run its sync code in a worker thread; many at once are fine."""
    prefix = unique_prefix()
    saver = new_saver("sync", contract_redis_url, prefix=prefix)
    try:
        configs = await asyncio.gather(
            *(saver.aput(cfg(thread=f"th{i}"), ckpt(), {"i": i}, {}) for i in range(20))
        )
        got = await asyncio.gather(*(saver.aget_tuple(c) for c in configs))
        assert [g.metadata["i"] for g in got] == list(range(20))
        assert len([t async for t in saver.alist(None)]) == 20
    finally:
        saver.client.close()
        delete_prefix(contract_redis_url, prefix)


async def test_sequence_arguments_refuse_bare_str(ctx: Ctx) -> None:
    """A bare str for run_ids / thread_ids would be iterated character by character."""
    await ctx.call("put", cfg(), ckpt(), {"run_id": "r"}, {})
    await ctx.fails(TypeError, "delete_for_runs", "r")
    await ctx.fails(TypeError, "prune", "t")
    assert len(await ctx.call("list", None)) == 1


async def test_harmless_edge_inputs(ctx: Ctx) -> None:
    stored = await ctx.call("put", cfg(), ckpt(), {}, {})
    before = ctx.snapshot()
    await ctx.call("put_writes", stored, [], "task")  # no writes: no-op
    await ctx.call("delete_for_runs", [])
    await ctx.call("prune", [])
    await ctx.call("delete_thread", "no such thread")
    assert ctx.snapshot() == before
    assert await ctx.call("list", None, limit=0) == []
    assert await ctx.call("list", None, limit=-1) == []  # as InMemorySaver
    assert len(await ctx.call("list", None, filter={})) == 1


# ------------------------------------------------------------------ malformed put / put_writes / read arguments
# Each must raise TypeError before anything is sent (AttributeError from deep inside the
# saver, or a str iterated character by character, used to be the result).
async def test_put_bad_metadata(ctx: Ctx) -> None:
    c = ckpt()
    e = await ctx.fails(TypeError, "put", cfg(), c, {1: "x"}, {})
    assert "metadata keys must be str" in str(e)
    for bad in (None, [("a", 1)], "source"):
        e = await ctx.fails(TypeError, "put", cfg(), c, bad, {})
        assert "metadata must be a dict" in str(e)
    bad_cfg = {**cfg(), "metadata": {3: "x"}}
    await ctx.fails(TypeError, "put", bad_cfg, c, {}, {})
    await ctx.fails(TypeError, "put", {**cfg(), "metadata": ["x"]}, c, {}, {})
    assert ctx.snapshot() == {}


async def test_put_bad_checkpoint_fields(ctx: Ctx) -> None:
    e = await ctx.fails(TypeError, "put", cfg(), ckpt(versions={1: "v"}), {}, {})
    assert "channel_versions" in str(e)
    await ctx.fails(TypeError, "put", cfg(), {**ckpt(), "channel_versions": ["a"]}, {}, {})
    e = await ctx.fails(TypeError, "put", cfg(), {**ckpt(), "channel_values": [1]}, {}, {"a": "1"})
    assert "channel_values" in str(e)
    await ctx.fails(TypeError, "put", cfg(), [1], {}, {})
    await ctx.fails(TypeError, "put", cfg(), None, {}, {})
    assert ctx.snapshot() == {}


async def test_put_bad_new_versions(ctx: Ctx) -> None:
    c = ckpt(values={"a": 1}, versions={"a": "1"})
    await ctx.fails(TypeError, "put", cfg(), c, {}, {1: "1"})
    await ctx.fails(TypeError, "put", cfg(), c, {}, None)
    await ctx.fails(TypeError, "put", cfg(), c, {}, [("a", "1")])
    assert ctx.snapshot() == {}


async def test_put_accepts_what_inmemorysaver_accepts(ctx: Ctx) -> None:
    """Int (and float) channel versions, a missing / None channel_versions or channel_values,
    odd metadata values: InMemorySaver takes them, so do we."""
    c = ckpt(values={"a": 5}, versions={"a": 1})
    stored = await ctx.call("put", cfg(), c, {"parents": ["x"], "counters_since_delta_snapshot": "abc"}, {"a": 1})
    tup = await ctx.call("get_tuple", stored)
    assert tup.checkpoint["channel_values"] == {"a": 5} and tup.checkpoint["channel_versions"] == {"a": 1}
    c2 = {**ckpt(), "channel_versions": None, "channel_values": None}
    stored = await ctx.call("put", stored, c2, {}, {})
    assert (await ctx.call("get_tuple", stored)).checkpoint["channel_values"] == {}


async def test_put_writes_bad_writes(ctx: Ctx) -> None:
    stored = await ctx.call("put", cfg(), ckpt(), {}, {})
    before = ctx.snapshot()
    for bad in (None, "ab", b"ab", {"a": 1}, 5):
        e = await ctx.fails(TypeError, "put_writes", stored, bad, "task")
        assert "writes must be a sequence" in str(e)
    await ctx.fails(TypeError, "put_writes", stored, [("a", 1), (None, 2)], "task")
    await ctx.fails(TypeError, "put_writes", stored, [("a", 1)], None)
    await ctx.fails(TypeError, "put_writes", stored, [("a", 1)], "task", None)
    assert ctx.snapshot() == before
    await ctx.call("put_writes", stored, (x for x in [("a", 1)]), "task")  # any iterable of pairs
    assert (await ctx.call("get_tuple", stored)).pending_writes == [("task", "a", 1)]


async def test_delta_history_channels_must_be_a_sequence(ctx: Ctx) -> None:
    stored = await ctx.call(
        "put", cfg(), ckpt(values={"messages": [1]}, versions={"messages": "1"}), {}, {"messages": "1"}
    )
    before = ctx.snapshot()
    for bad in ("messages", b"messages", None, 5, {"messages": 1}):
        with pytest.raises(TypeError, match="channels must be a sequence"):
            await ctx.call("get_delta_channel_history", config=stored, channels=bad)
    with pytest.raises(TypeError, match="channel name"):
        await ctx.call("get_delta_channel_history", config=stored, channels=[1])
    assert ctx.snapshot() == before
    got = await ctx.call("get_delta_channel_history", config=stored, channels=("messages",))
    assert list(got) == ["messages"]


async def test_bulk_arguments_must_be_sequences(ctx: Ctx) -> None:
    await ctx.call("put", cfg(), ckpt(), {"run_id": "r"}, {})
    before = ctx.snapshot()
    for bad in (None, 5, b"r"):
        await ctx.fails(TypeError, "delete_for_runs", bad)
        await ctx.fails(TypeError, "prune", bad)
    await ctx.fails(TypeError, "prune", [None])
    assert ctx.snapshot() == before
