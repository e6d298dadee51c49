#!lua
--- @include "_lib.lua"
--[[ import: write exported data into a new (target) thread, for copy_thread; and the copy's
guard on its source.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] step: "import" | "guard" | "abort" | "stage" | "reveal"
import: ARGV[6] the copy's token   ARGV[7] "1" = the copy's first call   ARGV[8] "1" = its last
      ARGV[9..12] the numbers of stream part, blob, write and checkpoint pairs, then the pairs
      (field, value) in that order: stream parts (directories and frames, under the copy's own
      stream ids: the client gives every copied stream a fresh one), blob records, write
      records, checkpoint records (export.lua's, in cp_id order).
      The first call is refused (RS_EXISTS, nothing written) when any key of the target exists,
      unless its meta holds this token (a retried call) or the thread is expiring (see
      thread_expiring(): the expiry is finished first); it sets meta "xk" to the token and "xp"
      (a copy under way) until the last call; a first call without pairs only checks. Within a call, streams, then values, then
      writes, then checkpoints are written, so a reader of the target never sees a checkpoint
      without its data. A stream's references count the records of the target that name it:
      a record counts when it changes its field (a retried call counts nothing twice); a
      stream sent again (it grew in the source) comes with its new frames only, keeps the
      target's count and drops the frames its new directory does not list.
      Returns 1 [WRITTEN]; 0 [NOT_WRITTEN] (nothing written) on a later call when the target's meta no longer holds
      the token (deleted, expired or started over by another writer since the first call).
guard (with the source thread's keys): ARGV[6] a fresh guard value (an integer)
      Sets the source's meta "g" to it unless it is set (another copy's guard is then shared;
      see bump_guard() in _lib.lua). Returns meta "g", or nil when the thread does not exist.
abort: ARGV[6] the copy's token: removes the target when its meta holds that token and "xp"
      (not once its last call made it visible). Returns 1 [WRITTEN] when it did, else 0
      [NOT_WRITTEN].
stage (the command-line tool's import and migrate, which then write the thread with put and
      put_writes): ARGV[6] a fresh token. Makes the thread's meta with "xk" = the token and "xp"
      set, as a copy's first call does: reads answer as for a thread that does not exist until
      "reveal" (check_counts()), so no reader ever sees the thread partly written. A thread
      holding "xp" under another token (an import or copy that stopped midway) or expiring is
      removed first. Returns 1 [WRITTEN], or 2 [REDONE] when it removed such an unfinished
      thread; 1 [WRITTEN] again when the meta already holds this token (a retried call).
reveal: ARGV[6] the token: clears "xp" (the thread becomes visible whole, in this one call) when
      the meta holds the token. Returns 1 [WRITTEN] when it does, else 0 [NOT_WRITTEN] (the
      thread was deleted, expired or staged again by another writer meanwhile).
Errors: RS_BADARG, RS_SCHEMA, RS_EXISTS (nothing written)
]]
local step, token = ARGV[5], ARGV[6]
local STEPS = {import = true, guard = true, abort = true, stage = true, reveal = true}
if not STEPS[step] or not token or token == '' then
  fail('RS_BADARG', 'bad import arguments')
end
if step == 'guard' then
  if not tonumber(token) then fail('RS_BADARG', 'bad copy guard') end
  check_format()
  if not META_V or META_XP then return nil end  -- absent, or being written (not visible yet)
  redis.call('HSETNX', K_META, 'g', token)
  return redis.call('HGET', K_META, 'g')
end
if step == 'abort' then
  -- not once the last call made it visible ("xp" cleared): a thread is whole or absent
  if redis.call('HGET', K_META, 'xk') ~= token or redis.call('HEXISTS', K_META, 'xp') == 0 then return 0 end
  drop_thread()
  return 1
end
if step == 'reveal' then
  check_format()
  if not META_V or redis.call('HGET', K_META, 'xk') ~= token then return 0 end
  redis.call('HDEL', K_META, 'xp')
  return 1
end
if step == 'stage' then
  check_format()
  if META_V and redis.call('HGET', K_META, 'xk') == token then return 1 end  -- a retried call
  local redone = 1
  if redis.call('EXISTS', unpack(THREAD_KEYS)) > 0 then
    if META_XP then
      redone = 2
    elseif not thread_expiring() then
      local tid = shown_thread_id()
      fail('RS_EXISTS', 'thread ' .. tid .. ' already exists')
    end
    -- while the slot moves, the thread cannot be written afresh here (see "Slots that move"
    -- in _lib_thread.lua): refused before any write, as Redis refuses such a call
    refuse_if_slot_moving()
    forget_thread()
  end
  init_meta()
  redis.call('HSET', K_META, 'xk', token, 'xp', '1')
  META_XP = '1'
  touch()
  return redone
end

