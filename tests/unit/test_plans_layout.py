"""The plans read their work budgets from ``redis_saver.core.plans.budgets`` at call time, so a
test (or an operator's tuning) that sets one there changes it for every plan: no module of the
package may hold a budget under its own name (a copy that ``monkeypatch.setattr(budgets, ...)``
would not reach, and tiny-budget tests would then run with the defaults, silently), and the
package does not re-export them (setting ``plans.WORK_BUDGET`` raises instead of doing nothing)."""

from __future__ import annotations

import ast
import inspect

import pytest

import redis_saver.core.plans as plans
from redis_saver.core.plans import budgets, common, lifecycle, read, write

BUDGETS = {n for n in vars(budgets) if n.isupper() and isinstance(getattr(budgets, n), int)}


def test_budgets_live_in_one_module_only():
    assert {"WORK_BUDGET", "WALK_BUDGET", "COPY_FIELDS", "PAGE_SIZE", "SCAN_BUDGET"} <= BUDGETS
    assert not BUDGETS & set(vars(plans)), "the package re-exports a budget: setting it there would do nothing"


def test_no_plan_module_reads_a_budget_by_its_bare_name():
    for mod in (common, lifecycle, read, write):
        tree = ast.parse(inspect.getsource(mod))
        bare = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in BUDGETS})
        assert bare == [], f"{mod.__name__} reads {bare} by name: read them as B.<NAME>"
        assert not any(n in vars(mod) for n in BUDGETS), f"{mod.__name__} holds its own copy of a budget"


def test_a_budget_set_in_its_module_reaches_the_plans(monkeypatch):
    monkeypatch.setattr(budgets, "WORK_BUDGET", 3)
    assert lifecycle.B is budgets and read.B is budgets
    assert lifecycle.B.WORK_BUDGET == 3
    with pytest.raises(AttributeError):
        monkeypatch.setattr(plans, "WORK_BUDGET", 2)  # the old place: refused, never silently ignored


def test_store_modules_read_their_budgets_from_one_module(monkeypatch):
    """The store's plans as the saver's: its budgets live in redis_saver.store._budgets, read as
    B.<NAME> at call time, so tiny-budget tests (monkeypatch there) reach every read and write."""
    from redis_saver.store import _budgets, _plans, _rebuild, _records, _search, _transfer

    names = {n for n in vars(_budgets) if n.isupper() and isinstance(getattr(_budgets, n), int)}
    assert {"PAGE", "CALL_OPS", "VECTOR_PAGE", "LIST_PAGE"} <= names
    for mod in (_plans, _rebuild, _records, _search, _transfer):
        tree = ast.parse(inspect.getsource(mod))
        bare = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in names})
        assert bare == [], f"{mod.__name__} reads {bare} by name: read them as B.<NAME>"
        assert not any(n in vars(mod) for n in names), f"{mod.__name__} holds its own copy of a budget"
    monkeypatch.setattr(_budgets, "VECTOR_PAGE", 3)
    assert _search.B.VECTOR_PAGE == 3 and _plans.B is _budgets and _transfer.B is _budgets


def test_the_savers_plans_are_reached_through_their_context():
    """A saver holds its plans in a frozen context (``saver._plans``), not as its own methods:
    a call of ``saver._plan_x(...)`` would fail only when it runs (savers are often typed Any),
    so every module outside the plans package reaches a plan through ``_plans``."""
    import re
    from pathlib import Path

    import redis_saver

    root = Path(redis_saver.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.parent.name == "plans":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            calls = re.finditer(r"(\w+)\._plan_\w+\(", line)
            found += [f"{path.relative_to(root)}:{n}" for m in calls if m[1] != "_plans"]
    assert found == [], "plans called on the saver itself"
    assert any("_plans._plan_put(" in p.read_text() for p in root.glob("_api.py"))  # the check sees the calls
