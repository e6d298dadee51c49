#!lua flags=allow-oom
--[[ cache clear: delete a page of one cache namespace's entries, with their index members.
KEYS[1]   the namespace's index (ZSET entry key -> expiry); an entry's key is KEYS[1] without
          its last byte, then "e" and the member (same hash tag: same slot)
ARGV[1]   page: the most entries this call deletes (> 0)
Returns: the number of index members left (0: the namespace is clear)
]]
local rcall = redis.call
local ix = KEYS[1]
local page = tonumber(ARGV[1])
if string.sub(ix, -1) ~= 'i' or page == nil or page < 1 or page ~= math.floor(page) then
  return redis.error_reply('RS_BADARG cache clear: KEYS[1] must be an index key and ARGV[1] a page size > 0')
end
local base = string.sub(ix, 1, -2) .. 'e'
local members = rcall('ZRANGE', ix, 0, page - 1)
for i = 1, #members do
  rcall('UNLINK', base .. members[i])
  rcall('ZREM', ix, members[i])
end
return rcall('ZCARD', ix)
