-- redlock_undo.lua: undo one Redlock attempt on one master: delete the
-- lock if it is still this attempt's, uncommitted (marked) or committed
-- (with the attempt's token); never another attempt's of the same owner.
--
-- KEYS[1]  lock   string "<owner> <mark or token> <label>"
-- ARGV[1]  owner
-- ARGV[2]  mark   the attempt's mark (redlock_acquire.lua)
-- ARGV[3]  token  the attempt's token, "" when it drew none
--
-- Returns 1 when the lock was deleted, 0 when it was left alone.
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
for i = 2, 3 do
  if ARGV[i] ~= '' then
    local p = ARGV[1] .. ' ' .. ARGV[i] .. ' '
    if string.sub(v, 1, #p) == p then
      redis.call('DEL', KEYS[1])
      return 1
    end
  end
end
return 0
