#!lua
--- @include "_lib.lua"
--- @lean-variant
--[[ put_writes: store the writes of one task against one checkpoint.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] checkpoint_ns   ARGV[6] checkpoint id   ARGV[7] e(task_id)   ARGV[8] e(task_path)
ARGV[9] n = number of writes
then n pairs: tag = "0" (regular: the first write wins) or "1" (special: overwrites) followed
              by idx8 (8 hex digits, the write's idx + 2^31), and the write record
A write's field in wr is e(ns)..e(id)..e(task_id)..idx8, its sort member in wr_ord
e(ns)..e(id)..e(task_path)..e(task_id)..idx8..e(channel) (writes_sort_key order; the
channel, taken from the record, lets delta history pick a channel's writes by member).
put_writes+lean (the same script with lua/_keys_lean.lua's layout): KEYS[1] wr [2] wr_ord,
the same ARGV. One HMGET of wr reads the lean mark (see _lib.lua: field "" = FORMAT while the
thread is indexed without expiry) with the regular writes' fields; when the saver has a ttl or
the mark is missing, it writes nothing and returns nil, and the client sends the 11-key call
(9 keys fewer per call, and no meta read). The full call (no ttl) sets the mark again if it
was lost (e.g. wr evicted under maxmemory). Lines marked @full-only are not in
put_writes+lean: what they do has no work there, and the helpers only they use are not
created on each call.
Returns: number of writes stored
Errors: RS_BADARG (nothing written), RS_SCHEMA
]]
local ns, cid, task_e, path_e, n = ARGV[5], ARGV[6], ARGV[7], ARGV[8], tonumber(ARGV[9])
if cid == nil or cid == '' then fail('RS_BADARG', 'empty checkpoint id') end
if n == nil or #ARGV ~= 9 + 2 * n then fail('RS_BADARG', 'bad write count') end
if skip(task_e, 1) ~= #task_e + 1 or skip(path_e, 1) ~= #path_e + 1 then
  fail('RS_BADARG', 'task id and task path must each be one encoded component')
end
local last = 9 + 2 * n
local chan_e = {}
for i = 10, last, 2 do
  if not string.find(ARGV[i], '^[01]%x%x%x%x%x%x%x%x$') then fail('RS_BADARG', 'bad write tag') end
  local ch = write_channel(ARGV[i + 1])
  if not ch then fail('RS_BADARG', 'write record must have 6 parts') end
  chan_e[i] = enc(ch)
end
local prefix = enc(ns) .. enc(cid)
local field_p, member_p = prefix .. task_e, prefix .. path_e .. task_e
-- one HMGET: the lean mark, then the field of each regular write (stored already: it loses)
local ask = {WR_MARK}
for i = 10, last, 2 do
  if string.byte(ARGV[i]) == 48 then ask[#ask + 1] = field_p .. string.sub(ARGV[i], 2) end
end
local got = redis.call('HMGET', K_WR, unpack(ask))
if LEAN and (TTL_MS ~= 0 or got[1] ~= FORMAT) then return false end  -- touch() has work to do
check_format()  -- @full-only
init_meta()  -- @full-only
local stored, sets, members, seen, k = 0, {}, {}, {}, 1
for i = 10, last, 2 do
  local idx8 = string.sub(ARGV[i], 2)
  if string.byte(ARGV[i]) == 48 then
    -- a regular write ("0"): the first one wins, also within this call
    k = k + 1
    if not got[k] and not seen[ask[k]] then
      seen[ask[k]] = true
      sets[#sets + 1] = ask[k]
      sets[#sets + 1] = ARGV[i + 1]
      members[#members + 1] = 0
      members[#members + 1] = member_p .. idx8 .. chan_e[i]
      stored = stored + 1
    end
  else
    -- a special write (error, interrupt, ...) replaces an earlier one, whose sort
    -- member may name another task_path
    local field = field_p .. idx8
    local old = redis.call('HGET', K_WR, field)
    if old then
      local old_ch, old_path = rec_two(old, 2, 5)
      redis.call('ZREM', K_WORD, prefix .. enc(old_path) .. task_e .. idx8 .. enc(old_ch))
    end
    redis.call('HSET', K_WR, field, ARGV[i + 1])
    redis.call('ZADD', K_WORD, 0, member_p .. idx8 .. chan_e[i])
    stored = stored + 1
  end
end
-- the regular writes stored and their sort members, in one command each per 500 (a special
-- write never shares a field with a regular one: their idx differ)
for i = 1, #sets, 1000 do
  redis.call('HSET', K_WR, unpack(sets, i, math.min(i + 999, #sets)))
  redis.call('ZADD', K_WORD, unpack(members, i, math.min(i + 999, #members)))
end
touch()  -- @full-only
if TTL_MS == 0 and got[1] ~= FORMAT then redis.call('HSET', K_WR, WR_MARK, FORMAT) end  -- @full-only
return stored
