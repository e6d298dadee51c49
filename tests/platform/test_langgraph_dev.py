"""The LangGraph dev server (``langgraph dev``, the in-memory API server) with redis_saver as its
checkpointer: ``examples/langgraph_platform`` as a user runs it, driven through ``langgraph_sdk``.

One thread goes through everything the server asks of a checkpointer: a run that stops at an
``interrupt()``, a ``Command(resume=...)``, state and history reads, a copy (``acopy_thread``),
a rollback multitask (``adelete_for_runs``) and a delete (``adelete_thread``). After each step
the test reads Redis itself (keys found with ``KeySchema``, checkpoints through a second saver).

Needs the server packages: ``pip install -e '.[platform]'`` (skipped without them).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip(
    "langgraph_api", reason="the LangGraph server is not installed: pip install -e '.[platform]'"
)
pytest.importorskip("langgraph_cli", reason="langgraph-cli is not installed: pip install -e '.[platform]'")
from langgraph_sdk import get_client  # noqa: E402

from devkit.servers import async_client_kwargs, free_port, start_standalone  # noqa: E402
from redis_saver import AsyncRedisSaver, AsyncRedisStore, KeySchema  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langgraph_platform"
GRAPH = "approval_chat"
TTL_MINUTES = 60
START_TIMEOUT = 90.0  # cold imports of langgraph_api on a busy 2-core machine
CALL_TIMEOUT = 30.0  # any one SDK call / run
SLOW_RUN_S = 30.0  # the run that gets rolled back sleeps this long (it is cancelled long before)


# --------------------------------------------------------------------------- the server


@pytest.fixture(scope="module")
def redis_server():
    server = start_standalone()
    try:
        yield server
    finally:
        server.stop()


class DevServer:
    def __init__(self, proc: subprocess.Popen, url: str, log: Path):
        self.proc, self.url, self.log = proc, url, log

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc.poll() is None:
            # the server runs in its own session: end its process group (uvicorn and any child)
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass


def _server_env(redis_url: str, prefix: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LANGSMITH_", "LANGCHAIN_", "LANGGRAPH_", "OTEL_")) and k != "REDIS_URI"
    }
    env.update(
        REDIS_URL=redis_url,
        REDIS_SAVER_PREFIX=prefix,
        REDIS_SAVER_TTL_MINUTES=str(TTL_MINUTES),
        LANGGRAPH_NO_VERSION_CHECK="true",  # no PyPI query at start
        LANGGRAPH_CLI_NO_ANALYTICS="1",  # no CLI usage ping
        LANGSMITH_TRACING="false",  # no LangSmith; no license key is set, so no metadata loop either
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture(scope="module")
def dev_server(redis_server, tmp_path_factory):
    prefix = "lgp" + uuid.uuid4().hex[:10]
    workdir = tmp_path_factory.mktemp("langgraph_dev")
    app = workdir / "app"  # a copy: the server keeps its own files (.langgraph_api/) next to langgraph.json
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns(".langgraph_api", "__pycache__", ".env"))
    log = workdir / "server.log"
    port = free_port()
    cmd = [
        sys.executable, "-m", "langgraph_cli", "dev",
        "--config", "langgraph.json", "--host", "127.0.0.1", "--port", str(port),
        "--no-browser", "--no-reload", "--server-log-level", "warning",
    ]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=app,
            env=_server_env(redis_server.url, prefix),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = DevServer(proc, f"http://127.0.0.1:{port}", log)
    try:
        _wait_ready(server)
        server.prefix = prefix  # type: ignore[attr-defined]
        yield server
    finally:
        server.stop()


def _wait_ready(server: DevServer) -> None:
    import httpx

    deadline = time.monotonic() + START_TIMEOUT
    last: object = None
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            pytest.fail(f"langgraph dev exited with {server.proc.returncode}:\n{server.log_tail()}")
        try:
            r = httpx.get(server.url + "/ok", timeout=2.0)
            if r.status_code == 200:
                return
            last = r.status_code
        except httpx.HTTPError as e:
            last = e
        time.sleep(0.2)
    pytest.fail(f"langgraph dev not ready after {START_TIMEOUT}s (last: {last!r}):\n{server.log_tail()}")


# --------------------------------------------------------------------------- Redis, read directly


class Store:
    """What Redis holds under the server's prefix, found through KeySchema and a second saver."""

    def __init__(self, client, prefix: str):
        self.client = client
        self.ks = KeySchema(prefix)
        self.saver = AsyncRedisSaver(client, prefix=prefix)

    async def _scan(self, pattern: bytes) -> set[bytes]:
        return {k async for k in self.client.scan_iter(match=pattern, count=1000)}

    async def all_thread_keys(self) -> set[bytes]:
        """Every per-thread key of the prefix (not the slot indexes, not the schema key)."""
        return await self._scan(self.ks.scan_patterns()[0])

    async def keys_of(self, thread_id: str) -> set[bytes]:
        """The keys of ``thread_id`` that exist."""
        return set(self.ks.thread_keys(thread_id)) & await self.all_thread_keys()

    async def checkpoints(self, thread_id: str, **filter_) -> list:
        cfg = {"configurable": {"thread_id": thread_id}}
        return [t async for t in self.saver.alist(cfg, filter=filter_ or None)]


