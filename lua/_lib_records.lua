--- _lib_records.lua: the encoded key components and the records of checkpoints and writes:
--- decoding (skip, dec), the record layout (CP_* / W_*, redis_saver/core/codec.py), reading a
--- record's parts, HMGET in chunks, lex ranges and a namespace's latest checkpoint.
--- Included by _lib.lua (these "--- " notes are not sent with the scripts).
--- It declares no KEYS/ARGV of its own: its helpers read the layout that _lib.lua declares in
--- its keys and state blocks (KEYS[1..11], the header ARGV[1..4]) for the script including it.
-- position just after the encoded component that starts at pos
local function skip(s, pos)
  while true do
    local i = string.find(s, '\0', pos, true)
    if not i then fail('RS_BADARG', 'unterminated component') end
    if string.byte(s, i + 1) == 255 then pos = i + 2 else return i + 1 end
  end
end

local function dec(s, pos)
  local e = skip(s, pos)
  local x = string.sub(s, pos, e - 2)
  if string.find(x, '\255', 1, true) then x = string.gsub(x, '%z\255', '\0') end
  return x, e
end

-- record layouts, 1-based (redis_saver/core/codec.py CP / WR / EMPTY_BLOB; tests/scripts/test_scripts.py
-- checks that both sides agree): the small parts of a checkpoint record the scripts read, the
-- parts of a write record they read, and the whole blob record of a channel without a value
local CP_PARENT, CP_VERSIONS, CP_FILTER, CP_RUN_ID, CP_DELTA, CP_PARENTS, CP_PARTS = 1, 6, 7, 8, 9, 10, 10
local W_CHANNEL, W_TASK_PATH, W_PARTS = 2, 5, 6
local EMPTY_BLOB = '5,0;empty'

