"""The function library (``lua/build/library.lua``, ``_scripts.library()``): the same scripts, loaded once per server.

The library is generated from ``lua/`` (``devkit/luagen.py``): these tests check what the generation relies on (the
per-call state of ``_lib.lua`` all inside its @keys / @state blocks, the rest constant), that
the server loads it with the right flags, and the saver's life around it on a real server: a
server that lost it (FUNCTION FLUSH) gets it again within the call, single or pipelined, and
a user whom ACL denies FUNCTION LOAD still gets every call answered, through EVALSHA.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from devkit.luagen import _FUNCTION, _KEYS_BLOCK, _STATE_BLOCK, read_lib
from redis_saver import RedisSaver
from redis_saver.core.scripts import library, load_all

_LITERAL = r"(?:-?\d+|'[^']*'|\{[^}]*\})"
CONSTANT = re.compile(rf"^local [A-Z_][A-Z0-9_]*(?:, [A-Z_][A-Z0-9_]*)* = {_LITERAL}(?:, {_LITERAL})*(?:\s+--.*)?$")


def test_lib_state_lives_in_its_blocks_and_everything_else_is_constant() -> None:
    """Library-level locals are shared by every call of every function: only constants may be
    set outside the blocks that run at the start of each call."""
    lib = read_lib("_lib.lua")
    rest = _FUNCTION.sub("", _STATE_BLOCK.sub("", _KEYS_BLOCK.sub("", lib)))
    top = [line for line in rest.splitlines() if line.strip() and not line.startswith("--")]
    assert top and all(CONSTANT.match(line) for line in top), [line for line in top if not CONSTANT.match(line)]
    # nothing assigns to a constant table (e.g. OLDER_FORMATS[x] = ...)
    for name in re.findall(r"^local ([A-Z_][A-Z0-9_]*) = \{", rest, re.M):
        assert not re.search(rf"\b{name}\[[^\]]*\]\s*=[^=]", lib), name


def test_every_call_resets_every_declared_name() -> None:
    src = library().source.decode()
    declared = re.search(r"^local (KEYS, ARGV, [^\n]*)$", src, re.M)
    assert declared
    names = declared.group(1).split(", ")
    for begin in ("begin_full", "begin_lean"):
        body = re.search(rf"^local function {begin}\(keys, argv\)\n(.*?)^end$", src, re.M | re.S)
        assert body, begin
        assigned = set()
        for m in re.finditer(r"^  ([A-Za-z_][A-Za-z0-9_]*(?:, [A-Za-z_][A-Za-z0-9_]*)*) = ", body.group(1), re.M):
            assigned |= set(m.group(1).split(", "))
        assert assigned >= set(names), (begin, set(names) - assigned)


def test_the_server_loads_it_with_each_scripts_flags(sync_client: Any) -> None:
    lib = library()
    assert sync_client.function_load(lib.source, replace=True) == lib.name.encode()
    listed = sync_client.function_list(library=lib.name)
    assert len(listed) == 1
    info = dict(zip(listed[0][::2], listed[0][1::2], strict=True))
    flags = {}
    for f in info[b"functions"]:
        d = dict(zip(f[::2], f[1::2], strict=True))
        flags[d[b"name"].decode()] = {x.decode() for x in d[b"flags"]}
    scripts = load_all()
    assert set(flags) == {lib.functions[n] for n in scripts} and set(lib.functions) == set(scripts)
    for name, script in scripts.items():
        first = script.source.split(b"\n", 1)[0].decode()
        want = set(re.search(r"flags=([a-z,-]+)", first).group(1).split(",")) if "flags=" in first else set()
        assert flags[lib.functions[name]] == want, name
    # a second load of the same text (another worker, another saver) changes nothing
    assert sync_client.function_load(lib.source, replace=True) == lib.name.encode()


def _put(saver: Any, tid: str, n: int) -> dict:
    cfg = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    for i in range(n):
        cp = empty_checkpoint()
        cp["channel_values"] = {"x": i}
        cp["channel_versions"] = {"x": saver.get_next_version(None if i == 0 else str(i), None)}
        cfg = saver.put(cfg, cp, {"step": i}, dict(cp["channel_versions"]))
        saver.put_writes(cfg, [("x", i), ("y", -i)], f"task{i}")
    return cfg


def _fcalls(client: Any) -> int:
    return int(client.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0))


def test_a_server_that_lost_the_library_gets_it_back_within_the_call(sync_client: Any, prefix: str) -> None:
    saver = RedisSaver(sync_client, prefix=prefix)
    ref = InMemorySaver()
    last = _put(saver, "t", 3)
    _put(ref, "t", 3)
    assert sync_client.function_list(library=library().name)
    for flush in ("function", "both"):
        sync_client.function_flush()
        if flush == "both":
            sync_client.script_flush()
        before = _fcalls(sync_client)
        got = saver.get_tuple(last)
        assert got is not None and got.checkpoint["channel_values"] == {"x": 2}
        ref_latest = ref.get_tuple({"configurable": {"thread_id": "t"}})
        assert got.pending_writes == ref_latest.pending_writes
        assert sync_client.function_list(library=library().name), "loaded again"
        assert _fcalls(sync_client) - before == 2  # the one answered "Function not found", then the one that ran
    # a pipelined call (put with wait_for_replicas: FCALL + WAIT on one connection) after a
    # flush: sent again as EVAL, and the library loaded for the calls after it
    waiting = RedisSaver(sync_client, prefix=prefix, wait_for_replicas=1, wait_timeout_ms=1)
    sync_client.function_flush()
    from redis_saver import ReplicationTimeoutError

    with pytest.raises(ReplicationTimeoutError):  # no replica here: the write is done, WAIT times out
        waiting.put_writes(last, [("z", 1)], "late")
    assert sync_client.function_list(library=library().name)
    assert ("z", 1) in [(c, v) for _, c, v in saver.get_tuple(last).pending_writes]


def test_without_function_load_permission_every_call_runs_as_evalsha(sync_client: Any, prefix: str) -> None:
    user = f"nofn{prefix}"
    sync_client.acl_setuser(
        user, enabled=True, passwords=["+pw"], keys=[f"{prefix}*"],
        commands=["+@all", "-function"],
    )
    try:
        conn = sync_client.connection_pool.connection_kwargs
        limited = redis.Redis(host=conn["host"], port=conn["port"], username=user, password="pw")
        sync_client.function_flush()
        saver = RedisSaver(limited, prefix=prefix)
        saver.setup()  # FUNCTION LOAD refused: the saver goes on with EVALSHA
        assert saver._driver.engine.library is None
        ref = InMemorySaver()
        last = _put(saver, "t", 3)
        ref_last = _put(ref, "t", 3)
        mine, theirs = saver.get_tuple(last), ref.get_tuple(ref_last)
        assert mine.checkpoint["channel_values"] == theirs.checkpoint["channel_values"]
        assert mine.pending_writes == theirs.pending_writes
        assert not sync_client.function_list(library=library().name)
        limited.close()
    finally:
        sync_client.acl_deluser(user)


def test_functions_false_sends_evalsha(sync_client: Any, prefix: str) -> None:
    saver = RedisSaver(sync_client, prefix=prefix, functions=False)
    before = _fcalls(sync_client)
    last = _put(saver, "t", 2)
    assert saver.get_tuple(last).checkpoint["channel_values"] == {"x": 1}
    assert _fcalls(sync_client) == before
    with pytest.raises(TypeError):
        RedisSaver(sync_client, prefix=prefix, functions="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("disabled", ["FCALL", "FUNCTION"])
def test_a_server_that_disables_fcall_or_function_still_answers_every_call(disabled: str) -> None:
    """Managed services disable commands by renaming them away: the saver then runs EVALSHA."""
    from devkit.servers import client_kwargs, start_standalone

    with start_standalone(extra_args=("--rename-command", disabled, '""')) as server:
        client = redis.Redis(host=server.host, port=server.port, **client_kwargs())
        try:
            saver = RedisSaver(client, prefix="off")
            ref = InMemorySaver()
            last, ref_last = _put(saver, "t", 3), _put(ref, "t", 3)
            mine, theirs = saver.get_tuple(last), ref.get_tuple(ref_last)
            assert mine.checkpoint["channel_values"] == theirs.checkpoint["channel_values"]
            assert mine.pending_writes == theirs.pending_writes
            assert saver._driver.engine.library is None
            saver.setup()  # and setup() does not fail on it
        finally:
            client.close()
