"""Script replies and error codes are named once (redis_saver/core/replies.py): each Lua header
writes a status code with its name (``2 [PRUNE_IN_PAGES]``) and lists its ``RS_<CODE>`` errors;
these tests check the headers against the names, both ways, and the errors against what each
script (as Redis runs it, helpers included) can raise."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path

from redis_saver.core.replies import REPLIES, Err
from redis_saver.core.scripts import BUILD, lua_dir
from redis_saver.errors import LUA_ERROR_CLASSES

HEADER = re.compile(r"--\[\[(.*?)\]\]", re.S)
TAGGED = re.compile(r'(-?\d+|"[^"\n]*") \[([A-Z][A-Z_]*)\]')
RAISED = re.compile(r"['\"](RS_[A-Z]+)")


def _scripts() -> dict[str, Path]:
    d = lua_dir()
    out = {p.stem: p for p in d.glob("*.lua") if not p.name.startswith("_")}
    out |= {f"cache/{p.stem}": p for p in (d / "cache").glob("*.lua")}
    return out


def _header(path: Path) -> tuple[str, str]:
    """A header's Returns text and its Errors text ("" when it has none)."""
    m = HEADER.search(path.read_text())
    assert m, f"{path.name} has no --[[ ... ]] header"
    text = m.group(1)
    returns, _, errors = text.partition("Errors:")
    return returns[returns.find("Returns") :] if "Returns" in returns else "", errors


def _value(member: Enum) -> int | str:
    v = member.value
    return v.decode() if isinstance(v, bytes) else v


def test_every_reply_code_a_header_names_is_in_the_registry_and_back() -> None:
    scripts = _scripts()
    assert set(REPLIES) <= set(scripts), set(REPLIES) - set(scripts)
    for name, path in scripts.items():
        returns, _ = _header(path)
        assert returns, f"{path.name}: no Returns in its header"
        tagged = {(tag, int(v) if not v.startswith('"') else v.strip('"')) for v, tag in TAGGED.findall(returns)}
        named = {(m.name, _value(m)) for enum in REPLIES.get(name, ()) for m in enum}
        assert tagged == named, (
            f"{path.name}: header codes not in redis_saver/core/replies.py: {sorted(tagged - named, key=str)}; "
            f"named codes its header does not write as <value> [<NAME>]: {sorted(named - tagged, key=str)}"
        )


def test_every_header_lists_the_errors_its_script_can_raise() -> None:
    """What Redis runs (lua/build/, helpers included) against the header's Errors: line."""
    built = lua_dir() / BUILD
    for name, path in _scripts().items():
        _, errors = _header(path)
        listed = set(re.findall(r"RS_[A-Z]+", errors))
        runs = built / f"{name}.lua" if not name.startswith("cache/") else path
        raised = set(RAISED.findall(runs.read_text()))
        assert listed == raised, f"{path.name}: header lists {sorted(listed)}, the script raises {sorted(raised)}"
        assert listed <= {e.value for e in Err}, f"{path.name}: {sorted(listed - {e.value for e in Err})} not named"


def test_every_named_error_is_raised_somewhere_and_maps_to_an_exception() -> None:
    raised = set().union(*(RAISED.findall(p.read_text()) for p in (lua_dir() / BUILD).glob("*.lua")))
    assert {e.value for e in Err} == raised
    assert set(LUA_ERROR_CLASSES) == set(Err)
