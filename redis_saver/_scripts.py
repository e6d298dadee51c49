"""The Lua scripts: loaded from ``lua/``, includes expanded, addressed by SHA1.

Each ``lua/<name>.lua`` is one operation. Its first line is a ``#!lua`` shebang (Redis 7
function flags: ``flags=no-writes`` for reads, so they still run when the server is out of
memory; none for writes, so Redis refuses them *before* their first write when it is), then
``--- @include "_lib.lua"`` for per-thread scripts, then a ``--[[ ... ]]`` header listing
KEYS, ARGV and the reply (checked against the Python side by tests/test_scripts.py).

Read scripts that may refresh a thread's TTL (``REFRESH == '1'``) get a second, writable variant (same body,
shebang without ``no-writes``) named ``<name>+rw``.

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


@lru_cache(maxsize=1)
def load_all() -> dict[str, Script]:
    d = lua_dir()
    out: dict[str, Script] = {}
    for path in sorted(d.glob("*.lua")):
        if path.name.startswith("_"):
            continue
        text = path.read_text()

        def expand(m: re.Match[str]) -> str:
            return (d / m.group(1)).read_text()

        text = _INCLUDE.sub(expand, text)
        name = path.stem
        out[name] = _make(name, text)
        first, rest = text.split("\n", 1)
        if "no-writes" in first and "REFRESH ==" in rest:
            out[name + "+rw"] = _make(name + "+rw", "#!lua\n" + rest)
    return out


def script(name: str) -> Script:
    return load_all()[name]