@pytest.fixture
async def store(redis_server, dev_server):
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(redis_server.url, **async_client_kwargs(5.0, 5.0))
    try:
        yield Store(client, dev_server.prefix)
    finally:
        await client.aclose()


# --------------------------------------------------------------------------- the test


async def _within(coro, what: str, server: DevServer, timeout: float = CALL_TIMEOUT):
    try:
        return await asyncio.wait_for(coro, timeout)
    except asyncio.TimeoutError:
        pytest.fail(f"{what}: no answer within {timeout}s\n{server.log_tail()}")


async def _wait_for(pred, what: str, server: DevServer, timeout: float = CALL_TIMEOUT, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await pred():
            return
        await asyncio.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what}\n{server.log_tail()}")


def _texts(values: dict) -> list[str]:
    return [m["content"] for m in values.get("messages", [])]


async def test_thread_lifecycle_through_langgraph_dev(dev_server, store):
    srv = dev_server
    client = get_client(url=srv.url, api_key=None, timeout=CALL_TIMEOUT)
    try:
        await _lifecycle(client, srv, store)
    finally:
        await client.aclose()


async def _lifecycle(client, srv: DevServer, store: Store) -> None:
    # -- a thread and a run that stops at the approval interrupt
    thread = await _within(client.threads.create(), "create thread", srv)
    tid = thread["thread_id"]
    run1 = await _within(
        client.runs.wait(tid, GRAPH, input={"messages": [{"role": "user", "content": "hello"}]}),
        "first run",
        srv,
    )
    state = await _within(client.threads.get_state(tid), "get_state", srv)
    assert state["next"] == ["approve"], state
    [task] = [t for t in state["tasks"] if t["interrupts"]]
    assert task["interrupts"][0]["value"] == {"question": "Send this reply?", "draft": "You said: hello"}
    assert run1["draft"] == "You said: hello", run1

    keys = await store.keys_of(tid)
    assert keys, "no key of the thread in Redis after the first run: the server did not use redis_saver"
    for k in keys:  # the example's TTL: every key of the thread expires, within TTL_MINUTES
        pttl = await store.client.pttl(k)
        assert 0 < pttl <= TTL_MINUTES * 60_000, (k, pttl)

    # -- resume with Command(resume=...)
    out = await _within(client.runs.wait(tid, GRAPH, command={"resume": {"approved": True}}), "resume", srv)
    assert _texts(out) == ["hello", "You said: hello"], out
    state = await _within(client.threads.get_state(tid), "get_state after resume", srv)
    assert state["next"] == [] and _texts(state["values"]) == ["hello", "You said: hello"], state

    # -- history: newest first, through the interrupt, back to the input checkpoint
    history = await _within(client.threads.get_history(tid, limit=50), "get_history", srv)
    stored = await store.checkpoints(tid)
    assert [h["checkpoint"]["checkpoint_id"] for h in history] == [
        t.config["configurable"]["checkpoint_id"] for t in stored
    ]
    assert [h["next"] for h in history][:3] == [[], ["approve"], ["chat"]], [h["next"] for h in history]
    assert history[-1]["metadata"]["source"] == "input"
    run_ids = {t.metadata.get("run_id") for t in stored}
    assert len(run_ids) == 2 and None not in run_ids, run_ids  # the server's metadata reaches the saver
    assert {t.metadata.get("graph_id") for t in stored} == {GRAPH}

    # -- copy: the server calls acopy_thread; the copy's keys exist beside the original's
    copied = await _within(client.threads.copy(tid), "copy thread", srv)
    cid = copied["thread_id"]
    assert cid != tid
    assert await store.keys_of(cid), "the copied thread has no keys in Redis"
    assert len(await store.checkpoints(cid)) == len(stored)
    cstate = await _within(client.threads.get_state(cid), "get_state of the copy", srv)
    assert cstate["values"] == state["values"] and cstate["next"] == []

    # -- rollback multitask: a slow run is superseded; the server calls adelete_for_runs on it
    slow = await _within(
        client.runs.create(
            tid,
            GRAPH,
            input={"messages": [{"role": "user", "content": "slow"}]},
            config={"configurable": {"delay_s": SLOW_RUN_S}},
        ),
        "slow run",
        srv,
    )

    async def slow_run_checkpointed() -> bool:  # it is inside chat's sleep, its checkpoints stored
        return bool(await store.checkpoints(tid, run_id=slow["run_id"]))

    await _wait_for(slow_run_checkpointed, "the slow run's first checkpoints in Redis", srv)
    fast = await _within(
        client.runs.create(
            tid, GRAPH, input={"messages": [{"role": "user", "content": "fast"}]}, multitask_strategy="rollback"
        ),
        "rollback run",
        srv,
    )
    await _within(client.runs.join(tid, fast["run_id"]), "join the rollback run", srv)

    async def slow_run_gone() -> bool:  # the cancelled run's cleanup runs in its worker
        return not await store.checkpoints(tid, run_id=slow["run_id"])

    await _wait_for(slow_run_gone, "delete_for_runs to remove the rolled-back run's checkpoints", srv)
    state = await _within(client.threads.get_state(tid), "get_state after rollback", srv)
    assert _texts(state["values"]) == ["hello", "You said: hello", "fast"], state
    assert state["next"] == ["approve"]
    assert {t.metadata.get("run_id") for t in await store.checkpoints(tid)} == run_ids | {fast["run_id"]}
    assert "slow" not in str(await _within(client.threads.get_history(tid, limit=100), "history", srv))

    # -- delete: nothing of the thread is left in Redis; the copy is untouched
    copy_keys = await store.keys_of(cid)
    await _within(client.threads.delete(tid), "delete thread", srv)
    assert await store.keys_of(tid) == set()
    assert await store.all_thread_keys() == copy_keys  # every thread key left belongs to the copy
    assert await store.checkpoints(tid) == []
    assert tid not in {t.config["configurable"]["thread_id"] async for t in store.saver.alist(None)}
    assert len(await store.checkpoints(cid)) == len(stored)

    await _within(client.threads.delete(cid), "delete the copy", srv)
    assert await store.all_thread_keys() == set()


