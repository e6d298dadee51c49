"""The store's batch plan driven by scripted replies (no socket): a batch's reads and writes of
one shard leave in one round trip, the writes after the reads; reads are answered to their ops
in order; a reply of the wrong shape is refused."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.store.base import GetOp, PutOp

from redis_saver.core.plans import Call
from redis_saver.errors import MalformedReplyError
from redis_saver.store._keys import STORE_FORMAT, StoreKeys
from redis_saver.store._plans import batch_plan, prepare
from redis_saver.store._records import Config, StoreState

from .scripted import asserting, converse


def _cfg() -> Config:
    return Config(StoreKeys("s", 1, None), JsonPlusSerializer(), False, False, None, state=StoreState(vsets=False))


def _batch(cfg: Config, ops: list) -> object:
    return batch_plan(cfg, prepare(cfg, ops), [], {})


def _script(op) -> list[str]:
    return [c.script for c in (op if isinstance(op, list) else [op])]


def test_gets_and_puts_of_one_shard_leave_in_one_round_trip_reads_first():
    cfg = _cfg()
    ops = [GetOp(("a",), "k1"), PutOp(("a",), "k2", {"v": 1}), GetOp(("b",), "k3")]
    sent: list = []

    def both(op):
        sent.append(op)
        assert _script(op) == ["store_read", "store_write"]

    got = converse(_batch(cfg, ops), [(both, [[None, None], 1])])
    assert got == [None, None, None]  # nothing stored under either key; a put answers None
    read, write = sent[0]
    assert read.keys == write.keys == [cfg.keys.index(0)]
    assert read.args[:3] == [STORE_FORMAT, b"0", b"2"]  # two plain gets ("g"), no refresh
    assert [read.args[3], read.args[6]] == [b"g", b"g"]
    assert write.args[0] == STORE_FORMAT and write.args[2] == b"1"  # one write


def test_a_batch_of_deletes_only_goes_as_store_delete():
    cfg = _cfg()
    turns = [(asserting(lambda op: isinstance(op, Call) and op.script == "store_delete", "store_delete"), 1)]
    assert converse(_batch(cfg, [PutOp(("a",), "k", None)]), turns) == [None]


def test_a_read_reply_of_the_wrong_shape_is_refused():
    cfg = _cfg()
    with pytest.raises(MalformedReplyError, match="store_read replied"):
        converse(_batch(cfg, [GetOp(("a",), "k1"), GetOp(("a",), "k2")]), [(lambda op: None, [None])])
