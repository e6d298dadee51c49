"""Start and stop real Redis servers for tests, benchmarks and the demo (no pytest needed).

Every server runs ``redis-server`` from PATH (or ``binary=``) on a free 127.0.0.1 port, in its own temp dir,
with ``--save '' --appendonly no``; readiness = PING answered; teardown = SIGKILL + rmtree.

    from devkit.servers import start_standalone, start_cluster, start_sentinel, start_tls, client_kwargs

    with start_standalone() as s:                 # Server: host, port, url, proc, dir, stop()
        r = redis.Redis.from_url(s.url, **client_kwargs())
    # Cluster: nodes, startup_nodes, url, kill_node, primary_for_slot
    c = start_cluster(masters=3, replicas_per_master=1)
    rc = c.client()                               # redis.cluster.RedisCluster with test timeouts / no retry
    sen = start_sentinel()                        # Sentinel: sentinels [(host, port)], master_name, primary, replica
    m = sen.client().master_for(sen.master_name, **client_kwargs())
    t = start_tls()                               # TLSServer: url (rediss://), ca_file; t.client()

The process helper itself lives in ``redis_saver/demo_server.py`` (one implementation, also used by the demo).
redis-py is imported lazily, only by the ``client()`` helpers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis_saver import demo_server as _emb

LocalServer = _emb.LocalServer
ServerStartError = _emb.ServerStartError
free_port = _emb.free_port
resp_command = _emb.resp_command
find_server_binary = _emb.find_server_binary

Server = LocalServer  # fields: host, port, url, proc, dir; .stop(); context manager

__all__ = [
    "Cluster",
    "Sentinel",
    "Server",
    "ServerStartError",
    "TLSServer",
    "client_kwargs",
    "free_port",
    "resp_command",
    "start_cluster",
    "start_sentinel",
    "start_standalone",
    "start_tls",
]

LOOPBACK = "127.0.0.1"


def client_kwargs(socket_timeout: float = 2.0, connect_timeout: float = 2.0) -> dict[str, Any]:
    """redis-py client kwargs for tests: explicit timeouts and *no* retries (the default retry can stall ~60 s)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        "retry": Retry(NoBackoff(), 0),
    }


def async_client_kwargs(socket_timeout: float = 2.0, connect_timeout: float = 2.0) -> dict[str, Any]:
    """Same as ``client_kwargs`` but with the asyncio ``Retry`` class."""
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    return {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        "retry": Retry(NoBackoff(), 0),
    }


def _wait(pred, timeout: float, what: str, interval: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except Exception as e:  # noqa: BLE001 - server not ready yet
            last = e
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what} (last error: {last!r})")


def _info(server: LocalServer, section: str = "") -> dict[str, str]:
    raw = server.command("INFO", section) if section else server.command("INFO")
    if isinstance(raw, Exception):
        raise raw
    out: dict[str, str] = {}
    for line in raw.decode().splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v
    return out


# --------------------------------------------------------------------------- standalone


def start_standalone(binary: str | None = None, extra_args: Sequence[str] = ()) -> LocalServer:
    """A standalone server on a free loopback port. Use ``.stop()`` or ``with``."""
    return _emb.start_server(binary, extra_args)


# --------------------------------------------------------------------------- cluster


