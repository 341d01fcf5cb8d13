-- acquire.lua: one attempt to take the lock.
--
-- KEYS     lock, fence, queue, waiters (see lib.lua), and holds: the hash
--          of the key's shared holds (see shared_lib.lua); then, for an
--          attempt that may be cut (cut.go), the owner's tombstone: while
--          it exists, the attempt writes nothing and returns 0
-- ARGV[1]  owner      random, unique to this acquisition, without spaces
-- ARGV[2]  ttl        milliseconds
-- ARGV[3]  label      human-readable holder name, recorded only
-- ARGV[4]  retention  milliseconds the fence key outlives the last acquisition
-- ARGV[5]  seq        "0" for a single attempt (TryLock); otherwise the
--                     number of this attempt of a waiting Lock, which then
--                     queues for the lock when it is held. "k<n>": the
--                     attempt of an unfair waiter whose record is recent;
--                     if it is still queued, the held key writes nothing.
--                     "p<n>": the same, from a waiter that polls (it makes
--                     its next attempt within wakeGap, acquire.go): if it
--                     is the first in the queue, the held key records it as
--                     woken for poll_us, so that releases meanwhile do not
--                     wake it (wake_due in release.lua)
-- ARGV[6]  stale      milliseconds after which a waiter that made no attempt
--                     counts as gone
-- ARGV[7]  channel    the lock's pub/sub channel; "" publishes nothing. A
--                     Locker listens on channel .. ':' .. its lid
-- ARGV[8]  lid        the caller's Locker id (no spaces), recorded with a
--                     waiter so that a hand-over tells only its Locker
-- ARGV[9]  unfair     "1": a free key goes to the caller even when others
--                     wait (barging); "0": to the first live waiter
--
-- Returns {'shared', kind, limit} when the key is held or awaited by
-- shared holds (see shared_lib.lua; kind "layout": in the layout of an
-- older version, whose holders are a sorted set), else one integer r, or {r} when the attempt handed the lock over to
-- the first waiter but the server refused to publish the message:
--   r > 0   the lock is ARGV[1]'s, with fencing token r: newly taken, or
--           already ARGV[1]'s (handed over by the previous holder, or a
--           retried call), in which case its expiry is renewed to ARGV[2]
--           from now;
--   r <= 0  another owner holds it, for -r-1 more milliseconds; r = 0 when
--           that is unknown: the key has no expiry, or the attempt is a
--           single one (ARGV[5] = "0"), which has no use for it.
--
-- A free lock goes to the first live waiter of the queue: the caller takes
-- it when it is that waiter or nobody waits, and otherwise hands it over to
-- that waiter (and queues if it waits itself). Unfair (ARGV[9] = "1"), it
-- goes to the caller, who leaves the queue if it was in it.
local owner, ttl = ARGV[1], ARGV[2]

-- time returns the server clock in microseconds (now_us of token.lua,
-- which the fast paths do not include).
local function time()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- fast_take gives the free lock to the caller and returns its fencing
-- token (take of lib.lua, without its definitions).
local function fast_take(last)
  local token = time()
  last = tonumber(last)
  if last and last >= token then
    token = last + 1
  end
  local s = string.format('%d', token)
  redis.call('SET', KEYS[1], owner .. ' ' .. s .. ' ' .. ARGV[3], 'PX', ttl)
  redis.call('SET', KEYS[2], s, 'PX', ARGV[4])
  return token
end

-- One read of the strings: the lock, the fence, and the tombstone.
local got
if KEYS[6] then
  got = redis.call('MGET', KEYS[1], KEYS[2], KEYS[6])
  if got[3] then
    return 0
  end
else
  got = redis.call('MGET', KEYS[1], KEYS[2])
end
local v = got[1]

-- The fastest path, before anything else is defined (each definition
-- costs time in every run that includes it): the lock is free, the caller
-- fair, and neither waiters nor shared holds exist.
if not v and ARGV[9] ~= '1' and redis.call('EXISTS', KEYS[3], KEYS[5]) == 0 then
  return fast_take(got[2])
end

-- #include sharekind.lua

local seq = ARGV[5]
local mark = string.byte(seq, 1)
local poll = mark == 112 -- "p<n>"
local keep = poll or mark == 107 -- "k<n>"
if keep then
  seq = string.sub(seq, 2)
