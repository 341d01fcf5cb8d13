-- testdata/v3_shared_acquire.lua: shared_acquire.lua of the hold records with the key's
-- kind and limit and tombstones of their own (commit e5c7e34), its
-- includes inserted, for TestSharedTombLayout.
-- shared_acquire.lua: one attempt to take a shared hold (semaphore permits,
-- or a read or write hold of a read-write lock).
--
-- KEYS     lock, fence, holds, queue, waiters (see shared_lib.lua); then,
--          for an attempt that may be cut (cut.go), the owner's tombstone:
--          while it exists, the attempt writes nothing and returns
--          {'held', 0, 0}
-- ARGV[1]  owner      random, unique to this hold, without spaces
-- ARGV[2]  ttl        milliseconds
-- ARGV[3]  label      human-readable holder name, recorded only
-- ARGV[4]  retention  milliseconds the fence key outlives the last grant
-- ARGV[5]  mode       "permits", "read" or "write"
-- ARGV[6]  limit      the semaphore's limit; "0" for read and write
-- ARGV[7]  weight     permits the hold takes; "1" for read and write
-- ARGV[8]  queue      "1": record the caller as waiting when refused
-- ARGV[9]  lid        the caller's Locker id, told when the line moves
-- ARGV[10] channel    the key's pub/sub channel base; "" publishes nothing
--
-- Returns one of:
--   token                       granted, with this fencing token (an
--                               integer), every PUBLISH accepted
--   {'ok', token, 1}            granted, with token (a string), but the
--                               server refused a PUBLISH
--   {'held', ms, nopub}         refused; the first holder ends in ms (0:
--                               unknown)
--   {'conflict', kind, limit}   the key is a semaphore ("permits") of limit,
--                               or a read-write lock ("rw"), unlike ARGV
--   {'plain'}                   the key is a plain lock
--   {'layout'}                  holds is not a hash: the key is held in the
--                               layout of an older version (a sorted set)
-- nopub is 1 when the server refused a PUBLISH, else 0.
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local mode, limit = ARGV[5], ARGV[6]
-- The kind of key the caller wants, and the mode of its hold's record,
-- which carries a semaphore's limit.
local want, rmode = 'rw', mode
if mode == 'permits' then
  want, rmode = 'permits', 'permits:' .. limit
end

-- One read of the strings: the plain lock, the fence, and the tombstone.
local got
if KEYS[6] then
  got = redis.call('MGET', KEYS[1], KEYS[2], KEYS[6])
  if got[3] then
    return { 'held', 0, 0 }
  end
else
  got = redis.call('MGET', KEYS[1], KEYS[2])
end
if got[1] then
  return { 'plain' }
end

-- The holds hash lives while the key has holders or waiters (see
-- shared_lib.lua): without it, the key is free, and nobody waits.
local all = redis.pcall('HGETALL', KEYS[3])
if all.err then
  return { 'layout' }
end

-- new_hold writes the caller's hold with its token (a string) at ms. Its
-- record carries the key's kind and limit (rmode), so that a hash of holds
-- alone needs no fields of its own, and Redis deletes it with its last
-- field.
local function new_hold(ms, s)
  redis.call('HSET', KEYS[3], owner, string.format('%d', ms + ttl) .. ' ' .. rmode .. ' ' .. ARGV[7] .. ' ' .. s .. ' ' .. string.format('%d', ms) .. ' 0 ' .. ARGV[3])
end

-- take_token is next_token (token.lua) without its definitions: the
-- fencing token at now (server µs), a number and a string, recorded in
-- the fence as got read it.
local function take_token(now)
  local token = now
  local fence = tonumber(got[2])
  if fence and fence >= token then
    token = fence + 1
  end
  local s = string.format('%d', token)
  redis.call('SET', KEYS[2], s, 'PX', ARGV[4])
  return token, s
end

local weight = tonumber(ARGV[7])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ms = math.floor(now / 1000)
if not all[1] and (mode ~= 'permits' or weight <= tonumber(limit)) then
  local token, s = take_token(now)
  new_hold(ms, s)
  redis.call('PEXPIRE', KEYS[3], ttl)
  return token
end