@dataclass
class Cluster:
    nodes: list[LocalServer]
    binary: str | None = None

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        """(host, port) of every node; ``[ClusterNode(h, p) for h, p in c.startup_nodes]`` for redis-py."""
        return [(n.host, n.port) for n in self.nodes]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def node(self, port: int) -> LocalServer:
        for n in self.nodes:
            if n.port == port:
                return n
        raise KeyError(port)

    def live_nodes(self) -> list[LocalServer]:
        return [n for n in self.nodes if n.alive()]

    def kill_node(self, port: int) -> None:
        """SIGKILL one node (its dir and nodes.conf stay, see ``restart_node``)."""
        self.node(port).kill()

    def restart_node(self, port: int, ready_timeout: float = 10.0) -> LocalServer:
        """Restart a killed node on the same port and dir (it rejoins from nodes.conf)."""
        old = self.node(port)
        old.kill()
        new = _emb.start_server(
            self.binary, _cluster_args(old.bus_port), port=port, dir=old.dir, ready_timeout=ready_timeout  # type: ignore[attr-defined]
        )
        new.owns_dir = True
        new.bus_port = old.bus_port  # type: ignore[attr-defined]
        self.nodes[self.nodes.index(old)] = new
        return new

    def slots(self) -> list[list[Any]]:
        """CLUSTER SLOTS from the first live node."""
        last: Any = None
        for n in self.live_nodes():
            try:
                r = n.command("CLUSTER", "SLOTS")
                if isinstance(r, list):
                    return r
                last = r
            except OSError as e:
                last = e
        raise RuntimeError(f"no live node answered CLUSTER SLOTS: {last!r}")

    def primary_for_slot(self, slot: int) -> LocalServer:
        """The node currently serving ``slot`` as primary (per CLUSTER SLOTS)."""
        for start, end, primary, *_ in self.slots():
            if start <= slot <= end:
                return self.node(int(primary[1]))
        raise KeyError(f"slot {slot} is not served")

    def primary_for_key(self, key: str | bytes) -> LocalServer:
        r = self.live_nodes()[0].command("CLUSTER", "KEYSLOT", key)
        return self.primary_for_slot(int(r))  # type: ignore[arg-type]

    def wait_ok(self, timeout: float = 20.0) -> None:
        _wait_cluster_ok(self.live_nodes(), timeout)

    def wait_failover(self, dead_port: int, timeout: float = 20.0) -> None:
        """After ``kill_node(dead_port)`` of a primary: wait until every live node has promoted a
        replica (no slot served by ``dead_port``) and reports ``cluster_state:ok`` (~2.3 s)."""

        def done() -> bool:
            for n in self.live_nodes():
                r = n.command("CLUSTER", "SLOTS")
                if not isinstance(r, list) or any(int(row[2][1]) == dead_port for row in r):
                    return False
            return True

        _wait(done, timeout, f"failover away from {dead_port}")
        self.wait_ok(timeout)

    def client(self, **kwargs: Any):
        """A ``redis.cluster.RedisCluster`` with test timeouts and no retry (override via kwargs)."""
        from redis.cluster import ClusterNode, RedisCluster

        opts = {**client_kwargs(), **kwargs}
        return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in self.startup_nodes], **opts)

    def async_client(self, **kwargs: Any):
        """A ``redis.asyncio.cluster.RedisCluster`` (call ``await rc.initialize()``, close with ``aclose()``)."""
        from redis.asyncio.cluster import ClusterNode, RedisCluster

        opts = {**async_client_kwargs(), **kwargs}
        return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in self.startup_nodes], **opts)

    def stop(self) -> None:
        for n in self.nodes:
            n.kill()
        for n in self.nodes:
            n.stop()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _cluster_args(bus_port: int) -> list[str]:
    return [
        "--cluster-enabled", "yes",
        "--cluster-config-file", "nodes.conf",
        "--cluster-port", str(bus_port),
        "--cluster-node-timeout", "1000",
        "--repl-diskless-sync-delay", "0",
    ]  # fmt: skip


def _wait_cluster_ok(nodes: list[LocalServer], timeout: float) -> None:
    def ok() -> bool:
        for n in nodes:
            r = n.command("CLUSTER", "INFO")
            if not isinstance(r, bytes) or b"cluster_state:ok" not in r:
                return False
        return True

    _wait(ok, timeout, "cluster_state:ok on every node")


def _start_cluster_node(binary: str | None) -> LocalServer:
    # The server port comes from start_server (retried on EADDRINUSE); the bus port is a second free port.
    for _ in range(5):
        bus = free_port()
        try:
            n = _emb.start_server(binary, _cluster_args(bus))
        except ServerStartError as e:
            if "already in use" in str(e):
                continue
            raise
        if n.port == bus:  # extremely unlikely collision: retry
            n.stop()
            continue
        n.bus_port = bus  # type: ignore[attr-defined]
        return n
    raise ServerStartError("could not start a cluster node (ports kept colliding)")


