#!lua
--- @include "_lib.lua"
--[[ rewrite: re-encode a thread's channel values in place (RedisSaver.rewrite_values, the CLI's
"rewrite"): values an earlier release or compress=False stored as raw serde bytes become what a
put of this version stores (a zstd frame, or a stream record with its stream). Bounded pages.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5] step: "scan" | "get" | "set"
scan: ARGV[6] HSCAN cursor   ARGV[7] COUNT hint   ARGV[8] the least record length worth encoding
      Returns {next cursor ("0" = done), {field, record length, ...}}: the raw value records of
      the page (a type without "\31": not encoded yet) of at least that length
get:  ARGV[6..] blob fields (the client keeps a page's total small)
      Returns {record or nil, ...}
set:  ARGV[6] e(ns)   ARGV[7] n, then n triples: blob field, sha1 hex of the record the client
      read, new record; then the stream appends (5 each, as put.lua's)
      A field whose record changed since the client read it is left alone. Returns the number
      of records replaced, or -1 [STREAMS_MOVED] (nothing written) when a stream the new records need is gone or
      moved (see plan_blobs() in _lib.lua): the client starts that channel's stream again.
Errors: RS_BADARG, RS_SCHEMA
]]
local step = ARGV[5]
if step ~= 'scan' and step ~= 'get' and step ~= 'set' then fail('RS_BADARG', 'unknown rewrite step') end
check_format()
if step == 'scan' then
  local count, least = tonumber(ARGV[7]), tonumber(ARGV[8])
  if not count or not least then fail('RS_BADARG', 'bad rewrite arguments') end
  local page = redis.call('HSCAN', K_BLOB, ARGV[6], 'COUNT', count)
  local flat, out = page[2], {}
  for i = 1, #flat - 1, 2 do
    local f, v = flat[i], flat[i + 1]
    if f ~= '' and #v >= least and not is_stream_part(f) then
      local _, e, a = string.find(v, '^(%d+),%d+;')
      if e and not string.find(string.sub(v, e + 1, e + a), '\31', 1, true) then
        out[#out + 1] = f
        out[#out + 1] = #v
      end
    end
  end
  return {page[1], out}
end
if step == 'get' then
  local fields = {}
  for i = 6, #ARGV do fields[#fields + 1] = ARGV[i] end
  return hmget(K_BLOB, fields)
end
local ns_e, n = ARGV[6], tonumber(ARGV[7])
if not ns_e or not n or #ARGV < 7 + 3 * n then fail('RS_BADARG', 'bad rewrite arguments') end
local stream_args = {}
for k = 8 + 3 * n, #ARGV do stream_args[#stream_args + 1] = ARGV[k] end
check_stream_args(stream_args)
local blob_pairs = {}
for i = 0, n - 1 do
  local f, sha, rec = ARGV[8 + 3 * i], ARGV[9 + 3 * i], ARGV[10 + 3 * i]
  if string.sub(f, 1, #ns_e) ~= ns_e then fail('RS_BADARG', 'field outside the namespace') end
  if not is_blob_record(rec) then fail('RS_BADARG', 'blob record must have 2 parts') end
  local cur = redis.call('HGET', K_BLOB, f)
  if cur and redis.sha1hex(cur) == sha then
    blob_pairs[#blob_pairs + 1] = f
    blob_pairs[#blob_pairs + 1] = rec
  end
end
if not META_V then return 0 end  -- the thread is gone
local blobs = plan_blobs(blob_reads(blob_pairs), nil, stream_args, ns_e)
if not blobs then return -1 end
init_meta()
apply_blobs(blobs)  -- the fields join their hash: its expiry, if any, stays as it was
return #blob_pairs / 2
