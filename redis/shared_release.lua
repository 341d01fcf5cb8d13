-- shared_release.lua: end a shared hold, withdraw a waiter, keep a hold
-- for its MinHold, break every hold of the key, or set a semaphore's limit.
--
-- KEYS     lock, fence, holders, meta, queue, waiters (see shared_lib.lua)
-- ARGV[1]  owner    the hold's or the waiter's owner ("" for break)
-- ARGV[2]  channel  the key's pub/sub channel base, even from a Locker
--                   without pub/sub: the waiters of Lockers with pub/sub
--                   listen on it; "" publishes nothing
-- ARGV[3]  op       "release", "leave" (out of the line, and the hold
--                   given up if an attempt whose reply was lost took it),
--                   "keep", "break" or "limit"
-- ARGV[4]  ms       for keep: how long the hold stays, unrenewed; for
--                   limit: the semaphore's new limit
--
-- Returns n, or {n, 1} when the server refused a PUBLISH: n = 1 when there
-- was a hold (a waiter, for leave; a semaphore with holders or waiters, for
-- limit) to act on, 0 otherwise; for limit, 2 when the key is a read-write
-- lock and 3 when it is a plain lock.

local owner, op = ARGV[1], ARGV[3]

-- Fast path of a release that leaves nobody to wake (nobody waits) and
-- nothing to prune (no holder left, or the first to expire still live).
local released
if op == 'release' then
  released = redis.call('ZREM', KEYS[3], owner) == 1
  if released then
    local left = redis.call('EXISTS', KEYS[3], KEYS[5])
    if left == 0 then -- the last holder, and nobody waits
      redis.call('DEL', KEYS[4], KEYS[6])
      return 1
    end
    local first = left == 1 and redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    if first and first[1] then -- holders are left, so nobody waits
      local t = redis.call('TIME')
      if tonumber(first[2]) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
        redis.call('HDEL', KEYS[4], owner)
        return 1
      end
    end
  end
end

-- #include shared_lib.lua

local ms = math.floor(now_us() / 1000)
local changed, alive, recs = prune(ms)
local n = 0
if op == 'release' then
  if released then
    redis.call('HDEL', KEYS[4], owner)
    n, changed = 1, true
  end
elseif op == 'leave' then
  if redis.call('ZREM', KEYS[5], owner) == 1 then
    n, changed = 1, true
    for i, w in ipairs(alive) do
      if w == owner then
        table.remove(alive, i)
        table.remove(recs, i)
        break
      end
    end
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
elseif op == 'limit' then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    n = 3
  elseif redis.call('HGET', KEYS[4], ' kind') == 'rw' then
    n = 2
  elseif redis.call('EXISTS', KEYS[4]) == 1 then
    redis.call('HSET', KEYS[4], ' limit', ARGV[4])
    n, changed = 1, true
  end
elseif op == 'break' then
  local hs = redis.call('ZRANGE', KEYS[3], 0, -1)
  if #hs > 0 then
    each('HDEL', KEYS[4], hs)
    redis.call('DEL', KEYS[3])
    n, changed = 1, true
  end
end
tidy()
if changed then
  wake(ARGV[2], alive, recs, '')
end
if nopub then
  return { n, 1 }
end
return n
