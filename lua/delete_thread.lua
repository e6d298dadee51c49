#!lua flags=allow-oom
--- @include "_lib.lua"
--[[ delete_thread: remove every key of the thread (all namespaces) and its slot-index entries.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
Returns: 1 [DONE]
Errors: RS_BADARG
]]
drop_thread()
fix_index_expiry()
return 1
