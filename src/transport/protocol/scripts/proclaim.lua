-- proclaim.lua: a leader publishes its value (after lib_queue.lua).
--
-- KEYS   [1] the election's lock key, [2] the value key ("token term seq
--        value"), [3] the observers (member -> until when it counts)
-- ARGV   [1] the leader's token, [2] its term, [3] the proclamation's
--        number, [4] the value
-- Reply  1 the value key holds this proclamation or a later one of the same
--        leader; 0 the lock key does not hold the token
-- Keeps  a proclamation lands only while the lock key holds its leader's
--        token, never replaces a later one of the same leader, and lives
--        as long as the lock behind it. Observers are woken when the value
--        changed, and by a node that holds no lock key at all (it missed
--        the leader's SET: the change may have landed on a majority, and a
--        wake-up only makes them read).
local h=redis.call("get",KEYS[1])
if h~=ARGV[1] then
  if not h then notify(KEYS[3]) end
  return 0
end
local cur=redis.call("get",KEYS[2])
if cur then
  local tok,_,seq=string.match(cur,"^(%S+) (%d+) (%d+) ")
  if tok==ARGV[1] and tonumber(seq)>=tonumber(ARGV[3]) then return 1 end
end
redis.call("set",KEYS[2],ARGV[1].." "..ARGV[2].." "..ARGV[3].." "..ARGV[4])
local ttl=redis.call("pttl",KEYS[1])
if ttl<1 then ttl=1 end
redis.call("pexpire",KEYS[2],ttl)
notify(KEYS[3])
return 1
