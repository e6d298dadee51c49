#!lua
--- @include "_lib.lua"
--[[ import: write exported data into this (target) thread, for copy_thread.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
Blobs and writes are imported before the checkpoints that reference them, so a reader of
the target never sees a checkpoint without its data. Streams (directories, frames) are copied
as they are, their reference counts with them.
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] what: "cp" | "blob" | "wr"   ARGV[6..] field, value pairs (as export.lua returns them)
Returns: number of entries written
]]
local what = ARGV[5]
if what ~= 'cp' and what ~= 'blob' and what ~= 'wr' then fail('RS_BADARG', 'bad import kind') end
if (#ARGV - 5) % 2 ~= 0 then fail('RS_BADARG', 'odd field/value list') end
local recs = {}
for i = 6, #ARGV - 1, 2 do
  local r
  if what == 'blob' and is_stream_part(ARGV[i]) then
    r = {'', ''}  -- copied as it is: the directories' reference counts count the copied records
  elseif what == 'cp' then
    r = validate_record(ARGV[i + 1])  -- any format's: copied as it is
  else
    r = unpack_rec(ARGV[i + 1])
  end
  if what == 'wr' and #r ~= W_PARTS then fail('RS_BADARG', 'write record must have ' .. W_PARTS .. ' parts') end
  if what == 'blob' and #r ~= 2 then fail('RS_BADARG', 'blob record must have 2 parts') end
  recs[#recs + 1] = r
end
check_format()
init_meta()
if what == 'blob' and #recs > 0 then mark_blobs() end
if what == 'cp' and #recs > 0 then mark_cps() end
local n = 0
for i = 6, #ARGV - 1, 2 do
  n = n + 1
  local field, value, r = ARGV[i], ARGV[i + 1], recs[n]
  if what == 'blob' then
    local old = nil
    if not is_stream_part(field) then old = stored_stream(field) end
    redis.call('HSET', K_BLOB, field, value)
    -- a record of the target's own that the copy replaces no longer names its stream
    local sid = stream_id(value)
    if old and (not sid or old ~= blob_prefix_of(field) .. '\0' .. sid) then stream_ref(old, -1) end
  elseif what == 'wr' then
    -- field = e(ns)e(cid) .. e(task_id)idx; the sort member adds e(task_path) before
    -- e(task_id) and e(channel) at the end (put_writes.lua)
    local p = skip(field, skip(field, 1))
    local old = redis.call('HGET', K_WR, field)
    if old then
      local o = unpack_rec(old)
      redis.call('ZREM', K_WORD, string.sub(field, 1, p - 1) .. enc(o[W_TASK_PATH]) .. string.sub(field, p) .. enc(o[W_CHANNEL]))
    end
    redis.call('HSET', K_WR, field, value)
    redis.call('ZADD', K_WORD, 0, string.sub(field, 1, p - 1) .. enc(r[W_TASK_PATH]) .. string.sub(field, p) .. enc(r[W_CHANNEL]))
  else
    local p = skip(field, 1)
    store_cp(string.sub(field, 1, p - 1), string.sub(field, p), value, r)
    -- like an unfenced put: the namespace's head is its greatest id again (put.lua)
    if META_FH == '1' then redis.call('HDEL', K_META, 'h' .. string.sub(field, 1, p - 1)) end
  end
end
touch()
return n
