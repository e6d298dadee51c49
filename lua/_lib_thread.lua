--- _lib_thread.lua: one thread as a whole: its meta fields and storage format, its expiry and
--- slot index entry (touch), lost keys (damage, forgetting a thread), its key marks and its run
--- index. Included by _lib.lua after _lib_records.lua (these "--- " notes are not sent).
--- It declares no KEYS/ARGV of its own: its helpers read the layout that _lib.lua declares in
--- its keys and state blocks (KEYS[1..11], the header ARGV[1..4]) for the script including it.
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

