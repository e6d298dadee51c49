#!lua flags=no-writes
--- @include "_lib.lua"
--[[ export: a source thread's stored data, for copy_thread (import.lua writes it into the target).
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] step: "all" | "page"
all:  ARGV[6..8] the most checkpoints, fields (cp, blob and wr together) and bytes of one call.
      The whole thread in this one call, a snapshot, when it holds no more than that.
      Returns {"all" [ALL], {cp field, record, ...}, {blob field, record, ...}, {wr field, record, ...}}
      (blob: streams' directories and frames included, without the blob mark; wr: without the
      lean / wr mark), or {"paged" [PAGED]} when it holds more (nothing else is returned).
page: ARGV[6] the guard (meta "g", as import.lua "guard" returned it)   ARGV[7] after: the last
      cp_id member exported ("" = from the oldest)   ARGV[8] upto: the greatest cp_id member of
      the copy ("" = the thread's greatest now)   ARGV[9..11] the most checkpoints, fields and
      bytes of one page (at least one checkpoint is returned)   ARGV[12..] the streams the
      client holds: directory field, the directory record it holds, ...
      The next checkpoints in cp_id order (oldest id first), each with its record, the blob
      records its versions name (once per page), its writes, and the streams those records
      name (directory and frames, read together) unless the client holds that directory: then
      the directory and only the frames the client's does not list (frames never change under
      their number).
      Returns {"ok" [OK], next after ("" = done), upto, {cp field, record, ...}, {blob field, record,
      ...}, {stream part field, value, ...}, {wr field, record, ...}}, or {"changed" [CHANGED]} when meta
      "g" is not the guard: the thread went, or changed destructively (see bump_guard()).
Errors: RS_BADARG, RS_SCHEMA
]]
local step = ARGV[5]
if step ~= 'all' and step ~= 'page' then fail('RS_BADARG', 'bad export step') end
local base = step == 'all' and 6 or 9
local max_cp, max_fields, max_bytes = tonumber(ARGV[base]), tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])
if not max_cp or not max_fields or not max_bytes or max_cp < 1 then fail('RS_BADARG', 'bad export arguments') end
check_format()

