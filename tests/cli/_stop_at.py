"""The command-line tool stopping itself in the middle of writing a thread into another saver:
``python -m tests.cli._stop_at N SIGNAL ARGS...`` runs ``redis-saver ARGS...`` and sends itself
SIGNAL (``SIGKILL``, ``SIGINT``, ...) right after the N-th ``put`` of a SqliteSaver or
PostgresSaver returns (a thread's later checkpoints not written yet)."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any


def _stop_after(cls: Any, n: int, sig: int, count: list[int]) -> None:
    put = cls.put

    def counting_put(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = put(self, *args, **kwargs)
        count[0] += 1
        if count[0] == n:
            os.kill(os.getpid(), sig)
        return out

    cls.put = counting_put


def main() -> None:
    n, sig, args = int(sys.argv[1]), getattr(signal, sys.argv[2]), sys.argv[3:]
    count = [0]
    from langgraph.checkpoint.sqlite import SqliteSaver

    _stop_after(SqliteSaver, n, sig, count)
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
    except ImportError:
        pass
    else:
        _stop_after(PostgresSaver, n, sig, count)
    from redis_saver.cli import main as tool

    tool(args)


if __name__ == "__main__":
    main()
