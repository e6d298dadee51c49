"""A conversation with the sans-IO core, no socket: a generator (an engine generator from
``redis_saver.core.engine``, or a plan from ``redis_saver.core.plans``) is run turn by turn, each
operation it yields checked against the one the test expects and answered with the test's reply,
or thrown the test's exception, as ``transport/drivers.py`` does after the I/O (the way h11 tests
its protocol without a network).

``converse(gen, [(expected, reply), ...])`` returns the generator's value. It fails when the
generator yields anything but the expected operation, ends before the last turn, or asks for
more. ``expected`` is an operation (compared with ``==``; a ``Call``'s keys and arguments as
lists), or a callable that asserts on the operation itself. A reply that is an exception
instance is thrown into the generator; anything else is sent.

The helpers spell the operations a driver sees: ``fcall`` / ``evalsha`` / ``eval_`` (one script
call, its keys in the order ``redis_saver.keys`` gives them), ``command`` (a pipelined one), and
the errors a server answers with (``noscript``, ``function_missing``, ``fcall_denied``, ``moved``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

from redis.exceptions import MovedError, NoPermissionError, NoScriptError, ResponseError

from redis_saver.core.engine import Cmd, Engine
from redis_saver.core.plans import Call
from redis_saver.core.scripts import library, load_all, lua_scripts
from redis_saver.keys import KeySchema

Turn = tuple[Any, Any]  # (the operation expected, or a callable asserting on it; the reply)


def _same(op: Any, expected: Any) -> bool:
    if isinstance(op, Call) and isinstance(expected, Call):
        return (op.script, list(op.keys), list(op.args), op.wait) == (
            expected.script,
            list(expected.keys),
            list(expected.args),
            expected.wait,
        )
    if isinstance(op, list) and isinstance(expected, list):
        return len(op) == len(expected) and all(_same(a, b) for a, b in zip(op, expected, strict=True))
    return bool(op == expected)


def converse(gen: Generator[Any, Any, Any], turns: Sequence[Turn]) -> Any:
    """Run ``gen`` through ``turns`` (see the module's docstring); its return value."""
    reply: Any = None
    error: BaseException | None = None
    for i, (expected, answer) in enumerate(turns):
        try:
            op = gen.send(reply) if error is None else gen.throw(error)
        except StopIteration as stop:
            raise AssertionError(f"ended at turn {i} of {len(turns)}, returning {stop.value!r}") from None
        if callable(expected) and not isinstance(expected, type):
            expected(op)
        else:
            assert _same(op, expected), f"turn {i}: got\n  {op!r}\nexpected\n  {expected!r}"
        reply, error = (None, answer) if isinstance(answer, BaseException) else (answer, None)
    try:
        op = gen.send(reply) if error is None else gen.throw(error)
    except StopIteration as stop:
        return stop.value
    raise AssertionError(f"asked for more than the {len(turns)} scripted turns: {op!r}")


# ---- the operations -------------------------------------------------------------------------
def function_name(script: str) -> str:
    """The library's function for a script (``<library>_<name>``, ``+`` spelled ``__``)."""
    return f"{library().name}_{script.replace('+', '__')}"


def fcall(script: str, keys: Sequence[bytes], args: Sequence[Any]) -> Cmd:
    return Cmd("fcall", (function_name(script), len(keys), *keys, *args))


def evalsha(script: str, keys: Sequence[bytes], args: Sequence[Any]) -> Cmd:
    return Cmd("evalsha", (load_all()[script].sha, len(keys), *keys, *args))


def eval_(script: str, keys: Sequence[bytes], args: Sequence[Any]) -> Cmd:
    return Cmd("eval", (load_all()[script].source, len(keys), *keys, *args))


def command(kind: str, script: str, keys: Sequence[bytes], args: Sequence[Any]) -> tuple[Any, ...]:
    """A pipelined script call: ``kind`` FCALL, EVALSHA or EVAL."""
    target = {"FCALL": function_name(script), "EVALSHA": load_all()[script].sha, "EVAL": load_all()[script].source}
    return (kind, target[kind], len(keys), *keys, *args)


def function_load() -> Cmd:
    return Cmd("function_load", (library().source,), {"replace": True})


# ---- what servers answer --------------------------------------------------------------------
def noscript() -> NoScriptError:
    return NoScriptError("No matching script. Please use EVAL.")


def function_missing() -> ResponseError:
    return ResponseError("Function not found")


def fcall_denied() -> NoPermissionError:
    return NoPermissionError("User app has no permissions to run the 'fcall' command")


def moved(slot: int = 3999) -> MovedError:
    return MovedError(f"{slot} 127.0.0.1:7001")


def engine(functions: bool = True, retries: int = 0, cluster: bool = False) -> Engine:
    """A saver's engine (prefix "t") over the scripts of lua/build/."""
    return Engine(KeySchema("t"), lua_scripts(functions), retries, cluster=cluster)


def asserting(check: Callable[[Any], bool], what: str) -> Callable[[Any], None]:
    """An expectation that holds when ``check(op)`` is true (``what`` says which)."""

    def expect(op: Any) -> None:
        assert check(op), f"expected {what}, got {op!r}"

    return expect
