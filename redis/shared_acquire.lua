-- shared_acquire.lua: one attempt to take a shared hold (semaphore permits,
-- or a read or write hold of a read-write lock).
--
-- KEYS     lock, fence, holds, queue, waiters (see shared_lib.lua)
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
--
-- While the holds hash has a live tombstone of the owner or of the
-- caller's Locker (" cut", see shared_lib.lua), the attempt writes nothing
-- and returns {'held', 0, 0}: it was cut (cut.go), and cleaned up after.
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local mode, limit = ARGV[5], ARGV[6]
-- The kind of key the caller wants, and the mode of its hold's record,
-- which carries a semaphore's limit.
local want, rmode = 'rw', mode
if mode == 'permits' then
  want, rmode = 'permits', 'permits:' .. limit
end

-- One read of the strings: the plain lock and the fence.
local got = redis.call('MGET', KEYS[1], KEYS[2])
if got[1] then
  return { 'plain' }
end

-- The holds hash lives while the key has holders, waiters or tombstones
-- (see shared_lib.lua): without it, the key is free, nobody waits, and no
-- attempt was cut.
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

-- The holders: live, those whose expiry is after ms (first: the earliest
-- of those expiries; last: the latest, or a live tombstone's); gone, the
-- others (tombstones that ended wait for a release's prune, or the hash's
-- expiry). The hold's fit beside the live ones; mine: the caller's record,
-- when a retried call already took the hold; rkind and rlimit: the kind
-- and limit in the live records.
local recs = {}
local live, gone, first, last = 0, {}, nil, 0
local used, write, mine, rkind, rlimit = 0, false, nil, nil, nil
for i = 1, #all, 2 do
  local f, rec = all[i], all[i + 1]
  recs[f] = rec
  if f == ' cut' then
    for id, e in string.gmatch(rec, '(%S+) (%d+)') do
      e = tonumber(e)
      if e > ms then
        if id == owner or id == ARGV[9] then
          return { 'held', 0, 0 }
        end
        if e > last then
          last = e
        end
      end
    end
  elseif string.byte(f, 1) ~= 32 then
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
    -- What is left of a key whose holders left unseen; its tombstones
    -- stay.
    redis.call('HDEL', KEYS[3], ' kind', ' limit', ' q')
    redis.call('DEL', KEYS[5])
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

-- #include shared_lib.lua

local changed = false
if #gone > 0 then
  each('HDEL', KEYS[3], gone)
  changed = true
end
local waiting, wrecs, dropped = line(ms, q)
changed = changed or dropped
if meta and live == 0 and #waiting == 0 then
  redis.call('HDEL', KEYS[3], ' kind', ' limit', ' q')
  redis.call('DEL', KEYS[4], KEYS[5])
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
