"""The operations an engine generator yields (``engine.py``) and a driver performs
(``transport/drivers.py``), and the type of such a generator (``Io``)."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class Cmd:
    """``client.<name>(*args, **kwargs)``: its reply."""

    name: str
    args: Sequence[Any] = ()
    kwargs: dict[str, Any] | None = None


@dataclass(slots=True)
class Pipe:
    """One non-transactional pipeline (replies and errors in order, nothing raised), on the
    client, or on one connection to the cluster node serving ``node_key``."""

    commands: list[tuple[Any, ...]]
    node_key: bytes | None = None


@dataclass(slots=True)
class Sleep:
    seconds: float


@dataclass(slots=True)
class Refresh:
    """Refresh a cluster client's slot map."""


@dataclass(slots=True)
class Scan:
    """The names of the keys matching ``pattern`` (every node of a cluster)."""

    pattern: bytes


@dataclass(slots=True)
class Targets:
    """``_policy.targets(client)``: the nodes to ask about the maxmemory policy."""


@dataclass(slots=True)
class Emit:
    """Items for the caller of ``iterate`` (``run`` drops them)."""

    items: list[Any]


Op = Cmd | Pipe | Sleep | Refresh | Scan | Targets | Emit
Io = Generator[Op, Any, T]  # an engine generator: yields operations, returns T
