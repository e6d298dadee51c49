"""The Lua scripts: loaded from ``lua/``, includes expanded, addressed by SHA1.

Each ``lua/<name>.lua`` is one operation. Its first line is a ``#!lua`` shebang (Redis 7
function flags: ``flags=no-writes`` for reads, so they still run when the server is out of
memory; none for writes, so Redis refuses them *before* their first write when it is, except
``flags=allow-oom`` for the scripts that only delete, so an operator can still free memory), then
``--- @include "_lib.lua"`` for per-thread scripts (``"_store_lib.lua"`` for the store's
``store_*.lua``), then a ``--[[ ... ]]`` header listing
KEYS, ARGV and the reply (checked against the Python side by tests/scripts/test_scripts.py).

Read scripts that may refresh a thread's TTL (``REFRESH == '1'``) get a second, writable variant (same body,
shebang without ``no-writes``) named ``<name>+rw``; a read marked ``--- @forget-variant`` (it
forgets a damaged thread when ``REFRESH == 'f'``: "Lost keys" in ``lua/_lib_thread.lua``) a third,
``<name>+forget``, flagged ``allow-oom`` (it only deletes). A script marked ``--- @lean-variant`` also
gets ``<name>+lean``: the same text with the KEYS block of ``_lib.lua`` (between ``@keys-begin``
and ``@keys-end``) replaced by ``lua/_keys_lean.lua`` (2 keys, ``LEAN = true``), and without the
lines marked ``-- @full-only`` (nor the helpers only they use).

A library may include files of its own (``_lib.lua`` holds the per-call blocks and includes
its helpers by topic: ``_lib_records.lua``, ``_lib_thread.lua``, ``_lib_values.lua``,
``_lib_checkpoints.lua``): ``read_lib()`` puts them in its place, in order, without the lines
that start with ``--- `` (notes about a file, not sent). An included library keeps only the
``local function`` definitions and one-name top-level locals the including script uses
(directly or through other helpers): Lua re-creates every function of a script and evaluates
every top-level local on each EVALSHA, so unused ones cost every call a few microseconds.

The script files are found inside the installed package (``redis_saver/lua``, put there by
the wheel build) or, from a source checkout, in ``lua/`` next to the package.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

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


def lua_dir() -> Path:
    try:
        packaged = Path(str(resources.files("redis_saver") / "lua"))
        if packaged.is_dir():
            return packaged
    except (ModuleNotFoundError, TypeError):  # pragma: no cover
        pass
    src = Path(__file__).resolve().parents[2] / "lua"  # redis_saver/core/ -> the checkout
    if src.is_dir():
        return src
    raise FileNotFoundError("redis_saver: cannot find the lua/ scripts (broken install?)")


@dataclass(frozen=True)
class Script:
    name: str
    source: bytes  # with shebang
    sha: str
    writes: bool
    # a per-thread script (it includes _lib.lua): its ARGV[1..4] are the saver's header, the
    # thread id ARGV[2], which telemetry records as the span's thread; other scripts (the
    # cross-thread index, the store's, the node cache's) name no one thread
    per_thread: bool = False

    def without_shebang(self) -> Script:
        """The same script for servers that reject ``#!lua`` lines (fakeredis, Redis < 7)."""
        body = self.source.split(b"\n", 1)[1]
        return Script(self.name, body, hashlib.sha1(body).hexdigest(), self.writes, self.per_thread)


def _make(name: str, source: str, per_thread: bool = False) -> Script:
    data = source.encode()
    first = source.split("\n", 1)[0]
    return Script(name, data, hashlib.sha1(data).hexdigest(), "no-writes" not in first, per_thread)


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


