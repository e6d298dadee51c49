"""The correctness check of the benchmark (bench/run.py): each saver's reads of the first repetition's thread
compared with InMemorySaver's after the same calls (failures, and warnings for differences that are allowed)."""

from __future__ import annotations

from bench.savers import Entry


def _norm_tuple(t):
    if t is None:
        return None
    c = t.config["configurable"]
    p = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return {
        "config": (c.get("thread_id"), c.get("checkpoint_ns", ""), c.get("checkpoint_id")),
        "checkpoint": dict(t.checkpoint), "metadata": dict(t.metadata or {}), "parent": p,
        "pending_writes": [tuple(w) for w in (t.pending_writes or [])],
    }


def _wkey(w):
    return (str(w[0]), str(w[1]), repr(w[2]))


def compare_tuple(label, got, exp, fails, warns):
    g, e = _norm_tuple(got), _norm_tuple(exp)
    if (g is None) != (e is None):
        fails.append(f"{label}: {'missing' if g is None else 'unexpected'} result")
        return
    if g is None:
        return
    for k in ("config", "parent", "metadata"):
        if g[k] != e[k]:
            fails.append(f"{label}: {k} differs ({str(g[k])[:80]} vs {str(e[k])[:80]})")
    gc_, ec = g["checkpoint"], e["checkpoint"]
    extra = sorted(set(gc_) - set(ec))
    if extra:
        warns.append(f"{label}: checkpoint has extra keys {extra}")
    for k in sorted(ec):
        if gc_.get(k) != ec.get(k):
            if k == "channel_values":
                diff = [ch for ch in set(gc_[k]) | set(ec[k]) if gc_[k].get(ch) != ec[k].get(ch)]
                fails.append(f"{label}: checkpoint.channel_values differ in {sorted(diff)[:4]}")
            else:
                fails.append(f"{label}: checkpoint.{k} differs")
    gw, ew = g["pending_writes"], e["pending_writes"]
    if gw != ew:
        if sorted(gw, key=_wkey) == sorted(ew, key=_wkey):
            warns.append(f"{label}: pending_writes order differs from writes_sort_key order")
        else:
            fails.append(f"{label}: pending_writes differ ({len(gw)} vs {len(ew)} writes)")


def compare_list(label, got, exp, fails, warns):
    gi = [t.config["configurable"]["checkpoint_id"] for t in got]
    ei = [t.config["configurable"]["checkpoint_id"] for t in exp]
    if gi != ei:
        fails.append(f"{label}: ids differ (got {len(gi)}, expected {len(ei)}; first {gi[:1]} vs {ei[:1]})")
        return
    for g, e in zip(got, exp, strict=True):  # the same ids, checked above
        compare_tuple(label, g, e, fails, warns)


def compare_delta(label, got, exp, fails):
    for ch, e in exp.items():
        g = (got or {}).get(ch)
        if g is None:
            fails.append(f"{label}: channel {ch} missing")
            continue
        if ("seed" in g) != ("seed" in e) or g.get("seed") != e.get("seed"):
            fails.append(f"{label}: seed of {ch} differs")
        if [tuple(w) for w in g["writes"]] != [tuple(w) for w in e["writes"]]:
            fails.append(f"{label}: writes of {ch} differ ({len(g['writes'])} vs {len(e['writes'])})")


def check(e: Entry, ref: Entry, thread: str, put_ids, delta_cfg, capped=False):
    fails, warns = [], []
    base = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    queries = [("get_tuple(latest)", lambda s: s.get_tuple(base))]
    for cid in put_ids:
        cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": cid}}
        queries.append((f"get_tuple({cid[-6:]})", lambda s, cfg=cfg: s.get_tuple(cfg)))
    mid = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": put_ids[len(put_ids) // 2]}}
    lists = [("list(all)", {}), ("list(limit=10)", {"limit": 10}), ("list(before=middle, limit=10)",
                                                                      {"before": mid, "limit": 10})]
    for label, q in queries:
        try:
            compare_tuple(label, q(e), q(ref), fails, warns)
        except Exception as ex:
            fails.append(f"{label}: raised {type(ex).__name__}: {str(ex)[:100]}")
    for label, kw in lists:
        try:
            compare_list(label, e.list(base, **kw), ref.list(base, **kw), fails, warns)
        except Exception as ex:
            fails.append(f"{label}: raised {type(ex).__name__}: {str(ex)[:100]}")
    try:
        compare_delta("get_delta_channel_history", e.delta(delta_cfg, ["messages"]),
                      ref.delta(delta_cfg, ["messages"]), fails)
    except Exception as ex:
        fails.append(f"get_delta_channel_history: raised {type(ex).__name__}: {str(ex)[:100]}")
    return fails, warns
