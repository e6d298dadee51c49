"""The scripts validate every argument before their first write (on a real redis-server).

A Lua script that fails halfway keeps the writes it already made, so ``put`` and
``put_writes`` check all of their input first. Python never builds a bad call; these tests
build a good one with the plan, corrupt one argument (always a late one, after arguments
that are fine), send it as it is, and check the error and that no key changed (DUMP of
every key under the prefix, before and after).
"""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from redis_saver import FORMAT_VERSION, RedisSaver
from redis_saver.core.plans import Call


def _snapshot(client, saver) -> dict:
    return {k: client.dump(k) for k in client.scan_iter(match=saver.keys.scan_pattern(), count=1000)}


@pytest.fixture
def setup(sync_client, prefix):
    saver = RedisSaver(sync_client, prefix=prefix)
    saver.setup()
    tid = "t:{v}"
    cp = generate_checkpoint(channel_values={"a": 1}, channel_versions={"a": "1"})
    cfg = saver.put({"configurable": {"thread_id": tid, "checkpoint_ns": ""}}, cp, generate_metadata(), {"a": "1"})
    saver.put_writes(cfg, [("a", "first")], "task-0", "p")
    return saver, cfg, sync_client


def _call(plan) -> Call:
    call = next(plan)
    assert isinstance(call, Call)
    return call


def _send_bad(saver, client, call: Call, args: list, match: str) -> None:
    before = _snapshot(client, saver)
    assert before, "the fixture stored a thread"
    with pytest.raises(ValueError, match=match):
        saver._driver.call(Call(call.script, call.keys, args))
    assert _snapshot(client, saver) == before


def _odd_versions(record: bytes, framed: bool = False) -> bytes:
    """The checkpoint record with a channel name but no version at the end of its versions part
    (``framed``: as formats 3-5 framed records, which import.lua still takes)."""
    from redis_saver.core import codec

    parts = codec.checkpoint_head(record)
    parts[5] = [*parts[5], b"lonely"]
    if framed:
        return codec.pack([p if isinstance(p, bytes) else codec.pack(p) for p in parts])
    return codec.checkpoint_record(parts)


def _mp_part(record: bytes, i: int, value: object) -> bytes:
    """The format-6 checkpoint record with part ``i`` (0-based) replaced by ``value``."""
    from redis_saver.core import codec

    parts = codec.checkpoint_head(record)
    parts[i] = value
    return codec.checkpoint_record(parts)


def test_the_uncorrupted_calls_are_accepted(setup):
    # the control: the calls the other tests corrupt do go through as built
    saver, cfg, client = setup
    call = _call(saver._plans._plan_put_writes(cfg, [("a", 1), ("b", 2), ("__interrupt__", 3)], "task-1", "p"))
    assert saver._driver.call(call) == 3
    cp = generate_checkpoint(channel_values={"a": 2}, channel_versions={"a": "2"})
    call = _call(saver._plans._plan_put(cfg, cp, generate_metadata(), {"a": "2", "b": "1"}))
    assert saver._driver.call(call) == 1


@pytest.mark.parametrize(
    "corrupt, match",
    [
        (lambda a: a[:-1] + [a[-1][:-1]], "6 parts"),  # last record one byte short
        (lambda a: a[:-1] + [b"7," + a[-1]], "6 parts"),  # a 7th length in its header
        (lambda a: a[:-2] + [b"2" + a[-2][1:], a[-1]], "bad write tag"),  # neither regular nor special
        (lambda a: a[:-2] + [a[-2][:-1], a[-1]], "bad write tag"),  # idx8 of 7 digits
        # a regular write's idx is >= 0 and a special write's < 0 (their fields never meet)
        (lambda a: a[:9] + [b"07fffffff"] + a[10:], "bad write tag"),  # regular, idx -1
        (lambda a: a[:-2] + [b"180000000", a[-1]], "bad write tag"),  # special, idx 0
        (lambda a: a[:-1], "bad write count"),  # a pair cut in half
        (lambda a: a[:8] + [b"4"] + a[9:], "bad write count"),  # n says more than sent
        (lambda a: a[:6] + [b"task"] + a[7:], "component"),  # e(task_id) without terminator
        (lambda a: a[:7] + [b"p\0x\0"] + a[8:], "encoded component"),  # e(task_path): two components
        (lambda a: a[:5] + [""] + a[6:], "empty checkpoint id"),
    ],
)
def test_put_writes_refuses_a_bad_call_before_writing(setup, corrupt, match):
    saver, cfg, client = setup
    call = _call(saver._plans._plan_put_writes(cfg, [("a", 1), ("b", 2), ("__interrupt__", 3)], "task-1", "p"))
    _send_bad(saver, client, call, corrupt(list(call.args)), match)


