"""export -> delete -> import reads back identical through the saver (get_tuple and list,
pending writes included); the stream format is checked before anything is written."""

from __future__ import annotations

import dataclasses
import json

from langgraph.checkpoint.base import empty_checkpoint

from redis_saver.cli._ops import tuple_view


def _read(saver, tid):
    cfg = {"configurable": {"thread_id": tid}}
    lst = [tuple_view(t) for t in saver.list(cfg)]
    by_id = [tuple_view(saver.get_tuple({"configurable": {"thread_id": tid, "checkpoint_ns": v[1],
                                                          "checkpoint_id": v[2]}})) for v in lst]
    latest = {ns: tuple_view(saver.get_tuple({"configurable": {"thread_id": tid, "checkpoint_ns": ns}}))
              for ns in {v[1] for v in lst}}
    return lst, by_id, latest


def _odd_thread(saver, tid):
    """Writes whose task paths order them against task-id order; a special write; a pruned parent."""
    c1 = empty_checkpoint()
    c1["channel_versions"] = {"x": "1"}
    c1["channel_values"] = {"x": {"deep": [1, 2.5, "é", None, b"\x00\xff"]}}
    cfg = saver.put({"configurable": {"thread_id": tid, "checkpoint_ns": ""}}, c1,
                    {"source": "input", "step": -1, "note": "α"}, {"x": "1"})
    saver.put_writes(cfg, [("x", "from-z-first"), ("y", 2)], "task-z", "a-path")
    saver.put_writes(cfg, [("x", "from-a-second")], "task-a", "b-path")
    saver.put_writes(cfg, [("__interrupt__", ("stop",))], "task-a", "b-path")
    c2 = empty_checkpoint()
    c2["channel_versions"] = {"x": "1", "y": "2"}
    c2["channel_values"] = {"x": c1["channel_values"]["x"], "y": 2}
    saver.put(cfg, c2, {"source": "loop", "step": 0}, {"y": "2"})


def test_round_trip(cli, filled, tmp_path):
    _odd_thread(filled, "odd")
    tids = ["t-0", "t-1", "t-2", "odd"]
    before = {t: _read(filled, t) for t in tids}
    assert [w[0] for w in before["odd"][0][1][6]] == ["task-z", "task-z", "task-a", "task-a"]
    path = tmp_path / "all.jsonl"
    cli("export", "-o", str(path))
    lines = path.read_text().splitlines()
    head = json.loads(lines[0])
    assert head["format"] == "redis-saver-export" and head["version"] == 1
    assert json.loads(lines[-1])["type"] == "end"
    assert {json.loads(x)["thread_id"] for x in lines[1:-1]} == set(tids)
    cli("delete", *tids, "--yes")
    assert json.loads(cli("threads", "--json").stdout) == []
    cli("import", str(path))
    for t in tids:
        assert _read(filled, t) == before[t], t
    # importing again: every thread holds what the file holds (an earlier import): nothing to do
    res = cli("import", str(path))
    assert "4 thread(s) already complete" in res.stdout and "imported 0 thread(s)" in res.stdout
    # a thread that holds something else is refused as a whole unless told what to do
    cli("delete", "t-2", "--yes")
    _odd_thread(filled, "t-2")
    res = cli("import", str(path), code=1)
    assert "1 thread(s) already exist (t-2)" in res.stderr and "nothing was written" in res.stderr
    cli("import", str(path), "--skip-existing")
    assert _read(filled, "t-2") != before["t-2"]
    res = cli("import", str(path), "--replace", "--yes")
    assert "imported 1 thread(s)" in res.stdout and "3 thread(s) already complete" in res.stdout
    for t in tids:
        assert _read(filled, t) == before[t], t


def test_export_some_threads_and_pruned(cli, filled, tmp_path):
    cli("prune", "t-1", "--yes")  # the oldest kept checkpoints lose their parents
    before = _read(filled, "t-1")
    path = tmp_path / "one.jsonl"
    cli("export", "t-1", "-o", str(path))
    assert {json.loads(x).get("thread_id") for x in path.read_text().splitlines()[1:-1]} == {"t-1"}
    cli("delete", "t-1", "--yes")
    cli("import", str(path))
    assert _read(filled, "t-1") == before
    cli("export", "nope", "-o", str(tmp_path / "x.jsonl"), code=2)


def test_resume_after_import(cli, filled, tmp_path):
    """An imported interrupted thread resumes like the original."""
    from langgraph.types import Command

    from tests.cli.conftest import build_graph

    path = tmp_path / "t0.jsonl"
    cli("export", "t-0", "-o", str(path))
    cli("delete", "t-0", "--yes")
    cli("import", str(path))
    app = build_graph().compile(checkpointer=filled)
    out = app.invoke(Command(resume="later"), {"configurable": {"thread_id": "t-0"}})
    assert out["msgs"][-2:] == ["answer:later", "b"]


