#!lua flags=no-writes
--- @include "_lib.lua"
--[[ delta_history: walk a checkpoint's parent chain for DeltaChannel reconstruction
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] slot index threads
      [10] slot index runs: the 10 per-thread keys (see _lib.lua, redis_saver/keys.py)
(BaseCheckpointSaver.get_delta_channel_history), inside Redis, in one call.
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] checkpoint_ns   ARGV[6] checkpoint id ("" = latest)   ARGV[7..] channel names
Returns: {ancestors, seeds}; ancestors = {{write records of still-unseeded channels, in
writes_sort_key order}, ...} newest ancestor first (the target itself is excluded);
seeds = {channel, blob record, ...} for each channel whose nearest stored value was found.
]]
local ns, cid = ARGV[5], ARGV[6]
check_format()
local ns_e = enc(ns)
local remaining, left = {}, 0
for i = 7, #ARGV do
  if not remaining[ARGV[i]] then remaining[ARGV[i]] = true left = left + 1 end
end
-- the versions of the still-unseeded channels in a versions record, taking substrings only
-- for parts whose length matches a wanted channel name (records hold every channel)
local want_len = {}
for ch, _ in pairs(remaining) do want_len[#ch] = true end
local function wanted_versions(vrec)
  local semi = string.find(vrec, ';', 1, true)
  if not semi then fail('RS_BADARG', 'malformed record') end
  local pos, odd, name, out = semi + 1, true, nil, {}
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
    end
    odd = not odd
    pos = pos + len
  end
  return out
end

local cid_e
if cid == '' then
  local top = redis.call('ZRANGE', K_CPNS, hi(ns_e), lo(ns_e), 'BYLEX', 'REV', 'LIMIT', 0, 1)
  if #top == 0 then return {{}, {}} end
  cid_e = string.sub(top[1], #ns_e + 1)
else
  cid_e = enc(cid)
end
local raw = redis.call('HGET', K_CP, ns_e .. cid_e)
local ancestors, seeds = {}, {}
local parent = nil
if raw then parent = rec_field(raw, 1) end
while parent and parent ~= '' and left > 0 do
  local p_e = enc(parent)
  raw = redis.call('HGET', K_CP, ns_e .. p_e)
  if not raw then break end
  -- only the parts the walk needs, without copying the checkpoint payload
  local next_parent, vrec = rec_two(raw, 1, 6)
  local here = {}
  for ch, ver in pairs(wanted_versions(vrec)) do
    local b = redis.call('HGET', K_BLOB, ns_e .. enc(ch) .. ver)
    if b and rec_field(b, 1) ~= 'empty' then here[ch] = b end
  end
  local ws = {}
  for _, w in ipairs(writes_of(ns_e, p_e)) do
    if w and remaining[rec_field(w, 2)] then ws[#ws + 1] = w end
  end
  ancestors[#ancestors + 1] = ws
  for ch, b in pairs(here) do
    seeds[#seeds + 1] = ch
    seeds[#seeds + 1] = b
    remaining[ch] = nil
    left = left - 1
  end
  parent = next_parent
end
if REFRESH == '1' and META_V then touch() end
return {ancestors, seeds}
