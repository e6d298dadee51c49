#!lua
--- @include "_lib.lua"
--[[ pin: pin ("1") or unpin ("0") a thread; a pinned thread never expires until unpinned.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)   ARGV[5] "1" | "0"
Returns: 1 [DONE]; 0 [NO_THREAD] when unpinning a thread that does not exist (nothing written).
A thread may be pinned before its first checkpoint.
Errors: RS_BADARG, RS_SCHEMA
]]
local flag = ARGV[5]
if flag ~= '1' and flag ~= '0' then fail('RS_BADARG', 'pin flag must be 1 or 0') end
check_format()
if flag == '1' then
  init_meta()
  redis.call('HSET', K_META, 'pin', '1')
  META_PIN = '1'
else
  if not META_V then return 0 end
  redis.call('HDEL', K_META, 'pin')
  META_PIN = nil
end
touch()
return 1
