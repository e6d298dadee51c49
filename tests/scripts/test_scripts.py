"""The Lua headers are the contract between Python and the scripts: check it both ways.

Each ``lua/<op>.lua`` documents its KEYS and ARGV; every plan's Call must send exactly
what its script's header lists (key count, fixed ARGV positions, counted variadic tails).
"""

from __future__ import annotations

import re
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata

from devkit.luagen import _COMMENT, _FUNCTION, _LOCAL, definitions, read_lib
from redis_saver import FORMAT_VERSION, READ_FORMATS, RedisSaver
from redis_saver.core.plans import Call, IndexSlots, Out
from redis_saver.core.scripts import library, load_all, lua_dir

HEADER = re.compile(r"--\[\[(.*?)\]\]", re.S)


def header(name: str) -> str:
    text = (lua_dir() / f"{name}.lua").read_text()
    m = HEADER.search(text)
    assert m, f"{name}.lua has no --[[ ... ]] header"
    return m.group(1)


def fixed_argv(name: str) -> int:
    """Highest ARGV[n] (or ARGV[a..b]) position the header documents (header ARGV[1..4] included)."""
    nums = [int(n) for n in re.findall(r"ARGV\[(\d+)", header(name))]
    nums += [int(n) for n in re.findall(r"ARGV\[\d+\.\.(\d+)\]", header(name))]
    return max(nums)


def first_call(plan) -> Call:
    step = next(plan)
    while isinstance(step, (IndexSlots, Out)):
        step = plan.send([0] if isinstance(step, IndexSlots) else None)
    if isinstance(step, list):
        step = step[0]
    assert isinstance(step, Call)
    return step


@pytest.fixture
def offline_saver():
    class NoClient:  # plans never touch the client; the drivers do
        def get_connection_kwargs(self):
            return {}

    return RedisSaver(NoClient(), prefix="hdr")


def test_every_script_has_a_header_and_right_flags():
    scripts = load_all()
    for path in lua_dir().glob("*.lua"):
        if path.name.startswith("_"):
            continue
        text = path.read_text()
        h = header(path.stem)
        assert "KEYS" in h and "ARGV" in h and "Returns" in h, path.name
        first = text.split("\n", 1)[0]
        assert first.startswith("#!lua"), path.name
        writes = scripts[path.stem].writes
        # a script that calls a write command must not claim no-writes, and vice versa
        calls_writes = bool(
            re.search(r"'(HSET|HSETNX|HDEL|ZADD|ZREM|DEL|UNLINK|PEXPIRE|PERSIST|HINCRBY|PEXPIREAT)'", text)
        )
        uses_touch = any(w in text for w in ("touch()", "drop_thread()", "apply_blobs(", "init_meta()"))  # _lib writers
        assert writes == (calls_writes or uses_touch) or (not writes and "REFRESH" in text), path.name
        if '--- @include "_lib.lua"' in text:
            assert "the 11 per-thread keys" in h, path.name
        elif path.stem.startswith("store_"):  # the store's: one key, the shard's namespace index
            assert '--- @include "_store_lib.lua"' in text and "KEYS[1] the shard's namespace index" in h, path.name


def test_only_the_deleting_scripts_run_out_of_memory():
    # allow-oom lets an operator free memory under noeviction; put / put_writes must stay refused
    scripts = load_all()
    allow = {n for n, s in scripts.items() if b"allow-oom" in s.source.split(b"\n", 1)[0]}
    # gc: the blob collection of a paged prune / delete_for_runs; "+forget": a read's variant
    # that deletes a damaged thread ("Lost keys" in lua/_lib.lua), sent with ARGV[4] = "f" only
    forget = {"get_tuple+forget", "list+forget", "delta_history+forget"}
    assert allow == {"delete_thread", "delete_runs", "prune", "gc", "store_delete"} | forget
    assert all(scripts[n].writes for n in allow)


def _thread_call_checks(call: Call, name: str) -> None:
    assert call.script.split("+")[0] == name
    assert len(call.keys) == 11
    assert len(call.args) >= fixed_argv(name)
    assert call.args[0] == FORMAT_VERSION == "6"  # format version


