#!lua
--- @include "_store_lib.lua"
--[[ store_rebuild: a page of the rebuild of one namespace's vector set (RedisStore
.rebuild_vector_sets), for a namespace that is out of sets (made before them or by a writer
with vector_sets=False, its set or count evicted or deleted, a vector the set could not hold).
KEYS[1] the shard's namespace index "<prefix>:store#{<shard tag>}:n": names the shard, whose
        other keys share its tag (see _store_lib.lua)
ARGV[1] store format, "<format>v" (a server with VADD), or "<format>vh<M>:<EF>": sets are
        made with those HNSW parameters, and a complete set made with others is made again
ARGV[2] e(ns)
ARGV[3] token: the rebuilder's (letters and digits, 1-64)
ARGV[4] "1": start a rebuild if none runs (join one that runs); "0": go on with the rebuild
        of token only
ARGV[5] budget: vectors a call adds at most (1-4096; the page stops after the item reaching it)
While rebuilding, the namespace's count in "c" reads "<elements> <token> <cursor>" (cursor: the
item sequence of k: the last page ended at, "-": none), which no search takes for a complete
set (vs_complete in store_read.lua: not a number); writers keep the set in step meanwhile
(_store_lib.lua st_vs_state / st_vs_save: they add and remove their items' elements and count
them, keeping the marker), so when the last page is in, the count equals VCARD: "c" gets the
plain count. Anything that makes the set incomplete meanwhile (its set or count evicted, a
writer without sets, a vector the set cannot hold) takes the namespace out (st_vs_drop), which
ends the rebuild. A page adds the vectors of the next items of k: in sequence order (VADD, as
st_vs_put; no VSIM); items put meanwhile get later sequences (next pages), or are written by
the writers.
Every argument is checked before the first write.
Returns: {status, token, elements}: status "done" [DONE] (the set is complete: searches use it),
"more" [MORE] (call again with "0" and the token returned: a rebuild started by another rebuilder is
joined), "ended" [ENDED] (the rebuild of token ended, the namespace is out of sets), "none" [NONE] (no items:
a namespace without a k: index gets a new set from its next put).
Errors: RS_BADARG, RS_SCHEMA
]]
st_check(ARGV[1])
if not ST_VS then st_fail('RS_BADARG', 'a rebuild needs vector sets (format "<format>v")') end
local base = st_base()
if #ARGV ~= 5 then st_fail('RS_BADARG', 'expected 5 arguments') end
local ens, token, start = ARGV[2], ARGV[3], ARGV[4]
if #token > 64 or not string.match(token, '^%w+$') then st_fail('RS_BADARG', 'bad token') end
if start ~= '0' and start ~= '1' then st_fail('RS_BADARG', 'bad start flag') end
local budget = st_int(ARGV[5], 'budget')
if budget < 1 or budget > 4096 then st_fail('RS_BADARG', 'budget must be 1-4096') end

local ck, sk, kk = base .. 'c', base .. 's:' .. ens, base .. 'k:' .. ens
local raw = redis.call('HGET', ck, ens)
if redis.call('EXISTS', kk) == 0 then
  local c0, rb0 = st_vs_count(raw)
  if raw and (not c0 or rb0) then st_vs_drop(base, ens) end  -- a rebuild's marker left: out
  return {'none', token, 0}
end
local vcard = redis.call('VCARD', sk)
local c, rb, hp = st_vs_count(raw)
if c and not rb then
  -- complete; with the parameters asked (none asked: any)
  if c == vcard and (ST_M == 4 or hp == string.format('h%d:%d:', ST_M, ST_EF)) then return {'done', token, vcard} end
  raw = nil  -- an incomplete set, or one made with other parameters: made again
end
local n, tok, cur
if raw and rb then
  tok, cur = string.match(rb, '^ (%w+) (%S+)$')
  n = c
  if n ~= vcard then n = nil end  -- evicted (set or count) mid-rebuild
end
if not n or (start == '0' and tok ~= token) then
  -- no rebuild, or one that lost its set; or another rebuilder's (this one's ended)
  if raw and not n then st_vs_drop(base, ens) end
  if start == '0' then return {'ended', token, 0} end
  redis.call('UNLINK', sk, base .. 't:' .. ens)  -- what an incomplete set left
  n, tok, cur, hp = 0, token, '-', nil
end
local st = {n = tonumber(n), hp = hp}
st.dims = st.n > 0 and redis.call('VDIM', sk) or nil
local page = redis.call('ZRANGE', kk, cur == '-' and '-inf' or '(' .. cur, '+inf', 'BYSCORE', 'LIMIT', 0, budget,
  'WITHSCORES')
local added, taken = 0, 0
for i = 1, #page, 2 do
  local ekey = page[i]
  local vecs = redis.call('HGETALL', base .. 'v:' .. ens .. ekey)
  for j = 2, #vecs, 2 do
    if not st_vs_fits(vecs[j], st.dims) then
      st_vs_drop(base, ens)
      return {'ended', tok, 0}
    end
    st.dims = #vecs[j] / 4
  end
  for j = 1, #vecs, 2 do
    local ep = st_vs_enc(vecs[j])
    st.n = st.n + st_vs_add(sk, st, vecs[j + 1], ekey .. ep)
    redis.call('SADD', base .. 't:' .. ens, ep)
  end
  cur = page[i + 1]
  taken = taken + 1
  added = added + #vecs / 2
  if added >= budget then break end
end
if taken == #page / 2 and taken < budget then  -- k: is done: the set holds every vector
  if redis.call('VCARD', sk) ~= st.n then
    st_vs_drop(base, ens)
    return {'ended', tok, 0}
  end
  redis.call('HSET', ck, ens, (st.n > 0 and st.hp or '') .. string.format('%d', st.n))
  return {'done', tok, st.n}
end
redis.call('HSET', ck, ens, (st.n > 0 and st.hp or '') .. string.format('%d %s %s', st.n, tok, cur))
return {'more', tok, st.n}
