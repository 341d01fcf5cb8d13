-- redlock_release.lua: compare-and-delete on one Redlock master.
--
-- KEYS[1]  lock   string "<owner> <token> <label>"
-- ARGV[1]  owner
--
-- Returns 1 when the lock was the owner's and is deleted, 0 when it was not
-- (gone, expired, or another owner's): the lock is left alone then.
local v = redis.call('GET', KEYS[1])
local n = #ARGV[1]
if v and string.sub(v, 1, n) == ARGV[1] and string.byte(v, n + 1) == 32 then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
