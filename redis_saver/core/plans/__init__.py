"""Every operation as a pure plan: a generator that yields script calls and parses replies.

A plan never does I/O. It yields a :class:`Call` (one EVALSHA) and receives its reply, or
yields a ``list`` of calls (sent in one pipeline: fan-out over threads or slots) and
receives the list of replies, or yields :class:`Out` to hand finished results to the
caller (``list``). Its return value is the operation's result. The sync and async drivers
in ``transport/drivers.py`` run the same plans, so no logic is written twice.

The package: ``common`` (the steps, the helpers, PlanBase: the plans' frozen context), ``write`` (put, put_writes, pin),
``read`` (get_tuple, list, delta history), ``lifecycle`` (delete, prune, copy, rewrite), and
``budgets`` (how much one script call may do, read by every plan at call time).
"""

from __future__ import annotations

from . import budgets
from ._resign import SignPlans
from .common import (
    Call,
    IndexSlots,
    LoadScripts,
    Out,
    Plan,
    PlanBase,
    Serialized,
    Step,
    normalize_thread_id,
)
from .lifecycle import LifecyclePlans, RewriteStats
from .read import ReadPlans
from .write import WritePlans


class Plans(WritePlans, ReadPlans, SignPlans):
    """Plans for every operation, over one saver's frozen context (``PlanBase``'s fields); the
    savers hold one (``RedisSaverBase._plans``)."""


__all__ = [
    "Call",
    "IndexSlots",
    "LifecyclePlans",
    "LoadScripts",
    "Out",
    "Plan",
    "PlanBase",
    "Plans",
    "ReadPlans",
    "RewriteStats",
    "Serialized",
    "Step",
    "WritePlans",
    "budgets",
    "normalize_thread_id",
]
