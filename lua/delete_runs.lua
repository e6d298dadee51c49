#!lua flags=allow-oom
--- @include "_lib.lua"
--[[ delete_runs: delete the checkpoints of this thread whose metadata run_id is one of
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
the run ids, with their writes; blobs that no checkpoint left in their namespace references go
too. A thread left empty is removed entirely.
A thread of at most `budget` checkpoints is done atomically in one call ("all"). A larger
one answers "paged": the client then sends "drop" until it answers done (each call deletes at
most `budget` checkpoints and returns the blob fields they referenced), then "finish", and
last the blobs no checkpoint left references (gc.lua), so every call's work is bounded.
ARGV[1..4]: header (format, thread id, ttl ms, refresh)   ARGV[5] step: "all" | "drop" | "finish"
ARGV[6] budget   ARGV[7..] run ids
Returns: all: {deleted} or {"paged" [PAGED]}; drop: {deleted, "1" [MORE] = more to delete | "0", {blob fields
of the deleted checkpoints}}; finish: 1 [EMPTIED] = the thread was left empty and removed, else 0 [KEPT]
Errors: RS_BADARG, RS_SCHEMA
]]
local step, budget = ARGV[5], tonumber(ARGV[6])
if (step ~= 'all' and step ~= 'drop' and step ~= 'finish') or not budget or budget < 1 then
  fail('RS_BADARG', 'bad delete_runs arguments')
end
-- run-index entries of these runs that the thread no longer holds (left by a call of an earlier
-- version that stopped halfway): delete_for_runs finds the thread through them, and drops them
local function unlink_stale()
  for i = 7, #ARGV do unlink_run_if_unused(enc(ARGV[i])) end
end

check_format()
if not META_V then
  -- no such thread (any more): what its run index still says goes
  if step ~= 'drop' then unlink_stale() end
  return ({all = {0}, drop = {0, '0', {}}, finish = 0})[step]
end

local function finish()
  if (GONE[K_CP] or redis.call('HLEN', K_CP) == 0) and META_PIN ~= '1' then
    drop_thread()
    fix_index_expiry()
    return 1
  end
  touch()
  return 0
end

if step == 'finish' then
  unlink_stale()
  return finish()
end
if step == 'all' and redis.call('HLEN', K_CP) > budget then return {'paged'} end

local deleted = 0
for i = 7, #ARGV do
  if GONE[K_RUNS] then break end
  local run_e = enc(ARGV[i])
  local members = redis.call('ZRANGE', K_RUNS, lo(run_e), hi(run_e), 'BYLEX', 'LIMIT', 0, budget - deleted)
  for _, m in ipairs(members) do
    local p = skip(m, #run_e + 1)
    drop_cp(string.sub(m, #run_e + 1, p - 1), string.sub(m, p), false)
    deleted = deleted + 1
  end
  if deleted >= budget then break end
end
if step == 'all' then
  unlink_stale()
  gc_blobs()
  if deleted > 0 then finish() end
  return {deleted}
end
local fields = {}
for _, set in pairs(GC) do
  for f, _ in pairs(set) do fields[#fields + 1] = f end
end
if deleted > 0 then touch() end
local more = '0'
if deleted >= budget then more = '1' end
return {deleted, more, fields}
