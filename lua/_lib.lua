-- _lib.lua: helpers prepended to every per-thread script by devkit/luagen.py
-- (after the script's #!lua line). Not a script of its own.
--
-- Per-thread scripts share one KEYS layout (redis_saver/keys.py spells the names):
--   KEYS[1] meta   KEYS[2] cp    KEYS[3] cp_ns   KEYS[4] cp_id   KEYS[5] blob
--   KEYS[6] wr     KEYS[7] wr_ord   KEYS[8] runs   KEYS[9] chain
--   KEYS[10] slot index: threads   KEYS[11] slot index: runs
-- and one ARGV header:
--   ARGV[1] storage format version   ARGV[2] thread id   ARGV[3] ttl in ms ("0" = none)
--   ARGV[4] "1" = refresh the thread's expiry (reads); writes always apply the ttl;
--           "f" = a read's forgetting variant (see "Lost keys")
-- A script keeps only the helpers ("local function" at column 0, up to the first "end" at
-- column 0) and one-name locals ("local NAME = ..." on one line) it uses: keep such locals'
-- right-hand sides free of effects, they may not run.
local function fail(code, msg)
  error({err = code .. ' ' .. msg})
end

-- @keys-begin: a script's "+lean" variant gets lua/_keys_lean.lua here instead (LEAN = true;
-- only wr and wr_ord: see put_writes.lua and devkit/luagen.py)
local K_META, K_CP, K_CPNS, K_CPID, K_BLOB, K_WR, K_WORD, K_RUNS, K_CHAIN, K_IXT, K_IXR =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local THREAD_KEYS = {K_META, K_CP, K_CPNS, K_CPID, K_BLOB, K_WR, K_WORD, K_RUNS, K_CHAIN}
local LEAN = false
if #KEYS ~= 11 then fail('RS_BADARG', 'expected 11 keys') end
-- @keys-end

-- order-preserving, self-delimiting component encoding (keys.enc)
local function enc(s)
  if not string.find(s, '\0', 1, true) then return s .. '\0' end  -- the common case, 4x faster
  return (string.gsub(s, '%z', '\0\255')) .. '\0'
end

-- @state-begin: the state of one call (with the @keys block). As an EVAL script, these lines
-- run on every call where they stand; in the function library (devkit/luagen.py
-- library()) their names are declared once and these lines run at the start of every call.
local FORMAT, THREAD_ID, TTL_MS, REFRESH = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
if TTL_MS == nil or TTL_MS < 0 then fail('RS_BADARG', 'bad ttl') end
local THREAD_E = enc(THREAD_ID)
-- the thread's meta fields, read once by check_format(): format, index state, pin flag, "1"
-- once a fenced put recorded a namespace head (meta field "h"..e(ns), see put.lua), and for
-- lost keys (see "Lost keys" below): "b" / "c" = the blob / chain mark was set, "wm" = the wr
-- mark is kept, "dmg" = a key of the thread was lost (what: earlier versions wrote it; the
-- thread is forgotten at its next call); "nc" = "1": the thread keeps no
-- chain entries (see chain_entry(): threads started by format 5 read their records instead)
-- and "n" counts its checkpoints instead (see "Lost keys"); "xp" = "1": the thread is being
-- written by copy_thread or the command-line tool's import / migrate, and reads answer as for
-- a thread that does not exist until its last call (see import.lua)
local META_V, META_IX, META_PIN, META_FH, META_B, META_DMG, META_C, META_WM = nil, nil, nil, nil, nil, nil, nil, nil
local META_NC, META_N, META_XP = nil, nil, nil
local GC = {}  -- blob collection candidates (see gc_blobs())
-- keys this call emptied or unlinked (GONE[key] = true), and the members or fields left in
-- the keys it removed from (see "Slots that move" in _lib_thread.lua)
local GONE, LEFT = {}, {}
-- @state-end

--- The helpers, by topic, in this order (a helper uses only those above it): records, the
--- thread as a whole, channel values, checkpoints and writes. luagen.py read_lib() puts each
--- file here (without these "--- " notes, which are not sent); a script keeps what it uses.
--- @include "_lib_records.lua"
--- @include "_lib_thread.lua"
--- @include "_lib_values.lua"
--- @include "_lib_checkpoints.lua"
