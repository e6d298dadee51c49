"""SIGKILL of a server with ``--appendonly yes --appendfsync always``: nothing acknowledged is lost,
nothing is half-written.

A sync writer (a thread) and an async writer (a task on its own loop, in another thread) run
``put`` + ``put_writes`` in a loop, changing thread every 40 checkpoints, until the server is
killed (SIGKILL, ~1.5 s in). The server restarts on the same dir and port. Then every
acknowledged put and put_writes reads back exactly through ``list`` and ``get_tuple``
(checkpoint, metadata, channel values, pending writes); the one call in flight at the kill may
or may not be there, but whole. In Redis itself: every checkpoint has its sort members and
every write its sort member (a script's effects reach the AOF as one MULTI/EXEC).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio

from devkit.servers import async_client_kwargs, client_kwargs, start_standalone
from redis_saver import AsyncRedisSaver, RedisSaver
from redis_saver import demo_server as emb
from tests.faults._util import call, cfg, checkpoint, listed, version

AOF = ("--appendonly", "yes", "--appendfsync", "always")
RUN_SECONDS = 1.5
PER_THREAD = 40
PAD = "p" * 2000  # a second channel, so every checkpoint has more than one blob


@dataclass
class Log:
    """What one writer sent and what was acknowledged."""

    name: str
    # (thread, config, checkpoint, metadata), acked
    puts: list[tuple[str, dict, dict, dict]] = field(default_factory=list)
    writes: dict[str, list[tuple[str, str, Any]]] = field(default_factory=dict)  # checkpoint id -> acked writes
    # the call that got no reply: ("put", thread, checkpoint, metadata) or ("writes", id, writes)
    in_flight: tuple | None = None
    error: BaseException | None = None


async def _writer(saver: Any, log: Log, stop: threading.Event) -> None:
    conf: dict | None = None
    i = 0
    try:
        while not stop.is_set():
            tid = f"{log.name}-{i // PER_THREAD}"
            if i % PER_THREAD == 0:
                conf = cfg(tid)
            cp, md, nv = checkpoint(f"v{i}", version(i + 1), step=i, run_id=f"run-{log.name}-{i}")
            cp["channel_values"]["pad"] = PAD + str(i)
            cp["channel_versions"]["pad"] = version(i + 1)
            nv["pad"] = version(i + 1)
            log.in_flight = ("put", tid, cp, md)
            conf = await call(saver, "put", conf, cp, md, nv)
            log.puts.append((tid, conf, cp, md))
            cid = conf["configurable"]["checkpoint_id"]
            writes = [(f"task{i}", "x", f"w{i}"), (f"task{i}", "y", i)]
            log.in_flight = ("writes", cid, writes)
            await call(saver, "put_writes", conf, [(c, v) for _, c, v in writes], f"task{i}")
            log.writes[cid] = writes
            log.in_flight = None
            i += 1
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        log.error = exc


def _sync_writer(server, log: Log, stop: threading.Event) -> None:
    client = redis.Redis(host=server.host, port=server.port, **client_kwargs())
    try:
        asyncio.run(_writer(RedisSaver(client, prefix="crash"), log, stop))
    finally:
        client.close()


def _async_writer(server, log: Log, stop: threading.Event) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host=server.host, port=server.port, **async_client_kwargs())
        try:
            await _writer(AsyncRedisSaver(client, prefix="crash"), log, stop)
        finally:
            await client.aclose()

    asyncio.run(main())


def _same_checkpoint(tup: Any, cp: dict, md: dict) -> None:
    for k in ("id", "channel_values", "channel_versions", "versions_seen"):
        assert tup.checkpoint[k] == cp[k], (k, tup.checkpoint[k], cp[k])
    assert {k: tup.metadata.get(k) for k in md} == md


async def _verify(saver: Any, log: Log) -> tuple[int, int]:
    """Every acknowledged call of ``log`` reads back exactly; returns (puts, put_writes) checked."""
    by_thread: dict[str, list] = {}
    for tid, conf, cp, md in log.puts:
        by_thread.setdefault(tid, []).append((conf, cp, md))
    fl = log.in_flight
    if fl and fl[0] == "put" and fl[1] not in by_thread:
        by_thread[fl[1]] = []
    n_writes = 0
    for tid, acked in by_thread.items():
        got = await listed(saver, cfg(tid))
        expected_ids = [c["configurable"]["checkpoint_id"] for c, _, _ in reversed(acked)]
        ids = [t.checkpoint["id"] for t in got]
        extra = ids[: len(ids) - len(expected_ids)]
        assert ids[len(extra) :] == expected_ids, (tid, ids[:3], expected_ids[:3])
        if extra:  # only the put in flight at the kill, applied whole
            assert fl and fl[0] == "put" and fl[1] == tid and extra == [fl[2]["id"]], (tid, extra, fl)
            _same_checkpoint(got[0], fl[2], fl[3])
            assert got[0].pending_writes == []
        for tup, (conf, cp, md) in zip(got[len(extra) :], reversed(acked), strict=True):
            assert tup.config == conf
            _same_checkpoint(tup, cp, md)
            cid = cp["id"]
            want = log.writes.get(cid, [])
            if fl and fl[0] == "writes" and fl[1] == cid and tup.pending_writes != want:
                want = fl[2]  # the put_writes in flight, applied whole
            assert tup.pending_writes == want, (cid, tup.pending_writes, want)
            n_writes += cid in log.writes
        if acked:  # get_tuple agrees with list for the latest acknowledged checkpoint
            conf, cp, md = acked[-1]
            tup = await call(saver, "get_tuple", conf)
            assert tup.config == conf and tup.pending_writes == log.writes.get(cp["id"], tup.pending_writes)
            _same_checkpoint(tup, cp, md)
    return len(log.puts), n_writes


def _raw_invariants(r: redis.Redis, saver: RedisSaver, threads: set[str]) -> None:
    """Per thread: one hash field per checkpoint sort member, one per write sort member."""
    for tid in threads:
        meta, cp, cp_ns, cp_id, blob, wr, wr_ord, *_ = saver.keys.thread_keys(tid)
        assert r.hlen(cp) == r.zcard(cp_ns) == r.zcard(cp_id) > 0, tid
        n_wr = r.hlen(wr) - (1 if r.hexists(wr, "") else 0)  # "" is the lean mark, not a write
        assert n_wr == r.zcard(wr_ord), tid
        assert r.hlen(blob) >= 2, tid


def test_sigkill_with_appendfsync_always_loses_nothing_acknowledged():
    server = start_standalone(extra_args=AOF)
    server.owns_dir = False  # the restarted server reuses it
    restarted = None
    try:
        stop = threading.Event()
        logs = [Log("s"), Log("a")]
        threads = [
            threading.Thread(target=_sync_writer, args=(server, logs[0], stop)),
            threading.Thread(target=_async_writer, args=(server, logs[1], stop)),
        ]
        for t in threads:
            t.start()
        time.sleep(RUN_SECONDS)
        server.kill()  # SIGKILL
        killed_at = time.monotonic()
        for t in threads:
            t.join(timeout=10)
        stop.set()
        assert not any(t.is_alive() for t in threads)
        for log in logs:  # each writer ran until the kill cut it off
            assert isinstance(log.error, redis.exceptions.ConnectionError), (log.name, log.error)
            assert len(log.puts) > 50, (log.name, len(log.puts))

        restarted = emb.start_server(None, AOF, port=server.port, dir=server.dir)
        restarted.owns_dir = True
        ready = time.monotonic() - killed_at

        async def verify_all() -> list[tuple[int, int]]:
            out = []
            r = redis.Redis(host=restarted.host, port=restarted.port, **client_kwargs())
            ar = redis.asyncio.Redis(host=restarted.host, port=restarted.port, **async_client_kwargs())
            try:
                sync_saver = RedisSaver(r, prefix="crash")
                out.append(await _verify(sync_saver, logs[0]))
                out.append(await _verify(AsyncRedisSaver(ar, prefix="crash"), logs[1]))
                _raw_invariants(r, sync_saver, {tid for log in logs for tid, *_ in log.puts})
            finally:
                r.close()
                await ar.aclose()
            return out

        counts = asyncio.run(verify_all())
        in_flight = [log.in_flight[0] if log.in_flight else None for log in logs]
        print(
            f"\ncrash: sync {counts[0][0]} puts / {counts[0][1]} put_writes acked, "
            f"async {counts[1][0]} / {counts[1][1]}, "
            f"all read back; in flight at the kill: {in_flight}; restart to ready {ready:.2f} s"
        )
    finally:
        if restarted is not None:
            restarted.stop()
        server.owns_dir = restarted is None
        server.stop()
