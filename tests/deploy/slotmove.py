"""One cluster slot moved between two primaries key by key, held at each stage on purpose
(as ``redis-cli --cluster reshard`` does it, only slower): ``CLUSTER SETSLOT <slot> IMPORTING``
on the target, ``MIGRATING`` on the source, ``MIGRATE ... KEYS`` for some or all of the slot's
keys, then ``SETSLOT <slot> NODE`` on every primary. Also clients that talk to one node as the
slot map stands: a plain one (redirections come back as errors) and one that sends ``ASKING``
before each command (what a cluster client does after an ``ASK``)."""

from __future__ import annotations

import uuid
from typing import Any

import redis
from redis.crc import key_slot  # the slot of a key, by its hash tag when it has one
from redis.exceptions import AskError, MovedError, TryAgainError

from devkit.servers import client_kwargs

# seconds a command to a node may take (a loaded machine is slow to answer MIGRATE and friends)
TIMEOUT = 10.0

# a node's answers that refuse a call before it runs: the slot is (partly) served elsewhere
REFUSALS = (AskError, MovedError, TryAgainError)


def thread_in_slot(keys: Any, slot: int, stem: str = "t") -> str:
    """A fresh thread id whose keys (schema ``keys``) live in ``slot``."""
    base = f"{stem}-{uuid.uuid4().hex[:8]}-"
    i = 0
    while True:
        tid = f"{base}{i}"
        if key_slot(keys.thread_keys(tid)[0]) == slot:
            return tid
        i += 1


class AskingRedis(redis.Redis):
    """A client of one node that sends ``ASKING`` before every command on its one connection:
    the node then serves a slot it is importing (pipelines are not covered: they go as a
    plain client's)."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        super().execute_command("ASKING")
        return super().execute_command(*args, **options)


class SlotMove:
    """Move ``slot`` from the primary that serves it to another primary of ``cluster``."""

    def __init__(self, cluster: Any, slot: int) -> None:
        self.cluster, self.slot = cluster, slot
        self.src = cluster.primary_for_slot(slot)
        primaries = {int(r[2][1]) for r in cluster.slots()}
        self.dst = cluster.node(min(p for p in primaries if p != self.src.port))
        self.primaries = [cluster.node(p) for p in sorted(primaries)]
        self.src_id = _text(self.src.command("CLUSTER", "MYID", timeout=TIMEOUT))
        self.dst_id = _text(self.dst.command("CLUSTER", "MYID", timeout=TIMEOUT))

    def open(self) -> None:
        """IMPORTING on the target, then MIGRATING on the source (redis-cli's order)."""
        _ok(self.dst.command("CLUSTER", "SETSLOT", self.slot, "IMPORTING", self.src_id, timeout=TIMEOUT))
        _ok(self.src.command("CLUSTER", "SETSLOT", self.slot, "MIGRATING", self.dst_id, timeout=TIMEOUT))

    def keys_at(self, node: Any) -> list[bytes]:
        return list(node.command("CLUSTER", "GETKEYSINSLOT", self.slot, 100_000, timeout=TIMEOUT))  # type: ignore[call-overload]

    def migrate(self, keys: list[bytes]) -> None:
        """MIGRATE these keys (those the source holds) to the target."""
        keys = [k for k in keys if k in set(self.keys_at(self.src))]
        if keys:
            _ok(self.src.command("MIGRATE", self.dst.host, self.dst.port, "", 0, 5000, "KEYS", *keys, timeout=TIMEOUT))

    def finish(self) -> None:
        """Every remaining key to the target, then the slot to the target on every primary."""
        self.migrate(self.keys_at(self.src))
        for n in [self.dst, self.src, *[p for p in self.primaries if p not in (self.src, self.dst)]]:
            _ok(n.command("CLUSTER", "SETSLOT", self.slot, "NODE", self.dst_id, timeout=TIMEOUT))

    def snapshot(self) -> dict[tuple[int, bytes], Any]:
        """Every key of the slot on both nodes: (node port, key) -> its DUMP."""
        out: dict[tuple[int, bytes], Any] = {}
        for n in (self.src, self.dst):
            c = self.client(n, asking=True)
            try:
                for k in self.keys_at(n):
                    out[(n.port, k)] = c.dump(k)
            finally:
                c.close()
        return out

    def client(self, node: Any, asking: bool = False) -> redis.Redis:
        """A client of one of the two nodes that follows no redirection."""
        if asking:
            return AskingRedis(
                host=node.host, port=node.port, single_connection_client=True, **client_kwargs(TIMEOUT, TIMEOUT)
            )
        return redis.Redis(host=node.host, port=node.port, **client_kwargs(TIMEOUT, TIMEOUT))


def _text(b: Any) -> str:
    return b.decode() if isinstance(b, bytes) else str(b)


def _ok(reply: Any) -> None:
    if isinstance(reply, Exception):
        raise reply
