-- multi_acquire.lua: one attempt to take several locks, all or none.
--
-- KEYS     five names per lock (see lib.lua and shared_lib.lua), grouped
--          by kind: for n locks, KEYS[i] is lock i's lock, KEYS[n+i] its
--          fence, KEYS[2n+i] its queue, KEYS[3n+i] its shared holds hash
--          and KEYS[4n+i] its waiters (i from 1), so that one call reads a
--          group; then, for an attempt that may be cut (cut.go), the
--          tombstone of lock 1's owner: while it exists, the attempt writes
--          nothing and returns {'held', 1, 0}
-- ARGV[1]  label      human-readable holder name, recorded only
-- ARGV[2]  retention  milliseconds a fence key outlives the last acquisition
-- ARGV[3]  unfair     "1": a free key goes to the caller even when others
--                     wait; "0": a key with waiters counts as held
-- ARGV[4]  watch      the caller's record, " watch <lid> <wid>" (its
--                     Locker and its wait), or "": a failed attempt then
--                     records nothing. Otherwise it records the wait in
--                     the waiters hash of the key it found held (field
--                     ARGV[4] -> ARGV[7], and " watched", see watch.lua),
--                     so that the release that frees the key wakes it
--                     (release.lua, multi_release.lua)
-- ARGV[5]  stale      milliseconds a waiters hash created for a record
--                     lasts
-- ARGV[6]  unwatch    the numbers (from 1, each followed by a space) of
--                     the locks whose waiters hash may hold the record
--                     ARGV[4] from an earlier attempt that no release
--                     consumed: a successful attempt removes them. "" for
--                     none
-- ARGV[7]  seq        the attempt's number in its wait: the record's
--                     value, which the release that consumes it reports
-- ARGV[6+2i], ARGV[7+2i]  owner and ttl (milliseconds) of lock i (from 1)
--
-- Returns {'held', i, pttl} when lock i is held by another owner (pttl in
-- milliseconds, 0 when unknown: a key with waiters), {'shared', i, kind,
-- limit} when it is held or awaited by shared holds (kind "layout": in an
-- older version's layout, see acquire.lua), and otherwise a list
-- of the new fencing tokens, as strings, one per lock: then every lock is
-- its owner's. Only that last reply and the record ARGV[4] write
-- anything. Each wait records under a field of its own: a successful
-- attempt removes no other wait's record, not even one of its Locker.
--
-- Each lock is looked at in order: held, then shared holds, then waiters;
-- the first that stops the attempt is the reply. The usual attempts cost:
-- taking free keys, an MGET (which reads the tombstone too), an EXISTS, a
-- TIME and two SETs per lock (and an HDEL per record of the wait that no
-- release consumed: after a wake-up, none); finding the first key held, an
-- MGET, an HSET and a PTTL, a PTTL, and a PEXPIRE more when the key's
-- waiters hash has less than the stale time left. The script builds no table of its own
-- (its reply is the MGET's): a Lua allocation costs the server about as
-- much as a call.

-- #include sharekind.lua

local n = math.floor(#KEYS / 5)

-- Every lock and fence with one call: got[i] is lock i, got[n+i] its
-- fence. The tombstone, when there is one, comes first in the same call
-- (only the last argument of a call spreads unpack's values), and goes.
local got
if #KEYS > 5 * n then
  got = redis.call('MGET', KEYS[#KEYS], unpack(KEYS, 1, 2 * n))
  if got[1] then
    return { 'held', 1, 0 }
  end
  table.remove(got, 1)
else
  got = redis.call('MGET', unpack(KEYS, 1, 2 * n))
end

-- held: the first lock held (0: none); the locks before it are free, and
-- only their queues and shared holds can still stop the attempt. One
-- EXISTS over every lock's queue and holds hash says whether any exist; only
-- then are the locks before held looked at one by one.
local held = 0
for i = 1, n do
  if got[i] then
    held = i
    break
  end
end
if held ~= 1 and redis.call('EXISTS', unpack(KEYS, 2 * n + 1, 4 * n)) > 0 then
  for i = 1, held == 0 and n or held - 1 do
    local kind, limit = shared_kind(KEYS[3 * n + i])
    if kind then
      return { 'shared', i, kind, limit }
    end
    if ARGV[3] ~= '1' and redis.call('EXISTS', KEYS[2 * n + i]) == 1 then
      held = i
      break
    end
  end
end

if held > 0 then
  -- Record the caller's Locker with the key, unless it polls. The
  -- waiters hash then lasts at least the stale time more: with less left
  -- (or none set), it gets twice the stale time (as enqueue's do), so that
  -- a hash kept busy by records does not expire under the newest one.
  local w = KEYS[4 * n + held]
  if ARGV[4] ~= '' then
    redis.call('HSET', w, ARGV[4], ARGV[7], ' watched', '1')
    if redis.call('PTTL', w) < tonumber(ARGV[5]) then
      redis.call('PEXPIRE', w, 2 * tonumber(ARGV[5]))
    end
  end
  if got[held] then
    return { 'held', held, math.max(redis.call('PTTL', KEYS[held]), 0) }
  end
  return { 'held', held, 0 }
end

-- Tokens as next_token in token.lua computes them, for each lock's fence.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
for i = 1, n do
  local token = now
  local last = tonumber(got[n + i])
  if last and last >= token then
    token = last + 1
  end
  local s = string.format('%d', token)
  redis.call('SET', KEYS[i], ARGV[6 + 2 * i] .. ' ' .. s .. ' ' .. ARGV[1], 'PX', ARGV[7 + 2 * i])
  redis.call('SET', KEYS[n + i], s, 'PX', ARGV[2])
  got[i] = s
end
if ARGV[6] ~= '' then
  for i in string.gmatch(ARGV[6], '(%d+) ') do
    redis.call('HDEL', KEYS[4 * n + tonumber(i)], ARGV[4])
  end
end
-- got[1..n] are the tokens now; the fences after them go.
for i = n + 1, 2 * n do
  got[i] = nil
end
return got
