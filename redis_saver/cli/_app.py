"""The ``redis-saver`` commands (click + rich). Imported only by ``redis_saver.cli.main``."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import click
from rich.table import Table

from . import _ops as ops
from . import _stream as stream
from ._common import (
    ID_WIDTH,
    PAGE,
    Group,
    State,
    _confirm,
    _duration,
    _fail,
    _load_serde,
    _ns_text,
    _progress,
    _short,
    _size,
    _ts,
    _ttl_text,
    dry_option,
    err,
    json_option,
    jsonable,
    out,
    output_file,
    pass_state,
    yes_option,
)
from ._store import store as _store_group


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--url", envvar="REDIS_URL", metavar="URL",
              help="redis://, rediss://, unix://, redis+cluster://, redis+sentinel://host:port/master "
                   "[env REDIS_URL]")
@click.option("--prefix", envvar="REDIS_SAVER_PREFIX", default="lg", show_default=True,
              help="The saver's key prefix [env REDIS_SAVER_PREFIX].")
@click.option("--ttl", type=click.FloatRange(min=0, min_open=True), envvar="REDIS_SAVER_TTL", metavar="MINUTES",
              help="Your application's default_ttl, for commands that write (prune, unpin, import, migrate): "
                   "the threads they write get this expiry. Without it, prune keeps each thread's "
                   "remaining expiry and import/migrate write threads without one [env REDIS_SAVER_TTL].")
@click.option("--serde", envvar="REDIS_SAVER_SERDE", metavar="MODULE:NAME",
              help="Your application's serializer: a SerializerProtocol object, or a callable returning "
                   "one, imported from MODULE (e.g. EncryptedSerializer); default JsonPlusSerializer "
                   "[env REDIS_SAVER_SERDE].")
@click.version_option(package_name="redis-saver", prog_name="redis-saver")
@click.pass_context
def cli(ctx: click.Context, url: str | None, prefix: str, ttl: float | None, serde: str | None) -> None:
    """Inspect and operate LangGraph checkpoints stored by redis_saver."""
    from redis_saver.keys import KeySchema

    try:
        KeySchema(prefix)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--prefix") from None
    st = State(url, prefix, ttl, _load_serde(serde) if serde else None)
    ctx.obj = st
    ctx.call_on_close(st.close)


def _threads_arg(saver: Any, threads: Iterable[str]) -> tuple[list[str], list[str]]:
    found: list[str] = []
    missing: list[str] = []
    for t in threads:
        (found if ops.thread_exists(saver, t) else missing).append(t)
    return found, missing


# --------------------------------------------------------------------------- read commands


@cli.command()
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


@cli.command()
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


@cli.command()
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


@cli.command()
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


# --------------------------------------------------------------------------- write commands


@cli.command()
@click.argument("thread_ids", nargs=-1, required=True, metavar="THREAD...")
@yes_option
@dry_option
@pass_state
def delete(st: State, thread_ids: tuple[str, ...], yes: bool, dry_run: bool) -> None:
    """Delete threads: every checkpoint, write and blob of them, in every namespace."""
    saver = st.saver()
    found, missing = _threads_arg(saver, thread_ids)
    for t in missing:
        err.print(f"thread {t!r}: not found")
    if not found:
        raise _fail("nothing to delete")
    sums = {t: ops.summarize(saver, t) for t in found}
    for t, s in sums.items():
        n = s.checkpoints if s else 0
        click.echo(f"{'would delete' if dry_run else 'to delete:'} thread {t}: {n} checkpoint(s), "
                   f"{_size(s.bytes if s else 0)}")
    if dry_run:
        return
    _confirm(f"Delete {len(found)} thread(s)?", yes)
    done: list[str] = []
    for t in found:
        try:
            saver.delete_thread(t)
        except Exception as exc:
            left = [x for x in found if x not in done]
            raise _fail(f"deleting {t!r} failed ({exc}); deleted: {done or 'none'}; left unchanged: {left}") from None
        done.append(t)
    click.echo(f"deleted {len(done)} thread(s)")
    if missing:
        raise click.exceptions.Exit(1)


def _targets(
    saver: Any, thread_ids: tuple[str, ...], all_threads: bool, verb: str
) -> tuple[Iterable[str], str, list[str]]:
    """The threads a command acts on: the given ids that exist (each missing one reported), or
    with --all every thread, streamed; (threads, how to name them, the missing ids)."""
    if bool(thread_ids) == all_threads:
        raise click.UsageError("give thread ids or --all (not both)")
    if all_threads:
        return ops.iter_thread_ids(saver), "every thread", []
    found, missing = _threads_arg(saver, thread_ids)
    for t in missing:
        err.print(f"thread {t!r}: not found")
    if not found:
        raise _fail(f"nothing to {verb}")
    return found, f"{len(found)} thread(s)", missing


@cli.command()
@click.argument("thread_ids", nargs=-1, metavar="[THREAD]...")
@click.option("--all", "all_threads", is_flag=True, help="Every thread under the prefix.")
@click.option("--strategy", type=click.Choice(["keep_latest", "delete"]), default="keep_latest", show_default=True,
              help="keep_latest: per namespace, the latest checkpoint (and the ancestors its DeltaChannels "
                   "need) with its writes; delete: remove the threads.")
@yes_option
@dry_option
@pass_state
def prune(st: State, thread_ids: tuple[str, ...], all_threads: bool, strategy: str, yes: bool, dry_run: bool) -> None:
    """Prune threads' history (saver.prune), one atomic call per thread."""
    saver = st.saver()
    targets, what, missing = _targets(saver, thread_ids, all_threads, "prune")
    if dry_run:
        n = 0
        for t in targets:
            s = ops.summarize(saver, t, with_bytes=False)
            if s is None:
                continue
            n += 1
            if strategy == "delete":
                click.echo(f"would delete thread {t}: {s.checkpoints} checkpoint(s)")
            else:
                keep = len(s.namespaces)
                click.echo(f"would prune thread {t}: {s.checkpoints} checkpoint(s) in {keep} namespace(s); "
                           f"keeps the latest of each (plus ancestors its DeltaChannels need), "
                           f"drops up to {s.checkpoints - keep}")
        click.echo(f"dry run: {n} thread(s), nothing changed")
        return
    _confirm(f"Prune ({strategy}) {what}?", yes)
    done, removed = 0, 0
    todo = list(targets) if not all_threads else None
    with _progress() as prog:
        task = prog.add_task("prune", total=len(todo) if todo is not None else None, rate="")
        for t in todo if todo is not None else targets:
            before = ops.count_checkpoints(saver, t)
            try:
                st.writer_for(t).prune([t], strategy=strategy)
            except Exception as exc:
                raise _fail(f"pruning {t!r} failed ({exc}); {done} thread(s) pruned before it; "
                            f"{t!r} and the threads after it were left unchanged") from None
            removed += before - (0 if strategy == "delete" else ops.count_checkpoints(saver, t))
            done += 1
            prog.advance(task)
    click.echo(f"pruned {done} thread(s) ({strategy}): {removed} checkpoint(s) removed")
    if not all_threads and missing:
        raise click.exceptions.Exit(1)


