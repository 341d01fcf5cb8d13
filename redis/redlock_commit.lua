-- redlock_commit.lua: phase 2 of a Redlock acquisition, on each master
-- that granted phase 1: record the token the acquirer drew in the lock and
-- raise the master's fence to it, if the lock is still the owner's.
--
-- KEYS[1]  lock       string "<owner> <token> <label>", PX = TTL
-- KEYS[2]  fence      string: the highest fencing token this master has seen
-- ARGV[1]  owner
-- ARGV[2]  token      decimal
-- ARGV[3]  label
-- ARGV[4]  retention  milliseconds the fence key outlives this acquisition
-- ARGV[5]  mark       the attempt's mark (redlock_acquire.lua)
--
-- Returns 1 when the lock was the owner's, granted to this attempt, and
-- both are written; 0 when it was not (expired, another owner's, or taken
-- over by a later attempt): nothing is written then.
local v = redis.call('GET', KEYS[1])
local p = ARGV[1] .. ' ' .. ARGV[5] .. ' '
if not (v and string.sub(v, 1, #p) == p) then
  return 0
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl <= 0 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3], 'PX', pttl)
local last = redis.call('GET', KEYS[2])
if last and #last > #ARGV[2] or (last and #last == #ARGV[2] and last > ARGV[2]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
else
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[4])
end
return 1