def test_lua_names_the_record_parts_python_names():
    """lua/_lib.lua's CP_* / W_* (1-based) are redis_saver/core/codec.py's CP / WR (0-based)."""
    from redis_saver.core.codec import CP, EMPTY_BLOB, EMPTY_TYPE, WR, pack

    lib = read_lib("_lib.lua")
    consts = {}
    for names, values in re.findall(r"^local ((?:CP|W)_[A-Z_, ]+) = ([0-9, ]+)$", lib, re.M):
        consts.update(zip([n.strip() for n in names.split(",")], [int(v) for v in values.split(",")], strict=True))
    assert consts == {
        "CP_PARENT": CP.PARENT + 1, "CP_VERSIONS": CP.VERSIONS + 1, "CP_FILTER": CP.FILTER + 1,
        "CP_RUN_ID": CP.RUN_ID + 1, "CP_DELTA": CP.DELTA + 1, "CP_PARENTS": CP.PARENTS + 1,
        "CP_PARTS": CP.PARTS, "W_CHANNEL": WR.CHANNEL + 1, "W_TASK_PATH": WR.TASK_PATH + 1, "W_PARTS": WR.PARTS,
    }
    assert f"local EMPTY_BLOB = '{EMPTY_BLOB.decode()}'" in lib
    assert EMPTY_BLOB == pack([EMPTY_TYPE, b""])
    # no script spells a record position or the empty value as a literal any more
    for path in lua_dir().glob("*.lua"):
        code = _COMMENT.sub("", path.read_text())
        assert not re.search(r"\brec\[\d|rec_field\([^)]*, \d+\)|rec_two\([^)]*\d\)|'empty'", code), path.name


def test_lua_reads_the_formats_python_says_it_reads():
    lib = read_lib("_lib.lua")
    older = set(re.findall(r"\['(\d+)'\] = true", re.search(r"local OLDER_FORMATS = \{(.*?)\}\n", lib).group(1)))
    assert older | {FORMAT_VERSION} == set(READ_FORMATS)


def test_put_sends_what_put_lua_reads(offline_saver):
    cp = generate_checkpoint(channel_values={"a": 1, "b": 2}, channel_versions={"a": "1", "b": "2"})
    plan = offline_saver._plans._plan_put(generate_config("t"), cp, generate_metadata(), {"a": "1", "b": "2", "c": "3"})
    call = first_call(plan)
    _thread_call_checks(call, "put")
    n = call.args[11]
    # "c" has no value: no blob for it (reads take a missing field for no value)
    assert n == 2 and len(call.args) == fixed_argv("put") + 2 * n  # the last one: the number of stream appends
    assert call.args[12:16:2] == [b"a\x001", b"b\x002"] and call.args[-1] == 0
    assert call.args[10] == b""  # no chain entry: only threads an earlier format started keep them


def test_put_writes_sends_what_put_writes_lua_reads(offline_saver):
    cfg = generate_config("t", checkpoint_id=str(uuid.uuid4()))
    plan = offline_saver._plans._plan_put_writes(cfg, [("a", 1), ("__error__", "x")], "task")
    lean = first_call(plan)  # no ttl: the 2-key form first (lua/_keys_lean.lua)
    assert lean.script == "put_writes+lean"
    assert [k.rsplit(b":", 1)[1] for k in lean.keys] == [b"wr", b"wr_ord"]
    call = plan.send(None)  # nil reply: the same arguments with the 11 keys
    assert call.args == lean.args
    _thread_call_checks(call, "put_writes")
    with pytest.raises(StopIteration):
        plan.send(2)
    plan = offline_saver._plans._plan_put_writes(cfg, [("a", 1)], "task")
    next(plan)
    with pytest.raises(StopIteration):  # a count reply: done in one call
        plan.send(1)
    n = call.args[8]
    assert n == 2 and len(call.args) == fixed_argv("put_writes") + 2 * n
    assert call.args[6] == b"task\0" and call.args[7] == b"\0"  # e(task_id), e(task_path)
    assert [a[:1] for a in call.args[9::2]] == [b"0", b"1"]  # regular, special


