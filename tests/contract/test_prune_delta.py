"""prune(strategy="keep_latest") on DeltaChannel-style chains, against the reference model.

Random chains (with forks) per namespace where "delta" channels store a value (a
snapshot) only now and then and an "empty" blob otherwise, with
``counters_since_delta_snapshot`` metadata naming them, and writes at every
checkpoint.  After prune:

* the surviving checkpoints equal the reference model's (latest + ancestors back to the
  nearest stored value of every delta channel the latest still needs; the oldest kept
  one detached from a deleted parent);
* ``get_delta_channel_history`` of every namespace's latest checkpoint, for the delta
  channels LangGraph would replay there (a version but no stored value), is unchanged
  by the prune (and equals the base-class walk).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from langgraph.checkpoint.base.id import uuid6

from tests.contract.conftest import contract_settings
from tests.contract.test_differential import Driver, explain, list_matches, norm, norm_history
from tests.reference import ReferenceSaver

THREADS = ["d:{1} ü", "d*?[2]"]
NAMESPACES = ["", "sub:1|x"]
DELTA = ["d1", "d{2}"]
PLAIN = ["p"]


@contract_settings("CONTRACT_EXAMPLES", 35)
@given(data=st.data())
def test_prune_keep_latest_delta_chains(contract_kind: str, contract_url: str | None, data: st.DataObject) -> None:
    if contract_kind == "memory":
        return  # InMemorySaver has no prune
    ref = ReferenceSaver()
    drv = Driver(contract_kind, contract_url)
    try:
        _run(data, ref, drv)
    finally:
        drv.close()


def _run(data: st.DataObject, ref: ReferenceSaver, drv: Driver) -> None:
    draw = data.draw
    n_ver = [0]

    def ver() -> str:
        n_ver[0] += 1
        return f"{n_ver[0]:032}.0"

    for thread in THREADS:
        for ns in draw(st.lists(st.sampled_from(NAMESPACES), unique=True, min_size=1), label="namespaces"):
            ids: list[str] = []
            n = draw(st.integers(1, 9), label="chain length")
            for i in range(n):
                # mostly a linear chain, sometimes a fork from an older checkpoint
                parent = None
                if ids:
                    parent = ids[-1] if draw(st.integers(0, 4)) else draw(st.sampled_from(ids), label="fork")
                pv = dict(ref.storage[(thread, ns)][parent][0]["channel_versions"]) if parent else {}
                new_versions: dict[str, str] = {}
                values: dict[str, Any] = {}
                counters: dict[str, list[int]] = {}
                for ch in DELTA:
                    if draw(st.integers(0, 3), label=f"touch {ch}"):
                        new_versions[ch] = ver()
                        if i == 0 or draw(st.integers(0, 3), label=f"snapshot {ch}") == 0:
                            values[ch] = [f"snap-{ch}-{i}"]
                    if ch in pv or ch in new_versions:
                        # LangGraph names every delta channel of the thread in every
                        # checkpoint's counters once the channel has a version
                        counters[ch] = [i % 3, i]
                if draw(st.booleans(), label="plain"):
                    new_versions["p"] = ver()
                    values["p"] = i
                cid = str(uuid6())
                ids.append(cid)
                config = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
                if parent:
                    config["configurable"]["checkpoint_id"] = parent
                md: dict[str, Any] = {"source": "loop", "step": i}
                if counters:
                    md["counters_since_delta_snapshot"] = counters
                checkpoint = {
                    "v": 4, "id": cid, "ts": "2026-01-01T00:00:00+00:00",
                    "channel_values": values, "channel_versions": {**pv, **new_versions},
                    "versions_seen": {}, "updated_channels": sorted(new_versions),
                }
                ref.put(config, checkpoint, md, new_versions)
                drv.call(False, "put", config, checkpoint, md, new_versions)
                wconf = {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}}
                for task in draw(st.lists(st.sampled_from(["tb", "ta"]), unique=True, max_size=2), label="tasks"):
                    writes = [(ch, [f"w-{ch}-{i}-{task}"]) for ch in draw(
                        st.lists(st.sampled_from(DELTA + PLAIN), unique=True, max_size=3), label="write chans")]
                    path = draw(st.sampled_from(["~__pregel_pull, n", "~__pregel_push, 0", ""]), label="path")
                    ref.put_writes(wconf, writes, task, path)
                    drv.call(False, "put_writes", wconf, writes, task, path)

    # What LangGraph replays when it loads a latest checkpoint
    # (pregel/_checkpoint.py::_delta_channels_to_replay): the delta channels with a
    # version there but no stored value.
    needed: dict[tuple[str, str], list[str]] = {}
    for (thread, ns), cps in ref.storage.items():
        if cps:
            latest = ref.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ns}}).checkpoint
            needed[(thread, ns)] = [
                ch for ch in DELTA if ch in latest["channel_versions"] and ch not in latest["channel_values"]
            ]

    def latest_histories(call: Any) -> dict:
        out = {}
        for (thread, ns), chans in needed.items():
            conf = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
            out[(thread, ns)] = norm_history(call(conf, chans))
        return out

    before = latest_histories(
        lambda c, chans: drv.call(False, "get_delta_channel_history", config=c, channels=chans)
    )
    assert before == latest_histories(
        lambda c, chans: ref.get_delta_channel_history(config=c, channels=chans)
    ), "delta history before prune differs from reference"

    use_async = draw(st.booleans(), label="async prune")
    ref.prune(THREADS, strategy="keep_latest")
    drv.call(use_async, "prune", THREADS, strategy="keep_latest")

    exp = [norm(t) for t in ref.list(None)]
    got = [norm(t) for t in drv.call(False, "list", None)]
    assert list_matches(exp, got, None), f"kept checkpoints differ from reference\n{explain(exp, got)}"
    after = latest_histories(
        lambda c, chans: drv.call(use_async, "get_delta_channel_history", config=c, channels=chans)
    )
    assert after == before, (
        f"prune(keep_latest) changed what a latest checkpoint replays\n{explain(before, after)}"
    )
    base = latest_histories(
        lambda c, chans: drv.call(use_async, "base_history", config=c, channels=chans)
    )
    assert base == before
