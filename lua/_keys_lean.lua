-- _keys_lean.lua: the KEYS layout of a script's "+lean" variant, swapped in for the block
-- between "@keys-begin" and "@keys-end" of _lib.lua by devkit/luagen.py. Only the keys
-- put_writes writes when touch() has nothing to do (no ttl, thread indexed: the lean mark in wr):
--   KEYS[1] wr   KEYS[2] wr_ord
-- The other keys are nil: a lean script must return before anything would use them.
local K_WR, K_WORD = KEYS[1], KEYS[2]
local K_META, K_CP, K_CPNS, K_CPID, K_BLOB, K_RUNS, K_CHAIN, K_IXT, K_IXR, THREAD_KEYS
local LEAN = true
if #KEYS ~= 2 then fail('RS_BADARG', 'expected 2 keys (lean)') end
