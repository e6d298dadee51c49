"""The FLOOR: raw redis-py doing the minimum equivalent work of a checkpoint saver.

One EVALSHA of a tiny Lua script per call, storing/fetching the same serde bytes a saver must store
(checkpoint without values + metadata into a hash and the id into a zset; one blob per *new* channel
version, as LangGraph's ``new_versions`` asks; writes into a hash, first write wins). Reads decode with the
same serde, so the floor is "what any correct saver on plain Redis has to pay", not a no-op.
It is a real ``BaseCheckpointSaver`` (sync + async), so ``graph.invoke`` can run on it too.
No TTL, no cluster handling, no delete, no metadata filter server-side: this is a yardstick, not a product.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.memory import InMemorySaver

PUT = """
redis.call('HSET', KEYS[1], unpack(ARGV, 2, 1 + 2 * tonumber(ARGV[1])))
local i = 2 + 2 * tonumber(ARGV[1])
local nb = tonumber(ARGV[i]); i = i + 1
for _ = 1, nb do redis.call('SET', KEYS[3] .. 'b:' .. ARGV[i], ARGV[i + 1]); i = i + 2 end
redis.call('ZADD', KEYS[2], 0, ARGV[i])
return 1
"""

PUT_WRITES = """
for i = 1, #ARGV, 3 do
  if ARGV[i] == '1' then redis.call('HSET', KEYS[1], ARGV[i + 1], ARGV[i + 2])
  else redis.call('HSETNX', KEYS[1], ARGV[i + 1], ARGV[i + 2]) end
