--- _lib_values.lua: channel values: blob fields, encoded values and their streams, storing
--- values (validated in full before anything is written) and the blob garbage collection.
--- Included by _lib.lua after _lib_thread.lua (these "--- " notes are not sent).
--- It declares no KEYS/ARGV of its own: its helpers read the layout that _lib.lua declares in
--- its keys and state blocks (KEYS[1..11], the header ARGV[1..4]) for the script including it.
-- the blob field of a channel's version: e(ns)e(channel)..version
local function blob_field(ns_e, ch, ver)
  return ns_e .. enc(ch) .. ver
end

-- versions part (channel, version, ...) -> the blob fields of its versions and the channels, in
-- order (put validated the even number of parts)
local function blob_fields(ns_e, v)
  local fields, chans, n = {}, {}, 0
  for i = 1, #v - 1, 2 do
    n = n + 1
    chans[n] = v[i]
    fields[n] = blob_field(ns_e, v[i], v[i + 1])
  end
  return fields, chans
end

-- channel -> blob field, from a versions part
local function blob_field_map(ns_e, v)
  local fields, chans = blob_fields(ns_e, v)
  local by_ch = {}
  for i = 1, #chans do by_ch[chans[i]] = fields[i] end
  return by_ch
end

-- Encoded values (redis_saver/core/values.py). A blob record whose type part ends with "\31s" is a
-- stream record: its payload is a record [stream id, op, ...] and the value is the ops applied
-- to the bytes of that stream, which lives in the same blob hash as
--   e(ns)e(channel) "\0" sid            its directory: record [raw length, references,
--                                       next frame number, frame number, raw end, ...]
--   e(ns)e(channel) "\0" sid "\0" n     its frames: zstd frames of consecutive raw bytes
-- (no version starts with "\0", so these never meet a version's field). A record names one
-- stream, never another record: a read fetches, in the same call, each stream its records
-- name, at most MAX_FRAMES frames and its directory. "references" counts the stream records
-- that name the stream: dropping the last one drops the stream (drop_blobs()).
local STREAM_MARK = '\31s'
local MAX_FRAMES = 32
local STREAM_REC_MAX = 512  -- the client never writes a longer stream record

-- the stream id a blob record names, or nil (not a stream record)
local function stream_id(b)
  local _, e, a = string.find(b, '^(%d+),%d+;')
  if not e then return nil end
  a = tonumber(a)
  if a < 2 or string.sub(b, e + a - 1, e + a) ~= STREAM_MARK then return nil end
  local p = e + a + 1
  local l = tonumber(string.match(b, '^%d+', p))
  local semi = string.find(b, ';', p, true)
  if not l or not semi then fail('RS_BADARG', 'malformed stream record') end
  return string.sub(b, semi + 1, semi + l)
end

-- e(ns)e(channel) of a blob field e(ns)e(channel)version
local function blob_prefix_of(field)
  return string.sub(field, 1, skip(field, skip(field, 1)) - 1)
end

-- whether a blob field is a stream's directory or frame (e(ns)e(channel) "\0" ...), not a version
local function is_stream_part(field)
  return string.byte(field, skip(field, skip(field, 1))) == 0
end

-- the directory field of the stream that blob record b (at blob field f) names, or nil (no
-- record, or one that names no stream)
local function stream_of(f, b)
  local sid = b and #b <= STREAM_REC_MAX and stream_id(b)
  if sid then return blob_prefix_of(f) .. '\0' .. sid end
  return nil
end

-- stream_of() the record stored at blob field f (a long record is not read)
local function stored_stream(f)
  local n = redis.call('HSTRLEN', K_BLOB, f)
  if n == 0 or n > STREAM_REC_MAX then return nil end
  return stream_of(f, redis.call('HGET', K_BLOB, f))
end

-- The streams the client holds of the thread (get_tuple.lua ARGV from position `at`: n <= MAX_HELD,
-- then n pairs stream id, raw length), for fetch_streams(): held[stream id] = raw length; nil
-- when none (an absent count is none)
local MAX_HELD = 8
local function read_held(at)
  if #ARGV < at then return nil end
  local n = tonumber(ARGV[at])
  if n == nil or n < 0 or n > MAX_HELD or #ARGV ~= at + 2 * n then fail('RS_BADARG', 'bad held streams') end
  if n == 0 then return nil end
  local held = {}
  for i = at + 1, at + 2 * n, 2 do held[ARGV[i]] = ARGV[i + 1] end
  return held
end

-- {{sid, directory, frame, ...}, ...}: each stream the records blobs[i] (blob fields
-- fields[i], nil = none) name, once; nil when the thread is expiring. held (or nil): the raw
-- length (a string) of each stream the client holds, by stream id (read_held()). A stream is
-- append-only and a (thread, stream id) never comes back with other bytes, so the client's
-- copy is a prefix of what is stored: its entry then carries only the frames after that
-- prefix when the prefix ends where a frame ends (none when it is the whole stream, found
-- from the directory's first part without unpacking it), else every frame.
local function fetch_streams(fields, blobs, held)
  local dfields, sids, seen = {}, {}, {}
  for i = 1, #fields do
    local b = blobs[i]
    if b and #b <= STREAM_REC_MAX then
      local sid = stream_id(b)
      if sid and not seen[sid] then
        seen[sid] = true
        sids[#sids + 1] = sid
        dfields[#dfields + 1] = blob_prefix_of(fields[i]) .. '\0' .. sid
      end
    end
  end
  if #dfields == 0 then return {} end
  local dirs = hmget(K_BLOB, dfields)
  local out, ffields, owner = {}, {}, {}
  for j = 1, #dfields do
    local d = dirs[j]
    if not d then
      if damaged('the stream of a stored value is missing') then return nil end
    end
    out[j] = {sids[j], d}
    local have = held and held[sids[j]]
    local whole = false
    if have then
      -- the directory's first part, its raw length: "<#have>,...;" then these digits
      local semi, n = string.find(d, ';', 1, true), #have
      whole = semi ~= nil and string.find(d, n .. ',', 1, true) == 1 and string.sub(d, semi + 1, semi + n) == have
    end
    if not whole then
      local dir = unpack_rec(d)
      local from = 4
      if have then
        for k = 5, #dir, 2 do
          if dir[k] == have then from = k + 1 break end
        end
      end
      for k = from, #dir - 1, 2 do
        ffields[#ffields + 1] = dfields[j] .. '\0' .. dir[k]
        owner[#ffields] = j
      end
    end
  end
  local frames = hmget(K_BLOB, ffields)
  for k = 1, #ffields do
    if not frames[k] then
      if damaged('a frame of a stream is missing') then return nil end
    end
    local o = out[owner[k]]
    o[#o + 1] = frames[k]
  end
  return out
end

-- add n to the references of the stream directory dfield; at 0 the stream goes
local function stream_ref(dfield, n)
  if GONE[K_BLOB] then return end
  local d = redis.call('HGET', K_BLOB, dfield)
  if not d then return end
  local dir = unpack_rec(d)
  local refs = tonumber(dir[2]) + n
  if refs > 0 then
    dir[2] = tostring(refs)
    redis.call('HSET', K_BLOB, dfield, pack_rec(dir))
    return
  end
  local gone = {dfield}
  for k = 4, #dir - 1, 2 do gone[#gone + 1] = dfield .. '\0' .. dir[k] end
  for i = 1, #gone, 1000 do hdel(K_BLOB, unpack(gone, i, math.min(i + 999, #gone))) end
end

-- delete blob fields, and the streams no remaining record names
local function drop_blobs(fields)
  if GONE[K_BLOB] then return 0 end
  local unref = {}
  for _, f in ipairs(fields) do
    local d = stored_stream(f)
    if d then unref[d] = (unref[d] or 0) - 1 end
  end
  local k = 0
  for i = 1, #fields, 1000 do
    k = k + hdel(K_BLOB, unpack(fields, i, math.min(i + 999, #fields)))
  end
  for d, n in pairs(unref) do stream_ref(d, n) end
  return k
end

-- the stream appends' arguments (see plan_blobs()), checked before anything is read
local function check_stream_args(sargs)
  if #sargs % 5 ~= 0 then fail('RS_BADARG', 'bad stream append') end
  for k = 1, #sargs, 5 do
    local mode, base, len = sargs[k + 1], tonumber(sargs[k + 2]), tonumber(sargs[k + 3])
    if (mode ~= 'n' and mode ~= 'a' and mode ~= 'm') or not base or not len or len < base
        or (mode == 'n' and base ~= 0) or not string.find(sargs[k], '\0', 1, true) then
      fail('RS_BADARG', 'bad stream append')
    end
  end
end

-- A stream directory as plan_blobs() changes it, without unpacking its frame list: {raw length,
-- references (a number), next frame number (a number), frame count, the stored header's
-- lengths after the third (its frames: "" = none), the stored body after the third part, the
-- parts this call adds (frame number, raw end, ...)}. An append (the common case: one per put
-- of a growing channel) reads the first three parts and copies the rest as it is; a merge
-- reads the stored frames to delete them.
local function dir_view(cur)
  local _, e, a, b, c = string.find(cur, '^(%d+),(%d+),(%d+)')
  if not e then fail('RS_BADARG', 'malformed record') end
  local semi = string.find(cur, ';', e + 1, true)
  if not semi then fail('RS_BADARG', 'malformed record') end
  local p = semi + 1
  local q, r = p + a, p + a + b
  local rest_h = string.sub(cur, e + 2, semi - 1)  -- "" when the header ends after the third
  local nf = 0
  if rest_h ~= '' then nf = (select(2, string.gsub(rest_h, ',', ',')) + 1) / 2 end
  return {string.sub(cur, p, q - 1), tonumber(string.sub(cur, q, r - 1)), tonumber(string.sub(cur, r, r + c - 1)),
          nf, rest_h, string.sub(cur, r + c), {}}
end

-- the frame numbers of a directory view's stored frames (a merge deletes them)
local function dir_frames(dir)
  local out = {}
  if dir[5] == '' then return out end
  local parts = unpack_rec(dir[5] .. ';' .. dir[6])
  for j = 1, #parts - 1, 2 do out[#out + 1] = parts[j] end
  return out
end

-- the directory record of a view, with `more` references
local function dir_pack(dir, more)
  local len, refs, fn, add = dir[1], tostring(dir[2] + more), tostring(dir[3]), dir[7]
  local h = {#len, #refs, #fn}
  if dir[5] ~= '' then h[4] = dir[5] end
  for i = 1, #add do h[#h + 1] = #add[i] end
  return table.concat(h, ',') .. ';' .. len .. refs .. fn .. dir[6] .. table.concat(add)
end

-- Storing channel values (put.lua, rewrite.lua), validated in full before anything is written.
-- pairs = {blob field, blob record, ...}; sargs = the stream appends, 5 strings each (put.lua
-- ARGV: e(channel) "\0" sid, mode, base length, new length, frame). plan_blobs() returns what
-- apply_blobs() writes: the records that change (an identical one, a retry's, is left alone),
-- the references they add to streams and take from the streams of the records they replace,
-- and the appends those records need (an append no new record names is skipped); nil when such
-- an append's stream is gone or not at the length the client based it on.
-- plan_blobs() in two steps: blob_reads() sorts the records (and checks stream records' size)
-- and names the fields the plan reads, q; the caller may read them with more (put.lua: the blob
-- mark, in the same HMGET) and pass what came back, in order, as `got` (nil: plan_blobs reads)
local function blob_reads(pairs_)
  -- A record that names no stream is written as it comes: it can only replace the record of
  -- the same version (a retry writes the same bytes). A stream record is written only if it
  -- changes the field, and then counts a reference, and takes one from the stream of the
  -- stream record it replaces. (A plain record replacing a stream record of the same version,
  -- a re-put with compress switched off, leaves that stream one reference too many: it stays
  -- until the thread goes; no command per plain record is spent to spare that.)
  local writes = {}
  -- each stream record's field and the directory of the stream it names, read in one HMGET:
  -- the stored record (small: a stream record's, or a retry's identical bytes; a plain record
  -- of the same version only on a re-put with compress switched) and have[d] = the stored
  -- directory, false when there is none
  local sf, sb, sd, q = {}, {}, {}, {}
  for i = 1, #pairs_ - 1, 2 do
    local f, b = pairs_[i], pairs_[i + 1]
    local sid = stream_id(b)
    if not sid then
      writes[#writes + 1] = f
      writes[#writes + 1] = b
    else
      if #b > STREAM_REC_MAX then fail('RS_BADARG', 'stream record too long') end
      local d = blob_prefix_of(f) .. '\0' .. sid
      sf[#sf + 1], sb[#sb + 1], sd[#sd + 1] = f, b, d
      q[#q + 1] = f
      q[#q + 1] = d
    end
  end
  return {writes, sf, sb, sd, q}
end

local function plan_blobs(reads, got, sargs, ns_e)
  local writes, sf, sb, sd, q = reads[1], reads[2], reads[3], reads[4], reads[5]
  local refs, unrefs = {}, {}
  local have = {}
  if #q > 0 then
    got = got or hmget(K_BLOB, q)
    for j = 1, #sf do
      local f, b, d, cur = sf[j], sb[j], sd[j], got[2 * j - 1]
      if have[d] == nil then have[d] = got[2 * j] end
      if cur ~= b then
        writes[#writes + 1] = f
        writes[#writes + 1] = b
        refs[d] = (refs[d] or 0) + 1
        local od = stream_of(f, cur)
        if od then unrefs[od] = (unrefs[od] or 0) - 1 end
      end
    end
  end
  -- appends to one stream apply in order (a rewrite sends several): each checked against the
  -- stream as the appends before it leave it; dirs[d] = its directory view (dir_view()) as
  -- they leave it, gone[d] the stored frames a merge deletes; written once by apply_blobs()
  local appends, dirs, gone = {}, {}, {}
  for k = 1, #sargs - 4, 5 do
    local d = ns_e .. sargs[k]
    if refs[d] then
      local mode, base, len, frame = sargs[k + 1], sargs[k + 2], sargs[k + 3], sargs[k + 4]
      local dir = dirs[d]
      if mode == 'n' then
        if dir or have[d] then fail('RS_BADARG', 'stream id in use') end
        dirs[d] = {len, 0, 1, 1, '', '', {'0', len}}
        appends[#appends + 1] = {d, '0', frame}
      else
        if not dir then
          if not have[d] then return nil end
          dir = dir_view(have[d])
          dirs[d] = dir
        end
        if dir[1] ~= base then return nil end
        local fn = tostring(dir[3])
        if mode == 'm' then
          local g = gone[d] or {}
          for _, x in ipairs(dir_frames(dir)) do g[#g + 1] = d .. '\0' .. x end
          gone[d] = g
          dir[4], dir[5], dir[6], dir[7] = 1, '', '', {fn, len}
        else
          if dir[4] >= MAX_FRAMES then fail('RS_BADARG', 'stream has too many frames') end
          dir[4] = dir[4] + 1
          dir[7][#dir[7] + 1] = fn
          dir[7][#dir[7] + 1] = len
        end
        dir[1], dir[3] = len, dir[3] + 1
        appends[#appends + 1] = {d, fn, frame}
      end
    end
  end
  for d, _ in pairs(refs) do
    if not dirs[d] and not have[d] then return nil end
  end
  return {writes, refs, unrefs, appends, dirs, gone}
end

local function apply_blobs(plan)
  local writes, refs, unrefs, appends, dirs, gone = plan[1], plan[2], plan[3], plan[4], plan[5], plan[6]
  if #writes == 0 then return end
  mark_blobs()
  local args, added = {}, {}
  for d, dir in pairs(dirs) do
    args[#args + 1] = d
    args[#args + 1] = dir_pack(dir, refs[d] or 0)
    refs[d] = nil
    local add, set = dir[7], {}
    for j = 1, #add - 1, 2 do set[add[j]] = true end
    added[d] = set
  end
  -- a merge drops the stored frames it replaces; a frame this call appended and then merged
  -- away is never written
  for _, ap in ipairs(appends) do
    if added[ap[1]][ap[2]] then
      args[#args + 1] = ap[1] .. '\0' .. ap[2]
      args[#args + 1] = ap[3]
    end
  end
  for i = 1, #writes do args[#args + 1] = writes[i] end
  hset_all(K_BLOB, args)
  -- after the HSET (see "Slots that move" in _lib_thread.lua): the key keeps what it just got
  local del = {}
  for _, fs in pairs(gone) do
    for _, f in ipairs(fs) do del[#del + 1] = f end
  end
  for i = 1, #del, 1000 do redis.call('HDEL', K_BLOB, unpack(del, i, math.min(i + 999, #del))) end
  for d, n in pairs(refs) do stream_ref(d, n) end
  for d, n in pairs(unrefs) do stream_ref(d, n) end
end

-- Blob garbage collection. A blob e(ns)e(channel)version is referenced by the checkpoints
-- whose channel_versions name it. Deleting checkpoints records their blob fields as
-- candidates; gc_blobs() then drops the candidates that no checkpoint left in their
-- namespace references. The cost follows the deleted data plus that namespace's records,
-- and nothing is paid on the put path. GC (the @state block above): ns_e -> {field = true}.

local function gc_candidates(ns_e, rec)
  local fields = blob_fields(ns_e, rec[CP_VERSIONS])
  if #fields == 0 then return end
  local set = GC[ns_e]
  if not set then set = {} GC[ns_e] = set end
  for _, f in ipairs(fields) do set[f] = true end
end

-- the blob fields e(ns)e(channel)version a checkpoint references, from its chain entry
-- (e(parent), then "\1"e(channel)"\2"e(version) per channel: small, no payload copied), else
-- from its record (the chain key lost, e.g. evicted); none when neither exists
local function referenced_fields(ns_e, member, entry, out)
  if entry then
    local pos = skip(entry, 1)
    while pos <= #entry do
      local ch_end = skip(entry, pos + 1)
      local ver, after = dec(entry, ch_end + 1)
      out[#out + 1] = ns_e .. string.sub(entry, pos + 1, ch_end - 1) .. ver
      pos = after
    end
    return
  end
  local raw = redis.call('HGET', K_CP, member)
  if raw then
    for _, f in ipairs(blob_fields(ns_e, cp_field(raw, CP_VERSIONS))) do out[#out + 1] = f end
  end
end

-- the blob fields the checkpoints `members` (of namespace ns_e) reference, added to out: from
-- their chain entries, or their records in a thread that keeps none
local function refs_of(ns_e, members, out)
  if META_NC == '1' or GONE[K_CHAIN] then
    local raws = hmget(K_CP, members)
    for j = 1, #members do
      if raws[j] then
        for _, f in ipairs(blob_fields(ns_e, cp_field(raws[j], CP_VERSIONS))) do out[#out + 1] = f end
      end
    end
    return
  end
  local entries = hmget(K_CHAIN, members)
  for j, m in ipairs(members) do referenced_fields(ns_e, m, entries[j], out) end
end

local function gc_blobs()
  for ns_e, set in pairs(GC) do
    local members = {}
    if not GONE[K_CPNS] then members = redis.call('ZRANGE', K_CPNS, lo(ns_e), hi(ns_e), 'BYLEX') end
    local refs = {}
    refs_of(ns_e, members, refs)
    for _, f in ipairs(refs) do set[f] = nil end
    local gone = {}
    for f, _ in pairs(set) do gone[#gone + 1] = f end
    if #gone > 0 then drop_blobs(gone) end
  end
  GC = {}
end

