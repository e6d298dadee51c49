#!lua
--- @include "_lib.lua"
--[[ delete_thread: remove every key of the thread (all namespaces) and its slot-index entries.
KEYS: the 10 per-thread keys (see _lib.lua)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
Returns: 1
]]
drop_thread()
fix_index_expiry()
return 1
