-- shared_lib.lua: functions shared by shared_acquire.lua and
-- shared_release.lua, inserted where they say "-- #include shared_lib.lua"
-- (after their fast paths, so that those do not pay for defining the
-- functions). Both take the same KEYS, every name under the key's Cluster
-- hash tag:
--
-- KEYS[1]  lock     the plain lock's string (see lib.lua): only checked
-- KEYS[2]  fence    string: the last fencing token handed out for the key,
--                   by a plain lock or a shared hold
-- KEYS[3]  holders  sorted set: owner scored by its expiry (server ms)
-- KEYS[4]  meta     hash: " kind" -> "permits" or "rw", " limit" -> the
--                   semaphore's limit ("0" for rw), and owner ->
--                   "<mode> <weight> <token> <acquired ms> <kept 0|1> <label>"
-- KEYS[5]  queue    sorted set: waiting owners scored by arrival (server µs)
-- KEYS[6]  waiters  hash owner -> "<deadline ms> <mode> <weight> <lid>"
--
-- meta lives while the key has holders or waiters; all four go together.
-- Each key lives at least until the last expiry or deadline it records
-- (meta: of the holders and the waiters), so that a script that read those
-- knows whether a PEXPIRE would change anything. The holders never outlive
-- meta: a script that finds no meta finds no holder and no waiter.

-- #include token.lua

-- extend makes key live at least ms more milliseconds.
local function extend(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- nopub is set when the server refused a PUBLISH: the script's writes
-- stand, and it says so in its reply.
local nopub = false

-- wake tells the Lockers of the waiters at the head of the line (alive,
-- with their records recs, as line returns them) that they may go: "free"
-- on channel .. ':' .. lid. The head is the first waiter, and the read
-- waiters right behind a read waiter; the others are behind them, and the
-- head's grant wakes the next. It stops at stop, a caller still in line,
-- which knows what it saw. channel "" publishes nothing.
local function wake(channel, alive, recs, stop)
  if channel == '' then
    return
  end
  local seen = {}
  for i, w in ipairs(alive) do
    if w == stop then
      return
    end
    local m, lid = string.match(recs[i], '^%d+ (%S+) %d+ (%S+)$')
    if lid and not seen[lid] then
      seen[lid] = true
      local r = redis.pcall('PUBLISH', channel .. ':' .. lid, 'free')
      if type(r) == 'table' and r.err then
        nopub = true
      end
    end
    if m ~= 'read' then
      return
    end
  end
end

-- each runs cmd on key with the members or fields of list, in chunks:
-- unpack has a limit of a few thousand values.
local function each(cmd, key, list)
  for i = 1, #list, 1000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
  end
end

-- hmget returns the values of the fields of list in hash key, in chunks.
local function hmget(key, list)
  local vals = {}
  for i = 1, #list, 1000 do
    local got = redis.call('HMGET', key, unpack(list, i, math.min(i + 999, #list)))
    for j = 1, #got do
      vals[i + j - 1] = got[j]
    end
  end
  return vals
end

-- line drops the waiters of queue q (ZRANGE queue 0 -1, read if nil) whose
-- deadline passed before ms, or whose record is gone. It returns the
-- others in order, their records, and whether it dropped any.
local function line(ms, q)
  q = q or redis.call('ZRANGE', KEYS[5], 0, -1)
  local recs = hmget(KEYS[6], q)
  local alive, kept, dead = {}, {}, {}
  for i, w in ipairs(q) do
    local deadline = recs[i] and tonumber(string.match(recs[i], '^(%d+)'))
    if deadline and deadline > ms then
      alive[#alive + 1], kept[#kept + 1] = w, recs[i]
    else
      dead[#dead + 1] = w
    end
  end
  if #dead > 0 then
    each('ZREM', KEYS[5], dead)
    each('HDEL', KEYS[6], dead)
  end
  return alive, kept, #dead > 0
end

-- prune drops the holders and waiters whose time ran out before ms. It
-- returns whether it dropped any, and the line as line does.
local function prune(ms)
  local changed = false
  local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ms)
  if #gone > 0 then
    each('HDEL', KEYS[4], gone)
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ms)
    changed = true
  end
  local alive, recs, dropped = line(ms)
  return changed or dropped, alive, recs
end

-- tidy deletes the key's shared state once it has neither holders nor
-- waiters, so that the key may become a plain lock or get another limit.
local function tidy()
  if redis.call('ZCARD', KEYS[3]) == 0 and redis.call('ZCARD', KEYS[5]) == 0 then
    redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6])
  end
end
