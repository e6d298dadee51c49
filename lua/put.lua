#!lua
--- @include "_lib.lua"
--[[ put: store one checkpoint, its new channel blobs, and refresh the thread.
KEYS[1] meta [2] cp [3] cp_ns [4] cp_id [5] blob [6] wr [7] wr_ord [8] runs [9] chain
      [10] slot index threads [11] slot index runs: the 11 per-thread keys (see _lib.lua, keys.py)
ARGV[1..4]: header (format, thread id, ttl ms, refresh)
ARGV[5]  checkpoint_ns          ARGV[6]  checkpoint id         ARGV[7]  parent id ("" = none)
ARGV[8]  checkpoint record      ARGV[9]  history mode: "full" | "latest"
ARGV[10] fence: "1" = fail with RS_CONFLICT unless the parent is the namespace's latest
ARGV[11] chain entry: e(parent id), then "\1"e(channel)"\2"e(version) per channel of the
         record's versions (K_CHAIN, see _lib.lua chain_entry()): what redis_saver sends with
         compression off, and a new thread then keeps chain entries; or "" (a new thread keeps
         none; one that keeps them, e.g. an earlier format's, gets one built from the record)
ARGV[12] n = number of blobs, then n pairs: blob field suffix e(channel)..version, blob record
ARGV[13 + 2n] m = number of stream appends, then m groups of 5 (see "Encoded values" in
         _lib.lua): e(channel) "\0" sid, mode ("n" = a new stream | "a" = append one frame |
         "m" = replace every frame with one), the stream's raw length the client based it on
         ("a", "m": the call changes nothing and returns 3 unless the stored length is that),
         the raw length after it, the zstd frame. Only the appends a new stream record of this
         call names are applied (a retried put appends nothing twice).
Returns: 1 [STORED]; 2 [PRUNE_IN_PAGES] when history mode "latest" found more than 256 checkpoints (or 2,048 writes)
in the thread and left them: the client then prunes the thread in bounded pages; 3 [STREAMS_MOVED] (nothing
written) when a stream a new record names is gone or not at the length the client based its
append on (another writer appended, or it was collected): the client resends with new streams;
4 [THREAD_GONE] (nothing stored) when the put continues from a parent (ARGV[7]) in a thread that holds no
checkpoint: the thread was evicted, expired or deleted while a run used it (or lost a key, and
this call forgot it: see "Lost keys" in _lib.lua); the client raises ThreadEvictedError
Errors: RS_BADARG (nothing written), RS_SCHEMA, RS_CONFLICT
]]
local ns, cid, parent, raw, mode, fence = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local entry, nblobs = ARGV[11], tonumber(ARGV[12])
if cid == nil or cid == '' then fail('RS_BADARG', 'empty checkpoint id') end
local sbase = 13 + 2 * (nblobs or 0)
local nstreams = tonumber(ARGV[sbase])
if nblobs == nil or nstreams == nil or #ARGV ~= sbase + 5 * nstreams then fail('RS_BADARG', 'bad blob count') end
if mode ~= 'full' and mode ~= 'latest' then fail('RS_BADARG', 'bad history mode') end
local rec = put_record(raw)  -- parent and run id (an earlier format's record: every part)
if rec[CP_PARENT] == cid then fail('RS_BADARG', 'a checkpoint cannot be its own parent') end
-- a chain entry given starts with the record's parent and ends a component
if entry ~= '' then
  local parent_e = enc(rec[CP_PARENT])
  if string.sub(entry, 1, #parent_e) ~= parent_e or string.byte(entry, -1) ~= 0 then
    fail('RS_BADARG', 'chain entry does not match the record')
  end
end
local ns_e, cid_e = enc(ns), enc(cid)
local blob_pairs = {}
for i = 1, nblobs do
  local b = ARGV[12 + 2 * i]
  if not is_blob_record(b) then fail('RS_BADARG', 'blob record must have 2 parts') end
  blob_pairs[2 * i - 1] = ns_e .. ARGV[11 + 2 * i]
  blob_pairs[2 * i] = b
end
local stream_args = {}
for k = sbase + 1, #ARGV do stream_args[#stream_args + 1] = ARGV[k] end
check_stream_args(stream_args)
local reads = blob_reads(blob_pairs)  -- (checks stream records' size)
check_format_put()

-- Lost keys (see _lib.lua): a thread that lost a key is forgotten whole before anything is
-- planned against it. O(1) and cheap: its blob hash gone (the unchanged channels of this
-- checkpoint would name values no longer stored; the blob mark is read with the fields the
-- blob plan reads, one HMGET, or alone when it reads none), its meta gone, or a loss an earlier version recorded; the
-- reads' counts catch the other losses (the next read then forgets the thread).
-- Then a put that continues from a parent in a thread that holds no checkpoint is refused (4):
-- its unchanged channels and its delta channels' history would be gone.
local got, lost = nil, META_DMG
if lost then
  lost = true
elseif META_B == '1' and #reads[5] == 0 then
  lost = redis.call('HEXISTS', K_BLOB, BLOB_MARK) == 0  -- (no field for the plan to read)
elseif META_B == '1' then
  local q = {BLOB_MARK}
  for _, f in ipairs(reads[5]) do q[#q + 1] = f end
  got = hmget(K_BLOB, q)
  lost = not got[1]
  table.remove(got, 1)
elseif not META_V then
  lost = redis.call('EXISTS', K_CP, K_CPNS, K_CPID, K_BLOB, K_WR, K_WORD, K_RUNS, K_CHAIN) > 0
end
if lost then
  -- the thread's slot is moving: this node may not write the thread afresh (see "Slots that
  -- move" in _lib_thread.lua): refused before any write, as Redis refuses such a call
  refuse_if_slot_moving()
  record_loss()
  got = {}  -- the thread's keys are gone: nothing is stored
end
if parent ~= '' and redis.call('HEXISTS', K_CP, ns_e .. enc(parent)) == 0 and redis.call('HLEN', K_CP) == 0 then
  return 4
end

-- a put whose blob records name no stream (plain values, the common case but for a growing
-- channel) writes them as they come: the plan would be that, and its tables are not built
local blobs = false
if #reads[2] > 0 then
  blobs = plan_blobs(reads, got, stream_args, ns_e)
  if not blobs then return 3 end
end

-- Fencing: a namespace's head is the checkpoint its last fenced put stored (meta field
-- "h"..e(ns), set with meta "fh" = "1"), while that checkpoint is still stored; otherwise (none
-- yet, or deleted by prune / delete_for_runs / latest-only mode) its greatest id. A fenced put
-- of a new checkpoint must name the head as its parent ("" on an empty namespace) and becomes
-- the head, so a second child of the same parent conflicts whatever the order of the ids
-- (clock skew between hosts); a retry of a stored checkpoint is not checked and moves nothing.
-- An unfenced put (or copy_thread's import) clears the namespace's head: the greatest id is
-- the head again, as reads see it. Without fencing nothing is read or written for it until a
-- fenced put touched the thread (then one HDEL).
-- head_of(): the namespace's head, its id ("" when the namespace is empty)
local function head_of()
  local h = redis.call('HGET', K_META, 'h' .. ns_e)
  if h and redis.call('HEXISTS', K_CP, ns_e .. enc(h)) == 1 then return h end
  local latest = latest_of(ns_e)
  if latest then return dec(latest, 1) end
  return ''
end

local new_head = false
if fence == '1' and redis.call('HEXISTS', K_CP, ns_e .. cid_e) == 0 then
  local latest = head_of()
  if latest ~= parent then
    fail('RS_CONFLICT', 'thread moved on: latest checkpoint is ' .. latest .. ', put expected parent ' .. parent)
  end
  new_head = true
end

-- a thread that keeps chain entries (not one started now: init_meta()) gets one built from the
-- record's versions when none was sent (store_cp()): decoded here, before the first write
if entry == '' and META_V and META_NC ~= '1' and not rec[CP_VERSIONS] then
  rec[CP_VERSIONS] = cp_field(raw, CP_VERSIONS)
end

-- validation done: writes start here
init_meta(entry ~= '')
mark_cps()
if blobs then
  apply_blobs(blobs)
elseif #reads[1] > 0 then
  mark_blobs()
  hset_all(K_BLOB, reads[1])
end
local indexed = store_cp(ns_e, cid_e, raw, rec, entry ~= '' and entry or nil)
if new_head then
  redis.call('HSET', K_META, 'h' .. ns_e, cid, 'fh', '1')
elseif fence ~= '1' and META_FH == '1' then
  redis.call('HDEL', K_META, 'h' .. ns_e)
end

-- latest-only cleanup, bounded: a thread of more than LATEST_BUDGET checkpoints (or 8 x that
-- writes), e.g. one written with history="full" before, is not cleaned here: the reply asks
-- the client to prune it in bounded pages (prune.lua), and later puts clean what is left
local LATEST_BUDGET = 256
local cleaned = 1
if mode == 'latest' and (redis.call('ZCARD', K_CPNS) > LATEST_BUDGET
    or redis.call('ZCARD', K_WORD) > 8 * LATEST_BUDGET) then
  cleaned = 2
elseif mode == 'latest' then
  -- keep only the namespace's latest checkpoint (the greatest id: puts may arrive out of
  -- order; with fencing its head), the writes of it and of its parent, and writes stored
  -- against newer ids whose checkpoint has not arrived yet
  local latest_e
  if fence == '1' then
    latest_e = enc(head_of())
  else
    latest_e = latest_of(ns_e)
  end
  local parent_e = enc(cp_field(redis.call('HGET', K_CP, ns_e .. latest_e), CP_PARENT))
  cid_e = latest_e
  for _, m in ipairs(redis.call('ZRANGE', K_CPNS, lo(ns_e), hi(ns_e), 'BYLEX')) do
    local ocid = string.sub(m, #ns_e + 1)
    if ocid ~= latest_e then drop_cp(ns_e, ocid, ocid == parent_e) end
  end
  local seen = {}
  for _, m in ipairs(GONE[K_WORD] and {} or redis.call('ZRANGE', K_WORD, lo(ns_e), hi(ns_e), 'BYLEX')) do
    local ocid = string.sub(m, #ns_e + 1, skip(m, #ns_e + 1) - 1)
    if ocid < latest_e and ocid ~= parent_e and not seen[ocid] then
      seen[ocid] = true
      drop_writes(ns_e, ocid)
    end
  end
  -- subgraph namespaces that ran under an older checkpoint of this namespace (their
  -- metadata "parents" names it) can never be resumed again: drop them whole
  local stale = {}
  for _, m in ipairs(redis.call('ZRANGE', K_CPNS, '-', '+', 'BYLEX')) do
    local p = skip(m, 1)
    local ons_e = string.sub(m, 1, p - 1)
    if ons_e ~= ns_e and not stale[ons_e] then
      local parents = cp_field(redis.call('HGET', K_CP, m), CP_PARENTS)
      for i = 1, #parents - 1, 2 do
        if parents[i] == ns then
          -- older than the latest and not its parent (a newer parent may be on its way)
          local pc = enc(parents[i + 1])
          if pc < cid_e and pc ~= parent_e then stale[ons_e] = true end
        end
      end
    end
  end
  for ons_e, _ in pairs(stale) do
    if META_FH == '1' then redis.call('HDEL', K_META, 'h' .. ons_e) end
    for _, m in ipairs(redis.call('ZRANGE', K_CPNS, lo(ons_e), hi(ons_e), 'BYLEX')) do
      drop_cp(ons_e, string.sub(m, #ons_e + 1), false)
    end
    for _, m in ipairs(GONE[K_WORD] and {} or redis.call('ZRANGE', K_WORD, lo(ons_e), hi(ons_e), 'BYLEX')) do
      drop_writes(ons_e, string.sub(m, #ons_e + 1, skip(m, #ons_e + 1) - 1))
    end
  end
  gc_blobs()
end
-- the keys the call did not access otherwise (see touch()): meta (check_format_put()) and cp
-- (store_cp()) always; blob when meta.b is set (the lost-key check read it, or blobs were
-- written); cp_ns, cp_id when the record was stored (not an identical retry), and then runs
-- and the slot index of runs when it names a run (link_run()), chain when the thread keeps
-- chain entries; latest-only mode reads and deletes more, but only leaves out what this list
-- leaves out
local untouched = {K_WR, K_WORD}
if META_B ~= '1' then untouched[#untouched + 1] = K_BLOB end
if not indexed then
  untouched[#untouched + 1] = K_CPNS
  untouched[#untouched + 1] = K_CPID
end
if not indexed or rec[CP_RUN_ID] == '' then
  untouched[#untouched + 1] = K_RUNS
  untouched[#untouched + 1] = K_IXR
end
if not indexed or META_NC == '1' then untouched[#untouched + 1] = K_CHAIN end
touch(untouched)
return cleaned
