-- shared_lib.lua: functions shared by shared_acquire.lua and
-- shared_release.lua, inserted where they say "-- #include shared_lib.lua".
-- Both take the same KEYS, every name under the key's Cluster hash tag:
--
-- KEYS[1]  lock     the plain lock's string (see lib.lua): only checked
-- KEYS[2]  fence    string: the last fencing token handed out for the key,
--                   by a plain lock or a shared hold
-- KEYS[3]  holders  sorted set: owner scored by its expiry (server ms)
-- KEYS[4]  meta     hash: " kind" -> "permits" or "rw", " limit" -> the
--                   semaphore's limit ("0" for rw), and owner ->
--                   "<mode> <weight> <token> <acquired ms> <kept 0|1> <label>"
-- KEYS[5]  queue    sorted set: waiting owners scored by arrival (server µs)
-- KEYS[6]  waiters  hash owner -> "<deadline ms> <mode> <weight> <lid>"
--
-- meta lives while the key has holders or waiters; all four go together.

-- #include token.lua

-- extend makes key live at least ms more milliseconds.
local function extend(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- nopub is set when the server refused a PUBLISH: the script's writes
-- stand, and it says so in its reply.
local nopub = false

-- wake tells every Locker with a waiter on the key that it may go:
-- "free" on channel .. ':' .. lid. channel "" publishes nothing.
local function wake(channel)
  if channel == '' then
    return
  end
  local seen = {}
  for _, rec in ipairs(redis.call('HVALS', KEYS[6])) do
    local lid = string.match(rec, '^%d+ %S+ %d+ (%S+)$')
    if lid and not seen[lid] then
      seen[lid] = true
      local r = redis.pcall('PUBLISH', channel .. ':' .. lid, 'free')
      if type(r) == 'table' and r.err then
        nopub = true
      end
    end
  end
end

-- hdel removes the fields of list from hash key, in chunks: unpack has a
-- limit of a few thousand values.
local function hdel(key, list)
  for i = 1, #list, 1000 do
    redis.call('HDEL', key, unpack(list, i, math.min(i + 999, #list)))
  end
end

-- prune drops the holders and waiters whose time ran out before ms, and
-- reports whether it dropped any.
local function prune(ms)
  local changed = false
  local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ms)
  if #gone > 0 then
    hdel(KEYS[4], gone)
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ms)
    changed = true
  end
  for _, w in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
    local rec = redis.call('HGET', KEYS[6], w)
    local deadline = rec and tonumber(string.match(rec, '^(%d+)'))
    if not deadline or deadline <= ms then
      redis.call('ZREM', KEYS[5], w)
      redis.call('HDEL', KEYS[6], w)
      changed = true
    end
  end
  return changed
end

-- tidy deletes the key's shared state once it has neither holders nor
-- waiters, so that the key may become a plain lock or get another limit.
local function tidy()
  if redis.call('ZCARD', KEYS[3]) == 0 and redis.call('ZCARD', KEYS[5]) == 0 then
    redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6])
  end
end
