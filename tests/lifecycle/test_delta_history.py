"""get_delta_channel_history: equal to the base class's default walk (get_tuple + parent_config) on
seeded random checkpoint trees built with put/put_writes, and one EVALSHA on the wire.

The trees have forks (children of old checkpoints), channel values present / absent ("empty"
blobs) / carried over unchanged from an ancestor's version / never versioned, and checkpoints
with several tasks whose task_path order differs from their task_id order.
"""

from __future__ import annotations

import random
import uuid

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from tests.lifecycle._util import alist, base_delta_history, call, cfg

CHANNELS = ("items", "other")
QUERIES = (["items"], ["items", "other"], ["other", "ghost"], ["ghost"], ["other", "items", "items"])
SEEDS = range(6)


def _version(n: int) -> str:
    return f"{n:032}.{0:016}"


class Tree:
    """A random checkpoint tree; ``apply(saver)`` writes it with put / put_writes."""

    def __init__(self, rng: random.Random, thread_id: str, n: int):
        self.thread_id = thread_id
        self.ns = rng.choice(["", "sub:7c2f"])
        self.nodes: list[dict] = []
        counter = 0
        for i in range(n):
            if i == 0:
                parent = None
            elif rng.random() < 0.65:
                parent = i - 1
            else:
                parent = rng.randrange(i)  # fork from an old checkpoint
            pv = self.nodes[parent] if parent is not None else {"versions": {}, "values": {}}
            versions, values, new_versions = dict(pv["versions"]), {}, {}
            for ch in CHANNELS:
                r = rng.random()
                if r < 0.15 and ch not in versions:
                    continue  # never versioned here
                if r < 0.4 and ch in versions:  # version unchanged: the ancestor's blob stands
                    if ch in pv["values"]:
                        values[ch] = pv["values"][ch]
                    continue
                counter += 1
                versions[ch] = new_versions[ch] = _version(counter)
                if r < 0.7:
                    pass  # new version, no value: an "empty" blob
                elif r < 0.85:
                    values[ch] = _DeltaSnapshot([f"snap{i}{ch}", i])
                else:
                    values[ch] = [f"plain{i}{ch}"]
            tasks = []
            for _ in range(rng.randrange(0, 4)):
                writes = [
                    (rng.choice(CHANNELS + ("noise",)), [f"w{i}.{len(tasks)}.{k}", rng.random()])
                    for k in range(rng.randrange(1, 4))
                ]
                # task paths deliberately unrelated to task ids
                task_id = str(uuid.UUID(int=rng.getrandbits(128)))
                tasks.append((task_id, f"~__pregel_pull, n{rng.randrange(100)}", writes))
            counters = {ch: [1, 1] for ch in CHANNELS if rng.random() < 0.7}
            self.nodes.append(
                {
                    "id": str(uuid6(clock_seq=i)),
                    "counters": counters,
                    "parent": parent,
                    "versions": versions,
                    "values": values,
                    "new": new_versions,
                    "tasks": tasks,
                }
            )

    def config(self, i: int | None) -> dict:
        extra = {"checkpoint_ns": self.ns}
        if i is not None:
            extra["checkpoint_id"] = self.nodes[i]["id"]
        return cfg(self.thread_id, **extra)

    async def apply(self, saver) -> None:
        for idx, node in enumerate(self.nodes):
            cp = empty_checkpoint()
            cp["id"] = node["id"]
            cp["channel_values"] = dict(node["values"])
            cp["channel_versions"] = dict(node["versions"])
            parent = node["parent"]
            conf = self.config(parent) if parent is not None else self.config(None)
            md = {"source": "loop", "step": idx}
            if node.get("counters"):
                md["counters_since_delta_snapshot"] = node["counters"]
            await call(saver, "put", conf, cp, md, node["new"])
            for task_id, path, writes in node["tasks"]:
                await call(saver, "put_writes", self.config(idx), writes, task_id, path)


@pytest.mark.parametrize("seed", SEEDS)
async def test_delta_history_matches_default_walk(saver, seed):
    rng = random.Random(seed)
    tree = Tree(rng, f"dh-{seed}", rng.randrange(8, 30))
    await tree.apply(saver)
    mem = InMemorySaver()
    await tree.apply(mem)
    targets = [None, *range(len(tree.nodes))]
    with_writes = seeded = unseeded = 0
    for i in targets:
        for channels in QUERIES:
            conf = tree.config(i)
            got = await call(saver, "get_delta_channel_history", config=conf, channels=channels)
            want = await base_delta_history(saver, config=conf, channels=channels)
            assert got == want, (seed, i, channels)
            assert got == mem.get_delta_channel_history(config=conf, channels=channels), (seed, i, channels)
            with_writes += any(h["writes"] for h in got.values())
            seeded += "seed" in got.get("items", {})
            unseeded += "items" in got and "seed" not in got["items"]
    assert with_writes and seeded and unseeded  # the trees are not degenerate
    # unknown checkpoint / thread: nothing to walk
    unknown = cfg(tree.thread_id, checkpoint_ns=tree.ns, checkpoint_id=str(uuid6()))
    empty = {"items": {"writes": []}}
    assert await call(saver, "get_delta_channel_history", config=unknown, channels=["items"]) == empty
    assert await call(saver, "get_delta_channel_history", config=cfg("nobody"), channels=["items"]) == empty
    assert await call(saver, "get_delta_channel_history", config=tree.config(None), channels=[]) == {}


