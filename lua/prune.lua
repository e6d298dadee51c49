#!lua flags=allow-oom
--- @include "_lib.lua"
--[[ prune: one thread.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
"delete": remove the thread (UNLINK: the memory is freed off the main thread).
"keep_latest": per namespace keep the latest checkpoint with its writes, plus every ancestor
(with its writes) back to the nearest one that stores a value for each DeltaChannel the
latest still needs (channels named in its metadata counters_since_delta_snapshot whose value
it does not store itself); delete the rest; drop blobs no kept checkpoint references; a kept
checkpoint whose parent was deleted loses its parent. A thread pruned in one call is also swept
of what an earlier call that stopped halfway left: value records no kept checkpoint names (at
most 16 x budget blob fields) and run-index entries of runs it no longer holds.
A thread of at most `budget` checkpoints (and 8 x budget writes) is pruned atomically in one
call ("all"). A larger one answers "paged" and the client goes on step by step, each call
bounded by `budget` (redis_saver/core/plans.py, _plan_prune): "ns" lists namespaces, "walk" finds
the checkpoints to keep, "drop" deletes the others a page at a time, "detach" clears the
oldest kept checkpoint's parent, "orphans" drops writes whose checkpoint does not exist; the
blobs go last (gc.lua). Readers see every intermediate state consistent: a checkpoint goes
with its writes, a blob only once no checkpoint left references it.
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] "keep_latest" | "delete"   ARGV[6] step: "all" | "ns" | "walk" | "drop" | "detach" |
        "orphans"   ARGV[7] budget (the most checkpoints or writes one call examines)
then the step's arguments (positions in ARGV):
  ns:      8 e(ns) of the last namespace returned ("" = from the start)
  walk:    8 e(ns)  9 e(cid) to walk from ("" = the latest)  10.. channels still needing a
           value (a continuation)
  drop:    8 e(ns)  9 e(latest)  10 lex cursor ("" = start)  11 "1" when more kept ids
           follow the ones sent  12.. kept e(cid)s, ascending, from the cursor on
  detach:  8 e(ns)  9 e(cid)
  orphans: 8 e(ns)  9 e(latest)  10 lex cursor ("" = start)
Returns: all: {deleted} or {"paged" [PAGED]}; ns: {e(ns), ...} (fewer than 64 = the last ones);
walk: {e(latest), {kept e(cid), ...}, next e(cid) ("" = done), {channels still needed},
e(parent of the oldest kept)}; drop: {deleted, cursor ("" = done), {blob fields of the
deleted checkpoints}}; detach: 1 [DONE]; orphans: cursor ("" = done)
Errors: RS_CYCLE (the parent chain returns to a checkpoint it already walked), RS_BADARG, RS_SCHEMA
]]
local strategy, step, budget = ARGV[5], ARGV[6], tonumber(ARGV[7])
if strategy ~= 'keep_latest' and strategy ~= 'delete' then fail('RS_BADARG', 'unknown strategy') end
if not budget or budget < 1 then fail('RS_BADARG', 'bad budget') end
check_format()
if not META_V then
  -- no such thread (any more: deleted while a paged prune went on): nothing to do
  local done = ({all = {0}, ns = {}, walk = {'', {}, '', {}, ''}, drop = {0, '', {}}, detach = 1, orphans = ''})[step]
  if done == nil then fail('RS_BADARG', 'unknown prune step') end
  return done
end
if strategy == 'delete' then
  local n = redis.call('HLEN', K_CP)
  drop_thread()
  fix_index_expiry()
  return {n}
end

local NO_PARENT = '\0'  -- enc('')

