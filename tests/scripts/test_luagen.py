"""The Lua that runs is the Lua in the repository: ``lua/build/`` is what ``python -m devkit.luagen``
writes from ``lua/*.lua``, and what the saver sends to Redis is those files, byte for byte."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
import redis

from devkit import luagen
from redis_saver import RedisSaver
from redis_saver.core.engine import map_error
from redis_saver.core.scripts import BUILD, LIBRARY_FILE, library, load_all, lua_dir, where

BUILT = lua_dir() / BUILD


def test_the_build_folder_is_what_the_generator_writes(tmp_path: Path) -> None:
    changed = luagen.write(lua_dir(), tmp_path)
    assert changed == sorted(p.name for p in tmp_path.glob("*.lua"))  # a fresh folder: every file new
    differ = [p.name for p in tmp_path.glob("*.lua") if not (BUILT / p.name).exists()
              or (BUILT / p.name).read_bytes() != p.read_bytes()]
    stale = sorted({p.name for p in BUILT.glob("*.lua")} - {p.name for p in tmp_path.glob("*.lua")})
    assert not differ and not stale, (
        f"lua/build/ is out of date with lua/*.lua ({differ + stale}): run `python -m devkit.luagen` "
        "(or `bash scripts/gen-lua`) and commit lua/build/"
    )
    assert luagen.write(lua_dir(), tmp_path) == []  # a second run changes nothing


def test_every_generated_file_says_where_it_comes_from_and_how_to_rebuild() -> None:
    for path in BUILT.glob("*.lua"):
        first, second = path.read_text().split("\n", 2)[:2]
        assert first.startswith("#!lua"), path.name
        assert second.startswith("-- generated from lua/") and "`python -m devkit.luagen`: do not edit" in second


def test_the_package_reads_the_files_as_they_are() -> None:
    scripts = load_all()
    assert set(scripts) == {p.stem for p in BUILT.glob("*.lua")} - {Path(LIBRARY_FILE).stem}
    for name, script in scripts.items():
        data = (BUILT / f"{name}.lua").read_bytes()
        assert script.source == data and script.sha == hashlib.sha1(data).hexdigest(), name
    lib = library()
    assert lib.source == (BUILT / LIBRARY_FILE).read_bytes()
    assert lib.source.startswith(f"#!lua name={lib.name}\n".encode())
    # the name holds a digest of the text (releases loaded side by side never replace each other)
    assert re.fullmatch(r"redis_saver_[0-9a-f]{16}", lib.name)


def _library_code(client: Any, name: str) -> bytes:
    listed = client.execute_command("FUNCTION", "LIST", "LIBRARYNAME", name, "WITHCODE")
    assert len(listed) == 1
    info = listed[0] if isinstance(listed[0], dict) else dict(zip(listed[0][::2], listed[0][1::2], strict=True))
    info = {(k.decode() if isinstance(k, bytes) else k): v for k, v in info.items()}
    assert info["library_name"] in (name, name.encode())
    code = info["library_code"]
    return code if isinstance(code, bytes) else code.encode()


def test_the_server_runs_the_files(sync_client: Any, prefix: str) -> None:
    """After setup() and a few calls, the loaded library is lua/build/library.lua, and every
    script the server has cached under a script's SHA1 is that script's file."""
    sync_client.script_flush()
    saver = RedisSaver(sync_client, prefix=prefix)
    saver.setup()
    lib = library()
    assert _library_code(sync_client, lib.name) == (BUILT / LIBRARY_FILE).read_bytes()
    plain = RedisSaver(sync_client, prefix=prefix, functions=False)
    plain.setup()
    shas = {name: hashlib.sha1((BUILT / f"{name}.lua").read_bytes()).hexdigest() for name in load_all()}
    cached = sync_client.script_exists(*shas.values())
    assert all(cached), [n for n, ok in zip(shas, cached, strict=True) if not ok]
    assert {s.sha for s in load_all().values()} == set(shas.values())


@pytest.mark.parametrize("functions", [True, False])
def test_a_script_error_names_the_file_and_line_redis_ran(sync_client: Any, prefix: str, functions: bool) -> None:
    saver = RedisSaver(sync_client, prefix=prefix, functions=functions)
    saver.setup()
    fn, sha = library().functions["delete_thread"], load_all()["delete_thread"].sha
    command = ("FCALL", fn) if functions else ("EVALSHA", sha)
    with pytest.raises(redis.ResponseError) as info:
        sync_client.execute_command(*command, 1, f"{prefix}k")  # 1 key: the script wants 11
    err = map_error(info.value)  # the saver's exception, as the engine raises it
    text = str(err)
    m = re.search(r"\(lua/build/([^:]+):(\d+)\)$", text)
    assert isinstance(err, ValueError) and m and text.startswith("expected 11 keys"), text
    assert m.group(1) == (LIBRARY_FILE if functions else "delete_thread.lua")
    line = (BUILT / m.group(1)).read_text().splitlines()[int(m.group(2)) - 1]
    assert "error(" in line, line  # fail()'s error call: Redis names the line that raised


def test_an_error_without_redis_position_is_left_as_it_is() -> None:
    assert where("RS_BADARG bad ttl") == "RS_BADARG bad ttl"
