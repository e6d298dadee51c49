"""The engine's decisions, driven by scripted server replies (no socket): the hot path's one
command, the EVAL fallback after NOSCRIPT, the function library loaded when a server lacks it,
EVALSHA for good when FCALL or FUNCTION LOAD is refused, the WAIT pipeline and its cluster
retry, retries after a lost connection, fan-outs, setup() and the memory-policy check."""

from __future__ import annotations

import hashlib
import warnings

import pytest
from redis.exceptions import ConnectionError, RedisError, ResponseError, TimeoutError

from redis_saver.core import engine as engine_mod
from redis_saver.core.engine import Cmd, Emit, Engine, Pipe, Refresh, Scan, Sleep, Targets, backoff
from redis_saver.core.plans import Call, IndexSlots, LoadScripts, Out
from redis_saver.core.replies import Err
from redis_saver.core.scripts import load_all, lua_scripts
from redis_saver.core.setup import setup
from redis_saver.errors import (
    LUA_ERROR_CLASSES,
    ConflictError,
    EvictionPolicyWarning,
    ReplicationTimeoutError,
    SchemaMismatchError,
    UnsupportedServerError,
)
from redis_saver.keys import FORMAT_VERSION, READ_FORMATS, SLOTS, KeySchema

from .scripted import (
    command,
    converse,
    engine,
    eval_,
    evalsha,
    fcall,
    fcall_denied,
    function_load,
    function_missing,
    moved,
    noscript,
)

KEYS = KeySchema("t").thread_keys("th")  # the 11 keys of every per-thread script, in keys.py's order
ARGS = [FORMAT_VERSION, "th", 0, "0", "1"]  # pin's header and its flag
PIN = Call("pin", KEYS, ARGS)


# ---- one script call ---------------------------------------------------------------------------
def test_fcall_is_the_one_command_of_a_call():
    assert converse(engine().call(PIN), [(fcall("pin", KEYS, ARGS), 1)]) == 1


def test_without_functions_a_call_is_one_evalsha():
    assert converse(engine(functions=False).call(PIN), [(evalsha("pin", KEYS, ARGS), 1)]) == 1


def test_noscript_is_answered_by_eval_of_the_scripts_body():
    e = engine(functions=False)
    turns = [(evalsha("pin", KEYS, ARGS), noscript()), (eval_("pin", KEYS, ARGS), 0)]
    assert converse(e.call(PIN), turns) == 0
    assert converse(e.call(PIN), [(evalsha("pin", KEYS, ARGS), 1)]) == 1  # EVALSHA again next time


def test_a_missing_library_is_loaded_and_the_call_sent_again():
    e = engine()
    turns = [(fcall("pin", KEYS, ARGS), function_missing()), (function_load(), b"lib"), (fcall("pin", KEYS, ARGS), 1)]
    assert converse(e.call(PIN), turns) == 1
    assert e.library is not None


def test_a_refused_function_load_leaves_evalsha_for_good():
    e = engine()
    turns = [
        (fcall("pin", KEYS, ARGS), function_missing()),
        (function_load(), ResponseError("NOPERM this user has no permissions to run the 'function|load' command")),
        (evalsha("pin", KEYS, ARGS), 1),
    ]
    assert converse(e.call(PIN), turns) == 1
    assert e.library is None
    assert converse(e.call(PIN), [(evalsha("pin", KEYS, ARGS), 0)]) == 0


@pytest.mark.parametrize(
    "refusal",
    [fcall_denied(), ResponseError("unknown command 'FCALL', with args beginning with: 'x' ")],
    ids=["acl", "unknown-command"],
)
def test_fcall_refused_goes_to_evalsha_without_loading_the_library(refusal):
    e = engine()
    turns = [
        (fcall("pin", KEYS, ARGS), refusal),
        (evalsha("pin", KEYS, ARGS), noscript()),
        (eval_("pin", KEYS, ARGS), 1),
    ]
    assert converse(e.call(PIN), turns) == 1
    assert e.library is None
    assert converse(e.call(PIN), [(evalsha("pin", KEYS, ARGS), 1)]) == 1