@cli.command()
@click.argument("thread_ids", nargs=-1, metavar="[THREAD]...")
@click.option("--all", "all_threads", is_flag=True, help="Every thread under the prefix.")
@click.option("--after", metavar="THREAD", help="With --all: start after this thread (resume a stopped run).")
@yes_option
@pass_state
def rewrite(st: State, thread_ids: tuple[str, ...], all_threads: bool, after: str | None, yes: bool) -> None:
    """Compress values stored raw (by 0.1.x, or with compress=False) in place (saver.rewrite_values).

    Optional: raw values are read as they are. Each thread is rewritten in bounded atomic calls,
    leaving its expiry as it is; a value written meanwhile is left alone. A stopped run can be
    run again (done values are skipped) or resumed with --after, the last thread it printed.
    """
    if after is not None and not all_threads:
        raise click.UsageError("--after goes with --all")
    saver = st.saver()
    targets, what, missing = _targets(saver, thread_ids, all_threads, "rewrite")
    _confirm(f"Rewrite the raw values of {what} compressed?", yes)
    done = values = before = after_bytes = 0
    skipping = after is not None
    with _progress() as prog:
        task = prog.add_task("rewrite", total=len(targets) if isinstance(targets, list) else None, rate="")
        for t in targets:
            if skipping:
                skipping = t != after
                continue
            try:
                r = saver.rewrite_values(t)
            except Exception as exc:
                raise _fail(f"rewriting {t!r} failed ({exc}) after {done} thread(s); run the command "
                            f"again (rewritten values are skipped), or with --all --after {t!r}") from None
            done += 1
            values, before, after_bytes = values + r.values, before + r.bytes_before, after_bytes + r.bytes_after
            prog.advance(task)
            err.print(f"{t}: {r.values} value(s), {_size(r.bytes_before)} -> {_size(r.bytes_after)}")
    click.echo(f"rewrote {done} thread(s): {values} value(s), {_size(before)} -> {_size(after_bytes)}")
    if not all_threads and missing:
        raise click.exceptions.Exit(1)


