"""A throwaway PostgreSQL for the migrate tests: initdb into a temp dir, a free 127.0.0.1 port,
its unix socket in the temp dir; run as the ``postgres`` user when we are root (PostgreSQL
refuses to run as root). ``find_binaries()`` returns None when PostgreSQL is not installed."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass

from redis_saver.demo_server import free_port


def find_binaries() -> str | None:
    """The directory holding initdb and postgres, or None."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("postgres"):
        return os.path.dirname(on_path)
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(d, "initdb")) and os.path.exists(os.path.join(d, "postgres")):
            return d
    return None


class Unavailable(RuntimeError):
    """PostgreSQL cannot be started here (the reason is the message)."""


@dataclass
class PgServer:
    url: str
    dir: str
    proc: subprocess.Popen

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # smart shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def start_postgres() -> PgServer:
    bindir = find_binaries()
    if bindir is None:
        raise Unavailable("PostgreSQL binaries (initdb, postgres) not found on PATH or in /usr/lib/postgresql/*/bin")
    as_user: dict = {}  # subprocess's user/group: PostgreSQL refuses to run as root
    base = tempfile.mkdtemp(prefix="rs-cli-pg-")
    if os.geteuid() == 0:
        import pwd

        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(base, ignore_errors=True)
            raise Unavailable("running as root and there is no 'postgres' user to run PostgreSQL as") from None
        os.chown(base, pw.pw_uid, pw.pw_gid)
        as_user = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}

    data = os.path.join(base, "data")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    r = subprocess.run(
        [os.path.join(bindir, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"],
        capture_output=True, text=True, **as_user, env=env, cwd=base, check=False,
    )
    if r.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        raise Unavailable(f"initdb failed: {r.stderr.strip()[-500:]}")
    last = ""
    for _ in range(3):
        port = free_port()
        log = open(os.path.join(base, "postgres.log"), "wb")  # a file, not a pipe nobody drains
        proc = subprocess.Popen(
            [os.path.join(bindir, "postgres"), "-D", data, "-p", str(port), "-k", base,
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
             "-c", "full_page_writes=off", "-c", "max_connections=20", "-c", "shared_buffers=16MB"],
            stdout=subprocess.DEVNULL, stderr=log, **as_user, env=env, cwd=base,
        )
        log.close()
        url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        import psycopg

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with psycopg.connect(url, connect_timeout=2) as conn:
                    # ours, not another test worker's server that took the port meanwhile
                    row = conn.execute("SHOW data_directory").fetchone()
                    if row is not None and os.path.realpath(row[0]) == os.path.realpath(data):
                        return PgServer(url, base, proc)
                    last = f"port {port} answered by another server ({row[0] if row else '?'})"
                    time.sleep(0.1)
            except psycopg.OperationalError as exc:
                last = str(exc)
                time.sleep(0.1)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        with open(os.path.join(base, "postgres.log"), "rb") as f:
            last = f.read().decode(errors="replace") or last
    shutil.rmtree(base, ignore_errors=True)
    raise Unavailable(f"postgres did not start: {last.strip()[-500:]}")
