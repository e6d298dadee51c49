"""Every lifecycle test runs twice: with the default work budgets, and with budgets of 1-2 so
that every multi-call path (paged prune, paged delete_for_runs, paged copy_thread, the blob collection, delta
history continuations and their cycle checks) runs on small threads too. Tests that count
round trips (the ``wire`` fixture) run with the defaults only."""

from __future__ import annotations

import pytest

import redis_saver.core.plans.budgets as plans

BUDGETS = {"default": None, "tiny": {"WALK_BUDGET": 1, "WORK_BUDGET": 2, "COPY_FIELDS": 3}}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "wire" not in metafunc.fixturenames:
        metafunc.fixturenames.append("work_budget")
        metafunc.parametrize("work_budget", list(BUDGETS), indirect=True)


@pytest.fixture(autouse=True)
def work_budget(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    # autouse: a fixture name appended in pytest_generate_tests is parametrized but, unless a
    # test asks for it, never set up (the tiny budgets silently did not apply)
    param = getattr(request, "param", "default")
    for name, value in (BUDGETS[param] or {}).items():
        monkeypatch.setattr(plans, name, value)
    return str(param)