def test_a_library_flushed_again_right_after_loading_ends_in_eval():
    e = engine()
    turns = [
        (fcall("pin", KEYS, ARGS), function_missing()),
        (function_load(), b"lib"),
        (fcall("pin", KEYS, ARGS), function_missing()),
        (evalsha("pin", KEYS, ARGS), noscript()),
        (eval_("pin", KEYS, ARGS), 1),
    ]
    assert converse(e.call(PIN), turns) == 1
    assert e.library is not None  # loaded once: the next call tries FCALL again


def test_a_call_finding_another_load_under_way_goes_on_with_evalsha():
    e = engine()
    e._loading = True  # a concurrent call of the same saver is loading the library
    turns = [(fcall("pin", KEYS, ARGS), function_missing()), (evalsha("pin", KEYS, ARGS), 1)]
    assert converse(e.call(PIN), turns) == 1


@pytest.mark.parametrize("code", list(Err), ids=[e.value for e in Err])
def test_script_error_codes_become_the_savers_exceptions(code):
    reply = ResponseError(f"{code.value} thread 'th': what went wrong")
    with pytest.raises(LUA_ERROR_CLASSES[code]) as info:
        converse(engine().call(PIN), [(fcall("pin", KEYS, ARGS), reply)])
    assert str(info.value) == "thread 'th': what went wrong"
    assert info.value.__cause__ is reply  # the server's own error stays reachable


def test_other_server_errors_reach_the_caller_unchanged():
    reply = ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
    with pytest.raises(ResponseError) as info:
        converse(engine().call(PIN), [(fcall("pin", KEYS, ARGS), reply)])
    assert info.value is reply


# ---- WAIT ----------------------------------------------------------------------------------------
WAITED = Call("pin", KEYS, ARGS, wait=(2, 500))


def test_wait_goes_in_one_pipeline_with_the_script():
    pipe = Pipe([command("FCALL", "pin", KEYS, ARGS), ("WAIT", 2, 500)])
    assert converse(engine().call(WAITED), [(pipe, [1, 2])]) == 1


def test_wait_short_of_replicas_raises_replication_timeout():
    pipe = Pipe([command("FCALL", "pin", KEYS, ARGS), ("WAIT", 2, 500)])
    with pytest.raises(ReplicationTimeoutError) as info:
        converse(engine().call(WAITED), [(pipe, [1, 1])])
    assert info.value.acked == 1


def test_wait_pipeline_after_noscript_sends_eval_and_wait_again():
    first = Pipe([command("EVALSHA", "pin", KEYS, ARGS), ("WAIT", 2, 500)])
    again = Pipe([command("EVAL", "pin", KEYS, ARGS), ("WAIT", 2, 500)])
    assert converse(engine(functions=False).call(WAITED), [(first, [noscript(), 0]), (again, [1, 2])]) == 1


def test_wait_pipeline_after_a_missing_library_loads_it_and_sends_both_again():
    pipe = Pipe([command("FCALL", "pin", KEYS, ARGS), ("WAIT", 2, 500)])
    turns = [(pipe, [function_missing(), 0]), (function_load(), b"lib"), (pipe, [1, 2])]
    assert converse(engine().call(WAITED), turns) == 1


def test_wait_pipeline_with_fcall_denied_goes_again_as_eval():
    first = Pipe([command("FCALL", "pin", KEYS, ARGS), ("WAIT", 2, 500)])
    again = Pipe([command("EVAL", "pin", KEYS, ARGS), ("WAIT", 2, 500)])
    e = engine()
    assert converse(e.call(WAITED), [(first, [fcall_denied(), 0]), (again, [1, 2])]) == 1
    assert e.library is None


def test_cluster_wait_redirected_refreshes_the_slot_map_and_goes_again_to_the_threads_node():
    pipe = Pipe([command("FCALL", "pin", KEYS, ARGS), ("WAIT", 2, 500)], KEYS[0])
    turns = [(pipe, [moved(), 0]), (Refresh(), None), (pipe, [1, 2])]
    assert converse(engine(cluster=True).call(WAITED), turns) == 1


