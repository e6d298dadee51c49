#!lua
--- @include "_lib.lua"
--[[ sign: replace a thread's stored records by the same records carrying integrity tags (the
CLI's "rewrite --sign": the operator vouches once for what is stored). Only the type part of
each record gains a tag, so no index, count or stream reference changes. Bounded by the call's
arguments (the client sends a page at a time).
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] n, then n quadruples: hash ("c" checkpoints | "b" values | "w" writes), field, sha1 hex of
        the record the client read, the new record
        Every new record is checked before anything is written; a field whose record changed
        since the client read it (or went) is left alone: what was not read is not vouched for.
Returns the number of records replaced.
Errors: RS_BADARG, RS_SCHEMA
]]
local n = tonumber(ARGV[5])
if not n or n < 0 or #ARGV ~= 5 + 4 * n then fail('RS_BADARG', 'bad sign arguments') end
check_format()
local hashes = {c = K_CP, b = K_BLOB, w = K_WR}
for i = 0, n - 1 do
  local h, f, rec = ARGV[6 + 4 * i], ARGV[7 + 4 * i], ARGV[9 + 4 * i]
  if not hashes[h] or f == '' then fail('RS_BADARG', 'bad sign arguments') end
  if h == 'c' then
    validate_record(rec)
  elseif h == 'b' then
    if is_stream_part(f) or not is_blob_record(rec) then fail('RS_BADARG', 'blob record must have 2 parts') end
  elseif #unpack_rec(rec) ~= W_PARTS then
    fail('RS_BADARG', 'write record must have ' .. W_PARTS .. ' parts')
  end
end
if not META_V then return 0 end  -- the thread is gone
local done = 0
for i = 0, n - 1 do
  local key, f = hashes[ARGV[6 + 4 * i]], ARGV[7 + 4 * i]
  local cur = redis.call('HGET', key, f)
  if cur and redis.sha1hex(cur) == ARGV[8 + 4 * i] then
    redis.call('HSET', key, f, ARGV[9 + 4 * i])
    done = done + 1
  end
end
return done