end

-- poll_us is how long (server µs) the attempt of a polling waiter ("p<n>")
-- spares it the wake-ups of releases: twice wakeGap (acquire.go), within
-- which it makes its next attempt.
local poll_us = 2000
local waiting = seq ~= '0'

-- enqueue puts the caller in the queue, keeping its place if it is there
-- (ZADD NX), and records it (see lib.lua) as of now (server µs). remaining
-- is what the attempt replies: the lock is held for that many more
-- milliseconds (<= 0: unknown). The caller (acquire.go) makes its next
-- attempt within its refresh interval (stale / 3), or within
-- Past(remaining) when remaining is shorter: the record's wake is the
-- latest that can be, so that a hand-over need not tell it of a claim
-- that ends later (hand_over in lib.lua).
local function enqueue(now, remaining)
  local stale = tonumber(ARGV[6])
  local ms = math.floor(now / 1000)
  local m = math.floor(stale / 3) + 1
  if remaining > 0 and remaining < m then
    m = remaining
  end
  redis.call('ZADD', KEYS[3], 'NX', now, owner)
  redis.call('HSET', KEYS[4], owner,
    string.format('%d', ms + stale) .. ' ' .. seq .. ' ' .. ttl .. ' ' .. ARGV[8] ..
    string.format(' w%d ', ms + m + math.floor(m / 10) + 1) .. ARGV[3])
  -- The queue and the records expire together: the records outlive no
  -- queue (the " woke" field may), and a queue ZADD creates has no expiry.
  if redis.call('PTTL', KEYS[3]) < stale then
    redis.call('PEXPIRE', KEYS[3], 2 * stale)
    redis.call('PEXPIRE', KEYS[4], 2 * stale)
  end
end

-- Fast paths, before lib.lua (whose definitions cost time in every run
-- that includes them): the lock is held and the caller does not wait, or
-- waits (it queues); the lock is the caller's; the lock is free and the
-- caller is unfair. A free lock with waiters or shared holds, the caller
-- fair, is left.
if v then
  local n = #owner
  if string.sub(v, 1, n) == owner and string.byte(v, n + 1) == 32 then
    redis.call('PEXPIRE', KEYS[1], ttl)
    return tonumber(string.match(v, '^%S+ (%d+)'))
  end
  if not waiting then
    return 0
  end
  if keep then
    local rank = redis.call('ZRANK', KEYS[3], owner)
    if rank then
      local pttl = redis.call('PTTL', KEYS[1])
      if poll and rank == 0 then
        redis.call('HSET', KEYS[4], ' woke', string.format('%d', time() + poll_us) .. ' ' .. owner)
      end
      return -1 - pttl
    end
  end
  local pttl = redis.call('PTTL', KEYS[1])
  enqueue(time(), pttl)
  return -1 - pttl
elseif ARGV[9] == '1' then
  -- Unfair: the free key is the caller's whoever waits, unless shared
  -- holds have it. Only an attempt after the first of a waiting Lock
  -- (seq > 1; "i1" is a first one too) may have queued: it leaves the
  -- queue (dequeue of lib.lua).
  if redis.call('EXISTS', KEYS[5]) == 1 then
    local kind, limit = shared_kind(KEYS[5])
    if kind then
      return { 'shared', kind, limit }
    end
  end
  if waiting and seq ~= '1' and seq ~= 'i1' and redis.call('ZREM', KEYS[3], owner) == 1 then
    redis.call('HDEL', KEYS[4], owner)
  end
  return fast_take(got[2])
else
  local kind, limit = shared_kind(KEYS[5])
  if kind then
    return { 'shared', kind, limit }
  end
end

-- #include lib.lua
fence = got[2]

-- The lock is free, the queue exists, and the caller is fair.
local now = now_us()
local h, hseq, httl, lid, label = head(now)
if h and h ~= owner then
  hand_over(now, h, hseq, httl, lid, label, ARGV[7], ARGV[4])
  if waiting then
    enqueue(now, tonumber(httl))
  end
  if nopub then
    return { -1 - tonumber(httl) }
  end
  return -1 - tonumber(httl)
end
if h then
  dequeue(owner)
end
return (take(now, owner, ttl, ARGV[3], ARGV[4]))
