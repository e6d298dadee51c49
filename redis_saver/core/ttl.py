"""Whole-thread expiry: the ``ttl`` option of the savers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TTLConfig:
    """Whole-thread expiry.

    Args:
        default_ttl: minutes of inactivity after which a whole thread expires (every key
            of it at once); ``None`` = never.
        refresh_on_read: when true, ``get_tuple``, ``list`` of one thread and
            ``get_delta_channel_history`` extend the thread's expiry in the same call.
    """

    default_ttl: float | None = None
    refresh_on_read: bool = False
    # derived once: what every script call sends (0 = no expiry)
    ttl_ms: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        ms, minutes = 0, self.default_ttl
        if isinstance(minutes, (int, float)) and not isinstance(minutes, bool) and minutes > 0:
            ms = max(1, round(minutes * 60_000))
        object.__setattr__(self, "ttl_ms", ms)

    @classmethod
    def coerce(cls, ttl: TTLConfig | Mapping[str, Any] | None) -> TTLConfig:
        if ttl is None:
            return cls()
        if isinstance(ttl, TTLConfig):
            cfg = ttl
        elif isinstance(ttl, Mapping):
            unknown = set(ttl) - {"default_ttl", "refresh_on_read"}
            if unknown:
                raise ValueError(f"unknown ttl option(s): {sorted(unknown)}")
            cfg = cls(ttl.get("default_ttl"), bool(ttl.get("refresh_on_read", False)))
        else:
            raise TypeError("ttl must be a dict like {'default_ttl': minutes, 'refresh_on_read': bool} or a TTLConfig")
        if cfg.default_ttl is not None:
            if isinstance(cfg.default_ttl, bool) or not isinstance(cfg.default_ttl, (int, float)):
                raise TypeError("default_ttl must be a number of minutes")
            if not cfg.default_ttl > 0:
                raise ValueError("default_ttl must be > 0 minutes (use None for no expiry)")
        return cfg
