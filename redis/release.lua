-- release.lua: release the lock if it is the owner's, handing it over to
-- the first live waiter if there is one. Also what a
-- waiter that gives up runs, to leave the queue (and pass on a lock that
-- was handed over to it meanwhile).
--
-- KEYS     lock, fence, queue, waiters (see lib.lua)
-- ARGV[1]  owner
-- ARGV[2]  channel    the lock's pub/sub channel, even from a Locker
--                     without pub/sub: the waiters (and LockMultis) of
--                     Lockers with pub/sub listen on it; "" publishes
--                     nothing
-- ARGV[3]  retention  milliseconds the fence key outlives the last acquisition
-- ARGV[4]  leave      "1": remove the owner from the queue first;
--                      "force": release whoever owns it (owner is ignored)
-- ARGV[5]  unfair     "1": free the key and wake the first live waiter's
--                     Locker ("free"), whoever takes it, unless that
--                     waiter was woken less than wake_gap_us ago; but hand
--                     it over, as "0" does, to a first waiter queued for
--                     starve_us or longer that is not awake (see below);
--                     "0": hand it over
-- ARGV[6]  quiet      "1": the caller took the key when it had no queue
--                     (a fair first attempt): check first, in one call,
--                     that neither the queue nor the waiters hash exists,
--                     as then nothing is to be handed over or woken; "0":
--                     read the queue first, as a release that is likely to
--                     hand over does. Only with leave "0": the quiet path
--                     neither leaves the queue nor forces
--
-- A release that frees the key also wakes one Locker whose LockMulti found
-- it held (wake_watcher). Whether a waiter is told depends on its Locker,
-- not on this one: a waiter of a Locker that listens is woken by a release
-- from a Locker that polls.
--
-- Returns 1 when the lock was the owner's and is released (deleted, or
-- handed over with a "grant" message on the channel), 2 when it was
-- released but the server refused the message, 0 when it was not the
-- owner's (gone, expired, or another owner's): the lock is left alone then.
-- With "force", 1 when the lock was held by anyone, 0 when it was free.
local owner = ARGV[1]
local n = #owner
-- got: the lock and the fence, as read. A quiet release reads only the
-- lock: nobody waits and no LockMulti watches when neither the queue nor
-- the waiters hash exists (the hash holds every record and the " watched"
-- mark, see lib.lua, and the queue outlives no member). GET, EXISTS, DEL;
-- when the hint was wrong, the fence is read where a hand-over needs it.
local got
if ARGV[6] == '1' then
  local v = redis.call('GET', KEYS[1])
  if not (v and string.sub(v, 1, n) == owner and string.byte(v, n + 1) == 32) then
    return 0
  end
  if redis.call('EXISTS', KEYS[3], KEYS[4]) == 0 then
    redis.call('DEL', KEYS[1])
    return 1
  end
  got = { v }
else
  if ARGV[4] == '1' then
    redis.call('ZREM', KEYS[3], owner)
    redis.call('HDEL', KEYS[4], owner)
  end
  got = redis.call('MGET', KEYS[1], KEYS[2])
  local v = got[1]
  if not v then
    return 0
  end
  if ARGV[4] ~= 'force' and not (string.sub(v, 1, n) == owner and string.byte(v, n + 1) == 32) then
    return 0
  end
end
-- #include watch.lua

-- q: the first two waiters; since: the first one's arrival (server µs),
-- read by an unfair release only.
local q, since
if ARGV[5] == '1' then
  local qs = redis.call('ZRANGE', KEYS[3], 0, 1, 'WITHSCORES')
  q, since = { qs[1], qs[3] }, qs[2]
else
  q = redis.call('ZRANGE', KEYS[3], 0, 1)
end
if not q[1] then
  redis.call('DEL', KEYS[1])
  if watched(KEYS[4]) and not wake_watcher(KEYS[4], ARGV[2]) then
    return 2
  end
  return 1
end

-- wake_gap_us is how long after an unfair release woke a waiter the next
-- unfair releases do not wake it again (wakeGap in acquire.go: the waiter
-- tries again by itself after that long). A hot key changes hands many
-- times per millisecond between Lockers that loop, each of which barges in
-- before the waiter woken: waking it at every release would cost it one
-- failed attempt per hand-off, the most of an unfair hand-off's work.
local wake_gap_us = 1000

