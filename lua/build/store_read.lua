#!lua flags=no-writes
-- generated from lua/store_read.lua, lua/_store_lib.lua by `python -m devkit.luagen`: do not edit (edit those, then run it)
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


-- the namespace leaves vector sets (its searches scan)
local function st_vs_drop(base, ens)
  redis.call('UNLINK', base .. 's:' .. ens, base .. 't:' .. ens)
  redis.call('HDEL', base .. 'c', ens)
end

-- whether a float32 vector (little-endian bytes) scores in a vector set as exactly as the bound
-- the client uses: finite, zero or with a norm well inside float32's range, dims as the set's

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