-- The holders: live, those whose expiry is after ms (first and last: the
-- earliest and the latest of those expiries); gone, the others. The hold's
-- fit beside the live ones; mine: the caller's record, when a retried call
-- already took the hold; rkind and rlimit: the kind and limit in the live
-- records.
local recs = {}
local live, gone, first, last = 0, {}, nil, 0
local used, write, mine, rkind, rlimit = 0, false, nil, nil, nil
for i = 1, #all, 2 do
  local f, rec = all[i], all[i + 1]
  recs[f] = rec
  if string.byte(f, 1) ~= 32 then
    local e, hm, w = string.match(rec, '^(%d+) (%S+) (%d+)')
    e = tonumber(e)
    if e and e > ms then
      live = live + 1
      if not first or e < first then
        first = e
      end
      if e > last then
        last = e
      end
      if f == owner then
        mine = rec
      end
      if hm == 'write' then
        write = true
      end
      if not rkind then
        rkind, rlimit = 'rw', '0'
        if hm ~= 'read' and hm ~= 'write' then
          rkind, rlimit = 'permits', string.match(hm, '^permits:(%d+)$')
        end
      end
      used = used + tonumber(w)
    else
      gone[#gone + 1] = f
    end
  end
end
-- The key's kind and limit: the hash's own, which a line (and older
-- versions) set, else its live records'.
local meta = recs[' kind'] or recs[' limit']
local kind, have = recs[' kind'] or rkind, recs[' limit'] or rlimit
local fits
if mode == 'write' then
  fits = live == 0
elseif mode == 'read' then
  fits = not write
else
  fits = used + weight <= tonumber(limit)
end
-- The line, only while the hash says it may have waiters.
local q = {}
if recs[' q'] then
  q = redis.call('ZRANGE', KEYS[4], 0, -1)
end

-- renew_mine sets the caller's own hold, which a retried call took
-- already, to expire ttl from ms, and returns its token (a string).
local function renew_mine()
  local head, s, rest = string.match(mine, '^%d+ (%S+ %d+) (%d+) (.*)$')
  redis.call('HSET', KEYS[3], owner, string.format('%d', ms + ttl) .. ' ' .. head .. ' ' .. s .. ' ' .. rest)
  return s
end

-- Fast path: no holder expired and nobody waits, so that nothing needs
-- pruning, nobody is ahead and nobody needs waking.
if #gone == 0 and #q == 0 then
  if meta and live == 0 then
    -- What is left of a key whose holders left unseen.
    redis.call('DEL', KEYS[3], KEYS[5])
    kind = nil
  end
  if kind and (kind ~= want or have ~= limit) then
    return { 'conflict', kind, have }
  end
  if mine then -- a retried call: the hold is the caller's already
    local s = renew_mine()
    if ms + ttl > last then
      redis.call('PEXPIRE', KEYS[3], ttl)
    end
    return tonumber(s)
  end
  if fits then
    local token, s = take_token(now)
    new_hold(ms, s)
    if ms + ttl > last then
      redis.call('PEXPIRE', KEYS[3], ttl)
    end
    return token
  end
  if ARGV[8] ~= '1' then
    return { 'held', first and first - ms or 0, 0 }
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

local changed = false
if #gone > 0 then
  each('HDEL', KEYS[3], gone)
  changed = true
end
local waiting, wrecs, dropped = line(ms, q)
changed = changed or dropped
if meta and live == 0 and #waiting == 0 then
  redis.call('DEL', KEYS[3], KEYS[4], KEYS[5])
  kind = nil
elseif #waiting == 0 and recs[' q'] then
  redis.call('HDEL', KEYS[3], ' q')
end

local function reply(status, v)
  if changed then
    wake(ARGV[10], waiting, wrecs, owner)
  end
  if status == 'ok' and not nopub then
    return tonumber(v)
  end
  return { status, v, nopub and 1 or 0 }
end

if kind and (kind ~= want or have ~= limit) then
  if changed then
    wake(ARGV[10], waiting, wrecs, owner)
  end
  return { 'conflict', kind, have }
end

if mine then -- a retried call: the hold is the caller's already
  local s = renew_mine()
  extend(KEYS[3], ttl)
  return reply('ok', s)
end

-- Is anybody ahead in line? Every earlier waiter for permits or a write
-- hold, and an earlier writer for a read hold.
local behind, queued = false, false
for i, w in ipairs(waiting) do
  if w == owner then
    queued = i
    break
  end
  if mode ~= 'read' or string.match(wrecs[i], '^%d+ (%S+)') == 'write' then
    behind = true
    break
  end
end

if fits and not behind then
  if queued then
    redis.call('ZREM', KEYS[4], owner)
    redis.call('HDEL', KEYS[5], owner)
    table.remove(waiting, queued)
    table.remove(wrecs, queued)
    changed = true -- the next in line may go
  end
  local _, s = take_token(now)
  new_hold(ms, s)
  extend(KEYS[3], ttl)
  return reply('ok', s)
end

local remaining = 0
if first then
  remaining = first - ms
end
if ARGV[8] == '1' then
  redis.call('ZADD', KEYS[4], 'NX', now, owner)
  redis.call('HSET', KEYS[5], owner, string.format('%d', ms + ttl) .. ' ' .. mode .. ' ' .. ARGV[7] .. ' ' .. ARGV[9])
  redis.call('HSET', KEYS[3], ' kind', want, ' limit', limit, ' q', '1')
  extend(KEYS[3], ttl)
  extend(KEYS[4], ttl)
  extend(KEYS[5], ttl)
end
return reply('held', remaining)
