"""The Lua scripts Redis runs: read from ``lua/build/``, addressed by SHA1.

Each ``lua/<name>.lua`` is one operation, written with includes and marks that a build step
(``python -m devkit.luagen``, run after editing any ``lua/*.lua``) turns into the files this
module reads: ``lua/build/<name>.lua`` for each script EVALSHA runs (and its variants:
``<name>+rw`` a read's writable twin, ``<name>+forget`` the one that forgets a damaged thread,
``<name>+lean`` put_writes' 2-key form), and ``lua/build/library.lua``, the same scripts as one
function library (FUNCTION LOAD, FCALL). What the engine sends is those files' bytes: the code
Redis runs, and the line a script error names, are in them. ``devkit/luagen.py`` explains how
each file is built.

The files are found inside the installed package (``redis_saver/lua``, put there by the wheel
build) or, from a source checkout, in ``lua/`` next to the package.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

BUILD = "build"  # the generated scripts' folder, in lua/
LIBRARY_FILE = "library.lua"
_LIB_INCLUDE = '--- @include "_lib.lua"'  # a per-thread script (the saver's); others include their own library
# where Redis says a script error happened: the script's SHA1 (EVALSHA, EVAL) or function name
# (FCALL), and the line
_WHERE = re.compile(r"\s*script: ([0-9A-Za-z_]+), on @user_(?:script|function):(\d+)\.?\s*$")


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
        """The same script for servers that reject ``#!lua`` lines (fakeredis, Redis < 7):
        its file without the first line (an error's line number is then one less)."""
        body = self.source.split(b"\n", 1)[1]
        return Script(self.name, body, hashlib.sha1(body).hexdigest(), self.writes, self.per_thread)


def _make(name: str, source: str, per_thread: bool = False) -> Script:
    data = source.encode()
    first = source.split("\n", 1)[0]
    return Script(name, data, hashlib.sha1(data).hexdigest(), "no-writes" not in first, per_thread)


@lru_cache(maxsize=1)
def load_all() -> dict[str, Script]:
    """Every script EVALSHA runs, variants included: name -> the file ``lua/build/<name>.lua``."""
    d = lua_dir()
    out: dict[str, Script] = {}
    for path in sorted((d / BUILD).glob("*.lua")):
        if path.name == LIBRARY_FILE:
            continue
        name = path.stem
        per_thread = _LIB_INCLUDE in (d / f"{name.partition('+')[0]}.lua").read_text()
        out[name] = _make(name, path.read_text(), per_thread)
    if not out:
        raise FileNotFoundError(f"redis_saver: no scripts in {d / BUILD} (run python -m devkit.luagen)")
    return out


@dataclass(frozen=True)
class Library:
    name: str
    source: bytes  # FUNCTION LOAD's argument: the file lua/build/library.lua
    functions: dict[str, str]  # script name -> function name


@lru_cache(maxsize=1)
def library() -> Library:
    """The function library: the same scripts, loaded once per server with FUNCTION LOAD and run
    with FCALL (Lua creates the helpers' closures once, at load, instead of on every call). Its
    name holds a digest of its text, so releases loaded into one server never replace one another;
    script ``x+y``'s function is ``<name>_x__y``."""
    source = (lua_dir() / BUILD / LIBRARY_FILE).read_bytes()
    name = source.split(b"\n", 1)[0].decode().removeprefix("#!lua name=")
    return Library(name, source, {s: f"{name}_{s.replace('+', '__')}" for s in load_all()})


def where(message: str) -> str:
    """A script error's message with Redis's "script: <sha>, on @user_script:<line>" turned
    into the file Redis ran and its line: "(lua/build/put.lua:120)"."""
    m = _WHERE.search(message)
    if m is None:
        return message
    ran, line = m.group(1), m.group(2)
    lib = library()
    if ran.startswith(lib.name):
        file = LIBRARY_FILE
    else:
        by_sha = {s.sha: n for n, s in load_all().items()} | {s.without_shebang().sha: n for n, s in load_all().items()}
        file = f"{by_sha[ran]}.lua" if ran in by_sha else ""
        if ran in by_sha and ran != load_all()[by_sha[ran]].sha:
            line = str(int(line) + 1)  # sent without its shebang line
    at = f"lua/{BUILD}/{file}:{line}" if file else f"script {ran}, line {line}"
    return f"{message[: m.start()]} ({at})"


# ---- what one engine runs ---------------------------------------------------------------
@dataclass(frozen=True)
class Registry:
    """The scripts one engine runs, by name, and the function library that holds them as
    functions (FCALL), or None (EVALSHA). The savers and the store run ``lua_scripts()``; the
    node cache its own (``cache/_core.scripts``)."""

    scripts: Mapping[str, Script]
    library: Library | None = None

    def plain(self) -> Registry:
        """For a server that refuses ``#!lua`` lines (fakeredis): the scripts without them, run
        with EVALSHA."""
        return Registry({name: s.without_shebang() for name, s in self.scripts.items()})


def lua_scripts(functions: bool = True) -> Registry:
    """Every script of ``lua/build/``, and (``functions``) their library."""
    if not isinstance(functions, bool):
        raise TypeError("functions must be a bool")
    return Registry(load_all(), library() if functions else None)