local first, last = ARGV[7] == '1', ARGV[8] == '1'
local counts = {tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])}
for i = 1, 4 do
  if not counts[i] then fail('RS_BADARG', 'bad import counts') end
end
if #ARGV ~= 12 + 2 * (counts[1] + counts[2] + counts[3] + counts[4]) then fail('RS_BADARG', 'bad import counts') end
-- validated in full before anything is written
local sdirs, sframes = {}, {}  -- directory field -> its parts; frame field, value, ...
local at = 13
for _ = 1, counts[1] do
  local f, v = ARGV[at], ARGV[at + 1]
  at = at + 2
  if not is_stream_part(f) then fail('RS_BADARG', 'not a stream part') end
  local p = skip(f, skip(f, 1)) + 1
  if string.find(f, '\0', p, true) then
    sframes[#sframes + 1] = f
    sframes[#sframes + 1] = v
  else
    local dir = unpack_rec(v)
    if #dir < 5 or #dir % 2 ~= 1 or not tonumber(dir[1]) or not tonumber(dir[2]) then
      fail('RS_BADARG', 'malformed stream directory')
    end
    sdirs[f] = dir
  end
end
for i = 1, #sframes - 1, 2 do
  local f = sframes[i]
  local p = skip(f, skip(f, 1)) + 1
  if not sdirs[string.sub(f, 1, string.find(f, '\0', p, true) - 1)] then
    fail('RS_BADARG', 'a stream frame without its directory')
  end
end
local wrecs, bstart = {}, at
for _ = 1, counts[2] do
  local f, b = ARGV[at], ARGV[at + 1]
  at = at + 2
  if is_stream_part(f) or not is_blob_record(b) then fail('RS_BADARG', 'bad blob record') end
  if #b <= STREAM_REC_MAX then stream_id(b) end  -- a malformed stream record fails here
end
local wstart = at
for _ = 1, counts[3] do
  local r = unpack_rec(ARGV[at + 1])
  if #r ~= W_PARTS then fail('RS_BADARG', 'write record must have ' .. W_PARTS .. ' parts') end
  wrecs[#wrecs + 1] = r
  skip(ARGV[at], skip(ARGV[at], 1))
  at = at + 2
end
local cstart, recs = at, {}
for _ = 1, counts[4] do
  skip(ARGV[at], 1)
  recs[#recs + 1] = validate_record(ARGV[at + 1])  -- any format's: copied as it is
  at = at + 2
end
local npairs = counts[1] + counts[2] + counts[3] + counts[4]

check_format()
if first then
  if redis.call('EXISTS', unpack(THREAD_KEYS)) > 0 and redis.call('HGET', K_META, 'xk') ~= token then
    if not thread_expiring() then
      local tid = shown_thread_id()
      local why = redis.call('HEXISTS', K_META, 'xp') == 1 and ' (it holds an unfinished copy: an earlier'
        .. ' copy_thread into it stopped midway)' or ''
      fail('RS_EXISTS', 'thread ' .. tid .. ' already exists' .. why .. ': copy_thread copies into a new thread'
        .. ' only; delete_thread() it first')
    end
    -- an expiry under way: finished first, the copy starts the thread afresh; not while the
    -- slot moves (see "Slots that move" in _lib_thread.lua): refused before any write
    refuse_if_slot_moving()
    forget_thread()
    check_format()
  end
  if npairs == 0 then return 1 end  -- only the check (an empty source: the target stays absent)
elseif redis.call('HGET', K_META, 'xk') ~= token then
  return 0
end

init_meta()
if first then redis.call('HSET', K_META, 'xk', token) end
if last then redis.call('HDEL', K_META, 'xp') elseif first then redis.call('HSET', K_META, 'xp', '1') end

-- HSET / ZADD of many pairs, at most 1000 per command (Lua's unpack has a limit)
local function hset_all(key, flat)
  for i = 1, #flat, 2000 do redis.call('HSET', key, unpack(flat, i, math.min(i + 1999, #flat))) end
end
local function zadd_all(key, members)
  local added = 0
  for i = 1, #members, 1000 do
    local args = {}
    for j = i, math.min(i + 999, #members) do
      args[#args + 1] = 0
      args[#args + 1] = members[j]
    end
    added = added + redis.call('ZADD', key, unpack(args))
  end
  return added
end
-- the values of ARGV[from], ARGV[from + 2], ... (the fields of a section) in the hash: one HMGET
local function stored(key, from, to)
  local fields = {}
  for i = from, to - 1, 2 do fields[#fields + 1] = ARGV[i] end
  return hmget(key, fields)
end

-- streams: a directory keeps the target's reference count; frames it no longer lists go
if counts[1] > 0 then mark_blobs() end
local dfields = {}
for d, _ in pairs(sdirs) do dfields[#dfields + 1] = d end
local olds, out, del = hmget(K_BLOB, dfields), {}, {}
for j, d in ipairs(dfields) do
  local dir, old = sdirs[d], olds[j]
  dir[2] = '0'
  if old then
    local o, listed = unpack_rec(old), {}
    dir[2] = o[2]
    for k = 4, #dir - 1, 2 do listed[dir[k]] = true end
    for k = 4, #o - 1, 2 do
      if not listed[o[k]] then del[#del + 1] = d .. '\0' .. o[k] end
    end
  end
  out[#out + 1] = d
  out[#out + 1] = pack_rec(dir)
end
if #del > 0 then redis.call('HDEL', K_BLOB, unpack(del)) end
for i = 1, #sframes do out[#out + 1] = sframes[i] end
hset_all(K_BLOB, out)

-- values: a record counts a reference when it changes its field (and takes one from the
-- stream of the record it replaces)
local refs, cur, n = {}, stored(K_BLOB, bstart, wstart), 0
out = {}
for i = bstart, wstart - 1, 2 do
  n = n + 1
  local f, b, c = ARGV[i], ARGV[i + 1], cur[n]
  if c ~= b then
    local od = stream_of(f, c)
    if od then refs[od] = (refs[od] or 0) - 1 end
    out[#out + 1] = f
    out[#out + 1] = b
    local d = stream_of(f, b)
    if d then refs[d] = (refs[d] or 0) + 1 end
  end
end
if #out > 0 then
  mark_blobs()
  hset_all(K_BLOB, out)
end
for d, k in pairs(refs) do
  if k ~= 0 then stream_ref(d, k) end
end

-- writes: field = e(ns)e(cid) .. e(task_id)idx; the sort member adds e(task_path) before
-- e(task_id) and e(channel) at the end (put_writes.lua)
local function member(field, r)
  local p = skip(field, skip(field, 1))
  return string.sub(field, 1, p - 1) .. enc(r[W_TASK_PATH]) .. string.sub(field, p) .. enc(r[W_CHANNEL])
end
local gone, members = {}, {}
cur, n, out = stored(K_WR, wstart, cstart), 0, {}
for i = wstart, cstart - 1, 2 do
  n = n + 1
  local field, value, c = ARGV[i], ARGV[i + 1], cur[n]
  if c ~= value then
    if c then gone[#gone + 1] = member(field, unpack_rec(c)) end
    out[#out + 1] = field
    out[#out + 1] = value
    members[#members + 1] = member(field, wrecs[n])
  end
end
hset_all(K_WR, out)
zadd_all(K_WORD, members)
-- the replaced members go after the new ones are added (see "Slots that move" in _lib_thread.lua)
if #gone > 0 then
  local added, old = {}, {}
  for _, m in ipairs(members) do added[m] = true end
  for _, m in ipairs(gone) do
    if not added[m] then old[#old + 1] = m end
  end
  if #old > 0 then redis.call('ZREM', K_WORD, unpack(old)) end
end

-- checkpoints last: the new ones in a few commands, one stored with other bytes by store_cp
if counts[4] > 0 then mark_cps() end
cur, n, out = stored(K_CP, cstart, #ARGV + 1), 0, {}
local by_ns, by_id, chain, runs, linked = {}, {}, {}, {}, {}
for i = cstart, #ARGV - 1, 2 do
  n = n + 1
  local field, raw, c = ARGV[i], ARGV[i + 1], cur[n]
  local p = skip(field, 1)
  local ns_e, cid_e = string.sub(field, 1, p - 1), string.sub(field, p)
  if c and c ~= raw then
    store_cp(ns_e, cid_e, raw, recs[n])
  elseif not c then
    local rec = recs[n]
    out[#out + 1] = field
    out[#out + 1] = raw
    by_ns[#by_ns + 1] = field
    by_id[#by_id + 1] = cid_e .. ns_e
    if META_NC ~= '1' then
      chain[#chain + 1] = field
      chain[#chain + 1] = chain_entry(rec)
    end
    if rec[CP_RUN_ID] ~= '' then
      local run_e = enc(rec[CP_RUN_ID])
      runs[#runs + 1] = run_e .. ns_e .. cid_e
      if not linked[run_e] then
        linked[run_e] = true
        grew(K_IXR, redis.call('ZADD', K_IXR, 0, 'r' .. run_e .. THREAD_E, 0, 't' .. THREAD_E .. run_e))
      end
    end
  end
end
hset_all(K_CP, out)
if META_NC == '1' and #by_ns > 0 then redis.call('HINCRBY', K_META, 'n', #by_ns) end
hset_all(K_CHAIN, chain)
zadd_all(K_CPNS, by_ns)
zadd_all(K_CPID, by_id)
grew(K_RUNS, zadd_all(K_RUNS, runs))
touch()
return 1
