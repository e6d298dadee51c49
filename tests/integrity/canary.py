"""A type the default serializer rebuilds by calling it: a planted payload naming it would run
code in the reader. ``CALLS`` records every call, so a test sees whether one was made."""

from __future__ import annotations

from dataclasses import dataclass

CALLS: list[str] = []


@dataclass
class Canary:
    note: str

    def __post_init__(self) -> None:
        CALLS.append(self.note)
