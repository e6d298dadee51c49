"""``redis-saver threads / show / stats / functions``: what a prefix holds and what the server runs
(reads only)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import click
from rich.table import Table

from . import _ops as ops
from ._common import (
    ID_WIDTH,
    PAGE,
    State,
    _confirm,
    _fail,
    _ns_text,
    _progress,
    _short,
    _size,
    _ts,
    _ttl_text,
    err,
    json_option,
    jsonable,
    out,
    pass_state,
)


@click.command()
@click.option("--match", metavar="GLOB", help="Only thread ids matching this glob (e.g. 'user-*').")
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="Stop after N threads.")
@json_option
@pass_state
def threads(st: State, match: str | None, limit: int | None, as_json: bool) -> None:
    """List threads: namespaces, checkpoints, bytes, expiry, latest step and time.

    Threads are read slot by slot and printed as they come (never all ids at once), in
    pages of 50 rows; the order is the index's, not alphabetical.
    """
    saver = st.saver()

    def rows() -> Iterator[ops.ThreadSummary]:
        n = 0
        for tid in ops.iter_thread_ids(saver, match):
            s = ops.summarize(saver, tid)
            if s is None:
                continue  # expired or deleted meanwhile
            if s.expires_in_ms is None and st.ttl is not None:
                s.pinned = True  # --ttl says threads expire: one without expiry is pinned
            yield s
            n += 1
            if limit is not None and n >= limit:
                return

    if as_json:
        first = True
        sys.stdout.write("[")
        for s in rows():
            sys.stdout.write(("\n" if first else ",\n") + json.dumps(s.as_json(), ensure_ascii=False))
            sys.stdout.flush()
            first = False
        sys.stdout.write("\n]\n" if not first else "]\n")
        return

    def table() -> Table:
        t = Table(show_edge=False, pad_edge=False)
        for col, just in (("thread", "left"), ("namespaces", "left"), ("checkpoints", "right"),
                          ("bytes", "right"), ("ttl", "right"), ("step", "right"), ("latest", "left")):
            t.add_column(col, justify=just)  # type: ignore[arg-type]
        return t

    total, page = 0, table()
    for s in rows():
        page.add_row(s.thread_id, _ns_text(s.namespaces), str(s.checkpoints), _size(s.bytes), _ttl_text(s, st.ttl),
                     "" if s.latest_step is None else str(s.latest_step), _ts(s.latest_ts))
        total += 1
        if page.row_count >= PAGE:
            out.print(page)
            page = table()
    if page.row_count:
        out.print(page)
    err.print(f"{total} thread(s)" + (f" matching {match!r}" if match else ""))


def _interrupts(t: Any) -> list[dict[str, Any]]:
    outl = []
    for task_id, channel, value in t.pending_writes or ():
        if channel != "__interrupt__":
            continue
        for intr in value if isinstance(value, (list, tuple)) else [value]:
            outl.append({"task_id": task_id, "id": getattr(intr, "id", None), "value": getattr(intr, "value", intr)})
    return outl


def _next_tasks(cp: Mapping[str, Any]) -> list[str]:
    # LangGraph marks a node to run next by updating its "branch:to:<node>" channel
    return [c[len("branch:to:"):] for c in cp.get("updated_channels") or () if c.startswith("branch:to:")]


@click.command()
@click.argument("thread")
@click.option("--ns", metavar="NS", help="Only this checkpoint namespace ('' = the root graph).")
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="The N newest checkpoints.")
@click.option("--checkpoint", "checkpoint_id", metavar="ID", help="Show one checkpoint's channel values.")
@click.option("--raw", is_flag=True, help="With --checkpoint: each value's type and size, not the value.")
@json_option
@pass_state
def show(st: State, thread: str, ns: str | None, limit: int | None, checkpoint_id: str | None,
         raw: bool, as_json: bool) -> None:
    """A thread's checkpoint timeline, newest first (or one checkpoint with --checkpoint)."""
    saver = st.saver()
    if checkpoint_id is not None:
        _show_checkpoint(saver, thread, ns, checkpoint_id, raw, as_json)
        return
    tuples = list(saver.list(ops.thread_config(thread, ns), limit=limit))
    if not tuples:
        raise _fail(f"thread {thread!r} has no checkpoints" + (f" in namespace {ns!r}" if ns is not None else ""))
    if as_json:
        items = []
        for t in tuples:
            c = t.config["configurable"]
            items.append({
                "checkpoint_id": c["checkpoint_id"],
                "checkpoint_ns": c.get("checkpoint_ns", ""),
                "parent_checkpoint_id": (t.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
                "step": (t.metadata or {}).get("step"),
                "source": (t.metadata or {}).get("source"),
                "ts": t.checkpoint.get("ts"),
                "next": _next_tasks(t.checkpoint),
                "pending_writes": [
                    {"task_id": w[0], "channel": w[1], "value": jsonable(w[2])} for w in t.pending_writes or ()
                ],
                "interrupts": jsonable(_interrupts(t)),
                "metadata": jsonable(t.metadata),
            })
        click.echo(json.dumps({"thread_id": thread, "checkpoints": items}, ensure_ascii=False, indent=1))
        return
    many_ns = len({t.config["configurable"].get("checkpoint_ns", "") for t in tuples}) > 1 or ns
    out.print(f"thread [bold]{thread}[/]: {len(tuples)} checkpoint(s), newest first", highlight=False)
    tab = Table(show_edge=False, pad_edge=False)
    tab.add_column("checkpoint", min_width=ID_WIDTH, overflow="fold")
    if many_ns:
        tab.add_column("ns")
    for col in ("step", "source", "parent", "next", "writes", "interrupts"):
        if col == "parent":
            tab.add_column(col, justify="left", min_width=ID_WIDTH, overflow="fold")
        else:
            tab.add_column(col, justify="right" if col in ("step", "writes") else "left")
    for t in tuples:
        c = t.config["configurable"]
        parent = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id") or "-"
        intr = "; ".join(_short(i["value"], 60) for i in _interrupts(t))
        row = [c["checkpoint_id"]] + ([c.get("checkpoint_ns", "") or "''"] if many_ns else [])
        row += [str((t.metadata or {}).get("step", "")), str((t.metadata or {}).get("source", "")), parent,
                ", ".join(_next_tasks(t.checkpoint)), str(len(t.pending_writes or ())), intr]
        tab.add_row(*row)
    out.print(tab)


def _show_checkpoint(saver: Any, thread: str, ns: str | None, cid: str, raw: bool, as_json: bool) -> None:
    if ns is None:  # find it in any namespace
        t = next(iter(saver.list(ops.thread_config(thread, None, cid), limit=1)), None)
    else:
        t = saver.get_tuple(ops.thread_config(thread, ns, cid))
    if t is None:
        raise _fail(f"no checkpoint {cid!r} in thread {thread!r}")
    values = t.checkpoint.get("channel_values") or {}
    rows = []
    for ch in sorted(values):
        ty, data = saver.serde.dumps_typed(values[ch])
        rows.append((ch, ty, len(data), values[ch]))
    if as_json:
        doc = {
            "thread_id": thread,
            "checkpoint_ns": t.config["configurable"].get("checkpoint_ns", ""),
            "checkpoint_id": cid,
            "parent_checkpoint_id": (t.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
            "metadata": jsonable(t.metadata),
            "channel_versions": jsonable(t.checkpoint.get("channel_versions")),
            "channels": {ch: ({"type": ty, "bytes": n} if raw else {"type": ty, "bytes": n, "value": jsonable(v)})
                         for ch, ty, n, v in rows},
            "pending_writes": [{"task_id": w[0], "channel": w[1], **({} if raw else {"value": jsonable(w[2])})}
                               for w in t.pending_writes or ()],
        }
        click.echo(json.dumps(doc, ensure_ascii=False, indent=1))
        return
    out.print(f"thread [bold]{thread}[/] checkpoint [bold]{cid}[/]"
              f" (ns {t.config['configurable'].get('checkpoint_ns', '')!r})", highlight=False)
    tab = Table(show_edge=False, pad_edge=False)
    tab.add_column("channel")
    tab.add_column("type")
    tab.add_column("bytes", justify="right")
    if not raw:
        tab.add_column("value", overflow="fold")
    for ch, ty, n, v in rows:
        tab.add_row(ch, ty, str(n), *([] if raw else [repr(v)]))
    out.print(tab)
    if t.pending_writes:
        wt = Table(show_edge=False, pad_edge=False, title="pending writes", title_justify="left")
        wt.add_column("task")
        wt.add_column("channel")
        if not raw:
            wt.add_column("value", overflow="fold")
        for w in t.pending_writes:
            wt.add_row(w[0], w[1], *([] if raw else [repr(w[2])]))
        out.print(wt)


@click.command()
@click.option("--no-count", is_flag=True, help="Skip counting checkpoints (reads every thread).")
@json_option
@pass_state
def stats(st: State, no_count: bool, as_json: bool) -> None:
    """Threads, checkpoints, bytes by kind of key; server version, memory and eviction policy."""
    saver, client = st.saver(), st.client
    by_kind: dict[str, list[int]] = {}
    batch: list[bytes] = []

    def flush() -> None:
        pipe = client.pipeline(transaction=False)
        for k in batch:
            pipe.execute_command("MEMORY USAGE", k, "SAMPLES", "0")
        for k, n in zip(batch, pipe.execute(), strict=True):  # one reply per command
            acc = by_kind.setdefault(ops.key_kind(saver, k), [0, 0])
            acc[0] += 1
            acc[1] += int(n or 0)
        batch.clear()

    with _progress() as prog:
        task = prog.add_task("keys", total=None, rate="")
        for k in client.scan_iter(match=saver.keys.scan_pattern(), count=1000):
            batch.append(k)
            if len(batch) >= 500:
                flush()
                prog.advance(task, 500)
        if batch:
            prog.advance(task, len(batch))
            flush()
        n_threads, n_cps = 0, 0
        task2 = prog.add_task("threads", total=None, rate="")
        for tid in ops.iter_thread_ids(saver):
            if not no_count:
                n = ops.count_checkpoints(saver, tid)
                if n == 0:
                    continue  # deleted meanwhile, or evicted (the count's read forgot it)
                n_cps += n
            n_threads += 1
            prog.advance(task2)
    server = _server_info(client)
    doc: dict[str, Any] = {
        "prefix": st.prefix,
        "threads": n_threads,
        "checkpoints": None if no_count else n_cps,
        "keys": {k: {"count": v[0], "bytes": v[1]} for k, v in sorted(by_kind.items())},
        "bytes": sum(v[1] for v in by_kind.values()),
        "server": server,
    }
    if as_json:
        click.echo(json.dumps(doc, indent=1))
    else:
        out.print(f"prefix [bold]{st.prefix}[/]: {n_threads} thread(s)"
                  + ("" if no_count else f", {n_cps} checkpoint(s)") + f", {_size(doc['bytes'])} in keys")
        tab = Table(show_edge=False, pad_edge=False)
        tab.add_column("kind of key")
        tab.add_column("keys", justify="right")
        tab.add_column("bytes", justify="right")
        for k, v in doc["keys"].items():
            tab.add_row(k, str(v["count"]), _size(v["bytes"]))
        out.print(tab)
        for node in server:
            out.print(f"{node['node']}: {node['server']} {node['version']}, used memory "
                      f"{node['used_memory_human']}, maxmemory {node['maxmemory']}, "
                      f"maxmemory-policy {node['maxmemory_policy']}")
    for node in server:
        policy = node["maxmemory_policy"]
        if str(policy).startswith("allkeys-") and st.ttl is None:
            err.print(f"[yellow]warning[/]: {node['node']} uses maxmemory-policy {node['maxmemory_policy']}: "
                      "under memory pressure Redis evicts threads (each is forgotten whole), pinned ones and "
                      "ones without a TTL too; use noeviction for durable threads")
        elif str(policy).startswith(("volatile-", "allkeys-")):
            err.print(f"note: {node['node']} uses maxmemory-policy {node['maxmemory_policy']}: threads with a "
                      "TTL are a cache there (evicted whole under memory pressure, idle ones first)")
        elif policy == "unknown":
            err.print(f"[yellow]warning[/]: {node['node']}: CONFIG GET refused; "
                      "check that maxmemory-policy is noeviction")


def _server_info(client: Any) -> list[dict[str, Any]]:
    import redis

    def per_node(reply: Any) -> dict[str, Any]:
        # RedisCluster answers {node: reply} for commands sent to several nodes
        if isinstance(reply, dict) and reply and all(isinstance(v, dict) for v in reply.values()) and \
                not any(k in reply for k in ("redis_version", "used_memory", "maxmemory-policy")):
            return reply
        return {"": reply}

    try:
        cluster = _is_cluster(client)
        info = per_node(client.info(section="server", target_nodes="primaries") if cluster else client.info("server"))
        mem = per_node(client.info(section="memory", target_nodes="primaries") if cluster else client.info("memory"))
    except redis.exceptions.ResponseError:
        info, mem = {"": {}}, {"": {}}
    try:
        cfg = per_node(client.config_get("maxmemory-policy", target_nodes="primaries") if _is_cluster(client)
                       else client.config_get("maxmemory-policy"))
    except redis.exceptions.ResponseError:
        cfg = {}
    out_l = []
    for node, i in info.items():
        m = mem.get(node, {})
        c = cfg.get(node, {})
        policy = c.get("maxmemory-policy") or c.get(b"maxmemory-policy") or "unknown"
        if isinstance(policy, bytes):
            policy = policy.decode()
        server = "valkey" if i.get("valkey_version") or i.get("server_name") == "valkey" else "redis"
        out_l.append({
            "node": node or "server",
            "server": server,
            "version": str(i.get("valkey_version") or i.get("redis_version") or "?"),
            "used_memory": m.get("used_memory"),
            "used_memory_human": m.get("used_memory_human", "?"),
            "maxmemory": m.get("maxmemory_human", m.get("maxmemory", "?")),
            "maxmemory_policy": policy,
        })
    return out_l


def _is_cluster(client: Any) -> bool:
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)


@click.command()
@click.option("--load", is_flag=True, help="Load this version's library (e.g. as an admin, for ACL users with +fcall).")
@click.option("--delete-stale", is_flag=True, help="Delete the redis_saver libraries of other versions.")
@click.option("--yes", is_flag=True, help="Do not ask before deleting.")
@json_option
@pass_state
def functions(st: State, load: bool, delete_stale: bool, yes: bool, as_json: bool) -> None:
    """The redis_saver function libraries on the server (every primary of a cluster).

    Each version of redis_saver loads its own library (named by a digest of its code), so a
    rolling upgrade leaves the previous one behind. Deleting a library a worker still uses is
    safe: its next call finds it missing and loads it again (one extra round trip)."""
    from redis_saver.core.scripts import library

    client, current = st.client, library()
    if load:
        client.function_load(current.source, replace=True)
    names = _libraries(client)
    stale = sorted(n for n in names if n != current.name)
    if delete_stale and stale:
        _confirm(f"delete {len(stale)} stale librar{'y' if len(stale) == 1 else 'ies'} ({', '.join(stale)})?", yes)
        for n in stale:
            client.function_delete(n)
        names = _libraries(client)
    libraries = {n: sorted(nodes) for n, nodes in sorted(names.items())}
    doc = {"current": current.name, "libraries": libraries}
    if as_json:
        click.echo(json.dumps(doc, indent=1))
        return
    if not names:
        out.print(f"no redis_saver library loaded (this version's: {current.name}; calls load it when missing)")
    for n, nodes in libraries.items():
        mark = "this version" if n == current.name else "stale"
        out.print(f"{n}  ({mark})  on {', '.join(nodes)}")


def _libraries(client: Any) -> dict[str, set[str]]:
    """{library name: nodes holding it} for the libraries named redis_saver_*."""
    if _is_cluster(client):
        nodes = {n.name: client.get_redis_connection(n) for n in client.get_primaries()}
    else:
        nodes = {"server": client}
    found: dict[str, set[str]] = {}
    for node, conn in nodes.items():
        for lib in conn.function_list(library="redis_saver_*"):
            fields = dict(zip(lib[::2], lib[1::2], strict=True))
            name = fields.get(b"library_name", fields.get("library_name"))
            name = name.decode() if isinstance(name, bytes) else str(name)
            found.setdefault(name, set()).add(node)
    return found


COMMANDS = (threads, show, stats, functions)
