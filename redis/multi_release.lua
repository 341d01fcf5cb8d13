-- multi_release.lua: release several locks, each as release.lua does when
-- nobody is queued for it.
--
-- KEYS     three names per lock (see lib.lua), grouped by kind: for n
--          locks, KEYS[i] is lock i's lock, KEYS[n+i] its queue and
--          KEYS[2n+i] its waiters (i from 1)
-- ARGV[2i-1], ARGV[2i]  owner and channel of lock i: the lock's pub/sub
--                       channel, "" to publish nothing
--
-- Returns one integer per lock: 1 when the lock was the owner's and is
-- released (deleted, and the first Locker recorded by a LockMulti woken,
-- see watch.lua), 2 when it was released but the server refused the
-- message, 0 when it was not the owner's (left alone), and 3 when it is
-- the owner's but has a queue: it is left held, for release.lua to hand
-- over.
--
-- Releasing n locks costs an MGET, an EXISTS per lock and a DEL; each
-- Locker woken adds an HKEYS, an HDEL and a PUBLISH. The script builds
-- no table but its reply: Lua's allocations cost the server as much as
-- its calls.
local n = #KEYS / 3
local vs = redis.call('MGET', unpack(KEYS, 1, n))

-- res[i] is -1 for a lock released whose waiters hash may record a
-- LockMulti to wake. vs[1..free] collects the locks to delete (vs[i] is
-- read before).
local res, free, wake = {}, 0, false
for i = 1, n do
  local owner, v = ARGV[2 * i - 1], vs[i]
  local m = #owner
  if not v or not (string.sub(v, 1, m) == owner and string.byte(v, m + 1) == 32) then
    res[i] = 0
  else
    -- EXISTS counts a name as often as it is given: 1 for the queue, 2
    -- for the waiters, 3 for both.
    local w = KEYS[2 * n + i]
    local e = redis.call('EXISTS', KEYS[n + i], w, w)
    if e % 2 == 1 then
      res[i] = 3
    else
      free = free + 1
      vs[free] = KEYS[i]
      res[i] = 1
      if e == 2 and ARGV[2 * i] ~= '' then
        res[i] = -1
        wake = true
      end
    end
  end
end
if free > 0 then
  redis.call('DEL', unpack(vs, 1, free))
end
if wake then
  -- #include watch.lua
  for i = 1, n do
    if res[i] == -1 then
      res[i] = wake_watcher(KEYS[2 * n + i], ARGV[2 * i]) and 1 or 2
    end
  end
end
return res
