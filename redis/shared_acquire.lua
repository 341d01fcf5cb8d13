-- shared_acquire.lua: one attempt to take a shared hold (semaphore permits,
-- or a read or write hold of a read-write lock).
--
-- KEYS     lock, fence, holders, meta, queue, waiters (see shared_lib.lua);
--          then, for an attempt that may be cut (cut.go), the owner's
--          tombstone: while it exists, the attempt writes nothing and
--          returns {'held', 0, 0}
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
-- nopub is 1 when the server refused a PUBLISH, else 0.
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local mode, limit = ARGV[5], ARGV[6]
local want = 'rw'
if mode == 'permits' then
  want = 'permits'
end

-- One read of the strings: the plain lock, the fence, and the tombstone.
local got
if KEYS[7] then
  got = redis.call('MGET', KEYS[1], KEYS[2], KEYS[7])
  if got[3] then
    return { 'held', 0, 0 }
  end
else
  got = redis.call('MGET', KEYS[1], KEYS[2])
end
if got[1] then
  return { 'plain' }
end

-- new_hold writes the caller's hold with its token (a string) at ms:
-- its expiry in the holders, its record in meta, with the kind and the
-- limit unless kind says meta has them.
local function new_hold(ms, s, kind)
  redis.call('ZADD', KEYS[3], ms + ttl, owner)
  local rec = mode .. ' ' .. ARGV[7] .. ' ' .. s .. ' ' .. string.format('%d', ms) .. ' 0 ' .. ARGV[3]
  if kind then
    redis.call('HSET', KEYS[4], owner, rec)
  else
    redis.call('HSET', KEYS[4], ' kind', want, ' limit', limit, owner, rec)
  end
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

-- meta lives while the key has holders or waiters, and the holders do not
-- outlive it (see shared_lib.lua): without it, the key is free, and
-- nobody waits. A hold that fits an empty key is the caller's then.
local meta = redis.call('HGETALL', KEYS[4])
local weight = tonumber(ARGV[7])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ms = math.floor(now / 1000)
if not meta[1] and (mode ~= 'permits' or weight <= tonumber(limit)) then
  local token, s = take_token(now)
  new_hold(ms, s)
  redis.call('PEXPIRE', KEYS[3], ttl)
  redis.call('PEXPIRE', KEYS[4], ttl)
  return token
end
local recs = {}
for i = 1, #meta, 2 do
  recs[meta[i]] = meta[i + 1]
end
local kind, have = recs[' kind'], recs[' limit']

-- The rest of what the decision needs: the holders by expiry, and the
-- line (only when meta has a kind: the line has no waiters without it).
local zs = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
-- live: the holders whose expiry is after ms (first and last: the earliest
-- and the latest of those expiries); expired: whether others are left.
local live, expired, first, last = {}, false, nil, 0
for i = 1, #zs, 2 do
  local s = tonumber(zs[i + 1])
  if s <= ms then
    expired = true
  else
    live[#live + 1] = zs[i]
    first = first or s
    last = s
  end
end
-- The hold's fit beside the live holders; mine: the caller's record, when
-- a retried call already took the hold.
local used, write, mine = 0, false, nil
for _, h in ipairs(live) do
  local rec = recs[h]
  if rec then
    if h == owner then
      mine = rec
    end
    local hm, w = string.match(rec, '^(%S+) (%d+)')
    if hm == 'write' then
      write = true
    end
    used = used + tonumber(w)
  end
end
local fits
if mode == 'write' then
  fits = #live == 0
elseif mode == 'read' then
  fits = not write
else
  fits = used + weight <= tonumber(limit)
end
local q = {}
if kind then
  q = redis.call('ZRANGE', KEYS[5], 0, -1)
end

-- Fast path: no holder expired and nobody waits, so that nothing needs
-- pruning, nobody is ahead and nobody needs waking.
if not expired and #q == 0 then
  if kind and #live == 0 then
    -- What is left of a key whose holders expired unseen.
    redis.call('DEL', KEYS[4], KEYS[6])
    kind = nil
  end
  if kind and (kind ~= want or have ~= limit) then
    return { 'conflict', kind, have }
  end
  if mine then -- a retried call: the hold is the caller's already
    redis.call('ZADD', KEYS[3], 'XX', ms + ttl, owner)
    if ms + ttl > last then
      redis.call('PEXPIRE', KEYS[3], ttl)
      redis.call('PEXPIRE', KEYS[4], ttl)
    end
    return tonumber(string.match(mine, '^%S+ %d+ (%d+)'))
  end
  if fits then
    local token, s = take_token(now)
    new_hold(ms, s, kind)
    if ms + ttl > last then
      redis.call('PEXPIRE', KEYS[3], ttl)
      redis.call('PEXPIRE', KEYS[4], ttl)
    elseif not kind then
      redis.call('PEXPIRE', KEYS[4], last - ms)
    end
    return token
  end
  if ARGV[8] ~= '1' then
    return { 'held', first and first - ms or 0, 0 }
  end
end

-- #include shared_lib.lua

local changed = false
if expired then
  local gone = {}
  for i = 1, #zs, 2 do
    if tonumber(zs[i + 1]) <= ms then
      gone[#gone + 1] = zs[i]
    end
  end
  each('ZREM', KEYS[3], gone)
  each('HDEL', KEYS[4], gone)
  changed = true
end
local waiting, wrecs, dropped = line(ms, q)
changed = changed or dropped
if kind and #live == 0 and #waiting == 0 then
  redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6])
  kind = nil
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
  redis.call('ZADD', KEYS[3], 'XX', ms + ttl, owner)
  extend(KEYS[3], ttl)
  extend(KEYS[4], ttl)
  return reply('ok', string.match(mine, '^%S+ %d+ (%d+)'))
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
    redis.call('ZREM', KEYS[5], owner)
    redis.call('HDEL', KEYS[6], owner)
    table.remove(waiting, queued)
    table.remove(wrecs, queued)
    changed = true -- the next in line may go
  end
  local _, s = take_token(now)
  new_hold(ms, s)
  extend(KEYS[3], ttl)
  extend(KEYS[4], ttl)
  return reply('ok', s)
end

local remaining = 0
if first then
  remaining = first - ms
end
if ARGV[8] == '1' then
  redis.call('ZADD', KEYS[5], 'NX', now, owner)
  redis.call('HSET', KEYS[6], owner, string.format('%d', ms + ttl) .. ' ' .. mode .. ' ' .. ARGV[7] .. ' ' .. ARGV[9])
  redis.call('HSET', KEYS[4], ' kind', want, ' limit', limit)
  extend(KEYS[4], ttl)
  extend(KEYS[5], ttl)
  extend(KEYS[6], ttl)
end
return reply('held', remaining)