def test_cluster_wait_on_a_lost_node_backs_off_when_the_slot_map_cannot_be_refreshed():
    pipe = Pipe([command("FCALL", "pin", KEYS, ARGS), ("WAIT", 2, 500)], KEYS[0])
    turns = [
        (pipe, ConnectionError("reset by peer")),
        (Refresh(), RedisError("no node answers")),
        (Sleep(backoff(0)), None),
        (pipe, [1, 2]),
    ]
    assert converse(engine(cluster=True).call(WAITED), turns) == 1


def test_cluster_wait_still_redirected_after_every_attempt_raises_the_redirect():
    pipe = Pipe([command("FCALL", "pin", KEYS, ARGS), ("WAIT", 2, 500)], KEYS[0])
    turns: list = []
    for attempt in range(engine_mod.CLUSTER_ATTEMPTS):
        turns.append((pipe, [moved(), 0]))
        if attempt < engine_mod.CLUSTER_ATTEMPTS - 1:
            turns.append((Refresh(), None))
    with pytest.raises(ResponseError, match="3999"):
        converse(engine(cluster=True).call(WAITED), turns)


def test_cluster_wait_timing_out_on_every_attempt_raises_the_timeout():
    pipe = Pipe([command("FCALL", "pin", KEYS, ARGS), ("WAIT", 2, 500)], KEYS[0])
    turns: list = []
    for attempt in range(engine_mod.CLUSTER_ATTEMPTS):
        turns.append((pipe, TimeoutError("read timed out")))
        if attempt < engine_mod.CLUSTER_ATTEMPTS - 1:
            turns.append((Refresh(), None))
    with pytest.raises(TimeoutError):
        converse(engine(cluster=True).call(WAITED), turns)


# ---- retries after a lost connection -------------------------------------------------------------
def _plan(*steps):
    replies = []
    for step in steps:
        replies.append((yield step))
    return replies


def test_a_lost_connection_is_retried_after_a_growing_backoff():
    e = engine(retries=2)
    turns = [
        (fcall("pin", KEYS, ARGS), ConnectionError("reset")),
        (Sleep(0.05), None),
        (fcall("pin", KEYS, ARGS), ConnectionError("reset")),
        (Sleep(0.1), None),
        (fcall("pin", KEYS, ARGS), 1),
    ]
    assert converse(e.drive(_plan(PIN)), turns) == [1]


def test_the_last_retry_failing_reaches_the_caller():
    turns = [(fcall("pin", KEYS, ARGS), ConnectionError("reset")), (Sleep(0.05), None)]
    turns.append((fcall("pin", KEYS, ARGS), ConnectionError("still down")))
    with pytest.raises(ConnectionError, match="still down"):
        converse(engine(retries=1).drive(_plan(PIN)), turns)


def test_without_retries_a_lost_connection_is_not_retried():
    with pytest.raises(ConnectionError):
        converse(engine().drive(_plan(PIN)), [(fcall("pin", KEYS, ARGS), ConnectionError("reset"))])


def test_a_timeout_is_never_retried():
    with pytest.raises(TimeoutError):
        converse(engine(retries=3).drive(_plan(PIN)), [(fcall("pin", KEYS, ARGS), TimeoutError("slow"))])


def test_the_backoff_doubles_up_to_half_a_second():
    assert [backoff(a) for a in range(6)] == [0.05, 0.1, 0.2, 0.4, 0.5, 0.5]


# ---- fan-outs, plain reads, items --------------------------------------------------------------
OTHER = KeySchema("t").thread_keys("other")