def test_bad_files_write_nothing(cli, filled, tmp_path):
    path = tmp_path / "all.jsonl"
    cli("export", "-o", str(path))
    cli("delete", "t-0", "t-1", "t-2", "--yes")
    lines = path.read_text().splitlines(keepends=True)
    cases = {
        "truncated": "".join(lines[:-1]),
        "cut mid-line": "".join(lines)[:-40],
        "not ours": '{"hello": 1}\n',
        "future version": lines[0].replace('"version":1', '"version":99') + "".join(lines[1:]),
    }
    for name, text in cases.items():
        bad = tmp_path / f"{name}.jsonl"
        bad.write_text(text)
        res = cli("import", str(bad), code=1)
        assert res.stderr.strip(), name
        assert json.loads(cli("threads", "--json").stdout) == [], name
    cli("import", str(tmp_path / "missing.jsonl"), code=2)


SERDE_MODULE = '''
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer


class Scrambled:
    """A stand-in for EncryptedSerializer: the bytes are unreadable without it."""

    def __init__(self):
        self.inner = JsonPlusSerializer()

    def dumps_typed(self, obj):
        ty, data = self.inner.dumps_typed(obj)
        return "x+" + ty, bytes(b ^ 0x5A for b in data)

    def loads_typed(self, data):
        ty, raw = data
        return self.inner.loads_typed((ty[2:], bytes(b ^ 0x5A for b in raw)))
'''


def test_custom_serde(cli, redis_url, prefix, tmp_path, monkeypatch):
    import sys

    from redis_saver import RedisSaver
    from tests.cli.conftest import run_threads

    (tmp_path / "toy_serde_mod.py").write_text(SERDE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import toy_serde_mod

    with RedisSaver.from_conn_string(redis_url, prefix=prefix, serde=toy_serde_mod.Scrambled()) as saver:
        run_threads(saver, ["e-0"])
        e0 = {"configurable": {"thread_id": "e-0"}}
        before = [(t.config, t.checkpoint, t.metadata, t.pending_writes) for t in saver.list(e0)]
        res = cli("show", "e-0", code=1)  # the default serializer cannot read these bytes
        assert "Error" in res.stderr and "Traceback" not in res.stderr
        opt = ["--serde", "toy_serde_mod:Scrambled"]
        assert "approve?" in cli(*opt, "show", "e-0").stdout
        path = tmp_path / "e.jsonl"
        cli(*opt, "export", "-o", str(path))
        assert '"x+msgpack"' in path.read_text()
        cli(*opt, "delete", "e-0", "--yes")
        cli(*opt, "import", str(path))
        after = [(t.config, t.checkpoint, t.metadata, t.pending_writes) for t in saver.list(e0)]
        assert after == before
    cli("--serde", "nope_module:x", "threads", code=2)
    sys.modules.pop("toy_serde_mod", None)


def test_round_trip_delta_channels(cli, rsaver, tmp_path):
    """A DeltaChannel graph (tests/lifecycle/graphs.py), interrupted in a subgraph, then pruned:
    after export -> delete -> import, the state, its history and the delta history are equal."""
    from langgraph.types import Command

    from tests.lifecycle.graphs import build, turn_input

    app = build(rsaver, interrupt_in="sub")
    cfg = {"configurable": {"thread_id": "d-0"}}
    for t in range(4):
        app.invoke(turn_input(t), cfg)
        app.invoke(Command(resume=f"r{t}"), cfg)
    app.invoke(turn_input(4), cfg)  # left at the interrupt

    def snapshot():
        state = app.get_state(cfg, subgraphs=True)
        hist = [(s.config, s.values, s.next, s.metadata) for s in app.get_state_history(cfg)]
        latest = rsaver.get_tuple(cfg)
        delta = rsaver.get_delta_channel_history(config=latest.config, channels=["items"])
        return state.values, state.next, [t.interrupts for t in state.tasks], hist, delta, _read(rsaver, "d-0")

    for step in ("full", "pruned"):
        if step == "pruned":
            cli("prune", "d-0", "--yes")
        before = snapshot()
        path = tmp_path / f"{step}.jsonl"
        cli("export", "d-0", "-o", str(path))
        cli("delete", "d-0", "--yes")
        cli("import", str(path))
        assert snapshot() == before, step
    out = app.invoke(Command(resume="end"), cfg)
    assert "answer end" in [m.content for m in out["messages"]]


@dataclasses.dataclass(eq=False)
class Note:
    """A value whose class has no equality of its own (two equal notes compare unequal)."""

    text: str


def test_a_second_import_counts_threads_holding_values_without_equality(cli, rsaver, tmp_path):
    c = empty_checkpoint()
    c["channel_versions"] = {"note": "1"}
    c["channel_values"] = {"note": Note("kept")}
    rsaver.put({"configurable": {"thread_id": "n", "checkpoint_ns": ""}}, c, {"step": 0}, {"note": "1"})
    assert rsaver.get_tuple({"configurable": {"thread_id": "n"}}).checkpoint["channel_values"]["note"].text == "kept"
    path = tmp_path / "n.jsonl"
    cli("export", "n", "-o", str(path))
    cli("delete", "n", "--yes")
    cli("import", str(path))
    assert "1 thread(s) already complete" in cli("import", str(path)).stdout
