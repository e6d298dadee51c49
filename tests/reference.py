"""Executable reference model of the checkpoint-saver contract (plain dicts, no Redis).

Written from the semantics redis_saver must hold (identical to InMemorySaver /
PostgresSaver where those define them):

* get_tuple: by id, or the latest = greatest checkpoint id of (thread, ns);
  pending_writes in ``writes_sort_key(task_path, task_id, idx)`` order.
* list: one global ``ORDER BY checkpoint_id DESC`` (PostgresSaver), NOT
  InMemorySaver's grouping by thread/namespace; ``config=None`` = every thread,
  no ``checkpoint_ns`` = every namespace; filter = equality per metadata key
  (``None`` matches a missing key); ``before`` by checkpoint id; exact ``limit``
  (``0`` -> nothing).
* put stores only the channels in ``new_versions`` (blobs keyed by
  (thread, ns, channel, version); a channel in new_versions but absent from
  channel_values is stored as "empty" and reads back absent).
* put_writes: regular writes (idx >= 0) first-write-wins per (task_id, idx);
  special writes (``WRITES_IDX_MAP``) overwrite; task_path kept for ordering.
* delete_thread / delete_for_runs / copy_thread / prune as documented on
  ``BaseCheckpointSaver``.

Values and metadata are round-tripped through the serializer on the way in, so
the model returns exactly what a correct saver returns after decode.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    CheckpointTuple,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

_EMPTY = object()

__all__ = ["ReferenceSaver"]


class ReferenceSaver:
    def __init__(self, serde: Any = None) -> None:
        self.serde = serde or JsonPlusSerializer()
        # (thread, ns) -> {checkpoint_id: (checkpoint_without_values, metadata, parent_id)}
        self.storage: dict[tuple[str, str], dict[str, tuple[dict, dict, str | None]]] = {}
        # (thread, ns, checkpoint_id) -> {(task_id, idx): (task_id, channel, value, task_path)}
        self.writes: dict[tuple[str, str, str], dict[tuple[str, int], tuple]] = {}
        # (thread, ns, channel, version) -> value | _EMPTY
        self.blobs: dict[tuple[str, str, str, Any], Any] = {}

    # -- helpers -----------------------------------------------------------
    def _rt(self, value: Any) -> Any:
        return self.serde.loads_typed(self.serde.dumps_typed(value))

    def threads(self) -> set[str]:
        return {t for (t, _ns), cps in self.storage.items() if cps}

    def checkpoint_ids(self, thread_id: str, ns: str) -> list[str]:
        return sorted(self.storage.get((thread_id, ns), {}))

    def namespaces(self, thread_id: str) -> list[str]:
        return sorted(ns for (t, ns), cps in self.storage.items() if t == thread_id and cps)

    def _tuple(self, thread_id: str, ns: str, cid: str) -> CheckpointTuple:
        ckpt, metadata, parent = self.storage[(thread_id, ns)][cid]
        values = {}
        for ch, ver in ckpt["channel_versions"].items():
            v = self.blobs.get((thread_id, ns, ch, ver), _EMPTY)
            if v is not _EMPTY:
                values[ch] = v
        stored = self.writes.get((thread_id, ns, cid), {})
        ordered = sorted(stored.items(), key=lambda kv: writes_sort_key(kv[1][3], *kv[0]))
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": cid,
                }
            },
            checkpoint={**ckpt, "channel_values": values},
            metadata=metadata,
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": parent,
                    }
                }
                if parent
                else None
            ),
            pending_writes=[(w[0], w[1], w[2]) for _k, w in ordered],
        )

    # -- API ---------------------------------------------------------------
    def get_tuple(self, config: dict) -> CheckpointTuple | None:
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        ns = conf.get("checkpoint_ns", "")
        cps = self.storage.get((thread_id, ns), {})
        cid = conf.get("checkpoint_id")
        if cid:
            if cid not in cps:
                return None
        else:
            if not cps:
                return None
            cid = max(cps)
        return self._tuple(thread_id, ns, cid)

    def list(
        self,
        config: dict | None,
        *,
        filter: dict[str, Any] | None = None,
        before: dict | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        conf = (config or {}).get("configurable", {}) if config else None
        rows = []
        for (thread_id, ns), cps in self.storage.items():
            if conf is not None:
                if thread_id != conf["thread_id"]:
                    continue
                if conf.get("checkpoint_ns") is not None and ns != conf["checkpoint_ns"]:
                    continue
            for cid, (_ckpt, metadata, _parent) in cps.items():
                if conf is not None and conf.get("checkpoint_id") and cid != conf["checkpoint_id"]:
                    continue
                if before and (bid := before["configurable"].get("checkpoint_id")) and cid >= bid:
                    continue
                if filter and not all(metadata.get(k) == v for k, v in filter.items()):
                    continue
                rows.append((cid, thread_id, ns))
        rows.sort(reverse=True)
        if limit is not None:
            rows = rows[: max(limit, 0)]
        return iter([self._tuple(t, ns, cid) for cid, t, ns in rows])

    def put(self, config: dict, checkpoint: dict, metadata: dict, new_versions: dict) -> dict:
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        ns = conf.get("checkpoint_ns", "")
        c = dict(checkpoint)
        values = c.pop("channel_values")
        for ch, ver in new_versions.items():
            self.blobs[(thread_id, ns, ch, ver)] = (
                self._rt(values[ch]) if ch in values else _EMPTY
            )
        self.storage.setdefault((thread_id, ns), {})[checkpoint["id"]] = (
            self._rt(c),
            self._rt(get_checkpoint_metadata(config, metadata)),
            conf.get("checkpoint_id"),
        )
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self, config: dict, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        conf = config["configurable"]
        key = (conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"])
        existing = dict(self.writes.get(key, {}))  # state before this call
        out = self.writes.setdefault(key, {})
        for idx, (ch, value) in enumerate(writes):
            inner = (task_id, WRITES_IDX_MAP.get(ch, idx))
            if inner[1] >= 0 and inner in existing:
                continue
            out[inner] = (task_id, ch, self._rt(value), task_path)

    def _drop_checkpoint(self, thread_id: str, ns: str, cid: str) -> None:
        self.storage[(thread_id, ns)].pop(cid, None)
        self.writes.pop((thread_id, ns, cid), None)

    def delete_thread(self, thread_id: str) -> None:
        for key in [k for k in self.storage if k[0] == thread_id]:
            del self.storage[key]
        for key in [k for k in self.writes if k[0] == thread_id]:
            del self.writes[key]
        for key in [k for k in self.blobs if k[0] == thread_id]:
            del self.blobs[key]

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        run_ids = set(run_ids)
        for (thread_id, ns), cps in list(self.storage.items()):
            for cid, (_c, metadata, _p) in list(cps.items()):
                if metadata.get("run_id") in run_ids:
                    self._drop_checkpoint(thread_id, ns, cid)
        # Blobs referenced by surviving checkpoints stay; unreferenced ones are
        # unobservable, so the model simply keeps them.

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        for (t, ns), cps in list(self.storage.items()):
            if t != source_thread_id:
                continue
            dst = self.storage.setdefault((target_thread_id, ns), {})
            for cid, entry in cps.items():
                dst[cid] = entry
        for (t, ns, cid), ws in list(self.writes.items()):
            if t == source_thread_id:
                self.writes[(target_thread_id, ns, cid)] = dict(ws)
        for (t, ns, ch, ver), v in list(self.blobs.items()):
            if t == source_thread_id:
                self.blobs[(target_thread_id, ns, ch, ver)] = v

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if isinstance(thread_ids, (str, bytes)):
            raise TypeError("thread_ids must be a sequence of thread ids, not a str")
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            for (t, ns), cps in list(self.storage.items()):
                if t != thread_id or not cps:
                    continue
                keep, oldest = self._keep_set(thread_id, ns)
                for cid in list(cps):
                    if cid not in keep:
                        self._drop_checkpoint(thread_id, ns, cid)
                # The oldest kept checkpoint is detached from a parent that is not kept
                # (redis_saver's documented choice, lua/prune.lua; the semantics in the
                # brief are silent here, delete_for_runs leaves parents dangling).
                ckpt, md, parent = cps[oldest]
                if parent is not None and parent not in keep:
                    cps[oldest] = (ckpt, md, None)

    def _keep_set(self, thread_id: str, ns: str) -> tuple[set[str], str]:
        """Latest checkpoint + ancestors back to the nearest one storing a value for
        every DeltaChannel the latest still needs: the channels named in the latest's
        ``counters_since_delta_snapshot`` metadata that have a version there but no
        stored value.  (The differential test never generates that metadata, so there
        it is just the latest.)  Returns (kept ids, oldest kept id)."""
        cps = self.storage[(thread_id, ns)]
        latest = max(cps)
        ckpt, md, parent = cps[latest]
        values = self._tuple(thread_id, ns, latest).checkpoint["channel_values"]
        remaining = {
            ch
            for ch in (md.get("counters_since_delta_snapshot") or {})
            if ch in ckpt["channel_versions"] and ch not in values
        }
        keep, oldest = {latest}, latest
        cur: str | None = parent
        while remaining and cur is not None and cur in cps:
            keep.add(cur)
            oldest = cur
            remaining -= set(self._tuple(thread_id, ns, cur).checkpoint["channel_values"])
            cur = cps[cur][2]
        return keep, oldest

    def get_delta_channel_history(self, *, config: dict, channels: Sequence[str]) -> dict:
        """Same walk as ``BaseCheckpointSaver.get_delta_channel_history``."""
        if not channels:
            return {}
        collected: dict[str, list] = {c: [] for c in channels}
        seed: dict[str, Any] = {}
        remaining = set(channels)
        target = self.get_tuple(config)
        cursor = target.parent_config if target else None
        while cursor is not None and remaining:
            tup = self.get_tuple(cursor)
            if tup is None:
                break
            for w in reversed(tup.pending_writes or []):
                if w[1] in remaining:
                    collected[w[1]].append(w)
            for ch in list(remaining):
                if ch in tup.checkpoint["channel_values"]:
                    seed[ch] = tup.checkpoint["channel_values"][ch]
                    remaining.discard(ch)
            cursor = tup.parent_config
        out: dict[str, dict] = {}
        for ch in channels:
            entry: dict[str, Any] = {"writes": list(reversed(collected[ch]))}
            if ch in seed:
                entry["seed"] = seed[ch]
            out[ch] = entry
        return out
