-- shared_acquire.lua: one attempt to take a shared hold (semaphore permits,
-- or a read or write hold of a read-write lock).
--
-- KEYS     lock, fence, holders, meta, queue, waiters (see shared_lib.lua)
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
--   {'ok', token, nopub}        granted with fencing token (a string)
--   {'held', ms, nopub}         refused; the first holder ends in ms (0:
--                               unknown)
--   {'conflict', kind, limit}   the key is a semaphore ("permits") of limit,
--                               or a read-write lock ("rw"), unlike ARGV
--   {'plain'}                   the key is a plain lock
-- nopub is 1 when the server refused a PUBLISH, else 0.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return { 'plain' }
end

-- #include shared_lib.lua

local owner, ttl, label = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local mode, limit, weight = ARGV[5], ARGV[6], tonumber(ARGV[7])
local want = 'rw'
if mode == 'permits' then
  want = 'permits'
end
local now = now_us()
local ms = math.floor(now / 1000)
local changed = prune(ms)
tidy()

local function reply(status, v)
  if changed then
    wake(ARGV[10])
  end
  return { status, v, nopub and 1 or 0 }
end

local kind = redis.call('HGET', KEYS[4], ' kind')
if kind then
  local have = redis.call('HGET', KEYS[4], ' limit')
  if kind ~= want or have ~= limit then
    if changed then
      wake(ARGV[10])
    end
    return { 'conflict', kind, have }
  end
end

-- A retried call: the hold is the caller's already.
local rec = redis.call('HGET', KEYS[4], owner)
if rec and redis.call('ZSCORE', KEYS[3], owner) then
  redis.call('ZADD', KEYS[3], 'XX', ms + ttl, owner)
  extend(KEYS[3], ttl)
  extend(KEYS[4], ttl)
  return reply('ok', string.match(rec, '^%S+ %d+ (%d+)'))
end

-- Does the hold fit beside the holders?
local used, write, n = 0, false, 0
for _, h in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  local r = redis.call('HGET', KEYS[4], h)
  if r then
    local m, w = string.match(r, '^(%S+) (%d+)')
    if m == 'write' then
      write = true
    end
    used = used + tonumber(w)
  end
  n = n + 1
end
local fits
if mode == 'write' then
  fits = n == 0
elseif mode == 'read' then
  fits = not write
else
  fits = used + weight <= tonumber(limit)
end

-- Is anybody ahead in line? Every earlier waiter for permits or a write
-- hold, and an earlier writer for a read hold.
local behind, queued = false, false
for _, q in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
  if q == owner then
    queued = true
    break
  end
  local r = redis.call('HGET', KEYS[6], q)
  if mode ~= 'read' or (r and string.match(r, '^%d+ (%S+)') == 'write') then
    behind = true
    break
  end
end

if fits and not behind then
  if queued then
    redis.call('ZREM', KEYS[5], owner)
    redis.call('HDEL', KEYS[6], owner)
    changed = true -- the next in line may go
  end
  local _, s = next_token(now, ARGV[4])
  redis.call('ZADD', KEYS[3], ms + ttl, owner)
  redis.call('HSET', KEYS[4], ' kind', want, ' limit', limit,
    owner, mode .. ' ' .. ARGV[7] .. ' ' .. s .. ' ' .. string.format('%d', ms) .. ' 0 ' .. label)
  extend(KEYS[3], ttl)
  extend(KEYS[4], ttl)
  return reply('ok', s)
end

local remaining = 0
local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if first[2] then
  remaining = math.max(tonumber(first[2]) - ms, 0)
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
