#!lua flags=allow-oom
-- generated from lua/delta_history.lua, lua/_lib.lua, lua/_lib_records.lua, lua/_lib_thread.lua, lua/_lib_values.lua, lua/_lib_checkpoints.lua by `python -m devkit.luagen`: do not edit (edit those, then run it)
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

-- two parts of a record in one pass over its header (a < b)


-- Checkpoint records (redis_saver/core/codec.py). Format 6 writes a MessagePack array of 10 (first
-- byte 0x9a), its nested parts (versions, filter, delta, parents) arrays, every string of the
-- raw family: cmsgpack reads it in C. Formats 3-5 framed the same parts as a record, nested
-- parts as records (first byte a digit); they are read as they are. cp_rec() and cp_field()
-- give either in one layout: the parts, nested parts as arrays of strings.
local function cp_is_mp(raw)
  return string.byte(raw, 1) == 154
end

-- a format-6 record's parts: one MessagePack array of 10 and nothing after it

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

-- one part of a checkpoint record of any format (an earlier format's without copying the others)

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

-- the first put (that stores blobs) sets the chain mark and meta.c (the blob mark and meta.b)
-- (see "Lost keys" above); before touch(), which gives the keys their expiry


-- the run index of the thread (cross-thread delete_for_runs goes through the slot index)


-- the blob field of a channel's version: e(ns)e(channel)..version
local function blob_field(ns_e, ch, ver)
  return ns_e .. enc(ch) .. ver
end

-- versions part (channel, version, ...) -> the blob fields of its versions and the channels, in
-- order (put validated the even number of parts)

-- channel -> blob field, from a versions part

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

-- the directory field of the stream that blob record b (at blob field f) names, or nil (no
-- record, or one that names no stream)

-- stream_of() the record stored at blob field f (a long record is not read)

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

-- delete blob fields, and the streams no remaining record names

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


-- the blob fields e(ns)e(channel)version a checkpoint references, from its chain entry
-- (e(parent), then "\1"e(channel)"\2"e(version) per channel: small, no payload copied), else
-- from its record (the chain key lost, e.g. evicted); none when neither exists

-- the blob fields the checkpoints `members` (of namespace ns_e) reference, added to out: from
-- their chain entries, or their records in a thread that keeps none


-- the write-hash field of a wr_ord member: prefix .. e(task_id)..idx8, i.e. the member
-- without its e(task_path) and its trailing e(channel)
local function wfield(prefix, member)
  local p = skip(member, #prefix + 1)
  return prefix .. string.sub(member, p, skip(member, p) + 7)
end


-- The copy guard, meta field "g": set by a paged copy_thread of this thread (import.lua
-- "guard"), which checks it on every page; every change that removes or alters stored entries
-- (a checkpoint dropped or re-put with other bytes, a record's parent cleared, rewrite_values)
-- bumps it, so that copy starts again. Nothing is written while no copy set it.

-- delete one checkpoint (record, indexes, blob refs, run link; writes unless keep_writes)

-- A checkpoint's chain entry (K_CHAIN): e(parent id), then "\1"e(channel)"\2"e(version) per
-- channel of its versions record: what delta history reads of each ancestor. Kept only by
-- threads that an earlier format started (meta "nc" unset): since format 5 compresses the
-- checkpoint's bytes, its record is small enough to read instead, and a thread started by
-- format 5 keeps none (meta "nc" = "1"; ~300 bytes less per checkpoint). In an entry,
-- "\0\1" only occurs where a component ends and a channel name starts (inside e(), "\0" is
-- followed by "\255"), so one plain find of "\0\1"e(channel)"\2" locates a channel.

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

--- @forget-variant
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
