"""The working tree against the previous release (0.1.0, storage format 3), side by side in one run.

    .venv/bin/python -m bench release [--quick] [any bench/run.py option]

(the command is in bench/__main__.py, so this module never imports run.py, which imports it) is
``python -m bench`` restricted to the floors and the redis_saver entries (the working tree's default
saver, the same with ``compress=False`` when the constructor takes it, and 0.1.0 installed beside it by
bench/previous.py; the telemetry-off entry comes along, its name matching), without the scaling,
throughput and wire phases unless asked (``--skip ""``). Everything else is bench/run.py's: the replay,
reads and invoke turns interleaved call by call in a random order per call, the correctness check against InMemorySaver,
bytes per checkpoint (Redis ``used_memory`` delta over one replay) against the floor's.

``ratios()`` (called by run.py) pairs each working-tree entry with the release entry of the same sync/async
kind: p50(current) / p50(0.1.0) per repetition, median over repetitions, as the floor ratios are taken.
``section()`` (called by report.py) is the markdown table of those ratios.
"""

from __future__ import annotations

import statistics

from bench.previous import LABEL

OPS = ["invoke turn", "get_tuple latest", "get_tuple by id", "list limit=10", "put", "put_writes", "delta history"]
CURRENT = {  # working-tree entry -> the release entry it is compared with
    "redis_saver RedisSaver": f"{LABEL} RedisSaver",
    "redis_saver RedisSaver (compress=False)": f"{LABEL} RedisSaver",
    "redis_saver RedisSaver (EVALSHA)": f"{LABEL} RedisSaver",
    "redis_saver AsyncRedisSaver": f"{LABEL} AsyncRedisSaver",
    "redis_saver AsyncRedisSaver (compress=False)": f"{LABEL} AsyncRedisSaver",
}
ENTRIES = ["redis_saver RedisSaver", "redis_saver AsyncRedisSaver", "compress=False", "0.1.0 (format 3)"]
DEFAULT_SKIP = "scaling,throughput,wire"


def _p50(xs):
    s = sorted(xs)
    k = (len(s) - 1) / 2
    return (s[int(k)] + s[min(int(k) + 1, len(s) - 1)]) / 2


def ratios(wall, names) -> dict:
    """{current entry: {op: median over repetitions of p50(current)/p50(release)}} for the pairs present.

    ``wall`` is run.py's Timer.wall: name -> op -> repetition -> [ns]."""
    out: dict = {}
    for cur, prev in CURRENT.items():
        if cur not in names or prev not in names:
            continue
        d = {}
        for op, per_rep in wall.get(cur, {}).items():
            per = [_p50(xs) / _p50(wall[prev][op][r]) for r, xs in per_rep.items()
                   if xs and wall.get(prev, {}).get(op, {}).get(r)]
            if per:
                d[op] = {"ratio": statistics.median(per), "reps": len(per)}
        out[cur] = {"vs": prev, "ops": d}
    return out


def _us(v):
    if v is None:
        return "–"
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.0f} µs"


def section(res: dict) -> list[str]:
    """Markdown lines: the working tree against 0.1.0 (empty when the run had no such pair)."""
    vs = res.get("vs_previous") or {}
    if not vs:
        return []
    lat, bpc = res["latency"], res["bytes_per_checkpoint"]
    L = [f"## Working tree vs {LABEL}", "",
         "p50 of each entry, and in brackets p50(entry) / p50(the release entry of the same sync/async kind), "
         "per repetition, median over repetitions. bytes/checkpoint: Redis `used_memory` delta over one replay / "
         "puts, and its ratio to the floor of the same kind (the bench's `bytes/checkpoint <= 1.1x floor` "
         "figure). This workload's text cycles through 20 words (zstd-3 compresses its messages ~57x, real text "
         "~3.5x), so with a compressed format these bytes flatter it: `python -m bench memory` has realistic text.",
         "",
         "| entry | " + " | ".join(OPS) + " | bytes/checkpoint (x floor) |",
         "|---|" + "---|" * (len(OPS) + 1)]
    floor_of = {n: s.get("floor") for n, s in res["savers"].items()}

    def bytes_cell(n, vs_prev=None):
        b, fb = bpc.get(n), bpc.get(floor_of.get(n))
        if not b:
            return "–"
        cell = f"{float(b['bytes']):,.0f}"
        if fb and fb["bytes"] > 0:
            cell += f" ({b['bytes'] / fb['bytes']:.2f}x)"
        if vs_prev and bpc.get(vs_prev) and bpc[vs_prev]["bytes"] > 0:
            cell += f", {b['bytes'] / bpc[vs_prev]['bytes']:.2f}x release"
        return cell

    shown = set()
    for cur, d in vs.items():
        prev = d["vs"]
        if prev not in shown:  # the release entry first, once per kind
            shown.add(prev)
            L.append(f"| {prev} | " + " | ".join(_us(lat.get(prev, {}).get(op, {}).get("p50_us")) for op in OPS)
                     + f" | {bytes_cell(prev)} |")
        cells = []
        for op in OPS:
            p = lat.get(cur, {}).get(op, {}).get("p50_us")
            r = d["ops"].get(op)
            cells.append(_us(p) + (f" ({r['ratio']:.2f}x)" if r else ""))
        L.append(f"| {cur} | " + " | ".join(cells) + f" | {bytes_cell(cur, prev)} |")
    missing = [n for n in CURRENT if n not in vs]
    if missing:
        why = res.get("skipped", {})
        L += ["", "Not compared: " + "; ".join(n + (f": {why[n]}" if n in why else "") for n in missing) + "."]
    L.append("")
    return L
