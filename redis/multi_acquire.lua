-- multi_acquire.lua: one attempt to take several locks, all or none.
--
-- KEYS     five names per lock, in the order of acquire.lua: lock, fence,
--          queue, waiters, meta (see lib.lua and shared_lib.lua)
-- ARGV[1]  label      human-readable holder name, recorded only
-- ARGV[2]  retention  milliseconds a fence key outlives the last acquisition
-- ARGV[3]  unfair     "1": a free key goes to the caller even when others
--                     wait; "0": a key with waiters counts as held
-- ARGV[4]  lid        the caller's Locker id, or "": a failed attempt then
--                     records nothing. Otherwise it records the Locker in
--                     the waiters hash of the key it found held (field
--                     " watch <lid>"), so that the release that frees the
--                     key wakes it (release.lua, multi_release.lua)
-- ARGV[5]  stale      milliseconds a waiters hash created for a record
--                     lasts
-- ARGV[6]  unwatch    the numbers (from 1, each followed by a space) of
--                     the locks whose waiters hash may hold a record of
--                     ARGV[4] from an earlier attempt: a successful attempt
--                     removes them. "" for none
-- ARGV[5+2i], ARGV[6+2i]  owner and ttl (milliseconds) of lock i (from 1)
--
-- Returns {'held', i, pttl} when lock i is held by another owner (pttl in
-- milliseconds, 0 when unknown: a key with waiters), {'shared', i, kind,
-- limit} when it is held or awaited by shared holds, and otherwise a list
-- of the new fencing tokens, as strings, one per lock: then every lock is
-- its owner's. Only that last reply and the records of ARGV[4] write
-- anything.
--
-- Each lock is looked at in order: held, then shared holds, then waiters;
-- the first that stops the attempt is the reply. The usual attempts cost:
-- taking free keys, an MGET, an EXISTS, a TIME and two SETs per lock;
-- finding the first key held, an MGET, an HSET and one or two PTTLs.
local n = #KEYS / 5

-- Every lock and fence with one call.
local names = {}
for i = 0, n - 1 do
  names[2 * i + 1], names[2 * i + 2] = KEYS[5 * i + 1], KEYS[5 * i + 2]
end
local got = redis.call('MGET', unpack(names))

-- held: the first lock held (0: none); the locks before it are free, and
-- only their queues and shared holds can still stop the attempt.
local held = 0
for i = 1, n do
  if got[2 * i - 1] then
    held = i
    break
  end
end
local free = held == 0 and n or held - 1
if free > 0 then
  local others = {}
  for i = 0, free - 1 do
    others[2 * i + 1], others[2 * i + 2] = KEYS[5 * i + 3], KEYS[5 * i + 5]
  end
  if redis.call('EXISTS', unpack(others)) > 0 then
    for i = 0, free - 1 do
      local k = 5 * i
      local sh = redis.call('HMGET', KEYS[k + 5], ' kind', ' limit')
      if sh[1] then
        return { 'shared', i + 1, sh[1], sh[2] }
      end
      if ARGV[3] ~= '1' and redis.call('EXISTS', KEYS[k + 3]) == 1 then
        held = i + 1
        break
      end
    end
  end
end

if held > 0 then
  -- Record the caller's Locker with the key, unless it polls; a waiters
  -- hash it creates lasts twice the stale time (as enqueue's do).
  local k = 5 * (held - 1)
  local lid = ARGV[4]
  if lid ~= '' then
    redis.call('HSET', KEYS[k + 4], ' watch ' .. lid, '1')
    if redis.call('PTTL', KEYS[k + 4]) == -1 then
      redis.call('PEXPIRE', KEYS[k + 4], 2 * tonumber(ARGV[5]))
    end
  end
  local pttl = 0
  if got[2 * held - 1] then
    pttl = math.max(redis.call('PTTL', KEYS[k + 1]), 0)
  end
  return { 'held', held, pttl }
end

-- Tokens as next_token in token.lua computes them, for each lock's fence.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tokens = {}
for i = 0, n - 1 do
  local k = 5 * i
  local token = now
  local last = tonumber(got[2 * i + 2])
  if last and last >= token then
    token = last + 1
  end
  local s = string.format('%d', token)
  redis.call('SET', KEYS[k + 1], ARGV[7 + 2 * i] .. ' ' .. s .. ' ' .. ARGV[1], 'PX', ARGV[8 + 2 * i])
  redis.call('SET', KEYS[k + 2], s, 'PX', ARGV[2])
  tokens[i + 1] = s
end
if ARGV[4] ~= '' then
  for i in string.gmatch(ARGV[6], '(%d+) ') do
    redis.call('HDEL', KEYS[5 * tonumber(i) - 1], ' watch ' .. ARGV[4])
  end
end
return tokens
