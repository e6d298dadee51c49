"""Markdown table and PNG chart from the results dict written by bench/run.py."""

from __future__ import annotations

OPS = ["put", "put_writes", "get_tuple latest", "get_tuple by id", "list limit=10", "delta history", "invoke turn"]
# the operations compared with the minimal floor (its delta history is LangGraph's default walk, no yardstick)
MIN_OPS = ["put", "put_writes", "get_tuple latest", "get_tuple by id", "list limit=10", "invoke turn"]
TP_LEVELS = ["sync x1", "4 threads", "4 processes", "async x1", "async x8", "async x64"]


def _us(v):
    if v is None:
        return "–"
    if v >= 10000:
        return f"{v / 1000:,.1f} ms"
    if v >= 1000:
        return f"{v / 1000:.2f} ms"
    return f"{v:.0f} µs"


def _x(v):
    return "–" if v is None else f"{v:.2f}x"


def _pf(t):
    if t is None or t.get("pass") is None:
        return "n/a"
    return ("PASS " if t["pass"] else "FAIL ") + _x(t["value"])


def control_lines(rmin: dict) -> list[str]:
    """The spread between the default sync saver and its control (the same saver, a second entry):
    a ratio of this run is only as exact as the two agree."""
    from bench.savers import CONTROL

    a, b = rmin.get("redis_saver RedisSaver") or {}, rmin.get(CONTROL) or {}
    ops = [op for op in MIN_OPS if a.get(op) and b.get(op)]
    if not ops:
        return []
    spread = [f"{op} {_x(a[op])} and {_x(b[op])} ({100 * (a[op] / b[op] - 1):+.1f}%)" for op in ops]
    worst = max(abs(a[op] / b[op] - 1) for op in ops)
    return [f"**Control.** `{CONTROL}` is `redis_saver RedisSaver` again, an entry of its own on a server of "
            f"its own; ratios to the minimal floor: " + "; ".join(spread) + f". Two identical entries lie up to "
            f"{100 * worst:.1f}% apart in this run: differences between entries below that are noise.", ""]


