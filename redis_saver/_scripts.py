"""The Lua scripts: loaded from ``lua/``, includes expanded, addressed by SHA1.

Each ``lua/<name>.lua`` is one operation. Its first line is a ``#!lua`` shebang (Redis 7
function flags: ``flags=no-writes`` for reads, so they still run when the server is out of
memory; none for writes, so Redis refuses them *before* their first write when it is, except
``flags=allow-oom`` for the scripts that only delete, so an operator can still free memory), then
``--- @include "_lib.lua"`` for per-thread scripts, then a ``--[[ ... ]]`` header listing
KEYS, ARGV and the reply (checked against the Python side by tests/scripts/test_scripts.py).

Read scripts that may refresh a thread's TTL (``REFRESH == '1'``) get a second, writable variant (same body,
shebang without ``no-writes``) named ``<name>+rw``. A script marked ``--- @lean-variant`` also
gets ``<name>+lean``: the same text with the KEYS block of ``_lib.lua`` (between ``@keys-begin``
and ``@keys-end``) replaced by ``lua/_keys_lean.lua`` (2 keys, ``LEAN = true``), and without the
lines marked ``-- @full-only`` (nor the helpers only they use).

An included library keeps only the ``local function`` definitions and one-name top-level
locals the including script uses (directly or through other helpers): Lua re-creates every
function of a script and evaluates every top-level local on each EVALSHA, so unused ones
cost every call a few microseconds.

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
_KEYS_BLOCK = re.compile(r"^-- @keys-begin.*?^-- @keys-end\n", re.MULTILINE | re.DOTALL)
_FULL_ONLY = re.compile(r"^[^\n]*-- @full-only[^\n]*\n", re.MULTILINE)
# a top-level helper: "local function name(" on one line ending with " end", or up to the
# first "end" at column 0 (the convention lua/_lib.lua follows)
_FUNCTION = re.compile(
    r"^local function ([A-Za-z_][A-Za-z0-9_]*)\((?:[^\n]*\send\n|.*?^end\n)", re.MULTILINE | re.DOTALL
)
# a top-level local of one name on one line: dropped like a helper when nothing kept uses it,
# so its right-hand side must have no effect (lua/_lib.lua's convention)
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
    src = Path(__file__).resolve().parent.parent / "lua"
    if src.is_dir():
        return src
    raise FileNotFoundError("redis_saver: cannot find the lua/ scripts (broken install?)")


@dataclass(frozen=True)
class Script:
    name: str
    source: bytes  # with shebang
    sha: str
    writes: bool

    def without_shebang(self) -> Script:
        """The same script for servers that reject ``#!lua`` lines (fakeredis, Redis < 7)."""
        body = self.source.split(b"\n", 1)[1]
        return Script(self.name, body, hashlib.sha1(body).hexdigest(), self.writes)


def _make(name: str, source: str) -> Script:
    data = source.encode()
    first = source.split("\n", 1)[0]
    return Script(name, data, hashlib.sha1(data).hexdigest(), "no-writes" not in first)


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
        out[name] = _make(name, text)
        first, rest = text.split("\n", 1)
        if "no-writes" in first and "REFRESH ==" in rest:
            out[name + "+rw"] = _make(name + "+rw", "#!lua\n" + rest)
        if "--- @lean-variant" in raw:
            # without its @full-only lines, so the helpers only they use are shaken out too
            full_only_dropped = _expand(d, _FULL_ONLY.sub("", raw))
            lean, n = _KEYS_BLOCK.subn(lambda _: (d / "_keys_lean.lua").read_text(), full_only_dropped)
            if n != 1:
                raise ValueError(f"{path.name}: @lean-variant needs exactly one @keys block")
            out[name + "+lean"] = _make(name + "+lean", lean)
    return out


def _expand(d: Path, text: str) -> str:
    """``text`` with each ``@include`` replaced by the library, shaken for ``text``."""
    return _INCLUDE.sub(lambda m: shake((d / m.group(1)).read_text(), _INCLUDE.sub("", text)), text)

