"""The engine's decisions when a cluster slot is moving (sans-IO: the engine's operations are
answered here, with a clock that moves only on its pauses). tests/scale/test_slot_moves.py runs
the same against a real cluster."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from redis.crc import key_slot
from redis.exceptions import ClusterError, MovedError, TryAgainError

from redis_saver import SlotMovingError
from redis_saver.core import engine as E
from redis_saver.core import moving as M
from redis_saver.core.plans import Call
from redis_saver.core.scripts import lua_scripts
from redis_saver.keys import KeySchema

KEY = b"lg:{t1}:meta"


def _plan(calls: int = 1) -> Generator[Any, Any, list[Any]]:
    out = []
    for _ in range(calls):
        out.append((yield Call("get_tuple", [KEY], ["x"])))
    return out


class Clock:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        monkeypatch.setattr(M.time, "monotonic", lambda: self.now)


def run(engine: E.Engine, answers: list[Any], clock: Clock) -> tuple[Any, list[Any]]:
    """Drive ``engine`` over a one-call plan: each script call gets the next of ``answers`` (an
    exception is raised into the engine); returns (the plan's value, the operations seen)."""
    gen = engine.drive(_plan())
    seen: list[Any] = []
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            op = gen.send(reply) if error is None else gen.throw(error)
        except StopIteration as stop:
            return stop.value, seen
        seen.append(op)
        reply, error = None, None
        if isinstance(op, E.Sleep):
            clock.now += op.seconds
        elif isinstance(op, E.Cmd) and op.name in E.SCRIPT_COMMANDS:
            answer = answers.pop(0)
            if isinstance(answer, BaseException):
                clock.now += 0.4  # redis-py's own round of attempts
                error = answer
            else:
                reply = answer


def _engine(cluster: bool = True, timeout: float = 5.0) -> E.Engine:
    return E.Engine(KeySchema("lg"), lua_scripts(False), cluster=cluster, slot_move_timeout=timeout)


def test_a_refused_call_is_sent_again_with_growing_pauses_until_answered(monkeypatch):
    clock = Clock(monkeypatch)
    refusals = [TryAgainError("TRYAGAIN"), ClusterError("TTL exhausted."), TryAgainError("x"), TryAgainError("y")]
    value, seen = run(_engine(), [*refusals, b"answer"], clock)
    assert value == [b"answer"]
    pauses = [op.seconds for op in seen if isinstance(op, E.Sleep)]
    assert pauses == [0.02, 0.04, 0.08, 0.16]
    # the slot map is refreshed after a refusal that is not TRYAGAIN, not more than every 0.5 s
    assert sum(isinstance(op, E.Refresh) for op in seen) == 1


def test_past_the_deadline_the_error_names_the_slot_the_key_and_the_wait(monkeypatch):
    clock = Clock(monkeypatch)
    with pytest.raises(SlotMovingError) as info:
        run(_engine(timeout=2.0), [TryAgainError("TRYAGAIN")] * 100, clock)
    err = info.value
    assert err.key == KEY and err.slot == key_slot(KEY) and f"slot {err.slot}" in str(err)
    assert 2.0 <= err.waited <= 2.0 + 0.4 + M.SLOT_PAUSE_MAX
    assert isinstance(err.__cause__, TryAgainError) and isinstance(err, ClusterError)


def test_zero_timeout_sends_nothing_again(monkeypatch):
    clock = Clock(monkeypatch)
    with pytest.raises(SlotMovingError):
        run(_engine(timeout=0), [MovedError("3999 127.0.0.1:7001"), b"never"], clock)


def test_a_client_that_is_no_cluster_gets_the_redirect_as_it_is(monkeypatch):
    clock = Clock(monkeypatch)
    with pytest.raises(MovedError):
        run(_engine(cluster=False), [MovedError("3999 127.0.0.1:7001"), b"never"], clock)


def test_a_connection_closed_by_the_client_is_sent_again_without_a_cluster_too(monkeypatch):
    clock = Clock(monkeypatch)
    value, _ = run(_engine(cluster=False), [E.ClientClosedConnection("closed"), b"answer"], clock)
    assert value == [b"answer"]


def test_a_fan_out_sends_again_only_its_refused_calls(monkeypatch):
    Clock(monkeypatch)
    engine = _engine()
    calls = [Call("get_tuple", [f"lg:{{t{i}}}:meta".encode()], ["x"]) for i in range(3)]
    gen = engine.batch(calls)
    op = next(gen)
    assert isinstance(op, E.Pipe) and len(op.commands) == 3
    op = gen.send([b"a", TryAgainError("TRYAGAIN"), b"c"])
    while not isinstance(op, E.Pipe):
        op = gen.send(None)
    assert [c[3] for c in op.commands] == [calls[1].keys[0]]
    with pytest.raises(StopIteration) as done:
        gen.send([b"b"])
    assert done.value.value == [b"a", b"b", b"c"]
