#!lua flags=allow-oom
-- generated from lua/prune.lua, lua/_lib.lua, lua/_lib_records.lua, lua/_lib_thread.lua, lua/_lib_values.lua, lua/_lib_checkpoints.lua by `python -m devkit.luagen`: do not edit (edit those, then run it)
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

-- @keys-begin: a script's "+lean" variant gets lua/_keys_lean.lua here instead (LEAN = true;
-- only wr and wr_ord: see put_writes.lua and devkit/luagen.py)
local K_META, K_CP, K_CPNS, K_CPID, K_BLOB, K_WR, K_WORD, K_RUNS, K_CHAIN, K_IXT, K_IXR =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local THREAD_KEYS = {K_META, K_CP, K_CPNS, K_CPID, K_BLOB, K_WR, K_WORD, K_RUNS, K_CHAIN}
if #KEYS ~= 11 then fail('RS_BADARG', 'expected 11 keys') end
-- @keys-end

-- order-preserving, self-delimiting component encoding (keys.enc)
local function enc(s)
  if not string.find(s, '\0', 1, true) then return s .. '\0' end  -- the common case, 4x faster
  return (string.gsub(s, '%z', '\0\255')) .. '\0'
end

-- @state-begin: the state of one call (with the @keys block). As an EVAL script, these lines
-- run on every call where they stand; in the function library (devkit/luagen.py
-- library()) their names are declared once and these lines run at the start of every call.
local FORMAT, THREAD_ID, TTL_MS, REFRESH = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
if TTL_MS == nil or TTL_MS < 0 then fail('RS_BADARG', 'bad ttl') end
local THREAD_E = enc(THREAD_ID)
-- the thread's meta fields, read once by check_format(): format, index state, pin flag, "1"
-- once a fenced put recorded a namespace head (meta field "h"..e(ns), see put.lua), and for
-- lost keys (see "Lost keys" below): "b" / "c" = the blob / chain mark was set, "wm" = the wr
-- mark is kept, "dmg" = a key of the thread was lost (what: earlier versions wrote it; the
-- thread is forgotten at its next call); "nc" = "1": the thread keeps no
-- chain entries (see chain_entry(): threads started by format 5 read their records instead)
-- and "n" counts its checkpoints instead (see "Lost keys"); "xp" = "1": the thread is being
-- written by copy_thread or the command-line tool's import / migrate, and reads answer as for
-- a thread that does not exist until its last call (see import.lua)
local META_V, META_IX, META_PIN, META_FH, META_B, META_DMG, META_C, META_WM = nil, nil, nil, nil, nil, nil, nil, nil
local META_NC, META_N, META_XP = nil, nil, nil
local GC = {}  -- blob collection candidates (see gc_blobs())
-- keys this call emptied or unlinked (GONE[key] = true), and the members or fields left in
-- the keys it removed from (see "Slots that move" in _lib_thread.lua)
local GONE, LEFT = {}, {}
-- @state-end

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

-- the channel (part 2) of a well-framed write record (exactly 6 parts), else nil; checked
-- the same way

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

-- A format-6 checkpoint record's shape checked from its MessagePack headers alone, nothing
-- decoded or copied (Redis hashes every byte of each Lua string it makes): an array of 10
-- (first byte 0x9a), parts 1-5 and 8 strings, parts 6, 7, 9, 10 arrays of strings, nothing
-- after it; strings of the str family only (fixstr, str8, str16, str32: Redis's cmsgpack
-- refuses the bin family). That is what validate_record() accepts of a format-6 record, as
-- cmsgpack reads it. Returns where part 2 starts (part 1, the parent, ends there), where part
-- 8 (the run id) starts and ends, and the length of part 6 (versions); nil when the bytes are
-- not so (validate_record() then says what is wrong). Bounded: each string moves on by a byte
-- at least, and the walk stops at the end of the bytes.

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


-- the thread lost a key (or is expiring): forget it whole, its slot-index entries included

-- the thread id as an error message shows it: its first 200 bytes, control characters as '?'

-- a read found a key of the thread lost: true when the caller should answer as if the thread
-- were absent (it is expiring, or this is the forgetting variant, which forgot it); else raise
-- RS_DAMAGED naming the thread and what is missing (the client then sends the forgetting variant)

-- a write script found a key of the thread lost (or an expiry under way): the thread is
-- forgotten whole; the write then goes on as on a new thread, or refuses (put.lua, put_writes.lua)

-- the O(1) checks of a read (get_tuple, list, delta_history): the slot index entry, 6 counts
-- (cp and both its indexes, chain or meta.n, the write keys); true = expiring, or being
-- written whole (meta.xp: a copy or import under way, not visible until its last call)

-- the 4 checkpoint keys hold the same number of checkpoints (for reads that found a
-- checkpoint missing, after check_counts()); true = expiring

-- a referenced blob is missing: lost (the blob key went since the thread first stored blobs)
-- rather than never stored; true = expiring. mark: whether the blob mark is there, when the
-- caller read it with the blobs (tuple_replies()); nil = read it here (one HEXISTS)

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

-- chain: a new thread keeps chain entries (put with compression off sends them), else none

-- the first put (that stores blobs) sets the chain mark and meta.c (the blob mark and meta.b)
-- (see "Lost keys" above); before touch(), which gives the keys their expiry


-- the run index of the thread (cross-thread delete_for_runs goes through the slot index)

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

-- {{sid, directory, frame, ...}, ...}: each stream the records blobs[i] (blob fields
-- fields[i], nil = none) name, once; nil when the thread is expiring. held (or nil): the raw
-- length (a string) of each stream the client holds, by stream id (read_held()). A stream is
-- append-only and a (thread, stream id) never comes back with other bytes, so the client's
-- copy is a prefix of what is stored: its entry then carries only the frames after that
-- prefix when the prefix ends where a frame ends (none when it is the whole stream, found
-- from the directory's first part without unpacking it), else every frame.

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

-- A stream directory as plan_blobs() changes it, without unpacking its frame list: {raw length,
-- references (a number), next frame number (a number), frame count, the stored header's
-- lengths after the third (its frames: "" = none), the stored body after the third part, the
-- parts this call adds (frame number, raw end, ...)}. An append (the common case: one per put
-- of a growing channel) reads the first three parts and copies the rest as it is; a merge
-- reads the stored frames to delete them.

-- the frame numbers of a directory view's stored frames (a merge deletes them)

-- the directory record of a view, with `more` references

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


-- a checkpoint record of any format, checked; returns its parts as cp_rec() does. Parts
-- 6, 7, 9, 10 (versions, filter, delta, parents) are arrays of strings, the others strings. An
-- array cmsgpack decodes holds 1..n in its array part, so "no key after n" (next) and n
-- strings is the whole check; a map is a table with a key that is not 1..n.

-- put's checkpoint record, checked as validate_record() checks it; returns the parts put reads:
-- the parent (1) and run id (8), and every part of an earlier format's record. A format-6
-- record's shape is checked from its headers (cp_shape()) and only those two parts are copied:
-- put adds its versions (6) when it builds a chain entry from them (cp_field()). Bytes that
-- are not so shaped go to validate_record(), which names what is wrong.

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