def test_a_fanout_after_noscript_sends_one_body_per_script_then_only_bodies():
    calls = [PIN, Call("pin", OTHER, ARGS), Call("delete_thread", KEYS, ARGS[:4])]
    e = engine(functions=False)
    sent = Pipe([command("EVALSHA", c.script, c.keys, c.args) for c in calls])
    first_again = Pipe(
        [
            command("EVAL", "pin", KEYS, ARGS),
            command("EVALSHA", "pin", OTHER, ARGS),
            command("EVAL", "delete_thread", KEYS, ARGS[:4]),
        ]
    )
    last = Pipe([command("EVAL", "pin", OTHER, ARGS)])
    turns = [(sent, [noscript()] * 3), (first_again, [1, noscript(), 2]), (last, [0])]
    assert converse(e.batch(calls), turns) == [1, 0, 2]


def test_a_fanout_goes_in_chunks(monkeypatch):
    monkeypatch.setattr(engine_mod, "PIPELINE_CHUNK", 2)
    calls = [Call("pin", KeySchema("t").thread_keys(str(i)), ARGS) for i in range(3)]
    turns = [
        (Pipe([command("FCALL", "pin", c.keys, c.args) for c in calls[:2]]), [1, 0]),
        (Pipe([command("FCALL", "pin", calls[2].keys, calls[2].args)]), [1]),
    ]
    assert converse(engine().batch(calls), turns) == [1, 0, 1]


def test_a_fanout_raises_the_first_script_error_mapped():
    calls = [PIN, Call("pin", OTHER, ARGS)]
    pipe = Pipe([command("FCALL", "pin", c.keys, c.args) for c in calls])
    reply = ResponseError("RS_CONFLICT stale")
    with pytest.raises(ConflictError, match="stale") as info:
        converse(engine().batch(calls), [(pipe, [1, reply])])
    assert info.value.__cause__ is reply


def test_a_plain_read_is_retried_and_its_pipeline_errors_raised():
    read = Pipe([("MGET", b"a", b"b")])
    turns = [(read, ConnectionError("reset")), (Sleep(0.05), None), (read, [[b"1", None]])]
    assert converse(engine(retries=1).drive(_plan(read)), turns) == [[[b"1", None]]]
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        converse(engine().drive(_plan(read)), [(read, [ResponseError("WRONGTYPE")])])


def test_a_plans_items_reach_the_caller_as_emit():
    def plan():
        yield Out(["a", "b"])
        return 7

    assert converse(engine().drive(plan()), [(Emit(["a", "b"]), None)]) == 7


def test_index_slots_scans_a_small_keyspace_and_asks_every_slot_of_a_large_one():
    keys = KeySchema("t")
    found = [keys.index_keys(9)[0], keys.index_keys(3)[0], keys.index_keys(9)[1]]
    small = [(Cmd("dbsize"), 10), (Scan(keys.index_pattern()), found)]
    assert converse(engine().drive(_plan(IndexSlots())), small) == [[3, 9]]
    large = [(Cmd("dbsize"), engine_mod.SCAN_MAX_KEYS + 1)]
    assert converse(engine().drive(_plan(IndexSlots())), large) == [list(range(SLOTS))]


# ---- setup() and the memory policy ---------------------------------------------------------------
def _setup_turns(stored):
    key = KeySchema("t").schema_key()
    loads = [(Cmd("script_load", (s.source,)), s.sha) for s in load_all().values()]
    record = [(Cmd("set", (key, FORMAT_VERSION), {"nx": True}), None), (Cmd("get", (key,)), stored)]
    return [*loads, (function_load(), b"lib"), *record]


def test_setup_loads_every_script_and_the_library_then_records_the_format():
    assert converse(setup(engine()), _setup_turns(FORMAT_VERSION.encode())) is None


def test_setup_on_an_older_readable_format_records_this_one():
    older = [f for f in READ_FORMATS if f != FORMAT_VERSION]
    turns = [*_setup_turns(older[0].encode()), (Cmd("set", (KeySchema("t").schema_key(), FORMAT_VERSION)), True)]
    assert converse(setup(engine()), turns) is None


def test_setup_refuses_a_format_it_does_not_read():
    with pytest.raises(SchemaMismatchError, match="'99'"):
        converse(setup(engine()), _setup_turns(b"99"))


