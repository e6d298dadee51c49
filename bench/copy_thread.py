"""copy_thread's cost: a chat-like thread of N checkpoints (default 1,000) copied to fresh targets.

    .venv/bin/python bench/copy_thread.py [--checkpoints 1000] [--copies 11] [--json]

The thread is what a LangGraph chat graph stores, made directly (no graph run): per turn three
checkpoints (the user's message, the assistant's reply, bookkeeping), a ``messages`` list that
grows by a ~300-character user message and a ~1,600-character reply per turn, small channels
(``turn``, ``summary``, ``tokens``, a branch channel) and two pending writes per checkpoint.
It runs on a fresh ``redis-server`` (devkit.servers) with ``SLOWLOG`` recording every command,
so the longest single script call is the server's own timing of it; the total is wall time on
the client. Only public API is used, so the same file measures an older checkout: run it with
``PYTHONPATH`` pointing there (docs/benchmarks.md, "copy_thread").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

WORDS = "checkpoint redis latency graph channel replay thread message saver state token cluster".split()


def _text(seed: int, n: int) -> str:
    out: list[str] = []
    i = seed
    while sum(len(w) + 1 for w in out) < n:
        out.append(WORDS[(i * 7 + len(out) * 3) % len(WORDS)])
        i += 1
    return " ".join(out)[:n]


def fill(saver: Any, thread: str, checkpoints: int) -> None:
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.base import empty_checkpoint

    cfg: dict = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    versions: dict[str, Any] = {}
    values: dict[str, Any] = {"messages": [], "turn": 0, "summary": "", "tokens": 0}
    for i in range(checkpoints):
        turn, phase = divmod(i, 3)
        changed = ["branch:to:chat"]
        if phase == 0:
            values["messages"] = [*values["messages"], HumanMessage(_text(turn + 1000, 300), id=f"user-{turn}")]
            changed.append("messages")
        elif phase == 1:
            values["messages"] = [*values["messages"], AIMessage(_text(turn, 1600), id=f"ai-{turn}")]
            values["tokens"] += 400
            changed += ["messages", "tokens"]
        else:
            values["turn"] = turn + 1
            values["summary"] = f"turn {turn + 1}: {len(values['messages'])} messages"
            changed += ["turn", "summary"]
        new = {}
        for ch in changed:
            versions[ch] = saver.get_next_version(versions.get(ch), None)
            new[ch] = versions[ch]
        cp = empty_checkpoint()
        cp["channel_versions"] = dict(versions)
        cp["channel_values"] = {**values, "branch:to:chat": None}
        cfg = saver.put(cfg, cp, {"source": "loop", "step": i, "run_id": f"run-{turn}"}, new)
        saver.put_writes(cfg, [("messages", values["messages"][-1:]), ("tokens", 1)], f"task-{i}")


def measure(checkpoints: int, copies: int) -> dict[str, Any]:
    import redis

    from devkit.servers import client_kwargs, start_standalone
    from redis_saver import RedisSaver

    server = start_standalone()
    try:
        client = redis.Redis.from_url(server.url, **client_kwargs(60, 10))
        saver = RedisSaver(client, prefix="bench")
        t0 = time.perf_counter()
        fill(saver, "src", checkpoints)
        fill_s = time.perf_counter() - t0
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 1_000_000)
        totals, longest, calls = [], [], []
        for k in range(copies):
            client.slowlog_reset()
            t0 = time.perf_counter()
            saver.copy_thread("src", f"dst-{k}")
            totals.append(time.perf_counter() - t0)
            log = client.slowlog_get(1_000_000)
            scripts = [e for e in log if e["command"].split(b" ", 1)[0].upper() in (b"FCALL", b"EVALSHA", b"EVAL")]
            calls.append(len(scripts))
            longest.append(max(e["duration"] for e in scripts) / 1000)
        n = sum(1 for _ in saver.list({"configurable": {"thread_id": f"dst-{copies - 1}"}}))
        assert n == checkpoints, (n, checkpoints)
        return {
            "checkpoints": checkpoints,
            "fill_s": round(fill_s, 2),
            "source_bytes": sum(client.memory_usage(k, samples=0) or 0 for k in saver.keys.thread_keys("src")[:9]),
            "copies": copies,
            "total_ms_median": round(statistics.median(totals) * 1000, 1),
            "total_ms_min": round(min(totals) * 1000, 1),
            "total_ms_all": [round(t * 1000, 1) for t in totals],
            "script_calls": calls[0],
            "longest_script_ms_median": round(statistics.median(longest), 2),
            "longest_script_ms_min": round(min(longest), 2),
            "longest_script_ms_max": round(max(longest), 2),
        }
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--checkpoints", type=int, default=1000)
    ap.add_argument("--copies", type=int, default=11)
    ap.add_argument("--json", action="store_true", help="one JSON line instead of text")
    a = ap.parse_args(argv)
    r = measure(a.checkpoints, a.copies)
    import redis_saver

    r["redis_saver"] = redis_saver.__file__
    if a.json:
        print(json.dumps(r))
        return
    for k, v in r.items():
        print(f"{k:28} {v}", file=sys.stdout)


if __name__ == "__main__":
    main()
