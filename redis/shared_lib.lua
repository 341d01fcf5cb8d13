-- shared_lib.lua: functions shared by shared_acquire.lua and
-- shared_release.lua, inserted where they say "-- #include shared_lib.lua"
-- (after their fast paths, so that those do not pay for defining the
-- functions). Both take the same KEYS, every name under the key's Cluster
-- hash tag:
--
-- KEYS[1]  lock     the plain lock's string (see lib.lua): only checked
-- KEYS[2]  fence    string: the last fencing token handed out for the key,
--                   by a plain lock or a shared hold
-- KEYS[3]  holds    hash: owner -> "<expiry ms> <mode> <weight> <token>
--                   <acquired ms> <kept 0|1> <label>", where mode is
--                   "permits:<limit>", "read" or "write"; and, once the key
--                   had waiters or a new limit, " kind" -> "permits" or
--                   "rw", " limit" -> the semaphore's limit ("0" for rw),
--                   which rule the records', and " q" -> "1" while the
--                   line may have waiters
-- KEYS[4]  queue    sorted set: waiting owners scored by arrival (server µs)
-- KEYS[5]  waiters  hash owner -> "<deadline ms> <mode> <weight> <lid>"
--
-- holds lives while the key has holders or waiters: a script that finds
-- no holds finds no holder and no waiter. A hash of records alone goes
-- with its last record (Redis deletes an emptied hash); one with fields of
-- its own is deleted by the script that leaves it with nothing else. It
-- lives at least until the last expiry or deadline it records, so that a
-- script that read those knows whether a PEXPIRE would change anything.
-- Every waiter sets " q", and only a script that found the line empty
-- removes it: without " q", the line is empty. " kind" and " limit" stay
-- until the hash goes: the version before the records carried the limit
-- wrote its records ("permits", no limit) with those fields, and deleted
-- a hash that its release left with two fields or fewer. Versions before
-- the holds hash kept the holders in a sorted set under the same name,
-- with their records in a second hash; each version's scripts fail on the
-- other's holders with WRONGTYPE, so that a mixed deployment never grants
-- twice.

-- #include token.lua
-- #include sharekind.lua

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
  q = q or redis.call('ZRANGE', KEYS[4], 0, -1)
  local recs = hmget(KEYS[5], q)
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
    each('ZREM', KEYS[4], dead)
    each('HDEL', KEYS[5], dead)
  end
  return alive, kept, #dead > 0
end

-- prune drops the holders and waiters whose time ran out before ms. It
-- returns whether it dropped any, the line as line does, and the number of
-- live holders.
local function prune(ms)
  local all = redis.call('HGETALL', KEYS[3])
  local gone, live, q = {}, 0, false
  for i = 1, #all, 2 do
    local f = all[i]
    if f == ' q' then
      q = true
    elseif string.byte(f, 1) ~= 32 then
      local e = tonumber(string.match(all[i + 1], '^(%d+)'))
      if e and e > ms then
        live = live + 1
      else
        gone[#gone + 1] = f
      end
    end
  end
  each('HDEL', KEYS[3], gone)
  local alive, recs, dropped = {}, {}, false
  if q then
    alive, recs, dropped = line(ms)
  end
  return #gone > 0 or dropped, alive, recs, live
end

-- tidy deletes the key's shared state once it has neither holders (live
-- ones: the count prune returned) nor waiters, so that the key may become a
-- plain lock or get another limit. It drops the hash's " q" once the line
-- is empty.
local function tidy(live)
  if redis.call('ZCARD', KEYS[4]) > 0 then
    return
  end
  if live == 0 then
    redis.call('DEL', KEYS[3], KEYS[4], KEYS[5])
  else
    redis.call('HDEL', KEYS[3], ' q')
  end
end
