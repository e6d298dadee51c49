"""Hold a Redis Cluster hash slot open or half-moved by hand, as ``redis-cli --cluster reshard``
leaves it between its steps (no pytest needed: tests/scale and devkit/reshard.py use it).

    move = SlotMove(cluster, slot)        # from the node serving it to another primary
    move.open()                           # IMPORTING on the target, MIGRATING on the source
    move.migrate(move.keys()[:2])         # some keys moved (MIGRATE): the slot is half-moved
    move.finish()                         # the rest moved, the slot assigned to the target
    # or, before any key moved, move.cancel(): the slot stays on the source, stable

Every command goes straight to the nodes (``LocalServer.command``), not through a client.
"""

from __future__ import annotations

from typing import Any


def node_id(node: Any) -> str:
    return node.command("CLUSTER", "MYID").decode()  # type: ignore[no-any-return]


class SlotMove:
    """One slot's move from the primary serving it to ``target`` (default: another primary)."""

    def __init__(self, cluster: Any, slot: int, target: Any = None) -> None:
        self.cluster = cluster
        self.slot = slot
        self.source = cluster.primary_for_slot(slot)
        if target is None:
            primaries = {int(row[2][1]) for row in cluster.slots()}
            target = next(cluster.node(p) for p in sorted(primaries) if p != self.source.port)
        self.target = target
        self.source_id, self.target_id = node_id(self.source), node_id(target)

    def _ok(self, node: Any, *args: Any) -> None:
        reply = node.command(*args)
        if reply not in (b"OK", "OK", b"NOKEY"):
            raise RuntimeError(f"{' '.join(map(str, args))} on {node.port}: {reply!r}")

    def open(self) -> None:
        """The slot is migrating, no key moved yet."""
        self._ok(self.target, "CLUSTER", "SETSLOT", self.slot, "IMPORTING", self.source_id)
        self._ok(self.source, "CLUSTER", "SETSLOT", self.slot, "MIGRATING", self.target_id)

    def keys(self, count: int = 100_000) -> list[bytes]:
        """The keys of the slot still on the source."""
        return list(self.source.command("CLUSTER", "GETKEYSINSLOT", self.slot, count))  # type: ignore[arg-type]

    def migrate(self, keys: list[bytes]) -> None:
        """Move ``keys`` (of the slot, on the source) to the target."""
        for i in range(0, len(keys), 10):
            batch = keys[i : i + 10]
            if batch:
                self._ok(self.source, "MIGRATE", self.target.host, self.target.port, "", 0, 5000, "KEYS", *batch)

    def finish(self) -> None:
        """Every key left moved, the slot assigned to the target on every primary."""
        self.migrate(self.keys())
        self._ok(self.target, "CLUSTER", "SETSLOT", self.slot, "NODE", self.target_id)
        self._ok(self.source, "CLUSTER", "SETSLOT", self.slot, "NODE", self.target_id)
        for node in self.cluster.live_nodes():
            if node not in (self.source, self.target):
                node.command("CLUSTER", "SETSLOT", self.slot, "NODE", self.target_id)

    def cancel(self) -> None:
        """Before any key moved: the slot stays where it was, stable."""
        self._ok(self.target, "CLUSTER", "SETSLOT", self.slot, "STABLE")
        self._ok(self.source, "CLUSTER", "SETSLOT", self.slot, "STABLE")
