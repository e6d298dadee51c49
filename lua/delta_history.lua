#!lua flags=no-writes
--- @include "_lib.lua"
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
