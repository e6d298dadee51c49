"""The MINIMAL floor: the least a one-round-trip checkpoint saver on plain Redis can send and run.

``bench/floor.py`` (the *floor*, or equivalent-work floor) stores what a correct saver stores, laid out
the obvious way (one field per channel version, one key per blob) and answers every read in one script.
This module strips the write path to the bone, to show what is left of redis_saver's cost once nothing
but the data itself is written:

* ``put``: one EVALSHA whose script runs exactly three commands: one ``HSET`` of the checkpoint hash
  (``c`` the checkpoint without values, ``m`` the metadata, ``p`` the parent id, and the channel versions
  packed into the single field ``v``), one ``HSET`` of the new blobs into the thread's one blob hash
  (skipped when ``new_versions`` is empty: ``HSET`` needs a pair), and one ``ZADD`` of the id.
* ``put_writes``: one EVALSHA running one ``HSET`` per special write (the channels of LangGraph's
  ``WRITES_IDX_MAP``: they overwrite) and one ``HSETNX`` per regular write (the first one wins), nothing else.
* ``get_tuple`` / ``list``: one EVALSHA each (latest id by a lex range, the checkpoint hash by ``HMGET``,
  its blobs by one ``HMGET``, its writes by ``HGETALL``), decoded with the same serde and writes sorted by
  ``writes_sort_key``, which is as much as the workload needs to read correctly.
* ``get_delta_channel_history``: not overridden; LangGraph's default walks ``get_tuple`` from parent to
  parent (one round trip per ancestor), so the minimal floor is no yardstick for delta history.

No TTL, order index, validation, cluster handling, delete or server-side filter: a yardstick, not a product.
"""

from __future__ import annotations

from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    CheckpointTuple,
    get_checkpoint_metadata,
)

from bench.floor import GET_BODY, LIST_BODY, _AsyncFloor, _FloorBase, _pack, _SyncFloor, _unpack

# KEYS: checkpoint hash, blob hash, id index.  ARGV: c, m, p, v, id, then blob field/value pairs.
PUT = """
redis.call('HSET', KEYS[1], 'c', ARGV[1], 'm', ARGV[2], 'p', ARGV[3], 'v', ARGV[4])
if #ARGV > 5 then redis.call('HSET', KEYS[2], unpack(ARGV, 6)) end
redis.call('ZADD', KEYS[3], 0, ARGV[5])
return 1
"""

# KEYS: the checkpoint's writes hash.  ARGV: number of special writes (they come first), then field/value pairs.
PUT_WRITES = """
local last_special = 1 + 2 * tonumber(ARGV[1])
for i = 2, #ARGV, 2 do
  if i < last_special then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  else redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 1
"""

# v holds the checkpoint's blob field names (channel NUL version), separated by \1
_LOAD = """
local function load(p, id)
  local cp = redis.call('HMGET', p .. 'cp:' .. id, 'c', 'm', 'p', 'v')
  if not cp[1] then return false end
  local f = {}
  for name in string.gmatch(cp[4], '[^\\1]+') do f[#f + 1] = name end
  local blobs = {}
  if #f > 0 then blobs = redis.call('HMGET', p .. 'b', unpack(f)) end
  return {id, cp[1], cp[2], cp[3], cp[4], blobs, redis.call('HGETALL', p .. 'w:' .. id)}
end
"""

# KEYS: id index, key prefix.  ARGV: checkpoint id or ''.
GET = _LOAD + GET_BODY

# KEYS: id index, key prefix.  ARGV: before id or '', limit (0 = all).
LIST = _LOAD + LIST_BODY

_EMPTY = b"empty\0"  # a new version of a channel without a value (LangGraph's "no value"); not a serde type


class _MinFloorBase(_FloorBase):
    PREFIX = "mf"

    def _put_args(self, config, checkpoint, metadata, new_versions):
        t, ns, p = self._p(config)
        c = checkpoint.copy()
        values = c.pop("channel_values")
        argv: list = [_pack(self.serde.dumps_typed(c)),
                      _pack(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
                      config["configurable"].get("checkpoint_id") or "",
                      "\1".join(f"{ch}\0{v}" for ch, v in checkpoint["channel_versions"].items()),
                      checkpoint["id"]]
        for ch, v in new_versions.items():
            argv += [f"{ch}\0{v}", _pack(self.serde.dumps_typed(values[ch])) if ch in values else _EMPTY]
        cfg = {"configurable": {"thread_id": t, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}
        return [p + "cp:" + checkpoint["id"], p + "b", p + "idx"], argv, cfg

    def _writes_args(self, config, writes, task_id, task_path):
        _, _, p = self._p(config)
        special: list = []
        regular: list = []
        for idx, (ch, v) in enumerate(writes):
            widx = WRITES_IDX_MAP.get(ch, idx)
            (special if widx < 0 else regular).extend((
                f"{task_id}\0{widx}",
                task_path.encode() + b"\0" + ch.encode() + b"\0" + _pack(self.serde.dumps_typed(v))))
        return [p + "w:" + config["configurable"]["checkpoint_id"]], [len(special) // 2, *special, *regular]

    def _tuple(self, t, ns, row) -> CheckpointTuple:
        cid, c, m, parent, v, blobs, wr = row
        checkpoint = self.serde.loads_typed(_unpack(c))
        values = {}
        for name, b in zip(v.split(b"\1") if v else [], blobs, strict=True):
            if b and not b.startswith(_EMPTY):
                values[name.partition(b"\0")[0].decode()] = self.serde.loads_typed(_unpack(b))
        checkpoint["channel_values"] = values
        cid, parent = cid.decode(), parent.decode()
        return CheckpointTuple(
            config={"configurable": {"thread_id": t, "checkpoint_ns": ns, "checkpoint_id": cid}},
            checkpoint=checkpoint,
            metadata=self.serde.loads_typed(_unpack(m)),
            parent_config={"configurable": {"thread_id": t, "checkpoint_ns": ns, "checkpoint_id": parent}}
            if parent else None,
            pending_writes=[(tid, ch, self.serde.loads_typed(_unpack(val))) for _, tid, ch, val in self._writes(wr)],
        )

    def _register(self, client) -> None:
        self._put = client.register_script(PUT)
        self._pw = client.register_script(PUT_WRITES)
        self._get = client.register_script(GET)
        self._list = client.register_script(LIST)


class MinFloorSaver(_MinFloorBase, _SyncFloor):
    """Sync minimal floor on a ``redis.Redis`` client (the calls are the floor's: ``_SyncFloor``)."""


class AsyncMinFloorSaver(_MinFloorBase, _AsyncFloor):
    """Async minimal floor on a ``redis.asyncio.Redis`` client (the calls are the floor's: ``_AsyncFloor``)."""
