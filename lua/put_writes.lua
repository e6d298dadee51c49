#!lua
--- @include "_lib.lua"
--- @lean-variant
--[[ put_writes: store the writes of one task against one checkpoint.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] checkpoint_ns   ARGV[6] checkpoint id   ARGV[7] e(task_id)   ARGV[8] e(task_path)
ARGV[9] n = number of writes
then n pairs: tag = "0" (regular: the first write wins; idx >= 0) or "1" (special: overwrites;
              idx < 0) followed by idx8 (8 hex digits, the write's idx + 2^31), and the write record
A write's field in wr is e(ns)..e(id)..e(task_id)..idx8, its sort member in wr_ord
e(ns)..e(id)..e(task_path)..e(task_id)..idx8..e(channel) (writes_sort_key order; the
channel, taken from the record, lets delta history pick a channel's writes by member).
put_writes+lean (the same script with lua/_keys_lean.lua's layout): KEYS[1] wr [2] wr_ord,
the same ARGV. It reads the lean mark (see _lib.lua: field "" of wr = FORMAT while the thread
is indexed without expiry) with one HGET; when the saver has a ttl or the mark is missing, it
writes nothing and returns nil, and the client sends the 11-key call (9 keys fewer per call,
and no meta read). The full call that finds the thread lost a key (its wr mark or its meta
gone, e.g. evicted under maxmemory) forgets the thread whole and stores nothing (see "Lost
keys" in _lib.lua): it returns -1, and the client raises ThreadEvictedError. Lines marked @full-only are not in put_writes+lean: what they do has no work
there, and the helpers only they use are not created on each call.
Each regular write is one HSETNX (first write wins, also within one call), with no Lua tables
of fields per call (one HMGET of their fields and one HSET of those absent, 3 commands instead of
2 + n, cost more: the tables it needs took longer than the commands it saved).
Returns: number of writes stored; -1 [FORGOTTEN] (the thread was forgotten, nothing stored: see above)
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
  -- a regular write's idx is >= 0 (idx8 from 80000000), a special write's < 0: their fields never
  -- meet (a special write over a regular write's field would leave that write's sort member)
  local tag = ARGV[i]
  if not (string.find(tag, '^0[89a-fA-F]%x%x%x%x%x%x%x$') or string.find(tag, '^1[0-7]%x%x%x%x%x%x%x$')) then
    fail('RS_BADARG', 'bad write tag')
  end
  local ch = write_channel(ARGV[i + 1])
  if not ch then fail('RS_BADARG', 'write record must have 6 parts') end
  chan_e[i] = enc(ch)
end
local prefix = enc(ns) .. enc(cid)
local field_p, member_p = prefix .. task_e, prefix .. path_e .. task_e
if LEAN and (TTL_MS ~= 0 or redis.call('HGET', K_WR, WR_MARK) ~= FORMAT) then
  return false  -- touch() has work to do: the client sends the full call
end
check_format()  -- @full-only
if META_DMG or ((META_IX == 'inf' or META_WM == '1') and redis.call('HEXISTS', K_WR, WR_MARK) == 0) then record_loss() return -1 end  -- @full-only: wr lost
if not META_V and redis.call('EXISTS', K_CP, K_CPNS, K_CPID, K_BLOB, K_WR, K_WORD, K_RUNS, K_CHAIN) > 0 then record_loss() return -1 end  -- @full-only: meta lost
init_meta()  -- @full-only
local stored, members = 0, {}
for i = 10, last, 2 do
  local idx8 = string.sub(ARGV[i], 2)
  if string.byte(ARGV[i]) == 48 then
    -- a regular write ("0"): the first one wins (HSETNX), also within this call
    if redis.call('HSETNX', K_WR, field_p .. idx8, ARGV[i + 1]) == 1 then
      members[#members + 1] = '0'  -- (a string: Redis formats a Lua number with snprintf)
      members[#members + 1] = member_p .. idx8 .. chan_e[i]
      stored = stored + 1
    end
  else
    -- a special write (error, interrupt, ...) replaces an earlier one, whose sort
    -- member may name another task_path
    -- (the new member is added before the old one goes: the write index is never emptied, see
    -- "Slots that move" in _lib_thread.lua)
    local field, member = field_p .. idx8, member_p .. idx8 .. chan_e[i]
    local old = redis.call('HGET', K_WR, field)
    redis.call('HSET', K_WR, field, ARGV[i + 1])
    redis.call('ZADD', K_WORD, '0', member)
    if old then
      local old_ch, old_path = rec_two(old, W_CHANNEL, W_TASK_PATH)
      local old_member = prefix .. enc(old_path) .. task_e .. idx8 .. enc(old_ch)
      if old_member ~= member then redis.call('ZREM', K_WORD, old_member) end
    end
    stored = stored + 1
  end
end
-- the sort members of the regular writes stored, in one command per 500
for i = 1, #members, 1000 do
  redis.call('ZADD', K_WORD, unpack(members, i, math.min(i + 999, #members)))
end
touch()  -- @full-only
if TTL_MS == 0 then redis.call('HSET', K_WR, WR_MARK, FORMAT) end  -- @full-only: a lost mark
return stored