def test_setup_on_a_server_refusing_shebang_lines_says_it_is_unsupported():
    first = next(iter(load_all().values()))
    refusal = ResponseError("Error compiling script (new function): user_script:1: unexpected symbol near '#'")
    with pytest.raises(UnsupportedServerError, match="Redis >= 7.0"):
        converse(setup(engine()), [(Cmd("script_load", (first.source,)), refusal)])


def test_the_memory_policy_is_asked_once_after_the_first_call():
    e = engine()
    e.set_eviction_check("warn")
    turns = [
        (fcall("pin", KEYS, ARGS), 1),
        (Targets(), [("", {})]),
        (Cmd("config_get", ("maxmemory-policy",), {}), ResponseError("ERR unknown command 'CONFIG'")),
        (Cmd("info", ("memory",), {}), {"maxmemory_policy": "allkeys-lru"}),
    ]
    with pytest.warns(EvictionPolicyWarning, match="allkeys-lru"):
        assert converse(e.drive(_plan(PIN)), turns) == [1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert converse(e.drive(_plan(PIN)), [(fcall("pin", KEYS, ARGS), 1)]) == [1]


def test_eviction_check_raise_refuses_before_the_call_until_the_policy_is_fixed():
    e = engine()
    e.set_eviction_check("raise")
    config_get = Cmd("config_get", ("maxmemory-policy",), {})
    ask = [(Targets(), [("", {})]), (config_get, {b"maxmemory-policy": b"allkeys-lfu"})]
    with pytest.raises(UnsupportedServerError, match="allkeys-lfu"):
        converse(e.drive(_plan(PIN)), ask)
    fixed = [(Targets(), [("", {})]), (config_get, {"maxmemory-policy": "noeviction"})]
    assert converse(e.drive(_plan(PIN)), [*fixed, (fcall("pin", KEYS, ARGS), 1)]) == [1]


# ---- the registry, and the store's setup step ------------------------------------------------------
STORE_SCRIPTS = [s for name, s in load_all().items() if name.startswith("store_")]


def test_load_scripts_loads_the_library_only():
    assert converse(engine().drive(_plan(LoadScripts("store_"))), [(function_load(), b"lib")]) == [None]


def test_load_scripts_where_function_load_is_refused_loads_the_named_scripts():
    e = engine()
    turns = [(function_load(), ResponseError("NOPERM no permissions to run the 'function|load' command"))]
    turns += [(Cmd("script_load", (s.source,)), s.sha) for s in STORE_SCRIPTS]
    assert converse(e.drive(_plan(LoadScripts("store_"))), turns) == [None]
    assert e.library is None and STORE_SCRIPTS


def test_load_scripts_without_functions_loads_the_named_scripts():
    turns = [(Cmd("script_load", (s.source,)), s.sha) for s in STORE_SCRIPTS]
    assert converse(engine(functions=False).drive(_plan(LoadScripts("store_"))), turns) == [None]


def test_a_registry_for_servers_refusing_shebang_lines_runs_plain_evalsha():
    plain = lua_scripts().plain()
    assert plain.library is None and plain.scripts.keys() == load_all().keys()
    body = load_all()["pin"].source.split(b"\n", 1)[1]
    assert plain.scripts["pin"].source == body and plain.scripts["pin"].sha == hashlib.sha1(body).hexdigest()
    e = Engine(KeySchema("t"), plain)
    assert converse(e.call(PIN), [(Cmd("evalsha", (plain.scripts["pin"].sha, 11, *KEYS, *ARGS)), 1)]) == 1


def test_an_engine_without_a_key_schema_serves_no_saver_setup():
    e = Engine(None, lua_scripts())
    with pytest.raises(TypeError, match="no key schema"):
        converse(e.drive(_plan(IndexSlots())), [])


def test_the_functions_option_must_be_a_bool():
    with pytest.raises(TypeError, match="functions must be a bool"):
        lua_scripts("yes")  # type: ignore[arg-type]
