#!lua flags=no-writes
--- @include "_store_lib.lua"
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
  "l" min max budget: a page of the live namespaces between the ZRANGE BYLEX bounds min and max
  "c" token count scored e(ns) e(key) ...: the records of count items (nil: not found as a scan
      finds items), if the shard's version token (_store_lib.lua st_bump) is token (a client's
      vector cache is current) and each of the first scored items that is present still has
      its vectors
Returns one reply per read, in order:
  "g" / "G": the item record, or nil
  "s": {{e(ns), e(key), ns_seq, item_seq, record, {path, vector, ...}}, ...} flattened 6 by 6,
       then the cursor ns_seq, item_seq to go on from ("" "": done), then the shard's version
       token ("": none)
  "c": {1, record or nil, ...} (one per item, in order) when the cache is current; else {0}
  "l": {{e(ns), ...}, the last namespace examined ("": done)}
]]
local MAX_BUDGET = 1024  -- items a search page returns at most
local WORK = 2048  -- entries a search page examines at most
local COLLECT = 1024  -- namespaces under a prefix sorted in the call; more: walk q in order
st_check(ARGV[1])
local base = st_base()
local REFRESH = ARGV[2]
local n = st_int(ARGV[3], 'read count')
local reads, pos = {}, 4
for i = 1, n do
  local code = ARGV[pos]
  if code == 'G' and not (REFRESH == '1') then st_fail('RS_BADARG', 'G reads need REFRESH') end
  local width = ((code == 'g' or code == 'G') and 3) or (code == 's' and 6) or (code == 'l' and 4) or nil
  if code == 'c' then
    width = 4 + 2 * st_int(ARGV[pos + 2], 'item count')
    st_int(ARGV[pos + 3], 'scored count')
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
local function cached(token, p, count, scored)
  if token == '' or version() ~= token then return {0} end
  local out, listed = {1}, {}
  for i = 1, count do
    local j = p + 2 * i
    local ens, ekey = ARGV[j], ARGV[j + 1]
    local rec = redis.call('GET', base .. 'i:' .. ens .. ekey)
    if rec then
      if listed[ens] == nil then
        listed[ens] = redis.call('ZSCORE', base .. 'q', ens) ~= false and redis.call('ZSCORE', base .. 'n', ens) ~= false
      end
      if not listed[ens] or not redis.call('ZSCORE', base .. 'k:' .. ens, ekey) then rec = nil end
    end
    if rec and i <= scored and redis.call('EXISTS', base .. 'v:' .. ens .. ekey) == 0 then return {0} end
    out[i + 1] = rec or false
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
  elseif code == 'c' then
    replies[i] = cached(ARGV[p + 1], p + 2, tonumber(ARGV[p + 2]), tonumber(ARGV[p + 3]))
  else
    replies[i] = list(ARGV[p + 1], ARGV[p + 2], tonumber(ARGV[p + 3]))
  end
end
return replies