def test_reads_and_lifecycle_send_what_their_scripts_read(offline_saver):
    s = offline_saver
    cfg = generate_config("t")
    c = first_call(s._plans._plan_get_tuple(cfg))
    _thread_call_checks(c, "get_tuple")
    assert len(c.args) == fixed_argv("get_tuple")
    c = first_call(s._plans._plan_list(cfg, filter={"a": 1, "b": None}))
    _thread_call_checks(c, "list")
    assert len(c.args) == fixed_argv("list") + 2 * int(c.args[9])
    c = first_call(s._plans._plan_delta_history(cfg, ["x", "y"]))
    _thread_call_checks(c, "delta_history")
    assert len(c.args) == fixed_argv("delta_history") - 1 + 2  # ARGV[9..] = the 2 channels
    for plan, name, extra in [
        (s._plans._plan_delete_thread("t"), "delete_thread", 0),
        (s._plans._plan_prune(["t"], "keep_latest"), "prune", 3),
        (s._plans._plan_pin("t", True), "pin", 1),
    ]:
        c = first_call(plan)
        _thread_call_checks(c, name)
        assert len(c.args) == 4 + extra
    c = first_call(s._plans._plan_copy_thread("a", "b"))
    assert c.script == "export" and len(c.keys) == 11
    assert c.args[4] == "all" and len(c.args) == 8  # ARGV[5] step, ARGV[6..8] its budgets
    assert fixed_argv("export") == 12  # the "page" step's ARGV[12..]
    c = first_call(s._plans._plan_delete_for_runs(["r1", "r2"]))
    assert c.script == "ix_query" and len(c.keys) == 2 and c.args == ["runs", "r1", "r2"]


def test_included_library_keeps_only_the_helpers_a_script_uses():
    from devkit.luagen import shake

    lib = (
        "local X = 1\n"
        "local function a(v) return v end\n"
        "local function b(v) return a(v) end\n"
        "local function unused(v) return v end\n"
        "local function c(v)\n  return X\nend\n"
        "local Y = a(1)  -- only d uses it\n"
        "local function d(v) return Y end\n"
        "local Z, W = 1, 2\n"
    )
    kept = shake(lib, "return b(2) + c(3)")
    assert "local function a(" in kept and "local function b(" in kept and "local function c(" in kept
    assert "unused" not in kept and "local X = 1" in kept
    # a one-name local goes with the last helper that used it; a multi-name one always stays
    assert "local Y" not in kept and "local function d(" not in kept and "local Z, W = 1, 2" in kept
    assert "local Y = a(1)" in shake(lib, "return d(1)")
    # every helper a real script calls is still defined, and each script drops some
    full = read_lib("_lib.lua")
    defined = set(re.findall(r"^local function (\w+)\(", full, re.M))
    # the library follows the convention shake() parses: each helper is found whole, alone
    blocks = [m.group(0) for m in _FUNCTION.finditer(full)]
    assert len(blocks) == len(defined) and all(b.count("local function") == 1 for b in blocks)
    for name, s in load_all().items():
        src = _COMMENT.sub("", s.source.decode())
        have = set(re.findall(r"^local function (\w+)\(", src, re.M))
        called = {f for f in defined if re.search(rf"\b{f}\(", src.replace(f"local function {f}(", ""))}
        assert called <= have, f"{name}: calls {called - have} but the include dropped them"
        assert len(have) < len(defined), f"{name}: nothing was dropped"


def test_write_record_is_the_generic_framing():
    from redis_saver.core import codec

    parts = ["tâsk".encode(), b"ch", b"msgpack", b"\x00;,\xff" * 50, b"", b"-3"]
    assert codec.write_record(*parts) == codec.pack(parts)
    assert codec.unpack(codec.write_record(*parts)) == parts


