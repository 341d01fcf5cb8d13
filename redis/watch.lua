-- watch.lua: watched and wake_watcher, inserted where release.lua and
-- multi_release.lua say "-- #include watch.lua".

-- watched reports whether the waiters hash w may hold a record of a
-- LockMulti attempt that found the key held (field " watch <lid> <wid>",
-- see multi_acquire.lua): its field " watched", which every such record
-- sets and which wake_watcher clears with the last one it sees. One call,
-- however many waiters the hash records.
local function watched(w)
  return redis.call('HEXISTS', w, ' watched') == 1
end

-- wake_watcher wakes the Locker of the first LockMulti recorded in the
-- waiters hash w by an attempt that found the key held, and forgets that
-- record: one LockMulti per release that frees the key. The message, on
-- channel .. ':' .. lid, is "free <wid> <seq>" (the record's wait and the
-- attempt that wrote it), or "free" for a record that names no wait.
-- channel "" wakes nobody. It returns false when the server refused the
-- message, and then whether it found a record to wake. The caller checks
-- first that w is watched, which is rare.
local function wake_watcher(w, channel)
  if channel == '' then
    return true, false
  end
  local all = redis.call('HGETALL', w)
  local first, lid, msg, more
  for i = 1, #all, 2 do
    local l, wid = string.match(all[i], '^ watch (%S+) ?(%S*)$')
    if l then
      if first then
        more = true
        break
      end
      first, lid, msg = all[i], l, 'free'
      if wid ~= '' then
        msg = 'free ' .. wid .. ' ' .. all[i + 1]
      end
    end
  end
  if not first then
    redis.call('HDEL', w, ' watched')
    return true, false
  end
  if more then
    redis.call('HDEL', w, first)
  else
    redis.call('HDEL', w, first, ' watched')
  end
  local r = redis.pcall('PUBLISH', channel .. ':' .. lid, msg)
  return not (type(r) == 'table' and r.err), true
end
