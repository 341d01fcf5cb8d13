-- multi_release.lua: release several locks, each as release.lua does when
-- nobody is queued for it.
--
-- KEYS     three names per lock (see lib.lua), grouped by kind: for n
--          locks, KEYS[i] is lock i's lock, KEYS[n+i] its queue and
--          KEYS[2n+i] its waiters (i from 1)
-- ARGV[2i-1], ARGV[2i]  owner and channel of lock i: the lock's pub/sub
--                       channel, even without pub/sub (a LockMulti of a
--                       Locker with pub/sub may wait on it), "" to publish
--                       nothing
-- ARGV[2n+1]  next     the record of the releasing Locker's next wait
--                      (" watch <lid> <wid>", see multi_next.go), or "":
--                      the release records it, once, behind the others
--                      with the first lock where it woke a LockMulti
-- ARGV[2n+2]  stale    milliseconds a waiters hash created for it lasts
-- ARGV[2n+3]  defer    "1": wake nobody; a released lock whose waiters
--                      hash exists answers 6 instead, and its Locker
--                      wakes the first record later unless it takes the
--                      lock again first (multi_defer.go). Absent or "0":
--                      wake as above
--
-- Returns one integer per lock: 1 when the lock was the owner's and is
-- released (deleted, and the first Locker recorded by a LockMulti woken,
-- see watch.lua), 2 when it was released but the server refused the
-- message, 0 when it was not the owner's (left alone), and 3 when it is
-- the owner's but has a queue: it is left held, for release.lua to hand
-- over. 4 and 5 are 1 and 2 for the lock where the release recorded the
-- next wait ARGV[2n+1]. 6 is 1 for a lock whose wake-up is deferred
-- (ARGV[2n+3]).
--
-- Releasing locks nobody waits for costs an MGET, an EXISTS and a DEL;
-- an EXISTS per lock looked at for its queue and waiters, an HGETALL, an
-- HDEL and a PUBLISH per Locker woken, and an HSET and a PTTL for the next
-- wait it records (and a PEXPIRE when the hash has less than the stale time
-- left), come
-- on top. The script builds no table of its own but its
-- reply: a Lua allocation costs the server about as much as a call.
local n = #KEYS / 3
local vs = redis.call('MGET', unpack(KEYS, 1, n))

-- The caller's locks (res[i] = 1, the others 0).
local res, mine = {}, 0
for i = 1, n do
  local owner, v = ARGV[2 * i - 1], vs[i]
  local m = #owner
  if v and string.sub(v, 1, m) == owner and string.byte(v, m + 1) == 32 then
    res[i] = 1
    mine = mine + 1
  else
    res[i] = 0
  end
end
if mine == 0 then
  return res
end

-- left: how many queues and waiters hashes of the caller's locks exist
-- and are not looked at yet; -1 when unknown (not every lock is the
-- caller's). Each lock is looked at until none is left: a release nobody
-- waits for costs one EXISTS.
local left = -1
if mine == n then
  left = redis.call('EXISTS', unpack(KEYS, n + 1, 3 * n))
end

-- res[i] becomes -1 for a lock released whose waiters hash may record a
-- LockMulti to wake, 3 for a lock with a queue. vs[1..free] collects the
-- locks to delete (vs[i] is read before).
local free, wake = 0, false
local defer = ARGV[2 * n + 3] == '1'
for i = 1, n do
  if res[i] == 1 then
    local e = 0
    if left ~= 0 then
      -- EXISTS counts a name as often as it is given: 1 for the queue, 2
      -- for the waiters, 3 for both.
      local w = KEYS[2 * n + i]
      e = redis.call('EXISTS', KEYS[n + i], w, w)
      if left > 0 then
        left = left - e % 2 - math.floor(e / 2)
      end
    end
    if e % 2 == 1 then
      res[i] = 3
    else
      free = free + 1
      vs[free] = KEYS[i]
      if e == 2 and ARGV[2 * i] ~= '' then
        if defer then
          res[i] = 6
        else
          res[i] = -1
          wake = true
        end
      end
    end
  end
end
if free > 0 then
  redis.call('DEL', unpack(vs, 1, free))
end
if wake then
  -- #include watch.lua
  local rec = ARGV[2 * n + 1]
  for i = 1, n do
    if res[i] == -1 then
      local w = KEYS[2 * n + i]
      local sent, woke, kept = wake_watcher(w, ARGV[2 * i], rec ~= '')
      res[i] = sent and 1 or 2
      if woke and rec ~= '' then
        -- When " watched" stayed (kept), the record alone is new;
        -- otherwise HSET adds " watched" too, and the hash may be new.
        -- Either way the hash then lasts at least the stale time more, as
        -- in multi_acquire.lua.
        if kept then
          redis.call('HSET', w, rec, '1')
        else
          redis.call('HSET', w, rec, '1', ' watched', '1')
        end
        local stale = tonumber(ARGV[2 * n + 2])
        if redis.call('PTTL', w) < stale then
          redis.call('PEXPIRE', w, 2 * stale)
        end
        res[i] = res[i] + 3
        rec = ''
      end
    end
  end
end
return res
