"""The build step of the Lua scripts: writes every script Redis runs into ``lua/build/``.

Run it after editing any ``lua/*.lua`` source::

    python -m devkit.luagen

(``bash scripts/gen-lua`` runs the same). It writes, for each ``lua/<name>.lua`` operation, the
script EVALSHA runs (``lua/build/<name>.lua``) and its variants (``<name>+rw``, ``<name>+forget``,
``<name>+lean``), and the function library FUNCTION LOAD loads (``lua/build/library.lua``). The
package reads those files and sends them as they are, so the code Redis runs, and the line a
script error names, are in files a reader can open. tests/scripts/test_luagen.py regenerates into
a temporary directory and fails when a file differs (a source edited without running this).

How a script is built from its source: its first line is a ``#!lua`` shebang (Redis 7 function
flags: ``flags=no-writes`` for reads, so they still run when the server is out of memory; none for
writes, so Redis refuses them *before* their first write when it is, except ``flags=allow-oom``
for the scripts that only delete, so an operator can still free memory), then ``--- @include
"_lib.lua"`` for per-thread scripts (``"_store_lib.lua"`` for the store's ``store_*.lua``), then a
``--[[ ... ]]`` header listing KEYS, ARGV and the reply (checked against the Python side by
tests/scripts/test_scripts.py).

Read scripts that may refresh a thread's TTL (``REFRESH == '1'``) get a second, writable variant
(same body, shebang without ``no-writes``) named ``<name>+rw``; a read marked ``--- @forget-variant``
(it forgets a damaged thread when ``REFRESH == 'f'``: "Lost keys" in ``lua/_lib_thread.lua``) a
third, ``<name>+forget``, flagged ``allow-oom`` (it only deletes). A script marked ``---
@lean-variant`` also gets ``<name>+lean``: the same text with the KEYS block of ``_lib.lua``
(between ``@keys-begin`` and ``@keys-end``) replaced by ``lua/_keys_lean.lua`` (2 keys, ``LEAN =
true``), and without the lines marked ``-- @full-only`` (nor the helpers only they use).

A library may include files of its own (``_lib.lua`` holds the per-call blocks and includes its
helpers by topic: ``_lib_records.lua``, ``_lib_thread.lua``, ``_lib_values.lua``,
``_lib_checkpoints.lua``): ``read_lib()`` puts them in its place, in order, without the lines that
start with ``--- `` (notes about a file, not sent). An included library keeps only the ``local
function`` definitions and one-name top-level locals the including script uses (directly or
through other helpers): Lua re-creates every function of a script and evaluates every top-level
local on each EVALSHA, so unused ones cost every call a few microseconds.

Each generated file's second line names its sources and this command (line 1 is the shebang, so
the lines of a file are the lines Redis numbers in an error).
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

from redis_saver.core.scripts import BUILD, LIBRARY_FILE, lua_dir

COMMAND = "python -m devkit.luagen"
_INCLUDE = re.compile(r'^--- @include "([^"]+)"$', re.MULTILINE)
_NOTE = re.compile(r"^--- (?!@)[^\n]*\n", re.MULTILINE)  # a library file's notes: not sent
_LIB_INCLUDE = '--- @include "_lib.lua"'  # a per-thread script (the saver's); others include their own library
_KEYS_BLOCK = re.compile(r"^-- @keys-begin.*?^-- @keys-end\n", re.MULTILINE | re.DOTALL)
_STATE_BLOCK = re.compile(r"^-- @state-begin.*?^-- @state-end\n", re.MULTILINE | re.DOTALL)
_SHEBANG_FLAGS = re.compile(r"flags=([a-z,-]+)")
_FULL_ONLY = re.compile(r"^[^\n]*-- @full-only[^\n]*\n", re.MULTILINE)
# a top-level helper: "local function name(" on one line ending with " end", or up to the
# first "end" at column 0 (the convention the lua/_lib*.lua files follow)
_FUNCTION = re.compile(
    r"^local function ([A-Za-z_][A-Za-z0-9_]*)\((?:[^\n]*\send\n|.*?^end\n)", re.MULTILINE | re.DOTALL
)
# a top-level local of one name on one line: dropped like a helper when nothing kept uses it,
# so its right-hand side must have no effect (the lua/_lib*.lua files' convention)
_LOCAL = re.compile(r"^local ([A-Za-z_][A-Za-z0-9_]*) = [^\n]*\n", re.MULTILINE)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COMMENT = re.compile(r"--\[\[.*?\]\]|--[^\n]*", re.DOTALL)


def _names(code: str) -> list[str]:
    """The identifiers in Lua code, comments left out (a name in a comment keeps nothing)."""
    return _NAME.findall(_COMMENT.sub("", code))


def definitions(library: str) -> dict[str, str]:
    """The top-level definitions shake() may drop: helpers and one-name locals, name -> text."""
    out = {m.group(1): m.group(0) for m in _LOCAL.finditer(_FUNCTION.sub("", library))}
    out.update((m.group(1), m.group(0)) for m in _FUNCTION.finditer(library))
    return out


def shake(library: str, user: str) -> str:
    """``library`` without the top-level functions and one-name locals that neither ``user``
    nor the kept code references (by name, transitively). Everything else is kept, in order;
    a name that only appears in a string keeps its definition (harmless). Lua runs a script's
    whole top level on every EVALSHA: each helper is a new closure, each local an evaluation."""
    defs = definitions(library)
    rest = _LOCAL.sub("", _FUNCTION.sub("", library))
    needed: set[str] = set()
    todo = set(_names(user)) | set(_names(rest))
    while todo:
        name = todo.pop()
        if name in defs and name not in needed:
            needed.add(name)
            todo |= set(_names(defs[name]))
    kept = _FUNCTION.sub(lambda m: m.group(0) if m.group(1) in needed else "", library)
    return _LOCAL.sub(lambda m: m.group(0) if m.group(1) in needed else "", kept)


def read_lib(name: str, d: Path | None = None) -> str:
    """The library file ``name`` as scripts include it: each of its own ``@include`` lines
    replaced by that file (read the same way), its ``--- `` notes left out."""
    d = d or lua_dir()
    text = _NOTE.sub("", (d / name).read_text())
    return _INCLUDE.sub(lambda m: read_lib(m.group(1), d).removesuffix("\n"), text)


def _expand(d: Path, text: str) -> str:
    """``text`` with each ``@include`` replaced by the library, shaken for ``text``."""
    return _INCLUDE.sub(lambda m: shake(read_lib(m.group(1), d), _INCLUDE.sub("", text)), text)


def _sources(d: Path, raw: str, base: str) -> list[str]:
    """The files a script is made of: its own, then each library it includes (nested ones too)."""
    out = [f"{base}.lua"]
    todo = _INCLUDE.findall(raw)
    while todo:
        name = todo.pop(0)
        if name not in out:
            out.append(name)
            todo += _INCLUDE.findall((d / name).read_text())
    return out


def _stamp(text: str, sources: list[str]) -> str:
    """``text`` with the line that says where it comes from after its shebang."""
    first, rest = text.split("\n", 1)
    names = ", ".join(f"lua/{s}" for s in sources)
    return f"{first}\n-- generated from {names} by `{COMMAND}`: do not edit (edit those, then run it)\n{rest}"


def scripts(d: Path | None = None) -> dict[str, str]:
    """Every EVALSHA script and variant, name -> text, as written to ``lua/build/<name>.lua``."""
    d = d or lua_dir()
    out: dict[str, str] = {}
    for path in sorted(d.glob("*.lua")):
        if path.name.startswith("_"):
            continue
        raw = path.read_text()
        name = path.stem
        sources = _sources(d, raw, name)
        text = _stamp(_expand(d, raw), sources)
        out[name] = text
        first, rest = text.split("\n", 1)
        if "no-writes" in first and "REFRESH == '1'" in rest:
            out[name + "+rw"] = "#!lua\n" + rest
        if "--- @forget-variant" in raw:
            # the forgetting variant: it only deletes (a damaged thread), so it runs even when
            # the server is out of memory, as delete_thread does
            out[name + "+forget"] = "#!lua flags=allow-oom\n" + rest
        if "--- @lean-variant" in raw:
            # without its @full-only lines, so the helpers only they use are shaken out too
            full_only_dropped = _expand(d, _FULL_ONLY.sub("", raw))
            lean, n = _KEYS_BLOCK.subn(lambda _: (d / "_keys_lean.lua").read_text(), full_only_dropped)
            if n != 1:
                raise ValueError(f"{path.name}: @lean-variant needs exactly one @keys block")
            out[name + "+lean"] = _stamp(lean, [*sources, "_keys_lean.lua"])
    return out


# ---- the function library ---------------------------------------------------------------
# The same scripts, loaded once per server with FUNCTION LOAD and run with FCALL: Lua then
# creates the included helpers' closures once, at load, instead of on every call (~60 of
# them, with their upvalues linked: a put spends about a quarter of its script time there as
# EVALSHA). The library is generated from the same files: _lib.lua's helpers and constants at
# its top level; the lines of its @keys and @state blocks (and _keys_lean.lua's) become
# assignments that run at the start of every call, their names declared once; each script's
# body becomes a function. Its name holds a digest of its text, so releases (or versions of
# the scripts) loaded into one server side by side never replace one another.

# the globals the scripts read (Lua's and Redis's), made upvalues of the library
_BUILTINS = ("string", "table", "math", "redis", "unpack", "ipairs", "pairs", "tonumber", "tostring", "error", "type")
_LINE_LOCAL = re.compile(r"^local ([A-Za-z_][A-Za-z0-9_]*(?:, [A-Za-z_][A-Za-z0-9_]*)*)(?: =(.*))?$", re.DOTALL)


def _per_call(block: str) -> tuple[list[str], str]:
    """The names a block of per-call lines declares, and its lines as assignments."""
    statements: list[str] = []
    for line in block.splitlines():
        if line.startswith((" ", "\t")) and statements:
            statements[-1] += "\n" + line  # a continuation line
        elif line.strip() and not line.startswith("--"):
            statements.append(line)
    names: list[str] = []
    out: list[str] = []
    for st in statements:
        m = _LINE_LOCAL.match(st)
        if not m:
            out.append("  " + st)  # a statement (a check): as it is
            continue
        names += m.group(1).split(", ")
        out.append(f"  {m.group(1)} = {m.group(2).strip() if m.group(2) is not None else 'nil'}")
    return names, "\n".join(out)


def _body(raw: str) -> str:
    """A script file's own code: without its shebang, @include and @lean-variant lines."""
    text = raw.split("\n", 1)[1]
    return "\n".join(line for line in text.split("\n") if not line.startswith("--- @"))


