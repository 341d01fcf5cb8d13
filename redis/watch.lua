-- watch.lua: watched and wake_watcher, inserted where release.lua and
-- multi_release.lua say "-- #include watch.lua".

-- watched reports whether the waiters hash w may hold a record of a
-- LockMulti attempt that found the key held (field " watch <lid>", see
-- multi_acquire.lua): its field " watched", which every such record sets
-- and which wake_watcher clears with the last one it sees. One call,
-- however many waiters the hash records.
local function watched(w)
  return redis.call('HEXISTS', w, ' watched') == 1
end

-- wake_watcher wakes the first Locker recorded in the waiters hash w by a
-- LockMulti attempt that found the key held, with "free" on its channel
-- (channel .. ':' .. lid), and forgets it: one Locker per release that
-- frees the key. channel "" wakes nobody. It returns false when the server
-- refused the message. The caller checks first that w exists (release.lua:
-- that it is watched), which is rare.
local function wake_watcher(w, channel)
  if channel == '' then
    return true
  end
  local first, lid, more
  for _, f in ipairs(redis.call('HKEYS', w)) do
    local l = string.match(f, '^ watch (%S+)$')
    if l then
      if first then
        more = true
        break
      end
      first, lid = f, l
    end
  end
  if not first then
    redis.call('HDEL', w, ' watched')
    return true
  end
  if more then
    redis.call('HDEL', w, first)
  else
    redis.call('HDEL', w, first, ' watched')
  end
  local r = redis.pcall('PUBLISH', channel .. ':' .. lid, 'free')
  return not (type(r) == 'table' and r.err)
end
