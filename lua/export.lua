#!lua flags=no-writes
--- @include "_lib.lua"
--[[ export: one page of a thread's stored data, for copy_thread (import.lua writes it).
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] what: "cp" | "blob" | "wr"   ARGV[6] HSCAN cursor   ARGV[7] HSCAN COUNT hint
Returns: {next cursor ("0" = done), {field, value, field, value, ...}} (wr: without the lean
         mark; blob: without the blob mark)
]]
local what, cursor, count = ARGV[5], ARGV[6], ARGV[7]
local key = ({cp = K_CP, blob = K_BLOB, wr = K_WR})[what]
if not key or not tonumber(count) then fail('RS_BADARG', 'bad export arguments') end
check_format()
local page = redis.call('HSCAN', key, cursor, 'COUNT', count)
if key == K_WR or key == K_BLOB then
  -- the lean mark and the blob mark (field "" of wr, of blob: see _lib.lua) are the target
  -- thread's own state (import.lua sets them)
  local flat, kept = page[2], {}
  for i = 1, #flat, 2 do
    if flat[i] ~= '' then
      kept[#kept + 1] = flat[i]
      kept[#kept + 1] = flat[i + 1]
    end
  end
  page[2] = kept
end
return page