def _expiry_now(st: State, thread: str) -> str:
    s = ops.summarize(st.saver(), thread)
    if s is None:
        raise _fail(f"thread {thread!r}: not found")
    return _ttl_text(s, st.ttl)


@cli.command()
@click.argument("thread")
@yes_option
@dry_option
@pass_state
def pin(st: State, thread: str, yes: bool, dry_run: bool) -> None:
    """Pin a thread: it never expires until unpinned."""
    now = _expiry_now(st, thread)
    if dry_run:
        click.echo(f"would pin thread {thread} (expiry now: {now})")
        return
    _confirm(f"Pin thread {thread} (expiry now: {now}) so that it never expires?", yes)
    st.saver().pin(thread)
    click.echo(f"pinned {thread}")


@cli.command()
@click.argument("thread")
@yes_option
@dry_option
@pass_state
def unpin(st: State, thread: str, yes: bool, dry_run: bool) -> None:
    """Unpin a thread: it expires again, --ttl minutes after this call."""
    now = _expiry_now(st, thread)
    then = "no expiry until your application's next write" if st.ttl is None else f"expires in {_duration(st.ttl * 60)}"
    if dry_run:
        click.echo(f"would unpin thread {thread} (expiry now: {now}; then: {then})")
        return
    _confirm(f"Unpin thread {thread} ({then})?", yes)
    st.saver(st.ttl).unpin(thread)
    click.echo(f"unpinned {thread}: {then}")
    if st.ttl is None:
        err.print("note: pass --ttl MINUTES (your application's default_ttl) to set its expiry now, "
                  "or run: redis-saver expire THREAD MINUTES")


@cli.command()
@click.argument("thread")
@click.argument("minutes", type=click.FloatRange(min=0, min_open=True))
@yes_option
@dry_option
@pass_state
def expire(st: State, thread: str, minutes: float, yes: bool, dry_run: bool) -> None:
    """Make a whole thread expire MINUTES from now (every key at once; unpins it)."""
    saver = st.saver()
    s = ops.summarize(saver, thread)
    if s is None:
        raise _fail(f"thread {thread!r}: not found")
    now = "no expiry" if s.expires_in_ms is None else f"expires in {_duration(s.expires_in_ms / 1000)}"
    if s.expires_in_ms is None and st.ttl is not None:
        now = "pinned"
    if dry_run:
        click.echo(f"would set thread {thread} to expire in {_duration(minutes * 60)} (now: {now})")
        return
    _confirm(f"Thread {thread} ({now}) will expire in {_duration(minutes * 60)}. Continue?", yes)
    # unpin through a saver whose default_ttl is MINUTES: the pin script sets every key's
    # expiry (and the slot index) in one atomic call
    st.saver(minutes).unpin(thread)
    click.echo(f"thread {thread} expires in {_duration(minutes * 60)}")


