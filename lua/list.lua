#!lua flags=no-writes
--- @include "_lib.lua"
--[[ list: one page of a thread's checkpoints, newest first, filtered by metadata in Redis.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] index: "ns" (members e(ns)e(cid), one namespace) | "id" (members e(cid)e(ns), all)
ARGV[6] upper lex bound   ARGV[7] lower lex bound   (ZRANGE BYLEX REV syntax, built by Python)
ARGV[8] max items to return   ARGV[9] max members to examine in this call
ARGV[10] n filters, then n pairs: metadata key, canonical JSON ("null" also matches a missing key)
Returns: {cursor, item, item, ...}; cursor = last member examined when the page stopped
         early ("" when the range is exhausted); item = {e(ns), e(cid), record, {channel, blob, ...}, writes}
         (as get_tuple's reply)
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

local function matches(raw)
  if nf == 0 then return true end
  local f = unpack_rec(rec_field(raw, 7))
  local md = {}
  for i = 1, #f - 1, 2 do md[f[i]] = f[i + 1] end
  for i = 0, nf - 1 do
    local want, got = ARGV[12 + 2 * i], md[ARGV[11 + 2 * i]]
    if want == 'null' then
      if got ~= nil and got ~= 'null' then return false end
    elseif got ~= want then
      return false
    end
  end
  return true
end

local function examined_all(members, cur)
  return #members == 0 or cur == '(' .. members[#members]
end

local out = {''}
local examined, chunk = 0, 64
local cursor = upper
while #out - 1 < limit and examined < budget do
  -- without a filter every member examined is returned: ask for exactly what is missing
  local want = chunk
  if nf == 0 then want = limit - (#out - 1) end
  want = math.min(want, budget - examined)
  local members = redis.call('ZRANGE', key, cursor, lower, 'BYLEX', 'REV', 'LIMIT', 0, want)
  for _, m in ipairs(members) do
    examined = examined + 1
    cursor = '(' .. m
    -- the member is e(ns)e(cid) ("ns") or e(cid)e(ns) ("id"): its two encoded parts
    local p = skip(m, 1)
    local ns_e, cid_e = string.sub(m, 1, p - 1), string.sub(m, p)
    if index == 'id' then ns_e, cid_e = cid_e, ns_e end
    local raw = redis.call('HGET', K_CP, ns_e .. cid_e)
    if raw and matches(raw) then
      local r = tuple_reply(ns_e, cid_e, raw)
      out[#out + 1] = {ns_e, cid_e, r[1], r[2], r[3]}
      if #out - 1 >= limit then break end
    end
  end
  -- a short chunk means the range ended, unless the page filled before its last member
  if #members < want and examined_all(members, cursor) then cursor = nil break end
end
if cursor ~= nil then out[1] = cursor end
if REFRESH == '1' and META_V then touch() end
return out
