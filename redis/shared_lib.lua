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
--                   line may have waiters; and " cut" -> "<id> <expiry ms>
--                   ...", tombstones of attempts that were cut (cut.go),
--                   of an owner or of a Locker (id, its lid)
-- KEYS[4]  queue    sorted set: waiting owners scored by arrival (server µs)
-- KEYS[5]  waiters  hash owner -> "<deadline ms> <mode> <weight> <lid>"
--
-- holds lives while the key has holders, waiters or tombstones: a script
-- that finds no holds finds no holder, no waiter and no tombstone. A hash
-- of records alone goes with its last record (Redis deletes an emptied
-- hash); a script that leaves one with nothing but fields of its own
-- deletes those, and so the hash unless it keeps a tombstone. It lives at
-- least until the last expiry or deadline it records, a tombstone's
-- included, so that a script that read those knows whether a PEXPIRE would
-- change anything. A tombstone is read only by the attempts of its owner,
-- or of its Locker, in the HGETALL they make anyway: an attempt on a free
-- key (no hash) reads none. " cut" goes once all its tombstones ended;
-- until then, the hash has no " kind" or " limit" unless it has holders or
-- waiters, so that the key may become a plain lock or get another limit.
-- The version before " cut" kept tombstones as strings of their own (see
-- cut.go); its scripts skip " cut" as any field of the hash's own, and
-- may delete it with a hash they find without holders or waiters.
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

-- live_tombs returns the tombstones of a " cut" record (nil: none) that
-- are live at ms, as "<id> <expiry>" strings, but for id skip's.
local function live_tombs(rec, ms, skip)
  local t = {}
  for id, e in string.gmatch(rec or '', '(%S+) (%d+)') do
    if tonumber(e) > ms and id ~= skip then
      t[#t + 1] = id .. ' ' .. e
    end
  end
  return t
end

-- prune drops the holders and waiters whose time ran out before ms, and
-- " cut" once its tombstones all ended. It returns whether it dropped any
-- holder or waiter, the line as line does, and the number of live holders.
local function prune(ms)
  local all = redis.call('HGETALL', KEYS[3])
  local gone, live, q, cut = {}, 0, false, false
  for i = 1, #all, 2 do
    local f = all[i]
    if f == ' q' then
      q = true
    elseif f == ' cut' then
      cut = #live_tombs(all[i + 1], ms) == 0
    elseif string.byte(f, 1) ~= 32 then
      local e = tonumber(string.match(all[i + 1], '^(%d+)'))
      if e and e > ms then
        live = live + 1
      else
        gone[#gone + 1] = f
      end
    end
  end
  local changed = #gone > 0
  if cut then
    gone[#gone + 1] = ' cut'
  end
  each('HDEL', KEYS[3], gone)
  local alive, recs, dropped = {}, {}, false
  if q then
    alive, recs, dropped = line(ms)
  end
  return changed or dropped, alive, recs, live
end

-- tidy deletes the key's shared state once it has neither holders (live
-- ones: the count prune returned) nor waiters, so that the key may become a
-- plain lock or get another limit; the hash stays while it keeps
-- tombstones. It drops the hash's " q" once the line is empty.
local function tidy(live)
  if redis.call('ZCARD', KEYS[4]) > 0 then
    return
  end
  if live == 0 then
    -- prune left no record: the hash's own fields are all it has, beside
    -- its tombstones.
    redis.call('HDEL', KEYS[3], ' kind', ' limit', ' q')
    redis.call('DEL', KEYS[4], KEYS[5])
  else
    redis.call('HDEL', KEYS[3], ' q')
  end
end
