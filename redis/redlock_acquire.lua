-- redlock_acquire.lua: phase 1 of a Redlock acquisition, on one master:
-- take the lock if it is free (or marked by another attempt of its owner) and
-- report the master's fence and clock, from which the acquirer draws the
-- token once a majority answered.
--
-- KEYS[1]  lock   string "<owner> <token> <label>", PX = TTL
-- KEYS[2]  fence  string: the highest fencing token this master has seen
-- ARGV[1]  owner  random, unique to this acquisition, without spaces
-- ARGV[2]  ttl    milliseconds
-- ARGV[3]  label  human-readable holder name, recorded only
-- ARGV[4]  mark   "n<nonce>", unique to this attempt: it stands where the
--                 token goes until phase 2 writes the token, so that the
--                 undo of one attempt never removes another's grant
--                 (the attempts of one waiting Lock share their owner)
-- ARGV[5]  delay  milliseconds after its start during which the master
--                 grants nothing: restarted, it may have forgotten locks
--                 that are still held (no persistence, or not their last
--                 writes), and a quorum with it could give one out twice
--
-- Returns {1, fence, now}: the lock is the owner's, marked with ARGV[4]
-- (another attempt's uncommitted grant is taken over, a committed one
-- never); fence is the master's last token ("0" when none) and now its
-- clock in microseconds, both as decimal strings;
-- or {0, pttl}: another owner holds the lock for pttl more milliseconds,
-- or the owner's committed grant does (this is a late earlier attempt),
-- or the master started less than ARGV[5] ago and grants nothing for pttl
-- more milliseconds.
local v = redis.call('GET', KEYS[1])
if v then
  local n = #ARGV[1]
  -- The owner's own grant is taken over only while it is marked: one
  -- committed carries a later attempt's token, and a late phase 1 of an
  -- earlier attempt must not turn it back into a mark that this earlier
  -- attempt's undo then deletes.
  if not (string.sub(v, 1, n) == ARGV[1] and string.byte(v, n + 1) == 32 and string.byte(v, n + 2) == 110) then
    return {0, redis.call('PTTL', KEYS[1])}
  end
end
-- Only a grant needs the uptime: a waiter polling a held key does not pay
-- for INFO.
local up = tonumber(string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)'))
if up and up * 1000 < tonumber(ARGV[5]) then
  return {0, tonumber(ARGV[5]) - up * 1000}
end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[4] .. ' ' .. ARGV[3], 'PX', ARGV[2])
local t = redis.call('TIME')
return {1, redis.call('GET', KEYS[2]) or '0', t[1] .. string.format('%06d', tonumber(t[2]))}
