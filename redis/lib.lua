-- lib.lua: functions shared by acquire.lua and release.lua, inserted where
-- they say "-- #include lib.lua" (after their fast paths, so that those do
-- not pay for defining the functions). Both take the same KEYS:
--
-- KEYS[1]  lock     string "<owner> <token> <label>", expires after the
--                   holder's TTL
-- KEYS[2]  fence    string: the last fencing token handed out; expires
--                   after the retention
-- KEYS[3]  queue    sorted set: the owners waiting, scored by arrival time
--                   (server microseconds)
-- KEYS[4]  waiters  hash owner -> "<deadline> <seq> <ttl> <lid> w<wake>
--                   <label>": the waiter counts as gone after deadline
--                   (server ms); seq numbers its last attempt; ttl (ms) and
--                   label are those of its lock once it is handed over; lid
--                   names its Locker, whose channel is the key's channel ..
--                   ':' .. lid; it makes its next attempt by wake (server
--                   ms) unless a message wakes it sooner. A record of an
--                   older version has no wake.
--                   Also the field " woke" (a space: never an owner) ->
--                   "<until> <owner>": an unfair release woke owner, or
--                   owner polls (the "p<n>" attempt of acquire.lua), and
--                   releases wake it no more before until (server µs)
--                   Also " starved" -> "<until>": an unfair release
--                   handed the key over to a first waiter that starved,
--                   and the next does so no sooner than until (server
--                   µs, release.lua)
--                   And fields " watch <lid> <wid>" -> "<seq>": the wait wid
--                   of a LockMulti of that Locker found the key held in
--                   its attempt seq (multi_acquire.lua); the release that
--                   frees the key wakes the first of them.
--                   Each sets " watched" -> "1", which lets a release
--                   skip the list of fields while none was recorded
--                   (watch.lua)
--
-- Every name carries the same Cluster hash tag.

-- #include token.lua

-- fence is KEYS[2] as the including script read it at its start (false:
-- absent), set by that script, or nil. Only take writes KEYS[2], once per
-- script.
local fence

-- take gives the lock to owner and returns its fencing token, as a number
-- and as a string (see next_token).
local function take(now, owner, ttl, label, retention)
  local token, s = next_token(now, retention, fence)
  redis.call('SET', KEYS[1], owner .. ' ' .. s .. ' ' .. label, 'PX', ttl)
  return token, s
end

-- dequeue removes owner from the waiters. Its record goes with its place
-- in the queue (enqueue writes both), so an owner not in the queue costs
-- one call.
local function dequeue(owner)
  if redis.call('ZREM', KEYS[3], owner) == 1 then
    redis.call('HDEL', KEYS[4], owner)
  end
end

-- record parses a waiter's record: deadline, seq, ttl, lid, label, and
-- wake (nil in a record without it). A seq of "i<n>" marks a waiter whose
-- Locker reads its inbox (see hand_over).
local function record(rec)
  local deadline, seq, ttl, lid, wake, label = string.match(rec, '^(%d+) (i?%d+) (%d+) (%S+) w(%d+) (.*)$')
  if deadline then
    return deadline, seq, ttl, lid, label, wake
  end
  return string.match(rec, '^(%d+) (i?%d+) (%d+) (%S+) (.*)$')
end

-- gone collects the Lockers (lids) of the waiters head dropped.
local gone = {}

-- After head: woke is the " woke" field of the waiters (nil when none);
-- next_lid and next_wake are the Locker and the wake (see record) of the
-- waiter after the one head returned (nil when none), alive or not.
local woke, next_lid, next_wake

-- head returns the first waiter still alive (owner, seq, ttl, lid, label),
-- dropping the ones whose deadline passed, or nil. q, when given, is
-- ZRANGE queue 0 1 as the caller read it. Two calls per waiter it looks
-- at: the first two of the queue, and their records with " woke".
local function head(now, q)
  local ms = math.floor(now / 1000)
  for _ = 1, 100 do
    q = q or redis.call('ZRANGE', KEYS[3], 0, 1)
    local h = q[1]
    if not h then
      return nil
    end
    local recs
    if q[2] then
      recs = redis.call('HMGET', KEYS[4], h, ' woke', q[2])
    else
      recs = redis.call('HMGET', KEYS[4], h, ' woke')
    end
    woke = recs[2]
    if recs[1] then
      local deadline, seq, ttl, lid, label = record(recs[1])
      if deadline and tonumber(deadline) > ms then
        if recs[3] then
          local _, _, _, l, _, w = record(recs[3])
          next_lid, next_wake = l, w
        end
        return h, seq, ttl, lid, label
      end
      if lid then
        gone[lid] = true
      end
    end
    dequeue(h)
    q = nil
  end
  return nil
end

-- claim_ms is how long a waiter that was handed the lock has to confirm
-- it (its next attempt renews it to its TTL): a waiter that died while
-- queued holds the key up for this long, not for a whole TTL.
local claim_ms = 500

-- inbox_ms is how long a Locker's inbox list outlives its last grant
-- (inboxTTL in inbox.go): the residue of a Locker that is gone.
local inbox_ms = 60000

-- nopub is set when the server refused a PUBLISH (ACL -@pubsub or
-- resetchannels, rename-command): the script's writes stand, and it says so
-- in its reply, after which its caller stops publishing and polls.
local nopub = false

-- publish sends msg on channel, unless channel is "" (the caller's waiters
-- poll). A refusal does not fail the script, whose writes are done by then
-- and must be reported as done: it sets nopub.
local function publish(channel, msg)
  if channel == '' then
    return
  end
  local r = redis.pcall('PUBLISH', channel, msg)
  if type(r) == 'table' and r.err then
    nopub = true
  end
end

-- hand_over gives the free lock to waiter h (of Locker lid) for its claim
-- window, and tells it on its Locker's channel: "grant <owner> <seq> <token>
-- <claim>", claim in milliseconds. h is what head returned last. It also
-- tells the next waiter in line (next_lid), if any, how long the claim
-- lasts ("claim <claim>"), so that it tries again when a waiter that died
-- while queued never confirms; unless that waiter's record says it tries
-- again by then anyway (its wake is no later than the Past(claim) a
-- message would give it), as a waiter that found the key held by an
-- earlier claim does. At most two messages, each to one Locker, however
-- many wait: a hand-off costs the same with 4 waiters or 400.
local function hand_over(now, h, seq, ttl, lid, label, channel, retention)
  local claim = math.min(tonumber(ttl), claim_ms)
  local _, s = take(now, h, claim, label, retention)
  dequeue(h)
  local pushed = false
  if string.byte(seq, 1) == 105 then
    -- "i<n>": the waiter's Locker reads its inbox list, which only a
    -- writer of the store can write: the grant needs no confirmation.
    local inbox = 'locker:inbox:' .. lid
    local r = redis.pcall('LPUSH', inbox, h .. ' ' .. string.sub(seq, 2) .. ' ' .. s .. ' ' .. claim)
    if type(r) ~= 'table' or not r.err then
      redis.pcall('PEXPIRE', inbox, inbox_ms)
      pushed = true
    end
    seq = string.sub(seq, 2)
  end
  if channel == '' then
    return
  end
  if not pushed then
    publish(channel .. ':' .. lid, 'grant ' .. h .. ' ' .. seq .. ' ' .. s .. ' ' .. claim)
  end
  if next_lid and next_lid ~= lid and not (next_wake and
      tonumber(next_wake) <= math.floor(now / 1000) + claim + math.floor(claim / 10) + 1) then
    publish(channel .. ':' .. next_lid, 'claim ' .. claim)
  end
end
