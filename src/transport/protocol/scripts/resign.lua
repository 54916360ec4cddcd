-- resign.lua: a leader clears its value (after lib_queue.lua).
--
-- KEYS   [1] the election's lock key, [2] the value key, [3] the observers
-- ARGV   [1] the leader's token
-- Reply  1 the lock key holds the token (the value, if this leader's, is
--        deleted and the observers woken), else 0
-- Keeps  a resignation deletes only its own leader's value; observers are
--        woken where no lock key is held, too, as by a proclamation.
local h=redis.call("get",KEYS[1])
if h~=ARGV[1] then
  if not h then notify(KEYS[3]) end
  return 0
end
local cur=redis.call("get",KEYS[2])
if cur and string.match(cur,"^(%S+) ")==ARGV[1] then
  redis.call("del",KEYS[2])
  notify(KEYS[3])
end
return 1
