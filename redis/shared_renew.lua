-- shared_renew.lua: extend a live, unkept shared hold's time to live.
--
-- KEYS[1]  holds  hash owner -> "<expiry ms> <mode> <weight> <token>
--                 <acquired ms> <kept> <label>", see shared_lib.lua
-- ARGV[1]  owner
-- ARGV[2]  ttl    milliseconds
--
-- Returns 1 when the hold was live and now expires ARGV[2] ms from now, 0
-- when it was gone, expired, or kept for its MinHold.
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HGET', KEYS[1], ARGV[1])
if not rec then
  return 0
end
local e, head, rest = string.match(rec, '^(%d+) (%S+ %d+ %d+ %d+) (0 .*)$')
if not e or tonumber(e) <= ms then
  return 0
end
local ttl = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', ms + ttl) .. ' ' .. head .. ' ' .. rest)
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