-- records: "<len>,<len>,...;" .. parts (redis_saver/core/codec.py)
local function unpack_rec(s)
  if not s then fail('RS_BADARG', 'missing record') end
  local semi = string.find(s, ';', 1, true)
  if not semi then fail('RS_BADARG', 'malformed record') end
  local out, pos = {}, semi + 1
  for n in string.gmatch(string.sub(s, 1, semi - 1), '%d+') do
    n = tonumber(n)
    out[#out + 1] = string.sub(s, pos, pos + n - 1)
    pos = pos + n
  end
  if pos ~= #s + 1 then fail('RS_BADARG', 'malformed record') end
  return out
end

-- true when s is a well-framed blob record (exactly 2 parts): one anchored match with a
-- literal pattern, no table, nothing copied (Lua coerces the captured digit strings in the sum)
local function is_blob_record(s)
  local _, e, a, b = string.find(s, '^(%d+),(%d+);')
  return e ~= nil and e + a + b == #s
end

-- the channel (part 2) of a well-framed write record (exactly 6 parts), else nil; checked
-- the same way
local function write_channel(s)
  local _, e, a, b, c, d, f, g = string.find(s, '^(%d+),(%d+),(%d+),(%d+),(%d+),(%d+);')
  if not e or e + a + b + c + d + f + g ~= #s then return nil end
  return string.sub(s, e + 1 + a, e + a + b)
end

-- one part of a record without copying the others (records hold large serde payloads)
local function rec_field(s, want)
  local semi = string.find(s, ';', 1, true)
  if not semi then fail('RS_BADARG', 'malformed record') end
  local pos, i = semi + 1, 0
  for len in string.gmatch(string.sub(s, 1, semi - 1), '%d+') do
    i = i + 1
    len = tonumber(len)
    if i == want then return string.sub(s, pos, pos + len - 1) end
    pos = pos + len
  end
  fail('RS_BADARG', 'record has no part ' .. want)
end

-- two parts of a record in one pass over its header (a < b)
local function rec_two(s, a, b)
  local semi = string.find(s, ';', 1, true)
  if not semi then fail('RS_BADARG', 'malformed record') end
  local pos, i, first = semi + 1, 0, nil
  for len in string.gmatch(string.sub(s, 1, semi - 1), '%d+') do
    i = i + 1
    len = tonumber(len)
    if i == a then first = string.sub(s, pos, pos + len - 1) end
    if i == b then return first, string.sub(s, pos, pos + len - 1) end
    pos = pos + len
  end
  fail('RS_BADARG', 'record has no part ' .. b)
end

local function pack_rec(parts)
  local lens = {}
  for i = 1, #parts do lens[i] = tostring(#parts[i]) end
  return table.concat(lens, ',') .. ';' .. table.concat(parts)
end

-- Checkpoint records (redis_saver/core/codec.py). Format 6 writes a MessagePack array of 10 (first
-- byte 0x9a), its nested parts (versions, filter, delta, parents) arrays, every string of the
-- raw family: cmsgpack reads it in C. Formats 3-5 framed the same parts as a record, nested
-- parts as records (first byte a digit); they are read as they are. cp_rec() and cp_field()
-- give either in one layout: the parts, nested parts as arrays of strings.
local function cp_is_mp(raw)
  return string.byte(raw, 1) == 154
end

-- a format-6 record's parts: one MessagePack array of 10 and nothing after it
local function cp_unpack(raw)
  local ok, nxt, rec = pcall(cmsgpack.unpack_one, raw)
  if not ok or nxt ~= -1 or type(rec) ~= 'table' or #rec ~= CP_PARTS then
    fail('RS_BADARG', 'malformed checkpoint record')
  end
  return rec
end

-- the string part of a record at pos (its header there), up to stop (where the next part starts)
local function mp_str_at(s, pos, stop)
  local b = string.byte(s, pos)
  local h = 5
  if b <= 191 then h = 1 elseif b == 217 then h = 2 elseif b == 218 then h = 3 end
  return string.sub(s, pos + h, stop - 1)
end

-- A format-6 checkpoint record's shape checked from its MessagePack headers alone, nothing
-- decoded or copied (Redis hashes every byte of each Lua string it makes): an array of 10
-- (first byte 0x9a), parts 1-5 and 8 strings, parts 6, 7, 9, 10 arrays of strings, nothing
-- after it; strings of the str family only (fixstr, str8, str16, str32: Redis's cmsgpack
-- refuses the bin family). That is what validate_record() accepts of a format-6 record, as
-- cmsgpack reads it. Returns where part 2 starts (part 1, the parent, ends there), where part
-- 8 (the run id) starts and ends, and the length of part 6 (versions); nil when the bytes are
-- not so (validate_record() then says what is wrong). Bounded: each string moves on by a byte
-- at least, and the walk stops at the end of the bytes.
local function cp_shape(raw)
  local byte = string.byte
  if byte(raw, 1) ~= 154 then return nil end
  local p, parent_end, run_at, run_end, nv = 2, nil, nil, nil, nil
  for part = 1, 10 do
    if part == 8 then run_at = p end
    local count = 1  -- a string part
    if part == 6 or part == 7 or part == 9 or part == 10 then
      local b, x, y, z, w = byte(raw, p, p + 4)
      if not b then return nil end
      if b >= 144 and b <= 159 then      -- fixarray
        count, p = b - 144, p + 1
      elseif b == 220 and y then         -- array16
        count, p = x * 256 + y, p + 3
      elseif b == 221 and w then         -- array32
        count, p = ((x * 256 + y) * 256 + z) * 256 + w, p + 5
      else
        return nil
      end
      if part == 6 then nv = count end
    end
    for _ = 1, count do
      local b, x, y = byte(raw, p, p + 2)
      if not b then return nil end
      if b >= 160 and b <= 191 then      -- fixstr
        p = p + b - 159
      elseif b == 218 and y then         -- str16
        p = p + 3 + x * 256 + y
      elseif b == 217 and x then         -- str8
        p = p + 2 + x
      elseif b == 219 then               -- str32
        local _, q, r, s, t = byte(raw, p, p + 4)
        if not t then return nil end
        p = p + 5 + ((q * 256 + r) * 256 + s) * 256 + t
      else
        return nil
      end
    end
    if part == 1 then parent_end = p elseif part == 8 then run_end = p end
  end
  if p ~= #raw + 1 then return nil end
  return parent_end, run_at, run_end, nv
end

-- parts 1 .. upto of a stored format-6 record (validate_record checked it when it was
-- stored): cmsgpack decodes them in C from the byte after the array header. (Skipping the
-- payload parts 2-5 by their headers in Lua instead, to leave them uncopied, took 5.1 against
-- 2.2 us a record: the copies are memcpy of bytes the script already holds.)
local function cp_parts(raw, upto)
  return {select(2, cmsgpack.unpack_limit(raw, upto, 1))}
end

-- every part of a checkpoint record of any format; with `upto`, at least parts 1 .. upto
local function cp_rec(raw, upto)
  if cp_is_mp(raw) then
    if upto then return cp_parts(raw, upto) end
    return cp_unpack(raw)
  end
  local rec = unpack_rec(raw)
  if #rec ~= CP_PARTS then fail('RS_BADARG', 'checkpoint record must have ' .. CP_PARTS .. ' parts') end
  rec[CP_VERSIONS], rec[CP_FILTER] = unpack_rec(rec[CP_VERSIONS]), unpack_rec(rec[CP_FILTER])
  rec[CP_DELTA], rec[CP_PARENTS] = unpack_rec(rec[CP_DELTA]), unpack_rec(rec[CP_PARENTS])
  return rec
end

-- one part of a checkpoint record of any format (an earlier format's without copying the others)
local function cp_field(raw, i)
  if cp_is_mp(raw) then return (select(i + 1, cmsgpack.unpack_limit(raw, i, 1))) end
  local f = rec_field(raw, i)
  if i == CP_VERSIONS or i == CP_FILTER or i == CP_DELTA or i == CP_PARENTS then return unpack_rec(f) end
  return f
end

-- HMGET of any number of fields (one command per 1000 fields), the values in order
local function hmget(key, fields)
  local n = #fields
  if n == 0 then return {} end
  if n <= 1000 then return redis.call('HMGET', key, unpack(fields)) end
  local out = {}
  for i = 1, n, 1000 do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + 999, n)))
    for j = 1, #part do out[#out + 1] = part[j] end
  end
  return out
end

-- lex range of every member that starts with the encoded prefix p
-- HSET of any number of field-value pairs (one command per 1000 pairs): Lua's unpack() refuses
-- ~8,000 values, and that error would come after the call's earlier writes
local function hset_all(key, flat)
  local n = #flat
  if n <= 2000 then return redis.call('HSET', key, unpack(flat)) end
  local k = 0
  for i = 1, n, 2000 do k = k + redis.call('HSET', key, unpack(flat, i, math.min(i + 1999, n))) end
  return k
end

local function lo(p) return '[' .. p end
local function hi(p) return '(' .. p .. '\255' end

-- e(cid) of the namespace's latest checkpoint (the greatest id), nil when it has none (the
-- limit as strings: Redis formats a Lua number argument with snprintf on every call)
local function latest_of(ns_e)
  local top = redis.call('ZRANGE', K_CPNS, hi(ns_e), lo(ns_e), 'BYLEX', 'REV', 'LIMIT', '0', '1')
  if #top == 0 then return nil end
  return string.sub(top[1], #ns_e + 1)
end