def markdown(res: dict) -> str:
    m = res["meta"]
    w = m["workload"]
    names = list(res["savers"])
    L = []
    L.append(f"# redis_saver benchmark ({m['mode']} run, {m['started_utc']}, {m['duration_s']} s)")
    L.append("")
    L.append(f"Machine: {m['machine']}, Python {m['python']}. Workload: {w['turns']}-turn LangGraph chat graph, "
             f"{w['message_bytes']:,} chars of messages at the end, {w['puts']} put + {w['put_writes_calls']} "
             f"put_writes calls ({w['writes_per_step']} writes each), replayed exactly against every saver. "
             f"{m['reps']} repetitions, savers interleaved call by call (a random order per call). "
             f"Ratios are p50(saver)/p50(floor of the same sync/async kind), taken per repetition, median over "
             f"repetitions. Client CPU = `process_time` of the benchmark process per operation. Two floors: "
             f"the *floor* (`bench/floor.py`, the same work laid out plainly) and the *minimal floor* "
             f"(`bench/floor_min.py`, the fewest commands one round trip can do); the brackets below are "
             f"ratios to the floor, the next table has both.")
    L.append("")
    L.append("## Latency p50 (ratio to floor) and p99")
    L.append("")
    L.append("| saver | " + " | ".join(OPS) + " |")
    L.append("|---|" + "---|" * len(OPS))
    for n in names:
        lat, rat = res["latency"].get(n, {}), res["ratios"].get(n, {})
        cells = []
        for op in OPS:
            d = lat.get(op)
            if not d:
                cells.append("–")
                continue
            r = rat.get(op)
            cells.append(f"{_us(d['p50_us'])}{' (' + _x(r) + ')' if r is not None else ''} / p99 {_us(d['p99_us'])}")
        L.append(f"| {n} | " + " | ".join(cells) + " |")
    L.append("")
    rmin = res.get("ratios_min") or {}
    if any(rmin.values()):
        L.append("## Ratio to the minimal floor / to the floor (p50, same sync/async kind)")
        L.append("")
        L.append("| saver | " + " | ".join(MIN_OPS) + " |")
        L.append("|---|" + "---|" * len(MIN_OPS))
        for n in names:
            a, b = rmin.get(n, {}), res["ratios"].get(n, {})
            if not a:
                continue
            L.append(f"| {n} | " + " | ".join(
                f"{_x(a.get(op))} / {_x(b.get(op))}" if op in a else "–" for op in MIN_OPS) + " |")
        L.append("")
        L += control_lines(rmin)
    if res.get("split"):
        sp = res["split"]
        ops = [op for op in MIN_OPS if any(op in d for d in sp.values())]
        L.append("## Server time and client time per call (p50: wall = server + client; client CPU in brackets)")
        L.append("")
        L.append("Server = `INFO commandstats` usec of EVALSHA / FCALL around each call (`bench/where.py`); "
                 "client = wall - "
                 "server (Python, network, kernel); client CPU = `process_time` of the bench process. Only the "
                 "savers whose calls are all scripts; interleaved call by call, medians per call.")
        L.append("")
        L.append("| saver | " + " | ".join(ops) + " |")
        L.append("|---|" + "---|" * len(ops))
        for n, d in sp.items():
            L.append(f"| {n} | " + " | ".join(
                f"{_us(d[op]['wall_us'])} = {_us(d[op]['server_us'])} + {_us(d[op]['client_us'])} "
                f"({_us(d[op]['client_cpu_us'])})" if op in d else "–" for op in ops) + " |")
        L.append("")
    L.append("## Client CPU per operation (mean)")
    L.append("")
    L.append("| saver | " + " | ".join(OPS) + " |")
    L.append("|---|" + "---|" * len(OPS))
    for n in names:
        lat = res["latency"].get(n, {})
        L.append(f"| {n} | " + " | ".join(_us(lat[op]["client_cpu_us"]) if op in lat else "–" for op in OPS) + " |")
    L.append("")

    sizes = [str(s) for s in m["scaling_sizes"]]
    if res["scaling"]:
        L.append("## Scaling: one thread with N checkpoints (p50 get latest / list10 / list5)")
        L.append("")
        L.append("get = `get_tuple` latest; list10 = `list(before=<middle id>, limit=10)`; list5 = the same with "
                 "`limit=5`. At 10 checkpoints only 5 lie before the middle, so list10 returns 5 there and 10 at "
                 "every larger size; list5 returns 5 everywhere (like for like).")
        L.append("")
        L.append("| saver | " + " | ".join(f"{int(s):,}" for s in sizes) + " | fill ms/put |")
        L.append("|---|" + "---|" * (len(sizes) + 1))
        notes = []
        for n in names:
            sc = res["scaling"].get(n, {})
            cells, rate = [], None
            for s in sizes:
                d = sc.get(s, {})
                if "skipped" in d:
                    cells.append("skipped")
                    notes.append(f"{n} at {int(s):,}: {d['skipped']}")
                elif d.get("get_latest_p50_us") is not None:
                    c = f"{_us(d['get_latest_p50_us'])} / {_us(d['list_before_p50_us'])}"
                    if "list5_before_p50_us" in d:  # absent in results written before list5 existed
                        c += f" / {_us(d['list5_before_p50_us'])}"
                    if d.get("incorrect"):
                        c += " ⚠"
                        notes.append(f"{n} at {int(s):,}: INCORRECT: {d['incorrect']}")
                    cells.append(c)
                    rate = d.get("fill_ms_per_put", rate)
                else:
                    cells.append("–")
            L.append(f"| {n} | " + " | ".join(cells) + f" | {'–' if rate is None else f'{rate:.2f}'} |")
        if notes:
            L.append("")
            L += [f"- {x}" for x in dict.fromkeys(notes)]
        L.append("")

    if res["throughput"]:
        cols = [c for c in TP_LEVELS if any(c in d for d in res["throughput"].values())]
        L.append("## Throughput: put + put_writes steps/s (step latency p50 / p99)")
        L.append("")
        L.append(f"Each worker writes its own thread; sync: OS threads sharing one saver, or forked processes with "
                 f"a saver each; async: tasks on one event loop. {m.get('throughput_seconds', '?')} s per run, "
                 f"median of {m.get('throughput_reps', '?')} run(s) per cell. in flight = steps/s x mean latency "
                 f"(Little's law): close to the number of workers when the figures agree.")
        L.append("")
        L.append("| saver | " + " | ".join(cols) + " |")
        L.append("|---|" + "---|" * len(cols))
        skips = []
        for n in names:
            tp = res["throughput"].get(n, {})
            if not tp:
                continue
            cells = []
            for c in cols:
                d = tp.get(c)
                if not d:
                    cells.append("–")
                elif "skipped" in d:
                    cells.append("skipped")
                    skips.append(f"{n}, {c}: {d['skipped']}")
                elif "p99_ms" in d:  # results written before step latencies were recorded have none
                    cells.append(f"{d['steps_per_s']:,.0f} ({_us(1e3 * d['p50_ms'])} / {_us(1e3 * d['p99_ms'])}; "
                                 f"in flight {d['in_flight']:.1f}; CPU {d['client_cpu_pct']:.0f}%)")
                else:
                    cells.append(f"{d['steps_per_s']:,.0f} (CPU {d['client_cpu_pct']:.0f}%)")
            L.append(f"| {n} | " + " | ".join(cells) + " |")
        if skips:
            L.append("")
            L += [f"- {x}" for x in skips]
        L.append("")

    L.append("## Bytes stored per checkpoint, and wire cost per operation")
    L.append("")
    L.append("Round trips = request turns counted by a TCP proxy (summed over connections); cmds = top-level "
             "commands on the wire; srv = commands executed by the server incl. inside Lua (`INFO commandstats`).")
    L.append("")
    wops = ["put", "put_writes", "get_tuple latest", "get_tuple by id", "list limit=10", "delta history"]
    L.append("| saver | bytes/checkpoint | " + " | ".join(f"{o} RT/cmds/srv" for o in wops) + " |")
    L.append("|---|---|" + "---|" * len(wops))
    for n in names:
        b = res["bytes_per_checkpoint"].get(n)
        bc = f"{float(b['bytes']):,.0f}" + (" (pg)" if "pg_" in b["method"] else "") if b else "–"
        wr = res["wire"].get(n, {})
        cells = []
        for o in wops:
            d = wr.get(o)
            if not d:
                cells.append("–")
                continue
            f = lambda v: "–" if v is None else (f"{v:.0f}" if abs(v - round(v)) < 0.05 else f"{v:.1f}")  # noqa
            cells.append(f"{f(d['round_trips'])}/{f(d['commands'])}/{f(d['server_commands'])}")
        L.append(f"| {n} | {bc} | " + " | ".join(cells) + " |")
    L.append("")

    if res["targets"]:
        keys = list(next(iter(res["targets"].values())).keys())
        L.append("## Targets (redis_saver's; shown for every saver)")
        L.append("")
        L.append("| saver | " + " | ".join(keys) + " |")
        L.append("|---|" + "---|" * len(keys))
        for n, t in res["targets"].items():
            L.append(f"| {n} | " + " | ".join(_pf(t.get(k)) for k in keys) + " |")
        L.append("")
        inc = sorted({f"{n} up to {v['size']:,}" for n, t in res["targets"].items() for v in t.values()
                      if v.get("complete") is False})
        if inc:
            L.append(f"Scaling targets apply at {max(m['scaling_sizes']):,}; measured only: " + "; ".join(inc) + ".")
            L.append("")

    from bench.release import section as release_section  # working tree vs the previous release, if both ran

    L += release_section(res)
    L.append("## Correctness vs InMemorySaver (same queries after the same replay)")
    L.append("")
    L.append("| saver | status | details |")
    L.append("|---|---|---|")
    for n in names:
        c = res["correctness"].get(n)
        if not c:
            L.append(f"| {n} | – | not checked |")
            continue
        det = c["failures"][:3] + c["warnings"][:2]
        more = c["n_failures"] + c["n_warnings"] - len(det)
        txt = "; ".join(det) + (f"; … {more} more" if more > 0 else "")
        L.append(f"| {n} | {c['status']} | {txt.replace('|', '/') or '–'} |")
    L.append("")
    if res["errors"]:
        L.append("## Errors during the run")
        L.append("")
        for n, es in res["errors"].items():
            for e in es[:3]:
                L.append(f"- {n}: {e}")
        L.append("")
    L.append("## Skipped savers")
    L.append("")
    if res["skipped"]:
        for n, why in res["skipped"].items():
            L.append(f"- **{n}**: {why}")
    else:
        L.append("- none")
    L.append("")
    return "\n".join(L)


