#!lua flags=allow-oom
--- @include "_lib.lua"
--[[ prune: one thread, atomically.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
"delete": remove the thread.  "keep_latest": per namespace keep the latest checkpoint with
its writes, plus every ancestor (with its writes) back to the nearest one that stores a
value for each DeltaChannel the latest still needs (channels named in its metadata
counters_since_delta_snapshot whose value it does not store itself); delete the rest; drop
blobs no kept checkpoint references; a kept checkpoint whose parent was
deleted loses its parent.
ARGV[1..4]: header (format, thread id, ttl ms, refresh)   ARGV[5] "keep_latest" | "delete"
Returns: number of checkpoints deleted
]]
local strategy = ARGV[5]
if strategy ~= 'keep_latest' and strategy ~= 'delete' then fail('RS_BADARG', 'unknown strategy') end
check_format()
if not META_V then return 0 end
if strategy == 'delete' then
  local n = redis.call('HLEN', K_CP)
  drop_thread()
  fix_index_expiry()
  return n
end

-- group members (sorted by e(ns) then e(cid)) into namespaces
local groups, order = {}, {}
for _, m in ipairs(redis.call('ZRANGE', K_CPNS, '-', '+', 'BYLEX')) do
  local p = skip(m, 1)
  local ns_e = string.sub(m, 1, p - 1)
  if not groups[ns_e] then groups[ns_e] = {} order[#order + 1] = ns_e end
  local g = groups[ns_e]
  g[#g + 1] = string.sub(m, p)
end

local deleted = 0
for _, ns_e in ipairs(order) do
  local cids = groups[ns_e]
  local latest = cids[#cids]
  local keep = {[latest] = true}
  local rec = unpack_rec(redis.call('HGET', K_CP, ns_e .. latest))
  local by_ch = blob_field_map(ns_e, rec[6])
  local need, left = {}, 0
  for _, ch in ipairs(unpack_rec(rec[9])) do
    local f = by_ch[ch]
    if f then
      local b = redis.call('HGET', K_BLOB, f)
      if not b or unpack_rec(b)[1] == 'empty' then need[ch] = true left = left + 1 end
    end
  end
  local oldest, parent = latest, rec[1]
  while left > 0 and parent ~= '' do
    local p_e = enc(parent)
    local raw = redis.call('HGET', K_CP, ns_e .. p_e)
    if not raw then break end
    keep[p_e] = true
    oldest = p_e
    local prec = unpack_rec(raw)
    local pby = blob_field_map(ns_e, prec[6])
    for ch, _ in pairs(need) do
      local f = pby[ch]
      if f then
        local b = redis.call('HGET', K_BLOB, f)
        if b and unpack_rec(b)[1] ~= 'empty' then need[ch] = nil left = left - 1 end
      end
    end
    parent = prec[1]
  end
  for _, c in ipairs(cids) do
    if not keep[c] then
      drop_cp(ns_e, c, false)
      deleted = deleted + 1
    end
  end
  -- writes stored against older checkpoint ids that are not kept (writes of newer ids
  -- may precede their checkpoint's put: they stay)
  local seen = {}
  for _, m in ipairs(redis.call('ZRANGE', K_WORD, lo(ns_e), hi(ns_e), 'BYLEX')) do
    local c = string.sub(m, #ns_e + 1, skip(m, #ns_e + 1) - 1)
    if not keep[c] and c < latest and not seen[c] then seen[c] = true drop_writes(ns_e, c) end
  end
  -- detach the oldest kept checkpoint from its deleted parent
  local oraw = redis.call('HGET', K_CP, ns_e .. oldest)
  local orec = unpack_rec(oraw)
  if orec[1] ~= '' and not keep[enc(orec[1])] then
    orec[1] = ''
    redis.call('HSET', K_CP, ns_e .. oldest, pack_rec(orec))
    redis.call('HSET', K_CHAIN, ns_e .. oldest, chain_entry(orec))
  end
end
gc_blobs()
touch()
return deleted