def test_bench_where_cuts_put_writes_at_existing_lines():
    # bench/where.py times put_writes.lua cut before each of these lines: keep them in step
    from devkit.script_cuts import BODY_START, STAGES

    source = load_all()["put_writes+lean"].source.decode()
    assert BODY_START in source
    at = [source.index(marker) for _, marker in STAGES]
    assert at == sorted(at) and source.index(BODY_START) < at[0]


def _call_each_variant(client, variants, args) -> list:
    """Load each cut library (all of distinct names; the last one is the saver's own) and call its
    function with ``args``; the replies, in order. The cut libraries are deleted again."""
    names = [src.split("\n", 1)[0].split("name=", 1)[1] for _, src, _ in variants]
    assert len(set(names)) == len(names)
    try:
        for _, src, _ in variants:
            client.function_load(src, replace=True)
        return [client.fcall(fname, *args) for _, _, fname in variants]
    finally:
        for name in names[:-1]:  # the last one is the saver's own library
            client.function_delete(name)


def test_bench_where_cuts_put_at_existing_lines(sync_client, prefix):
    # bench/where.py times the library's put cut before each of these lines: keep them in step
    from devkit.script_cuts import PUT_BODY, PUT_STAGES, put_libraries, script_calls

    source = library().source.decode()
    body = source[source.index(PUT_BODY):]
    at = [body.index(marker) for _, marker in PUT_STAGES]
    assert at == sorted(at)
    # each variant loads as a library of its own, and its put stops where it is cut: on a put
    # the saver sent (a retry, once stored), the cut ones return 0, the empty and whole ones 1
    saver = RedisSaver(sync_client, prefix=prefix)
    with script_calls(saver) as sent:
        saver.put(generate_config("where"), generate_checkpoint(), generate_metadata(), {})
    args = sent[-1]
    assert str(args[0]).endswith("_put")
    variants = put_libraries()
    assert len(variants) == len(PUT_STAGES) + 3
    got = _call_each_variant(sync_client, variants, args[1:])
    assert got == [1] + [0] * (len(PUT_STAGES) + 1) + [1]


def test_bench_shard_cuts_get_tuple_at_existing_lines(sync_client, prefix):
    # bench/shard.py times the library's get_tuple cut before each of these lines, then without
    # its touch_read(): keep them in step
    from devkit.script_cuts import (
        GET_BODY,
        GET_NO_TOUCH,
        GET_STAGES,
        TUPLE_REPLIES,
        TUPLE_STAGES,
        get_libraries,
        script_calls,
    )

    source = library().source.decode()
    body = source[source.index(GET_BODY):]
    at = [body.index(marker) for _, marker in GET_STAGES] + [body.index(GET_NO_TOUCH[1])]
    assert at == sorted(at)
    helper = source[source.index(TUPLE_REPLIES):]
    at = [helper.index(marker) for _, marker in TUPLE_STAGES]
    assert at == sorted(at)
    saver = RedisSaver(sync_client, prefix=prefix)
    saver.put(generate_config("shard"), generate_checkpoint(), generate_metadata(), {})
    with script_calls(saver) as sent:
        assert saver.get_tuple(generate_config("shard")) is not None
    args = sent[-1]
    assert str(args[0]).endswith("_get_tuple")
    variants = get_libraries()
    assert len(variants) == len(GET_STAGES) + len(TUPLE_STAGES) + 4
    got = _call_each_variant(sync_client, variants, args[1:])
    # the empty function answers 1, the ones cut in get_tuple 0, in tuple_replies nil, the one
    # without touch_read() what the whole one does
    whole = sync_client.fcall(*args)
    assert got == [1] + [0] * (len(GET_STAGES) + 1) + [None] * len(TUPLE_STAGES) + [whole, whole]
    assert isinstance(whole, list) and whole[0]


