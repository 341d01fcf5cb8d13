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
--
-- Releasing locks nobody waits for costs an MGET, two EXISTS and a DEL;
-- each Locker woken adds an HKEYS, an HDEL and a PUBLISH.
local n = #KEYS / 3
local locks = {}
for i = 1, n do
  locks[i] = KEYS[3 * i - 2]
end
local vs = redis.call('MGET', unpack(locks))

-- mine: the numbers of the caller's locks.
local res, mine = {}, {}
for i = 1, n do
  local owner, v = ARGV[2 * i - 1], vs[i]
  local m = #owner
  if v and string.sub(v, 1, m) == owner and string.byte(v, m + 1) == 32 then
    res[i] = 1
    mine[#mine + 1] = i
  else
    res[i] = 0
  end
end
if not mine[1] then
  return res
end

-- A lock with a queue is left for release.lua: one EXISTS for all queues,
-- and one per lock only when some queue exists.
local queues = {}
for j, i in ipairs(mine) do
  queues[j] = KEYS[3 * i - 1]
end
if redis.call('EXISTS', unpack(queues)) > 0 then
  local rest = {}
  for _, i in ipairs(mine) do
    if redis.call('EXISTS', KEYS[3 * i - 1]) == 1 then
      res[i] = 3
    else
      rest[#rest + 1] = i
    end
  end
  mine = rest
  if not mine[1] then
    return res
  end
end

local free = {}
for j, i in ipairs(mine) do
  free[j] = KEYS[3 * i - 2]
end
redis.call('DEL', unpack(free))

-- The waiters hashes that exist, which may record a LockMulti to wake
-- (none when the lock's channel is ""): EXISTS counts a name as often as
-- it is given, so with the j-th name of a group of four given 2^(j-1)
-- times, the bits of the count say which of the group exist.
local told = {}
for _, i in ipairs(mine) do
  if ARGV[2 * i] ~= '' then
    told[#told + 1] = i
  end
end
local woken = {}
for g = 1, #told, 4 do
  local names = {}
  for j = g, math.min(g + 3, #told) do
    local w = KEYS[3 * told[j]]
    for _ = 1, 2 ^ (j - g) do
      names[#names + 1] = w
    end
  end
  local bits = redis.call('EXISTS', unpack(names))
  for j = g, math.min(g + 3, #told) do
    if bits % 2 == 1 then
      woken[#woken + 1] = told[j]
    end
    bits = math.floor(bits / 2)
  end
end
if not woken[1] then
  return res
end

-- #include watch.lua

for _, i in ipairs(woken) do
  if not wake_watcher(KEYS[3 * i], ARGV[2 * i]) then
    res[i] = 2
  end
end
return res