-- the checkpoints a namespace must keep for its latest: the latest and its ancestors back to
-- the seeds of the delta channels it needs, walking from from_e (the latest when `first`, whose
-- own values needs() already looked at), at most `max` of them. Returns the kept ids (newest
-- first), the id to go on from ("" = done), the channels still needed, and e(parent) of the
-- oldest kept.
local function walk(ns_e, from_e, need, left, first, max)
  local kept, seen = {}, {}
  local cur = from_e
  while cur ~= '' and #kept < max do
    if seen[cur] then fail('RS_CYCLE', 'the parent chain returns to checkpoint ' .. dec(cur, 1)) end
    local raw = redis.call('HGET', K_CP, ns_e .. cur)
    if not raw then return kept, '', {}, cur end
    seen[cur] = true
    kept[#kept + 1] = cur
    local rec = cp_rec(raw, CP_VERSIONS)
    if #kept > 1 or not first then
      local by_ch = blob_field_map(ns_e, rec[CP_VERSIONS])
      for ch, _ in pairs(need) do
        local f = by_ch[ch]
        if f then
          local b = redis.call('HGET', K_BLOB, f)
          if b and b ~= EMPTY_BLOB then need[ch] = nil left = left - 1 end
        end
      end
    end
    if left == 0 or rec[CP_PARENT] == '' then return kept, '', {}, enc(rec[CP_PARENT]) end
    cur = enc(rec[CP_PARENT])
  end
  local rest = {}
  for ch, _ in pairs(need) do rest[#rest + 1] = ch end
  return kept, cur, rest, cur
end

-- the channels the latest checkpoint needs from its ancestors
local function needs(ns_e, latest_e)
  local rec = cp_rec(redis.call('HGET', K_CP, ns_e .. latest_e), CP_DELTA)
  local by_ch = blob_field_map(ns_e, rec[CP_VERSIONS])
  local need, left = {}, 0
  for _, ch in ipairs(rec[CP_DELTA]) do
    local f = by_ch[ch]
    if f then
      local b = redis.call('HGET', K_BLOB, f)
      if not b or b == EMPTY_BLOB then need[ch] = true left = left + 1 end
    end
  end
  return need, left
end

-- clear the parent of a kept checkpoint whose parent is deleted
local function detach(ns_e, cid_e)
  local raw = redis.call('HGET', K_CP, ns_e .. cid_e)
  if not raw then return end
  -- the record keeps its format
  local rec, versions
  if cp_is_mp(raw) then
    rec = cp_unpack(raw)
    versions = rec[CP_VERSIONS]
  else
    rec = unpack_rec(raw)
    versions = unpack_rec(rec[CP_VERSIONS])
  end
  if rec[CP_PARENT] == '' then return end
  bump_guard()
  rec[CP_PARENT] = ''
  if cp_is_mp(raw) then
    redis.call('HSET', K_CP, ns_e .. cid_e, cmsgpack.pack(rec))
  else
    redis.call('HSET', K_CP, ns_e .. cid_e, pack_rec(rec))
  end
  if META_NC ~= '1' then
    redis.call('HSET', K_CHAIN, ns_e .. cid_e, chain_entry({[CP_PARENT] = '', [CP_VERSIONS] = versions}))
  end
end

-- writes stored against ids older than the latest whose checkpoint does not exist (writes
-- of newer ids may precede their checkpoint's put: they stay); from a lex cursor, at most
-- `max` members; returns the cursor to go on from ("" = done)
local function drop_orphans(ns_e, latest_e, cursor, max)
  if GONE[K_WORD] then return '' end
  local from = lo(ns_e)
  if cursor ~= '' then from = '(' .. cursor end
  local members = redis.call('ZRANGE', K_WORD, from, '(' .. ns_e .. latest_e, 'BYLEX', 'LIMIT', 0, max)
  local seen = {}
  for _, m in ipairs(members) do
    local c = string.sub(m, #ns_e + 1, skip(m, #ns_e + 1) - 1)
    if not seen[c] then
      seen[c] = true
      if redis.call('HEXISTS', K_CP, ns_e .. c) == 0 then drop_writes(ns_e, c) end
    end
  end
  if #members < max then return '' end
  return members[#members]
end

-- What an earlier call that stopped halfway may have left in a thread pruned whole (a prune
-- of an earlier version, stopped by a slot that moved: see "Slots that move" in
-- _lib_thread.lua): value records no kept checkpoint names, and run-index entries of runs the
-- thread no longer holds. `kept`: e(ns) -> the kept e(cid)s. Bounded: at most 16 x budget blob
-- fields (a larger thread is left as it is) and `budget` run entries.
local function sweep(kept)
  if not GONE[K_BLOB] and redis.call('HLEN', K_BLOB) <= 16 * budget then
    local refs = {}
    for ns_e, cids in pairs(kept) do
      local members, out = {}, {}
      for i, c in ipairs(cids) do members[i] = ns_e .. c end
      refs_of(ns_e, members, out)
      for _, f in ipairs(out) do refs[f] = true end
    end
    -- HSCAN to its end, not HKEYS: the ACL rule of docs/deployment.md lists the commands the
    -- scripts use; a field HSCAN returns twice is taken once (bounded: HLEN checked above)
    local gone, seen, cursor = {}, {}, '0'
    repeat
      local page = redis.call('HSCAN', K_BLOB, cursor, 'COUNT', 1000)
      cursor = page[1]
      for i = 1, #page[2], 2 do
        local f = page[2][i]
        if not seen[f] and f ~= BLOB_MARK and not refs[f] and not is_stream_part(f) then
          seen[f] = true
          gone[#gone + 1] = f
        end
      end
    until cursor == '0'
    if #gone > 0 then drop_blobs(gone) end
  end
  if not GONE[K_IXR] then
    local p = 't' .. THREAD_E
    for _, m in ipairs(redis.call('ZRANGE', K_IXR, lo(p), hi(p), 'BYLEX', 'LIMIT', 0, budget)) do
      unlink_run_if_unused(string.sub(m, #p + 1))
    end
  end
end

if step == 'all' then
  if redis.call('HLEN', K_CP) > budget or redis.call('ZCARD', K_WORD) > 8 * budget then
    return {'paged'}
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
  -- every namespace walked first: a walk can fail (RS_CYCLE), and nothing is written before
  local deleted, kept, oldest = 0, {}, {}
  for _, ns_e in ipairs(order) do
    local cids = groups[ns_e]
    local need, left = needs(ns_e, cids[#cids])
    local k, _, _, o = walk(ns_e, cids[#cids], need, left, true, #cids + 1)
    kept[ns_e], oldest[ns_e] = k, o
  end
  for _, ns_e in ipairs(order) do
    local cids = groups[ns_e]
    local latest = cids[#cids]
    local kept_list, oldest_parent = kept[ns_e], oldest[ns_e]
    local keep = {}
    for _, c in ipairs(kept_list) do keep[c] = true end
    for _, c in ipairs(cids) do
      if not keep[c] then
        drop_cp(ns_e, c, false)
        deleted = deleted + 1
      end
    end
    drop_orphans(ns_e, latest, '', 8 * budget + 1)
    if #kept_list > 0 and oldest_parent ~= NO_PARENT and not keep[oldest_parent] then
      detach(ns_e, kept_list[#kept_list])
    end
  end
  gc_blobs()
  sweep(kept)
  touch()
  return {deleted}
end

local ns_e = ARGV[8]
if step == 'ns' then
  -- the next namespaces after ARGV[8], one O(log n) range read each
  local out, cur = {}, ns_e
  while #out < 64 do
    local from = '-'
    if cur ~= '' then from = hi(cur) end
    local m = redis.call('ZRANGE', K_CPNS, from, '+', 'BYLEX', 'LIMIT', 0, 1)[1]
    if not m then break end
    cur = string.sub(m, 1, skip(m, 1) - 1)
    out[#out + 1] = cur
  end
  return out
elseif step == 'walk' then
  local from_e, need, left = ARGV[9], {}, 0
  local latest = latest_of(ns_e)
  if not latest then return {'', {}, '', {}, ''} end
  local first = from_e == ''
  if first then
    from_e = latest
    need, left = needs(ns_e, latest)
  else
    for i = 10, #ARGV do need[ARGV[i]] = true left = left + 1 end
  end
  local kept, nxt, rest, oldest_parent = walk(ns_e, from_e, need, left, first, budget)
  return {latest, kept, nxt, rest, oldest_parent}
elseif step == 'drop' then
  local latest_e, cursor, more = ARGV[9], ARGV[10], ARGV[11]
  local keep, last_kept = {}, nil
  for i = 12, #ARGV do keep[ARGV[i]] = true last_kept = ARGV[i] end
  -- members of the namespace after the cursor, older than the latest, and (when more kept
  -- ids follow) not past the last kept id sent: the page's kept ids are all among those sent
  local upper = '(' .. ns_e .. latest_e
  if more == '1' and last_kept then upper = '[' .. ns_e .. last_kept end
  local from = lo(ns_e)
  if cursor ~= '' then from = '(' .. cursor end
  local members = redis.call('ZRANGE', K_CPNS, from, upper, 'BYLEX', 'LIMIT', 0, budget)
  local deleted = 0
  for _, m in ipairs(members) do
    local c = string.sub(m, #ns_e + 1)
    if not keep[c] then
      drop_cp(ns_e, c, false)
      deleted = deleted + 1
    end
  end
  local fields = {}
  for f, _ in pairs(GC[ns_e] or {}) do fields[#fields + 1] = f end
  touch()
  local nxt = ''
  if #members == budget or (more == '1' and #members > 0) then nxt = members[#members] end
  if more == '1' and #members == 0 then nxt = ns_e .. last_kept end
  return {deleted, nxt, fields}
elseif step == 'detach' then
  detach(ns_e, ARGV[9])
  touch()
  return 1
elseif step == 'orphans' then
  local cursor = drop_orphans(ns_e, ARGV[9], ARGV[10], budget)
  touch()
  return cursor
end
fail('RS_BADARG', 'unknown prune step')
