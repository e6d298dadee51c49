#!lua flags=no-writes
--- @include "_lib.lua"
--- @forget-variant
--[[ list: one page of a thread's checkpoints, newest first, filtered by metadata in Redis.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] index: "ns" (members e(ns)e(cid), one namespace) | "id" (members e(cid)e(ns), all)
ARGV[6] upper lex bound   ARGV[7] lower lex bound   (ZRANGE BYLEX REV syntax, built by Python)
ARGV[8] max items to return   ARGV[9] max members to examine in this call
ARGV[10] n filters, then n pairs: metadata key, canonical JSON ("null" also matches a missing key);
         a long JSON comes as "\1" .. sha256 (33 bytes) .. the JSON: records keep such a value
         as its 33-byte digest, records of earlier releases as the JSON (redis_saver/core/codec.py)
Returns: {cursor, streams, blobs, item, item, ...} ({cursor} alone when no item); cursor = last
         member examined when the page stopped early ("" when the range is exhausted); streams:
         the streams the items' blobs name, as get_tuple's reply; blobs: each blob the items
         hold, once; item = {e(ns), e(cid), record, {channel, k, ...}, writes} (as get_tuple's
         reply: k = the position of the channel's blob in blobs)
Errors: RS_DAMAGED (a key of the thread was lost: see "Lost keys" in _lib.lua; the
        client then sends the writable variant with ARGV[4] = "f", which forgets the thread
        and answers as if it did not exist), RS_SCHEMA, RS_BADARG
]]
local index, upper, lower = ARGV[5], ARGV[6], ARGV[7]
local limit, budget, nf = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
if (index ~= 'ns' and index ~= 'id') or not limit or limit < 1 or not budget or budget < 1
    or not nf or #ARGV ~= 10 + 2 * nf then
  fail('RS_BADARG', 'bad list arguments')
end
check_format()
local key = K_CPNS
if index == 'id' then key = K_CPID end
if check_counts() then return {''} end  -- the thread is expiring: nothing to list

-- the filters, split once: key, wanted value, and for a long value its full JSON
local fkey, fwant, fjson = {}, {}, {}
for i = 1, nf do
  local want = ARGV[10 + 2 * i]
  fkey[i] = ARGV[9 + 2 * i]
  if string.byte(want, 1) == 1 and #want > 33 then
    fwant[i], fjson[i] = string.sub(want, 1, 33), string.sub(want, 34)
  else
    fwant[i] = want
  end
end

local function matches(raw)
  if nf == 0 then return true end
  local f = cp_field(raw, CP_FILTER)
  local md = {}
  for i = 1, #f - 1, 2 do md[f[i]] = f[i + 1] end
  for i = 1, nf do
    local want, got = fwant[i], md[fkey[i]]
    if want == 'null' then
      if got ~= nil and got ~= 'null' then return false end
    elseif got ~= want and (fjson[i] == nil or got ~= fjson[i]) then
      return false
    end
  end
  return true
end

local function examined_all(members, cur)
  return #members == 0 or cur == '(' .. members[#members]
end

-- the records of a chunk of members come in one HMGET; the checkpoints to return are then
-- replied to together (tuple_replies: their blobs in one HMGET, their writes in one more)
local page = {}
local examined, chunk = 0, 8
local cursor = upper
while #page < limit and examined < budget do
  -- without a filter every member examined is returned: ask for exactly what is missing; with
  -- one, chunks grow 8, 16, 32, 64 (records past the one that fills the page are read for nothing)
  local want = chunk
  if nf == 0 then want = limit - #page else chunk = math.min(chunk * 2, 64) end
  want = math.min(want, budget - examined)
  local members = redis.call('ZRANGE', key, cursor, lower, 'BYLEX', 'REV', 'LIMIT', 0, want)
  local fields, parts = {}, {}
  for j, m in ipairs(members) do
    -- the member is e(ns)e(cid) ("ns") or e(cid)e(ns) ("id"): its two encoded parts
    local p = skip(m, 1)
    local ns_e, cid_e = string.sub(m, 1, p - 1), string.sub(m, p)
    if index == 'id' then ns_e, cid_e = cid_e, ns_e end
    parts[j] = {ns_e, cid_e}
    fields[j] = ns_e .. cid_e
  end
  local raws = hmget(K_CP, fields)
  for j, m in ipairs(members) do
    examined = examined + 1
    cursor = '(' .. m
    local raw = raws[j]
    if not raw and damaged('the record of an indexed checkpoint is missing') then return {''} end
    if raw and matches(raw) then
      page[#page + 1] = {parts[j][1], parts[j][2], raw}
      if #page >= limit then break end
    end
  end
  -- a short chunk means the range ended, unless the page filled before its last member
  if #members < want and examined_all(members, cursor) then cursor = nil break end
end
local out = {cursor or ''}
if #page == 0 and check_cp_keys() then return out end  -- nothing: or lost checkpoint keys
if #page > 0 then
  -- without a filter, the page is every checkpoint of the range it covers
  local replies, streams, blobs = tuple_replies(page, nf == 0)
  if not replies then return {''} end
  out[2], out[3] = streams, blobs
  for i, r in ipairs(replies) do
    out[i + 3] = {page[i][1], page[i][2], r[1], r[2], r[3]}
  end
end
if META_V then touch_read() end
return out