@pytest.mark.parametrize(
    "corrupt, match",
    [
        # the arguments end with the last blob record, then the number of stream appends (0)
        (lambda a: a[:-2] + [a[-2] + b"x", a[-1]], "2 parts"),  # last blob record one byte long
        (lambda a: a[:-2] + [a[-1]], "bad blob count"),
        (lambda a: a[:-1] + [1, b"a\0s1", b"a", 5, 0, b"zz"], "bad stream append"),  # shorter after than before
        (lambda a: a[:-1] + [1, b"a\0s1", b"x", 0, 5, b"zz"], "bad stream append"),  # no such mode
        (lambda a: a[:-1] + [1, b"as1", b"n", 0, 5, b"zz"], "bad stream append"),  # no "\0" sid
        (lambda a: a[:-1] + [1, b"a\0s1", b"n", 0, 5], "bad blob count"),  # an append cut short
        (lambda a: a[:7] + [a[7][:-3]] + a[8:], "record"),  # checkpoint record truncated
        (lambda a: a[:7] + [_odd_versions(a[7])] + a[8:], "channel, version pairs"),
        (lambda a: a[:7] + [_odd_versions(a[7], framed=True)] + a[8:], "channel, version pairs"),
        (lambda a: a[:7] + [a[7] + b"\xc0"] + a[8:], "malformed checkpoint record"),  # a second object after it
        (lambda a: a[:7] + [_mp_part(a[7], 5, b"a,1")] + a[8:], "part 6 must be an array"),  # versions a string
        (lambda a: a[:7] + [_mp_part(a[7], 0, 7)] + a[8:], "part 1 must be a string"),  # parent a number
        (lambda a: a[:7] + [_mp_part(a[7], 9, [b"ns", 1])] + a[8:], "part 10 must hold strings"),
        (lambda a: a[:7] + [_mp_part(a[7], 6, {b"k": b"v"})] + a[8:], "part 7 must be an array"),  # a map
        (lambda a: a[:7] + [b"\x9a" + a[7][1:-1]] + a[8:], "malformed checkpoint record"),  # cut short
        (lambda a: a[:8] + ["some"] + a[9:], "bad history mode"),
        # redis_saver sends no chain entry (""); one given must match the record
        (lambda a: a[:10] + [b"other\0\x01c\0\x021\0"] + a[11:], "chain entry"),  # another parent
        (lambda a: a[:10] + [b"\0\x01c\0\x021"] + a[11:], "chain entry"),  # last component unterminated
    ],
)
def test_put_refuses_a_bad_call_before_writing(setup, corrupt, match):
    saver, cfg, client = setup
    cp = generate_checkpoint(channel_values={"a": 2, "b": 3}, channel_versions={"a": "2", "b": "1"})
    call = _call(saver._plans._plan_put(cfg, cp, generate_metadata(), {"a": "2", "b": "1"}))
    _send_bad(saver, client, call, corrupt(list(call.args)), match)


def test_a_special_write_replaces_an_earlier_one_under_another_task_path(setup):
    # the special-write path of put_writes.lua: the old sort member (its own task_path) goes
    saver, cfg, client = setup
    saver.put_writes(cfg, [("__interrupt__", "old")], "task-9", "path-b")
    saver.put_writes(cfg, [("__interrupt__", "new")], "task-9", "path-a")
    saver.put_writes(cfg, [("x", "regular")], "task-9", "path-a")
    got = saver.get_tuple(cfg).pending_writes
    assert ("task-9", "__interrupt__", "new") in got and ("task-9", "__interrupt__", "old") not in got
    wr_ord = saver.keys.thread_keys("t:{v}")[6]
    assert sum(b"path-b" in m for m in client.zrange(wr_ord, 0, -1)) == 0
    assert len([w for w in got if w[0] == "task-9"]) == 2


def test_data_in_another_storage_format_is_refused(setup, sync_client, prefix):
    # format 1 wr_ord members lack the trailing e(channel): this version must not mix with them
    from redis_saver.errors import SchemaMismatchError

    saver, cfg, client = setup
    other = prefix + "-old"
    client.set(f"{other}:schema", "1")
    with pytest.raises(SchemaMismatchError, match="format"):
        RedisSaver(client, prefix=other).setup()
    client.delete(f"{other}:schema")
    # one thread marked as format 1 (its meta hash; format 1 had no lean mark in wr): every
    # script refuses it, writing nothing
    keys = saver.keys.thread_keys("t:{v}")
    client.hset(keys[0], "v", "1")
    client.hdel(keys[5], "")
    before = _snapshot(client, saver)
    with pytest.raises(SchemaMismatchError, match="format 1"):
        saver.put_writes(cfg, [("a", "more")], "task-2", "p")
    with pytest.raises(SchemaMismatchError):
        saver.get_tuple(cfg)
    assert _snapshot(client, saver) == before


