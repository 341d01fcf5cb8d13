-- renew.lua: extend the lock's time to live if it is still held by the
-- owner.
--
-- KEYS[1]  lock key (string: "<owner> <token> <label>")
-- ARGV[1]  owner
-- ARGV[2]  ttl (milliseconds from now)
--
-- Returns 1 when the lock was ours and now expires ARGV[2] ms from now, 0
-- when it was not ours (gone, expired, or another owner's).
local v = redis.call('GET', KEYS[1])
local n = #ARGV[1]
if v and string.sub(v, 1, n) == ARGV[1] and string.byte(v, n + 1) == 32 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
