"""Scripts cut short after each stage, and the script calls a saver sends: what bench/where.py
times (server time by stage of ``put_writes`` and ``put``) and tests/scripts/test_scripts.py keeps in
step with lua/ (each marker line must exist, in order). Shared here so the tests never import
bench/.

- ``BODY_START`` / ``STAGES``: the first line of ``put_writes+lean``'s own body and the lines
  before which the script is cut (``do return 0 end`` inserted), in order;
- ``PUT_BODY`` / ``PUT_STAGES`` / ``put_libraries()``: the function library with ``put``'s body
  cut before each stage (every variant a library of its own name); ``GET_BODY`` / ``GET_STAGES`` /
  ``get_libraries()`` the same for ``get_tuple`` (bench/shard.py), ``cut_libraries()`` for either;
- ``script_calls(saver)``: the arguments of every script call a sync saver sends, as sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from redis_saver import RedisSaver
from redis_saver.core import scripts as _scripts

# the first line of put_writes+lean's own body (after the included helpers), and the lines
# before which the script is cut, in order (tests/scripts/test_scripts.py checks they exist)
BODY_START = "local ns, cid, task_e, path_e, n = ARGV[5]"
STAGES = [
    ("argument checks", "local last = 9 + 2 * n\nlocal chan_e = {}"),
    ("record validation", "local prefix = enc(ns)"),
    ("HGET of the lean mark", "local stored, members = 0, {}"),
    ("one HSETNX per regular write (the first wins), building the sort members", "-- the sort members of the regular"),
]


# put.lua (the function library's put), cut before each of these lines, in order (the test in
# tests/scripts/test_scripts.py checks they exist); the stage is what runs between a cut and the next
PUT_STAGES = [
    ("argument checks", "local rec = put_record(raw)"),
    ("record validation, chain entry check", "local ns_e, cid_e = enc(ns), enc(cid)"),
    ("blob and stream argument checks, stream records sorted", "check_format_put()\n\n-- Lost keys"),
    ("meta read (one HMGET), format check", "local got, lost = nil, META_DMG"),
    ("lost-key checks (one HMGET: the blob mark with the plan's stream records and directories), "
     "parent check, blob / stream plan", "-- Fencing: a namespace's head"),
    ("fencing (off: one comparison)", "-- validation done: writes start here"),
    ("meta init, first-put marks", "if blobs then\n  apply_blobs(blobs)"),
    ("writing blobs and stream frames (HSET, stream refs)", "local indexed = store_cp(ns_e, cid_e, raw, rec, entry"),
    ("storing the record, its indexes (HSETNX, HINCRBY, 2 ZADD)", "if new_head then"),
]
PUT_BODY = "local function s_put()\n"

# get_tuple.lua (the function library's get_tuple), cut before each of these lines, in order; the
# last entry is no cut but an edit: the whole script without its touch_read() (what the touch of
# the thread's keys costs is the step from it to the whole script)
GET_STAGES = [
    ("meta read (one HMGET), format check", "if check_counts() then return nil end"),
    ("thread-state checks (ZSCORE, HLEN, 2 ZCARD)", "local ns_e = enc(ns)\nlocal cid_e"),
    ("the latest id (one ZRANGE BYLEX)", "local raw = redis.call('HGET', K_CP, ns_e .. cid_e)"),
    ("the record (one HGET)", "local reply, streams, blobs = tuple_replies("),
]
# then tuple_replies() (the helper get_tuple and list answer with), cut before each of these lines
# with "do return nil end" (get_tuple then answers nil)
TUPLE_REPLIES = "local function tuple_replies(items, span, held)\n"
TUPLE_STAGES = [
    ("the versions decoded from the record (cmsgpack), the blob fields", "  local blobs = hmget(K_BLOB, bfields)"),
    ("the blobs (one HMGET)", "  local streams = fetch_streams(bfields, blobs, held)"),
    ("the stream directories and frames (2 HMGET)", "  local wfields, owner = {}, {}"),
    ("the writes (ZRANGE BYLEX, HMGET)", "  local out, checked, sent, sent_at = {}, false, {}, {}"),
]
GET_NO_TOUCH = ("the reply's tables, the reply", "touch_read(true)\nreturn out", "return out")
GET_BODY = "local function s_get_tuple()\n"


def _region(text: str, first_line: str) -> tuple[int, int]:
    """From after ``first_line`` to the next script function of the library."""
    start = text.index(first_line) + len(first_line)
    return start, text.index("\nlocal function s_", start)


def cut_libraries(script: str, body_start: str, stages: list[tuple[str, str]],
                  edit: tuple[str, str, str] | None = None, whole: str = "the whole script",
                  helper: tuple[str, list[tuple[str, str]]] | None = None) -> list[tuple[str, str, str]]:
    """(label, FUNCTION LOAD source, the function's name) per variant: the function library with
    ``script``'s body (from ``body_start``) cut before each stage's line (every variant a library of
    its own name), then ``helper`` (its first line, its stages: a helper the body calls last, cut
    with ``do return nil end``), then ``edit`` (label, old, new: one replacement in the body) if
    given, the whole library, and an empty function with the script's keys and arguments first."""
    lib = _scripts.library()
    text = lib.source.decode()
    start, end = _region(text, body_start)
    body = text[start:end]
    fname = lib.functions[script].removeprefix(lib.name + "_")

    def variant(k: int, b: str, at: tuple[int, int] = (start, end)) -> tuple[str, str]:
        name = f"{lib.name}_{fname}_cut{k}"
        return (text[:at[0]] + b + text[at[1]:]).replace(lib.name, name), lib.functions[script].replace(lib.name, name)

    empty = f"{lib.name}_{fname}_empty"
    out = [("empty function (same keys and arguments)",
            f"#!lua name={empty}\nredis.register_function('{empty}_{fname}', function(keys, argv) return 1 end)",
            f"{empty}_{fname}"),
           ("+ per-call setup (keys, state)", *variant(0, "do return 0 end\n" + body))]
    for k, (label, marker) in enumerate(stages, 1):
        assert body.count(marker) == 1, f"{script}.lua changed: marker {marker!r} not found once"
        out.append((f"+ {label}", *variant(k, body.replace(marker, "do return 0 end\n" + marker, 1))))
    k = len(stages)
    if helper is not None:
        h_start, h_end = _region(text, helper[0])
        h_body = text[h_start:h_end]
        for label, marker in helper[1]:
            assert h_body.count(marker) == 1, f"lua changed: marker {marker!r} not found once"
            k += 1
            out.append((f"+ {label}", *variant(k, h_body.replace(marker, "  do return nil end\n" + marker, 1),
                                               (h_start, h_end))))
    if edit is not None:
        label, old, new = edit
        assert body.count(old) == 1, f"{script}.lua changed: {old!r} not found once"
        out.append((f"+ {label}", *variant(k + 1, body.replace(old, new, 1))))
    out.append((f"+ {whole}", text, lib.functions[script]))
    return out


def put_libraries() -> list[tuple[str, str, str]]:
    """put's variants (``cut_libraries``), cut before each PUT_STAGES line."""
    return cut_libraries("put", PUT_BODY, PUT_STAGES, whole="latest-only check, touch(): the whole script")


def get_libraries() -> list[tuple[str, str, str]]:
    """get_tuple's variants (``cut_libraries``), cut before each GET_STAGES line, then its
    tuple_replies() before each TUPLE_STAGES line, then without its touch_read()."""
    return cut_libraries("get_tuple", GET_BODY, GET_STAGES, GET_NO_TOUCH, "touch_read(): the whole script",
                         (TUPLE_REPLIES, TUPLE_STAGES))


@contextmanager
def script_calls(saver: RedisSaver) -> Iterator[list[tuple]]:
    """The arguments of every script call ``saver`` sends and the server answers while in the
    block (FCALL: function, numkeys, keys..., arguments...), exactly as its sync driver sends them."""
    drv = saver._driver
    plain = drv._script
    sent: list[tuple] = []

    def record(command: str, args: Any) -> Any:
        out = plain(command, args)
        sent.append(tuple(args))
        return out

    drv._script = record  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        drv._script = plain  # type: ignore[method-assign]
