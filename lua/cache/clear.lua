#!lua flags=allow-oom
--[[ cache clear: delete a page of one cache namespace's entries, as they were when the clear began.
KEYS[1]   the namespace's index (ZSET entry key -> expiry): what set() adds to
KEYS[2]   its snapshot: KEYS[1] without its last byte, then "c" (same hash tag: same slot)
ARGV[1]   page: the most entries this call deletes (> 0)
An entry's key is KEYS[1] without its last byte, then "e" and the member.
When there is no snapshot, the index becomes the snapshot (RENAME: sets from then on start a new
index); each call then deletes up to a page of the snapshot's entries, except those set again
since (members of the new index), and drops them from it. The snapshot only shrinks, so a clear
takes a bounded number of calls whatever other workers set meanwhile; a snapshot left by a
clear that stopped halfway is finished by the next (before it takes the index).
Returns: {members left in the snapshot, 1 [TOOK_INDEX] if this call took the index (or there was none to
take) else 0 [INDEX_TAKEN]}; a namespace is clear of what preceded the clear once a call answered 1 and a
call since (or that one) answered 0 left.
Errors: RS_BADARG
]]
local rcall = redis.call
local ix, snap = KEYS[1], KEYS[2]
local page = tonumber(ARGV[1])
if string.sub(ix, -1) ~= 'i' or snap ~= string.sub(ix, 1, -2) .. 'c' or page == nil or page < 1
    or page ~= math.floor(page) then
  return redis.error_reply('RS_BADARG cache clear: KEYS must be an index and its snapshot, ARGV[1] a page size > 0')
end
-- Slots that move (docs/architecture.md): the entries' keys are not declared, and while the
-- namespace's slot is MIGRATING or IMPORTING Redis fails a command on a key missing on this
-- node halfway through the script; so the call is refused before it does anything (TRYAGAIN,
-- as Redis answers a command whose keys are in part elsewhere: the client sends it again).
-- Two keys no cache writes ("c" and "i" then a byte no entry key has there) answer in one command.
if type(redis.pcall('EXISTS', snap .. '\0', ix .. '\0')) ~= 'number' then
  return redis.error_reply('TRYAGAIN cache clear: the namespace\'s slot is moving between nodes')
end
local took = 0
if rcall('EXISTS', snap) == 0 then
  took = 1
  if rcall('EXISTS', ix) == 0 then
    return {0, 1}
  end
  rcall('RENAME', ix, snap)
end
local base = string.sub(ix, 1, -2) .. 'e'
local members = rcall('ZRANGE', snap, 0, page - 1)
for i = 1, #members do
  if not rcall('ZSCORE', ix, members[i]) then
    rcall('UNLINK', base .. members[i])
  end
  rcall('ZREM', snap, members[i])
end
return {rcall('ZCARD', snap), took}
