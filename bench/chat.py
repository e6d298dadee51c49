"""The realistic chat of ``python -m bench memory``: real text, real LangGraph calls, no network.

A LangGraph graph whose state is a real ``messages`` channel (HumanMessage / AIMessage from
langchain-core, reduced with ``add_messages``), text drawn without repetition from the Python
reference text shipped in the stdlib (``pydoc_data/topics.py``: prose paragraphs only), lognormal
message lengths, realistic ``response_metadata`` / ``usage_metadata``; run once on a recording
InMemorySaver (bench/workload.py), so every saver can be given exactly the calls LangGraph made.
Also: the serializer's bytes of those calls (``raw_bytes``) and PostgresSaver's table sizes after
replaying them (``measure_postgres``).
"""

from __future__ import annotations

import os
import random
import re
import uuid
from dataclasses import dataclass, field
from typing import Annotated, TypedDict

import zstandard
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from bench.workload import Call, RecordingSaver, bookkeeping, call_for_thread

SERDE = JsonPlusSerializer()


def zstd3_ratio(data: bytes) -> float:
    """How much plain zstd at level 3 shrinks ``data`` (the text's compressibility, for the report)."""
    return len(data) / len(zstandard.ZstdCompressor(level=3).compress(data))


def corpus_paragraphs() -> list[str]:
    """Prose paragraphs of the Python language reference / library topics shipped with CPython."""
    import pydoc_data.topics as T

    out = []
    for k in sorted(T.topics):
        for p in re.split(r"\n\s*\n", T.topics[k]):
            p = " ".join(p.split())
            if len(p) < 60:
                continue
            letters = sum(c.isalpha() or c in " ,.;:'()-" for c in p)
            if letters / len(p) >= 0.92:  # drops code samples and grammar productions
                out.append(p)
    return out


class TextSource:
    """Draws message texts from the shuffled paragraphs, each paragraph used once (wraps if exhausted)."""

    def __init__(self, seed: int = 7) -> None:
        self.paras = corpus_paragraphs()
        self.rng = random.Random(seed)
        self.rng.shuffle(self.paras)
        self.i = 0
        self.wrapped = 0

    def take(self, n: int) -> str:
        out: list[str] = []
        size = 0
        while size < n:
            if self.i >= len(self.paras):
                self.i, self.wrapped = 0, self.wrapped + 1
            p = self.paras[self.i]
            self.i += 1
            out.append(p)
            size += len(p) + 1
        s = " ".join(out)
        cut = s.rfind(" ", 0, n)
        return s[: cut if cut > n // 2 else n]


def lengths(rng: random.Random, median: float, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, rng.lognormvariate(0, 0.7) * median)))


class ChatState(TypedDict):
    messages: Annotated[list, add_messages]
    turn: int
    summary: str


@dataclass
class Chat:
    calls: list[Call]
    marks: dict[int, int]  # turn -> number of recorded calls at the end of that turn
    user_lens: list[int] = field(default_factory=list)
    ai_lens: list[int] = field(default_factory=list)
    corpus_chars: int = 0
    corpus_wrapped: int = 0
    sample_text: str = ""


def build_chat(turns: int, seed: int = 7, keep: tuple[str, ...] = ("put", "put_writes")) -> Chat:
    """keep: the recorded operations kept in Chat.calls (bench/memory.py adds "get_tuple", LangGraph's read at
    the start of each turn, so a saver with a client-side cache sees the calls a real run makes)."""
    src = TextSource(seed)
    rng = random.Random(seed + 1)
    ids = random.Random(seed + 2)
    user_lens, ai_lens = [], []

    def assistant(state: dict) -> dict:
        n = lengths(rng, 900, 120, 4000)
        ai_lens.append(n)
        text = src.take(n)
        rid = f"run-{uuid.UUID(int=ids.getrandbits(128))}"
        toks = len(text) // 4
        msg = AIMessage(
            content=text,
            id=rid,
            response_metadata={"model_name": "gpt-4o-2024-08-06", "finish_reason": "stop",
                               "system_fingerprint": "fp_50cad350e4"},
            usage_metadata={"input_tokens": 40 * len(state["messages"]), "output_tokens": toks,
                            "total_tokens": 40 * len(state["messages"]) + toks},
        )
        return {"messages": [msg]}

    g = StateGraph(ChatState)
    g.add_node("assistant", assistant)
    g.add_node("bookkeeping", bookkeeping)
    g.add_edge(START, "assistant")
    g.add_edge("assistant", "bookkeeping")
    g.add_edge("bookkeeping", END)
    rec = RecordingSaver()
    graph = g.compile(checkpointer=rec)
    cfg = {"configurable": {"thread_id": "chat"}}
    marks = {}
    for t in range(1, turns + 1):
        n = lengths(rng, 160, 20, 1200)
        user_lens.append(n)
        message = HumanMessage(content=src.take(n), id=str(uuid.UUID(int=ids.getrandbits(128))))
        graph.invoke({"messages": [message]}, cfg)
        marks[t] = len(rec.calls)
        graph.get_state(cfg)  # the state read after each turn (bench/memory.py keeps one read per turn)
    calls = [c for c in rec.calls if c.op in keep]
    # re-mark on the filtered list
    kept_marks = {}
    for t in range(1, turns + 1):
        kept_marks[t] = sum(1 for c in rec.calls[: marks[t]] if c.op in keep)
    return Chat(calls, kept_marks, user_lens, ai_lens, sum(map(len, src.paras)), src.wrapped,
                " ".join(src.paras[: src.i]))


def raw_bytes(chat: Chat, upto_calls: int) -> tuple[int, int]:
    """(serde bytes the saver stores, number of checkpoints) over the first calls."""
    total = puts = 0
    for c in chat.calls[:upto_calls]:
        if c.op == "put":
            puts += 1
            cp = dict(c.args[1])
            vals = cp.pop("channel_values", None) or {}
            total += len(SERDE.dumps_typed(cp)[1]) + len(SERDE.dumps_typed(c.args[2])[1])
            for ch in c.args[3]:
                if ch in vals:
                    total += len(SERDE.dumps_typed(vals[ch])[1])
        else:
            for _ch, v in c.args[1]:
                total += len(SERDE.dumps_typed(v)[1])
    return total, puts


def measure_postgres(chat: Chat, url: str, half: int) -> dict:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    schema = f"benchchat_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{schema}"')
        toast = c.execute("SHOW default_toast_compression").fetchone()[0]
    out: dict = {"schema": schema, "toast_compression": toast}
    try:
        with psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row,
                             options=f"-c search_path={schema}") as conn:
            saver = PostgresSaver(conn)
            saver.setup()
            tables = ["checkpoints", "checkpoint_blobs", "checkpoint_writes"]

            def size() -> dict[str, int]:
                query = "select pg_total_relation_size(%s::regclass) as n"
                return {t: conn.execute(query, (f'"{schema}".{t}',)).fetchone()["n"] for t in tables}

            out["empty"] = size()
            for i, c in enumerate(chat.calls):
                cc = call_for_thread(c, "pg")
                (saver.put if cc.op == "put" else saver.put_writes)(*cc.args)
                if i + 1 == chat.marks[half]:
                    out["half"] = size()
            out["full"] = size()
    finally:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return out
