#!lua name=redis_saver_abb40bab343df1ce
-- generated from lua/*.lua by `python -m devkit.luagen`: do not edit (edit those, then run it)
local register_function = redis.register_function
local function builtins() return string, table, math, redis, unpack, ipairs, pairs, tonumber, tostring, error, type end
local string, table, math, redis, unpack, ipairs, pairs, tonumber, tostring, error, type
local KEYS, ARGV, K_META, K_CP, K_CPNS, K_CPID, K_BLOB, K_WR, K_WORD, K_RUNS, K_CHAIN, K_IXT, K_IXR, THREAD_KEYS, LEAN, FORMAT, THREAD_ID, TTL_MS, REFRESH, THREAD_E, META_V, META_IX, META_PIN, META_FH, META_B, META_DMG, META_C, META_WM, META_NC, META_N, META_XP, GC, GONE, LEFT
-- _lib.lua: helpers prepended to every per-thread script by devkit/luagen.py
-- (after the script's #!lua line). Not a script of its own.
--
-- Per-thread scripts share one KEYS layout (redis_saver/keys.py spells the names):
--   KEYS[1] meta   KEYS[2] cp    KEYS[3] cp_ns   KEYS[4] cp_id   KEYS[5] blob
--   KEYS[6] wr     KEYS[7] wr_ord   KEYS[8] runs   KEYS[9] chain
--   KEYS[10] slot index: threads   KEYS[11] slot index: runs
-- and one ARGV header:
--   ARGV[1] storage format version   ARGV[2] thread id   ARGV[3] ttl in ms ("0" = none)
--   ARGV[4] "1" = refresh the thread's expiry (reads); writes always apply the ttl;
--           "f" = a read's forgetting variant (see "Lost keys")
-- A script keeps only the helpers ("local function" at column 0, up to the first "end" at
-- column 0) and one-name locals ("local NAME = ..." on one line) it uses: keep such locals'
-- right-hand sides free of effects, they may not run.
local function fail(code, msg)
  error({err = code .. ' ' .. msg})
end


-- order-preserving, self-delimiting component encoding (keys.enc)
local function enc(s)
  if not string.find(s, '\0', 1, true) then return s .. '\0' end  -- the common case, 4x faster
  return (string.gsub(s, '%z', '\0\255')) .. '\0'
end


-- position just after the encoded component that starts at pos
local function skip(s, pos)
  while true do
    local i = string.find(s, '\0', pos, true)
    if not i then fail('RS_BADARG', 'unterminated component') end
    if string.byte(s, i + 1) == 255 then pos = i + 2 else return i + 1 end
  end
end

local function dec(s, pos)
  local e = skip(s, pos)
  local x = string.sub(s, pos, e - 2)
  if string.find(x, '\255', 1, true) then x = string.gsub(x, '%z\255', '\0') end
  return x, e
end

-- record layouts, 1-based (redis_saver/core/codec.py CP / WR / EMPTY_BLOB; tests/scripts/test_scripts.py
-- checks that both sides agree): the small parts of a checkpoint record the scripts read, the
-- parts of a write record they read, and the whole blob record of a channel without a value
local CP_PARENT, CP_VERSIONS, CP_FILTER, CP_RUN_ID, CP_DELTA, CP_PARENTS, CP_PARTS = 1, 6, 7, 8, 9, 10, 10
local W_CHANNEL, W_TASK_PATH, W_PARTS = 2, 5, 6
local EMPTY_BLOB = '5,0;empty'

-- records: "<len>,<len>,...;" .. parts (redis_saver/core/codec.py)
local function unpack_rec(s)
  if not s then fail('RS_BADARG', 'missing record') end
  local semi = string.find(s, ';', 1, true)
  if not semi then fail('RS_BADARG', 'malformed record') end
  local out, pos = {}, semi + 1
  for n in string.gmatch(string.sub(s, 1, semi - 1), '%d+') do
    n = tonumber(n)
    out[#out + 1] = string.sub(s, pos, pos + n - 1)
    pos = pos + n
  end
  if pos ~= #s + 1 then fail('RS_BADARG', 'malformed record') end
  return out
end

-- true when s is a well-framed blob record (exactly 2 parts): one anchored match with a
-- literal pattern, no table, nothing copied (Lua coerces the captured digit strings in the sum)
local function is_blob_record(s)
  local _, e, a, b = string.find(s, '^(%d+),(%d+);')
  return e ~= nil and e + a + b == #s
end

-- the channel (part 2) of a well-framed write record (exactly 6 parts), else nil; checked
-- the same way
local function write_channel(s)
  local _, e, a, b, c, d, f, g = string.find(s, '^(%d+),(%d+),(%d+),(%d+),(%d+),(%d+);')
  if not e or e + a + b + c + d + f + g ~= #s then return nil end
  return string.sub(s, e + 1 + a, e + a + b)
end

-- one part of a record without copying the others (records hold large serde payloads)
local function rec_field(s, want)
  local semi = string.find(s, ';', 1, true)
  if not semi then fail('RS_BADARG', 'malformed record') end
  local pos, i = semi + 1, 0
  for len in string.gmatch(string.sub(s, 1, semi - 1), '%d+') do
    i = i + 1
    len = tonumber(len)
    if i == want then return string.sub(s, pos, pos + len - 1) end
    pos = pos + len
  end
  fail('RS_BADARG', 'record has no part ' .. want)
end

-- two parts of a record in one pass over its header (a < b)
local function rec_two(s, a, b)
  local semi = string.find(s, ';', 1, true)
  if not semi then fail('RS_BADARG', 'malformed record') end
  local pos, i, first = semi + 1, 0, nil
  for len in string.gmatch(string.sub(s, 1, semi - 1), '%d+') do
    i = i + 1
    len = tonumber(len)
    if i == a then first = string.sub(s, pos, pos + len - 1) end
    if i == b then return first, string.sub(s, pos, pos + len - 1) end
    pos = pos + len
  end
  fail('RS_BADARG', 'record has no part ' .. b)
end

local function pack_rec(parts)
  local lens = {}
  for i = 1, #parts do lens[i] = tostring(#parts[i]) end
  return table.concat(lens, ',') .. ';' .. table.concat(parts)
end

-- Checkpoint records (redis_saver/core/codec.py). Format 6 writes a MessagePack array of 10 (first
-- byte 0x9a), its nested parts (versions, filter, delta, parents) arrays, every string of the
-- raw family: cmsgpack reads it in C. Formats 3-5 framed the same parts as a record, nested
-- parts as records (first byte a digit); they are read as they are. cp_rec() and cp_field()
-- give either in one layout: the parts, nested parts as arrays of strings.
local function cp_is_mp(raw)
  return string.byte(raw, 1) == 154
end

-- a format-6 record's parts: one MessagePack array of 10 and nothing after it
local function cp_unpack(raw)
  local ok, nxt, rec = pcall(cmsgpack.unpack_one, raw)
  if not ok or nxt ~= -1 or type(rec) ~= 'table' or #rec ~= CP_PARTS then
    fail('RS_BADARG', 'malformed checkpoint record')
  end
  return rec
end

-- the string part of a record at pos (its header there), up to stop (where the next part starts)
local function mp_str_at(s, pos, stop)
  local b = string.byte(s, pos)
  local h = 5
  if b <= 191 then h = 1 elseif b == 217 then h = 2 elseif b == 218 then h = 3 end
  return string.sub(s, pos + h, stop - 1)
end

-- A format-6 checkpoint record's shape checked from its MessagePack headers alone, nothing
-- decoded or copied (Redis hashes every byte of each Lua string it makes): an array of 10
-- (first byte 0x9a), parts 1-5 and 8 strings, parts 6, 7, 9, 10 arrays of strings, nothing
-- after it; strings of the str family only (fixstr, str8, str16, str32: Redis's cmsgpack
-- refuses the bin family). That is what validate_record() accepts of a format-6 record, as
-- cmsgpack reads it. Returns where part 2 starts (part 1, the parent, ends there), where part
-- 8 (the run id) starts and ends, and the length of part 6 (versions); nil when the bytes are
-- not so (validate_record() then says what is wrong). Bounded: each string moves on by a byte
-- at least, and the walk stops at the end of the bytes.
local function cp_shape(raw)
  local byte = string.byte
  if byte(raw, 1) ~= 154 then return nil end
  local p, parent_end, run_at, run_end, nv = 2, nil, nil, nil, nil
  for part = 1, 10 do
    if part == 8 then run_at = p end
    local count = 1  -- a string part
    if part == 6 or part == 7 or part == 9 or part == 10 then
      local b, x, y, z, w = byte(raw, p, p + 4)
      if not b then return nil end
      if b >= 144 and b <= 159 then      -- fixarray
        count, p = b - 144, p + 1
      elseif b == 220 and y then         -- array16
        count, p = x * 256 + y, p + 3
      elseif b == 221 and w then         -- array32
        count, p = ((x * 256 + y) * 256 + z) * 256 + w, p + 5
      else
        return nil
      end
      if part == 6 then nv = count end
    end
    for _ = 1, count do
      local b, x, y = byte(raw, p, p + 2)
      if not b then return nil end
      if b >= 160 and b <= 191 then      -- fixstr
        p = p + b - 159
      elseif b == 218 and y then         -- str16
        p = p + 3 + x * 256 + y
      elseif b == 217 and x then         -- str8
        p = p + 2 + x
      elseif b == 219 then               -- str32
        local _, q, r, s, t = byte(raw, p, p + 4)
        if not t then return nil end
        p = p + 5 + ((q * 256 + r) * 256 + s) * 256 + t
      else
        return nil
      end
    end
    if part == 1 then parent_end = p elseif part == 8 then run_end = p end
  end
  if p ~= #raw + 1 then return nil end
  return parent_end, run_at, run_end, nv
end

-- parts 1 .. upto of a stored format-6 record (validate_record checked it when it was
-- stored): cmsgpack decodes them in C from the byte after the array header. (Skipping the
-- payload parts 2-5 by their headers in Lua instead, to leave them uncopied, took 5.1 against
-- 2.2 us a record: the copies are memcpy of bytes the script already holds.)
local function cp_parts(raw, upto)
  return {select(2, cmsgpack.unpack_limit(raw, upto, 1))}
end

-- every part of a checkpoint record of any format; with `upto`, at least parts 1 .. upto
local function cp_rec(raw, upto)
  if cp_is_mp(raw) then
    if upto then return cp_parts(raw, upto) end
    return cp_unpack(raw)
  end
  local rec = unpack_rec(raw)
  if #rec ~= CP_PARTS then fail('RS_BADARG', 'checkpoint record must have ' .. CP_PARTS .. ' parts') end
  rec[CP_VERSIONS], rec[CP_FILTER] = unpack_rec(rec[CP_VERSIONS]), unpack_rec(rec[CP_FILTER])
  rec[CP_DELTA], rec[CP_PARENTS] = unpack_rec(rec[CP_DELTA]), unpack_rec(rec[CP_PARENTS])
  return rec
end

-- one part of a checkpoint record of any format (an earlier format's without copying the others)
local function cp_field(raw, i)
  if cp_is_mp(raw) then return (select(i + 1, cmsgpack.unpack_limit(raw, i, 1))) end
  local f = rec_field(raw, i)
  if i == CP_VERSIONS or i == CP_FILTER or i == CP_DELTA or i == CP_PARENTS then return unpack_rec(f) end
  return f
end

-- HMGET of any number of fields (one command per 1000 fields), the values in order
local function hmget(key, fields)
  local n = #fields
  if n == 0 then return {} end
  if n <= 1000 then return redis.call('HMGET', key, unpack(fields)) end
  local out = {}
  for i = 1, n, 1000 do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + 999, n)))
    for j = 1, #part do out[#out + 1] = part[j] end
  end
  return out
end

-- lex range of every member that starts with the encoded prefix p
-- HSET of any number of field-value pairs (one command per 1000 pairs): Lua's unpack() refuses
-- ~8,000 values, and that error would come after the call's earlier writes
local function hset_all(key, flat)
  local n = #flat
  if n <= 2000 then return redis.call('HSET', key, unpack(flat)) end
  local k = 0
  for i = 1, n, 2000 do k = k + redis.call('HSET', key, unpack(flat, i, math.min(i + 1999, n))) end
  return k
end

local function lo(p) return '[' .. p end
local function hi(p) return '(' .. p .. '\255' end

-- e(cid) of the namespace's latest checkpoint (the greatest id), nil when it has none (the
-- limit as strings: Redis formats a Lua number argument with snprintf on every call)
local function latest_of(ns_e)
  local top = redis.call('ZRANGE', K_CPNS, hi(ns_e), lo(ns_e), 'BYLEX', 'REV', 'LIMIT', '0', '1')
  if #top == 0 then return nil end
  return string.sub(top[1], #ns_e + 1)
end

-- META_*: the thread's meta fields (the @state block above), read once by check_format()

-- The "lean mark": field "" of the writes hash (no write field is empty), holding FORMAT
-- exactly while meta.ix is "inf" (indexed, no expiry) and meta.v is FORMAT. put_writes+lean
-- reads it (one HGET of the hash it writes anyway), so the steady state reads no meta key.
-- The function touch keeps it in step with meta.ix; export.lua leaves it out of copies.
local WR_MARK = ''

-- Slots that move. While the thread's slot is MIGRATING (on the node it leaves) or IMPORTING
-- (on the node it goes to, for a client that sent ASKING), Redis runs a script only where every
-- key it declares exists, and a command of the script on a key that does not exist there (any
-- command on the node it leaves; one naming several keys on the other) fails at that line,
-- keeping the writes before it ("Script attempted to access a non local key"). All 11 keys
-- exist when such a call starts; so a call never touches a key again once it emptied or
-- unlinked it, and never adds to a key after removing from it (it adds first). Removals that
-- may empty a key go through zrem() / hdel(): they read the key's size once per call (ZCARD /
-- HLEN, only in calls that remove), count what is left, and set GONE[key] when nothing is;
-- reads and expiry updates skip such keys.
local function shrink(key, card, cmd, ...)
  if GONE[key] then return 0 end
  local left = LEFT[key]
  if left == nil then left = redis.call(card, key) end
  if left == 0 then
    LEFT[key] = 0
    return 0
  end
  local n = redis.call(cmd, key, ...)
  LEFT[key] = left - n
  if n == left then GONE[key] = true end
  return n
end

-- n members or fields were added to key (a ZADD's or HSET's reply): what zrem() / hdel() count
-- stays exact in a call that adds to a key after removing from it (only where adding first
-- cannot be: the key then existed all along, or the slot is not moving)
local function grew(key, n)
  if LEFT[key] and n > 0 then
    LEFT[key] = LEFT[key] + n
    GONE[key] = nil
  end
end

local function zrem(key, ...)
  return shrink(key, 'ZCARD', 'ZREM', ...)
end

local function hdel(key, ...)
  return shrink(key, 'HLEN', 'HDEL', ...)
end

-- the keys of `keys` this call has not emptied
local function live_keys(keys)
  if next(GONE) == nil then return keys end
  local out = {}
  for _, k in ipairs(keys) do
    if not GONE[k] then out[#out + 1] = k end
  end
  return out
end

-- Refuses the call (TRYAGAIN) while the thread's slot is moving (MIGRATING here, or IMPORTING
-- for a client that sent ASKING): EXISTS of two keys that are never written fails exactly then
-- (see above). A call that would forget the thread and write it afresh asks first, before its
-- first write: a node may not create the thread's keys while the slot moves, so the call ends
-- there, writing nothing, and the client sends it again (to the node that serves the slot once
-- it moved).
local function refuse_if_slot_moving()
  if type(redis.pcall('EXISTS', K_META .. '\0', K_META .. '\0\0')) ~= 'number' then
    fail('TRYAGAIN', 'the thread\'s slot is moving between nodes')
  end
end

-- the storage formats this version reads besides FORMAT, in place (redis_saver/keys.py
-- READ_FORMATS): a write upgrades the thread's meta.v to FORMAT (init_meta), so a release
-- that reads only an older format refuses the thread from then on
local OLDER_FORMATS = {['3'] = true, ['4'] = true, ['5'] = true}

local function check_format()
  local m = redis.call('HMGET', K_META, 'v', 'ix', 'pin', 'fh', 'b', 'dmg', 'c', 'wm', 'nc', 'n', 'xp')
  META_V, META_IX, META_PIN, META_FH = m[1], m[2], m[3], m[4]
  META_B, META_DMG, META_C, META_WM, META_NC, META_N, META_XP = m[5], m[6], m[7], m[8], m[9], m[10], m[11]
  if META_V and META_V ~= FORMAT and not OLDER_FORMATS[META_V] then
    fail('RS_SCHEMA', 'thread stored in format ' .. META_V .. ', this redis_saver reads formats 3, 4, 5 and ' .. FORMAT)
  end
end

-- check_format() for put: the 8 fields it reads (not "wm", "n", "xp", which only the reads'
-- checks read: they stay nil)
local function check_format_put()
  local m = redis.call('HMGET', K_META, 'v', 'ix', 'pin', 'fh', 'b', 'dmg', 'c', 'nc')
  META_V, META_IX, META_PIN, META_FH, META_B, META_DMG, META_C, META_NC = m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8]
  if META_V and META_V ~= FORMAT and not OLDER_FORMATS[META_V] then
    fail('RS_SCHEMA', 'thread stored in format ' .. META_V .. ', this redis_saver reads formats 3, 4, 5 and ' .. FORMAT)
  end
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- remove the thread and its slot-index entries
local function drop_thread()
  if not GONE[K_IXR] then
    for _, m in ipairs(redis.call('ZRANGE', K_IXR, lo('t' .. THREAD_E), hi('t' .. THREAD_E), 'BYLEX')) do
      zrem(K_IXR, m, 'r' .. string.sub(m, #THREAD_E + 2) .. THREAD_E)
    end
  end
  zrem(K_IXT, THREAD_ID)
  local keys = live_keys(THREAD_KEYS)
  if #keys > 0 then redis.call('UNLINK', unpack(keys)) end
  for _, k in ipairs(THREAD_KEYS) do GONE[k] = true end
end

-- the expiry of the slot index keys: the greatest expiry of the threads they list
local function fix_index_expiry()
  if GONE[K_IXT] then return end
  local top = redis.call('ZRANGE', K_IXT, -1, -1, 'WITHSCORES')
  if #top == 0 then return end
  for _, k in ipairs(live_keys({K_IXT, K_IXR})) do
    if top[2] == 'inf' then
      redis.call('PERSIST', k)
    else
      redis.call('PEXPIREAT', k, top[2])
    end
  end
end

-- Lost keys. Redis evicts whole keys, never single fields or members: under an allkeys-* or
-- volatile-* maxmemory-policy one key of a thread can go while the rest stays, and a later
-- write may create it again holding only the new data. A thread that lost any key is
-- forgotten whole, as if it had expired: its remaining keys and its slot-index entries go
-- (forget_thread()), and reads answer as for a thread that does not exist. A read script is
-- flagged no-writes: it raises RS_DAMAGED, and the client sends the same read again as its
-- forgetting variant ("<name>+forget": writable, allow-oom, as it only deletes) with ARGV[4] =
-- "f" (REFRESH == 'f'), which forgets the thread in the same
-- call that checks it again (so a thread written again meanwhile is judged as it is then). A
-- write that finds a loss forgets the thread first (put.lua / put_writes.lua say what they then
-- do). Reads notice a loss where something came back missing, and with O(1) counts
-- (check_counts()), using these invariants:
--   cp, cp_ns, cp_id and chain hold the same checkpoints (store_cp()/drop_cp() keep them so),
--   and chain also the chain mark (field "", no entry is empty) once meta.c is set (the
--   first put: mark_cps()); a thread started by format 5 (meta.nc) keeps no chain, and meta.n
--   counts its checkpoints instead (read with the other meta fields: no extra command);
--   wr_ord holds one member per write field of wr; wr's one other field, "", the wr mark, is
--   there while meta.ix is "inf" (it is then the lean mark, = FORMAT) or meta.wm is set
--   (touch() keeps it: "t" while the thread has an expiry); a put_writes that finds it gone
--   forgets the thread;
--   meta exists while any other key of the thread does (init_meta() forgets a thread without);
--   meta.dmg (what earlier versions wrote when a write found a loss) marks a thread that lost a key;
--   the blob mark, field "" of the blob hash (no blob field is empty), is set with meta.b by
--   the first put that stores blobs and never deleted: a referenced blob that is missing was
--   never stored (as in InMemorySaver, a hand-made checkpoint may name versions no put
--   stored) unless meta.b is set and the blob mark is gone.
-- A ttl expiry is not damage, but Redis 7.0 sets each PEXPIRE from its own clock reading, so
-- the keys of a thread may expire a millisecond apart: keys that expire within EXPIRY_SLACK_MS
-- are an expiry under way; a read then answers as if the thread were absent, a write finishes
-- the expiry first.
local BLOB_MARK, CHAIN_MARK = '', ''
local EXPIRY_SLACK_MS = 2000

local function thread_expiring()
  for _, k in ipairs(THREAD_KEYS) do
    local t = redis.call('PTTL', k)
    if t >= 0 and t <= EXPIRY_SLACK_MS then return true end
  end
  return false
end

-- the thread lost a key (or is expiring): forget it whole, its slot-index entries included
local function forget_thread()
  drop_thread()
  fix_index_expiry()
  -- its keys are now absent, no longer "gone": a call that goes on (only where the slot is not
  -- moving: refuse_if_slot_moving()) writes them afresh
  GONE, LEFT = {}, {}
  META_V, META_IX, META_PIN, META_FH, META_B, META_DMG, META_C, META_WM = nil, nil, nil, nil, nil, nil, nil, nil
  META_NC, META_N, META_XP = nil, nil, nil
end

-- the thread id as an error message shows it: its first 200 bytes, control characters as '?'
local function shown_thread_id()
  return (string.gsub(string.sub(THREAD_ID, 1, 200), '%c', '?'))
end

-- a read found a key of the thread lost: true when the caller should answer as if the thread
-- were absent (it is expiring, or this is the forgetting variant, which forgot it); else raise
-- RS_DAMAGED naming the thread and what is missing (the client then sends the forgetting variant)
local function damaged(what)
  if thread_expiring() then return true end
  if REFRESH == 'f' then
    forget_thread()
    return true
  end
  local tid = shown_thread_id()
  fail('RS_DAMAGED', 'thread ' .. tid .. ': ' .. what .. ' (a key of the thread was lost, e.g. evicted'
    .. ' under an allkeys-* or volatile-* maxmemory-policy; the read is sent again to forget the thread)')
end

-- a write script found a key of the thread lost (or an expiry under way): the thread is
-- forgotten whole; the write then goes on as on a new thread, or refuses (put.lua, put_writes.lua)
local function record_loss()
  forget_thread()
end

-- the O(1) checks of a read (get_tuple, list, delta_history): the slot index entry, 6 counts
-- (cp and both its indexes, chain or meta.n, the write keys); true = expiring, or being
-- written whole (meta.xp: a copy or import under way, not visible until its last call)
local function check_counts()
  if META_XP then return true end
  if not META_V then
    -- no meta: a thread that does not exist (one command), or one that lost its meta key
    if redis.call('EXISTS', K_CP, K_CPNS, K_CPID, K_BLOB, K_WR, K_WORD, K_RUNS, K_CHAIN) == 0 then
      -- no key at all: a thread that does not exist, or one evicted whole while its slot
      -- index still lists it without expiry or as expiring later (forgetting drops the entry)
      local score = redis.call('ZSCORE', K_IXT, THREAD_ID)
      if score and (score == 'inf' or tonumber(score) > now_ms() + EXPIRY_SLACK_MS) then
        return damaged('all its keys were lost')
      end
      return false
    end
    return damaged('its meta key is missing')
  end
  if META_DMG then
    local text = ({meta = 'its meta key was lost', wr = 'key wr was lost', parent = 'it was written on after'
      .. ' all its keys were lost (its first checkpoint names a parent that is not stored)'})[META_DMG]
    return damaged(text or META_DMG)
  end
  -- the slot index key holding the thread's entry was lost (a write puts it back; a read
  -- forgets the thread, so list(None) never misses a thread that reads back)
  if META_IX and not redis.call('ZSCORE', K_IXT, THREAD_ID) then return damaged('its slot index entry was lost') end
  -- both checkpoint indexes, whichever the read uses: a thread is whole or gone for every read
  local ncp, nns, nid = redis.call('HLEN', K_CP), redis.call('ZCARD', K_CPNS), redis.call('ZCARD', K_CPID)
  if ncp ~= nns or ncp ~= nid then
    return damaged(ncp .. ' checkpoint records but ' .. nns .. ' in index cp_ns and ' .. nid .. ' in cp_id')
  end
  if META_NC ~= '1' then
    local nchain = redis.call('HLEN', K_CHAIN) - (META_C == '1' and 1 or 0)
    if nchain ~= ncp then return damaged(ncp .. ' checkpoint records but ' .. nchain .. ' in chain') end
  elseif tonumber(META_N) ~= ncp then
    return damaged(ncp .. ' checkpoint records but ' .. tostring(META_N) .. ' counted in meta')
  end
  local nwr, nord = redis.call('HLEN', K_WR), redis.call('ZCARD', K_WORD)
  local want = (META_IX == 'inf' or META_WM == '1') and 1 or 0  -- the wr mark
  if nwr - want ~= nord then
    local mark = redis.call('HEXISTS', K_WR, WR_MARK)
    if mark < want then return damaged('key wr was lost') end
    if nwr - mark ~= nord then
      return damaged((nwr - mark) .. ' write records but ' .. nord .. ' in the write index wr_ord')
    end
  end
  return false
end

-- the 4 checkpoint keys hold the same number of checkpoints (for reads that found a
-- checkpoint missing, after check_counts()); true = expiring
local function check_cp_keys()
  if not META_V then return false end  -- check_counts() found no key of the thread
  local marks = META_C == '1' and 1 or 0
  if marks == 1 and redis.call('HEXISTS', K_CHAIN, CHAIN_MARK) == 0 then return damaged('key chain was lost') end
  local n = {redis.call('HLEN', K_CP), redis.call('ZCARD', K_CPNS), redis.call('ZCARD', K_CPID)}
  local names = {'cp', 'cp_ns', 'cp_id', 'chain'}
  if META_NC ~= '1' then n[4] = redis.call('HLEN', K_CHAIN) - marks else n[4] = tonumber(META_N) or 0 end
  local most = math.max(n[1], n[2], n[3], n[4] or 0)
  for i = 1, #n do
    if n[i] < most then
      return damaged('key ' .. names[i] .. ' holds ' .. n[i] .. ' of ' .. most .. ' checkpoints')
    end
  end
  -- all 4 gone: a thread that never had a checkpoint (or lost them all to deletes) has no run
  -- links, and no blobs beside the blob mark (deletes collect the blobs of what they delete)
  if most == 0 then
    if redis.call('EXISTS', K_RUNS) == 1 then
      return damaged('its checkpoint keys were lost')
    elseif META_B == '1' and redis.call('HLEN', K_BLOB) > 1 then
      return damaged('its checkpoint keys were lost (blobs remain)')
    end
  end
  return false
end

-- a referenced blob is missing: lost (the blob key went since the thread first stored blobs)
-- rather than never stored; true = expiring. mark: whether the blob mark is there, when the
-- caller read it with the blobs (tuple_replies()); nil = read it here (one HEXISTS)
local function check_blob_missing(field, mark)
  if META_B ~= '1' then return false end
  if mark == nil then mark = redis.call('HEXISTS', K_BLOB, BLOB_MARK) == 1 end
  if not mark then
    local name = string.gsub(string.gsub(field, '%z\255', '?'), '%z', '/')
    return damaged('the blob of ' .. name .. ' is missing (key blob was lost)')
  end
  return false
end

-- drop the slot-index entries of threads whose expiry has passed (bounded per call)
-- (never the calling thread's own entry, which touch() sets next: the key stays)
local function purge_expired(now)
  if GONE[K_IXT] then return end
  local dead = redis.call('ZRANGE', K_IXT, '-inf', '(' .. string.format('%.0f', now), 'BYSCORE', 'LIMIT', 0, 16)
  for _, thr in ipairs(dead) do
    if thr ~= THREAD_ID then
      local te = enc(thr)
      if not GONE[K_IXR] then
        for _, m in ipairs(redis.call('ZRANGE', K_IXR, lo('t' .. te), hi('t' .. te), 'BYLEX')) do
          zrem(K_IXR, m, 'r' .. string.sub(m, #te + 2) .. te)
        end
      end
      zrem(K_IXT, thr)
    end
  end
end


-- Give every key of the thread the same expiry (or none when pinned / no ttl) and record
-- it in the slot index. Called last by every script that writes or refreshes a thread
-- (after check_format(), which read the meta fields; pin.lua updates META_PIN itself).
-- The index score is the expiry rounded up to ttl/64, and meta.ix remembers it: the index
-- (and its purge of expired entries) is only updated when the rounded score moves, so a
-- busy thread pays the 8 PEXPIREs and little else.
-- untouched: (optional) the keys of the thread that this call did not access otherwise, to
-- TOUCH when there is no expiry to set (a key a command of the call read or wrote had its
-- access time moved by that command); nil = all of them
local function touch(untouched)
  local expiring = TTL_MS > 0 and META_PIN ~= '1'
  if TTL_MS == 0 and META_IX == 'inf' then
    -- already indexed without expiry: every key is persistent; only their access time moves
    -- (and the slot index key is put back if it was evicted: ZADD answers 1)
    if next(GONE) == nil and not untouched then
      redis.call('TOUCH', K_META, K_CP, K_CPNS, K_CPID, K_BLOB, K_WR, K_WORD, K_RUNS, K_CHAIN, K_IXR)
    else
      local keys = live_keys(untouched or {K_META, K_CP, K_CPNS, K_CPID, K_BLOB, K_WR, K_WORD, K_RUNS, K_CHAIN, K_IXR})
      if #keys > 0 then redis.call('TOUCH', unpack(keys)) end
    end
    if redis.call('ZADD', K_IXT, 'inf', THREAD_ID) == 1 then fix_index_expiry() end
    return
  end
  local now = now_ms()
  local score = 'inf'
  local keys = live_keys(THREAD_KEYS)
  if expiring then
    for _, k in ipairs(keys) do redis.call('PEXPIRE', k, TTL_MS) end
    local step = math.max(1, math.floor(TTL_MS / 64))
    score = string.format('%.0f', math.ceil((now + TTL_MS) / step) * step)
    if META_IX == score then
      -- the thread's keys: the PEXPIREs accessed them; the slot index as above
      if not GONE[K_IXR] then redis.call('TOUCH', K_IXR) end
      if redis.call('ZADD', K_IXT, score, THREAD_ID) == 1 then fix_index_expiry() end
      return
    end
  else
    for _, k in ipairs(keys) do redis.call('PERSIST', k) end
  end
  -- (a wr key this call emptied had no mark, so meta says none is due: it stays so, and a
  -- later call sets both; the key is not created again here, see "Slots that move")
  if META_IX ~= score and not GONE[K_WR] then
    redis.call('HSET', K_META, 'ix', score, 'wm', '1')
    META_IX, META_WM = score, '1'
    if score == 'inf' then
      redis.call('HSET', K_WR, WR_MARK, FORMAT)
    else
      -- not the lean mark, but the wr mark all the same (see "Lost keys")
      redis.call('HSET', K_WR, WR_MARK, 't')
      redis.call('PEXPIRE', K_WR, TTL_MS)
    end
  end
  -- the thread's own entry first: the purge (which never drops it) then never empties the key
  grew(K_IXT, redis.call('ZADD', K_IXT, score, THREAD_ID))
  purge_expired(now)
  fix_index_expiry()
end

-- Keep a thread's keys equally recent. Under an LRU or LFU maxmemory-policy Redis evicts the
-- keys least recently (or least often) accessed; a call that accessed only some of a thread's
-- keys would leave the others to go first, and the thread then loses a key while in use. So
-- every call accesses all 11 keys: writes through touch() (PEXPIRE, or TOUCH without a ttl,
-- and ZADD of the slot index entry), reads that do not refresh the expiry through this (one
-- TOUCH; a read-only command). unread: true = only the keys a get_tuple may not have read
-- otherwise (a command that read a key moved its access time as TOUCH does: get_tuple.lua
-- says which it read); else all 11.
local function touch_read(unread)
  if REFRESH == '1' then
    touch()
  elseif unread then
    redis.call('TOUCH', K_BLOB, K_RUNS, K_CHAIN, K_IXT, K_IXR)
  else
    redis.call('TOUCH', K_META, K_CP, K_CPNS, K_CPID, K_BLOB, K_WR, K_WORD, K_RUNS, K_CHAIN, K_IXT, K_IXR)
  end
end

-- chain: a new thread keeps chain entries (put with compression off sends them), else none
local function init_meta(chain)
  if META_V ~= FORMAT then  -- a new thread, or one an older release wrote: now FORMAT
    -- the thread's first write, or its meta key was lost while others remain: the thread is
    -- forgotten whole, as are the keys an expiry under way left (see thread_expiring())
    if not META_V and redis.call('EXISTS', K_CP, K_CPNS, K_CPID, K_BLOB, K_WR, K_WORD, K_RUNS, K_CHAIN) > 0 then
      record_loss()
    end
    if not META_V and not chain then
      -- a new thread keeps no chain entries (its records are small enough to walk)
      redis.call('HSET', K_META, 'tid', THREAD_ID, 'v', FORMAT, 'nc', '1', 'n', '0')
      META_NC, META_N = '1', '0'
    else
      redis.call('HSET', K_META, 'tid', THREAD_ID, 'v', FORMAT)
    end
    META_V = FORMAT
  end
end

-- the first put (that stores blobs) sets the chain mark and meta.c (the blob mark and meta.b)
-- (see "Lost keys" above); before touch(), which gives the keys their expiry
local function mark_cps()
  if META_C ~= '1' and META_NC ~= '1' then
    redis.call('HSET', K_CHAIN, CHAIN_MARK, '1')
    redis.call('HSET', K_META, 'c', '1')
    META_C = '1'
  end
end

local function mark_blobs()
  if META_B ~= '1' then
    redis.call('HSET', K_BLOB, BLOB_MARK, '1')
    redis.call('HSET', K_META, 'b', '1')
    META_B = '1'
  end
end

-- the run index of the thread (cross-thread delete_for_runs goes through the slot index)
local function link_run(run_e, ns_e, cid_e)
  grew(K_RUNS, redis.call('ZADD', K_RUNS, '0', run_e .. ns_e .. cid_e))
  grew(K_IXR, redis.call('ZADD', K_IXR, '0', 'r' .. run_e .. THREAD_E, '0', 't' .. THREAD_E .. run_e))
end

local function unlink_run_if_unused(run_e)
  if GONE[K_RUNS] or #redis.call('ZRANGE', K_RUNS, lo(run_e), hi(run_e), 'BYLEX', 'LIMIT', 0, 1) == 0 then
    zrem(K_IXR, 'r' .. run_e .. THREAD_E, 't' .. THREAD_E .. run_e)
  end
end

-- the blob field of a channel's version: e(ns)e(channel)..version
local function blob_field(ns_e, ch, ver)
  return ns_e .. enc(ch) .. ver
end

-- versions part (channel, version, ...) -> the blob fields of its versions and the channels, in
-- order (put validated the even number of parts)
local function blob_fields(ns_e, v)
  local fields, chans, n = {}, {}, 0
  for i = 1, #v - 1, 2 do
    n = n + 1
    chans[n] = v[i]
    fields[n] = blob_field(ns_e, v[i], v[i + 1])
  end
  return fields, chans
end

-- channel -> blob field, from a versions part
local function blob_field_map(ns_e, v)
  local fields, chans = blob_fields(ns_e, v)
  local by_ch = {}
  for i = 1, #chans do by_ch[chans[i]] = fields[i] end
  return by_ch
end

-- Encoded values (redis_saver/core/values.py). A blob record whose type part ends with "\31s" is a
-- stream record: its payload is a record [stream id, op, ...] and the value is the ops applied
-- to the bytes of that stream, which lives in the same blob hash as
--   e(ns)e(channel) "\0" sid            its directory: record [raw length, references,
--                                       next frame number, frame number, raw end, ...]
--   e(ns)e(channel) "\0" sid "\0" n     its frames: zstd frames of consecutive raw bytes
-- (no version starts with "\0", so these never meet a version's field). A record names one
-- stream, never another record: a read fetches, in the same call, each stream its records
-- name, at most MAX_FRAMES frames and its directory. "references" counts the stream records
-- that name the stream: dropping the last one drops the stream (drop_blobs()).
local STREAM_MARK = '\31s'
local MAX_FRAMES = 32
local STREAM_REC_MAX = 512  -- the client never writes a longer stream record

-- the stream id a blob record names, or nil (not a stream record)
local function stream_id(b)
  local _, e, a = string.find(b, '^(%d+),%d+;')
  if not e then return nil end
  a = tonumber(a)
  if a < 2 or string.sub(b, e + a - 1, e + a) ~= STREAM_MARK then return nil end
  local p = e + a + 1
  local l = tonumber(string.match(b, '^%d+', p))
  local semi = string.find(b, ';', p, true)
  if not l or not semi then fail('RS_BADARG', 'malformed stream record') end
  return string.sub(b, semi + 1, semi + l)
end

-- e(ns)e(channel) of a blob field e(ns)e(channel)version
local function blob_prefix_of(field)
  return string.sub(field, 1, skip(field, skip(field, 1)) - 1)
end

-- whether a blob field is a stream's directory or frame (e(ns)e(channel) "\0" ...), not a version
local function is_stream_part(field)
  return string.byte(field, skip(field, skip(field, 1))) == 0
end

-- the directory field of the stream that blob record b (at blob field f) names, or nil (no
-- record, or one that names no stream)
local function stream_of(f, b)
  local sid = b and #b <= STREAM_REC_MAX and stream_id(b)
  if sid then return blob_prefix_of(f) .. '\0' .. sid end
  return nil
end

-- stream_of() the record stored at blob field f (a long record is not read)
local function stored_stream(f)
  local n = redis.call('HSTRLEN', K_BLOB, f)
  if n == 0 or n > STREAM_REC_MAX then return nil end
  return stream_of(f, redis.call('HGET', K_BLOB, f))
end

-- The streams the client holds of the thread (get_tuple.lua ARGV from position `at`: n <= MAX_HELD,
-- then n pairs stream id, raw length), for fetch_streams(): held[stream id] = raw length; nil
-- when none (an absent count is none)
local MAX_HELD = 8
local function read_held(at)
  if #ARGV < at then return nil end
  local n = tonumber(ARGV[at])
  if n == nil or n < 0 or n > MAX_HELD or #ARGV ~= at + 2 * n then fail('RS_BADARG', 'bad held streams') end
  if n == 0 then return nil end
  local held = {}
  for i = at + 1, at + 2 * n, 2 do held[ARGV[i]] = ARGV[i + 1] end
  return held
end

-- {{sid, directory, frame, ...}, ...}: each stream the records blobs[i] (blob fields
-- fields[i], nil = none) name, once; nil when the thread is expiring. held (or nil): the raw
-- length (a string) of each stream the client holds, by stream id (read_held()). A stream is
-- append-only and a (thread, stream id) never comes back with other bytes, so the client's
-- copy is a prefix of what is stored: its entry then carries only the frames after that
-- prefix when the prefix ends where a frame ends (none when it is the whole stream, found
-- from the directory's first part without unpacking it), else every frame.
local function fetch_streams(fields, blobs, held)
  local dfields, sids, seen = {}, {}, {}
  for i = 1, #fields do
    local b = blobs[i]
    if b and #b <= STREAM_REC_MAX then
      local sid = stream_id(b)
      if sid and not seen[sid] then
        seen[sid] = true
        sids[#sids + 1] = sid
        dfields[#dfields + 1] = blob_prefix_of(fields[i]) .. '\0' .. sid
      end
    end
  end
  if #dfields == 0 then return {} end
  local dirs = hmget(K_BLOB, dfields)
  local out, ffields, owner = {}, {}, {}
  for j = 1, #dfields do
    local d = dirs[j]
    if not d then
      if damaged('the stream of a stored value is missing') then return nil end
    end
    out[j] = {sids[j], d}
    local have = held and held[sids[j]]
    local whole = false
    if have then
      -- the directory's first part, its raw length: "<#have>,...;" then these digits
      local semi, n = string.find(d, ';', 1, true), #have
      whole = semi ~= nil and string.find(d, n .. ',', 1, true) == 1 and string.sub(d, semi + 1, semi + n) == have
    end
    if not whole then
      local dir = unpack_rec(d)
      local from = 4
      if have then
        for k = 5, #dir, 2 do
          if dir[k] == have then from = k + 1 break end
        end
      end
      for k = from, #dir - 1, 2 do
        ffields[#ffields + 1] = dfields[j] .. '\0' .. dir[k]
        owner[#ffields] = j
      end
    end
  end
  local frames = hmget(K_BLOB, ffields)
  for k = 1, #ffields do
    if not frames[k] then
      if damaged('a frame of a stream is missing') then return nil end
    end
    local o = out[owner[k]]
    o[#o + 1] = frames[k]
  end
  return out
end

-- add n to the references of the stream directory dfield; at 0 the stream goes
local function stream_ref(dfield, n)
  if GONE[K_BLOB] then return end
  local d = redis.call('HGET', K_BLOB, dfield)
  if not d then return end
  local dir = unpack_rec(d)
  local refs = tonumber(dir[2]) + n
  if refs > 0 then
    dir[2] = tostring(refs)
    redis.call('HSET', K_BLOB, dfield, pack_rec(dir))
    return
  end
  local gone = {dfield}
  for k = 4, #dir - 1, 2 do gone[#gone + 1] = dfield .. '\0' .. dir[k] end
  for i = 1, #gone, 1000 do hdel(K_BLOB, unpack(gone, i, math.min(i + 999, #gone))) end
end

-- delete blob fields, and the streams no remaining record names
local function drop_blobs(fields)
  if GONE[K_BLOB] then return 0 end
  local unref = {}
  for _, f in ipairs(fields) do
    local d = stored_stream(f)
    if d then unref[d] = (unref[d] or 0) - 1 end
  end
  local k = 0
  for i = 1, #fields, 1000 do
    k = k + hdel(K_BLOB, unpack(fields, i, math.min(i + 999, #fields)))
  end
  for d, n in pairs(unref) do stream_ref(d, n) end
  return k
end

-- the stream appends' arguments (see plan_blobs()), checked before anything is read
local function check_stream_args(sargs)
  if #sargs % 5 ~= 0 then fail('RS_BADARG', 'bad stream append') end
  for k = 1, #sargs, 5 do
    local mode, base, len = sargs[k + 1], tonumber(sargs[k + 2]), tonumber(sargs[k + 3])
    if (mode ~= 'n' and mode ~= 'a' and mode ~= 'm') or not base or not len or len < base
        or (mode == 'n' and base ~= 0) or not string.find(sargs[k], '\0', 1, true) then
      fail('RS_BADARG', 'bad stream append')
    end
  end
end

-- A stream directory as plan_blobs() changes it, without unpacking its frame list: {raw length,
-- references (a number), next frame number (a number), frame count, the stored header's
-- lengths after the third (its frames: "" = none), the stored body after the third part, the
-- parts this call adds (frame number, raw end, ...)}. An append (the common case: one per put
-- of a growing channel) reads the first three parts and copies the rest as it is; a merge
-- reads the stored frames to delete them.
local function dir_view(cur)
  local _, e, a, b, c = string.find(cur, '^(%d+),(%d+),(%d+)')
  if not e then fail('RS_BADARG', 'malformed record') end
  local semi = string.find(cur, ';', e + 1, true)
  if not semi then fail('RS_BADARG', 'malformed record') end
  local p = semi + 1
  local q, r = p + a, p + a + b
  local rest_h = string.sub(cur, e + 2, semi - 1)  -- "" when the header ends after the third
  local nf = 0
  if rest_h ~= '' then nf = (select(2, string.gsub(rest_h, ',', ',')) + 1) / 2 end
  return {string.sub(cur, p, q - 1), tonumber(string.sub(cur, q, r - 1)), tonumber(string.sub(cur, r, r + c - 1)),
          nf, rest_h, string.sub(cur, r + c), {}}
end

-- the frame numbers of a directory view's stored frames (a merge deletes them)
local function dir_frames(dir)
  local out = {}
  if dir[5] == '' then return out end
  local parts = unpack_rec(dir[5] .. ';' .. dir[6])
  for j = 1, #parts - 1, 2 do out[#out + 1] = parts[j] end
  return out
end

-- the directory record of a view, with `more` references
local function dir_pack(dir, more)
  local len, refs, fn, add = dir[1], tostring(dir[2] + more), tostring(dir[3]), dir[7]
  local h = {#len, #refs, #fn}
  if dir[5] ~= '' then h[4] = dir[5] end
  for i = 1, #add do h[#h + 1] = #add[i] end
  return table.concat(h, ',') .. ';' .. len .. refs .. fn .. dir[6] .. table.concat(add)
end

-- Storing channel values (put.lua, rewrite.lua), validated in full before anything is written.
-- pairs = {blob field, blob record, ...}; sargs = the stream appends, 5 strings each (put.lua
-- ARGV: e(channel) "\0" sid, mode, base length, new length, frame). plan_blobs() returns what
-- apply_blobs() writes: the records that change (an identical one, a retry's, is left alone),
-- the references they add to streams and take from the streams of the records they replace,
-- and the appends those records need (an append no new record names is skipped); nil when such
-- an append's stream is gone or not at the length the client based it on.
-- plan_blobs() in two steps: blob_reads() sorts the records (and checks stream records' size)
-- and names the fields the plan reads, q; the caller may read them with more (put.lua: the blob
-- mark, in the same HMGET) and pass what came back, in order, as `got` (nil: plan_blobs reads)
local function blob_reads(pairs_)
  -- A record that names no stream is written as it comes: it can only replace the record of
  -- the same version (a retry writes the same bytes). A stream record is written only if it
  -- changes the field, and then counts a reference, and takes one from the stream of the
  -- stream record it replaces. (A plain record replacing a stream record of the same version,
  -- a re-put with compress switched off, leaves that stream one reference too many: it stays
  -- until the thread goes; no command per plain record is spent to spare that.)
  local writes = {}
  -- each stream record's field and the directory of the stream it names, read in one HMGET:
  -- the stored record (small: a stream record's, or a retry's identical bytes; a plain record
  -- of the same version only on a re-put with compress switched) and have[d] = the stored
  -- directory, false when there is none
  local sf, sb, sd, q = {}, {}, {}, {}
  for i = 1, #pairs_ - 1, 2 do
    local f, b = pairs_[i], pairs_[i + 1]
    local sid = stream_id(b)
    if not sid then
      writes[#writes + 1] = f
      writes[#writes + 1] = b
    else
      if #b > STREAM_REC_MAX then fail('RS_BADARG', 'stream record too long') end
      local d = blob_prefix_of(f) .. '\0' .. sid
      sf[#sf + 1], sb[#sb + 1], sd[#sd + 1] = f, b, d
      q[#q + 1] = f
      q[#q + 1] = d
    end
  end
  return {writes, sf, sb, sd, q}
end

local function plan_blobs(reads, got, sargs, ns_e)
  local writes, sf, sb, sd, q = reads[1], reads[2], reads[3], reads[4], reads[5]
  local refs, unrefs = {}, {}
  local have = {}
  if #q > 0 then
    got = got or hmget(K_BLOB, q)
    for j = 1, #sf do
      local f, b, d, cur = sf[j], sb[j], sd[j], got[2 * j - 1]
      if have[d] == nil then have[d] = got[2 * j] end
      if cur ~= b then
        writes[#writes + 1] = f
        writes[#writes + 1] = b
        refs[d] = (refs[d] or 0) + 1
        local od = stream_of(f, cur)
        if od then unrefs[od] = (unrefs[od] or 0) - 1 end
      end
    end
  end
  -- appends to one stream apply in order (a rewrite sends several): each checked against the
  -- stream as the appends before it leave it; dirs[d] = its directory view (dir_view()) as
  -- they leave it, gone[d] the stored frames a merge deletes; written once by apply_blobs()
  local appends, dirs, gone = {}, {}, {}
  for k = 1, #sargs - 4, 5 do
    local d = ns_e .. sargs[k]
    if refs[d] then
      local mode, base, len, frame = sargs[k + 1], sargs[k + 2], sargs[k + 3], sargs[k + 4]
      local dir = dirs[d]
      if mode == 'n' then
        if dir or have[d] then fail('RS_BADARG', 'stream id in use') end
        dirs[d] = {len, 0, 1, 1, '', '', {'0', len}}
        appends[#appends + 1] = {d, '0', frame}
      else
        if not dir then
          if not have[d] then return nil end
          dir = dir_view(have[d])
          dirs[d] = dir
        end
        if dir[1] ~= base then return nil end
        local fn = tostring(dir[3])
        if mode == 'm' then
          local g = gone[d] or {}
          for _, x in ipairs(dir_frames(dir)) do g[#g + 1] = d .. '\0' .. x end
          gone[d] = g
          dir[4], dir[5], dir[6], dir[7] = 1, '', '', {fn, len}
        else
          if dir[4] >= MAX_FRAMES then fail('RS_BADARG', 'stream has too many frames') end
          dir[4] = dir[4] + 1
          dir[7][#dir[7] + 1] = fn
          dir[7][#dir[7] + 1] = len
        end
        dir[1], dir[3] = len, dir[3] + 1
        appends[#appends + 1] = {d, fn, frame}
      end
    end
  end
  for d, _ in pairs(refs) do
    if not dirs[d] and not have[d] then return nil end
  end
  return {writes, refs, unrefs, appends, dirs, gone}
end

local function apply_blobs(plan)
  local writes, refs, unrefs, appends, dirs, gone = plan[1], plan[2], plan[3], plan[4], plan[5], plan[6]
  if #writes == 0 then return end
  mark_blobs()
  local args, added = {}, {}
  for d, dir in pairs(dirs) do
    args[#args + 1] = d
    args[#args + 1] = dir_pack(dir, refs[d] or 0)
    refs[d] = nil
    local add, set = dir[7], {}
    for j = 1, #add - 1, 2 do set[add[j]] = true end
    added[d] = set
  end
  -- a merge drops the stored frames it replaces; a frame this call appended and then merged
  -- away is never written
  for _, ap in ipairs(appends) do
    if added[ap[1]][ap[2]] then
      args[#args + 1] = ap[1] .. '\0' .. ap[2]
      args[#args + 1] = ap[3]
    end
  end
  for i = 1, #writes do args[#args + 1] = writes[i] end
  hset_all(K_BLOB, args)
  -- after the HSET (see "Slots that move" in _lib_thread.lua): the key keeps what it just got
  local del = {}
  for _, fs in pairs(gone) do
    for _, f in ipairs(fs) do del[#del + 1] = f end
  end
  for i = 1, #del, 1000 do redis.call('HDEL', K_BLOB, unpack(del, i, math.min(i + 999, #del))) end
  for d, n in pairs(refs) do stream_ref(d, n) end
  for d, n in pairs(unrefs) do stream_ref(d, n) end
end

-- Blob garbage collection. A blob e(ns)e(channel)version is referenced by the checkpoints
-- whose channel_versions name it. Deleting checkpoints records their blob fields as
-- candidates; gc_blobs() then drops the candidates that no checkpoint left in their
-- namespace references. The cost follows the deleted data plus that namespace's records,
-- and nothing is paid on the put path. GC (the @state block above): ns_e -> {field = true}.

local function gc_candidates(ns_e, rec)
  local fields = blob_fields(ns_e, rec[CP_VERSIONS])
  if #fields == 0 then return end
  local set = GC[ns_e]
  if not set then set = {} GC[ns_e] = set end
  for _, f in ipairs(fields) do set[f] = true end
end

-- the blob fields e(ns)e(channel)version a checkpoint references, from its chain entry
-- (e(parent), then "\1"e(channel)"\2"e(version) per channel: small, no payload copied), else
-- from its record (the chain key lost, e.g. evicted); none when neither exists
local function referenced_fields(ns_e, member, entry, out)
  if entry then
    local pos = skip(entry, 1)
    while pos <= #entry do
      local ch_end = skip(entry, pos + 1)
      local ver, after = dec(entry, ch_end + 1)
      out[#out + 1] = ns_e .. string.sub(entry, pos + 1, ch_end - 1) .. ver
      pos = after
    end
    return
  end
  local raw = redis.call('HGET', K_CP, member)
  if raw then
    for _, f in ipairs(blob_fields(ns_e, cp_field(raw, CP_VERSIONS))) do out[#out + 1] = f end
  end
end

-- the blob fields the checkpoints `members` (of namespace ns_e) reference, added to out: from
-- their chain entries, or their records in a thread that keeps none
local function refs_of(ns_e, members, out)
  if META_NC == '1' or GONE[K_CHAIN] then
    local raws = hmget(K_CP, members)
    for j = 1, #members do
      if raws[j] then
        for _, f in ipairs(blob_fields(ns_e, cp_field(raws[j], CP_VERSIONS))) do out[#out + 1] = f end
      end
    end
    return
  end
  local entries = hmget(K_CHAIN, members)
  for j, m in ipairs(members) do referenced_fields(ns_e, m, entries[j], out) end
end

local function gc_blobs()
  for ns_e, set in pairs(GC) do
    local members = {}
    if not GONE[K_CPNS] then members = redis.call('ZRANGE', K_CPNS, lo(ns_e), hi(ns_e), 'BYLEX') end
    local refs = {}
    refs_of(ns_e, members, refs)
    for _, f in ipairs(refs) do set[f] = nil end
    local gone = {}
    for f, _ in pairs(set) do gone[#gone + 1] = f end
    if #gone > 0 then drop_blobs(gone) end
  end
  GC = {}
end

-- the write-hash field of a wr_ord member: prefix .. e(task_id)..idx8, i.e. the member
-- without its e(task_path) and its trailing e(channel)
local function wfield(prefix, member)
  local p = skip(member, #prefix + 1)
  return prefix .. string.sub(member, p, skip(member, p) + 7)
end

local function drop_writes(ns_e, cid_e)
  if GONE[K_WORD] then return end
  local prefix = ns_e .. cid_e
  local members = redis.call('ZRANGE', K_WORD, lo(prefix), hi(prefix), 'BYLEX')
  if #members == 0 then return end
  local fields = {}
  for i, m in ipairs(members) do fields[i] = wfield(prefix, m) end
  for i = 1, #members, 1000 do
    local j = math.min(i + 999, #members)
    hdel(K_WR, unpack(fields, i, j))
    zrem(K_WORD, unpack(members, i, j))
  end
end

-- The copy guard, meta field "g": set by a paged copy_thread of this thread (import.lua
-- "guard"), which checks it on every page; every change that removes or alters stored entries
-- (a checkpoint dropped or re-put with other bytes, a record's parent cleared, rewrite_values)
-- bumps it, so that copy starts again. Nothing is written while no copy set it.
local function bump_guard()
  if redis.call('HEXISTS', K_META, 'g') == 1 then redis.call('HINCRBY', K_META, 'g', 1) end
end

-- delete one checkpoint (record, indexes, blob refs, run link; writes unless keep_writes)
local function drop_cp(ns_e, cid_e, keep_writes)
  if GONE[K_CP] then return end
  local field = ns_e .. cid_e
  local raw = redis.call('HGET', K_CP, field)
  if not raw then return end
  bump_guard()
  local rec = cp_rec(raw, CP_RUN_ID)
  hdel(K_CP, field)
  if META_NC == '1' then redis.call('HINCRBY', K_META, 'n', -1) end
  if META_NC ~= '1' then hdel(K_CHAIN, field) end
  zrem(K_CPNS, field)
  zrem(K_CPID, cid_e .. ns_e)
  gc_candidates(ns_e, rec)
  if not keep_writes then drop_writes(ns_e, cid_e) end
  if rec[CP_RUN_ID] ~= '' then
    local run_e = enc(rec[CP_RUN_ID])
    zrem(K_RUNS, run_e .. ns_e .. cid_e)
    unlink_run_if_unused(run_e)
  end
end

-- A checkpoint's chain entry (K_CHAIN): e(parent id), then "\1"e(channel)"\2"e(version) per
-- channel of its versions record: what delta history reads of each ancestor. Kept only by
-- threads that an earlier format started (meta "nc" unset): since format 5 compresses the
-- checkpoint's bytes, its record is small enough to read instead, and a thread started by
-- format 5 keeps none (meta "nc" = "1"; ~300 bytes less per checkpoint). In an entry,
-- "\0\1" only occurs where a component ends and a channel name starts (inside e(), "\0" is
-- followed by "\255"), so one plain find of "\0\1"e(channel)"\2" locates a channel.
local function chain_entry(rec)
  local v = rec[CP_VERSIONS]
  local out = {enc(rec[CP_PARENT])}
  for i = 1, #v - 1, 2 do
    out[#out + 1] = '\1' .. enc(v[i]) .. '\2' .. enc(v[i + 1])
  end
  return table.concat(out)
end

-- store one checkpoint record (re-put of the same id replaces it, keeping its writes);
-- rec: the record's parts, as validate_record() returns them; entry: the chain entry when
-- the caller has it (put), else built from rec. Returns true when it wrote the indexes (false:
-- an identical retry, which only reads the record)
local function store_cp(ns_e, cid_e, raw, rec, entry)
  local field = ns_e .. cid_e
  local new = redis.call('HSETNX', K_CP, field, raw) == 1
  local old_run = ''
  if new and META_NC == '1' then redis.call('HINCRBY', K_META, 'n', '1') end
  if not new then
    local old = redis.call('HGET', K_CP, field)
    if old == raw then
      return false  -- an idempotent retry of the same put: nothing changes
    end
    bump_guard()
    old_run = cp_field(old, CP_RUN_ID)
    redis.call('HSET', K_CP, field, raw)
  end
  if META_NC ~= '1' then redis.call('HSET', K_CHAIN, field, entry or chain_entry(rec)) end
  -- (scores as strings: a Lua number is formatted for every call)
  redis.call('ZADD', K_CPNS, '0', field)
  redis.call('ZADD', K_CPID, '0', cid_e .. ns_e)
  if rec[CP_RUN_ID] ~= '' then link_run(enc(rec[CP_RUN_ID]), ns_e, cid_e) end
  -- a re-put under another run id: the old run's link goes after the new one is added (see
  -- "Slots that move" in _lib_thread.lua: the run keys may hold only the old link)
  if old_run ~= '' and old_run ~= rec[CP_RUN_ID] then
    local run_e = enc(old_run)
    zrem(K_RUNS, run_e .. ns_e .. cid_e)
    unlink_run_if_unused(run_e)
  end
  return true
end


-- a checkpoint record of any format, checked; returns its parts as cp_rec() does. Parts
-- 6, 7, 9, 10 (versions, filter, delta, parents) are arrays of strings, the others strings. An
-- array cmsgpack decodes holds 1..n in its array part, so "no key after n" (next) and n
-- strings is the whole check; a map is a table with a key that is not 1..n.
local function validate_record(raw)
  local rec
  if cp_is_mp(raw) then
    rec = cp_unpack(raw)
    for i = 1, CP_PARTS do
      local p = rec[i]
      if i == CP_VERSIONS or i == CP_FILTER or i == CP_DELTA or i == CP_PARENTS then
        if type(p) ~= 'table' then fail('RS_BADARG', 'checkpoint record part ' .. i .. ' must be an array') end
        local n = #p
        for j = 1, n do
          if type(p[j]) ~= 'string' then fail('RS_BADARG', 'checkpoint record part ' .. i .. ' must hold strings') end
        end
        if next(p, n > 0 and n or nil) ~= nil then
          fail('RS_BADARG', 'checkpoint record part ' .. i .. ' must be an array')
        end
      elseif type(p) ~= 'string' then
        fail('RS_BADARG', 'checkpoint record part ' .. i .. ' must be a string')
      end
    end
  else
    rec = cp_rec(raw)  -- an earlier format's (copy_thread of an old thread): its framing checked
  end
  if #rec[CP_VERSIONS] % 2 ~= 0 then fail('RS_BADARG', 'versions record must hold channel, version pairs') end
  return rec
end

-- put's checkpoint record, checked as validate_record() checks it; returns the parts put reads:
-- the parent (1) and run id (8), and every part of an earlier format's record. A format-6
-- record's shape is checked from its headers (cp_shape()) and only those two parts are copied:
-- put adds its versions (6) when it builds a chain entry from them (cp_field()). Bytes that
-- are not so shaped go to validate_record(), which names what is wrong.
local function put_record(raw)
  if cp_is_mp(raw) then
    local parent_end, run_at, run_end, nv = cp_shape(raw)
    if parent_end then
      if nv % 2 ~= 0 then fail('RS_BADARG', 'versions record must hold channel, version pairs') end
      return {mp_str_at(raw, 2, parent_end), [CP_RUN_ID] = mp_str_at(raw, run_at, run_end)}
    end
  end
  return validate_record(raw)
end

-- The replies for checkpoints items[i] = {ns_e, cid_e, record}: {record, {channel, k, ...},
-- {write records}}: the channels that hold a value ("5,0;empty" = none, redis_saver/core/codec.py
-- EMPTY_BLOB), each followed by the position k of its blob in the third result, so the client
-- neither parses the versions record nor skips empty ones; the writes in writes_sort_key order.
-- Third result: each blob the items hold once, in order of first use (consecutive checkpoints
-- share the blobs of the channels that did not change: the reply carries, and the client
-- decodes, each once). The blobs of all items are one
-- HMGET and their writes one more. Their sort members are one ZRANGE per item, or one in all
-- when `span` says the items are every checkpoint between the first and the last of their
-- namespace, newest first (a list page without a filter; any writes in that range of
-- checkpoints not in the page, e.g. early writes of a checkpoint not stored yet, are left out).
-- A blob or write that a lost key took raises RS_DAMAGED; nil = the thread is expiring.
-- Second result: the streams the items' blobs name (fetch_streams(), with held: the streams the
-- client holds).
local function tuple_replies(items, span, held)
  -- each distinct blob field once (consecutive checkpoints share the versions of the channels
  -- that did not change)
  -- memo[e(ns)][channel][version]: the position of that blob field in bfields (a page's
  -- checkpoints share most of their versions: the field is built once)
  local bfields, memo, bidx, bchans = {}, {}, {}, {}
  -- one checkpoint (get_tuple): its channels are distinct, so its fields are too, each blob k
  -- that of its k-th channel (bidx[1] = nil)
  if #items == 1 then bfields, bchans[1] = blob_fields(items[1][1], cp_field(items[1][3], CP_VERSIONS)) end
  for i = #items == 1 and 2 or 1, #items do
    local it = items[i]
    local v, ns_e = cp_field(it[3], CP_VERSIONS), it[1]
    local by_ch = memo[ns_e]
    if not by_ch then
      by_ch = {}
      memo[ns_e] = by_ch
    end
    local at, chans, n = {}, {}, 0
    for j = 1, #v - 1, 2 do
      local ch, ver = v[j], v[j + 1]
      n = n + 1
      chans[n] = ch
      local m = by_ch[ch]
      if not m then
        m = {}
        by_ch[ch] = m
      end
      local k = m[ver]
      if not k then
        k = #bfields + 1
        bfields[k] = blob_field(ns_e, ch, ver)
        m[ver] = k
      end
      at[n] = k
    end
    bidx[i], bchans[i] = at, chans
  end
  -- with the blobs, the blob mark (see "Lost keys" in _lib_thread.lua) of a thread that has one:
  -- a missing blob then needs no command of its own to tell lost from never stored (a channel
  -- with a version and no value, e.g. LangGraph's branch channels, has no blob field)
  local nb, mark = #bfields, nil
  if META_B == '1' and nb > 0 then bfields[nb + 1] = BLOB_MARK end
  local blobs = hmget(K_BLOB, bfields)
  if bfields[nb + 1] then
    mark = blobs[nb + 1] ~= false
    bfields[nb + 1], blobs[nb + 1] = nil, nil
  end
  local streams = fetch_streams(bfields, blobs, held)
  if not streams then return nil end
  local wfields, owner = {}, {}
  local ns_e = items[1][1]
  for i = 2, #items do
    if items[i][1] ~= ns_e then span = false end
  end
  if span and #items > 1 then
    local by_prefix = {}
    for i, it in ipairs(items) do by_prefix[ns_e .. it[2]] = i end
    local lower, upper = lo(ns_e .. items[#items][2]), hi(ns_e .. items[1][2])
    for _, m in ipairs(redis.call('ZRANGE', K_WORD, lower, upper, 'BYLEX')) do
      local prefix = string.sub(m, 1, skip(m, #ns_e + 1) - 1)
      local i = by_prefix[prefix]
      if i then
        wfields[#wfields + 1] = wfield(prefix, m)
        owner[#wfields] = i
      end
    end
  else
    for i, it in ipairs(items) do
      local prefix = it[1] .. it[2]
      for _, m in ipairs(redis.call('ZRANGE', K_WORD, lo(prefix), hi(prefix), 'BYLEX')) do
        wfields[#wfields + 1] = wfield(prefix, m)
        owner[#wfields] = i
      end
    end
  end
  local writes = hmget(K_WR, wfields)
  local out, checked, sent, sent_at = {}, false, {}, {}
  for i, it in ipairs(items) do
    local values, at, chans = {}, bidx[i], bchans[i]
    for c = 1, #chans do
      local k = at and at[c] or c
      local b = blobs[k]
      if b and b ~= EMPTY_BLOB then
        local s = sent_at[k]
        if not s then
          s = #sent + 1
          sent[s], sent_at[k] = b, s
        end
        values[#values + 1] = chans[c]
        values[#values + 1] = s
      elseif not b and not checked then
        if check_blob_missing(bfields[k], mark) then return nil end  -- nil: the thread is expiring
        checked = true
      end
    end
    out[i] = {it[3], values, {}}
  end
  for k = 1, #wfields do
    local w = out[owner[k]][3]
    if not writes[k] then
      if damaged('a write indexed in wr_ord is missing from wr') then return nil end
    end
    w[#w + 1] = writes[k]
  end
  return out, streams, sent
end

-- _store_lib.lua: helpers of the store's scripts (lua/store_*.lua, RedisStore and
-- AsyncRedisStore). Not a script of its own; redis_saver/store/_keys.py spells the key names.
--
-- A store keeps its namespaces in shards; every key of a shard shares its hash tag (one
-- cluster slot). KEYS[1] of a store script is the shard's namespace index
-- "<prefix>:store#{<shard tag>}:n"; the script names the shard's other keys from it (the same
-- tag, so the same slot):
--   n   ZSET (lex, score 0)  e(ns) of each namespace that has items (list_namespaces, prefixes)
--   q   ZSET                 e(ns) -> the namespace's sequence number (search order)
--   x   ZSET                 e(ns) -> the latest expiry of its items (ms), if they all expire
--   m   HASH                 seq -> the shard's last sequence number
--   k:<e(ns)>  ZSET          e(key) -> the item's sequence number (search order in the namespace)
--   e:<e(ns)>  ZSET          e(key) -> the item's expiry (ms), for the items that expire
--   i:<e(ns)><e(key)>  STRING  the item: "<created us> <updated us> <ttl ms> <type>\n<bytes>"
--   v:<e(ns)><e(key)>  HASH    index path -> float32 vector (the item's expiry)
--   w   STRING               the shard's version token "<incarnation>:<counter>": every call
--                            that puts or deletes items bumps it (clients' vector caches)
--   l   ZSET                 the shard's change log (st_log): e(ns)..e(key) -> the counter of
--                            the item's last change; "#<incarnation>" -> the log's floor
-- e(ns) is the concatenation of e(label) per label (keys.enc): self-delimiting, and ordered
-- as the tuples are. An item expires as a Redis key; the index entries it leaves are skipped
-- by reads and dropped, a few at a time, by the next write to its namespace or shard.
local STORE_FORMAT = '1'
local SWEEP_ITEMS = 16  -- expired entries a write drops from the namespace it touches
local SWEEP_NAMESPACES = 4  -- expired namespaces a write drops from its shard
local CHANGE_LOG = 2048  -- items the change log "l" keeps (the last changed; _vcache.py CHANGE_LOG)

local function st_fail(code, msg) error({err = code .. ' ' .. msg}) end

local ST_VS = false  -- the call keeps vector sets (st_check: ARGV[1] "<format>v")
-- the HNSW parameters (VADD M, EF) the sets this call makes get: M 4, EF 4 (a cheap graph:
-- exact searches scan the set, VSIM TRUTH; EF 1 crashed Redis 8.2.3 under overwrites of small
-- sets, redis/redis#15424, docs/store.md) unless ARGV[1] is "<format>vh<M>:<EF>" (the opt-in
-- approximate search, RedisStore index "ann_index_config"; M 5-100, EF 4-1000)
local ST_M, ST_EF = 4, 4

local function st_check(fmt)
  ST_VS, ST_M, ST_EF = fmt == STORE_FORMAT .. 'v', 4, 4  -- set on every call (a library keeps them)
  if ST_VS then return end
  local m, ef = string.match(tostring(fmt), '^' .. STORE_FORMAT .. 'vh(%d+):(%d+)$')
  if m then
    ST_M, ST_EF = tonumber(m), tonumber(ef)
    if ST_M < 5 or ST_M > 100 or ST_EF < 4 or ST_EF > 1000 then st_fail('RS_BADARG', 'bad HNSW parameters') end
    ST_VS = true
    return
  end
  if fmt ~= STORE_FORMAT then st_fail('RS_SCHEMA', 'store format ' .. tostring(fmt) .. ' is not ' .. STORE_FORMAT) end
end

-- the shard's key names start with this (KEYS[1] without its final "n"). Slots that move
-- (docs/architecture.md): while the shard's slot is MIGRATING or IMPORTING, Redis fails a
-- script's command on a key missing on this node (any command on the node the slot leaves,
-- one naming several keys on the other) halfway through the script, and a store call names
-- keys it does not declare (items, their indexes); so the call is refused before it does
-- anything, as Redis refuses a command whose keys are in part elsewhere (TRYAGAIN: the client
-- sends it again once the slot has moved). Two keys no store writes answer in one command.
local function st_base()
  local k = KEYS[1]
  if #KEYS ~= 1 or string.sub(k, -3) ~= '}:n' then st_fail('RS_BADARG', 'expected the shard index key') end
  local base = string.sub(k, 1, -2)
  if type(redis.pcall('EXISTS', base .. '\0', base .. '\0\0')) ~= 'number' then
    st_fail('TRYAGAIN', 'the store shard\'s slot is moving between nodes')
  end
  return base
end

-- milliseconds since the epoch (expiry scores)
local function st_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
end

local function st_int(s, what)
  local n = tonumber(s)
  if n == nil or n < 0 or n ~= math.floor(n) then st_fail('RS_BADARG', 'bad ' .. what) end
  return n
end

-- ---- vector sets (servers with VADD, Redis 8; the client says so: ARGV[1] "<format>v") ----
--   s:<e(ns)>  VSET   e(key) e(path) -> the vector (FP32, NOQUANT): every vector of the
--                     namespace's items, for VSIM (the client finds candidates, scores exactly)
--   c          HASH   e(ns) -> the number of elements s:<e(ns)> holds; the set is complete (it
--                     holds every vector of the namespace) while VCARD equals it; no field: the
--                     namespace is not kept in a set (made before, evicted, a vector VSIM cannot
--                     score exactly): searches scan it; "<number> <token> <cursor>": a
--                     rebuild runs (store_rebuild.lua): writers keep the set in step, searches
--                     scan it until the rebuild's last page makes the field a number.
--                     Prefixed "h<M>:<EF>:" when the set was made with VADD M <M> (not 4, the
--                     default; the opt-in approximate search): writers of this release add to it
--                     with EF <EF> and no M (VADD refuses an M other than the set's); a writer
--                     of a release before reads no count there and takes the namespace out of
--                     sets (it would VADD M 4, refused mid-call): searches scan until a rebuild
--   t:<e(ns)>  SET    e(path) of each path a vector of the namespace was put under (to remove an
--                     item's elements when its vectors are gone: deleted, expired)
-- Neither expires: as k: and e:, they go with their namespace (st_vs_drop).
local VS_MIN_NORM2 = 1e-30  -- squared norms VSIM's float32 arithmetic scores as exactly as the
local VS_MAX_NORM2 = 1e30  -- client's bound says (zero too: a cosine of 0 both ways)

local function st_vs_enc(s) return (string.gsub(s, '%z', '\0\255')) .. '\0' end

-- the namespace leaves vector sets (its searches scan)
local function st_vs_drop(base, ens)
  redis.call('UNLINK', base .. 's:' .. ens, base .. 't:' .. ens)
  redis.call('HDEL', base .. 'c', ens)
end

-- whether a float32 vector (little-endian bytes) scores in a vector set as exactly as the bound
-- the client uses: finite, zero or with a norm well inside float32's range, dims as the set's
local function st_vs_fits(vec, dims)
  if #vec == 0 or #vec % 4 ~= 0 or (dims and #vec ~= 4 * dims) then return false end
  local s, pos = 0, 1
  while pos <= #vec do
    local chunk = math.min(#vec - pos + 1, 4 * 64)
    local xs = {struct.unpack('<' .. string.rep('f', chunk / 4), vec, pos)}
    for i = 1, chunk / 4 do
      local x = xs[i]
      if x ~= x or x == math.huge or x == -math.huge then return false end
      s = s + x * x
    end
    pos = pos + chunk
  end
  return s == 0 or (s > VS_MIN_NORM2 and s < VS_MAX_NORM2)
end

-- the namespace's count in "c": a number (the set is complete while VCARD equals it), or
-- "<number> <token> <cursor>" while a rebuild runs (store_rebuild.lua: the set holds that many
-- elements, kept in step by the writers, but not yet every vector): the number and the marker
-- (and the "h<M>:<EF>:" prefix of a set made with M other than 4, or nil)
local function st_vs_count(raw)
  if not raw then return nil end
  local hp, rest = string.match(raw, '^(h%d+:%d+:)(.*)$')
  if hp then raw = rest end
  local c = tonumber(raw)
  if c then return c, nil, hp end
  local n, rb = string.match(raw, '^(%d+)( %w+ %S+)$')
  return tonumber(n), rb, hp
end

-- VADD of one element to the set sk (state st): a call that makes the set (st.n == 0: no set,
-- an empty one is deleted) makes it with this call's M and EF (and marks it: st.hp); one that
-- adds to a set gives the set's M and EF (VADD refuses an M other than the set's, and takes
-- none given for 16)
local function st_vs_add(sk, st, vec, elem)
  if st.n == 0 then
    st.hp = ST_M ~= 4 and string.format('h%d:%d:', ST_M, ST_EF) or nil
    return redis.call('VADD', sk, 'FP32', vec, elem, 'NOQUANT', 'EF', ST_EF, 'M', ST_M)
  end
  local m, ef = 4, 4
  if st.hp then m, ef = string.match(st.hp, '^h(%d+):(%d+):$') end
  return redis.call('VADD', sk, 'FP32', vec, elem, 'NOQUANT', 'EF', ef, 'M', m)
end

-- the namespace's set state in this call: {n = elements, dims = its dimension or nil} while kept
-- (complete), false otherwise; fresh: the namespace has no k: entries (no item a scan can
-- find): it gets a new set
local function st_vs_state(base, ens, states, fresh)
  local st = states[ens]
  if st ~= nil then return st end
  local sk = base .. 's:' .. ens
  if fresh then
    redis.call('UNLINK', sk, base .. 't:' .. ens)
    redis.call('HSET', base .. 'c', ens, 0)
    st = {n = 0}
  else
    local c, rb, hp = st_vs_count(redis.call('HGET', base .. 'c', ens))
    if c ~= nil and redis.call('VCARD', sk) == c then
      -- rb: a rebuild runs (store_rebuild.lua): the set is kept in step, the marker kept
      st = {n = c, dims = c > 0 and redis.call('VDIM', sk) or nil, rb = rb, hp = hp}
    else
      st_vs_drop(base, ens)  -- incomplete (evicted, deleted, its count gone) or none: no use now
      st = false
    end
  end
  states[ens] = st
  return st
end

-- the item's elements for paths it has no vector under (ekey's vectors were deleted, expired,
-- or are being replaced; keep: e(path) -> true, the paths it keeps)
local function st_vs_remove(base, ens, ekey, st, keep)
  for _, ep in ipairs(redis.call('SMEMBERS', base .. 't:' .. ens)) do
    if not (keep and keep[ep]) then st.n = st.n - redis.call('VREM', base .. 's:' .. ens, ekey .. ep) end
  end
end

-- a put item's vectors, all of them (its v: hash after the put: the paths put now and those it
-- keeps, which may predate the set if its namespace's index keys were evicted), go into the set,
-- and its elements for other paths (an expired item's before it) go; returns the state (false:
-- the namespace left sets, a vector VSIM cannot score within the bound)
local function st_vs_put(base, ens, ekey, st)
  local vecs = redis.call('HGETALL', base .. 'v:' .. ens .. ekey)
  for j = 2, #vecs, 2 do
    if not st_vs_fits(vecs[j], st.dims) then
      st_vs_drop(base, ens)
      return false
    end
    st.dims = #vecs[j] / 4
  end
  local keep = {}
  for j = 1, #vecs, 2 do
    local ep = st_vs_enc(vecs[j])
    keep[ep] = true
    st.n = st.n + st_vs_add(base .. 's:' .. ens, st, vecs[j + 1], ekey .. ep)
    redis.call('SADD', base .. 't:' .. ens, ep)
  end
  st_vs_remove(base, ens, ekey, st, keep)
  return st
end

-- the counts of the namespaces a call kept in sets
local function st_vs_save(base, states)
  for ens, st in pairs(states) do
    if st and redis.call('EXISTS', base .. 'k:' .. ens) == 1 then
      redis.call('HSET', base .. 'c', ens, (st.n > 0 and st.hp or '') .. string.format('%d', st.n) .. (st.rb or ''))
    end
  end
end

-- x[ns] := the latest expiry of the namespace's items, or no entry when one of them has none
-- (e: holds only the items that expire); a namespace left without items leaves the shard's indexes
local function st_ns_expiry(base, ens)
  local n = redis.call('ZCARD', base .. 'k:' .. ens)
  if n == 0 then
    redis.call('DEL', base .. 'k:' .. ens, base .. 'e:' .. ens)
    redis.call('ZREM', base .. 'n', ens)
    redis.call('ZREM', base .. 'q', ens)
    redis.call('ZREM', base .. 'x', ens)
    if ST_VS or redis.call('HGET', base .. 'c', ens) then st_vs_drop(base, ens) end  -- any writer
  elseif redis.call('ZCARD', base .. 'e:' .. ens) < n then
    redis.call('ZREM', base .. 'x', ens)
  else
    local top = redis.call('ZRANGE', base .. 'e:' .. ens, 0, 0, 'REV', 'WITHSCORES')
    redis.call('ZADD', base .. 'x', top[2], ens)
  end
end

-- the item's own ttl (ms, 0 = none), from its record
local function st_ttl(rec)
  local ttl = string.match(rec, '^%d+ %d+ (%d+) ')
  if ttl == nil then st_fail('RS_BADARG', 'malformed item record') end
  return tonumber(ttl)
end

-- the item's expiry starts again from now (refresh_ttl): its keys and index entries
local function st_refresh(base, ens, ekey, ttl, now_ms)
  redis.call('PEXPIRE', base .. 'i:' .. ens .. ekey, ttl)
  redis.call('PEXPIRE', base .. 'v:' .. ens .. ekey, ttl)
  redis.call('ZADD', base .. 'e:' .. ens, string.format('%.0f', now_ms + ttl), ekey)
  st_ns_expiry(base, ens)
end

-- the shard's version token changes: the counter goes up; a token that is missing (never
-- made, evicted, deleted) starts a new incarnation (server time and a random part), so a token
-- a client cached before never matches again
-- ``changed``: the items the call put or deleted (e(ns)..e(key), a set), logged; ``unlogged``:
-- the call changed what a scan finds beyond them (a namespace listed again with the items its
-- k: kept after its q entry was lost): no client behind this call may patch (the floor rises)
local function st_bump(base, changed, unlogged)
  local k = base .. 'w'
  local inc, c = string.match(redis.call('GET', k) or '', '^(%w+):(%d+)$')
  if not inc then
    local t = redis.call('TIME')
    inc = t[1] .. string.format('%06d', tonumber(t[2])) .. string.format('x%x', math.random(0, 1073741823))
    c = 0
    redis.call('DEL', base .. 'l')  -- an older incarnation's log (its floor names that incarnation)
  end
  local now = tonumber(c) + 1
  redis.call('SET', k, inc .. ':' .. string.format('%.0f', now))
  -- the change log: each changed item scored by this counter (an item changed again keeps its
  -- latest), and "#<incarnation>" scored by the floor F: every change after F is in the log.
  -- A log that is missing (never made, evicted) starts at the counter before this call's, so
  -- a client that cached an earlier one finds no floor at or below its counter: not covered.
  -- The log keeps the CHANGE_LOG items changed last; those dropped raise F to their counter.
  local lk, floor = base .. 'l', '#' .. inc
  redis.call('ZADD', lk, unlogged and 'GT' or 'NX', string.format('%.0f', unlogged and now or now - 1), floor)
  local args, score = {}, string.format('%.0f', now)
  for m in pairs(changed) do
    args[#args + 1] = score
    args[#args + 1] = m
    if #args >= 512 then
      redis.call('ZADD', lk, unpack(args))
      args = {}
    end
  end
  if #args > 0 then redis.call('ZADD', lk, unpack(args)) end
  local cut = redis.call('ZCARD', lk) - 1 - CHANGE_LOG
  if cut > 0 then  -- at most this call's items (the log held CHANGE_LOG before it)
    local f = redis.call('ZSCORE', lk, floor)
    redis.call('ZREM', lk, floor)
    local old = redis.call('ZRANGE', lk, 0, cut - 1, 'WITHSCORES')
    local names = {}
    for i = 1, #old, 2 do names[#names + 1] = old[i] end
    redis.call('ZREM', lk, unpack(names))
    redis.call('ZADD', lk, math.max(tonumber(old[#old]), tonumber(f)), floor)
  end
end


local function begin_full(keys, argv)
  if not string then string, table, math, redis, unpack, ipairs, pairs, tonumber, tostring, error, type = builtins() end
  KEYS, ARGV = keys, argv
  K_META, K_CP, K_CPNS, K_CPID, K_BLOB, K_WR, K_WORD, K_RUNS, K_CHAIN, K_IXT, K_IXR = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
  THREAD_KEYS = {K_META, K_CP, K_CPNS, K_CPID, K_BLOB, K_WR, K_WORD, K_RUNS, K_CHAIN}
  LEAN = false
  if #KEYS ~= 11 then fail('RS_BADARG', 'expected 11 keys') end
  FORMAT, THREAD_ID, TTL_MS, REFRESH = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
  if TTL_MS == nil or TTL_MS < 0 then fail('RS_BADARG', 'bad ttl') end
  THREAD_E = enc(THREAD_ID)
  META_V, META_IX, META_PIN, META_FH, META_B, META_DMG, META_C, META_WM = nil, nil, nil, nil, nil, nil, nil, nil
  META_NC, META_N, META_XP = nil, nil, nil
  GC = {}  -- blob collection candidates (see gc_blobs())
  GONE, LEFT = {}, {}
end
local function begin_lean(keys, argv)
  if not string then string, table, math, redis, unpack, ipairs, pairs, tonumber, tostring, error, type = builtins() end
  KEYS, ARGV = keys, argv
  K_WR, K_WORD = KEYS[1], KEYS[2]
  K_META, K_CP, K_CPNS, K_CPID, K_BLOB, K_RUNS, K_CHAIN, K_IXT, K_IXR, THREAD_KEYS = nil
  LEAN = true
  if #KEYS ~= 2 then fail('RS_BADARG', 'expected 2 keys (lean)') end
  FORMAT, THREAD_ID, TTL_MS, REFRESH = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
  if TTL_MS == nil or TTL_MS < 0 then fail('RS_BADARG', 'bad ttl') end
  THREAD_E = enc(THREAD_ID)
  META_V, META_IX, META_PIN, META_FH, META_B, META_DMG, META_C, META_WM = nil, nil, nil, nil, nil, nil, nil, nil
  META_NC, META_N, META_XP = nil, nil, nil
  GC = {}  -- blob collection candidates (see gc_blobs())
  GONE, LEFT = {}, {}
end
local function begin_bare(keys, argv)
  if not string then string, table, math, redis, unpack, ipairs, pairs, tonumber, tostring, error, type = builtins() end
  KEYS, ARGV = keys, argv

end
local function s_delete_runs()
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

end
local function s_delete_thread()
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

end
local function s_delta_history()
--[[ delta_history: walk a checkpoint's parent chain for DeltaChannel reconstruction
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
(BaseCheckpointSaver.get_delta_channel_history), inside Redis, in one call.
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] checkpoint_ns   ARGV[6] checkpoint id ("" = latest)
ARGV[7] "0": walk the ancestors of ARGV[6] (a first call) | "1": ARGV[6] is the first ancestor
        to walk (a continuation: the "next" of the previous call)
ARGV[8] budget: the most ancestors this call walks (bounds the script's work on any data)
ARGV[9..] channel names (a continuation sends only the channels still unseeded)
Returns: {ancestors, seeds, next, ids}; ancestors = {{write records of still-unseeded channels,
in writes_sort_key order}, ...} newest ancestor first (the target itself is excluded);
seeds = {channel, blob record, ...} for each channel whose nearest stored value was found;
next = the id of the next ancestor to walk when the budget ran out with channels unseeded
("" = the walk is complete); ids = the ids of the ancestors walked, when next ~= "" or the
call is a continuation (the client checks them for a cycle across calls), else empty;
streams = the streams the seeds name, as get_tuple's reply (absent on an empty reply).
Errors: RS_CYCLE (the parent chain returns to a checkpoint it already walked), RS_DAMAGED (a key
of the thread was lost: see "Lost keys" in _lib.lua; the client then sends the writable variant
with ARGV[4] = "f", which forgets the thread and answers as if it did not exist), RS_SCHEMA, RS_BADARG
]]
local ns, cid, cont, budget = ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8])
if (cont ~= '0' and cont ~= '1') or not budget or budget < 1 then fail('RS_BADARG', 'bad walk arguments') end
check_format()
if check_counts() then return {{}, {}, '', {}} end  -- O(1): lost keys (see _lib.lua)
local ns_e = enc(ns)
local remaining, left = {}, 0
for i = 9, #ARGV do
  if not remaining[ARGV[i]] then remaining[ARGV[i]] = true left = left + 1 end
end
-- the versions of the still-unseeded channels in an earlier format's versions record ("<len>,...;" then name,
-- version, name, version, ...), taking substrings only for the name parts whose length
-- matches a wanted channel (the record-based fallback of link() below)
local want_len = {}
for ch, _ in pairs(remaining) do want_len[#ch] = true end
local function wanted_versions(vrec)
  local semi = string.find(vrec, ';', 1, true)
  if not semi then fail('RS_BADARG', 'malformed record') end
  local pos, odd, name, out, found = semi + 1, true, nil, {}, 0
  for len in string.gmatch(string.sub(vrec, 1, semi - 1), '%d+') do
    len = tonumber(len)
    if odd then
      name = nil
      if want_len[len] then
        local c = string.sub(vrec, pos, pos + len - 1)
        if remaining[c] then name = c end
      end
    elseif name then
      out[name] = string.sub(vrec, pos, pos + len - 1)
      found = found + 1
      -- every unseeded channel found: the rest of the record is not read (put.lua validated
      -- its framing; LangGraph lists a graph's first channels, e.g. messages, early)
      if found == left then return out end
    end
    odd = not odd
    pos = pos + len
  end
  return out
end

-- the parent id (part 1) and the versions record (part 6) of an earlier format's checkpoint
-- record, with one anchored match on its header and without copying the checkpoint payload
local function parent_and_versions(raw)
  local _, e, a, b, c, d, f, g = string.find(raw, '^(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),')
  local semi = e and string.find(raw, ';', e, true)
  if not semi then fail('RS_BADARG', 'malformed checkpoint record') end
  local p6 = semi + 1 + a + b + c + d + f
  return string.sub(raw, semi + 1, semi + a), string.sub(raw, p6, p6 + g - 1)
end

local cid_e
if cid == '' then
  cid_e = latest_of(ns_e)
  if not cid_e then
    check_cp_keys()  -- none in this namespace; or its checkpoint keys were lost
    return {{}, {}, '', {}}
  end
else
  cid_e = enc(cid)
end
-- e(parent id) and the versions of the still-unseeded channels of one checkpoint, from its
-- chain entry (which starts with e(parent); one plain find per channel), else from its record
-- (put writes both; the record keeps the answer right when the chain key alone was lost, e.g.
-- evicted under an allkeys-* policy); nil when the checkpoint does not exist
local needles, blob_prefix = {}, {}
for ch, _ in pairs(remaining) do
  needles[ch] = '\0\1' .. enc(ch) .. '\2'
  blob_prefix[ch] = blob_field(ns_e, ch, '')  -- its blob fields without the version
end
local function link(field)
  local entry = nil
  if META_NC ~= '1' then entry = redis.call('HGET', K_CHAIN, field) end
  if not entry then
    local raw = redis.call('HGET', K_CP, field)
    if not raw then return nil end
    if cp_is_mp(raw) then
      local rec = cp_parts(raw, CP_VERSIONS)
      local v, out = rec[CP_VERSIONS], {}
      for i = 1, #v - 1, 2 do
        if remaining[v[i]] then out[v[i]] = v[i + 1] end
      end
      return enc(rec[CP_PARENT]), out
    end
    local parent, vrec = parent_and_versions(raw)
    return enc(parent), wanted_versions(vrec)
  end
  local out = {}
  for ch, needle in pairs(needles) do
    if remaining[ch] then
      local i = string.find(entry, needle, 1, true)
      if i then out[ch] = dec(entry, i + #needle) end
    end
  end
  return string.sub(entry, 1, skip(entry, 1) - 1), out
end

local NO_PARENT = enc('')
local parent_e
if cont == '1' then parent_e = cid_e else parent_e = link(ns_e .. cid_e) end
if not parent_e and check_cp_keys() then return {{}, {}, '', {}} end
local wanted = {}
for ch, _ in pairs(remaining) do wanted[ch] = true end

-- 1. The chain of ancestors, newest first, at most `budget` of them. A channel stops at the
-- newest ancestor whose stored value for it is not empty (its seed). Blobs are looked up a
-- page of ancestors at a time (one HMGET), and a version already looked up is not looked up
-- again. A checkpoint met twice means the stored parent links form a cycle: an error, never
-- an endless walk.
local chain, seeded_at, seeds, looked = {}, {}, {}, {}
local seed_fields, seed_blobs = {}, {}
local walked = {[cid_e] = cont == '0' or nil}
while parent_e and parent_e ~= NO_PARENT and left > 0 and #chain < budget do
  local page, n = {}, 0
  while parent_e and parent_e ~= NO_PARENT and n < 16 and #chain < budget do
    if walked[parent_e] then
      fail('RS_CYCLE', 'the parent chain of checkpoint ' .. dec(cid_e, 1) .. ' returns to ' .. dec(parent_e, 1))
    end
    local next_e, versions = link(ns_e .. parent_e)
    if not next_e then
      -- a deleted parent (delete_for_runs), or a lost key (RS_DAMAGED)
      if check_cp_keys() then return {{}, {}, '', {}} end
      parent_e = nil
      break
    end
    walked[parent_e] = true
    chain[#chain + 1] = parent_e
    for ch, ver in pairs(versions) do
      if looked[ch] ~= ver then
        looked[ch] = ver
        page[#page + 1] = {#chain, ch, blob_prefix[ch] .. ver}
      end
    end
    n = n + 1
    parent_e = next_e
  end
  local fields = {}
  for j = 1, #page do fields[j] = page[j][3] end
  local blobs = hmget(K_BLOB, fields)
  for j = 1, #page do
    local at, ch, b = page[j][1], page[j][2], blobs[j]
    if not b and check_blob_missing(page[j][3]) then return {{}, {}, '', {}} end
    if b and remaining[ch] and b ~= EMPTY_BLOB then
      remaining[ch] = nil
      left = left - 1
      seeded_at[ch] = at
      seeds[#seeds + 1] = ch
      seeds[#seeds + 1] = b
      seed_fields[#seed_fields + 1] = page[j][3]
      seed_blobs[#seed_blobs + 1] = b
    end
  end
end
-- where a later call goes on: the budget ran out before every channel found its seed
local next_id = ''
if left > 0 and parent_e and parent_e ~= NO_PARENT then next_id = dec(parent_e, 1) end
-- the walk ends at the oldest seed (the page may have read a few ancestors beyond it)
if left == 0 then
  local last = 0
  for _, at in pairs(seeded_at) do last = math.max(last, at) end
  for i = #chain, last + 1, -1 do chain[i] = nil end
end

-- 2. The writes of the chain: one range of the sort index over the chain's ids when that
-- range holds little else (a linear thread), else one range per ancestor. An ancestor
-- keeps the writes of the channels not seeded at a newer ancestor, in writes_sort_key order.
local ancestors, at_of = {}, {}
local low, high = nil, nil
for i, c in ipairs(chain) do
  ancestors[i] = {}
  at_of[c] = i
  if not low or c < low then low = c end
  if not high or c > high then high = c end
end
local members = {}
if #chain > 0 then
  local from, to = lo(ns_e .. low), hi(ns_e .. high)
  if redis.call('ZLEXCOUNT', K_WORD, from, to) <= 4 * #chain + 64 then
    members = redis.call('ZRANGE', K_WORD, from, to, 'BYLEX')
  else
    for _, c in ipairs(chain) do
      for _, m in ipairs(redis.call('ZRANGE', K_WORD, lo(ns_e .. c), hi(ns_e .. c), 'BYLEX')) do
        members[#members + 1] = m
      end
    end
  end
end
-- A member ends with idx8 e(channel): it names a wanted channel when it ends with that
-- channel's e() and the byte 9 before it is task_id's terminator (a NUL not followed by
-- \255: inside e(), a NUL is either followed by \255 or last; idx8 is hex), so only the
-- wanted channels' writes are read.
local suffixes = {}
for ch, _ in pairs(wanted) do suffixes[#suffixes + 1] = {ch, enc(ch)} end
local function member_channel(m)
  for _, s in ipairs(suffixes) do
    local n = #s[2]
    if string.sub(m, -n) == s[2] and string.byte(m, -n - 9) == 0 and string.byte(m, -n - 8) ~= 255 then
      return s[1]
    end
  end
  return nil
end
local fields, owner = {}, {}
for _, m in ipairs(members) do
  local ch = member_channel(m)
  if ch then
    local e = skip(m, #ns_e + 1)
    local at = at_of[string.sub(m, #ns_e + 1, e - 1)]
    if at and (seeded_at[ch] == nil or at <= seeded_at[ch]) then
      fields[#fields + 1] = wfield(string.sub(m, 1, e - 1), m)
      owner[#owner + 1] = at
    end
  end
end
local recs = hmget(K_WR, fields)
for k = 1, #fields do
  if not recs[k] and damaged('a write indexed in wr_ord is missing from wr') then return {{}, {}, '', {}} end
  if recs[k] then
    local a = ancestors[owner[k]]
    a[#a + 1] = recs[k]
  end
end
local ids = {}
if next_id ~= '' or cont == '1' then
  for i, c in ipairs(chain) do ids[i] = dec(c, 1) end
end
local streams = fetch_streams(seed_fields, seed_blobs)
if not streams then return {{}, {}, '', {}} end
if META_V then touch_read() end
return {ancestors, seeds, next_id, ids, streams}

end
local function s_export()
--[[ export: a source thread's stored data, for copy_thread (import.lua writes it into the target).
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] step: "all" | "page"
all:  ARGV[6..8] the most checkpoints, fields (cp, blob and wr together) and bytes of one call.
      The whole thread in this one call, a snapshot, when it holds no more than that.
      Returns {"all" [ALL], {cp field, record, ...}, {blob field, record, ...}, {wr field, record, ...}}
      (blob: streams' directories and frames included, without the blob mark; wr: without the
      lean / wr mark), or {"paged" [PAGED]} when it holds more (nothing else is returned).
page: ARGV[6] the guard (meta "g", as import.lua "guard" returned it)   ARGV[7] after: the last
      cp_id member exported ("" = from the oldest)   ARGV[8] upto: the greatest cp_id member of
      the copy ("" = the thread's greatest now)   ARGV[9..11] the most checkpoints, fields and
      bytes of one page (at least one checkpoint is returned)   ARGV[12..] the streams the
      client holds: directory field, the directory record it holds, ...
      The next checkpoints in cp_id order (oldest id first), each with its record, the blob
      records its versions name (once per page), its writes, and the streams those records
      name (directory and frames, read together) unless the client holds that directory: then
      the directory and only the frames the client's does not list (frames never change under
      their number).
      Returns {"ok" [OK], next after ("" = done), upto, {cp field, record, ...}, {blob field, record,
      ...}, {stream part field, value, ...}, {wr field, record, ...}}, or {"changed" [CHANGED]} when meta
      "g" is not the guard: the thread went, or changed destructively (see bump_guard()).
Errors: RS_BADARG, RS_SCHEMA
]]
local step = ARGV[5]
if step ~= 'all' and step ~= 'page' then fail('RS_BADARG', 'bad export step') end
local base = step == 'all' and 6 or 9
local max_cp, max_fields, max_bytes = tonumber(ARGV[base]), tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])
if not max_cp or not max_fields or not max_bytes or max_cp < 1 then fail('RS_BADARG', 'bad export arguments') end
check_format()

if step == 'all' then
  if META_XP then return {'all', {}, {}, {}} end  -- being written (not visible yet): as if absent
  local ncp = redis.call('HLEN', K_CP)
  if ncp > max_cp or ncp + redis.call('HLEN', K_BLOB) + redis.call('HLEN', K_WR) > max_fields then
    return {'paged'}
  end
  local out, nbytes = {'all'}, 0
  for _, key in ipairs({K_CP, K_BLOB, K_WR}) do
    -- the whole hash (HSCAN to its end, not HGETALL: the ACL rule of docs/deployment.md lists
    -- the commands the scripts use; a field HSCAN returns twice is kept once). The blob mark
    -- and the lean / wr mark (field "" of blob, of wr: see _lib.lua) are the target thread's
    -- own state (import.lua sets them)
    local kept, seen, cursor = {}, {}, '0'
    repeat
      local page = redis.call('HSCAN', key, cursor, 'COUNT', 1000)
      local flat = page[2]
      cursor = page[1]
      for i = 1, #flat, 2 do
        local f = flat[i]
        if f ~= '' and not seen[f] then
          seen[f] = true
          kept[#kept + 1] = f
          kept[#kept + 1] = flat[i + 1]
          nbytes = nbytes + #f + #flat[i + 1]
        end
      end
      if nbytes > max_bytes then return {'paged'} end
    until cursor == '0'
    out[#out + 1] = kept
  end
  return out
end

if redis.call('HGET', K_META, 'g') ~= ARGV[6] then return {'changed'} end
local after, upto = ARGV[7], ARGV[8]
if upto == '' then
  local top = redis.call('ZRANGE', K_CPID, '+', '-', 'BYLEX', 'REV', 'LIMIT', 0, 1)
  if #top == 0 then return {'ok', '', '', {}, {}, {}, {}} end
  upto = top[1]
end
local members = redis.call('ZRANGE', K_CPID, after == '' and '-' or '(' .. after, '[' .. upto, 'BYLEX', 'LIMIT', 0, max_cp)
local held = {}
for i = 12, #ARGV - 1, 2 do held[ARGV[i]] = ARGV[i + 1] end
-- read 16 checkpoints at a time in a few commands (their records, the blobs they name, each
-- once, their writes) until the budget runs out: the page ends after that chunk's checkpoint
-- that reached it (at least one)
local cfields, raws = {}, {}
local bfields, bvals, bowner, seen = {}, {}, {}, {}
local wfields, wvals, wowner = {}, {}, {}
local last, nfields, nbytes = 0, 0, 0
local size, count = {}, {}
local from = 1
while from <= #members and last == 0 do
  local to = math.min(from + 15, #members)
  local chunk = {}
  for i = from, to do
    local m = members[i]
    local p = skip(m, 1)
    cfields[i] = string.sub(m, p) .. string.sub(m, 1, p - 1)
    chunk[#chunk + 1] = cfields[i]
  end
  local got = hmget(K_CP, chunk)
  local b0, w0 = #bfields, #wfields
  for i = from, to do
    local raw, field = got[i - from + 1], cfields[i]
    raws[i] = raw
    size[i], count[i] = raw and #field + #raw or 0, raw and 1 or 0
    if raw then
      local ns_e = string.sub(field, 1, skip(field, 1) - 1)
      for _, f in ipairs((blob_fields(ns_e, cp_field(raw, CP_VERSIONS)))) do
        if not seen[f] then
          seen[f] = true
          bfields[#bfields + 1] = f
          bowner[#bfields] = i
        end
      end
      for _, w in ipairs(redis.call('ZRANGE', K_WORD, lo(field), hi(field), 'BYLEX')) do
        wfields[#wfields + 1] = wfield(field, w)
        wowner[#wfields] = i
      end
    end
  end
  -- the chunk's new value and write fields, read and counted against their checkpoints
  for _, t in ipairs({{K_BLOB, bfields, bvals, bowner, b0}, {K_WR, wfields, wvals, wowner, w0}}) do
    local key, fields, vals, owner, k0 = t[1], t[2], t[3], t[4], t[5]
    local part = {}
    for k = k0 + 1, #fields do part[#part + 1] = fields[k] end
    local got_v = hmget(key, part)
    for k = 1, #part do
      local v = got_v[k]
      vals[k0 + k] = v
      if v then
        local i = owner[k0 + k]
        size[i], count[i] = size[i] + #part[k] + #v, count[i] + 1
      end
    end
  end
  for i = from, to do
    nfields, nbytes = nfields + count[i], nbytes + size[i]
    if nfields >= max_fields or nbytes >= max_bytes then
      last = i
      break
    end
  end
  from = to + 1
end
if last == 0 then last = #members end
local cps, blobs, streams, writes = {}, {}, {}, {}
for i = 1, last do
  if raws[i] then
    cps[#cps + 1] = cfields[i]
    cps[#cps + 1] = raws[i]
  end
end
-- the streams the page's records name, unless the client holds them at their length:
-- directories in one HMGET, their frames in another
local dfields, dseen = {}, {}
for k = 1, #bfields do
  local b = bvals[k]
  if b and bowner[k] <= last then
    blobs[#blobs + 1] = bfields[k]
    blobs[#blobs + 1] = b
    local d = stream_of(bfields[k], b)
    if d and not dseen[d] then
      dseen[d] = true
      dfields[#dfields + 1] = d
    end
  end
end
local dirs, ffields = hmget(K_BLOB, dfields), {}
for j, d in ipairs(dfields) do
  local dir = dirs[j]
  if dir then
    local h = held[d]
    if h ~= dir then
      -- frames never change under their number (a merge writes a new one): only those the
      -- client does not hold
      local have, parts = {}, unpack_rec(dir)
      if h then
        local hp = unpack_rec(h)
        for k = 4, #hp - 1, 2 do have[hp[k]] = true end
      end
      streams[#streams + 1] = d
      streams[#streams + 1] = dir
      for k = 4, #parts - 1, 2 do
        if not have[parts[k]] then ffields[#ffields + 1] = d .. '\0' .. parts[k] end
      end
    end
  end
end
local frames = hmget(K_BLOB, ffields)
for k = 1, #ffields do
  if frames[k] then
    streams[#streams + 1] = ffields[k]
    streams[#streams + 1] = frames[k]
  end
end
for k = 1, #wfields do
  if wvals[k] and wowner[k] <= last then
    writes[#writes + 1] = wfields[k]
    writes[#writes + 1] = wvals[k]
  end
end
local done = #members == 0 or (last == #members and (#members < max_cp or members[last] == upto))
return {'ok', done and '' or members[last], upto, cps, blobs, streams, writes}

end
local function s_gc()
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

end
local function s_get_tuple()
--[[ get_tuple: one checkpoint (by id, or the latest of its namespace) with blobs and writes.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh: "1" = extend the thread's expiry;
            the driver then runs the writable variant of this script, without no-writes)
ARGV[5] checkpoint_ns   ARGV[6] checkpoint id ("" = latest)
ARGV[7] n <= 8 (absent = 0), then n pairs stream id, raw length: the streams of the thread the
        client holds (read_held() in _lib_values.lua)
Returns: nil, or one flat array (Redis 7.0 replies an array of k items' nesting with k deferred
         lengths, each a reply block of its own: 6 nested arrays cost ~2.5 us a call more):
         checkpoint id, record,
         2n, then n pairs channel, k (the channels that hold a value, k the position of its
           blob among the blobs at the end, from 1),
         m, then m write records (writes_sort_key order),
         s, then per stream the blobs name: stream id, directory, f, then f frames (see
           "Encoded values" in _lib_values.lua; a stream the client holds at a frame's end
           carries only the frames after it: none when it holds it whole),
         then the blobs
Errors: RS_DAMAGED (a key of the thread was lost: see "Lost keys" in _lib.lua; the
        client then sends the writable variant with ARGV[4] = "f", which forgets the thread
        and answers as if it did not exist), RS_SCHEMA, RS_BADARG
]]
local ns, cid = ARGV[5], ARGV[6]
local held = read_held(7)
check_format()
if check_counts() then return nil end
local ns_e = enc(ns)
local cid_e
if cid == '' then
  cid_e = latest_of(ns_e)
  if not cid_e then
    check_cp_keys()  -- none in this namespace; or cp and cp_ns were both lost
    return nil
  end
  cid = dec(cid_e, 1)
else
  cid_e = enc(cid)
end
local raw = redis.call('HGET', K_CP, ns_e .. cid_e)
if not raw then
  if ARGV[6] == '' then damaged('the record of its latest checkpoint is missing') return nil end
  check_cp_keys()
  return nil
end
local reply, streams, blobs = tuple_replies({{ns_e, cid_e, raw}}, false, held)
if not reply then return nil end
reply = reply[1]
local out, values, writes = {cid, reply[1], #reply[2]}, reply[2], reply[3]
for i = 1, #values do out[#out + 1] = values[i] end
out[#out + 1] = #writes
for i = 1, #writes do out[#out + 1] = writes[i] end
out[#out + 1] = #streams
for _, st in ipairs(streams) do
  out[#out + 1] = st[1]
  out[#out + 1] = st[2]
  out[#out + 1] = #st - 2
  for j = 3, #st do out[#out + 1] = st[j] end
end
for i = 1, #blobs do out[#out + 1] = blobs[i] end
-- only the keys the commands above may not have read (meta, cp, cp_ns, cp_id, wr and wr_ord
-- they did: the format and count checks; blob, chain and the slot index's threads key only in
-- some threads, runs and the slot index's runs key never)
touch_read(true)
return out

end
local function s_import()
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

end
local function s_ix_query()
--[[ ix_query: read one slot's cross-thread index (list(None), delete_for_runs fan-out).
KEYS[1] slot index: threads (ZSET thread id -> expiry ms, inf = none)
KEYS[2] slot index: runs (lex ZSET "r"e(run)e(thread), "t"e(thread)e(run))
ARGV[1] "threads" | "runs"   ARGV[2..] run ids (for "runs")
Returns: the ids of live (not expired) threads: all of them, or those holding one of the runs
Errors: RS_BADARG
]]
if #KEYS ~= 2 then error({err = 'RS_BADARG expected 2 keys'}) end
local mode = ARGV[1]
local t = redis.call('TIME')
local now = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
if mode == 'threads' then
  return redis.call('ZRANGE', KEYS[1], '(' .. now, '+inf', 'BYSCORE')
elseif mode ~= 'runs' then
  error({err = 'RS_BADARG bad mode'})
end
local out, seen = {}, {}
for i = 2, #ARGV do
  local p = 'r' .. (string.gsub(ARGV[i], '%z', '\0\255')) .. '\0'
  for _, m in ipairs(redis.call('ZRANGE', KEYS[2], '[' .. p, '(' .. p .. '\255', 'BYLEX')) do
    local thr = (string.gsub(string.sub(m, #p + 1, -2), '%z\255', '\0'))
    if not seen[thr] then
      seen[thr] = true
      local score = redis.call('ZSCORE', KEYS[1], thr)
      if score and (score == 'inf' or tonumber(score) > tonumber(now)) then out[#out + 1] = thr end
    end
  end
end
return out

end
local function s_list()
--[[ list: one page of a thread's checkpoints, newest first, filtered by metadata in Redis.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] index: "ns" (members e(ns)e(cid), one namespace) | "id" (members e(cid)e(ns), all)
ARGV[6] upper lex bound   ARGV[7] lower lex bound   (ZRANGE BYLEX REV syntax, built by Python)
ARGV[8] max items to return   ARGV[9] max members to examine in this call
ARGV[10] n filters, then n pairs: metadata key, canonical JSON ("null" also matches a missing key);
         a long JSON comes as "\1" .. sha256 (33 bytes) .. the JSON: records keep such a value
         as its 33-byte digest, records of earlier releases as the JSON (redis_saver/core/codec.py)
Returns: {cursor, streams, blobs, item, item, ...} ({cursor} alone when no item); cursor = last
         member examined when the page stopped early ("" when the range is exhausted); streams:
         the streams the items' blobs name, as get_tuple's reply; blobs: each blob the items
         hold, once; item = {e(ns), e(cid), record, {channel, k, ...}, writes} (as get_tuple's
         reply: k = the position of the channel's blob in blobs)
Errors: RS_DAMAGED (a key of the thread was lost: see "Lost keys" in _lib.lua; the
        client then sends the writable variant with ARGV[4] = "f", which forgets the thread
        and answers as if it did not exist), RS_SCHEMA, RS_BADARG
]]
local index, upper, lower = ARGV[5], ARGV[6], ARGV[7]
local limit, budget, nf = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
if (index ~= 'ns' and index ~= 'id') or not limit or limit < 1 or not budget or budget < 1
    or not nf or #ARGV ~= 10 + 2 * nf then
  fail('RS_BADARG', 'bad list arguments')
end
check_format()
local key = K_CPNS
if index == 'id' then key = K_CPID end
if check_counts() then return {''} end  -- the thread is expiring: nothing to list

-- the filters, split once: key, wanted value, and for a long value its full JSON
local fkey, fwant, fjson = {}, {}, {}
for i = 1, nf do
  local want = ARGV[10 + 2 * i]
  fkey[i] = ARGV[9 + 2 * i]
  if string.byte(want, 1) == 1 and #want > 33 then
    fwant[i], fjson[i] = string.sub(want, 1, 33), string.sub(want, 34)
  else
    fwant[i] = want
  end
end

local function matches(raw)
  if nf == 0 then return true end
  local f = cp_field(raw, CP_FILTER)
  local md = {}
  for i = 1, #f - 1, 2 do md[f[i]] = f[i + 1] end
  for i = 1, nf do
    local want, got = fwant[i], md[fkey[i]]
    if want == 'null' then
      if got ~= nil and got ~= 'null' then return false end
    elseif got ~= want and (fjson[i] == nil or got ~= fjson[i]) then
      return false
    end
  end
  return true
end

local function examined_all(members, cur)
  return #members == 0 or cur == '(' .. members[#members]
end

-- the records of a chunk of members come in one HMGET; the checkpoints to return are then
-- replied to together (tuple_replies: their blobs in one HMGET, their writes in one more)
local page = {}
local examined, chunk = 0, 8
local cursor = upper
while #page < limit and examined < budget do
  -- without a filter every member examined is returned: ask for exactly what is missing; with
  -- one, chunks grow 8, 16, 32, 64 (records past the one that fills the page are read for nothing)
  local want = chunk
  if nf == 0 then want = limit - #page else chunk = math.min(chunk * 2, 64) end
  want = math.min(want, budget - examined)
  local members = redis.call('ZRANGE', key, cursor, lower, 'BYLEX', 'REV', 'LIMIT', 0, want)
  local fields, parts = {}, {}
  for j, m in ipairs(members) do
    -- the member is e(ns)e(cid) ("ns") or e(cid)e(ns) ("id"): its two encoded parts
    local p = skip(m, 1)
    local ns_e, cid_e = string.sub(m, 1, p - 1), string.sub(m, p)
    if index == 'id' then ns_e, cid_e = cid_e, ns_e end
    parts[j] = {ns_e, cid_e}
    fields[j] = ns_e .. cid_e
  end
  local raws = hmget(K_CP, fields)
  for j, m in ipairs(members) do
    examined = examined + 1
    cursor = '(' .. m
    local raw = raws[j]
    if not raw and damaged('the record of an indexed checkpoint is missing') then return {''} end
    if raw and matches(raw) then
      page[#page + 1] = {parts[j][1], parts[j][2], raw}
      if #page >= limit then break end
    end
  end
  -- a short chunk means the range ended, unless the page filled before its last member
  if #members < want and examined_all(members, cursor) then cursor = nil break end
end
local out = {cursor or ''}
if #page == 0 and check_cp_keys() then return out end  -- nothing: or lost checkpoint keys
if #page > 0 then
  -- without a filter, the page is every checkpoint of the range it covers
  local replies, streams, blobs = tuple_replies(page, nf == 0)
  if not replies then return {''} end
  out[2], out[3] = streams, blobs
  for i, r in ipairs(replies) do
    out[i + 3] = {page[i][1], page[i][2], r[1], r[2], r[3]}
  end
end
if META_V then touch_read() end
return out

end
local function s_pin()
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

end
local function s_prune()
--[[ prune: one thread.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
"delete": remove the thread (UNLINK: the memory is freed off the main thread).
"keep_latest": per namespace keep the latest checkpoint with its writes, plus every ancestor
(with its writes) back to the nearest one that stores a value for each DeltaChannel the
latest still needs (channels named in its metadata counters_since_delta_snapshot whose value
it does not store itself); delete the rest; drop blobs no kept checkpoint references; a kept
checkpoint whose parent was deleted loses its parent. A thread pruned in one call is also swept
of what an earlier call that stopped halfway left: value records no kept checkpoint names (at
most 16 x budget blob fields) and run-index entries of runs it no longer holds.
A thread of at most `budget` checkpoints (and 8 x budget writes) is pruned atomically in one
call ("all"). A larger one answers "paged" and the client goes on step by step, each call
bounded by `budget` (redis_saver/core/plans.py, _plan_prune): "ns" lists namespaces, "walk" finds
the checkpoints to keep, "drop" deletes the others a page at a time, "detach" clears the
oldest kept checkpoint's parent, "orphans" drops writes whose checkpoint does not exist; the
blobs go last (gc.lua). Readers see every intermediate state consistent: a checkpoint goes
with its writes, a blob only once no checkpoint left references it.
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] "keep_latest" | "delete"   ARGV[6] step: "all" | "ns" | "walk" | "drop" | "detach" |
        "orphans"   ARGV[7] budget (the most checkpoints or writes one call examines)
then the step's arguments (positions in ARGV):
  ns:      8 e(ns) of the last namespace returned ("" = from the start)
  walk:    8 e(ns)  9 e(cid) to walk from ("" = the latest)  10.. channels still needing a
           value (a continuation)
  drop:    8 e(ns)  9 e(latest)  10 lex cursor ("" = start)  11 "1" when more kept ids
           follow the ones sent  12.. kept e(cid)s, ascending, from the cursor on
  detach:  8 e(ns)  9 e(cid)
  orphans: 8 e(ns)  9 e(latest)  10 lex cursor ("" = start)
Returns: all: {deleted} or {"paged" [PAGED]}; ns: {e(ns), ...} (fewer than 64 = the last ones);
walk: {e(latest), {kept e(cid), ...}, next e(cid) ("" = done), {channels still needed},
e(parent of the oldest kept)}; drop: {deleted, cursor ("" = done), {blob fields of the
deleted checkpoints}}; detach: 1 [DONE]; orphans: cursor ("" = done)
Errors: RS_CYCLE (the parent chain returns to a checkpoint it already walked), RS_BADARG, RS_SCHEMA
]]
local strategy, step, budget = ARGV[5], ARGV[6], tonumber(ARGV[7])
if strategy ~= 'keep_latest' and strategy ~= 'delete' then fail('RS_BADARG', 'unknown strategy') end
if not budget or budget < 1 then fail('RS_BADARG', 'bad budget') end
check_format()
if not META_V then
  -- no such thread (any more: deleted while a paged prune went on): nothing to do
  local done = ({all = {0}, ns = {}, walk = {'', {}, '', {}, ''}, drop = {0, '', {}}, detach = 1, orphans = ''})[step]
  if done == nil then fail('RS_BADARG', 'unknown prune step') end
  return done
end
if strategy == 'delete' then
  local n = redis.call('HLEN', K_CP)
  drop_thread()
  fix_index_expiry()
  return {n}
end

local NO_PARENT = '\0'  -- enc('')

-- the checkpoints a namespace must keep for its latest: the latest and its ancestors back to
-- the seeds of the delta channels it needs, walking from from_e (the latest when `first`, whose
-- own values needs() already looked at), at most `max` of them. Returns the kept ids (newest
-- first), the id to go on from ("" = done), the channels still needed, and e(parent) of the
-- oldest kept.
local function walk(ns_e, from_e, need, left, first, max)
  local kept, seen = {}, {}
  local cur = from_e
  while cur ~= '' and #kept < max do
    if seen[cur] then fail('RS_CYCLE', 'the parent chain returns to checkpoint ' .. dec(cur, 1)) end
    local raw = redis.call('HGET', K_CP, ns_e .. cur)
    if not raw then return kept, '', {}, cur end
    seen[cur] = true
    kept[#kept + 1] = cur
    local rec = cp_rec(raw, CP_VERSIONS)
    if #kept > 1 or not first then
      local by_ch = blob_field_map(ns_e, rec[CP_VERSIONS])
      for ch, _ in pairs(need) do
        local f = by_ch[ch]
        if f then
          local b = redis.call('HGET', K_BLOB, f)
          if b and b ~= EMPTY_BLOB then need[ch] = nil left = left - 1 end
        end
      end
    end
    if left == 0 or rec[CP_PARENT] == '' then return kept, '', {}, enc(rec[CP_PARENT]) end
    cur = enc(rec[CP_PARENT])
  end
  local rest = {}
  for ch, _ in pairs(need) do rest[#rest + 1] = ch end
  return kept, cur, rest, cur
end

-- the channels the latest checkpoint needs from its ancestors
local function needs(ns_e, latest_e)
  local rec = cp_rec(redis.call('HGET', K_CP, ns_e .. latest_e), CP_DELTA)
  local by_ch = blob_field_map(ns_e, rec[CP_VERSIONS])
  local need, left = {}, 0
  for _, ch in ipairs(rec[CP_DELTA]) do
    local f = by_ch[ch]
    if f then
      local b = redis.call('HGET', K_BLOB, f)
      if not b or b == EMPTY_BLOB then need[ch] = true left = left + 1 end
    end
  end
  return need, left
end

-- clear the parent of a kept checkpoint whose parent is deleted
local function detach(ns_e, cid_e)
  local raw = redis.call('HGET', K_CP, ns_e .. cid_e)
  if not raw then return end
  -- the record keeps its format
  local rec, versions
  if cp_is_mp(raw) then
    rec = cp_unpack(raw)
    versions = rec[CP_VERSIONS]
  else
    rec = unpack_rec(raw)
    versions = unpack_rec(rec[CP_VERSIONS])
  end
  if rec[CP_PARENT] == '' then return end
  bump_guard()
  rec[CP_PARENT] = ''
  if cp_is_mp(raw) then
    redis.call('HSET', K_CP, ns_e .. cid_e, cmsgpack.pack(rec))
  else
    redis.call('HSET', K_CP, ns_e .. cid_e, pack_rec(rec))
  end
  if META_NC ~= '1' then
    redis.call('HSET', K_CHAIN, ns_e .. cid_e, chain_entry({[CP_PARENT] = '', [CP_VERSIONS] = versions}))
  end
end

-- writes stored against ids older than the latest whose checkpoint does not exist (writes
-- of newer ids may precede their checkpoint's put: they stay); from a lex cursor, at most
-- `max` members; returns the cursor to go on from ("" = done)
local function drop_orphans(ns_e, latest_e, cursor, max)
  if GONE[K_WORD] then return '' end
  local from = lo(ns_e)
  if cursor ~= '' then from = '(' .. cursor end
  local members = redis.call('ZRANGE', K_WORD, from, '(' .. ns_e .. latest_e, 'BYLEX', 'LIMIT', 0, max)
  local seen = {}
  for _, m in ipairs(members) do
    local c = string.sub(m, #ns_e + 1, skip(m, #ns_e + 1) - 1)
    if not seen[c] then
      seen[c] = true
      if redis.call('HEXISTS', K_CP, ns_e .. c) == 0 then drop_writes(ns_e, c) end
    end
  end
  if #members < max then return '' end
  return members[#members]
end

-- What an earlier call that stopped halfway may have left in a thread pruned whole (a prune
-- of an earlier version, stopped by a slot that moved: see "Slots that move" in
-- _lib_thread.lua): value records no kept checkpoint names, and run-index entries of runs the
-- thread no longer holds. `kept`: e(ns) -> the kept e(cid)s. Bounded: at most 16 x budget blob
-- fields (a larger thread is left as it is) and `budget` run entries.
local function sweep(kept)
  if not GONE[K_BLOB] and redis.call('HLEN', K_BLOB) <= 16 * budget then
    local refs = {}
    for ns_e, cids in pairs(kept) do
      local members, out = {}, {}
      for i, c in ipairs(cids) do members[i] = ns_e .. c end
      refs_of(ns_e, members, out)
      for _, f in ipairs(out) do refs[f] = true end
    end
    -- HSCAN to its end, not HKEYS: the ACL rule of docs/deployment.md lists the commands the
    -- scripts use; a field HSCAN returns twice is taken once (bounded: HLEN checked above)
    local gone, seen, cursor = {}, {}, '0'
    repeat
      local page = redis.call('HSCAN', K_BLOB, cursor, 'COUNT', 1000)
      cursor = page[1]
      for i = 1, #page[2], 2 do
        local f = page[2][i]
        if not seen[f] and f ~= BLOB_MARK and not refs[f] and not is_stream_part(f) then
          seen[f] = true
          gone[#gone + 1] = f
        end
      end
    until cursor == '0'
    if #gone > 0 then drop_blobs(gone) end
  end
  if not GONE[K_IXR] then
    local p = 't' .. THREAD_E
    for _, m in ipairs(redis.call('ZRANGE', K_IXR, lo(p), hi(p), 'BYLEX', 'LIMIT', 0, budget)) do
      unlink_run_if_unused(string.sub(m, #p + 1))
    end
  end
end

if step == 'all' then
  if redis.call('HLEN', K_CP) > budget or redis.call('ZCARD', K_WORD) > 8 * budget then
    return {'paged'}
  end
  -- group members (sorted by e(ns) then e(cid)) into namespaces
  local groups, order = {}, {}
  for _, m in ipairs(redis.call('ZRANGE', K_CPNS, '-', '+', 'BYLEX')) do
    local p = skip(m, 1)
    local ns_e = string.sub(m, 1, p - 1)
    if not groups[ns_e] then groups[ns_e] = {} order[#order + 1] = ns_e end
    local g = groups[ns_e]
    g[#g + 1] = string.sub(m, p)
  end
  -- every namespace walked first: a walk can fail (RS_CYCLE), and nothing is written before
  local deleted, kept, oldest = 0, {}, {}
  for _, ns_e in ipairs(order) do
    local cids = groups[ns_e]
    local need, left = needs(ns_e, cids[#cids])
    local k, _, _, o = walk(ns_e, cids[#cids], need, left, true, #cids + 1)
    kept[ns_e], oldest[ns_e] = k, o
  end
  for _, ns_e in ipairs(order) do
    local cids = groups[ns_e]
    local latest = cids[#cids]
    local kept_list, oldest_parent = kept[ns_e], oldest[ns_e]
    local keep = {}
    for _, c in ipairs(kept_list) do keep[c] = true end
    for _, c in ipairs(cids) do
      if not keep[c] then
        drop_cp(ns_e, c, false)
        deleted = deleted + 1
      end
    end
    drop_orphans(ns_e, latest, '', 8 * budget + 1)
    if #kept_list > 0 and oldest_parent ~= NO_PARENT and not keep[oldest_parent] then
      detach(ns_e, kept_list[#kept_list])
    end
  end
  gc_blobs()
  sweep(kept)
  touch()
  return {deleted}
end

local ns_e = ARGV[8]
if step == 'ns' then
  -- the next namespaces after ARGV[8], one O(log n) range read each
  local out, cur = {}, ns_e
  while #out < 64 do
    local from = '-'
    if cur ~= '' then from = hi(cur) end
    local m = redis.call('ZRANGE', K_CPNS, from, '+', 'BYLEX', 'LIMIT', 0, 1)[1]
    if not m then break end
    cur = string.sub(m, 1, skip(m, 1) - 1)
    out[#out + 1] = cur
  end
  return out
elseif step == 'walk' then
  local from_e, need, left = ARGV[9], {}, 0
  local latest = latest_of(ns_e)
  if not latest then return {'', {}, '', {}, ''} end
  local first = from_e == ''
  if first then
    from_e = latest
    need, left = needs(ns_e, latest)
  else
    for i = 10, #ARGV do need[ARGV[i]] = true left = left + 1 end
  end
  local kept, nxt, rest, oldest_parent = walk(ns_e, from_e, need, left, first, budget)
  return {latest, kept, nxt, rest, oldest_parent}
elseif step == 'drop' then
  local latest_e, cursor, more = ARGV[9], ARGV[10], ARGV[11]
  local keep, last_kept = {}, nil
  for i = 12, #ARGV do keep[ARGV[i]] = true last_kept = ARGV[i] end
  -- members of the namespace after the cursor, older than the latest, and (when more kept
  -- ids follow) not past the last kept id sent: the page's kept ids are all among those sent
  local upper = '(' .. ns_e .. latest_e
  if more == '1' and last_kept then upper = '[' .. ns_e .. last_kept end
  local from = lo(ns_e)
  if cursor ~= '' then from = '(' .. cursor end
  local members = redis.call('ZRANGE', K_CPNS, from, upper, 'BYLEX', 'LIMIT', 0, budget)
  local deleted = 0
  for _, m in ipairs(members) do
    local c = string.sub(m, #ns_e + 1)
    if not keep[c] then
      drop_cp(ns_e, c, false)
      deleted = deleted + 1
    end
  end
  local fields = {}
  for f, _ in pairs(GC[ns_e] or {}) do fields[#fields + 1] = f end
  touch()
  local nxt = ''
  if #members == budget or (more == '1' and #members > 0) then nxt = members[#members] end
  if more == '1' and #members == 0 then nxt = ns_e .. last_kept end
  return {deleted, nxt, fields}
elseif step == 'detach' then
  detach(ns_e, ARGV[9])
  touch()
  return 1
elseif step == 'orphans' then
  local cursor = drop_orphans(ns_e, ARGV[9], ARGV[10], budget)
  touch()
  return cursor
end
fail('RS_BADARG', 'unknown prune step')

end
local function s_put()
--[[ put: store one checkpoint, its new channel blobs, and refresh the thread.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5]  checkpoint_ns          ARGV[6]  checkpoint id         ARGV[7]  parent id ("" = none)
ARGV[8]  checkpoint record      ARGV[9]  history mode: "full" | "latest"
ARGV[10] fence: "1" = fail with RS_CONFLICT unless the parent is the namespace's latest
ARGV[11] chain entry: e(parent id), then "\1"e(channel)"\2"e(version) per channel of the
         record's versions (K_CHAIN, see _lib.lua chain_entry()): what redis_saver sends with
         compression off, and a new thread then keeps chain entries; or "" (a new thread keeps
         none; one that keeps them, e.g. an earlier format's, gets one built from the record)
ARGV[12] n = number of blobs, then n pairs: blob field suffix e(channel)..version, blob record
ARGV[13 + 2n] m = number of stream appends, then m groups of 5 (see "Encoded values" in
         _lib.lua): e(channel) "\0" sid, mode ("n" = a new stream | "a" = append one frame |
         "m" = replace every frame with one), the stream's raw length the client based it on
         ("a", "m": the call changes nothing and returns 3 unless the stored length is that),
         the raw length after it, the zstd frame. Only the appends a new stream record of this
         call names are applied (a retried put appends nothing twice).
Returns: 1 [STORED]; 2 [PRUNE_IN_PAGES] when history mode "latest" found more than 256 checkpoints (or 2,048 writes)
in the thread and left them: the client then prunes the thread in bounded pages; 3 [STREAMS_MOVED] (nothing
written) when a stream a new record names is gone or not at the length the client based its
append on (another writer appended, or it was collected): the client resends with new streams;
4 [THREAD_GONE] (nothing stored) when the put continues from a parent (ARGV[7]) in a thread that holds no
checkpoint: the thread was evicted, expired or deleted while a run used it (or lost a key, and
this call forgot it: see "Lost keys" in _lib.lua); the client raises ThreadEvictedError
Errors: RS_BADARG (nothing written), RS_SCHEMA, RS_CONFLICT
]]
local ns, cid, parent, raw, mode, fence = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local entry, nblobs = ARGV[11], tonumber(ARGV[12])
if cid == nil or cid == '' then fail('RS_BADARG', 'empty checkpoint id') end
local sbase = 13 + 2 * (nblobs or 0)
local nstreams = tonumber(ARGV[sbase])
if nblobs == nil or nstreams == nil or #ARGV ~= sbase + 5 * nstreams then fail('RS_BADARG', 'bad blob count') end
if mode ~= 'full' and mode ~= 'latest' then fail('RS_BADARG', 'bad history mode') end
local rec = put_record(raw)  -- parent and run id (an earlier format's record: every part)
if rec[CP_PARENT] == cid then fail('RS_BADARG', 'a checkpoint cannot be its own parent') end
-- a chain entry given starts with the record's parent and ends a component
if entry ~= '' then
  local parent_e = enc(rec[CP_PARENT])
  if string.sub(entry, 1, #parent_e) ~= parent_e or string.byte(entry, -1) ~= 0 then
    fail('RS_BADARG', 'chain entry does not match the record')
  end
end
local ns_e, cid_e = enc(ns), enc(cid)
local blob_pairs = {}
for i = 1, nblobs do
  local b = ARGV[12 + 2 * i]
  if not is_blob_record(b) then fail('RS_BADARG', 'blob record must have 2 parts') end
  blob_pairs[2 * i - 1] = ns_e .. ARGV[11 + 2 * i]
  blob_pairs[2 * i] = b
end
local stream_args = {}
for k = sbase + 1, #ARGV do stream_args[#stream_args + 1] = ARGV[k] end
check_stream_args(stream_args)
local reads = blob_reads(blob_pairs)  -- (checks stream records' size)
check_format_put()

-- Lost keys (see _lib.lua): a thread that lost a key is forgotten whole before anything is
-- planned against it. O(1) and cheap: its blob hash gone (the unchanged channels of this
-- checkpoint would name values no longer stored; the blob mark is read with the fields the
-- blob plan reads, one HMGET, or alone when it reads none), its meta gone, or a loss an earlier version recorded; the
-- reads' counts catch the other losses (the next read then forgets the thread).
-- Then a put that continues from a parent in a thread that holds no checkpoint is refused (4):
-- its unchanged channels and its delta channels' history would be gone.
local got, lost = nil, META_DMG
if lost then
  lost = true
elseif META_B == '1' and #reads[5] == 0 then
  lost = redis.call('HEXISTS', K_BLOB, BLOB_MARK) == 0  -- (no field for the plan to read)
elseif META_B == '1' then
  local q = {BLOB_MARK}
  for _, f in ipairs(reads[5]) do q[#q + 1] = f end
  got = hmget(K_BLOB, q)
  lost = not got[1]
  table.remove(got, 1)
elseif not META_V then
  lost = redis.call('EXISTS', K_CP, K_CPNS, K_CPID, K_BLOB, K_WR, K_WORD, K_RUNS, K_CHAIN) > 0
end
if lost then
  -- the thread's slot is moving: this node may not write the thread afresh (see "Slots that
  -- move" in _lib_thread.lua): refused before any write, as Redis refuses such a call
  refuse_if_slot_moving()
  record_loss()
  got = {}  -- the thread's keys are gone: nothing is stored
end
if parent ~= '' and redis.call('HEXISTS', K_CP, ns_e .. enc(parent)) == 0 and redis.call('HLEN', K_CP) == 0 then
  return 4
end

-- a put whose blob records name no stream (plain values, the common case but for a growing
-- channel) writes them as they come: the plan would be that, and its tables are not built
local blobs = false
if #reads[2] > 0 then
  blobs = plan_blobs(reads, got, stream_args, ns_e)
  if not blobs then return 3 end
end

-- Fencing: a namespace's head is the checkpoint its last fenced put stored (meta field
-- "h"..e(ns), set with meta "fh" = "1"), while that checkpoint is still stored; otherwise (none
-- yet, or deleted by prune / delete_for_runs / latest-only mode) its greatest id. A fenced put
-- of a new checkpoint must name the head as its parent ("" on an empty namespace) and becomes
-- the head, so a second child of the same parent conflicts whatever the order of the ids
-- (clock skew between hosts); a retry of a stored checkpoint is not checked and moves nothing.
-- An unfenced put (or copy_thread's import) clears the namespace's head: the greatest id is
-- the head again, as reads see it. Without fencing nothing is read or written for it until a
-- fenced put touched the thread (then one HDEL).
-- head_of(): the namespace's head, its id ("" when the namespace is empty)
local function head_of()
  local h = redis.call('HGET', K_META, 'h' .. ns_e)
  if h and redis.call('HEXISTS', K_CP, ns_e .. enc(h)) == 1 then return h end
  local latest = latest_of(ns_e)
  if latest then return dec(latest, 1) end
  return ''
end

local new_head = false
if fence == '1' and redis.call('HEXISTS', K_CP, ns_e .. cid_e) == 0 then
  local latest = head_of()
  if latest ~= parent then
    fail('RS_CONFLICT', 'thread moved on: latest checkpoint is ' .. latest .. ', put expected parent ' .. parent)
  end
  new_head = true
end

-- a thread that keeps chain entries (not one started now: init_meta()) gets one built from the
-- record's versions when none was sent (store_cp()): decoded here, before the first write
if entry == '' and META_V and META_NC ~= '1' and not rec[CP_VERSIONS] then
  rec[CP_VERSIONS] = cp_field(raw, CP_VERSIONS)
end

-- validation done: writes start here
init_meta(entry ~= '')
mark_cps()
if blobs then
  apply_blobs(blobs)
elseif #reads[1] > 0 then
  mark_blobs()
  hset_all(K_BLOB, reads[1])
end
local indexed = store_cp(ns_e, cid_e, raw, rec, entry ~= '' and entry or nil)
if new_head then
  redis.call('HSET', K_META, 'h' .. ns_e, cid, 'fh', '1')
elseif fence ~= '1' and META_FH == '1' then
  redis.call('HDEL', K_META, 'h' .. ns_e)
end

-- latest-only cleanup, bounded: a thread of more than LATEST_BUDGET checkpoints (or 8 x that
-- writes), e.g. one written with history="full" before, is not cleaned here: the reply asks
-- the client to prune it in bounded pages (prune.lua), and later puts clean what is left
local LATEST_BUDGET = 256
local cleaned = 1
if mode == 'latest' and (redis.call('ZCARD', K_CPNS) > LATEST_BUDGET
    or redis.call('ZCARD', K_WORD) > 8 * LATEST_BUDGET) then
  cleaned = 2
elseif mode == 'latest' then
  -- keep only the namespace's latest checkpoint (the greatest id: puts may arrive out of
  -- order; with fencing its head), the writes of it and of its parent, and writes stored
  -- against newer ids whose checkpoint has not arrived yet
  local latest_e
  if fence == '1' then
    latest_e = enc(head_of())
  else
    latest_e = latest_of(ns_e)
  end
  local parent_e = enc(cp_field(redis.call('HGET', K_CP, ns_e .. latest_e), CP_PARENT))
  cid_e = latest_e
  for _, m in ipairs(redis.call('ZRANGE', K_CPNS, lo(ns_e), hi(ns_e), 'BYLEX')) do
    local ocid = string.sub(m, #ns_e + 1)
    if ocid ~= latest_e then drop_cp(ns_e, ocid, ocid == parent_e) end
  end
  local seen = {}
  for _, m in ipairs(GONE[K_WORD] and {} or redis.call('ZRANGE', K_WORD, lo(ns_e), hi(ns_e), 'BYLEX')) do
    local ocid = string.sub(m, #ns_e + 1, skip(m, #ns_e + 1) - 1)
    if ocid < latest_e and ocid ~= parent_e and not seen[ocid] then
      seen[ocid] = true
      drop_writes(ns_e, ocid)
    end
  end
  -- subgraph namespaces that ran under an older checkpoint of this namespace (their
  -- metadata "parents" names it) can never be resumed again: drop them whole
  local stale = {}
  for _, m in ipairs(redis.call('ZRANGE', K_CPNS, '-', '+', 'BYLEX')) do
    local p = skip(m, 1)
    local ons_e = string.sub(m, 1, p - 1)
    if ons_e ~= ns_e and not stale[ons_e] then
      local parents = cp_field(redis.call('HGET', K_CP, m), CP_PARENTS)
      for i = 1, #parents - 1, 2 do
        if parents[i] == ns then
          -- older than the latest and not its parent (a newer parent may be on its way)
          local pc = enc(parents[i + 1])
          if pc < cid_e and pc ~= parent_e then stale[ons_e] = true end
        end
      end
    end
  end
  for ons_e, _ in pairs(stale) do
    if META_FH == '1' then redis.call('HDEL', K_META, 'h' .. ons_e) end
    for _, m in ipairs(redis.call('ZRANGE', K_CPNS, lo(ons_e), hi(ons_e), 'BYLEX')) do
      drop_cp(ons_e, string.sub(m, #ons_e + 1), false)
    end
    for _, m in ipairs(GONE[K_WORD] and {} or redis.call('ZRANGE', K_WORD, lo(ons_e), hi(ons_e), 'BYLEX')) do
      drop_writes(ons_e, string.sub(m, #ons_e + 1, skip(m, #ons_e + 1) - 1))
    end
  end
  gc_blobs()
end
-- the keys the call did not access otherwise (see touch()): meta (check_format_put()) and cp
-- (store_cp()) always; blob when meta.b is set (the lost-key check read it, or blobs were
-- written); cp_ns, cp_id when the record was stored (not an identical retry), and then runs
-- and the slot index of runs when it names a run (link_run()), chain when the thread keeps
-- chain entries; latest-only mode reads and deletes more, but only leaves out what this list
-- leaves out
local untouched = {K_WR, K_WORD}
if META_B ~= '1' then untouched[#untouched + 1] = K_BLOB end
if not indexed then
  untouched[#untouched + 1] = K_CPNS
  untouched[#untouched + 1] = K_CPID
end
if not indexed or rec[CP_RUN_ID] == '' then
  untouched[#untouched + 1] = K_RUNS
  untouched[#untouched + 1] = K_IXR
end
if not indexed or META_NC == '1' then untouched[#untouched + 1] = K_CHAIN end
touch(untouched)
return cleaned

end
local function s_put_writes()
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

end
local function s_put_writes_lean()
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
return stored

end
local function s_rewrite()
--[[ rewrite: re-encode a thread's channel values in place (RedisSaver.rewrite_values, the CLI's
"rewrite"): values an earlier release or compress=False stored as raw serde bytes become what a
put of this version stores (a zstd frame, or a stream record with its stream). Bounded pages.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] step: "scan" | "get" | "set"
scan: ARGV[6] HSCAN cursor   ARGV[7] COUNT hint   ARGV[8] the least record length worth encoding
      Returns {next cursor ("0" = done), {field, record length, ...}}: the raw value records of
      the page (a type without "\31": not encoded yet) of at least that length
get:  ARGV[6..] blob fields (the client keeps a page's total small)
      Returns {record or nil, ...}
set:  ARGV[6] e(ns)   ARGV[7] n, then n triples: blob field, sha1 hex of the record the client
      read, new record; then the stream appends (5 each, as put.lua's)
      A field whose record changed since the client read it is left alone. Returns the number
      of records replaced, or -1 [STREAMS_MOVED] (nothing written) when a stream the new records need is gone or
      moved (see plan_blobs() in _lib.lua): the client starts that channel's stream again.
Errors: RS_BADARG, RS_SCHEMA
]]
local step = ARGV[5]
if step ~= 'scan' and step ~= 'get' and step ~= 'set' then fail('RS_BADARG', 'unknown rewrite step') end
check_format()
if step == 'scan' then
  local count, least = tonumber(ARGV[7]), tonumber(ARGV[8])
  if not count or not least then fail('RS_BADARG', 'bad rewrite arguments') end
  local page = redis.call('HSCAN', K_BLOB, ARGV[6], 'COUNT', count)
  local flat, out = page[2], {}
  for i = 1, #flat - 1, 2 do
    local f, v = flat[i], flat[i + 1]
    if f ~= '' and #v >= least and not is_stream_part(f) then
      local _, e, a = string.find(v, '^(%d+),%d+;')
      if e and not string.find(string.sub(v, e + 1, e + a), '\31', 1, true) then
        out[#out + 1] = f
        out[#out + 1] = #v
      end
    end
  end
  return {page[1], out}
end
if step == 'get' then
  local fields = {}
  for i = 6, #ARGV do fields[#fields + 1] = ARGV[i] end
  return hmget(K_BLOB, fields)
end
local ns_e, n = ARGV[6], tonumber(ARGV[7])
if not ns_e or not n or #ARGV < 7 + 3 * n then fail('RS_BADARG', 'bad rewrite arguments') end
local stream_args = {}
for k = 8 + 3 * n, #ARGV do stream_args[#stream_args + 1] = ARGV[k] end
check_stream_args(stream_args)
local blob_pairs = {}
for i = 0, n - 1 do
  local f, sha, rec = ARGV[8 + 3 * i], ARGV[9 + 3 * i], ARGV[10 + 3 * i]
  if string.sub(f, 1, #ns_e) ~= ns_e then fail('RS_BADARG', 'field outside the namespace') end
  if not is_blob_record(rec) then fail('RS_BADARG', 'blob record must have 2 parts') end
  local cur = redis.call('HGET', K_BLOB, f)
  if cur and redis.sha1hex(cur) == sha then
    blob_pairs[#blob_pairs + 1] = f
    blob_pairs[#blob_pairs + 1] = rec
  end
end
if not META_V then return 0 end  -- the thread is gone
local blobs = plan_blobs(blob_reads(blob_pairs), nil, stream_args, ns_e)
if not blobs then return -1 end
init_meta()
apply_blobs(blobs)  -- the fields join their hash: its expiry, if any, stays as it was
return #blob_pairs / 2

end
local function s_sign()
--[[ sign: replace a thread's stored records by the same records carrying integrity tags (the
CLI's "rewrite --sign": the operator vouches once for what is stored). Only the type part of
each record gains a tag, so no index, count or stream reference changes. Bounded by the call's
arguments (the client sends a page at a time).
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] n, then n quadruples: hash ("c" checkpoints | "b" values | "w" writes), field, sha1 hex of
        the record the client read, the new record
        Every new record is checked before anything is written; a field whose record changed
        since the client read it (or went) is left alone: what was not read is not vouched for.
Returns the number of records replaced.
Errors: RS_BADARG, RS_SCHEMA
]]
local n = tonumber(ARGV[5])
if not n or n < 0 or #ARGV ~= 5 + 4 * n then fail('RS_BADARG', 'bad sign arguments') end
check_format()
local hashes = {c = K_CP, b = K_BLOB, w = K_WR}
for i = 0, n - 1 do
  local h, f, rec = ARGV[6 + 4 * i], ARGV[7 + 4 * i], ARGV[9 + 4 * i]
  if not hashes[h] or f == '' then fail('RS_BADARG', 'bad sign arguments') end
  if h == 'c' then
    validate_record(rec)
  elseif h == 'b' then
    if is_stream_part(f) or not is_blob_record(rec) then fail('RS_BADARG', 'blob record must have 2 parts') end
  elseif #unpack_rec(rec) ~= W_PARTS then
    fail('RS_BADARG', 'write record must have ' .. W_PARTS .. ' parts')
  end
end
if not META_V then return 0 end  -- the thread is gone
local done = 0
for i = 0, n - 1 do
  local key, f = hashes[ARGV[6 + 4 * i]], ARGV[7 + 4 * i]
  local cur = redis.call('HGET', key, f)
  if cur and redis.sha1hex(cur) == ARGV[8 + 4 * i] then
    redis.call('HSET', key, f, ARGV[9 + 4 * i])
    done = done + 1
  end
end
return done

end
local function s_store_delete()
--[[ store_delete: a store batch's deletes on one shard when it has no other write (RedisStore
.delete), in one call; it only frees memory, so it runs when Redis is out of memory.
KEYS[1] the shard's namespace index "<prefix>:store#{<shard tag>}:n": names the shard, whose
        other keys share its tag (see _store_lib.lua)
ARGV[1] store format   ARGV[2] number of deletes, then e(ns) e(key) for each
ARGV[1] "<format>v" (a server with VADD): the namespaces' vector sets lose the items' elements.
Every argument is checked before the first delete; the shard's version token "w" is bumped
and the deleted items logged in its change log "l" (_store_lib.lua st_bump: a few bytes a
deleted item, trimmed to CHANGE_LOG, while the item's keys are freed).
Returns: the number of deletes.
Errors: RS_BADARG, RS_SCHEMA
]]
st_check(ARGV[1])
local base = st_base()
local n = st_int(ARGV[2], 'delete count')
if #ARGV ~= 2 + 2 * n then st_fail('RS_BADARG', 'expected ' .. n .. ' (namespace, key) pairs') end
local touched, changed = {}, {}
local vs = {}
for i = 3, #ARGV, 2 do
  local ens, ekey = ARGV[i], ARGV[i + 1]
  local st = ST_VS and st_vs_state(base, ens, vs, false)
  if st then st_vs_remove(base, ens, ekey, st) end
  redis.call('DEL', base .. 'i:' .. ens .. ekey, base .. 'v:' .. ens .. ekey)
  redis.call('ZREM', base .. 'k:' .. ens, ekey)
  redis.call('ZREM', base .. 'e:' .. ens, ekey)
  touched[ens] = true
  changed[ens .. ekey] = true
end
for ens in pairs(touched) do st_ns_expiry(base, ens) end
if ST_VS then st_vs_save(base, vs) end
st_bump(base, changed)
return n

end
local function s_store_read()
--[[ store_read: the reads of one store batch on one shard (RedisStore.batch), in one call.
KEYS[1] the shard's namespace index "<prefix>:store#{<shard tag>}:n": names the shard, whose
        other keys share its tag (see _store_lib.lua)
ARGV[1] store format   ARGV[2] REFRESH: "1" = the call holds "G" reads (the "+rw" variant)
ARGV[3] number of reads, then each read, its code first:
  "g" e(ns) e(key): an item
  "G" e(ns) e(key): the same, and its expiry restarts (only in the "+rw" variant)
  "s" e(prefix) ns_seq item_seq budget vectors: a page of the items of the namespaces under
      e(prefix), in search order (namespace sequence, then item sequence), after the item
      (ns_seq, item_seq) ("" "": from the start), at most budget of them;
      vectors "1": with each item's vectors (a page stops at budget items, or when it has
      examined 2048 entries)
  "V" e(prefix) dims: the namespaces under e(prefix) for a search from their vector sets
      (_store_lib.lua "vector sets"), if there are at most 16 and each is kept in a complete set
      of dimension dims (or an empty one)
  "C" nns e(ns) x nns nitems (e(ns) e(key)) x nitems: the records and vectors of the
      candidates a client found with VSIM (nil: not found as a scan finds items), if each
      namespace's set is still complete (at most 4096 items; writes since VSIM count as writes
      between a scan's pages do)
  "A" e(prefix) dims M count ef query: a search from vector sets in approximate mode, in one
      call: the namespaces as "V" lists them and, if each one's set was made with M (its count
      "h<M>:..."), each set's VSIM FP32 query COUNT count EF ef (an HNSW search, on the server's
      main thread) and the records and vectors of the items found (count at most 4096)
  "l" min max budget: a page of the live namespaces between the ZRANGE BYLEX bounds min and max
  "P": whether this server keeps vector sets for the store (a VCARD of a key of the shard
      answers: no error; an unknown command or one the caller's ACL refuses: no)
  "c" token e(prefix) budget count scored e(ns) e(key) ...: the records of count items (nil:
      not found as a scan finds items), if the shard's version token (_store_lib.lua st_bump)
      is token (a client's vector cache is current), or if the shard's change log "l" covers
      token's counter in its incarnation and holds at most budget items under e(prefix) (the
      cache is current once it applies them); and each of the first scored items that is
      present, and not among those changed, still has its vectors
Returns one reply per read, in order:
  "g" / "G": the item record, or nil
  "s": {{e(ns), e(key), ns_seq, item_seq, record, {path, vector, ...}}, ...} flattened 6 by 6,
       then the cursor ns_seq, item_seq to go on from ("" "": done), then the shard's version
       token ("": none)
  "c": {1 [CURRENT], record or nil, ...} (one per item, in order) when the cache is current;
       {2 [UPDATED], token, changes, record or nil, ...} when the log brings it up to date: the shard's
       token now, and the items under e(prefix) changed after the client's token, as a "s"
       page's items ({e(ns), e(key), ns_seq, item_seq, record, {path, vector, ...}} flattened 6
       by 6; an item a scan does not find: "" "" nil {}); else {0 [STALE]}
  "l": {{e(ns), ...}, the last namespace examined ("": done)}
  "V": {1 [OK], e(ns), ns_seq, count, ...} (3 per namespace, in no order; count as in "c",
       _store_lib.lua: "h<M>:<EF>:<number>" for a set made with M other than 4); {0 [SCAN]}: a scan
  "C": {1 [OK], record or nil, item_seq, {path, vector, ...}, ...} (3 per item, in order); {0 [SCAN]}: the
       sets changed (search by a scan)
  "A": {1 [OK], nns, e(ns), ns_seq, count (x nns, as "V"), then per item found (once, live and
       listed as a scan finds it): namespace number (1..nns), e(key), record, item_seq,
       {path, vector, ...}}; {2 [EXACT], e(ns), ns_seq, count, ...} (as "V"'s OK) when a set was
       made with another M (the client searches it exactly); {0 [SCAN]}: a scan
  "P": 1 [VECTOR_SETS] or 0 [NO_VECTOR_SETS]
Errors: RS_BADARG, RS_SCHEMA
]]
local MAX_BUDGET = 1024  -- items a search page returns at most
local WORK = 2048  -- entries a search page examines at most
local COLLECT = 1024  -- namespaces under a prefix sorted in the call; more: walk q in order
local VS_NAMESPACES = 16  -- namespaces a search from vector sets covers at most
local VS_ITEMS = 4096  -- candidates a "C" read returns at most
st_check(ARGV[1])
local base = st_base()
local REFRESH = ARGV[2]
local n = st_int(ARGV[3], 'read count')
local reads, pos = {}, 4
for i = 1, n do
  local code = ARGV[pos]
  if code == 'G' and not (REFRESH == '1') then st_fail('RS_BADARG', 'G reads need REFRESH') end
  local width = ((code == 'g' or code == 'G') and 3) or (code == 's' and 6) or (code == 'l' and 4)
    or (code == 'P' and 1) or nil
  if code == 'c' then
    width = 6 + 2 * st_int(ARGV[pos + 4], 'item count')
    st_int(ARGV[pos + 3], 'change budget')
    st_int(ARGV[pos + 5], 'scored count')
  elseif code == 'V' then
    width = 3
    st_int(ARGV[pos + 2], 'dims')
  elseif code == 'A' then
    width = 7
    st_int(ARGV[pos + 2], 'dims')
    st_int(ARGV[pos + 3], 'M')
    local c = st_int(ARGV[pos + 4], 'count')
    if c < 1 or c > VS_ITEMS then st_fail('RS_BADARG', 'bad count') end
    st_int(ARGV[pos + 5], 'ef')
  elseif code == 'C' then
    local nns = st_int(ARGV[pos + 1], 'namespace count')
    if nns > VS_NAMESPACES then st_fail('RS_BADARG', 'too many namespaces') end
    local nitems = st_int(ARGV[pos + 2 + nns] or '', 'item count')
    if nitems > VS_ITEMS then st_fail('RS_BADARG', 'too many items') end
    width = 3 + nns + 2 * nitems
  end
  if width == nil then st_fail('RS_BADARG', 'unknown read ' .. tostring(code)) end
  if pos + width - 1 > #ARGV then st_fail('RS_BADARG', 'read arguments missing') end
  if code == 's' then st_int(ARGV[pos + 4], 'budget') end
  if code == 'l' then st_int(ARGV[pos + 3], 'budget') end
  reads[i] = pos
  pos = pos + width
end
if pos ~= #ARGV + 1 then st_fail('RS_BADARG', 'extra arguments') end
local now_ms = st_now_ms()

local function get(ens, ekey, refresh)
  local rec = redis.call('GET', base .. 'i:' .. ens .. ekey)
  if rec and refresh then
    local ttl = st_ttl(rec)
    if ttl > 0 then st_refresh(base, ens, ekey, ttl, now_ms) end
  end
  return rec
end

-- namespaces under eprefix with a sequence >= from, in sequence order: {{seq, ens, seq text},
-- ...}; whether q holds more after them, the last sequence examined, and how many were examined
local function namespaces(eprefix, from, limit)
  local lo = from == '' and '-inf' or from
  if eprefix ~= '' then
    local hi = eprefix .. '\255'
    -- one call for the common case (a few namespaces): more than COLLECT, walk q instead
    local names = redis.call('ZRANGE', base .. 'n', '[' .. eprefix, '(' .. hi, 'BYLEX', 'LIMIT', 0, COLLECT + 1)
    if #names <= COLLECT then
      if #names == 0 then return {}, false, nil, 0 end
      local seqs = redis.call('ZMSCORE', base .. 'q', unpack(names))
      local out = {}
      local min = from == '' and -math.huge or tonumber(from)
      for i, ens in ipairs(names) do
        local s = tonumber(seqs[i])
        if s and s >= min then out[#out + 1] = {s, ens, seqs[i]} end
      end
      table.sort(out, function(a, b) return a[1] < b[1] end)
      return out, false, nil, 0
    end
  end
  -- in sequence order, a page at a time (the prefix checked here)
  local rows = redis.call('ZRANGE', base .. 'q', lo, '+inf', 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
  local out = {}
  local np = #eprefix
  for i = 1, #rows, 2 do
    local ens = rows[i]
    if np == 0 or (string.sub(ens, 1, np) == eprefix and string.byte(ens, np + 1) ~= 255) then
      out[#out + 1] = {tonumber(rows[i + 1]), ens, rows[i + 1]}
    end
  end
  return out, #rows == 2 * limit, rows[#rows], #rows / 2
end

-- a page of search candidates: {flat items, ns_seq, item_seq} (the cursor: "" "" = done;
-- item_seq "+inf": that namespace is done): at most budget items, and at most WORK entries
-- examined (namespaces looked up, index entries read) whatever their number
local function search(eprefix, c_ns, c_item, budget, vectors)
  budget = math.max(1, math.min(budget, MAX_BUDGET))
  local out, found, spent = {}, 0, 0
  local from, after = c_ns, c_item
  while true do
    local list, more, last_seq, examined = namespaces(eprefix, from, math.max(1, math.min(budget, WORK - spent)))
    spent = spent + examined
    local first = tonumber(from)
    for _, ns in ipairs(list) do
      local ens, seq = ns[2], ns[3]
      local lo = '-inf'
      if ns[1] == first and after ~= '' then lo = '(' .. after end
      if after ~= '+inf' or ns[1] ~= first then
        spent = spent + 1  -- a namespace costs a lookup even when it has nothing left
        local want = math.max(1, math.min(budget - found, WORK - spent))
        local rows = redis.call('ZRANGE', base .. 'k:' .. ens, lo, '+inf', 'BYSCORE', 'LIMIT', 0, want, 'WITHSCORES')
        local last_item = nil
        local recs = {}
        if #rows > 0 then  -- the records in one call (want <= MAX_BUDGET keys, one slot)
          local names = {}
          for i = 1, #rows, 2 do names[#names + 1] = base .. 'i:' .. ens .. rows[i] end
          recs = redis.call('MGET', unpack(names))
        end
        for i = 1, #rows, 2 do
          local ekey = rows[i]
          local rec = recs[(i + 1) / 2]
          if rec then
            out[#out + 1] = ens
            out[#out + 1] = ekey
            out[#out + 1] = seq
            out[#out + 1] = rows[i + 1]
            out[#out + 1] = rec
            out[#out + 1] = vectors and redis.call('HGETALL', base .. 'v:' .. ens .. ekey) or {}
            found = found + 1
          end
          last_item = rows[i + 1]
        end
        spent = spent + #rows / 2
        if #rows == 2 * want then return {out, seq, last_item} end  -- the page ends inside it
        if found >= budget or spent >= WORK then return {out, seq, '+inf'} end
      end
    end
    if not more then return {out, '', ''} end
    from, after = last_seq, '+inf'  -- the next page of q: after the last namespace examined
    if found >= budget or spent >= WORK then return {out, from, after} end
  end
end

local function version()
  return redis.call('GET', base .. 'w') or ''
end

-- the records of the items a client ranked from its cache, if that cache is current
-- an item counts as present as a scan finds it: its record, its entry in its namespace's k:, its
-- namespace in n and q (index keys evicted without a bump hide items from a scan, so from this
-- too); an item whose vectors alone were evicted is unscored for a scan: the cache is not current
-- the position in search order a scan finds the item at (ns_seq, item_seq), or nil; listed
-- caches each namespace's sequence (false: not listed in n and q)
local function place(ens, ekey, listed)
  if listed[ens] == nil then
    local seq = redis.call('ZSCORE', base .. 'q', ens)
    listed[ens] = seq and redis.call('ZSCORE', base .. 'n', ens) and seq or false
  end
  if not listed[ens] then return nil end
  local iseq = redis.call('ZSCORE', base .. 'k:' .. ens, ekey)
  if not iseq then return nil end
  return listed[ens], iseq
end

-- e(ns), e(key) of a change log member e(ns)..e(key): the key is its last label
local function split(m)
  local last, prev, pos = 0, 0, 1
  while true do
    local i = string.find(m, '\0', pos, true)
    if not i then break end
    if string.byte(m, i + 1) == 255 then
      pos = i + 2
    else
      prev, last, pos = last, i, i + 1
    end
  end
  return string.sub(m, 1, prev), string.sub(m, prev + 1)
end

-- the items under eprefix changed since token (the shard's token now is cur), as a "s" page's,
-- and the set of them; nil when the log does not cover token (another incarnation, a floor
-- above its counter, no log) or more than budget of them changed. Work: the log's length.
local function changes(token, cur, eprefix, budget, listed)
  local inc, c = string.match(token, '^(%w+):(%d+)$')
  local cinc, cc = string.match(cur, '^(%w+):(%d+)$')
  if not inc or inc ~= cinc or tonumber(c) > tonumber(cc) then return nil end
  local lk = base .. 'l'
  local floor = redis.call('ZSCORE', lk, '#' .. inc)
  if not floor or tonumber(floor) > tonumber(c) then return nil end
  local np, out, set, n = #eprefix, {}, {}, 0
  for _, m in ipairs(redis.call('ZRANGE', lk, '(' .. c, '+inf', 'BYSCORE')) do
    -- under the prefix (a label boundary there: not an escaped NUL), an item (the floor is not)
    if string.sub(m, 1, np) == eprefix and string.byte(m, np + 1) ~= 255 and string.byte(m, -1) == 0 then
      local ens, ekey = split(m)
      if #ens >= np then  -- the prefix is the namespace's, not spelled by its key
        n = n + 1
        if n > budget then return nil end
        set[m] = true
        local rec = redis.call('GET', base .. 'i:' .. ens .. ekey)
        local ns_seq, item_seq = place(ens, ekey, listed)
        local at = #out
        out[at + 1], out[at + 2] = ens, ekey
        if rec and ns_seq then
          out[at + 3], out[at + 4], out[at + 5] = ns_seq, item_seq, rec
          out[at + 6] = redis.call('HGETALL', base .. 'v:' .. ens .. ekey)
        else
          out[at + 3], out[at + 4], out[at + 5], out[at + 6] = '', '', false, {}
        end
      end
    end
  end
  return out, set
end

local function cached(token, eprefix, budget, p, count, scored)
  if token == '' then return {0} end
  local out, listed, changed = {1}, {}, {}
  local cur = version()
  if cur ~= token then
    local delta, set = changes(token, cur, eprefix, budget, listed)
    if not delta then return {0} end
    out, changed = {2, cur, delta}, set
  end
  for i = 1, count do
    local j = p + 2 * i
    local ens, ekey = ARGV[j], ARGV[j + 1]
    local rec = redis.call('GET', base .. 'i:' .. ens .. ekey)
    if rec and not place(ens, ekey, listed) then rec = nil end
    if rec and i <= scored and not changed[ens .. ekey] and redis.call('EXISTS', base .. 'v:' .. ens .. ekey) == 0 then
      return {0}
    end
    out[#out + 1] = rec or false
  end
  return out
end

-- the namespace's set: complete (it holds every vector of the namespace), of dimension dims
-- (any: nil) or empty
local function vs_complete(ens, dims)
  local c, rb = st_vs_count(redis.call('HGET', base .. 'c', ens))
  if not c or rb then return false end
  local n = redis.call('VCARD', base .. 's:' .. ens)
  if n ~= c then return false end
  return n == 0 or not dims or redis.call('VDIM', base .. 's:' .. ens) == dims
end

local function vs_namespaces(eprefix, dims)
  -- one bounded range read (no ZLEXCOUNT first: the store's ACL rule does not grant it)
  local lo, hi = '-', '+'
  if eprefix ~= '' then lo, hi = '[' .. eprefix, '(' .. eprefix .. '\255' end
  local names = redis.call('ZRANGE', base .. 'n', lo, hi, 'BYLEX', 'LIMIT', 0, VS_NAMESPACES + 1)
  if #names > VS_NAMESPACES then return {0} end
  local out = {1}
  for _, ens in ipairs(names) do
    local seq = redis.call('ZSCORE', base .. 'q', ens)
    if seq then
      if not vs_complete(ens, dims) then return {0} end
      out[#out + 1] = ens
      out[#out + 1] = seq
      out[#out + 1] = redis.call('HGET', base .. 'c', ens)
    end
  end
  return out
end

local function vs_candidates(p)
  local nns = tonumber(ARGV[p + 1])
  for j = 1, nns do
    if not vs_complete(ARGV[p + 1 + j], nil) then return {0} end
  end
  local at = p + 2 + nns
  local out, listed = {1}, {}
  for i = 1, tonumber(ARGV[at]) do
    local ens, ekey = ARGV[at + 2 * i - 1], ARGV[at + 2 * i]
    local rec = redis.call('GET', base .. 'i:' .. ens .. ekey)
    local seq = false
    if rec then
      if listed[ens] == nil then
        listed[ens] = redis.call('ZSCORE', base .. 'q', ens) ~= false and redis.call('ZSCORE', base .. 'n', ens) ~= false
      end
      seq = listed[ens] and redis.call('ZSCORE', base .. 'k:' .. ens, ekey)
    end
    if seq then
      out[#out + 1] = rec
      out[#out + 1] = seq
      out[#out + 1] = redis.call('HGETALL', base .. 'v:' .. ens .. ekey)
    else
      out[#out + 1] = false
      out[#out + 1] = false
      out[#out + 1] = false
    end
  end
  return out
end

-- e(key) of a set element e(key) e(path): up to the first NUL that does not escape one
local function vs_key(elem)
  local at = 1
  while true do
    local i = string.find(elem, '%z', at)
    if not i then return elem end
    if string.byte(elem, i + 1) ~= 255 then return string.sub(elem, 1, i) end
    at = i + 2
  end
end

local function vs_approx(eprefix, dims, m, count, ef, query)
  local listed = vs_namespaces(eprefix, dims)
  if listed[1] ~= 1 then return listed end
  local hp = 'h' .. m .. ':'
  for i = 4, #listed, 3 do
    if string.sub(listed[i], 1, #hp) ~= hp and st_vs_count(listed[i]) ~= 0 then
      listed[1] = 2
      return listed
    end
  end
  local nns = (#listed - 1) / 3
  local out = {1, nns}
  for i = 2, #listed do out[#out + 1] = listed[i] end
  local found = 0
  for j = 1, nns do
    local ens = listed[3 * j - 1]
    local elems = {}
    if st_vs_count(listed[3 * j + 1]) ~= 0 then
      elems = redis.call('VSIM', base .. 's:' .. ens, 'FP32', query, 'COUNT', count, 'EF', math.max(ef, count))
    end
    local seen = {}
    for _, elem in ipairs(elems) do
      local ekey = vs_key(elem)
      if not seen[ekey] and found < VS_ITEMS then
        seen[ekey] = true
        local rec = redis.call('GET', base .. 'i:' .. ens .. ekey)
        local seq = rec and redis.call('ZSCORE', base .. 'k:' .. ens, ekey)
        if seq then
          found = found + 1
          out[#out + 1] = j
          out[#out + 1] = ekey
          out[#out + 1] = rec
          out[#out + 1] = seq
          out[#out + 1] = redis.call('HGETALL', base .. 'v:' .. ens .. ekey)
        end
      end
    end
  end
  return out
end

local function list(min, max, budget)
  budget = math.max(1, math.min(budget, MAX_BUDGET))
  local names = redis.call('ZRANGE', base .. 'n', min, max, 'BYLEX', 'LIMIT', 0, budget)
  local out = {}
  -- no namespace's items all expired by now (the common case): nothing to look up
  if #names > 0 and redis.call('ZCOUNT', base .. 'x', '-inf', string.format('%.0f', now_ms)) > 0 then
    local exp = redis.call('ZMSCORE', base .. 'x', unpack(names))
    for i, ens in ipairs(names) do
      local e = exp[i] and tonumber(exp[i])
      if not e or e > now_ms then out[#out + 1] = ens end  -- no entry: an item never expires
    end
  else
    out = names
  end
  return {out, #names == budget and names[#names] or ''}
end

local replies = {}
for i = 1, n do
  local p = reads[i]
  local code = ARGV[p]
  if code == 'g' or code == 'G' then
    replies[i] = get(ARGV[p + 1], ARGV[p + 2], code == 'G')
  elseif code == 's' then
    local r = search(ARGV[p + 1], ARGV[p + 2], ARGV[p + 3], tonumber(ARGV[p + 4]), ARGV[p + 5] == '1')
    r[4] = version()
    replies[i] = r
  elseif code == 'V' then
    replies[i] = vs_namespaces(ARGV[p + 1], tonumber(ARGV[p + 2]))
  elseif code == 'C' then
    replies[i] = vs_candidates(p)
  elseif code == 'A' then
    replies[i] = vs_approx(ARGV[p + 1], tonumber(ARGV[p + 2]), ARGV[p + 3], tonumber(ARGV[p + 4]),
      tonumber(ARGV[p + 5]), ARGV[p + 6])
  elseif code == 'P' then
    replies[i] = pcall(redis.call, 'VCARD', base .. 's:') and 1 or 0
  elseif code == 'c' then
    replies[i] = cached(ARGV[p + 1], ARGV[p + 2], tonumber(ARGV[p + 3]), p + 4, tonumber(ARGV[p + 4]), tonumber(ARGV[p + 5]))
  else
    replies[i] = list(ARGV[p + 1], ARGV[p + 2], tonumber(ARGV[p + 3]))
  end
end
return replies

end
local function s_store_rebuild()
--[[ store_rebuild: a page of the rebuild of one namespace's vector set (RedisStore
.rebuild_vector_sets), for a namespace that is out of sets (made before them or by a writer
with vector_sets=False, its set or count evicted or deleted, a vector the set could not hold).
KEYS[1] the shard's namespace index "<prefix>:store#{<shard tag>}:n": names the shard, whose
        other keys share its tag (see _store_lib.lua)
ARGV[1] store format, "<format>v" (a server with VADD), or "<format>vh<M>:<EF>": sets are
        made with those HNSW parameters, and a complete set made with others is made again
ARGV[2] e(ns)
ARGV[3] token: the rebuilder's (letters and digits, 1-64)
ARGV[4] "1": start a rebuild if none runs (join one that runs); "0": go on with the rebuild
        of token only
ARGV[5] budget: vectors a call adds at most (1-4096; the page stops after the item reaching it)
While rebuilding, the namespace's count in "c" reads "<elements> <token> <cursor>" (cursor: the
item sequence of k: the last page ended at, "-": none), which no search takes for a complete
set (vs_complete in store_read.lua: not a number); writers keep the set in step meanwhile
(_store_lib.lua st_vs_state / st_vs_save: they add and remove their items' elements and count
them, keeping the marker), so when the last page is in, the count equals VCARD: "c" gets the
plain count. Anything that makes the set incomplete meanwhile (its set or count evicted, a
writer without sets, a vector the set cannot hold) takes the namespace out (st_vs_drop), which
ends the rebuild. A page adds the vectors of the next items of k: in sequence order (VADD, as
st_vs_put; no VSIM); items put meanwhile get later sequences (next pages), or are written by
the writers.
Every argument is checked before the first write.
Returns: {status, token, elements}: status "done" [DONE] (the set is complete: searches use it),
"more" [MORE] (call again with "0" and the token returned: a rebuild started by another rebuilder is
joined), "ended" [ENDED] (the rebuild of token ended, the namespace is out of sets), "none" [NONE] (no items:
a namespace without a k: index gets a new set from its next put).
Errors: RS_BADARG, RS_SCHEMA
]]
st_check(ARGV[1])
if not ST_VS then st_fail('RS_BADARG', 'a rebuild needs vector sets (format "<format>v")') end
local base = st_base()
if #ARGV ~= 5 then st_fail('RS_BADARG', 'expected 5 arguments') end
local ens, token, start = ARGV[2], ARGV[3], ARGV[4]
if #token > 64 or not string.match(token, '^%w+$') then st_fail('RS_BADARG', 'bad token') end
if start ~= '0' and start ~= '1' then st_fail('RS_BADARG', 'bad start flag') end
local budget = st_int(ARGV[5], 'budget')
if budget < 1 or budget > 4096 then st_fail('RS_BADARG', 'budget must be 1-4096') end

local ck, sk, kk = base .. 'c', base .. 's:' .. ens, base .. 'k:' .. ens
local raw = redis.call('HGET', ck, ens)
if redis.call('EXISTS', kk) == 0 then
  local c0, rb0 = st_vs_count(raw)
  if raw and (not c0 or rb0) then st_vs_drop(base, ens) end  -- a rebuild's marker left: out
  return {'none', token, 0}
end
local vcard = redis.call('VCARD', sk)
local c, rb, hp = st_vs_count(raw)
if c and not rb then
  -- complete; with the parameters asked (none asked: any)
  if c == vcard and (ST_M == 4 or hp == string.format('h%d:%d:', ST_M, ST_EF)) then return {'done', token, vcard} end
  raw = nil  -- an incomplete set, or one made with other parameters: made again
end
local n, tok, cur
if raw and rb then
  tok, cur = string.match(rb, '^ (%w+) (%S+)$')
  n = c
  if n ~= vcard then n = nil end  -- evicted (set or count) mid-rebuild
end
if not n or (start == '0' and tok ~= token) then
  -- no rebuild, or one that lost its set; or another rebuilder's (this one's ended)
  if raw and not n then st_vs_drop(base, ens) end
  if start == '0' then return {'ended', token, 0} end
  redis.call('UNLINK', sk, base .. 't:' .. ens)  -- what an incomplete set left
  n, tok, cur, hp = 0, token, '-', nil
end
local st = {n = tonumber(n), hp = hp}
st.dims = st.n > 0 and redis.call('VDIM', sk) or nil
local page = redis.call('ZRANGE', kk, cur == '-' and '-inf' or '(' .. cur, '+inf', 'BYSCORE', 'LIMIT', 0, budget,
  'WITHSCORES')
local added, taken = 0, 0
for i = 1, #page, 2 do
  local ekey = page[i]
  local vecs = redis.call('HGETALL', base .. 'v:' .. ens .. ekey)
  for j = 2, #vecs, 2 do
    if not st_vs_fits(vecs[j], st.dims) then
      st_vs_drop(base, ens)
      return {'ended', tok, 0}
    end
    st.dims = #vecs[j] / 4
  end
  for j = 1, #vecs, 2 do
    local ep = st_vs_enc(vecs[j])
    st.n = st.n + st_vs_add(sk, st, vecs[j + 1], ekey .. ep)
    redis.call('SADD', base .. 't:' .. ens, ep)
  end
  cur = page[i + 1]
  taken = taken + 1
  added = added + #vecs / 2
  if added >= budget then break end
end
if taken == #page / 2 and taken < budget then  -- k: is done: the set holds every vector
  if redis.call('VCARD', sk) ~= st.n then
    st_vs_drop(base, ens)
    return {'ended', tok, 0}
  end
  redis.call('HSET', ck, ens, (st.n > 0 and st.hp or '') .. string.format('%d', st.n))
  return {'done', tok, st.n}
end
redis.call('HSET', ck, ens, (st.n > 0 and st.hp or '') .. string.format('%d %s %s', st.n, tok, cur))
return {'more', tok, st.n}

end
local function s_store_write()
--[[ store_write: the writes of one store batch on one shard (RedisStore.batch), in one call.
KEYS[1] the shard's namespace index "<prefix>:store#{<shard tag>}:n": names the shard, whose
        other keys share its tag (see _store_lib.lua)
ARGV[1] store format   ARGV[2] base sequence: the client's clock in microseconds (a new
        namespace or item gets max(base + its ordinal, the shard's last sequence + 1))
ARGV[3] number of writes, then each write, its code first:
  "p" e(ns) e(key) ordinal ttl_ms type bytes nvec path vector ...: put the item (ttl_ms "0" =
      no expiry; it keeps its created_at and its place in search order; the nvec (path,
      float32 vector) pairs replace those paths' vectors, the others stay)
  "P" e(ns) e(key) ordinal ttl_ms type bytes created_us updated_us nvec path vector ...: the
      same with the item's created_at and updated_at (microseconds; an import)
  "d" e(ns) e(key): delete the item
  "r" e(ns) e(key): restart the item's expiry (a search returned it), if it has one
ARGV[1] "<format>v" (a server with VADD): the namespaces' vector sets follow the puts and deletes
(_store_lib.lua "vector sets"; a namespace without a k: index gets a new one).
Every write is checked before the first is applied. A call with a put or a delete bumps the
shard's version token "w" and logs the items it put or deleted in the shard's change log "l"
(_store_lib.lua st_bump); any call makes the token when it is missing.
Returns: the number of writes.
Errors: RS_BADARG, RS_SCHEMA
]]
st_check(ARGV[1])
local base = st_base()
local seq_base = st_int(ARGV[2], 'base sequence')
local n = st_int(ARGV[3], 'write count')
local writes, pos = {}, 4
for i = 1, n do
  local code = ARGV[pos]
  if code == 'p' or code == 'P' then
    local off = code == 'P' and 2 or 0
    if pos + 7 + off > #ARGV then st_fail('RS_BADARG', 'put arguments missing') end
    st_int(ARGV[pos + 3], 'ordinal')
    st_int(ARGV[pos + 4], 'ttl')
    if string.find(ARGV[pos + 5], '[ \n]') then st_fail('RS_BADARG', 'bad value type') end
    if off > 0 then
      for j = 7, 8 do
        if not string.match(ARGV[pos + j], '^%d+$') then st_fail('RS_BADARG', 'bad timestamp') end
      end
    end
    local nvec = st_int(ARGV[pos + 7 + off], 'vector count')
    if pos + 7 + off + 2 * nvec > #ARGV then st_fail('RS_BADARG', 'vectors missing') end
    writes[i] = pos
    pos = pos + 8 + off + 2 * nvec
  elseif code == 'd' or code == 'r' then
    if pos + 2 > #ARGV then st_fail('RS_BADARG', 'write arguments missing') end
    writes[i] = pos
    pos = pos + 3
  else
    st_fail('RS_BADARG', 'unknown write ' .. tostring(code))
  end
end
if pos ~= #ARGV + 1 then st_fail('RS_BADARG', 'extra arguments') end

local now_ms, t = st_now_ms()
local now_us = t[1] .. string.format('%06d', tonumber(t[2]))
local last = tonumber(redis.call('HGET', base .. 'm', 'seq') or '0')
local last0 = last
local function next_seq(ordinal)
  last = math.max(seq_base + ordinal, last + 1)
  return string.format('%.0f', last)
end

local touched, changed, unlogged = {}, {}, false
local vs = {}  -- e(ns) -> its vector set state in this call (ST_VS)
local bump = redis.call('EXISTS', base .. 'w') == 0
for i = 1, n do
  local p = writes[i]
  local code, ens, ekey = ARGV[p], ARGV[p + 1], ARGV[p + 2]
  local ik, vk = base .. 'i:' .. ens .. ekey, base .. 'v:' .. ens .. ekey
  if code == 'p' or code == 'P' then
    local ordinal, ttl = tonumber(ARGV[p + 3]), tonumber(ARGV[p + 4])
    local off = code == 'P' and 2 or 0
    local old = redis.call('GET', ik)
    local created = old and string.match(old, '^(%d+) ') or now_us
    local updated = now_us
    if off > 0 then created, updated = ARGV[p + 7], ARGV[p + 8] end
    local rec = created .. ' ' .. updated .. ' ' .. ARGV[p + 4] .. ' ' .. ARGV[p + 5] .. '\n' .. ARGV[p + 6]
    if ttl > 0 then
      redis.call('SET', ik, rec, 'PX', ttl)
    else
      redis.call('SET', ik, rec)
    end
    local kk = base .. 'k:' .. ens
    local had = redis.call('EXISTS', kk) == 1
    local st = ST_VS and st_vs_state(base, ens, vs, not had)
    if not (old and redis.call('ZSCORE', kk, ekey)) then  -- new (or its entry was swept): last in order
      if not redis.call('ZSCORE', base .. 'q', ens) then
        -- items its k: kept (its q entry lost: evicted) are found by scans again, not logged
        if had then unlogged = true end
        redis.call('ZADD', base .. 'q', next_seq(ordinal), ens)
      end
      redis.call('ZADD', kk, next_seq(ordinal), ekey)
    end
    -- listed by every put, not only by its namespace's first item: an index n deleted or
    -- evicted (an allkeys policy takes any key) is filled again by the namespaces' next puts;
    -- the items its k: kept are then found by scans again, not logged (as for a lost q entry)
    if redis.call('ZADD', base .. 'n', 0, ens) == 1 and had then unlogged = true end
    if ttl > 0 then
      redis.call('ZADD', base .. 'e:' .. ens, string.format('%.0f', now_ms + ttl), ekey)
    else
      redis.call('ZREM', base .. 'e:' .. ens, ekey)
    end
    local nvec = tonumber(ARGV[p + 7 + off])
    if nvec > 0 then redis.call('HSET', vk, unpack(ARGV, p + 8 + off, p + 7 + off + 2 * nvec)) end
    if st then
      vs[ens] = st_vs_put(base, ens, ekey, st)
    elseif nvec > 0 and not ST_VS and redis.call('HGET', base .. 'c', ens) then
      st_vs_drop(base, ens)  -- a writer that does not keep the set: it is not complete any more
    end
    if ttl > 0 then redis.call('PEXPIRE', vk, ttl) else redis.call('PERSIST', vk) end
    touched[ens] = true
    changed[ens .. ekey] = true
    bump = true
  elseif code == 'd' then
    local st = ST_VS and st_vs_state(base, ens, vs, false)
    if st then st_vs_remove(base, ens, ekey, st) end
    redis.call('DEL', ik, vk)
    redis.call('ZREM', base .. 'k:' .. ens, ekey)
    redis.call('ZREM', base .. 'e:' .. ens, ekey)
    touched[ens] = true
    changed[ens .. ekey] = true
    bump = true
  else
    local rec = redis.call('GET', ik)
    if rec then
      local ttl = st_ttl(rec)
      if ttl > 0 then st_refresh(base, ens, ekey, ttl, now_ms) end
    end
  end
end

-- index entries of expired items and namespaces, a few per call (no sweeper)
for ens in pairs(touched) do
  local gone = redis.call('ZRANGE', base .. 'e:' .. ens, '-inf', '(' .. now_ms, 'BYSCORE', 'LIMIT', 0, SWEEP_ITEMS)
  if #gone > 0 then
    local st = ST_VS and st_vs_state(base, ens, vs, false)
    if st then
      for _, ekey in ipairs(gone) do st_vs_remove(base, ens, ekey, st) end
    end
    redis.call('ZREM', base .. 'k:' .. ens, unpack(gone))
    redis.call('ZREM', base .. 'e:' .. ens, unpack(gone))
  end
  st_ns_expiry(base, ens)
end
local dead = redis.call('ZRANGE', base .. 'x', '-inf', '(' .. now_ms, 'BYSCORE', 'LIMIT', 0, SWEEP_NAMESPACES)
for _, ens in ipairs(dead) do
  redis.call('DEL', base .. 'k:' .. ens, base .. 'e:' .. ens)
  redis.call('ZREM', base .. 'n', ens)
  redis.call('ZREM', base .. 'q', ens)
  redis.call('ZREM', base .. 'x', ens)
  if ST_VS or redis.call('HGET', base .. 'c', ens) then st_vs_drop(base, ens) end  -- any writer
end
if ST_VS then st_vs_save(base, vs) end
if bump then st_bump(base, changed, unlogged) end
if last ~= last0 then redis.call('HSET', base .. 'm', 'seq', string.format('%.0f', last)) end
return n

end
register_function{function_name = 'redis_saver_abb40bab343df1ce_delete_runs', callback = function(keys, argv) begin_full(keys, argv) return s_delete_runs() end, flags = {'allow-oom'}}
register_function{function_name = 'redis_saver_abb40bab343df1ce_delete_thread', callback = function(keys, argv) begin_full(keys, argv) return s_delete_thread() end, flags = {'allow-oom'}}
register_function{function_name = 'redis_saver_abb40bab343df1ce_delta_history', callback = function(keys, argv) begin_full(keys, argv) return s_delta_history() end, flags = {'no-writes'}}
register_function{function_name = 'redis_saver_abb40bab343df1ce_delta_history__rw', callback = function(keys, argv) begin_full(keys, argv) return s_delta_history() end}
register_function{function_name = 'redis_saver_abb40bab343df1ce_delta_history__forget', callback = function(keys, argv) begin_full(keys, argv) return s_delta_history() end, flags = {'allow-oom'}}
register_function{function_name = 'redis_saver_abb40bab343df1ce_export', callback = function(keys, argv) begin_full(keys, argv) return s_export() end, flags = {'no-writes'}}
register_function{function_name = 'redis_saver_abb40bab343df1ce_gc', callback = function(keys, argv) begin_full(keys, argv) return s_gc() end, flags = {'allow-oom'}}
register_function{function_name = 'redis_saver_abb40bab343df1ce_get_tuple', callback = function(keys, argv) begin_full(keys, argv) return s_get_tuple() end, flags = {'no-writes'}}
register_function{function_name = 'redis_saver_abb40bab343df1ce_get_tuple__rw', callback = function(keys, argv) begin_full(keys, argv) return s_get_tuple() end}
register_function{function_name = 'redis_saver_abb40bab343df1ce_get_tuple__forget', callback = function(keys, argv) begin_full(keys, argv) return s_get_tuple() end, flags = {'allow-oom'}}
register_function{function_name = 'redis_saver_abb40bab343df1ce_import', callback = function(keys, argv) begin_full(keys, argv) return s_import() end}
register_function{function_name = 'redis_saver_abb40bab343df1ce_ix_query', callback = function(keys, argv) begin_bare(keys, argv) return s_ix_query() end, flags = {'no-writes'}}
register_function{function_name = 'redis_saver_abb40bab343df1ce_list', callback = function(keys, argv) begin_full(keys, argv) return s_list() end, flags = {'no-writes'}}
register_function{function_name = 'redis_saver_abb40bab343df1ce_list__rw', callback = function(keys, argv) begin_full(keys, argv) return s_list() end}
register_function{function_name = 'redis_saver_abb40bab343df1ce_list__forget', callback = function(keys, argv) begin_full(keys, argv) return s_list() end, flags = {'allow-oom'}}
register_function{function_name = 'redis_saver_abb40bab343df1ce_pin', callback = function(keys, argv) begin_full(keys, argv) return s_pin() end}
register_function{function_name = 'redis_saver_abb40bab343df1ce_prune', callback = function(keys, argv) begin_full(keys, argv) return s_prune() end, flags = {'allow-oom'}}
register_function{function_name = 'redis_saver_abb40bab343df1ce_put', callback = function(keys, argv) begin_full(keys, argv) return s_put() end}
register_function{function_name = 'redis_saver_abb40bab343df1ce_put_writes', callback = function(keys, argv) begin_full(keys, argv) return s_put_writes() end}
register_function{function_name = 'redis_saver_abb40bab343df1ce_put_writes__lean', callback = function(keys, argv) begin_lean(keys, argv) return s_put_writes_lean() end}
register_function{function_name = 'redis_saver_abb40bab343df1ce_rewrite', callback = function(keys, argv) begin_full(keys, argv) return s_rewrite() end}
register_function{function_name = 'redis_saver_abb40bab343df1ce_sign', callback = function(keys, argv) begin_full(keys, argv) return s_sign() end}
register_function{function_name = 'redis_saver_abb40bab343df1ce_store_delete', callback = function(keys, argv) begin_bare(keys, argv) return s_store_delete() end, flags = {'allow-oom'}}
register_function{function_name = 'redis_saver_abb40bab343df1ce_store_read', callback = function(keys, argv) begin_bare(keys, argv) return s_store_read() end, flags = {'no-writes'}}
register_function{function_name = 'redis_saver_abb40bab343df1ce_store_read__rw', callback = function(keys, argv) begin_bare(keys, argv) return s_store_read() end}
register_function{function_name = 'redis_saver_abb40bab343df1ce_store_rebuild', callback = function(keys, argv) begin_bare(keys, argv) return s_store_rebuild() end}
register_function{function_name = 'redis_saver_abb40bab343df1ce_store_write', callback = function(keys, argv) begin_bare(keys, argv) return s_store_write() end}
