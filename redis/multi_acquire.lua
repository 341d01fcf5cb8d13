-- multi_acquire.lua: one attempt to take several locks, all or none.
--
-- KEYS     five names per lock, in the order of acquire.lua: lock, fence,
--          queue, waiters, meta (see lib.lua and shared_lib.lua)
-- ARGV[1]  label      human-readable holder name, recorded only
-- ARGV[2]  retention  milliseconds a fence key outlives the last acquisition
-- ARGV[3]  unfair     "1": a free key goes to the caller even when others
--                     wait; "0": a key with waiters counts as held
-- ARGV[2+2i], ARGV[3+2i]  owner and ttl (milliseconds) of lock i (from 1)
--
-- Returns {'held', i, pttl} when lock i is held by another owner (pttl in
-- milliseconds, 0 when unknown: a key with waiters), {'shared', i, kind,
-- limit} when it is held or awaited by shared holds, and otherwise a list
-- of the new fencing tokens, as strings, one per lock: then every lock is
-- its owner's. Only that last reply writes anything.
local n = #KEYS / 5
local unfair = ARGV[3] == '1'
for i = 0, n - 1 do
  local k = 5 * i
  if redis.call('EXISTS', KEYS[k + 1]) == 1 then
    return { 'held', i + 1, math.max(redis.call('PTTL', KEYS[k + 1]), 0) }
  end
  local sh = redis.call('HMGET', KEYS[k + 5], ' kind', ' limit')
  if sh[1] then
    return { 'shared', i + 1, sh[1], sh[2] }
  end
  if not unfair and redis.call('EXISTS', KEYS[k + 3]) == 1 then
    return { 'held', i + 1, 0 }
  end
end

-- Tokens as next_token in token.lua computes them, for each lock's fence.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tokens = {}
for i = 0, n - 1 do
  local k = 5 * i
  local token = now
  local last = tonumber(redis.call('GET', KEYS[k + 2]))
  if last and last >= token then
    token = last + 1
  end
  local s = string.format('%d', token)
  redis.call('SET', KEYS[k + 1], ARGV[4 + 2 * i] .. ' ' .. s .. ' ' .. ARGV[1], 'PX', ARGV[5 + 2 * i])
  redis.call('SET', KEYS[k + 2], s, 'PX', ARGV[2])
  tokens[i + 1] = s
end
return tokens
