"""The previous release of redis_saver, importable beside the working tree's in the same process.

``load()`` extracts ``git archive <PREVIOUS_COMMIT> redis_saver lua`` into a temporary directory, renames the
package to ``PACKAGE`` (``redis_saver_0_1_0``) and imports it under that name, so ``bench/`` can put the
release and the working tree side by side in one interleaved run.

Why this works without touching the release's code paths: every intra-package import of 0.1.0 is
relative (``from .keys import ...``), so the renamed package only ever imports itself; and its scripts are
found by ``_scripts.lua_dir()``, which tries ``resources.files("redis_saver") / "lua"`` (the *installed*
package's copy) before ``<package dir>/../lua`` (a source checkout). The first lookup would name the
working tree's package, so the extracted copy gets one textual patch, ``resources.files("redis_saver")`` ->
``resources.files(__package__)``; with the ``lua/`` directory extracted next to the renamed package, the
release then loads exactly its own scripts. ``load()`` checks both (``lua_dir()`` and ``FORMAT_VERSION``).

Nothing under the repository's ``redis_saver/`` or ``lua/`` is read or changed; only git history is.
"""

from __future__ import annotations

import atexit
import importlib.util
import inspect
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType

from bench.infra import Unavailable

ROOT = Path(__file__).resolve().parent.parent
PREVIOUS_COMMIT = "ff43c4b"  # 0.1.0, as tests/compat/test_upgrade.py's OLD_RELEASE
PREVIOUS_VERSION = "0.1.0"
PREVIOUS_FORMAT = "3"
PACKAGE = "redis_saver_0_1_0"
LABEL = f"redis_saver {PREVIOUS_VERSION} (format {PREVIOUS_FORMAT})"

_PATCH = ('resources.files("redis_saver")', "resources.files(__package__)")
_loaded: ModuleType | None = None


def load() -> ModuleType:
    """The previous release as module ``PACKAGE`` (imported once per process); Unavailable if it can't be had."""
    global _loaded
    if _loaded is not None:
        return _loaded
    if PACKAGE in sys.modules:
        _loaded = sys.modules[PACKAGE]
        return _loaded
    got = subprocess.run(["git", "-C", str(ROOT), "archive", PREVIOUS_COMMIT, "redis_saver", "lua"],
                         capture_output=True)
    if got.returncode != 0:
        raise Unavailable(f"release {PREVIOUS_VERSION} ({PREVIOUS_COMMIT}) not in this checkout's git history: "
                          f"{got.stderr.decode(errors='replace').strip()[:200]}")
    tmp = Path(tempfile.mkdtemp(prefix="rsbench-prev-"))
    atexit.register(shutil.rmtree, tmp, True)
    with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.12 (and 3.10.12+ / 3.11.4+)
            tar.extractall(tmp, filter="data")
        else:  # pragma: no cover
            tar.extractall(tmp)
    pkg = tmp / PACKAGE
    (tmp / "redis_saver").rename(pkg)
    scripts = pkg / "_scripts.py"
    src = scripts.read_text()
    if _PATCH[0] in src:
        scripts.write_text(src.replace(*_PATCH))
    spec = importlib.util.spec_from_file_location(PACKAGE, pkg / "__init__.py", submodule_search_locations=[str(pkg)])
    if spec is None or spec.loader is None:
        raise Unavailable(f"cannot import the extracted {LABEL} from {pkg}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = mod
    try:
        spec.loader.exec_module(mod)
        lua = Path(sys.modules[f"{PACKAGE}._scripts"].lua_dir()).resolve()
    except Exception as e:
        sys.modules.pop(PACKAGE, None)
        raise Unavailable(f"import of the extracted {LABEL} failed: {type(e).__name__}: {e}") from e
    if mod.FORMAT_VERSION != PREVIOUS_FORMAT or lua != (tmp / "lua").resolve():
        raise Unavailable(f"extracted {PREVIOUS_COMMIT} is format {mod.FORMAT_VERSION} with scripts from {lua}; "
                          f"expected format {PREVIOUS_FORMAT} with {tmp / 'lua'}")
    _loaded = mod
    return mod


def savers() -> tuple[type, type]:
    """(RedisSaver, AsyncRedisSaver) of the previous release."""
    mod = load()
    return mod.RedisSaver, mod.AsyncRedisSaver


def supports(cls: type, option: str) -> bool:
    """Whether a saver class's constructor takes keyword ``option`` (e.g. the coming ``compress``)."""
    for klass in cls.__mro__:  # a constructor taking **options hands them to its base's
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            params = inspect.signature(init).parameters
        except (TypeError, ValueError):
            return False
        if option in params:
            return True
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return False
    return False
