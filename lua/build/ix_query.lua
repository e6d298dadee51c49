#!lua flags=no-writes
-- generated from lua/ix_query.lua by `python -m devkit.luagen`: do not edit (edit those, then run it)
--[[ ix_query: read one slot's cross-thread index (list(None), delete_for_runs fan-out).
KEYS[1] slot index: threads (ZSET thread id -> expiry ms, inf = none)
KEYS[2] slot index: runs (lex ZSET "r"e(run)e(thread), "t"e(thread)e(run))
ARGV[1] "threads" | "runs"   ARGV[2..] run ids (for "runs")
Returns: the ids of live (not expired) threads: all of them, or those holding one of the runs
Errors: RS_BADARG
]]
if #KEYS ~= 2 then error({err = 'RS_BADARG expected 2 keys'}) end
local mode = ARGV[1]
local t = redis.call('TIME')
local now = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
if mode == 'threads' then
  return redis.call('ZRANGE', KEYS[1], '(' .. now, '+inf', 'BYSCORE')
elseif mode ~= 'runs' then
  error({err = 'RS_BADARG bad mode'})
end
local out, seen = {}, {}
for i = 2, #ARGV do
  local p = 'r' .. (string.gsub(ARGV[i], '%z', '\0\255')) .. '\0'
  for _, m in ipairs(redis.call('ZRANGE', KEYS[2], '[' .. p, '(' .. p .. '\255', 'BYLEX')) do
    local thr = (string.gsub(string.sub(m, #p + 1, -2), '%z\255', '\0'))
    if not seen[thr] then
      seen[thr] = true
      local score = redis.call('ZSCORE', KEYS[1], thr)
      if score and (score == 'inf' or tonumber(score) > tonumber(now)) then out[#out + 1] = thr end
    end
  end
end
return out
