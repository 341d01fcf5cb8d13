-- shared_release.lua: end a shared hold, withdraw a waiter, keep a hold
-- for its MinHold, or break every hold of the key.
--
-- KEYS     lock, fence, holders, meta, queue, waiters (see shared_lib.lua)
-- ARGV[1]  owner    the hold's or the waiter's owner ("" for break)
-- ARGV[2]  channel  the key's pub/sub channel base; "" publishes nothing
-- ARGV[3]  op       "release", "leave" (out of the line, and the hold
--                   given up if an attempt whose reply was lost took it),
--                   "keep" or "break"
-- ARGV[4]  ms       for keep: how long the hold stays, unrenewed
--
-- Returns {n, nopub}: n = 1 when there was a hold (a waiter, for leave) to
-- act on, 0 otherwise; nopub = 1 when the server refused a PUBLISH.

-- #include shared_lib.lua

local owner, op = ARGV[1], ARGV[3]
local ms = math.floor(now_us() / 1000)
local changed = prune(ms)
local n = 0
if op == 'release' then
  if redis.call('ZREM', KEYS[3], owner) == 1 then
    redis.call('HDEL', KEYS[4], owner)
    n, changed = 1, true
  end
elseif op == 'leave' then
  if redis.call('ZREM', KEYS[5], owner) == 1 then
    n, changed = 1, true
  end
  redis.call('HDEL', KEYS[6], owner)
  if redis.call('ZREM', KEYS[3], owner) == 1 then
    redis.call('HDEL', KEYS[4], owner)
    n, changed = 1, true
  end
elseif op == 'keep' then
  local rec = redis.call('HGET', KEYS[4], owner)
  if rec and redis.call('ZSCORE', KEYS[3], owner) then
    local keep = tonumber(ARGV[4])
    local head, label = string.match(rec, '^(%S+ %d+ %d+ %d+) %d (.*)$')
    redis.call('HSET', KEYS[4], owner, head .. ' 1 ' .. label)
    redis.call('ZADD', KEYS[3], 'XX', ms + keep, owner)
    extend(KEYS[3], keep)
    extend(KEYS[4], keep)
    n = 1
  end
elseif op == 'break' then
  local hs = redis.call('ZRANGE', KEYS[3], 0, -1)
  if #hs > 0 then
    hdel(KEYS[4], hs)
    redis.call('DEL', KEYS[3])
    n, changed = 1, true
  end
end
tidy()
if changed then
  wake(ARGV[2])
end
return { n, nopub and 1 or 0 }