# --------------------------------------------------------------------------- export / import


@cli.command("export")
@click.argument("thread_ids", nargs=-1, metavar="[THREAD]...")
@click.option("-o", "--output", "path", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="File to write ('-' = stdout).")
@pass_state
def export_cmd(st: State, thread_ids: tuple[str, ...], path: str) -> None:
    """Export threads (all of them by default) as a versioned JSON-lines stream."""
    saver = st.saver()
    if thread_ids:
        found, missing = _threads_arg(saver, thread_ids)
        if missing:
            raise click.UsageError(f"not found: {', '.join(missing)}")
        ids: Iterable[str] = found
    else:
        ids = ops.iter_thread_ids(saver)
    n_t = n_c = n_w = 0
    t0 = time.monotonic()
    with output_file(path) as f:
        stream.write_line(f, stream.header(st.prefix, saver.serde))
        with _progress() as prog:
            task = prog.add_task("export", total=len(thread_ids) or None, rate="")
            for tid in ids:
                items = ops.items_from_tuples(list(saver.list(ops.thread_config(tid))))
                for it in items:
                    stream.write_line(f, stream.encode_item(saver.serde, it))
                    n_w += len(it.writes)
                n_t += 1 if items else 0
                n_c += len(items)
                prog.update(task, advance=1, rate=_rate(n_c, t0))
        stream.write_line(f, {"type": "end", "threads": n_t, "checkpoints": n_c, "writes": n_w})
    err.print(f"exported {n_t} thread(s), {n_c} checkpoint(s), {n_w} pending write(s) to {path}")


def _rate(n: int, t0: float) -> str:
    dt = time.monotonic() - t0
    return f"{n / dt:,.0f} checkpoints/s" if dt > 0 and n else ""


