#!lua flags=no-writes
--- @include "_lib.lua"
--- @forget-variant
--[[ get_tuple: one checkpoint (by id, or the latest of its namespace) with blobs and writes.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh: "1" = extend the thread's expiry;
            the driver then runs the writable variant of this script, without no-writes)
ARGV[5] checkpoint_ns   ARGV[6] checkpoint id ("" = latest)
ARGV[7] n <= 8 (absent = 0), then n pairs stream id, raw length: the streams of the thread the
        client holds (read_held() in _lib_values.lua)
Returns: nil, or one flat array (Redis 7.0 replies an array of k items' nesting with k deferred
         lengths, each a reply block of its own: 6 nested arrays cost ~2.5 us a call more):
         checkpoint id, record,
         2n, then n pairs channel, k (the channels that hold a value, k the position of its
           blob among the blobs at the end, from 1),
         m, then m write records (writes_sort_key order),
         s, then per stream the blobs name: stream id, directory, f, then f frames (see
           "Encoded values" in _lib_values.lua; a stream the client holds at a frame's end
           carries only the frames after it: none when it holds it whole),
         then the blobs
Errors: RS_DAMAGED (a key of the thread was lost: see "Lost keys" in _lib.lua; the
        client then sends the writable variant with ARGV[4] = "f", which forgets the thread
        and answers as if it did not exist), RS_SCHEMA, RS_BADARG
]]
local ns, cid = ARGV[5], ARGV[6]
local held = read_held(7)
check_format()
if check_counts() then return nil end
local ns_e = enc(ns)
local cid_e
if cid == '' then
  cid_e = latest_of(ns_e)
  if not cid_e then
    check_cp_keys()  -- none in this namespace; or cp and cp_ns were both lost
    return nil
  end
  cid = dec(cid_e, 1)
else
  cid_e = enc(cid)
end
local raw = redis.call('HGET', K_CP, ns_e .. cid_e)
if not raw then
  if ARGV[6] == '' then damaged('the record of its latest checkpoint is missing') return nil end
  check_cp_keys()
  return nil
end
local reply, streams, blobs = tuple_replies({{ns_e, cid_e, raw}}, false, held)
if not reply then return nil end
reply = reply[1]
local out, values, writes = {cid, reply[1], #reply[2]}, reply[2], reply[3]
for i = 1, #values do out[#out + 1] = values[i] end
out[#out + 1] = #writes
for i = 1, #writes do out[#out + 1] = writes[i] end
out[#out + 1] = #streams
for _, st in ipairs(streams) do
  out[#out + 1] = st[1]
  out[#out + 1] = st[2]
  out[#out + 1] = #st - 2
  for j = 3, #st do out[#out + 1] = st[j] end
end
for i = 1, #blobs do out[#out + 1] = blobs[i] end
-- only the keys the commands above may not have read (meta, cp, cp_ns, cp_id, wr and wr_ord
-- they did: the format and count checks; blob, chain and the slot index's threads key only in
-- some threads, runs and the slot index's runs key never)
touch_read(true)
return out
