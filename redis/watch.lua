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
--
-- keep (multi_release.lua: it records another wait right after) leaves
-- " watched" in w even with the last record, when w had it; the third
-- result then says w had it (the hash stays).
local function wake_watcher(w, channel, keep)
  if channel == '' then
    return true, false
  end
  local all = redis.call('HGETALL', w)
  local first, lid, msg, more, seen
  for i = 1, #all, 2 do
    local f = all[i]
    if f == ' watched' then
      seen = true
      if more then
        break
      end
    else
      local l, wid = string.match(f, '^ watch (%S+) ?(%S*)$')
      if l then
        if first then
          more = true
          if seen or not keep then
            break
          end
        else
          first, lid, msg = f, l, 'free'
          if wid ~= '' then
            msg = 'free ' .. wid .. ' ' .. all[i + 1]
          end
        end
      end
    end
  end
  if not first then
    redis.call('HDEL', w, ' watched')
    return true, false
  end
  if more or (keep and seen) then
    redis.call('HDEL', w, first)
  else
    redis.call('HDEL', w, first, ' watched')
  end
  local r = redis.pcall('PUBLISH', channel .. ':' .. lid, msg)
  return not (type(r) == 'table' and r.err), true, keep and seen
end
