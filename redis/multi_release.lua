-- multi_release.lua: release several locks, each as release.lua does when
-- nobody is queued for it.
--
-- KEYS     three names per lock: lock, queue, waiters (see lib.lua)
-- ARGV[2i-1], ARGV[2i]  owner and channel of lock i (from 1): the
--                       lock's pub/sub channel, "" to publish nothing
--
-- Returns one integer per lock: 1 when the lock was the owner's and is
-- released (deleted, and the first Locker recorded by a LockMulti woken,
-- see watch.lua), 2 when it was released but the server refused the
-- message, 0 when it was not the owner's (left alone), and 3 when it is
-- the owner's but has a queue: it is left held, for release.lua to hand
-- over.

-- #include watch.lua

local n = #KEYS / 3
local locks = {}
for i = 0, n - 1 do
  locks[i + 1] = KEYS[3 * i + 1]
end
local vs = redis.call('MGET', unpack(locks))
local res, free = {}, {}
for i = 0, n - 1 do
  local k = 3 * i
  local owner = ARGV[2 * i + 1]
  local v = vs[i + 1]
  local m = #owner
  if not v or not (string.sub(v, 1, m) == owner and string.byte(v, m + 1) == 32) then
    res[i + 1] = 0
  else
    local e = redis.call('EXISTS', KEYS[k + 2], KEYS[k + 3])
    if e > 0 and redis.call('EXISTS', KEYS[k + 2]) == 1 then
      res[i + 1] = 3
    else
      free[#free + 1] = KEYS[k + 1]
      res[i + 1] = 1
      -- e > 0 here: no queue, so the waiters hash exists.
      if e > 0 and not wake_watcher(KEYS[k + 3], ARGV[2 * i + 2]) then
        res[i + 1] = 2
      end
    end
  end
end
if free[1] then
  redis.call('DEL', unpack(free))
end
return res
