"""Scripts cut short after each stage, and the script calls a saver sends: what bench/where.py
times (server time by stage of ``put_writes`` and ``put``) and tests/scripts/test_scripts.py keeps in
step with lua/ (each marker line must exist, in order). Shared here so the tests never import
bench/.

- ``BODY_START`` / ``STAGES``: the first line of ``put_writes+lean``'s own body and the lines
  before which the script is cut (``do return 0 end`` inserted), in order;
- ``PUT_BODY`` / ``PUT_STAGES`` / ``put_libraries()``: the function library with ``put``'s body
  cut before each stage (every variant a library of its own name);
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
    ("argument checks", "local rec = validate_record(raw)"),
    ("record validation, chain entry check", "for i = 1, nblobs do\n  local b = ARGV[12 + 2 * i]"),
    ("blob and stream argument checks", "check_format()\nlocal ns_e, cid_e"),
    ("meta read (one HMGET), format check", "local ns_e, cid_e = enc(ns), enc(cid)"),
    ("blob fields, blob / stream plan (HSTRLEN, HGET of stream records)", "-- Fencing: a namespace's head"),
    ("fencing (off: one comparison)", "-- validation done: writes start here"),
    ("meta init, first-put marks", "apply_blobs(blobs)"),
    ("writing blobs and stream frames (HSET, stream refs)", "store_cp(ns_e, cid_e, raw, rec, entry"),
    ("storing the record, its indexes (HSETNX, HINCRBY, 2 ZADD)", "if new_head then"),
]
PUT_BODY = "local function s_put()\n"


def put_libraries() -> list[tuple[str, str, str]]:
    """(label, FUNCTION LOAD source, put's function name) per variant: the function library
    with put's body cut before each PUT_STAGES line (every variant a library of its own name),
    the whole library, and an empty function with put's keys and arguments."""
    lib = _scripts.library()
    text = lib.source.decode()
    start = text.index(PUT_BODY) + len(PUT_BODY)
    end = text.index("\nlocal function s_", start)
    body = text[start:end]

    def cut(k: int, marker: str | None) -> tuple[str, str]:
        b = "do return 0 end\n" + body if marker is None else body.replace(marker, "do return 0 end\n" + marker, 1)
        name = f"{lib.name}_cut{k}"
        return (text[:start] + b + text[end:]).replace(lib.name, name), lib.functions["put"].replace(lib.name, name)

    empty = f"{lib.name}_empty"
    out = [("empty function (same keys and arguments)",
            f"#!lua name={empty}\nredis.register_function('{empty}_put', function(keys, argv) return 1 end)",
            f"{empty}_put"),
           ("+ per-call setup (keys, state)", *cut(0, None))]
    for k, (label, marker) in enumerate(PUT_STAGES, 1):
        assert body.count(marker) == 1, f"put.lua changed: marker {marker!r} not found once"
        out.append((f"+ {label}", *cut(k, marker)))
    out.append(("+ latest-only check, touch(): the whole script", text, lib.functions["put"]))
    return out


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
