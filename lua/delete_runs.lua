#!lua flags=allow-oom
--- @include "_lib.lua"
--[[ delete_runs: delete the checkpoints of this thread whose metadata run_id is one of
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[5..], with their writes; blobs that no checkpoint left in their namespace references go
too (the cost follows the deleted data and the records of the namespaces it touched). A thread left empty is removed entirely.
ARGV[1..4]: header (format, thread id, ttl ms, refresh)   ARGV[5..] run ids
Returns: number of checkpoints deleted
]]
check_format()
if not META_V then return 0 end
local deleted = 0
for i = 5, #ARGV do
  local run_e = enc(ARGV[i])
  for _, m in ipairs(redis.call('ZRANGE', K_RUNS, lo(run_e), hi(run_e), 'BYLEX')) do
    local p = skip(m, #run_e + 1)
    drop_cp(string.sub(m, #run_e + 1, p - 1), string.sub(m, p), false)
    deleted = deleted + 1
  end
end
gc_blobs()
if deleted > 0 and redis.call('HLEN', K_CP) == 0 and META_PIN ~= '1' then
  drop_thread()
  fix_index_expiry()
elseif deleted > 0 then
  touch()
end
return deleted
