#!lua
--- @include "_store_lib.lua"
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