async def test_store_through_langgraph_dev(dev_server, store):
    """The server's /store endpoints go to AsyncRedisStore (examples/langgraph_platform/store.py)."""
    client = get_client(url=dev_server.url, api_key=None, timeout=CALL_TIMEOUT)
    direct = AsyncRedisStore(store.client, prefix=dev_server.prefix)
    ns = ["users", "u{1}", "memories"]
    try:
        for key, value in (("m1", {"text": "likes tea", "kind": "pref"}), ("m2", {"text": "a cat", "kind": "fact"})):
            await _within(client.store.put_item(ns, key=key, value=value), "put", dev_server)
        item = await _within(client.store.get_item(ns, key="m1"), "get", dev_server)
        assert item["value"] == {"text": "likes tea", "kind": "pref"} and item["namespace"] == ns
        found = await _within(client.store.search_items(["users"], filter={"kind": "pref"}), "search", dev_server)
        assert [i["key"] for i in found["items"]] == ["m1"]
        names = await _within(client.store.list_namespaces(prefix=["users"]), "list", dev_server)
        assert names["namespaces"] == [ns]
        # in Redis, under the server's prefix, apart from its checkpoints
        assert (await direct.aget(tuple(ns), "m2")).value == {"text": "a cat", "kind": "fact"}
        assert {k async for k in store.client.scan_iter(match=direct.keys.scan_pattern())}
        await _within(client.store.delete_item(ns, key="m1"), "delete", dev_server)
        assert await direct.aget(tuple(ns), "m1") is None
    finally:
        await client.aclose()
