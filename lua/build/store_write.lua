#!lua
-- generated from lua/store_write.lua, lua/_store_lib.lua by `python -m devkit.luagen`: do not edit (edit those, then run it)
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