def test_lean_variant_differs_only_in_its_keys_block_and_full_only_lines():
    scripts = load_all()
    full, lean = scripts["put_writes"].source.decode(), scripts["put_writes+lean"].source.decode()
    keys_lean = (lua_dir() / "_keys_lean.lua").read_text()
    begin, end = full.index("-- @keys-begin"), full.index("-- @keys-end\n") + len("-- @keys-end\n")
    assert "local LEAN = false" in full[begin:end] and "local LEAN = true" in keys_lean
    assert [n for n in scripts if n.endswith("+lean")] == ["put_writes+lean"]
    # lean = full with the lean keys block, without the @full-only lines and the helpers that
    # only they called; nothing else differs
    full_only = [line for line in full.splitlines() if "-- @full-only" in line]
    assert [line.split("(")[0] for line in full_only] == [
        "check_format",
        "if META_DMG or ",
        "if not META_V and redis.call",
        "init_meta",
        "touch",
        "if TTL_MS == 0 then redis.call",
    ]
    assert "-- @full-only" not in lean
    dropped = set(definitions(full)) - set(definitions(lean))
    assert {"touch", "purge_expired", "check_format", "init_meta"} <= dropped and "write_channel" not in dropped
    assert "META_V" not in dropped  # a multi-name local: kept
    rebuilt = full[:begin] + keys_lean + full[end:]
    # the generated line that names the sources: lean's adds _keys_lean.lua
    assert lean.split("\n")[1] == full.split("\n")[1].replace(" by ", ", lua/_keys_lean.lua by ", 1)
    rebuilt = rebuilt.replace(full.split("\n")[1], lean.split("\n")[1], 1)
    for line in full_only:
        rebuilt = rebuilt.replace(line + "\n", "")
    rebuilt = _FUNCTION.sub(lambda m: "" if m.group(1) in dropped else m.group(0), rebuilt)
    rebuilt = _LOCAL.sub(lambda m: "" if m.group(1) in dropped else m.group(0), rebuilt)
    assert lean == rebuilt
    code = _COMMENT.sub("", lean)
    for name in dropped:  # what lean dropped, lean never calls
        assert not re.search(rf"\b{name}\(", code)


def _reference_pack(parts) -> bytes:
    """The record format as documented in core/codec.py, written the plain way."""
    bs = [p.encode() if isinstance(p, str) else bytes(p) for p in parts]
    return ",".join(str(len(b)) for b in bs).encode() + b";" + b"".join(bs)


@given(st.lists(st.one_of(st.binary(max_size=40), st.text(max_size=20)), max_size=12))
@settings(max_examples=300, deadline=None)
def test_fast_framing_matches_the_record_format(parts):
    from redis_saver.core import codec

    assert codec.pack(parts) == _reference_pack(parts)
    t = parts[0] if parts and isinstance(parts[0], str) else "msgpack"
    d = parts[-1] if parts and isinstance(parts[-1], bytes) else b"\x00data"
    assert codec.blob_record(t, d) == _reference_pack([t, d])
    assert codec.EMPTY_BLOB == _reference_pack(["empty", b""])


@given(st.lists(st.binary(max_size=40), min_size=2, max_size=12), st.data())
@settings(max_examples=300, deadline=None)
def test_partial_and_blob_parsers_match_unpack(parts, data):
    # the read path's unpack_head / unpack_blob return what unpack() does, and refuse what it
    # refuses: a wrong part count, a length that does not add up
    from redis_saver.core import codec
    from redis_saver.errors import MalformedReplyError

    rec = codec.pack(parts)
    want = data.draw(st.integers(0, len(parts)))
    assert codec.unpack_head(rec, len(parts), want) == parts[:want]
    for bad in (rec[:-1], rec + b"x", b"9" + rec):
        with pytest.raises(MalformedReplyError):
            codec.unpack_head(bad, len(parts), want)
    with pytest.raises(MalformedReplyError):
        codec.unpack_head(rec, len(parts) + 1, want)
    blob = codec.pack(parts[:2])
    assert list(codec.unpack_blob(blob)) == parts[:2] == codec.unpack(blob)
    for bad in (blob[:-1], blob + b"x", codec.pack(parts[:1]), b"1" + blob, blob.replace(b";", b"", 1)):
        with pytest.raises(MalformedReplyError):
            codec.unpack_blob(bad)
