-- token.lua: the server clock and a key's fencing tokens, for lib.lua and
-- shared_lib.lua, inserted where they say "-- #include token.lua". Both
-- scripts pass the key's fence as KEYS[2]: a string, the last token handed
-- out for the key by a lock or a shared hold.

-- now_us returns the server clock in microseconds.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- next_token records the key's next fencing token in KEYS[2] (kept for
-- retention ms) and returns it, as a number and as a string: max(last token
-- + 1, now), now the server clock in microseconds. fence, when not nil, is
-- KEYS[2] as the script read it (false: absent), to read it no more.
local function next_token(now, retention, fence)
  local token = now
  if fence == nil then
    fence = redis.call('GET', KEYS[2])
  end
  local last = tonumber(fence)
  if last and last >= token then
    token = last + 1
  end
  local s = string.format('%d', token)
  redis.call('SET', KEYS[2], s, 'PX', retention)
  return token, s
end
