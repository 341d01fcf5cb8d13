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
--                     key wakes it (release.lua), and a successful one
--                     removes the Locker's records from every key
-- ARGV[5]  stale      milliseconds a waiters hash created for a record
--                     lasts
-- ARGV[6]  unwatch    "1": a successful attempt removes the records of
--                     ARGV[4] (an earlier attempt may have made one)
-- ARGV[5+2i], ARGV[6+2i]  owner and ttl (milliseconds) of lock i (from 1)
--
-- Returns {'held', i, pttl} when lock i is held by another owner (pttl in
-- milliseconds, 0 when unknown: a key with waiters), {'shared', i, kind,
-- limit} when it is held or awaited by shared holds, and otherwise a list
-- of the new fencing tokens, as strings, one per lock: then every lock is
-- its owner's. Only that last reply and the records of ARGV[4] write
-- anything.
local n = #KEYS / 5
local unfair = ARGV[3] == '1'
local lid = ARGV[4]

-- watch records the caller's Locker in the waiters hash w.
local function watch(w)
  if lid ~= '' then
    redis.call('HSET', w, ' watch ' .. lid, '1')
    if redis.call('PTTL', w) == -1 then
      redis.call('PEXPIRE', w, 2 * tonumber(ARGV[5]))
    end
  end
end

-- One call when every key is free: no lock, no queue, no shared holds.
local names = {}
for i = 0, n - 1 do
  local k = 5 * i
  names[3 * i + 1], names[3 * i + 2], names[3 * i + 3] = KEYS[k + 1], KEYS[k + 3], KEYS[k + 5]
end
if redis.call('EXISTS', unpack(names)) > 0 then
  for i = 0, n - 1 do
    local k = 5 * i
    if redis.call('EXISTS', KEYS[k + 1]) == 1 then
      watch(KEYS[k + 4])
      return { 'held', i + 1, math.max(redis.call('PTTL', KEYS[k + 1]), 0) }
    end
    local sh = redis.call('HMGET', KEYS[k + 5], ' kind', ' limit')
    if sh[1] then
      return { 'shared', i + 1, sh[1], sh[2] }
    end
    if not unfair and redis.call('EXISTS', KEYS[k + 3]) == 1 then
      watch(KEYS[k + 4])
      return { 'held', i + 1, 0 }
    end
  end
end

-- Tokens as next_token in token.lua computes them, for each lock's fence.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fences = {}
for i = 0, n - 1 do
  fences[i + 1] = KEYS[5 * i + 2]
end
local last = redis.call('MGET', unpack(fences))
local tokens = {}
for i = 0, n - 1 do
  local k = 5 * i
  local token = now
  local l = tonumber(last[i + 1])
  if l and l >= token then
    token = l + 1
  end
  local s = string.format('%d', token)
  redis.call('SET', KEYS[k + 1], ARGV[7 + 2 * i] .. ' ' .. s .. ' ' .. ARGV[1], 'PX', ARGV[8 + 2 * i])
  redis.call('SET', KEYS[k + 2], s, 'PX', ARGV[2])
  if lid ~= '' and ARGV[6] == '1' then
    redis.call('HDEL', KEYS[k + 4], ' watch ' .. lid)
  end
  tokens[i + 1] = s
end
return tokens