def _flags(first_line: str) -> list[str]:
    m = _SHEBANG_FLAGS.search(first_line)
    return m.group(1).split(",") if m else []


def _library_head(d: Path) -> tuple[list[str], str]:
    """The library's top: its upvalues, helpers and constants, and the begin_*() functions that
    set each call's state; and the text of the check that reads the builtins."""
    lib = read_lib("_lib.lua", d)
    keys_full = _KEYS_BLOCK.search(lib)
    state = _STATE_BLOCK.search(lib)
    if keys_full is None or state is None:
        raise ValueError("_lib.lua: the library needs its @keys and @state blocks")
    helpers = _STATE_BLOCK.sub("", _KEYS_BLOCK.sub("", lib))
    # the other libraries the scripts include (lua/_store_lib.lua): their helpers and constants
    # at the top level too (their names must not repeat _lib.lua's); no per-call blocks
    scripts = [p for p in d.glob("*.lua") if not p.name.startswith("_")]
    others = sorted({m for p in scripts for m in _INCLUDE.findall(p.read_text())} - {"_lib.lua"})
    helpers += "".join("\n" + read_lib(name, d) for name in others)
    full_names, full_init = _per_call(keys_full.group(0))
    lean_names, lean_init = _per_call((d / "_keys_lean.lua").read_text())
    state_names, state_init = _per_call(state.group(0))
    declared = list(dict.fromkeys(["KEYS", "ARGV", *full_names, *lean_names, *state_names]))
    used = set(_names(_COMMENT.sub("", lib + "".join(p.read_text() for p in d.glob("*.lua")))))
    builtins = [g for g in _BUILTINS if g in used]
    read_builtins = f"  if not {builtins[0]} then {', '.join(builtins)} = builtins() end"
    parts = [
        "#!lua name=@LIB@",
        f"-- generated from lua/*.lua by `{COMMAND}`: do not edit (edit those, then run it)",
        # a function reads a global through its library's environment, a table whose misses go
        # to the real globals (one lookup more per read): as upvalues they cost one read each.
        # FUNCTION LOAD runs the library where these globals do not exist yet: the first call
        # of each begin_*() reads them (builtins(), defined before the locals shadow them)
        "local register_function = redis.register_function",
        f"local function builtins() return {', '.join(builtins)} end",
        f"local {', '.join(builtins)}",
        "local " + ", ".join(declared),
        helpers,
    ]
    for begin, init in (("full", full_init + "\n" + state_init), ("lean", lean_init + "\n" + state_init), ("bare", "")):
        head = f"local function begin_{begin}(keys, argv)\n{read_builtins}\n  KEYS, ARGV = keys, argv"
        parts.append(f"{head}\n{init}\nend")
    return parts, read_builtins


