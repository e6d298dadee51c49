"""What an engine does once rather than on every call, as engine generators (``ops.Io``):
``setup()`` (every script and the function library loaded, the prefix's storage format recorded
or checked) and the maxmemory-policy check (``policy.py``) that setup() or a saver's first call
runs. ``Engine.drive`` runs the check; the drivers' ``setup()`` runs ``setup``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError

from ..errors import SchemaMismatchError, UnsupportedServerError
from ..keys import FORMAT_VERSION, READ_FORMATS, KeySchema
from . import policy as _policy
from .ops import Cmd, Io, Targets

if TYPE_CHECKING:
    from .engine import Engine


def _unsupported(exc: ResponseError) -> Exception:
    text = str(exc)
    if "near '#'" not in text and "shebang" not in text.lower():
        return exc  # e.g. NOPERM: not a server-version problem
    return UnsupportedServerError(
        "redis_saver needs Redis >= 7.0 or Valkey >= 7.2 (Lua scripts with #!lua flags); "
        f"loading its scripts failed: {exc}"
    )


def check_schema(keys: KeySchema, stored: Any) -> bool:
    """True when ``<prefix>:schema`` holds an older format this version reads (setup() then
    records FORMAT_VERSION: from then on a release that reads only the older format refuses
    the prefix); raises for a format it does not read."""
    if stored is None:
        return False
    fmt = stored.decode() if isinstance(stored, bytes) else str(stored)
    if fmt not in READ_FORMATS:
        raise SchemaMismatchError(
            f"keys under prefix {keys.prefix!r} use storage format {fmt!r}; this redis_saver "
            f"reads formats {', '.join(READ_FORMATS)} and writes {FORMAT_VERSION}: use another prefix"
        )
    return fmt != FORMAT_VERSION


def setup(engine: Engine) -> Io[None]:
    """Load every script (where the server refuses ``#!lua``: UnsupportedServerError),
    record or check the prefix's storage format, and check the memory policy."""
    for s in engine.scripts.values():
        try:
            yield Cmd("script_load", (s.source,))
        except ResponseError as exc:
            raise _unsupported(exc) from None
    if engine.library is not None:
        yield from engine.load_library(engine.library, reload=False)
    keys = engine.saver_keys()
    key = keys.schema_key()
    yield Cmd("set", (key, FORMAT_VERSION), {"nx": True})
    if check_schema(keys, (yield Cmd("get", (key,)))):
        yield Cmd("set", (key, FORMAT_VERSION))
    if engine.policy_pending:
        yield from check_policy(engine)

def check_policy(engine: Engine) -> Io[None]:
    """Once per saver: setup(), or right after its first call that succeeded (before it, with
    eviction_check="raise"); one round trip per primary. A server that cannot be reached is
    asked again at the next call; pending is cleared first, so concurrent calls ask once."""
    engine.policy_pending = False
    try:
        _policy.report((yield from _ask_policies()), engine.eviction_check, engine.saver_ttl)
    except _policy.UNREACHABLE:
        engine.policy_pending = True  # asked again on the next call, which reports the error
    except UnsupportedServerError:
        engine.policy_pending = True  # eviction_check="raise": every call refuses until fixed
        raise

def _ask_policies() -> Io[dict[str, str | None]]:
    """Each server's maxmemory-policy: CONFIG GET, else INFO memory (CONFIG is often
    disabled or denied on managed services and for ACL users); None when neither answers."""
    out: dict[str, str | None] = {}
    for name, kw in (yield Targets()):
        policy = None
        for method, arg, parse in _policy.QUESTIONS:
            try:
                policy = parse((yield Cmd(method, (arg,), kw)))
            except _policy.UNREACHABLE:
                raise
            except Exception:  # disabled, denied or unparsable: the next question
                policy = None
            if policy is not None:
                break
        out[name] = policy
    return out