@lru_cache(maxsize=1)
def load_all() -> dict[str, Script]:
    d = lua_dir()
    out: dict[str, Script] = {}
    for path in sorted(d.glob("*.lua")):
        if path.name.startswith("_"):
            continue
        raw = path.read_text()
        text = _expand(d, raw)
        name = path.stem
        t = _LIB_INCLUDE in raw
        out[name] = _make(name, text, t)
        first, rest = text.split("\n", 1)
        if "no-writes" in first and "REFRESH == '1'" in rest:
            out[name + "+rw"] = _make(name + "+rw", "#!lua\n" + rest, t)
        if "--- @forget-variant" in raw:
            # the forgetting variant: it only deletes (a damaged thread), so it runs even when
            # the server is out of memory, as delete_thread does
            out[name + "+forget"] = _make(name + "+forget", "#!lua flags=allow-oom\n" + rest, t)
        if "--- @lean-variant" in raw:
            # without its @full-only lines, so the helpers only they use are shaken out too
            full_only_dropped = _expand(d, _FULL_ONLY.sub("", raw))
            lean, n = _KEYS_BLOCK.subn(lambda _: (d / "_keys_lean.lua").read_text(), full_only_dropped)
            if n != 1:
                raise ValueError(f"{path.name}: @lean-variant needs exactly one @keys block")
            out[name + "+lean"] = _make(name + "+lean", lean, t)
    return out


def read_lib(name: str, d: Path | None = None) -> str:
    """The library file ``name`` as scripts include it: each of its own ``@include`` lines
    replaced by that file (read the same way), its ``--- `` notes left out."""
    d = d or lua_dir()
    text = _NOTE.sub("", (d / name).read_text())
    return _INCLUDE.sub(lambda m: read_lib(m.group(1), d).removesuffix("\n"), text)


def _expand(d: Path, text: str) -> str:
    """``text`` with each ``@include`` replaced by the library, shaken for ``text``."""
    return _INCLUDE.sub(lambda m: shake(read_lib(m.group(1), d), _INCLUDE.sub("", text)), text)



# ---- the function library ---------------------------------------------------------------
# The same scripts, loaded once per server with FUNCTION LOAD and run with FCALL: Lua then
# creates the included helpers' closures once, at load, instead of on every call (~60 of
# them, with their upvalues linked: a put spends about a quarter of its script time there as
# EVALSHA). The library is generated from the same files: _lib.lua's helpers and constants at
# its top level; the lines of its @keys and @state blocks (and _keys_lean.lua's) become
# assignments that run at the start of every call, their names declared once; each script's
# body becomes a function. Its name holds a digest of its text, so releases (or versions of
# the scripts) loaded into one server side by side never replace one another.


@dataclass(frozen=True)
class Library:
    name: str
    source: bytes  # FUNCTION LOAD's argument
    functions: dict[str, str]  # script name -> function name


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


def _flags(raw_first_line: str) -> list[str]:
    m = _SHEBANG_FLAGS.search(raw_first_line)
    return m.group(1).split(",") if m else []


@lru_cache(maxsize=1)
def library() -> Library:
    d = lua_dir()
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
        "-- generated by redis_saver/core/scripts.py library() from lua/*.lua: do not edit",
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
    # one function per script of load_all(), variants included (their rules live there): a
    # "+rw" / "+forget" variant shares its script's body, a "+lean" one has its own (no @full-only lines)
    registered: list[tuple[str, str, str, list[str]]] = []  # script name, body function, begin, flags
    for name, script in load_all().items():
        base, _, variant = name.partition("+")
        raw = (d / f"{base}.lua").read_text()
        body = f"s_{base}_lean" if variant == "lean" else f"s_{base}"
        if body not in {b for _, b, _, _ in registered}:
            code = _body(_FULL_ONLY.sub("", raw) if variant == "lean" else raw)
            parts.append(f"local function {body}()\n{code}\nend")
        begin = "begin_lean" if variant == "lean" else "begin_full" if _LIB_INCLUDE in raw else "begin_bare"
        registered.append((name, body, begin, _flags(script.source.split(b"\n", 1)[0].decode())))
    functions: dict[str, str] = {}
    for name, body, begin, flags in registered:
        fname = "@LIB@_" + name.replace("+", "__")
        functions[name] = fname
        flag_text = ", flags = {" + ", ".join(f"'{f}'" for f in flags) + "}" if flags else ""
        parts.append(
            f"register_function{{function_name = '{fname}', callback = function(keys, argv)"
            f" {begin}(keys, argv) return {body}() end{flag_text}}}"
        )
    text = "\n".join(parts) + "\n"
    lib_name = "redis_saver_" + hashlib.sha1(text.encode()).hexdigest()[:16]
    return Library(
        lib_name,
        text.replace("@LIB@", lib_name).encode(),
        {k: v.replace("@LIB@", lib_name) for k, v in functions.items()},
    )
