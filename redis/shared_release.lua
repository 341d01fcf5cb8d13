-- shared_release.lua: end a shared hold, withdraw a waiter, keep a hold
-- for its MinHold, break every hold of the key, set a semaphore's limit,
-- or bury an attempt that was cut.
--
-- KEYS     lock, fence, holds, queue, waiters (see shared_lib.lua)
-- ARGV[1]  owner    the hold's or the waiter's owner ("" for break)
-- ARGV[2]  channel  the key's pub/sub channel base, even from a Locker
--                   without pub/sub: the waiters of Lockers with pub/sub
--                   listen on it; "" publishes nothing
-- ARGV[3]  op       "release", "leave" (out of the line, and the hold
--                   given up if an attempt whose reply was lost took it),
--                   "keep", "break", "limit", or "bury" (a tombstone of
--                   ARGV[5], then leave: see cut.go)
-- ARGV[4]  ms       for keep: how long the hold stays, unrenewed; for
--                   limit: the semaphore's new limit; for bury: how long
--                   the tombstone lives
-- ARGV[5]  id       for bury: the tombstone's id, the owner of the attempt
--                   that was cut or its Locker's id (see shared_lib.lua)
--
-- Returns n, or {n, 1} when the server refused a PUBLISH: n = 1 when there
-- was a hold (a waiter, for leave and bury; a semaphore with holders or
-- waiters, for limit) to act on, 0 otherwise; for limit, 2 when the key is
-- a read-write lock and 3 when it is a plain lock. A key held in the
-- layout of an older version fails with WRONGTYPE (see shared_lib.lua).

local owner, op = ARGV[1], ARGV[3]

-- Fast path of a release that leaves nobody to wake: the hash has no " q"
-- (nobody waits). Expired holders left behind wait for the next attempt.
-- A hash of holds alone, its last record gone, is gone: Redis deleted it.
-- One with fields of its own (a line's, or an older version's) loses them
-- once they are all it has, beside its tombstones.
local released
if op == 'release' then
  released = redis.call('HDEL', KEYS[3], owner) == 1
  if released then
    local m = redis.call('HMGET', KEYS[3], ' kind', ' limit', ' q', ' cut')
    if not m[3] then
      local own = (m[1] and 1 or 0) + (m[2] and 1 or 0)
      if own > 0 and redis.call('HLEN', KEYS[3]) <= own + (m[4] and 1 or 0) then
        redis.call('HDEL', KEYS[3], ' kind', ' limit')
      end
      return 1
    end
  end
end

-- #include shared_lib.lua

local ms = math.floor(now_us() / 1000)
if op == 'bury' then
  -- The tombstone first, beside the live ones, for as long as the
  -- attempt's request may still run; then the attempt's leave.
  local life = tonumber(ARGV[4])
  local t = live_tombs(redis.call('HGET', KEYS[3], ' cut'), ms, ARGV[5])
  t[#t + 1] = ARGV[5] .. ' ' .. string.format('%d', ms + life)
  redis.call('HSET', KEYS[3], ' cut', table.concat(t, ' '))
  extend(KEYS[3], life)
  op = 'leave'
end
local changed, alive, recs, live = prune(ms)
local n = 0
if op == 'release' then
  if released then
    n, changed = 1, true
  end
elseif op == 'leave' then
  if redis.call('ZREM', KEYS[4], owner) == 1 then
    n, changed = 1, true
    for i, w in ipairs(alive) do
      if w == owner then
        table.remove(alive, i)
        table.remove(recs, i)
        break
      end
    end
  end
  redis.call('HDEL', KEYS[5], owner)
  if redis.call('HDEL', KEYS[3], owner) == 1 then
    n, changed = 1, true
    live = live - 1
  end
elseif op == 'keep' then
  local rec = redis.call('HGET', KEYS[3], owner)
  local e, head, label
  if rec then
    e, head, label = string.match(rec, '^(%d+) (%S+ %d+ %d+ %d+) %d (.*)$')
  end
  if e and tonumber(e) > ms then
    local keep = tonumber(ARGV[4])
    redis.call('HSET', KEYS[3], owner, string.format('%d', ms + keep) .. ' ' .. head .. ' 1 ' .. label)
    extend(KEYS[3], keep)
    n = 1
  end
elseif op == 'limit' then
  local kind = shared_kind(KEYS[3])
  if redis.call('EXISTS', KEYS[1]) == 1 then
    n = 3
  elseif kind == 'rw' then
    n = 2
  elseif kind then
    -- The hash's own limit rules its records'.
    redis.call('HSET', KEYS[3], ' kind', 'permits', ' limit', ARGV[4])
    n, changed = 1, true
  end
elseif op == 'break' then
  if live > 0 then
    local all = redis.call('HKEYS', KEYS[3])
    local hs = {}
    for _, f in ipairs(all) do
      if string.byte(f, 1) ~= 32 then
        hs[#hs + 1] = f
      end
    end
    each('HDEL', KEYS[3], hs)
    n, changed, live = 1, true, 0
  end
end
tidy(live)
if changed then
  wake(ARGV[2], alive, recs, '')
end
if nopub then
  return { n, 1 }
end
return n