-- awake reports whether waiter h tries again by itself soon: woke, the
-- " woke" field of the waiters (false or nil: none), names it until later
-- than now (server µs), as a release that woke it or its polling set it.
local function awake(now, h, woke)
  if not woke then
    return false
  end
  local untl, who = string.match(woke, '^(%d+) (%S+)$')
  return who == h and tonumber(untl) > now
end

-- wake_due reports whether an unfair release may wake waiter h now (server
-- µs), woke being the " woke" field of the waiters, and if so records the
-- wake-up: h was not woken within wake_gap_us.
local function wake_due(now, h, woke)
  if awake(now, h, woke) then
    return false
  end
  redis.call('HSET', KEYS[4], ' woke', string.format('%d', now + wake_gap_us) .. ' ' .. h)
  return true
end

-- starve_us is how long a first waiter may have been queued (server µs)
-- before an unfair release hands the key over to it instead of freeing
-- it, unless it is awake: a release woke it, or it polls (the " woke"
-- field names it until later than now), and it tries again within
-- wakeGap anyway (starveAfter in acquire.go, docs/design.md).
local starve_us = 1000

-- starving is set when the first waiter is alive, has waited starve_us,
-- and is not awake, and no such hand-over came within starve_gap_us (the
-- " starved" field of the waiters: until when, server µs): the release
-- below hands the key over to it, and sets " starved". The releases
-- meanwhile barge as before. Without the gap, each waiter behind the
-- first, queued as long and asleep, would be handed the key in turn at
-- every release: a hot key would change hands as in fair mode (a
-- shorter gap cost a hot key with many clients, docs/benchmarks.md).
local starving = false
local starve_gap_us = 10000 -- starveGap in acquire.go

-- Unfair, and the first waiter is alive: free the key and wake it (head
-- and publish of lib.lua, without their definitions), unless it starves.
-- A dead first waiter takes the path below, which drops it.
if ARGV[5] == '1' then
  local recs = redis.call('HMGET', KEYS[4], q[1], ' woke', ' watched', ' starved')
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local deadline, lid
  if recs[1] then
    deadline, lid = string.match(recs[1], '^(%d+) i?%d+ %d+ (%S+) ')
  end
  local alive = deadline and tonumber(deadline) > math.floor(now / 1000)
  starving = alive and now - tonumber(since) >= starve_us and
      not (recs[4] and tonumber(recs[4]) > now) and not awake(now, q[1], recs[2])
  if alive and not starving then
    redis.call('DEL', KEYS[1])
    local ok = true
    if ARGV[2] ~= '' and wake_due(now, q[1], recs[2]) then
      local r = redis.pcall('PUBLISH', ARGV[2] .. ':' .. lid, 'free')
      ok = not (type(r) == 'table' and r.err)
    end
    if recs[3] and not wake_watcher(KEYS[4], ARGV[2]) then
      ok = false
    end
    if ok then
      return 1
    end
    return 2
  end
end

-- #include lib.lua
fence = got[2]

do
  local now = now_us()
  local h, seq, ttl, lid, label = head(now, q)
  if ARGV[5] == '1' and not starving then
    redis.call('DEL', KEYS[1])
    if h and ARGV[2] ~= '' and wake_due(now, h, woke) then
      publish(ARGV[2] .. ':' .. lid, 'free')
    end
    if watched(KEYS[4]) and not wake_watcher(KEYS[4], ARGV[2]) then
      nopub = true
    end
  elseif h then
    hand_over(now, h, seq, ttl, lid, label, ARGV[2], ARGV[3])
    -- Only into a hash that still exists: one HSET creates has no expiry,
    -- and the hand-over may have removed the last record.
    if starving and redis.call('EXISTS', KEYS[4]) == 1 then
      redis.call('HSET', KEYS[4], ' starved', string.format('%d', now + starve_gap_us))
    end
  else
    -- Nobody alive waits. A waiter that counts as gone (it made no
    -- attempt for too long) may still be there, paused: wake it.
    redis.call('DEL', KEYS[1])
    if ARGV[2] ~= '' then
      for lid in pairs(gone) do
        publish(ARGV[2] .. ':' .. lid, 'free')
      end
    end
    if watched(KEYS[4]) and not wake_watcher(KEYS[4], ARGV[2]) then
      nopub = true
    end
  end
  if nopub then
    return 2
  end
  return 1
end
