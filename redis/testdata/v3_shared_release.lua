-- testdata/v3_shared_release.lua: shared_release.lua of the hold records with the key's
-- kind and limit and tombstones of their own (commit e5c7e34), its
-- includes inserted, for TestSharedTombLayout.
-- shared_release.lua: end a shared hold, withdraw a waiter, keep a hold
-- for its MinHold, break every hold of the key, or set a semaphore's limit.
--
-- KEYS     lock, fence, holds, queue, waiters (see shared_lib.lua)
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
-- lock and 3 when it is a plain lock. A key held in the layout of an older
-- version fails with WRONGTYPE (see shared_lib.lua).

local owner, op = ARGV[1], ARGV[3]

-- Fast path of a release that leaves nobody to wake: the hash has no " q"
-- (nobody waits). Expired holders left behind wait for the next attempt.
-- A hash of holds alone, its last record gone, is gone: Redis deleted it.
-- One with fields of its own (a line's, or an older version's) is deleted
-- once they are all it has.
local released
if op == 'release' then
  released = redis.call('HDEL', KEYS[3], owner) == 1
  if released then
    local m = redis.call('HMGET', KEYS[3], ' kind', ' limit', ' q')
    if not m[3] then
      local own = (m[1] and 1 or 0) + (m[2] and 1 or 0)
      if own > 0 and redis.call('HLEN', KEYS[3]) <= own then
        redis.call('DEL', KEYS[3])
      end
      return 1
    end
  end
end

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

-- token.lua: the server clock and a key's fencing tokens, for lib.lua and
-- shared_lib.lua, inserted where they say "-- #include token.lua". Both
-- scripts pass the key's fence as KEYS[2]: a string, the last token handed
-- out for the key by a lock or a shared hold.

-- now_us returns the server clock in microseconds.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- next_token records the key's next fencing token in KEYS[2] (kept for
-- retention ms) and returns it, as a number and as a string: max(last token
-- + 1, now), now the server clock in microseconds. fence, when not nil, is
-- KEYS[2] as the script read it (false: absent), to read it no more.
local function next_token(now, retention, fence)
  local token = now
  if fence == nil then
    fence = redis.call('GET', KEYS[2])
  end
  local last = tonumber(fence)
  if last and last >= token then
    token = last + 1
  end
  local s = string.format('%d', token)
  redis.call('SET', KEYS[2], s, 'PX', retention)
  return token, s
end
-- sharekind.lua: shared_kind, inserted where a script says
-- "-- #include sharekind.lua" (acquire.lua, multi_acquire.lua and
-- shared_lib.lua).

-- shared_kind returns the kind ("permits" or "rw") and the limit of the
-- shared holds in hash key (see shared_lib.lua): the hash's own " kind"
-- and " limit", which a line and older versions set, else those in its
-- first hold record; nil when key has neither; "layout" when key is not
-- a hash (an older version's holders, a sorted set).
local function shared_kind(key)
  local all = redis.pcall('HGETALL', key)
  if all.err then
    return 'layout', ''
  end
  local kind, limit, rec
  for i = 1, #all, 2 do
    local f = all[i]
    if f == ' kind' then
      kind = all[i + 1]
    elseif f == ' limit' then
      limit = all[i + 1]
    elseif not rec and string.byte(f, 1) ~= 32 then
      rec = all[i + 1]
    end
  end
  if not kind and rec then
    local n = string.match(rec, '^%d+ permits:(%d+) ')
    if n then
      kind, limit = 'permits', limit or n
    else
      kind, limit = 'rw', '0'
    end
  end
  return kind, limit or ''
end

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

local ms = math.floor(now_us() / 1000)
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
