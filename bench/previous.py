"""The previous release of redis_saver, installed beside the working tree and imported under its own name.

``load()`` builds the release from git history and installs it with pip into a directory of its own,
then imports it as an ordinary package, so ``bench/`` can put the release and the working tree side by
side in one interleaved run. Nothing is loaded by file path.

1. ``git archive <PREVIOUS_COMMIT> pyproject.toml README.md redis_saver lua`` into a scratch directory
   (as tests/compat/test_upgrade.py takes the older builds it runs);
2. the package is renamed ``PACKAGE`` (``redis_saver_0_1_0``), and so is the distribution
   (``redis-saver-0-1-0``), in the release's own ``pyproject.toml`` (hatchling, the release's build
   backend); one textual patch in ``_scripts.py``, ``resources.files("redis_saver")`` ->
   ``resources.files(__package__)``, so the release finds its own ``lua/`` (the wheel puts it inside the
   package) and never the working tree's. Every intra-package import of 0.1.0 is relative, so the
   renamed package only ever imports itself;
3. ``pip install --no-deps --target <TARGET>`` of that source (pip builds the wheel in an isolated
   build environment; the dependencies are the working tree's, already installed);
4. ``<TARGET>`` is appended to ``sys.path`` and ``PACKAGE`` imported; ``load()`` checks its
   ``FORMAT_VERSION`` and that its scripts come from the installed copy.

``<TARGET>`` is ``$TMPDIR/redis_saver-previous/<commit>-py<major><minor>``, kept between runs (a
complete install has a ``.complete`` marker; ``REDIS_SAVER_PREVIOUS_REINSTALL=1`` rebuilds it).
Nothing under the repository's ``redis_saver/`` or ``lua/`` is read or changed; only git history is.
"""

from __future__ import annotations

import importlib
import inspect
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType

from bench.infra import Unavailable

ROOT = Path(__file__).resolve().parent.parent
PREVIOUS_COMMIT = "ff43c4b"  # 0.1.0, as tests/compat/test_upgrade.py's OLD_RELEASES["0.1.0"]
PREVIOUS_VERSION = "0.1.0"
PREVIOUS_FORMAT = "3"
PACKAGE = "redis_saver_0_1_0"
DISTRIBUTION = "redis-saver-0-1-0"
LABEL = f"redis_saver {PREVIOUS_VERSION} (format {PREVIOUS_FORMAT})"
_PY = f"py{sys.version_info[0]}{sys.version_info[1]}"
TARGET = Path(tempfile.gettempdir()) / "redis_saver-previous" / f"{PREVIOUS_COMMIT}-{_PY}"

# (file in the renamed source, old, new): each old text must be there exactly once
_PATCHES = [
    (f"{PACKAGE}/_scripts.py", 'resources.files("redis_saver")', "resources.files(__package__)"),
    ("pyproject.toml", 'name = "redis-saver"', f'name = "{DISTRIBUTION}"'),
    ("pyproject.toml", 'packages = ["redis_saver"]', f'packages = ["{PACKAGE}"]'),
    ("pyproject.toml", '"lua" = "redis_saver/lua"', f'"lua" = "{PACKAGE}/lua"'),
]


def _source(into: Path) -> None:
    """The release's source, renamed and patched, in ``into``."""
    got = subprocess.run(["git", "-C", str(ROOT), "archive", PREVIOUS_COMMIT, "pyproject.toml", "README.md",
                          "redis_saver", "lua"], capture_output=True)
    if got.returncode != 0:
        raise Unavailable(f"release {PREVIOUS_VERSION} ({PREVIOUS_COMMIT}) not in this checkout's git history: "
                          f"{got.stderr.decode(errors='replace').strip()[:200]}")
    with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.12 (and 3.10.12+ / 3.11.4+)
            tar.extractall(into, filter="data")
        else:  # pragma: no cover
            tar.extractall(into)
    (into / "redis_saver").rename(into / PACKAGE)
    for name, old, new in _PATCHES:
        path = into / name
        text = path.read_text()
        if text.count(old) != 1:
            raise Unavailable(f"{PREVIOUS_COMMIT}'s {name} changed shape: {old!r} not found once")
        path.write_text(text.replace(old, new))


def install(target: Path = TARGET) -> Path:
    """The release installed in ``target`` (built and installed with pip unless already complete)."""
    if (target / ".complete").exists() and not os.environ.get("REDIS_SAVER_PREVIOUS_REINSTALL"):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="rsbench-prev-", dir=target.parent))
    try:
        src, staged = scratch / "src", scratch / "site"
        src.mkdir()
        _source(src)
        got = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                              "--no-deps", "--no-compile", "--target", str(staged), str(src)],
                             capture_output=True, text=True)
        if got.returncode != 0:
            raise Unavailable(f"pip could not install {LABEL} from {PREVIOUS_COMMIT}: {got.stderr.strip()[-400:]}")
        (staged / ".complete").write_text(f"{PREVIOUS_COMMIT}\n")
        shutil.rmtree(target, ignore_errors=True)
        staged.rename(target)  # whole, or not at all: a concurrent run sees no half install
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def load() -> ModuleType:
    """The previous release as module ``PACKAGE`` (installed and imported once per process); Unavailable if
    it can't be had."""
    if PACKAGE in sys.modules:
        return sys.modules[PACKAGE]
    target = install()
    if str(target) not in sys.path:
        sys.path.append(str(target))  # appended: it holds only PACKAGE, so it shadows nothing
    try:
        mod = importlib.import_module(PACKAGE)
        lua = Path(importlib.import_module(f"{PACKAGE}._scripts").lua_dir()).resolve()
    except Exception as e:
        sys.modules.pop(PACKAGE, None)
        raise Unavailable(f"import of the installed {LABEL} failed: {type(e).__name__}: {e}") from e
    if mod.FORMAT_VERSION != PREVIOUS_FORMAT or lua != (target / PACKAGE / "lua").resolve():
        raise Unavailable(f"installed {PREVIOUS_COMMIT} is format {mod.FORMAT_VERSION} with scripts from {lua}; "
                          f"expected format {PREVIOUS_FORMAT} with {target / PACKAGE / 'lua'}")
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
