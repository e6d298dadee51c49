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

local function st_check(fmt)
  if fmt ~= STORE_FORMAT then st_fail('RS_SCHEMA', 'store format ' .. tostring(fmt) .. ' is not ' .. STORE_FORMAT) end
end

-- the shard's key names start with this (KEYS[1] without its final "n")
local function st_base()
  local k = KEYS[1]
  if #KEYS ~= 1 or string.sub(k, -3) ~= '}:n' then st_fail('RS_BADARG', 'expected the shard index key') end
  return string.sub(k, 1, -2)
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

-- x[ns] := the latest expiry of the namespace's items, or no entry when one of them has none
-- (e: holds only the items that expire); a namespace left without items leaves the shard's indexes
local function st_ns_expiry(base, ens)
  local n = redis.call('ZCARD', base .. 'k:' .. ens)
  if n == 0 then
    redis.call('DEL', base .. 'k:' .. ens, base .. 'e:' .. ens)
    redis.call('ZREM', base .. 'n', ens)
    redis.call('ZREM', base .. 'q', ens)
    redis.call('ZREM', base .. 'x', ens)
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