def test_lean_put_writes_writes_nothing_when_the_thread_needs_the_full_call(sync_client, prefix):
    """put_writes+lean (2 keys) only runs when touch() has nothing to do; else nil and no write."""
    saver = RedisSaver(sync_client, prefix=prefix)
    saver.setup()
    cfg = {"configurable": {"thread_id": "fresh", "checkpoint_ns": "", "checkpoint_id": "1"}}
    lean = _call(saver._plans._plan_put_writes(cfg, [("a", "x")], "task", "p"))
    assert lean.script == "put_writes+lean"
    before = _snapshot(sync_client, saver)  # only setup()'s schema key
    assert saver._driver.call(lean) is None  # a thread never written: not indexed yet
    assert _snapshot(sync_client, saver) == before
    assert sync_client.exists(*saver.keys.thread_keys("fresh")) == 0
    saver.put_writes(cfg, [("a", "x")], "task", "p")  # the plan falls back to the 11-key call
    wr = saver.keys.thread_keys("fresh")[5]
    assert sync_client.hlen(wr) == 2  # the write and the lean mark (field "" = the format)
    assert sync_client.hget(wr, "") == FORMAT_VERSION.encode()
    assert sync_client.hget(saver.keys.thread_keys("fresh")[0], "ix") == b"inf"  # indexed
    # now indexed without expiry: the lean call does the work alone
    lean = _call(saver._plans._plan_put_writes(cfg, [("b", "y")], "task-2", "p"))
    assert saver._driver.call(lean) == 1
    # a ttl to apply: refused, nothing written
    header = list(lean.args)
    header[2] = 60_000
    before = _snapshot(sync_client, saver)
    assert saver._driver.call(Call(lean.script, lean.keys, header)) is None
    assert _snapshot(sync_client, saver) == before
    assert sync_client.hlen(wr) == 3  # two writes and the mark


def _stream_dir(client, saver, tid: str) -> tuple[bytes, list[bytes]]:
    """The field and parts of the thread's one stream directory."""
    from redis_saver.core.codec import unpack

    blob = saver.keys.thread_keys(tid)[4]
    dirs = [f for f in client.hkeys(blob) if f.count(b"\0") == 3 and b"\0\0" in f]
    assert len(dirs) == 1, dirs
    return dirs[0], unpack(client.hget(blob, dirs[0]))


def test_stream_appends_keep_the_directory_and_a_full_one_is_refused_before_writing(sync_client, prefix):
    """put.lua rewrites a stream directory's head in place on an append (no unpack / repack):
    the record reads as pack() writes it, frames and references counted; an append to a stream
    already at MAX_FRAMES frames is refused with nothing written."""
    from redis_saver.core import values
    from redis_saver.core.codec import pack

    saver = RedisSaver(sync_client, prefix=prefix)
    saver.setup()
    tid = "t:{s}"
    words = [f"message {i} " + "lorem ipsum dolor sit amet " * 12 for i in range(12)]
    cfg = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    for t in range(1, 4):
        cp = generate_checkpoint(channel_values={"m": words[: 2 * t]}, channel_versions={"m": str(t)})
        cfg = saver.put(cfg, cp, generate_metadata(), {"m": str(t)})
    field, parts = _stream_dir(sync_client, saver, tid)
    assert parts[1] == b"3" and int(parts[2]) == (len(parts) - 3) // 2 == 3  # 3 records, 3 frames
    assert saver.get_tuple(cfg).checkpoint["channel_values"]["m"] == words[:6]
    # the directory now lists MAX_FRAMES frames (its raw length as stored): the next append is refused
    blob = saver.keys.thread_keys(tid)[4]
    frames = [(str(k).encode(), parts[4]) for k in range(values.MAX_FRAMES)]
    for k, _ in frames:
        sync_client.hset(blob, field + b"\0" + k, b"x")
    sync_client.hset(blob, field, pack([parts[0], parts[1], str(values.MAX_FRAMES).encode()]
                                        + [x for kv in frames for x in kv]))
    cp = generate_checkpoint(channel_values={"m": words[:8]}, channel_versions={"m": "4"})
    call = _call(saver._plans._plan_put(cfg, cp, generate_metadata(), {"m": "4"}))
    assert b"a" in call.args, "the plan sends an append"

    def contents() -> dict:  # (not DUMP: the lookups may move the grown hash's rehashing on)
        keys = sync_client.scan_iter(match=saver.keys.scan_pattern(), count=1000)
        return {k: sync_client.hgetall(k) if sync_client.type(k) == b"hash" else sync_client.dump(k) for k in keys}

    before = contents()
    with pytest.raises(ValueError, match="too many frames"):
        saver._driver.call(call)
    assert contents() == before


