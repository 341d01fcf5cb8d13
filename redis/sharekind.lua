-- sharekind.lua: shared_kind, inserted where a script says
-- "-- #include sharekind.lua" (acquire.lua, multi_acquire.lua and
-- shared_lib.lua).

-- shared_kind returns the kind ("permits" or "rw") and the limit of the
-- shared holds in hash key (see shared_lib.lua): the hash's own " kind"
-- and " limit", which a line and older versions set, else those in its
-- first hold record; nil when key has neither; "layout" when key is not
-- a hash (an older version's holders, a sorted set).
local function shared_kind(key)
  local all = redis.pcall('HGETALL', key)
  if all.err then
    return 'layout', ''
  end
  local kind, limit, rec
  for i = 1, #all, 2 do
    local f = all[i]
    if f == ' kind' then
      kind = all[i + 1]
    elseif f == ' limit' then
      limit = all[i + 1]
    elseif not rec and string.byte(f, 1) ~= 32 then
      rec = all[i + 1]
    end
  end
  if not kind and rec then
    local n = string.match(rec, '^%d+ permits:(%d+) ')
    if n then
      kind, limit = 'permits', limit or n
    else
      kind, limit = 'rw', '0'
    end
  end
  return kind, limit or ''
end
