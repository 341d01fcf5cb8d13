-- setdata.lua: replace the data of a held lock, keeping its owner, token,
-- label and time to live.
--
-- KEYS[1]  lock key (string "<owner> <token> <label>", the label followed
--          by a NUL byte and the data when there is data)
-- ARGV[1]  owner
-- ARGV[2]  data ("": none)
--
-- Returns 1 when the lock was the owner's and now carries ARGV[2], 0 when
-- it was not ours (gone, expired, or another owner's): nothing is written
-- then.
local v = redis.call('GET', KEYS[1])
local n = #ARGV[1]
if not (v and string.sub(v, 1, n) == ARGV[1] and string.byte(v, n + 1) == 32) then
  return 0
end
local cut = string.find(v, '\0', n + 2, true)
if cut then
  v = string.sub(v, 1, cut - 1)
end
if ARGV[2] ~= '' then
  v = v .. '\0' .. ARGV[2]
end
-- PTTL and PX, not KEEPTTL, which Redis 5 lacks.
-- (PTTL is -1 without an expiry, 0 under a millisecond.)
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then
  redis.call('SET', KEYS[1], v)
else
  redis.call('SET', KEYS[1], v, 'PX', math.max(ttl, 1))
end
return 1