end
return 1
"""

_LOAD = """
local function load(p, id)
  local cp = redis.call('HGETALL', p .. 'cp:' .. id)
  if #cp == 0 then return false end
  local blobs = {}
  for i = 1, #cp, 2 do
    local f = cp[i]
    if string.sub(f, 1, 2) == 'v:' then
      local ch = string.sub(f, 3)
      local b = redis.call('GET', p .. 'b:' .. ch .. ':' .. cp[i + 1])
      if b then blobs[#blobs + 1] = ch; blobs[#blobs + 1] = b end
    end
  end
  return {id, cp, blobs, redis.call('HGETALL', p .. 'w:' .. id)}
end
"""

# the bodies of get and list, after a load(prefix, id) helper (bench/floor_min.py has its own load)
GET_BODY = """
local id = ARGV[1]
if id == '' then
  local r = redis.call('ZREVRANGEBYLEX', KEYS[1], '+', '-', 'LIMIT', 0, 1)
  if #r == 0 then return false end
  id = r[1]
end
return load(KEYS[2], id)
"""
GET = _LOAD + GET_BODY

LIST_BODY = """
local maxr = '+'
if ARGV[1] ~= '' then maxr = '(' .. ARGV[1] end
local ids
if tonumber(ARGV[2]) > 0 then ids = redis.call('ZREVRANGEBYLEX', KEYS[1], maxr, '-', 'LIMIT', 0, tonumber(ARGV[2]))
else ids = redis.call('ZREVRANGEBYLEX', KEYS[1], maxr, '-') end
local out = {}
for _, id in ipairs(ids) do out[#out + 1] = load(KEYS[2], id) end
return out
"""
LIST = _LOAD + LIST_BODY

# Walk the parent chain server-side; per ancestor return its writes and, for each still-open channel,
# the stored blob of that channel's version (non-empty blob = seed, the channel stops there).
DELTA = """
local p = KEYS[1]
local open, n_open = {}, 0
for i = 2, #ARGV do open[ARGV[i]] = true; n_open = n_open + 1 end
local cur = redis.call('HGET', p .. 'cp:' .. ARGV[1], 'p')
local out = {}
while cur and cur ~= '' and n_open > 0 do
  local cp = redis.call('HGETALL', p .. 'cp:' .. cur)
  if #cp == 0 then break end
  local parent, seeds = nil, {}
  for i = 1, #cp, 2 do
    local f = cp[i]
    if f == 'p' then parent = cp[i + 1]
    elseif string.sub(f, 1, 2) == 'v:' and open[string.sub(f, 3)] then
      local ch = string.sub(f, 3)
      local b = redis.call('GET', p .. 'b:' .. ch .. ':' .. cp[i + 1])
      if b and string.sub(b, 1, 6) ~= 'empty\\0' then seeds[#seeds + 1] = ch; seeds[#seeds + 1] = b end
    end
  end
  out[#out + 1] = {cur, redis.call('HGETALL', p .. 'w:' .. cur), seeds}
  for i = 1, #seeds, 2 do if open[seeds[i]] then open[seeds[i]] = nil; n_open = n_open - 1 end end
  cur = parent
end
return out
"""


def _pack(t: tuple[str, bytes]) -> bytes:
    return t[0].encode() + b"\0" + t[1]


def _unpack(b: bytes) -> tuple[str, bytes]:
    i = b.index(b"\0")
    return b[:i].decode(), b[i + 1:]


class _FloorBase(BaseCheckpointSaver):
    get_next_version = InMemorySaver.get_next_version  # LangGraph's string versions, as every peer uses

    PREFIX = "f"

    def __init__(self, client, prefix: str | None = None) -> None:
        super().__init__()
        self.client = client
        self.prefix = self.PREFIX if prefix is None else prefix
        self._register(client)

    def _p(self, config) -> tuple[str, str, str]:
        c = config["configurable"]
        t, ns = c["thread_id"], c.get("checkpoint_ns", "")
        return t, ns, f"{self.prefix}:{{{t}}}:{ns}:"

    def _put_args(self, config, checkpoint, metadata, new_versions):
        t, ns, p = self._p(config)
        c = checkpoint.copy()
        values = c.pop("channel_values")
        fields: list = ["c", _pack(self.serde.dumps_typed(c)),
                        "m", _pack(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
                        "p", config["configurable"].get("checkpoint_id") or ""]
        for ch, v in checkpoint["channel_versions"].items():
            fields += ["v:" + ch, str(v)]
        blobs: list = []
        for ch, v in new_versions.items():
            blobs += [f"{ch}:{v}", _pack(self.serde.dumps_typed(values[ch])) if ch in values else b"empty\0"]
        argv = [len(fields) // 2, *fields, len(blobs) // 2, *blobs, checkpoint["id"]]
        keys = [p + "cp:" + checkpoint["id"], p + "idx", p]
        cfg = {"configurable": {"thread_id": t, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}
        return keys, argv, cfg

    def _writes_args(self, config, writes, task_id, task_path):
        t, ns, p = self._p(config)
        argv: list = []
        for idx, (ch, v) in enumerate(writes):
            widx = WRITES_IDX_MAP.get(ch, idx)
            argv += ["1" if widx < 0 else "0", f"{task_id}\0{widx}",
                     task_path.encode() + b"\0" + ch.encode() + b"\0" + _pack(self.serde.dumps_typed(v))]
        return [p + "w:" + config["configurable"]["checkpoint_id"]], argv

    def _writes(self, flat) -> list:
        ws = []
        for i in range(0, len(flat), 2):
            task_id, _, widx = flat[i].partition(b"\0")
            path, ch, rest = flat[i + 1].split(b"\0", 2)
            tid = task_id.decode()
            ws.append((writes_sort_key(path.decode(), tid, int(widx)), tid, ch.decode(), rest))
        ws.sort(key=lambda w: w[0])
        return ws

    def _tuple(self, t, ns, row) -> CheckpointTuple:
        cid, cp, blobs, wr = row
        h = {cp[i]: cp[i + 1] for i in range(0, len(cp), 2)}
        checkpoint = self.serde.loads_typed(_unpack(h[b"c"]))
        values = {}
        for i in range(0, len(blobs), 2):
            b = blobs[i + 1]
            if not b.startswith(b"empty\0"):
                values[blobs[i].decode()] = self.serde.loads_typed(_unpack(b))
        checkpoint["channel_values"] = values
        cid = cid.decode()
        parent = h[b"p"].decode()
        return CheckpointTuple(
            config={"configurable": {"thread_id": t, "checkpoint_ns": ns, "checkpoint_id": cid}},
            checkpoint=checkpoint,
            metadata=self.serde.loads_typed(_unpack(h[b"m"])),
            parent_config={"configurable": {"thread_id": t, "checkpoint_ns": ns, "checkpoint_id": parent}}
            if parent else None,
            pending_writes=[(tid, ch, self.serde.loads_typed(_unpack(v))) for _, tid, ch, v in self._writes(wr)],
        )

    def _list_args(self, config, before, limit):
        t, ns, p = self._p(config)
        b = get_checkpoint_id(before) if before else None
        return [p + "idx", p], [b or "", limit or 0]

    def _filter(self, tuples, config, filter):
        cid = get_checkpoint_id(config)
        for tup in tuples:
            if cid and tup.config["configurable"]["checkpoint_id"] != cid:
                continue
            if filter and not all(tup.metadata.get(k) == v for k, v in filter.items()):
                continue
            yield tup

    def _delta(self, rows, channels):
        collected = {c: [] for c in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        for _cid, wr, sd in rows:
            found = {sd[i].decode(): sd[i + 1] for i in range(0, len(sd), 2)}
            for _, tid, ch, v in reversed(self._writes(wr)):
                if ch in remaining:
                    collected[ch].append((tid, ch, self.serde.loads_typed(_unpack(v))))
            for ch, b in found.items():
                if ch in remaining:
                    seeds[ch] = self.serde.loads_typed(_unpack(b))
                    remaining.discard(ch)
        out = {}
        for ch in channels:
            e = {"writes": list(reversed(collected[ch]))}
            if ch in seeds:
                e["seed"] = seeds[ch]
            out[ch] = e
        return out

    def _register(self, client) -> None:
        """The scripts, on a sync or an async client (the minimal floor registers its own)."""
        self._put = client.register_script(PUT)
        self._pw = client.register_script(PUT_WRITES)
        self._get = client.register_script(GET)
        self._list = client.register_script(LIST)
        self._dh = client.register_script(DELTA)

    def _delta_args(self, config, channels):
        t, ns, p = self._p(config)
        return [p], [get_checkpoint_id(config) or "", *channels]


class _SyncFloor(_FloorBase):
    """put / put_writes / get_tuple / list on a ``redis.Redis`` client, through the scripts the subclass
    registers as ``_put``, ``_pw``, ``_get`` and ``_list`` (the floor and the minimal floor share them)."""

    def put(self, config, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions):
        keys, argv, cfg = self._put_args(config, checkpoint, metadata, new_versions)
        self._put(keys, argv)
        return cfg

    def put_writes(self, config, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        keys, argv = self._writes_args(config, writes, task_id, task_path)
        self._pw(keys, argv)

    def get_tuple(self, config):
        t, ns, p = self._p(config)
        row = self._get([p + "idx", p], [get_checkpoint_id(config) or ""])
        return self._tuple(t, ns, row) if row else None

    def list(self, config, *, filter=None, before=None, limit=None) -> Iterator[CheckpointTuple]:
        t, ns, _ = self._p(config)
        keys, argv = self._list_args(config, before, None if filter else limit)
        rows = self._list(keys, argv)
        out = self._filter((self._tuple(t, ns, r) for r in rows if r), config, filter)
        for i, tup in enumerate(out):
            if limit is not None and i >= limit:
                return
            yield tup


class FloorSaver(_SyncFloor):
    """Sync floor on a ``redis.Redis`` client."""

    def get_delta_channel_history(self, *, config, channels):
        if not channels:
            return {}
        if not get_checkpoint_id(config):
            config = self.get_tuple(config).config
        keys, argv = self._delta_args(config, channels)
        return self._delta(self._dh(keys, argv), channels)


class _AsyncFloor(_FloorBase):
    """The async twins of ``_SyncFloor``, on a ``redis.asyncio.Redis`` client."""

    async def aput(self, config, checkpoint, metadata, new_versions):
        keys, argv, cfg = self._put_args(config, checkpoint, metadata, new_versions)
        await self._put(keys, argv)
        return cfg

    async def aput_writes(self, config, writes, task_id, task_path=""):
        keys, argv = self._writes_args(config, writes, task_id, task_path)
        await self._pw(keys, argv)

    async def aget_tuple(self, config):
        t, ns, p = self._p(config)
        row = await self._get([p + "idx", p], [get_checkpoint_id(config) or ""])
        return self._tuple(t, ns, row) if row else None

    async def alist(self, config, *, filter=None, before=None, limit=None) -> AsyncIterator[CheckpointTuple]:
        t, ns, _ = self._p(config)
        keys, argv = self._list_args(config, before, None if filter else limit)
        rows = await self._list(keys, argv)
        for i, tup in enumerate(self._filter((self._tuple(t, ns, r) for r in rows if r), config, filter)):
            if limit is not None and i >= limit:
                return
            yield tup


class AsyncFloorSaver(_AsyncFloor):
    """Async floor on a ``redis.asyncio.Redis`` client."""

    async def aget_delta_channel_history(self, *, config, channels):
        if not channels:
            return {}
        if not get_checkpoint_id(config):
            config = (await self.aget_tuple(config)).config
        keys, argv = self._delta_args(config, channels)
        return self._delta(await self._dh(keys, argv), channels)
