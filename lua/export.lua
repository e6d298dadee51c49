#!lua flags=no-writes
--- @include "_lib.lua"
--[[ export: a source thread's stored data, for copy_thread (import.lua writes it into the target).
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] step: "all" | "page"
all:  ARGV[6..8] the most checkpoints, fields (cp, blob and wr together) and bytes of one call.
      The whole thread in this one call, a snapshot, when it holds no more than that.
      Returns {"all", {cp field, record, ...}, {blob field, record, ...}, {wr field, record, ...}}
      (blob: streams' directories and frames included, without the blob mark; wr: without the
      lean / wr mark), or {"paged"} when it holds more (nothing else is returned).
page: ARGV[6] the guard (meta "g", as import.lua "guard" returned it)   ARGV[7] after: the last
      cp_id member exported ("" = from the oldest)   ARGV[8] upto: the greatest cp_id member of
      the copy ("" = the thread's greatest now)   ARGV[9..11] the most checkpoints, fields and
      bytes of one page (at least one checkpoint is returned)   ARGV[12..] the streams the
      client holds: directory field, raw length, ...
      The next checkpoints in cp_id order (oldest id first), each with its record, the blob
      records its versions name (once per page), its writes, and the streams those records
      name (directory and all its frames, read together) unless the client holds them at their
      current length.
      Returns {"ok", next after ("" = done), upto, {cp field, record, ...}, {blob field, record,
      ...}, {stream part field, value, ...}, {wr field, record, ...}}, or {"changed"} when meta
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
  local ncp = redis.call('HLEN', K_CP)
  if ncp > max_cp or ncp + redis.call('HLEN', K_BLOB) + redis.call('HLEN', K_WR) > max_fields then
    return {'paged'}
  end
  local out, nbytes = {'all'}, 0
  for _, key in ipairs({K_CP, K_BLOB, K_WR}) do
    -- the blob mark and the lean / wr mark (field "" of blob, of wr: see _lib.lua) are the
    -- target thread's own state (import.lua sets them)
    local flat, kept = redis.call('HGETALL', key), {}
    for i = 1, #flat, 2 do
      if flat[i] ~= '' then
        kept[#kept + 1] = flat[i]
        kept[#kept + 1] = flat[i + 1]
        nbytes = nbytes + #flat[i] + #flat[i + 1]
      end
    end
    if nbytes > max_bytes then return {'paged'} end
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
for i = 12, #ARGV - 1, 2 do held[ARGV[i]] = tonumber(ARGV[i + 1]) end
local cps, blobs, streams, writes = {}, {}, {}, {}
local seen, seen_dir = {}, {}
local nfields, nbytes, last = 0, 0, nil
local function add(out, f, v)
  out[#out + 1] = f
  out[#out + 1] = v
  nfields = nfields + 1
  nbytes = nbytes + #f + #v
end
for _, m in ipairs(members) do
  local p = skip(m, 1)
  local ns_e = string.sub(m, p)
  local field = ns_e .. string.sub(m, 1, p - 1)
  local raw = redis.call('HGET', K_CP, field)
  if raw then
    add(cps, field, raw)
    local want = {}
    for _, f in ipairs((blob_fields(ns_e, cp_field(raw, CP_VERSIONS)))) do
      if not seen[f] then
        seen[f] = true
        want[#want + 1] = f
      end
    end
    local got = hmget(K_BLOB, want)
    for i, f in ipairs(want) do
      local b = got[i]
      if b then
        add(blobs, f, b)
        local sid = #b <= STREAM_REC_MAX and stream_id(b)
        local d = sid and blob_prefix_of(f) .. '\0' .. sid
        if d and not seen_dir[d] then
          seen_dir[d] = true
          local dir = redis.call('HGET', K_BLOB, d)
          if dir then
            local parts = unpack_rec(dir)
            if held[d] ~= tonumber(parts[1]) then
              local names = {}
              for k = 4, #parts - 1, 2 do names[#names + 1] = d .. '\0' .. parts[k] end
              local frames = hmget(K_BLOB, names)
              add(streams, d, dir)
              for k = 1, #names do
                if frames[k] then add(streams, names[k], frames[k]) end
              end
            end
          end
        end
      end
    end
    local wfields = {}
    for _, w in ipairs(redis.call('ZRANGE', K_WORD, lo(field), hi(field), 'BYLEX')) do
      wfields[#wfields + 1] = wfield(field, w)
    end
    local ws = hmget(K_WR, wfields)
    for i = 1, #wfields do
      if ws[i] then add(writes, wfields[i], ws[i]) end
    end
  end
  last = m
  if nfields >= max_fields or nbytes >= max_bytes then break end
end
local done = last == nil or last == upto or (#members < max_cp and last == members[#members])
return {'ok', done and '' or last, upto, cps, blobs, streams, writes}