def _mp_variants(record: bytes) -> list[bytes]:
    """The record as other MessagePack encoders may write it (longer string and array headers;
    the bin family, which Redis's cmsgpack refuses; a nil, a number, a map in a nested part),
    and broken: every truncation, and each byte changed to a few header bytes."""
    import random

    import msgpack

    from redis_saver.core import codec

    parts = codec.checkpoint_head(record)

    def s8(b: bytes) -> bytes:
        return b"\xd9" + bytes([len(b)]) + b if len(b) < 256 else b"\xda" + len(b).to_bytes(2, "big") + b

    def s32(b: bytes) -> bytes:
        return b"\xdb" + len(b).to_bytes(4, "big") + b

    def arr(items: list[bytes], head: bytes) -> bytes:
        return head + b"".join(items)

    def rebuild(enc_str, arr_head) -> bytes:
        out = b"\x9a"
        for p in parts:
            if isinstance(p, list):
                out += arr([enc_str(x) for x in p], arr_head(len(p)))
            else:
                out += enc_str(p)
        return out

    out = [
        rebuild(s8, lambda n: b"\xdc" + n.to_bytes(2, "big")),
        rebuild(s32, lambda n: b"\xdd" + n.to_bytes(4, "big")),
        rebuild(lambda b: b"\xc4" + bytes([len(b)]) + b if len(b) < 256 else b"\xc5" + len(b).to_bytes(2, "big") + b,
                lambda n: bytes([0x90 + n]) if n < 16 else b"\xdc" + n.to_bytes(2, "big")),
    ]
    for i, bad in ((5, [b"a", None]), (6, [b"k", 1]), (9, {b"a": b"b"}), (0, None), (7, 1.5)):
        p = list(parts)
        p[i] = bad
        out.append(msgpack.packb(p, use_bin_type=False))
    out += [record[:n] for n in range(len(record))]
    rng = random.Random(7)
    for at in rng.sample(range(len(record)), min(len(record), 120)):
        for b in (0x00, 0x91, 0x9a, 0xa3, 0xc0, 0xc4, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xff):
            out.append(record[:at] + bytes([b]) + record[at + 1 :])
    return out


def test_puts_shape_check_accepts_exactly_what_the_full_decode_accepts(setup):
    # put checks a format-6 record from its headers (cp_shape()), without decoding it: whatever
    # that check accepts, validate_record() (cmsgpack's decode, every part's type) must accept,
    # with the same parent and run id; anything else goes to validate_record() itself
    saver, cfg, client = setup
    from redis_saver.core import scripts

    cp = generate_checkpoint(channel_values={"a": 2, "b": 3}, channel_versions={"a": "2", "b": "1"})
    md = {**generate_metadata(), "run_id": "run-1", "parents": {"": "p-1"}}
    call = _call(saver._plans._plan_put(cfg, cp, md, {"a": "2", "b": "1"}))
    record = call.args[7]
    assert record[:1] == b"\x9a"
    variants = _mp_variants(record)
    src = scripts.load_all()["put"].source.decode()
    helpers = src[: src.index("local ns, cid, parent, raw")]
    body = """
local out = {}
for i = 5, #ARGV do
  local raw = ARGV[i]
  local ok, full = pcall(validate_record, raw)
  local shaped = cp_shape(raw) ~= nil
  local pok, rec = pcall(put_record, raw)
  local same = ok == pok and (not ok or (rec[CP_PARENT] == full[CP_PARENT] and rec[CP_RUN_ID] == full[CP_RUN_ID]))
  out[#out + 1] = {shaped and 1 or 0, ok and 1 or 0, same and 1 or 0}
end
return out
"""
    keys = saver.keys.thread_keys("t:{shape}")
    got = client.eval(helpers + body, len(keys), *keys, FORMAT_VERSION, "t:{shape}", "0", "0", *variants)
    assert len(got) == len(variants)
    shaped = [v for v, (s, _, _) in zip(variants, got, strict=True) if s]
    assert [v for v, (s, ok, _) in zip(variants, got, strict=True) if s and not ok] == []
    assert [v for v, (_, _, same) in zip(variants, got, strict=True) if not same] == []
    # the control: the record as sent and its longer headers take the shape check; the bin
    # family, a nil, a number, a map and the truncations do not (nor does the full decode)
    assert variants[0] in shaped and variants[1] in shaped and record in [*shaped, record]
    assert sum(ok for _, ok, _ in got) < len(got) - len(record)
    assert not any(got[2][:2]) and not any(s for s, _, _ in got[3:8])