@cli.command("import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, allow_dash=False))
@click.option("--replace", is_flag=True, help="Delete threads that already exist before importing them.")
@click.option("--skip-existing", is_flag=True, help="Leave threads that already exist as they are.")
@yes_option
@dry_option
@pass_state
def import_cmd(st: State, path: str, replace: bool, skip_existing: bool, yes: bool, dry_run: bool) -> None:
    """Import an export stream (checkpoints with their ids, parents, metadata, pending writes)."""
    if replace and skip_existing:
        raise click.UsageError("--replace and --skip-existing exclude each other")
    saver = st.saver()
    with open(path, encoding="utf-8") as f:
        info = stream.check_file(f)
    existing = [t for t in info["threads"] if ops.thread_exists(saver, t)]
    if existing and not (replace or skip_existing):
        raise _fail(f"{len(existing)} thread(s) already exist ({', '.join(existing[:5])}"
                    f"{'...' if len(existing) > 5 else ''}): pass --replace or --skip-existing; nothing was written")
    todo = [t for t in info["threads"] if not (skip_existing and t in existing)]
    verb = "would import" if dry_run else "import"
    click.echo(f"{verb} {len(todo)} thread(s), {info['checkpoints']} checkpoint(s) in the file"
               + (f"; {len(existing)} existing thread(s) " + ("replaced" if replace else "skipped")
                  if existing else ""))
    if dry_run:
        return
    if replace and existing:
        _confirm(f"Replace {len(existing)} existing thread(s)?", yes)
    todo_set = set(todo)
    done: list[str] = []
    n_c = n_w = 0
    t0 = time.monotonic()
    writer = st.saver(st.ttl) if st.ttl is not None else saver
    with open(path, encoding="utf-8") as f, _progress() as prog:
        task = prog.add_task("import", total=len(todo), rate="")
        for tid, items in stream.iter_threads(saver.serde, f):
            if tid not in todo_set:
                continue
            try:
                if tid in existing:
                    saver.delete_thread(tid)
                for it in items:
                    n_w += ops.write_item(writer, it)
                    n_c += 1
            except Exception as exc:
                left = [t for t in todo if t not in done and t != tid]
                raise _fail(f"importing thread {tid!r} failed ({type(exc).__name__}: {exc}); it is partly written "
                            f"(rerun with --replace); imported: {len(done)} thread(s); "
                            f"not touched: {len(left)}") from None
            done.append(tid)
            prog.update(task, advance=1, rate=_rate(n_c, t0))
    click.echo(f"imported {len(done)} thread(s), {n_c} checkpoint(s), {n_w} pending write(s)")


# --------------------------------------------------------------------------- migrate


@cli.command()
@click.option("--from", "source", metavar="SOURCE",
              help="Into Redis: sqlite:///path/to/file.db (SqliteSaver), postgresql://... (PostgresSaver) or "
              "plainredis://host:port/db?prefix=lg (langgraph-checkpoint-plainredis).")
@click.option("--to", "target", metavar="URL",
              help="Out of Redis (--url): sqlite:///path/to/file.db (SqliteSaver; made if missing) or "
              "postgresql://... (PostgresSaver; its tables are set up). With --from: the target Redis URL "
              "(default: --url / REDIS_URL).")
@click.option("--threads", "thread_opt", multiple=True, metavar="ID[,ID...]", help="Only these threads (repeatable).")
@click.option("--verify", is_flag=True, help="Afterwards, compare every migrated thread checkpoint by checkpoint.")
@dry_option
@pass_state
def migrate(
    st: State, source: str | None, target: str | None, thread_opt: tuple[str, ...], verify: bool, dry_run: bool
) -> None:
    """Copy threads from SqliteSaver / PostgresSaver into Redis (--from), or out of Redis into
    them (--to sqlite:///... | postgresql://...), oldest checkpoint first.

    Ids, parents, metadata and pending writes (in order) are preserved; going out, channel
    versions are rewritten into the target saver's form, in the same order, so a thread goes on
    there. Resumable: checkpoints already copied (same id, same number of pending writes) are
    skipped, and so are threads already complete. The source is only read.
    """
    import contextlib
    from urllib.parse import urlsplit

    from ._sources import TARGET_SCHEMES, open_source, open_target

    out_of_redis = target is not None and urlsplit(target).scheme in TARGET_SCHEMES
    if source and out_of_redis:
        raise click.UsageError("--from and --to sqlite/postgresql: one side is Redis (--url / REDIS_URL)")
    if not source and not out_of_redis:
        raise click.UsageError("give --from SOURCE (into Redis) or --to sqlite:///... | postgresql://... (out of it)")
    if target and not out_of_redis:
        st.url = target
    st.require_url()
    wanted = [t for opt in thread_opt for t in opt.split(",") if t]
    saver = st.saver()
    with contextlib.ExitStack() as stack:
        if out_of_redis:
            assert target is not None
            if wanted:
                unknown = [t for t in wanted if not ops.thread_exists(saver, t)]
                if unknown:
                    raise click.UsageError(f"not in Redis: {', '.join(unknown)}")
                ids = wanted
            else:
                ids = list(ops.iter_thread_ids(saver))
            src = saver
            dst = writer = stack.enter_context(open_target(target, dry_run))
            err.print(f"Redis {_redact(st.require_url())} -> {_redact(target)}: {len(ids)} thread(s)")
        else:
            assert source is not None
            src, ids = stack.enter_context(open_source(source))
            dst, writer = saver, st.saver(st.ttl) if st.ttl is not None else saver
            if wanted:
                unknown = [t for t in wanted if t not in set(ids)]
                if unknown:
                    raise click.UsageError(f"not in the source: {', '.join(unknown)}")
                ids = wanted
            err.print(f"source {_redact(source)}: {len(ids)} thread(s)")
        _copy_threads(src, dst, writer, ids, other_saver=out_of_redis, verify=verify, dry_run=dry_run)


def _copy_threads(
    src: Any, dst: Any, writer: Any, ids: list[str], *, other_saver: bool, verify: bool, dry_run: bool
) -> None:
    """migrate's copy, either way: each thread read from ``src`` oldest first, the checkpoints
    ``dst`` lacks (or holds with fewer pending writes) written through ``writer``; then, with
    ``verify``, every thread compared through both savers. Exits 1 on a failure or difference."""
    versions = ops.padded_versions if other_saver else ops.our_versions
    t0 = time.monotonic()
    copied = skipped = failed = n_c = n_w = 0
    failures: list[str] = []
    with _progress(transient=False) as prog:
        task = prog.add_task("migrate", total=len(ids), rate="")
        for tid in ids:
            try:
                src_items = ops.items_from_tuples(list(src.list(ops.thread_config(tid))), other_saver=other_saver)
                have = {(t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"]):
                        len(t.pending_writes or ()) for t in dst.list(ops.thread_config(tid))}
                todo = [it for it in src_items if have.get((it.ns, it.checkpoint_id)) != len(it.writes)]
                if not todo:
                    skipped += 1
                elif dry_run:
                    click.echo(f"would copy thread {tid}: {len(todo)} of {len(src_items)} checkpoint(s)")
                    copied += 1
                else:
                    for it in todo:
                        n_w += ops.write_item(writer, it)
                        n_c += 1
                    copied += 1
            except Exception as exc:  # noqa: BLE001 - report and go on with the next thread
                failed += 1
                failures.append(f"{tid}: {type(exc).__name__}: {exc}")
            prog.update(task, advance=1, rate=_rate(n_c, t0))
    mismatches: list[str] = []
    notes: list[str] = []
    if verify and not dry_run:
        with _progress() as prog:
            task = prog.add_task("verify", total=len(ids), rate="")
            for tid in ids:
                diffs = ops.diff_threads(list(src.list(ops.thread_config(tid))),
                                         list(dst.list(ops.thread_config(tid))), notes, versions)
                mismatches.extend(f"{tid}: {d}" for d in diffs)
                prog.advance(task)
    dt = time.monotonic() - t0
    click.echo(f"{'dry run: ' if dry_run else ''}{len(ids)} thread(s): {copied} "
               f"{'to copy' if dry_run else 'copied'}, {skipped} already copied, {failed} failed; "
               f"{n_c} checkpoint(s), {n_w} pending write(s) in {dt:.1f}s"
               + (f" ({n_c / dt:,.0f} checkpoints/s)" if n_c and dt > 0 else ""))
    for f_ in failures:
        err.print(f"[red]failed[/] {f_} (its already-written checkpoints stay; rerun to resume)")
    if verify and not dry_run:
        if mismatches:
            for m in mismatches[:50]:
                err.print(f"[red]mismatch[/] {m}")
            click.echo(f"verify: {len(mismatches)} difference(s)")
        else:
            click.echo(f"verify: {len(ids)} thread(s) identical, checkpoint by checkpoint")
            if notes:
                click.echo(f"  ({len(notes)} checkpoint(s) differ only by a DeltaChannel snapshot: SqliteSaver keeps "
                           "it only in the checkpoint that took it, redis_saver and PostgresSaver store values per "
                           "version and return it with every checkpoint at that version; LangGraph reads the same "
                           "state)")
    if failures or mismatches:
        raise click.exceptions.Exit(1)


def _redact(url: str) -> str:
    from urllib.parse import urlsplit

    p = urlsplit(url)
    return url.replace(":" + p.password + "@", ":***@") if p.password else url



# --------------------------------------------------------------------------- store (RedisStore)
cli.add_command(_store_group)