def start_cluster(
    masters: int = 3,
    replicas_per_master: int = 1,
    binary: str | None = None,
    timeout: float = 30.0,
) -> Cluster:
    """``masters * (1 + replicas_per_master)`` nodes, created with ``redis-cli --cluster create``.

    Returns once every node reports ``cluster_state:ok`` and (with replicas) every replica has
    ``master_link_status:up`` (about 2.1 s on this machine).
    """
    exe = find_server_binary(binary)
    cli = shutil.which("redis-cli", path=os.path.dirname(exe) + os.pathsep + os.environ.get("PATH", ""))
    if not cli:
        raise FileNotFoundError("redis-cli not found (needed for --cluster create)")
    nodes: list[LocalServer] = []
    cluster = Cluster(nodes=nodes, binary=exe)
    try:
        for _ in range(masters * (1 + replicas_per_master)):
            nodes.append(_start_cluster_node(exe))
        cmd = [cli, "--cluster", "create", *[f"{n.host}:{n.port}" for n in nodes],
               "--cluster-replicas", str(replicas_per_master), "--cluster-yes"]  # fmt: skip
        res = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        if res.returncode != 0 or "[OK] All 16384 slots covered" not in res.stdout:
            raise ServerStartError(f"redis-cli --cluster create failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
        _wait_cluster_ok(nodes, timeout)
        if replicas_per_master:

            def replicas_up() -> bool:
                n_up = 0
                for n in nodes:
                    info = _info(n, "replication")
                    if info.get("role") == "slave":
                        if info.get("master_link_status") != "up":
                            return False
                        n_up += 1
                return n_up == masters * replicas_per_master

            _wait(replicas_up, timeout, "replicas master_link_status:up")
        return cluster
    except BaseException:
        cluster.stop()
        raise


# --------------------------------------------------------------------------- sentinel


@dataclass
class Sentinel:
    primary: LocalServer
    replica: LocalServer
    sentinel_servers: list[LocalServer]
    master_name: str = "mymaster"

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        """(host, port) of the sentinels, as ``redis.sentinel.Sentinel`` expects."""
        return [(s.host, s.port) for s in self.sentinel_servers]

    @property
    def nodes(self) -> list[LocalServer]:
        return [self.primary, self.replica]

    def current_primary(self) -> tuple[str, int]:
        """Ask a sentinel for the current primary address."""
        for s in self.sentinel_servers:
            if not s.alive():
                continue
            with contextlib.suppress(OSError):
                r = s.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name)
                if isinstance(r, list) and len(r) == 2:
                    return r[0].decode(), int(r[1])
        raise RuntimeError("no sentinel knows the primary")

    def node(self, port: int) -> LocalServer:
        for n in [*self.nodes, *self.sentinel_servers]:
            if n.port == port:
                return n
        raise KeyError(port)

    def kill_node(self, port: int) -> None:
        self.node(port).kill()

    def client(self, **kwargs: Any):
        """A ``redis.sentinel.Sentinel``; then ``.master_for(s.master_name, **client_kwargs())``."""
        from redis.sentinel import Sentinel as RSentinel

        opts = {**client_kwargs(), **kwargs}
        return RSentinel(self.sentinels, sentinel_kwargs=dict(opts), **opts)

    def async_client(self, **kwargs: Any):
        from redis.asyncio.sentinel import Sentinel as ASentinel

        opts = {**async_client_kwargs(), **kwargs}
        return ASentinel(self.sentinels, sentinel_kwargs=dict(opts), **opts)

    def stop(self) -> None:
        for s in [*self.sentinel_servers, self.replica, self.primary]:
            s.stop()

    def __enter__(self) -> Sentinel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_sentinel(
    binary: str | None = None,
    master_name: str = "mymaster",
    n_sentinels: int = 3,
    quorum: int = 2,
    down_after_ms: int = 1000,
    failover_timeout_ms: int = 5000,
    timeout: float = 30.0,
    wait_discovery: bool = True,
) -> Sentinel:
    """1 primary + 1 replica + ``n_sentinels`` sentinels (``redis-server conf --sentinel``).

    With ``wait_discovery`` (default) returns once every sentinel sees the other sentinels and the
    replica (about 10 s: sentinels INFO the primary every 10 s).
    """
    exe = find_server_binary(binary)
    started: list[LocalServer] = []
    try:
        primary = _emb.start_server(exe)
        started.append(primary)
        replica = _emb.start_server(exe, ["--replicaof", primary.host, str(primary.port)])
        started.append(replica)
        sentinels: list[LocalServer] = []
        conf = (
            f"sentinel monitor {master_name} {primary.host} {primary.port} {quorum}\n"
            f"sentinel down-after-milliseconds {master_name} {down_after_ms}\n"
            f"sentinel failover-timeout {master_name} {failover_timeout_ms}\n"
        )
        for _ in range(n_sentinels):
            s = _emb.start_server(exe, conf_text=conf, conf_args=["--sentinel"])
            started.append(s)
            sentinels.append(s)
        result = Sentinel(primary=primary, replica=replica, sentinel_servers=sentinels, master_name=master_name)
        _wait(lambda: _info(replica, "replication").get("master_link_status") == "up", timeout, "replica link up")
        if wait_discovery:

            def discovered() -> bool:
                for s in sentinels:
                    r = s.command("SENTINEL", "MASTER", master_name)
                    if not isinstance(r, list):
                        return False
                    d = {r[i].decode(): r[i + 1] for i in range(0, len(r) - 1, 2)}
                    if int(d["num-other-sentinels"]) < n_sentinels - 1 or int(d["num-slaves"]) < 1:
                        return False
                return True

            _wait(discovered, timeout, "sentinels to discover each other and the replica", interval=0.1)
        return result
    except BaseException:
        for s in started:
            s.stop()
        raise


