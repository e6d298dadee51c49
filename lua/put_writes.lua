#!lua
--- @include "_lib.lua"
--[[ put_writes: store the writes of one task against one checkpoint.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] slot index threads
      [10] slot index runs: the 10 per-thread keys (see _lib.lua, redis_saver/keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] checkpoint_ns   ARGV[6] checkpoint id   ARGV[7] n = number of writes
then n quadruples: field suffix e(task_id)..idx, sort suffix e(task_path)..e(task_id)..idx,
                   write record, "1" if special (overwrites) else "0" (first write wins)
Returns: number of writes stored
Errors: RS_BADARG (nothing written), RS_SCHEMA
]]
local ns, cid, n = ARGV[5], ARGV[6], tonumber(ARGV[7])
if cid == nil or cid == '' then fail('RS_BADARG', 'empty checkpoint id') end
if n == nil or #ARGV ~= 7 + 4 * n then fail('RS_BADARG', 'bad write count') end
for i = 0, n - 1 do
  if not rec_is(ARGV[10 + 4 * i], 6) then fail('RS_BADARG', 'write record must have 6 parts') end
  local sp = ARGV[11 + 4 * i]
  if sp ~= '0' and sp ~= '1' then fail('RS_BADARG', 'bad special flag') end
end
check_format()
local prefix = enc(ns) .. enc(cid)
init_meta()
local stored, members = 0, {}
for i = 0, n - 1 do
  local field = prefix .. ARGV[8 + 4 * i]
  local member = prefix .. ARGV[9 + 4 * i]
  if ARGV[11 + 4 * i] == '0' then
    -- a regular write: the first one wins
    if redis.call('HSETNX', K_WR, field, ARGV[10 + 4 * i]) == 1 then
      members[#members + 1] = 0
      members[#members + 1] = member
      stored = stored + 1
    end
  else
    -- a special write (error, interrupt, ...) replaces an earlier one, whose sort
    -- member may name another task_path
    local old = redis.call('HGET', K_WR, field)
    if old then redis.call('ZREM', K_WORD, prefix .. enc(rec_field(old, 5)) .. ARGV[8 + 4 * i]) end
    redis.call('HSET', K_WR, field, ARGV[10 + 4 * i])
    redis.call('ZADD', K_WORD, 0, member)
    stored = stored + 1
  end
end
-- the sort members of the regular writes stored, in one command per 500 (a special write
-- never shares a field with a regular one: their idx differ)
for i = 1, #members, 1000 do
  redis.call('ZADD', K_WORD, unpack(members, i, math.min(i + 999, #members)))
end
touch()
return stored
