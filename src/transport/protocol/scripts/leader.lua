-- leader.lua: reads who leads, and what it proclaimed.
--
-- KEYS   [1] the election's lock key, [2] the value key, [3] the observers
-- ARGV   optional: [1] the observer's member, [2] how long it counts, ms
-- Reply  "term seq value" proclaimed by the lock key's holder; 0 nobody
--        holds the lock key; 1 its holder proclaimed nothing yet (the value
--        key is another's). Never the token.
-- Keeps  a read writes nothing but its observer, and drops the observers
--        whose time ran out first (under a leader that proclaims nothing,
--        every read of every observer adds one member).
if ARGV[1] then
  local t=redis.call("time")
  local now=t[1]*1000+math.floor(t[2]/1000)
  redis.call("zremrangebyscore",KEYS[3],"-inf",now)
  redis.call("zadd",KEYS[3],now+tonumber(ARGV[2]),ARGV[1])
  redis.call("pexpire",KEYS[3],ARGV[2])
end
local t=redis.call("get",KEYS[1])
if not t then return 0 end
local cur=redis.call("get",KEYS[2])
if not cur then return 1 end
local tok,rest=string.match(cur,"^(%S+) (.*)$")
if tok~=t then return 1 end
return rest
