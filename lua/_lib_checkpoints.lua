--- _lib_checkpoints.lua: checkpoints and their writes: write fields, the copy guard, dropping
--- and storing a checkpoint with its chain entry, validating a record sent by the client, and
--- the replies of read scripts (tuple_replies). Included by _lib.lua last (these "--- " notes
--- are not sent).
--- It declares no KEYS/ARGV of its own: its helpers read the layout that _lib.lua declares in
--- its keys and state blocks (KEYS[1..11], the header ARGV[1..4]) for the script including it.
-- the write-hash field of a wr_ord member: prefix .. e(task_id)..idx8, i.e. the member
-- without its e(task_path) and its trailing e(channel)
local function wfield(prefix, member)
  local p = skip(member, #prefix + 1)
  return prefix .. string.sub(member, p, skip(member, p) + 7)
end

local function drop_writes(ns_e, cid_e)
  if GONE[K_WORD] then return end
  local prefix = ns_e .. cid_e
  local members = redis.call('ZRANGE', K_WORD, lo(prefix), hi(prefix), 'BYLEX')
  if #members == 0 then return end
  local fields = {}
  for i, m in ipairs(members) do fields[i] = wfield(prefix, m) end
  for i = 1, #members, 1000 do
    local j = math.min(i + 999, #members)
    hdel(K_WR, unpack(fields, i, j))
    zrem(K_WORD, unpack(members, i, j))
  end
end

-- The copy guard, meta field "g": set by a paged copy_thread of this thread (import.lua
-- "guard"), which checks it on every page; every change that removes or alters stored entries
-- (a checkpoint dropped or re-put with other bytes, a record's parent cleared, rewrite_values)
-- bumps it, so that copy starts again. Nothing is written while no copy set it.
local function bump_guard()
  if redis.call('HEXISTS', K_META, 'g') == 1 then redis.call('HINCRBY', K_META, 'g', 1) end
end

-- delete one checkpoint (record, indexes, blob refs, run link; writes unless keep_writes)
local function drop_cp(ns_e, cid_e, keep_writes)
  if GONE[K_CP] then return end
  local field = ns_e .. cid_e
  local raw = redis.call('HGET', K_CP, field)
  if not raw then return end
  bump_guard()
  local rec = cp_rec(raw, CP_RUN_ID)
  hdel(K_CP, field)
  if META_NC == '1' then redis.call('HINCRBY', K_META, 'n', -1) end
  if META_NC ~= '1' then hdel(K_CHAIN, field) end
  zrem(K_CPNS, field)
  zrem(K_CPID, cid_e .. ns_e)
  gc_candidates(ns_e, rec)
  if not keep_writes then drop_writes(ns_e, cid_e) end
  if rec[CP_RUN_ID] ~= '' then
    local run_e = enc(rec[CP_RUN_ID])
    zrem(K_RUNS, run_e .. ns_e .. cid_e)
    unlink_run_if_unused(run_e)
  end
end

-- A checkpoint's chain entry (K_CHAIN): e(parent id), then "\1"e(channel)"\2"e(version) per
-- channel of its versions record: what delta history reads of each ancestor. Kept only by
-- threads that an earlier format started (meta "nc" unset): since format 5 compresses the
-- checkpoint's bytes, its record is small enough to read instead, and a thread started by
-- format 5 keeps none (meta "nc" = "1"; ~300 bytes less per checkpoint). In an entry,
-- "\0\1" only occurs where a component ends and a channel name starts (inside e(), "\0" is
-- followed by "\255"), so one plain find of "\0\1"e(channel)"\2" locates a channel.
local function chain_entry(rec)
  local v = rec[CP_VERSIONS]
  local out = {enc(rec[CP_PARENT])}
  for i = 1, #v - 1, 2 do
    out[#out + 1] = '\1' .. enc(v[i]) .. '\2' .. enc(v[i + 1])
  end
  return table.concat(out)
end

-- store one checkpoint record (re-put of the same id replaces it, keeping its writes);
-- rec: the record's parts, as validate_record() returns them; entry: the chain entry when
-- the caller has it (put), else built from rec. Returns true when it wrote the indexes (false:
-- an identical retry, which only reads the record)
local function store_cp(ns_e, cid_e, raw, rec, entry)
  local field = ns_e .. cid_e
  local new = redis.call('HSETNX', K_CP, field, raw) == 1
  local old_run = ''
  if new and META_NC == '1' then redis.call('HINCRBY', K_META, 'n', '1') end
  if not new then
    local old = redis.call('HGET', K_CP, field)
    if old == raw then
      return false  -- an idempotent retry of the same put: nothing changes
    end
    bump_guard()
    old_run = cp_field(old, CP_RUN_ID)
    redis.call('HSET', K_CP, field, raw)
  end
  if META_NC ~= '1' then redis.call('HSET', K_CHAIN, field, entry or chain_entry(rec)) end
  -- (scores as strings: a Lua number is formatted for every call)
  redis.call('ZADD', K_CPNS, '0', field)
  redis.call('ZADD', K_CPID, '0', cid_e .. ns_e)
  if rec[CP_RUN_ID] ~= '' then link_run(enc(rec[CP_RUN_ID]), ns_e, cid_e) end
  -- a re-put under another run id: the old run's link goes after the new one is added (see
  -- "Slots that move" in _lib_thread.lua: the run keys may hold only the old link)
  if old_run ~= '' and old_run ~= rec[CP_RUN_ID] then
    local run_e = enc(old_run)
    zrem(K_RUNS, run_e .. ns_e .. cid_e)
    unlink_run_if_unused(run_e)
  end
  return true
end


-- a checkpoint record of any format, checked; returns its parts as cp_rec() does. Parts
-- 6, 7, 9, 10 (versions, filter, delta, parents) are arrays of strings, the others strings. An
-- array cmsgpack decodes holds 1..n in its array part, so "no key after n" (next) and n
-- strings is the whole check; a map is a table with a key that is not 1..n.
local function validate_record(raw)
  local rec
  if cp_is_mp(raw) then
    rec = cp_unpack(raw)
    for i = 1, CP_PARTS do
      local p = rec[i]
      if i == CP_VERSIONS or i == CP_FILTER or i == CP_DELTA or i == CP_PARENTS then
        if type(p) ~= 'table' then fail('RS_BADARG', 'checkpoint record part ' .. i .. ' must be an array') end
        local n = #p
        for j = 1, n do
          if type(p[j]) ~= 'string' then fail('RS_BADARG', 'checkpoint record part ' .. i .. ' must hold strings') end
        end
        if next(p, n > 0 and n or nil) ~= nil then
          fail('RS_BADARG', 'checkpoint record part ' .. i .. ' must be an array')
        end
      elseif type(p) ~= 'string' then
        fail('RS_BADARG', 'checkpoint record part ' .. i .. ' must be a string')
      end
    end
  else
    rec = cp_rec(raw)  -- an earlier format's (copy_thread of an old thread): its framing checked
  end
  if #rec[CP_VERSIONS] % 2 ~= 0 then fail('RS_BADARG', 'versions record must hold channel, version pairs') end
  return rec
end

-- put's checkpoint record, checked as validate_record() checks it; returns the parts put reads:
-- the parent (1) and run id (8), and every part of an earlier format's record. A format-6
-- record's shape is checked from its headers (cp_shape()) and only those two parts are copied:
-- put adds its versions (6) when it builds a chain entry from them (cp_field()). Bytes that
-- are not so shaped go to validate_record(), which names what is wrong.
local function put_record(raw)
  if cp_is_mp(raw) then
    local parent_end, run_at, run_end, nv = cp_shape(raw)
    if parent_end then
      if nv % 2 ~= 0 then fail('RS_BADARG', 'versions record must hold channel, version pairs') end
      return {mp_str_at(raw, 2, parent_end), [CP_RUN_ID] = mp_str_at(raw, run_at, run_end)}
    end
  end
  return validate_record(raw)
end

-- The replies for checkpoints items[i] = {ns_e, cid_e, record}: {record, {channel, k, ...},
-- {write records}}: the channels that hold a value ("5,0;empty" = none, redis_saver/core/codec.py
-- EMPTY_BLOB), each followed by the position k of its blob in the third result, so the client
-- neither parses the versions record nor skips empty ones; the writes in writes_sort_key order.
-- Third result: each blob the items hold once, in order of first use (consecutive checkpoints
-- share the blobs of the channels that did not change: the reply carries, and the client
-- decodes, each once). The blobs of all items are one
-- HMGET and their writes one more. Their sort members are one ZRANGE per item, or one in all
-- when `span` says the items are every checkpoint between the first and the last of their
-- namespace, newest first (a list page without a filter; any writes in that range of
-- checkpoints not in the page, e.g. early writes of a checkpoint not stored yet, are left out).
-- A blob or write that a lost key took raises RS_DAMAGED; nil = the thread is expiring.
-- Second result: the streams the items' blobs name (fetch_streams(), with held: the streams the
-- client holds).
local function tuple_replies(items, span, held)
  -- each distinct blob field once (consecutive checkpoints share the versions of the channels
  -- that did not change)
  -- memo[e(ns)][channel][version]: the position of that blob field in bfields (a page's
  -- checkpoints share most of their versions: the field is built once)
  local bfields, memo, bidx, bchans = {}, {}, {}, {}
  -- one checkpoint (get_tuple): its channels are distinct, so its fields are too, each blob k
  -- that of its k-th channel (bidx[1] = nil)
  if #items == 1 then bfields, bchans[1] = blob_fields(items[1][1], cp_field(items[1][3], CP_VERSIONS)) end
  for i = #items == 1 and 2 or 1, #items do
    local it = items[i]
    local v, ns_e = cp_field(it[3], CP_VERSIONS), it[1]
    local by_ch = memo[ns_e]
    if not by_ch then
      by_ch = {}
      memo[ns_e] = by_ch
    end
    local at, chans, n = {}, {}, 0
    for j = 1, #v - 1, 2 do
      local ch, ver = v[j], v[j + 1]
      n = n + 1
      chans[n] = ch
      local m = by_ch[ch]
      if not m then
        m = {}
        by_ch[ch] = m
      end
      local k = m[ver]
      if not k then
        k = #bfields + 1
        bfields[k] = blob_field(ns_e, ch, ver)
        m[ver] = k
      end
      at[n] = k
    end
    bidx[i], bchans[i] = at, chans
  end
  -- with the blobs, the blob mark (see "Lost keys" in _lib_thread.lua) of a thread that has one:
  -- a missing blob then needs no command of its own to tell lost from never stored (a channel
  -- with a version and no value, e.g. LangGraph's branch channels, has no blob field)
  local nb, mark = #bfields, nil
  if META_B == '1' and nb > 0 then bfields[nb + 1] = BLOB_MARK end
  local blobs = hmget(K_BLOB, bfields)
  if bfields[nb + 1] then
    mark = blobs[nb + 1] ~= false
    bfields[nb + 1], blobs[nb + 1] = nil, nil
  end
  local streams = fetch_streams(bfields, blobs, held)
  if not streams then return nil end
  local wfields, owner = {}, {}
  local ns_e = items[1][1]
  for i = 2, #items do
    if items[i][1] ~= ns_e then span = false end
  end
  if span and #items > 1 then
    local by_prefix = {}
    for i, it in ipairs(items) do by_prefix[ns_e .. it[2]] = i end
    local lower, upper = lo(ns_e .. items[#items][2]), hi(ns_e .. items[1][2])
    for _, m in ipairs(redis.call('ZRANGE', K_WORD, lower, upper, 'BYLEX')) do
      local prefix = string.sub(m, 1, skip(m, #ns_e + 1) - 1)
      local i = by_prefix[prefix]
      if i then
        wfields[#wfields + 1] = wfield(prefix, m)
        owner[#wfields] = i
      end
    end
  else
    for i, it in ipairs(items) do
      local prefix = it[1] .. it[2]
      for _, m in ipairs(redis.call('ZRANGE', K_WORD, lo(prefix), hi(prefix), 'BYLEX')) do
        wfields[#wfields + 1] = wfield(prefix, m)
        owner[#wfields] = i
      end
    end
  end
  local writes = hmget(K_WR, wfields)
  local out, checked, sent, sent_at = {}, false, {}, {}
  for i, it in ipairs(items) do
    local values, at, chans = {}, bidx[i], bchans[i]
    for c = 1, #chans do
      local k = at and at[c] or c
      local b = blobs[k]
      if b and b ~= EMPTY_BLOB then
        local s = sent_at[k]
        if not s then
          s = #sent + 1
          sent[s], sent_at[k] = b, s
        end
        values[#values + 1] = chans[c]
        values[#values + 1] = s
      elseif not b and not checked then
        if check_blob_missing(bfields[k], mark) then return nil end  -- nil: the thread is expiring
        checked = true
      end
    end
    out[i] = {it[3], values, {}}
  end
  for k = 1, #wfields do
    local w = out[owner[k]][3]
    if not writes[k] then
      if damaged('a write indexed in wr_ord is missing from wr') then return nil end
    end
    w[#w + 1] = writes[k]
  end
  return out, streams, sent
end
