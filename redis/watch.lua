-- watch.lua: wake_watcher, inserted where release.lua and multi_release.lua
-- say "-- #include watch.lua".

-- wake_watcher wakes the first Locker recorded in the waiters hash w by a
-- LockMulti attempt that found the key held (field " watch <lid>", see
-- multi_acquire.lua), with "free" on its channel (channel .. ':' .. lid),
-- and forgets it: one Locker per release that frees the key. channel ""
-- wakes nobody. It returns false when the server refused the message. The
-- caller checks first that w exists, which is rare.
local function wake_watcher(w, channel)
  if channel == '' then
    return true
  end
  for _, f in ipairs(redis.call('HKEYS', w)) do
    local lid = string.match(f, '^ watch (%S+)$')
    if lid then
      redis.call('HDEL', w, f)
      local r = redis.pcall('PUBLISH', channel .. ':' .. lid, 'free')
      return not (type(r) == 'table' and r.err)
    end
  end
  return true
end
