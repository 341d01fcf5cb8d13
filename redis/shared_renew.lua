-- shared_renew.lua: extend a live, unkept shared hold's time to live.
--
-- KEYS[1]  holders  sorted set owner -> expiry (server ms), see shared_lib.lua
-- KEYS[2]  meta     hash owner -> "<mode> <weight> <token> <acquired ms> <kept> <label>"
-- ARGV[1]  owner
-- ARGV[2]  ttl      milliseconds
--
-- Returns 1 when the hold was live and now expires ARGV[2] ms from now, 0
-- when it was gone, expired, or kept for its MinHold.
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= ms then
  return 0
end
local rec = redis.call('HGET', KEYS[2], ARGV[1])
if not rec or string.match(rec, '^%S+ %d+ %d+ %d+ (%d)') ~= '0' then
  return 0
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', ms + ttl, ARGV[1])
for i = 1, 2 do
  if redis.call('PTTL', KEYS[i]) < ttl then
    redis.call('PEXPIRE', KEYS[i], ttl)
  end
end
return 1
