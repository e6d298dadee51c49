#!lua
--[[ cache set: store entries of one or more cache namespaces (groups), each entry with its own
TTL, and keep each namespace's index (the entries clear() deletes) and its expiry exact. On a
cluster the client sends one group per call (a namespace's keys share one slot); elsewhere
one call carries every namespace of a batch.
KEYS, per group:  the namespace's index (ZSET entry key -> expiry, ms on the server clock; inf =
                  none), then its n entries' keys: the index key without its last byte, "e" and
                  the entry's key
ARGV, per group:  n (> 0), then for each of its entries: TTL in ms (> 0, -1 none, 0 expired
                  already: the entry is removed) and the stored value
Returns: the number of entries
Bounded: besides the entries, per group it drops at most 2n+16 index members whose entries
expired (so an index holds its live entries and a lag of that size) and reads the index's last
member to set its expiry: O(n log N).
Errors: RS_BADARG
]]
local rcall = redis.call
local groups = {}
-- every argument is checked before the first write
local pos, kpos = 1, 1
while pos <= #ARGV do
  local n = tonumber(ARGV[pos])
  local ix = KEYS[kpos]
  if n == nil or n < 1 or n ~= math.floor(n) or ix == nil or string.sub(ix, -1) ~= 'i'
      or kpos + n > #KEYS or pos + 2 * n > #ARGV then
    return redis.error_reply('RS_BADARG cache set: malformed group at ARGV[' .. pos .. ']')
  end
  local base = string.sub(ix, 1, -2) .. 'e'
  for i = 1, n do
    if string.sub(KEYS[kpos + i], 1, #base) ~= base then
      return redis.error_reply('RS_BADARG cache set: KEYS[' .. (kpos + i) .. '] is not an entry of KEYS[' .. kpos .. ']')
    end
    local t = tonumber(ARGV[pos + 2 * i - 1])
    if t == nil or t ~= math.floor(t) or t < -1 then
      return redis.error_reply('RS_BADARG cache set: bad ttl at ARGV[' .. (pos + 2 * i - 1) .. ']')
    end
  end
  groups[#groups + 1] = {kpos, pos, n, #base}
  pos, kpos = pos + 1 + 2 * n, kpos + 1 + n
end
if kpos ~= #KEYS + 1 or #groups == 0 then
  return redis.error_reply('RS_BADARG cache set: ' .. #KEYS .. ' keys for ' .. (kpos - 1) .. ' described')
end
local now = rcall('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local total = 0
for g = 1, #groups do
  local kp, ap, n, blen = groups[g][1], groups[g][2], groups[g][3], groups[g][4]
  local ix = KEYS[kp]
  local forever = false -- an entry without expiry: the index keeps none either
  -- index members go after every add (the last of a key's entries in the group decides): a
  -- key emptied is never touched again in the call, as Redis fails that halfway through the
  -- script while the slot moves between nodes (docs/architecture.md, "Slots that move")
  local removed = {}
  for i = 1, n do
    local key, t, value = KEYS[kp + i], tonumber(ARGV[ap + 2 * i - 1]), ARGV[ap + 2 * i]
    local member = string.sub(key, blen + 1)
    removed[member] = t == 0
    if t == 0 then
      rcall('UNLINK', key)
    elseif t < 0 then
      rcall('SET', key, value)
      rcall('ZADD', ix, 'inf', member)
      forever = true
    else
      rcall('SET', key, value, 'PX', t)
      rcall('ZADD', ix, now_ms + t, member)
    end
  end
  -- and index members whose entries expired (score < now: their keys are gone)
  local gone = rcall('ZRANGE', ix, '-inf', '(' .. now_ms, 'BYSCORE', 'LIMIT', 0, 2 * n + 16)
  for member, r in pairs(removed) do
    if r then gone[#gone + 1] = member end
  end
  local left = 1
  if #gone > 0 then
    left = rcall('ZCARD', ix)
    for i = 1, #gone, 1000 do
      left = left - rcall('ZREM', ix, unpack(gone, i, math.min(i + 999, #gone)))
    end
  end
  -- the index lives as long as its longest-lived entry (left 0: it is gone with its last member)
  if forever and left > 0 then
    rcall('PERSIST', ix)
  elseif left > 0 then
    local top = rcall('ZRANGE', ix, -1, -1, 'WITHSCORES')
    if #top == 2 then
      if top[2] == 'inf' then
        rcall('PERSIST', ix)
      else
        rcall('PEXPIREAT', ix, top[2])
      end
    end
  end
  total = total + n
end
return total
