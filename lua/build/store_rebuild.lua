#!lua
-- generated from lua/store_rebuild.lua, lua/_store_lib.lua by `python -m devkit.luagen`: do not edit (edit those, then run it)
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

-- the item's elements for paths it has no vector under (ekey's vectors were deleted, expired,
-- or are being replaced; keep: e(path) -> true, the paths it keeps)

-- a put item's vectors, all of them (its v: hash after the put: the paths put now and those it
-- keeps, which may predate the set if its namespace's index keys were evicted), go into the set,
-- and its elements for other paths (an expired item's before it) go; returns the state (false:
-- the namespace left sets, a vector VSIM cannot score within the bound)

-- the counts of the namespaces a call kept in sets

-- x[ns] := the latest expiry of the namespace's items, or no entry when one of them has none
-- (e: holds only the items that expire); a namespace left without items leaves the shard's indexes

-- the item's own ttl (ms, 0 = none), from its record

-- the item's expiry starts again from now (refresh_ttl): its keys and index entries

-- the shard's version token changes: the counter goes up; a token that is missing (never
-- made, evicted, deleted) starts a new incarnation (server time and a random part), so a token
-- a client cached before never matches again
-- ``changed``: the items the call put or deleted (e(ns)..e(key), a set), logged; ``unlogged``:
-- the call changed what a scan finds beyond them (a namespace listed again with the items its
-- k: kept after its q entry was lost): no client behind this call may patch (the floor rises)


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