def library(d: Path | None = None, built: dict[str, str] | None = None) -> str:
    """The function library's text, as written to ``lua/build/library.lua`` (its name in it)."""
    d = d or lua_dir()
    built = built if built is not None else scripts(d)
    parts, _ = _library_head(d)
    # one function per script, variants included (their rules live in scripts()): a "+rw" /
    # "+forget" variant shares its script's body, a "+lean" one has its own (no @full-only lines)
    registered: list[tuple[str, str, str, list[str]]] = []  # script name, body function, begin, flags
    for name, text in built.items():
        base, _, variant = name.partition("+")
        raw = (d / f"{base}.lua").read_text()
        body = f"s_{base}_lean" if variant == "lean" else f"s_{base}"
        if body not in {b for _, b, _, _ in registered}:
            code = _body(_FULL_ONLY.sub("", raw) if variant == "lean" else raw)
            parts.append(f"local function {body}()\n{code}\nend")
        begin = "begin_lean" if variant == "lean" else "begin_full" if _LIB_INCLUDE in raw else "begin_bare"
        registered.append((name, body, begin, _flags(text.split("\n", 1)[0])))
    for name, body, begin, flags in registered:
        fname = "@LIB@_" + name.replace("+", "__")
        flag_text = ", flags = {" + ", ".join(f"'{f}'" for f in flags) + "}" if flags else ""
        parts.append(
            f"register_function{{function_name = '{fname}', callback = function(keys, argv)"
            f" {begin}(keys, argv) return {body}() end{flag_text}}}"
        )
    text = "\n".join(parts) + "\n"
    lib_name = "redis_saver_" + hashlib.sha1(text.encode()).hexdigest()[:16]
    return text.replace("@LIB@", lib_name)


def build(d: Path | None = None) -> dict[str, str]:
    """Every file of ``lua/build/``: file name -> text."""
    d = d or lua_dir()
    built = scripts(d)
    out = {f"{name}.lua": text for name, text in built.items()}
    out[LIBRARY_FILE] = library(d, built)
    return out


def write(src: Path, out: Path) -> list[str]:
    """Write ``build(src)`` into ``out`` (made if missing; stale ``.lua`` files removed): the
    names of the files it changed, added or removed."""
    files = build(src)
    out.mkdir(parents=True, exist_ok=True)
    changed = []
    for old in out.glob("*.lua"):
        if old.name not in files:
            old.unlink()
            changed.append(old.name)
    for name, text in files.items():
        path = out / name
        if not path.exists() or path.read_bytes() != text.encode():
            path.write_bytes(text.encode())
            changed.append(name)
    return sorted(changed)


def main() -> int:
    src = Path(__file__).resolve().parents[1] / "lua"
    changed = write(src, src / BUILD)
    print(f"lua/{BUILD}/: " + (", ".join(changed) + " written" if changed else "up to date"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