def chart(res: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(res["savers"])
    cmap = plt.get_cmap("tab20")
    color = {n: cmap(i % 20) for i, n in enumerate(names)}
    fig, axs = plt.subplots(3, 2, figsize=(18, 16))

    def bars(ax, rows, cols, get, ylabel, title, log=True):
        width = 0.8 / max(len(rows), 1)
        for i, n in enumerate(rows):
            ax.bar([j + i * width for j in range(len(cols))], [get(n, c) or 0 for c in cols], width, label=n,
                   color=color[n])
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cols))], cols, rotation=12, fontsize=8)
        if log:
            ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        if rows:
            ax.legend(fontsize=7, ncol=2)

    bars(axs[0][0], names, OPS, lambda n, o: res["latency"].get(n, {}).get(o, {}).get("p50_us"),
         "p50 latency (µs, log)", "Latency per operation (p50)")
    rn = [n for n in names if res["ratios"].get(n)]
    bars(axs[0][1], rn, OPS, lambda n, o: res["ratios"][n].get(o), "p50 / p50 of floor (log)",
         "Ratio to the floor (same sync/async kind; 1.0 = floor)")
    axs[0][1].axhline(1.0, color="k", lw=1)

    for ax, keys, title in ((axs[1][0], ("get_latest_p50_us",), "Scaling: get_tuple latest"),
                            (axs[1][1], ("list_before_p50_us", "list5_before_p50_us"),
                             "Scaling: list(before=middle), limit=10 solid / limit=5 dashed")):
        for n in names:
            sc = res["scaling"].get(n, {})
            for key, style in zip(keys, ("-", "--"), strict=False):  # one or two keys: solid, then dashed
                xs = [int(s) for s, d in sc.items() if d.get(key)]
                if xs:
                    ax.plot(xs, [sc[str(x)][key] for x in xs], marker="o", ls=style, color=color[n],
                            label=n if style == "-" else None)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("checkpoints in the thread")
        ax.set_ylabel("p50 µs (log)")
        ax.set_title(title)
        if ax.get_lines():
            ax.legend(fontsize=7)

    tn = [n for n in names if res["throughput"].get(n)]
    bars(axs[2][0], tn, TP_LEVELS, lambda n, c: res["throughput"][n].get(c, {}).get("steps_per_s"),
         "put+put_writes steps/s (log)", "Throughput (median of runs)")

    ax = axs[2][1]
    bn = [n for n in names if n in res["bytes_per_checkpoint"]]
    ax.barh(bn, [float(res["bytes_per_checkpoint"][n]["bytes"]) / 1024 for n in bn], color=[color[n] for n in bn])
    ax.set_xlabel("KiB stored per checkpoint (Redis used_memory delta; Postgres: relation size delta)")
    ax.set_title("Storage per checkpoint")
    for lbl in ax.get_yticklabels():
        lbl.set_fontsize(8)
    sk = "; ".join(f"{k}: {v[:60]}" for k, v in res.get("skipped", {}).items())
    fig.suptitle(f"redis_saver benchmark ({res['meta']['mode']}, {res['meta']['started_utc']})"
                 + (f"\nskipped: {sk}" if sk else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
