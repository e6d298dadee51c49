#!lua flags=allow-oom
--- @include "_store_lib.lua"
--[[ store_delete: a store batch's deletes on one shard when it has no other write (RedisStore
.delete), in one call; it only frees memory, so it runs when Redis is out of memory.
KEYS[1] the shard's namespace index "<prefix>:store#{<shard tag>}:n": names the shard, whose
        other keys share its tag (see _store_lib.lua)
ARGV[1] store format   ARGV[2] number of deletes, then e(ns) e(key) for each
ARGV[1] "<format>v" (a server with VADD): the namespaces' vector sets lose the items' elements.
Every argument is checked before the first delete; the shard's version token "w" is bumped
and the deleted items logged in its change log "l" (_store_lib.lua st_bump: a few bytes a
deleted item, trimmed to CHANGE_LOG, while the item's keys are freed).
Returns: the number of deletes.
Errors: RS_BADARG, RS_SCHEMA
]]
st_check(ARGV[1])
local base = st_base()
local n = st_int(ARGV[2], 'delete count')
if #ARGV ~= 2 + 2 * n then st_fail('RS_BADARG', 'expected ' .. n .. ' (namespace, key) pairs') end
local touched, changed = {}, {}
local vs = {}
for i = 3, #ARGV, 2 do
  local ens, ekey = ARGV[i], ARGV[i + 1]
  local st = ST_VS and st_vs_state(base, ens, vs, false)
  if st then st_vs_remove(base, ens, ekey, st) end
  redis.call('DEL', base .. 'i:' .. ens .. ekey, base .. 'v:' .. ens .. ekey)
  redis.call('ZREM', base .. 'k:' .. ens, ekey)
  redis.call('ZREM', base .. 'e:' .. ens, ekey)
  touched[ens] = true
  changed[ens .. ekey] = true
end
for ens in pairs(touched) do st_ns_expiry(base, ens) end
if ST_VS then st_vs_save(base, vs) end
st_bump(base, changed)
return n