# --------------------------------------------------------------------------- TLS


@dataclass
class TLSServer:
    server: LocalServer
    ca_file: str
    cert_file: str
    key_file: str
    certs_dir: str = field(repr=False, default="")

    host = property(lambda self: self.server.host)
    port = property(lambda self: self.server.port)
    proc = property(lambda self: self.server.proc)
    dir = property(lambda self: self.server.dir)

    @property
    def url(self) -> str:
        return f"rediss://{self.server.host}:{self.server.port}/0"

    def client(self, **kwargs: Any):
        import redis

        opts = {**client_kwargs(), "ssl_ca_certs": self.ca_file, **kwargs}
        return redis.Redis.from_url(self.url, **opts)

    def stop(self) -> None:
        self.server.stop()
        shutil.rmtree(self.certs_dir, ignore_errors=True)

    def __enter__(self) -> TLSServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _openssl(*args: str, cwd: str) -> None:
    res = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{res.stderr}")


def make_certs(directory: str, host: str = LOOPBACK) -> tuple[str, str, str]:
    """Self-signed CA + server cert (SAN IP/DNS for ``host`` and localhost). Returns (ca, cert, key)."""
    if not shutil.which("openssl"):
        raise FileNotFoundError("openssl CLI not found (Debian: apt-get install -y openssl)")
    d = directory
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=redis-saver test CA",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=d)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={host}",
             "-keyout", "server.key", "-out", "server.csr", cwd=d)  # fmt: skip
    Path(d, "ext.cnf").write_text(f"subjectAltName=IP:{host},DNS:localhost\nbasicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "ext.cnf", "-out", "server.crt", cwd=d)  # fmt: skip
    return os.path.join(d, "ca.crt"), os.path.join(d, "server.crt"), os.path.join(d, "server.key")


def start_tls(binary: str | None = None, extra_args: Sequence[str] = ()) -> TLSServer:
    """A standalone server with ``--tls-port <free> --port 0`` and a fresh self-signed CA + cert.

    Clients need no certificate (``--tls-auth-clients no``); verify the server with ``ca_file``.
    """
    certs = tempfile.mkdtemp(prefix="redis-tls-")
    try:
        ca, cert, key = make_certs(certs)
        ctx = ssl.create_default_context(cafile=ca)
        args = ["--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca,
                "--tls-auth-clients", "no", *extra_args]  # fmt: skip
        server = _emb.start_server(binary, args, tls_port=True, ssl_context=ctx)
    except BaseException:
        shutil.rmtree(certs, ignore_errors=True)
        raise
    return TLSServer(server=server, ca_file=ca, cert_file=cert, key_file=key, certs_dir=certs)


if __name__ == "__main__":  # quick manual check: python devkit/servers.py
    t0 = time.monotonic()
    with start_standalone() as s:
        print("standalone", s.url, s.command("PING"), f"{time.monotonic() - t0:.2f}s")
