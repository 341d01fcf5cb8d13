-- multi_giveup.lua: give up a LockMulti's next wait that a release
-- recorded (multi_release.lua) and its Locker did not adopt.
--
-- KEYS[1]  the lock, KEYS[2] its waiters hash
-- ARGV[1]  the record's field ("" for none: then it only wakes the first
--          record when the lock is free, for a release that deferred its
--          wake-up, see multi_defer.go), ARGV[2] the lock's channel
--
-- Removes the record. When it was gone already (a release consumed it
-- and woke a Locker that does not wait) and the lock is free, it wakes the
-- next record in its place. Returns 1 when it removed the record, 0 when
-- it woke nobody, 2 when it woke the next record and 3 when the server
-- refused that message.
if redis.call('HDEL', KEYS[2], ARGV[1]) == 1 then
  return 1
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
-- #include watch.lua
if not watched(KEYS[2]) then
  return 0
end
return wake_watcher(KEYS[2], ARGV[2]) and 2 or 3