@pytest.mark.parametrize("seed", range(4))
async def test_prune_preserves_needed_delta_history(saver, seed):
    """On random trees (two namespaces of one thread) whose checkpoints carry
    counters_since_delta_snapshot metadata: after prune(keep_latest), the history of every
    channel the latest checkpoint needs (listed in its counters, versioned, no stored value) is
    unchanged, the latest reads back unchanged, and only the latest's parent chain survives."""
    rng = random.Random(1000 + seed)
    tid = f"pp-{seed}"
    trees = [Tree(rng, tid, rng.randrange(6, 25)) for _ in range(2)]
    trees[0].ns, trees[1].ns = "", "sub:q"
    for tree in trees:
        await tree.apply(saver)
    before = {}
    for tree in trees:
        latest = tree.nodes[-1]
        need = [c for c in latest["counters"] if c in latest["versions"] and c not in latest["values"]]
        before[tree.ns] = (
            need,
            await call(saver, "get_delta_channel_history", config=tree.config(None), channels=need),
            await call(saver, "get_tuple", tree.config(None)),
        )
    await call(saver, "prune", [tid])
    for tree in trees:
        need, hist, tup = before[tree.ns]
        assert await call(saver, "get_delta_channel_history", config=tree.config(None), channels=need) == hist
        after = await call(saver, "get_tuple", tree.config(None))
        assert (after.checkpoint, after.metadata, after.pending_writes) == (
            tup.checkpoint,
            tup.metadata,
            tup.pending_writes,
        )
        # survivors: a prefix of the latest's parent chain, as long as the walk needs
        chain, i = [], len(tree.nodes) - 1
        while i is not None:
            chain.append(tree.nodes[i]["id"])
            i = tree.nodes[i]["parent"]
        left = [t.checkpoint["id"] for t in await alist(saver, cfg(tid, checkpoint_ns=tree.ns))]
        assert left == chain[: len(left)]
        remaining = set(need)
        for cid in chain[1 : len(left)]:
            assert remaining, "kept more ancestors than needed"
            remaining -= set(next(n for n in tree.nodes if n["id"] == cid)["values"])
        assert not remaining or len(left) == len(chain), "dropped a needed ancestor"


def _linear_chain(thread_id: str, n: int, tasks_per_cp: int) -> Tree:
    tree = Tree(random.Random(0), thread_id, 0)
    tree.ns = ""
    for i in range(n):
        tree.nodes.append(
            {
                "id": str(uuid6(clock_seq=i)),
                "parent": i - 1 if i else None,
                "versions": {"items": _version(i + 1)},
                "values": {"items": _DeltaSnapshot(["root"])} if i == 0 else {},
                "new": {"items": _version(i + 1)},
                "tasks": [
                    (str(uuid.UUID(int=(n - k) * 1000 + i)), f"~__pregel_pull, t{k}", [("items", [f"w{i}.{k}"])])
                    for k in range(tasks_per_cp)
                ],
            }
        )
    return tree


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_delta_history_is_one_script_call(kind, wire, wire_saver):
    saver = wire_saver(kind)
    tree = _linear_chain(f"wire-{kind}", 31, 3)  # the target (last) has 30 ancestors, the root holds the seed
    await tree.apply(saver)
    target = tree.config(30)
    warm = await call(saver, "get_delta_channel_history", config=tree.config(1), channels=["items"])
    assert warm["items"]["seed"] == _DeltaSnapshot(["root"])

    wire.reset()
    got = await call(saver, "get_delta_channel_history", config=target, channels=["items"])
    assert wire.names() == ["FCALL"]
    # all 30 ancestors walked, their writes in task_path order (the reverse of task_id order here)
    assert got["items"]["seed"] == _DeltaSnapshot(["root"])
    assert [w[2] for w in got["items"]["writes"]] == [[f"w{i}.{k}"] for i in range(30) for k in range(3)]
    assert got == await base_delta_history(saver, config=target, channels=["items"])
