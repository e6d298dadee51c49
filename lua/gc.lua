#!lua flags=allow-oom
--- @include "_lib.lua"
--[[ gc: the blob collection of a paged prune or delete_for_runs, a bounded page per call.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
The client holds the candidate blob fields (those the deleted checkpoints referenced), takes
away every field a checkpoint left in the namespace references ("refs", page by page over the
namespace's chain entries), and deletes the rest ("hdel"; with the streams no remaining
record names: drop_blobs() in _lib.lua).
ARGV[1..4]: header (format, thread id, ttl ms, refresh)   ARGV[5] step: "refs" | "hdel"
refs: ARGV[6] e(ns)   ARGV[7] lex cursor ("" = start)   ARGV[8] budget (checkpoints per call)
hdel: ARGV[6..] blob fields
Returns: refs: {cursor ("" = done), {blob fields referenced}}; hdel: number of fields deleted
Errors: RS_BADARG, RS_SCHEMA
]]
local step = ARGV[5]
check_format()
if step == 'hdel' then
  if not META_V then return 0 end
  local fields = {}
  for i = 6, #ARGV do fields[#fields + 1] = ARGV[i] end
  local n = drop_blobs(fields)
  touch()
  return n
elseif step ~= 'refs' then
  fail('RS_BADARG', 'unknown gc step')
end
local ns_e, cursor, budget = ARGV[6], ARGV[7], tonumber(ARGV[8])
if not ns_e or not cursor or not budget or budget < 1 then fail('RS_BADARG', 'bad gc arguments') end
local from = lo(ns_e)
if cursor ~= '' then from = '(' .. cursor end
local members = redis.call('ZRANGE', K_CPNS, from, hi(ns_e), 'BYLEX', 'LIMIT', 0, budget)
local out = {}
refs_of(ns_e, members, out)
local nxt = ''
if #members == budget then nxt = members[#members] end
return {nxt, out}
