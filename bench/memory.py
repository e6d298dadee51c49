"""Memory per checkpoint on a realistic chat: the working tree, the previous release, PostgresSaver, the floor.

    .venv/bin/python -m bench memory [--turns 100] [--json FILE] [--no-postgres]

The chat is bench/chat.py's (``build_chat``): a LangGraph graph (``assistant`` -> ``bookkeeping``,
``add_messages``) whose messages are prose paragraphs of the stdlib's ``pydoc_data/topics.py`` drawn without
repetition, lognormal lengths (user median ~160 chars, assistant ~900), realistic ``response_metadata`` /
``usage_metadata``. It runs once on a recording InMemorySaver (with the working tree's ``get_next_version``:
the channel versions LangGraph gets from redis_saver); every saver then gets exactly the calls LangGraph
made (``put``, ``put_writes`` and the ``get_tuple`` that starts each turn), in order, on one thread.

Entries, each on its own fresh ``redis-server`` (bench/infra.py ``start_plain``), so nothing mixes:

* ``redis_saver (working tree)``: ``RedisSaver(client)`` with its defaults;
* ``redis_saver (working tree, compress=False)``: when the constructor takes ``compress`` (else skipped, and why);
* ``redis_saver 0.1.0 (format 3)``: the previous release, installed beside the working tree (bench/previous.py);
* ``floor``: bench/floor.py's raw redis-py yardstick (serde bytes as they are, one key per checkpoint and blob);
* ``PostgresSaver``: the same calls in a temporary schema, ``pg_total_relation_size`` deltas of its tables
  (TOAST-compressed; bench/chat.py's ``measure_postgres``); skipped with the reason without a PostgreSQL.

Figures, at ``turns`` and at ``turns // 2``: thread memory = the sum of ``MEMORY USAGE`` (samples=0) of every key
under the saver's prefix (its only keys on its server); bytes per checkpoint = that / checkpoints; x raw = over the
serializer's bytes (checkpoint + metadata + new blobs + writes, per checkpoint, as bench/chat.py's ``raw_bytes``);
x PostgresSaver, x floor and x 0.1.0 = ratios of bytes per checkpoint; growth = memory at ``turns`` / at
``turns // 2`` (a chat whose whole history is stored as it is grows ~4x from 50 to 100 turns: each version of
``messages`` is the whole list). The Redis ``used_memory`` delta per checkpoint (what ``python -m bench`` reports
as bytes per checkpoint) is shown beside it. After each replay the saver's latest, middle and first checkpoints
and ``list(limit=10)`` are checked against what LangGraph put.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.infra import Unavailable, start_plain

RECORDED_OPS = ("put", "put_writes", "get_tuple")


def log(*a) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *a, file=sys.stderr, flush=True)


def fmt_b(n: float) -> str:
    if n >= 1024 * 1024:
        return f"{n / 1024 / 1024:.2f} MB"
    return f"{n / 1024:.1f} KB" if n >= 1024 else f"{n:.0f} B"


# --------------------------------------------------------------------------- the chat


def chats(turns: int):
    """(calls with LangGraph's reads, the same without them) as bench/chat.py Chats, with per-turn marks."""
    from bench.chat import Chat, build_chat
    from bench.workload import Call, RecordingSaver
    from redis_saver._base import RedisSaverBase

    # LangGraph asks the checkpointer for channel versions (get_next_version): record the chat with the
    # working tree's, as it would run on it (every entry then replays the same calls)
    RecordingSaver.get_next_version = RedisSaverBase.get_next_version  # type: ignore[method-assign]
    try:
        chat = build_chat(turns, keep=RECORDED_OPS)
    finally:
        del RecordingSaver.get_next_version
    calls, marks = [], {}
    old_marks = {v: t for t, v in chat.marks.items()}
    for i, c in enumerate(chat.calls):
        if c.op == "get_tuple":
            cfg = c.args[0]["configurable"]
            c = Call("get_tuple", ({"configurable": {k: cfg[k] for k in ("thread_id", "checkpoint_ns", "checkpoint_id")
                                                     if k in cfg}},), {})
            # build_chat reads the state after each turn (get_state) and LangGraph again at the next turn's start:
            # keep one read per turn, as a chat server would make
            if calls and calls[-1].op == "get_tuple" and calls[-1].args == c.args:
                c = None
        if c is not None:
            calls.append(c)
        if i + 1 in old_marks:
            marks[old_marks[i + 1]] = len(calls)
    full = Chat(calls, marks, chat.user_lens, chat.ai_lens, chat.corpus_chars, chat.corpus_wrapped, chat.sample_text)
    wcalls = [c for c in calls if c.op != "get_tuple"]
    wmarks = {t: sum(1 for c in calls[:m] if c.op != "get_tuple") for t, m in marks.items()}
    writes = Chat(wcalls, wmarks, chat.user_lens, chat.ai_lens, chat.corpus_chars, chat.corpus_wrapped,
                  chat.sample_text)
    return full, writes


# --------------------------------------------------------------------------- entries


@dataclass
class Entry:
    name: str
    make: Callable[[Any], Any]  # redis client -> saver
    prefix: str
    notes: list = field(default_factory=list)


def entries() -> tuple[list[Entry], dict[str, str]]:
    """The Redis-based entries that can be had here, and {name: reason} for the others."""
    from bench import previous

    out, skipped = [], {}
    try:
        from redis_saver import RedisSaver

        out.append(Entry("redis_saver (working tree)", lambda c: RedisSaver(c, prefix="lg"), "lg"))
        if previous.supports(RedisSaver, "compress"):
            out.append(Entry("redis_saver (working tree, compress=False)",
                             lambda c: RedisSaver(c, prefix="lg", compress=False), "lg"))
        else:
            skipped["redis_saver (working tree, compress=False)"] = (
                "this redis_saver has no compress option (it stores serde bytes as they are)")
    except Exception as e:  # the package is being changed concurrently
        skipped["redis_saver (working tree)"] = f"import failed: {type(e).__name__}: {e}"
    try:
        Prev, _ = previous.savers()
        out.append(Entry(previous.LABEL, lambda c: Prev(c, prefix="lg"), "lg",
                         [f"git {previous.PREVIOUS_COMMIT}, installed as {previous.PACKAGE}"]))
    except Unavailable as e:
        skipped[previous.LABEL] = str(e)
    try:
        from bench.floor import FloorSaver

        out.append(Entry("floor", lambda c: FloorSaver(c), "f", ["bench/floor.py"]))
    except Exception as e:  # noqa: BLE001 (the floor is being reworked concurrently)
        skipped["floor"] = f"bench/floor.py import failed: {type(e).__name__}: {e}"
    return out, skipped


def kind_of(name: str, prefix: str) -> str:
    """What a key holds: the segment after the thread's ``{...}`` (``cp``, ``wr``, ``b``...), else its first part."""
    rest = name[len(prefix) + 1:]
    if rest.startswith("{") and "}" in rest:
        return next((s for s in rest[rest.index("}") + 1:].split(":") if s), "thread")
    return rest.split(":", 1)[0].split("{", 1)[0] or rest


def keys_memory(r, prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in r.scan_iter(match=f"{prefix}:*", count=1000):
        kind = kind_of(k.decode(errors="replace"), prefix)
        out[kind] = out.get(kind, 0) + (r.memory_usage(k, samples=0) or 0)
    return out


def verify(saver, tid: str, wchat) -> list[str]:
    """The saver's latest / middle / first checkpoint and list(limit=10) against what LangGraph put."""
    puts = [c for c in wchat.calls if c.op == "put"]
    bad = []
    for label, c in (("latest", puts[-1]), ("middle", puts[len(puts) // 2]), ("first", puts[0])):
        cp = c.args[1]
        cfg = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
        if label != "latest":
            cfg["configurable"]["checkpoint_id"] = cp["id"]
        got = saver.get_tuple(cfg)
        if got is None:
            bad.append(f"{label}: not found")
        elif got.checkpoint["id"] != cp["id"]:
            bad.append(f"{label}: id {got.checkpoint['id']} instead of {cp['id']}")
        elif got.checkpoint["channel_values"] != cp["channel_values"]:
            diff = sorted(k for k in set(got.checkpoint["channel_values"]) | set(cp["channel_values"])
                          if got.checkpoint["channel_values"].get(k) != cp["channel_values"].get(k))
            bad.append(f"{label}: channel values differ in {diff}")
    ids = [t.config["configurable"]["checkpoint_id"] for t in
           saver.list({"configurable": {"thread_id": tid, "checkpoint_ns": ""}}, limit=10)]
    if ids != [c.args[1]["id"] for c in reversed(puts[-10:])]:
        bad.append(f"list(limit=10): {len(ids)} ids, not the last 10 put newest first")
    return bad


def _p50(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def measure_redis(todo: list[Entry], chat, wchat, half: int, reps: int, skipped: dict) -> dict:
    """Every entry on its own fresh server; the replay interleaved call by call (order rotated per call), so the
    timings share the machine's load. Memory is taken on the first repetition's thread (at ``half`` turns and at
    the end, before the next repetition starts); each repetition replays into a new thread and times every call."""
    import gc

    import redis

    from bench.workload import call_for_thread

    live: list[tuple[Entry, Any, Any, Any]] = []  # (entry, server, client, saver)
    out: dict[str, dict] = {}
    try:
        for e in todo:
            try:
                server = start_plain()
            except Exception as ex:  # noqa: BLE001 (Unavailable, or devkit's own error: no server binary)
                why = str(ex) if isinstance(ex, Unavailable) else f"no redis-server: {type(ex).__name__}: {ex}"
                skipped[e.name] = why
                continue
            r = redis.Redis(host=server.host, port=server.port)
            try:
                saver = e.make(r)
                if hasattr(saver, "setup"):
                    saver.setup()
            except Exception as ex:  # noqa: BLE001
                skipped[e.name] = f"setup failed: {type(ex).__name__}: {str(ex)[:200]}"
                r.close()
                server.stop()
                continue
            live.append((e, server, r, saver))
            out[e.name] = {"notes": e.notes, "used0": r.info("memory")["used_memory"],
                           "t": {"put": [], "put messages": [], "put_writes": [], "get_tuple latest": []}}
        n_calls = len(chat.calls)
        timed_from = chat.marks[max(chat.marks) - 10] if max(chat.marks) > 10 else 0  # the last 10 turns
        dead: set = set()
        for rep in range(reps):
            tid = f"chat{rep}"
            log(f"replay {rep + 1}/{reps}: {n_calls} calls, entries interleaved call by call")
            prepared = [call_for_thread(c, tid) for c in chat.calls]
            gc.collect()
            for i, cc in enumerate(prepared):
                k = (i + rep) % max(len(live), 1)
                for e, _server, r, saver in live[k:] + live[:k]:
                    if e.name in dead:
                        continue
                    d = out[e.name]
                    try:
                        t0 = time.perf_counter()
                        if cc.op == "put":
                            saver.put(*cc.args)
                        elif cc.op == "put_writes":
                            saver.put_writes(*cc.args)
                        else:
                            saver.get_tuple(cc.args[0])
                        dt = (time.perf_counter() - t0) * 1e6
                    except Exception as ex:  # noqa: BLE001
                        skipped[e.name] = f"replay failed: {type(ex).__name__}: {str(ex)[:200]}"
                        dead.add(e.name)
                        continue
                    if i >= timed_from:
                        op = "get_tuple latest" if cc.op == "get_tuple" else cc.op
                        d["t"][op].append(dt)
                        if cc.op == "put" and "messages" in cc.args[3]:
                            d["t"]["put messages"].append(dt)
                    if rep == 0 and i + 1 == chat.marks[half]:
                        d["half"] = keys_memory(r, e.prefix)
                        d["used_half"] = r.info("memory")["used_memory"] - d["used0"]
            if rep == 0:
                for e, _server, r, saver in live:
                    if e.name in dead:
                        continue
                    d = out[e.name]
                    d["full"] = keys_memory(r, e.prefix)
                    d["used_full"] = r.info("memory")["used_memory"] - d["used0"]
                    d["keys"] = r.dbsize()
                    try:
                        d["errors"] = verify(saver, tid, wchat)
                    except Exception as ex:  # noqa: BLE001
                        d["errors"] = [f"check raised {type(ex).__name__}: {str(ex)[:200]}"]
            # the latest checkpoint of this repetition's thread, read 10 times per entry, interleaved
            cfg = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
            for j in range(10):
                k = (j + rep) % max(len(live), 1)
                for e, _server, _r, saver in live[k:] + live[:k]:
                    if e.name not in dead:
                        t0 = time.perf_counter()
                        saver.get_tuple(cfg)
                        out[e.name].setdefault("t_read", []).append((time.perf_counter() - t0) * 1e6)
    finally:
        for _e, server, r, _saver in live:
            r.close()
            server.stop()
    for name in list(out):
        if name in dead:
            out.pop(name)
            continue
        d = out[name]
        t = d.pop("t")
        d["timing_us"] = {op: _p50(xs) for op, xs in t.items()}
        d["timing_us"]["get_tuple at the end"] = _p50(d.pop("t_read", []))
        d["timing_n"] = {op: len(xs) for op, xs in t.items()}
    return out


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench memory", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--reps", type=int, default=3, help="replays (memory is taken on the first; all are timed)")
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    a = ap.parse_args(argv)
    try:
        from bench.chat import SERDE, raw_bytes, zstd3_ratio
    except ImportError as e:
        print(f"memory benchmark not run: {e} (pip install -r bench/requirements.txt)")
        return 1
    t_start = time.time()
    turns, half = a.turns, a.turns // 2
    log(f"building the {turns}-turn chat")
    chat, wchat = chats(turns)
    raw_half, puts_half = raw_bytes(wchat, wchat.marks[half])
    raw_full, puts_full = raw_bytes(wchat, len(wchat.calls))
    sample = chat.sample_text.encode()
    z3 = zstd3_ratio(sample)
    last = next(c for c in reversed(wchat.calls) if c.op == "put").args[1]["channel_values"]["messages"]
    last_b = SERDE.dumps_typed(last)[1]
    rep: dict[str, Any] = {
        "turns": turns, "half": half, "puts_half": puts_half, "puts_full": puts_full,
        "raw_half": raw_half, "raw_full": raw_full, "corpus_chars": chat.corpus_chars, "text_used": len(sample),
        "zstd3_text": z3, "latest_messages_bytes": len(last_b),
        "zstd3_latest_messages": zstd3_ratio(last_b),
        "calls": {op: sum(c.op == op for c in chat.calls) for op in RECORDED_OPS},
        "savers": {}, "skipped": {}, "reps": a.reps,
    }

    todo, skipped = entries()
    rep["skipped"].update(skipped)
    rep["savers"].update(measure_redis(todo, chat, wchat, half, a.reps, rep["skipped"]))
    if a.no_postgres:
        rep["skipped"]["PostgresSaver"] = "--no-postgres"
    else:
        from bench.savers import resolve_pg_url

        url, why = resolve_pg_url()
        if not url:
            rep["skipped"]["PostgresSaver"] = why
        else:
            log("PostgresSaver: replay in a temporary schema")
            try:
                from bench.chat import measure_postgres

                pg = measure_postgres(wchat, url, half)
                rep["savers"]["PostgresSaver"] = {
                    "half": {t: pg["half"][t] - pg["empty"][t] for t in pg["full"]},
                    "full": {t: pg["full"][t] - pg["empty"][t] for t in pg["full"]},
                    "notes": [f"pg_total_relation_size deltas, TOAST {pg['toast_compression']}"],
                }
            except ImportError as ex:
                rep["skipped"]["PostgresSaver"] = f"langgraph-checkpoint-postgres / psycopg not installed: {ex}"
            except Exception as ex:  # noqa: BLE001
                rep["skipped"]["PostgresSaver"] = f"failed: {type(ex).__name__}: {str(ex)[:200]}"

    for d in rep["savers"].values():
        d["thread_half"], d["thread_full"] = sum(d["half"].values()), sum(d["full"].values())
        d["bpc"], d["bpc_half"] = d["thread_full"] / puts_full, d["thread_half"] / puts_half
        d["x_raw"] = d["thread_full"] / raw_full
        d["growth"] = d["thread_full"] / d["thread_half"] if d["thread_half"] else None
        if "used_full" in d:
            d["used_bpc"] = d["used_full"] / puts_full
    from bench.previous import LABEL

    for ref, key in (("PostgresSaver", "x_pg"), ("floor", "x_floor"), (LABEL, "x_prev")):
        b = rep["savers"].get(ref, {}).get("bpc")
        for d in rep["savers"].values():
            d[key] = d["bpc"] / b if b else None
    rep["duration_s"] = round(time.time() - t_start, 1)
    print(markdown(rep))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rep, fh, indent=1, default=str)
    bad = [n for n, d in rep["savers"].items() if d.get("errors")]
    return 1 if bad else 0


def markdown(rep: dict) -> str:
    from bench.previous import LABEL

    t, h = rep["turns"], rep["half"]
    x = lambda v: "–" if v is None else f"{v:.3f}x" if v < 0.1 else f"{v:.2f}x"  # noqa: E731
    L = [f"# Memory per checkpoint: a {t}-turn chat of realistic text ({rep['duration_s']} s)", "",
         f"Corpus: prose paragraphs of the stdlib's `pydoc_data/topics.py` ({rep['corpus_chars'] / 1e3:.0f} k chars), "
         f"drawn without repetition: {rep['text_used'] / 1e3:.0f} kB of text used, **plain zstd-3 ratio "
         f"{rep['zstd3_text']:.2f}x**. Latest `messages` value: {fmt_b(rep['latest_messages_bytes'])} of serde bytes "
         f"(zstd-3 alone: {rep['zstd3_latest_messages']:.2f}x). Calls replayed on one thread: "
         + ", ".join(f"{n} {op}" for op, n in rep["calls"].items())
         + f". Checkpoints: {rep['puts_half']} at {h} turns, {rep['puts_full']} at {t}. Serializer bytes stored "
         f"(checkpoint + metadata + new blobs + writes): {fmt_b(rep['raw_half'] / rep['puts_half'])}/checkpoint at "
         f"{h} turns, {fmt_b(rep['raw_full'] / rep['puts_full'])} at {t}.", "",
         "Thread memory = sum of `MEMORY USAGE` of every key under the saver's prefix, each saver on its own "
         "redis-server (PostgresSaver: `pg_total_relation_size` deltas of its tables in a temporary schema). "
         f"B/checkpoint = thread memory at {t} turns / checkpoints. Growth = memory at {t} turns / at {h}. "
         "`used_memory` Δ = the server's `used_memory` delta over the replay / checkpoints (the figure "
         "`python -m bench` reports as bytes per checkpoint).", "",
         f"| saver | B/checkpoint at {t} turns | x raw serde | x PostgresSaver | x floor | x 0.1.0 | "
         f"thread at {h} → {t} turns (growth) | used_memory Δ/checkpoint | check |",
         "|---|---|---|---|---|---|---|---|---|"]
    order = [n for n in rep["savers"] if n.startswith("redis_saver (")] + \
        [n for n in (LABEL, "PostgresSaver", "floor") if n in rep["savers"]]
    if not order:
        L.append("| nothing measured (see Skipped) | | | | | | | | |")
    for n in order:
        d = rep["savers"][n]
        chk = "–" if "errors" not in d else ("OK" if not d["errors"] else "FAIL: " + "; ".join(d["errors"]))
        L.append(f"| {n} | {fmt_b(d['bpc'])} | {x(d['x_raw'])} | {x(d['x_pg'])} | {x(d['x_floor'])} | "
                 f"{x(d['x_prev'])} | {fmt_b(d['thread_half'])} → {fmt_b(d['thread_full'])} ({x(d['growth'])}) | "
                 f"{fmt_b(d['used_bpc']) if 'used_bpc' in d else '–'} | {chk} |")
    L += ["", f"Where the bytes are at {t} turns (kind of key: memory):", ""] if order else []
    for n in order:
        d = rep["savers"][n]
        parts = ", ".join(f"{k} {fmt_b(v)}" for k, v in sorted(d["full"].items(), key=lambda kv: -kv[1]))
        L.append(f"- {n}: {parts}" + (f" ({'; '.join(d['notes'])})" if d.get("notes") else ""))
    timed = [n for n in order if rep["savers"][n].get("timing_us")]
    if timed:
        ops = ["put", "put messages", "put_writes", "get_tuple latest", "get_tuple at the end"]
        prev = rep["savers"].get(LABEL, {}).get("timing_us", {})
        L += ["", f"## Latency on this chat (p50 over the last 10 turns of {rep['reps']} replays; x 0.1.0 in brackets)",
              "", "The Redis entries replay interleaved call by call (order rotated per call). `put messages` = the "
              "puts that store a new `messages` version (the large value); `get_tuple latest` = LangGraph's read "
              f"at the start of each turn; `get_tuple at the end` = 10 reads of the latest checkpoint at {t} turns "
              "per replay, interleaved.", "",
              "| saver | " + " | ".join(ops) + " |", "|---|" + "---|" * len(ops)]
        for n in timed:
            tu = rep["savers"][n]["timing_us"]
            cells = []
            for op in ops:
                v = tu.get(op)
                c = "–" if v is None else (f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.0f} µs")
                if v is not None and prev.get(op) and n != LABEL:
                    c += f" ({v / prev[op]:.2f}x)"
                cells.append(c)
            L.append(f"| {n} | " + " | ".join(cells) + " |")
    L += ["", "## Skipped", ""]
    L += [f"- **{n}**: {' '.join(str(why).split())}" for n, why in rep["skipped"].items()] or ["- none"]
    L.append("")
    return "\n".join(L)


if __name__ == "__main__":
    sys.exit(main())