if step == 'all' then
  if META_XP then return {'all', {}, {}, {}} end  -- being written (not visible yet): as if absent
  local ncp = redis.call('HLEN', K_CP)
  if ncp > max_cp or ncp + redis.call('HLEN', K_BLOB) + redis.call('HLEN', K_WR) > max_fields then
    return {'paged'}
  end
  local out, nbytes = {'all'}, 0
  for _, key in ipairs({K_CP, K_BLOB, K_WR}) do
    -- the whole hash (HSCAN to its end, not HGETALL: the ACL rule of docs/deployment.md lists
    -- the commands the scripts use; a field HSCAN returns twice is kept once). The blob mark
    -- and the lean / wr mark (field "" of blob, of wr: see _lib.lua) are the target thread's
    -- own state (import.lua sets them)
    local kept, seen, cursor = {}, {}, '0'
    repeat
      local page = redis.call('HSCAN', key, cursor, 'COUNT', 1000)
      local flat = page[2]
      cursor = page[1]
      for i = 1, #flat, 2 do
        local f = flat[i]
        if f ~= '' and not seen[f] then
          seen[f] = true
          kept[#kept + 1] = f
          kept[#kept + 1] = flat[i + 1]
          nbytes = nbytes + #f + #flat[i + 1]
        end
      end
      if nbytes > max_bytes then return {'paged'} end
    until cursor == '0'
    out[#out + 1] = kept
  end
  return out
end

if redis.call('HGET', K_META, 'g') ~= ARGV[6] then return {'changed'} end
local after, upto = ARGV[7], ARGV[8]
if upto == '' then
  local top = redis.call('ZRANGE', K_CPID, '+', '-', 'BYLEX', 'REV', 'LIMIT', 0, 1)
  if #top == 0 then return {'ok', '', '', {}, {}, {}, {}} end
  upto = top[1]
end
local members = redis.call('ZRANGE', K_CPID, after == '' and '-' or '(' .. after, '[' .. upto, 'BYLEX', 'LIMIT', 0, max_cp)
local held = {}
for i = 12, #ARGV - 1, 2 do held[ARGV[i]] = ARGV[i + 1] end
-- read 16 checkpoints at a time in a few commands (their records, the blobs they name, each
-- once, their writes) until the budget runs out: the page ends after that chunk's checkpoint
-- that reached it (at least one)
local cfields, raws = {}, {}
local bfields, bvals, bowner, seen = {}, {}, {}, {}
local wfields, wvals, wowner = {}, {}, {}
local last, nfields, nbytes = 0, 0, 0
local size, count = {}, {}
local from = 1
while from <= #members and last == 0 do
  local to = math.min(from + 15, #members)
  local chunk = {}
  for i = from, to do
    local m = members[i]
    local p = skip(m, 1)
    cfields[i] = string.sub(m, p) .. string.sub(m, 1, p - 1)
    chunk[#chunk + 1] = cfields[i]
  end
  local got = hmget(K_CP, chunk)
  local b0, w0 = #bfields, #wfields
  for i = from, to do
    local raw, field = got[i - from + 1], cfields[i]
    raws[i] = raw
    size[i], count[i] = raw and #field + #raw or 0, raw and 1 or 0
    if raw then
      local ns_e = string.sub(field, 1, skip(field, 1) - 1)
      for _, f in ipairs((blob_fields(ns_e, cp_field(raw, CP_VERSIONS)))) do
        if not seen[f] then
          seen[f] = true
          bfields[#bfields + 1] = f
          bowner[#bfields] = i
        end
      end
      for _, w in ipairs(redis.call('ZRANGE', K_WORD, lo(field), hi(field), 'BYLEX')) do
        wfields[#wfields + 1] = wfield(field, w)
        wowner[#wfields] = i
      end
    end
  end
  -- the chunk's new value and write fields, read and counted against their checkpoints
  for _, t in ipairs({{K_BLOB, bfields, bvals, bowner, b0}, {K_WR, wfields, wvals, wowner, w0}}) do
    local key, fields, vals, owner, k0 = t[1], t[2], t[3], t[4], t[5]
    local part = {}
    for k = k0 + 1, #fields do part[#part + 1] = fields[k] end
    local got_v = hmget(key, part)
    for k = 1, #part do
      local v = got_v[k]
      vals[k0 + k] = v
      if v then
        local i = owner[k0 + k]
        size[i], count[i] = size[i] + #part[k] + #v, count[i] + 1
      end
    end
  end
  for i = from, to do
    nfields, nbytes = nfields + count[i], nbytes + size[i]
    if nfields >= max_fields or nbytes >= max_bytes then
      last = i
      break
    end
  end
  from = to + 1
end
if last == 0 then last = #members end
local cps, blobs, streams, writes = {}, {}, {}, {}
for i = 1, last do
  if raws[i] then
    cps[#cps + 1] = cfields[i]
    cps[#cps + 1] = raws[i]
  end
end
-- the streams the page's records name, unless the client holds them at their length:
-- directories in one HMGET, their frames in another
local dfields, dseen = {}, {}
for k = 1, #bfields do
  local b = bvals[k]
  if b and bowner[k] <= last then
    blobs[#blobs + 1] = bfields[k]
    blobs[#blobs + 1] = b
    local d = stream_of(bfields[k], b)
    if d and not dseen[d] then
      dseen[d] = true
      dfields[#dfields + 1] = d
    end
  end
end
local dirs, ffields = hmget(K_BLOB, dfields), {}
for j, d in ipairs(dfields) do
  local dir = dirs[j]
  if dir then
    local h = held[d]
    if h ~= dir then
      -- frames never change under their number (a merge writes a new one): only those the
      -- client does not hold
      local have, parts = {}, unpack_rec(dir)
      if h then
        local hp = unpack_rec(h)
        for k = 4, #hp - 1, 2 do have[hp[k]] = true end
      end
      streams[#streams + 1] = d
      streams[#streams + 1] = dir
      for k = 4, #parts - 1, 2 do
        if not have[parts[k]] then ffields[#ffields + 1] = d .. '\0' .. parts[k] end
      end
    end
  end
end
local frames = hmget(K_BLOB, ffields)
for k = 1, #ffields do
  if frames[k] then
    streams[#streams + 1] = ffields[k]
    streams[#streams + 1] = frames[k]
  end
end
for k = 1, #wfields do
  if wvals[k] and wowner[k] <= last then
    writes[#writes + 1] = wfields[k]
    writes[#writes + 1] = wvals[k]
  end
end
local done = #members == 0 or (last == #members and (#members < max_cp or members[last] == upto))
return {'ok', done and '' or members[last], upto, cps, blobs, streams, writes}
