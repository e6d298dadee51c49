"""Shared by the automatic pipelining tests (``test_autopipeline_calls.py``,
``test_autopipeline_connections.py``): the scripts they run, the write counter (its fixture
``writes`` is in this folder's conftest), and calls through a client's lanes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from redis_saver import AsyncRedisSaver
from redis_saver.transport import autopipe as _autopipe
from tests.faults._util import cfg

ECHO = "return ARGV[1]"
INCR = "return redis.call('INCR', KEYS[1])"
FAIL = "return redis.error_reply('BOOM ' .. ARGV[1])"
# busy for ARGV[1] ms (the server answers nobody meanwhile), then ARGV[2]
SLOW = """
local t = redis.call('TIME')
local stop = t[1] * 1000000 + t[2] + tonumber(ARGV[1]) * 1000
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= stop
return ARGV[2]
"""


class Writes:
    """Every write to a socket that carried scripts: (connection, number of scripts). Counted at
    asyncio's ``StreamWriter``, under both redis-py's ``send_packed_command`` and a lane's own
    writes (``wire.direct``); a connection is its writer (a reconnection is a new one)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[tuple[int, int]] = []
        self.loads = 0  # FUNCTION LOAD commands sent
        write, writelines = asyncio.StreamWriter.write, asyncio.StreamWriter.writelines

        def count(writer: asyncio.StreamWriter, data: bytes) -> None:
            n = data.count(b"\r\nEVALSHA\r\n") + data.count(b"\r\nEVAL\r\n") + data.count(b"\r\nFCALL\r\n")
            if n:
                self.log.append((id(writer), n))
            self.loads += data.count(b"\r\nFUNCTION\r\n$4\r\nLOAD\r\n")

        def spy_write(writer: asyncio.StreamWriter, data: Any) -> None:
            count(writer, bytes(data))
            write(writer, data)

        def spy_writelines(writer: asyncio.StreamWriter, data: Any) -> None:
            data = list(data)
            count(writer, b"".join(bytes(d) for d in data))
            writelines(writer, data)

        monkeypatch.setattr(asyncio.StreamWriter, "write", spy_write)
        monkeypatch.setattr(asyncio.StreamWriter, "writelines", spy_writelines)

    def reset(self) -> None:
        self.log.clear()

    @property
    def connections(self) -> set[int]:
        return {c for c, _ in self.log}

    @property
    def scripts(self) -> int:
        return sum(n for _, n in self.log)


def split_in_two(writes: Writes, n: int) -> bool:
    """The first two writes carry the n calls of one iteration, one write per lane, evenly (the
    first call takes the idle first lane, the others alternate from where the turn stands)."""
    (c1, a), (c2, b) = writes.log[:2]
    return c1 != c2 and a + b == n and abs(a - b) <= 2


def checkpoint(value: str, step: int) -> dict:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6())
    cp["channel_versions"] = {"msg": f"{step + 1:032}.0"}
    cp["channel_values"] = {"msg": value}
    return cp


def call(client: Any, script: str, keys: tuple[Any, ...] = (), args: tuple[Any, ...] = ()) -> Any:
    """One EVAL through the client's lanes (a coroutine)."""
    return _autopipe.router_for(client).call("eval", (script, len(keys), *keys, *args))


def evalsha(client: Any, sha: str, args: tuple[Any, ...] = ()) -> Any:
    return _autopipe.router_for(client).call("evalsha", (sha, 0, *args))


async def chat_round(saver: AsyncRedisSaver, thread: str, step: int, parent: dict | None) -> dict:
    """put a child of ``parent`` + put_writes for it on ``thread``; returns the new config."""
    cp = checkpoint(f"{thread}/{step}", step)
    md = {"source": "loop", "step": step}
    conf = await saver.aput(parent or cfg(thread), cp, md, {"msg": cp["channel_versions"]["msg"]})
    await saver.aput_writes(conf, [("msg", f"w {thread}/{step}")], f"task-{step}")
    return conf
