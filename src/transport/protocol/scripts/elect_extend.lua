-- elect_extend.lua: an election lock's extension.
--
-- KEYS   [1] the election's lock key, [2] the value key
-- ARGV   [1] the token, [2] ttl ms
-- Reply  1 the lock key holds the token (extended as extend.lua), else 0
-- Keeps  as extend.lua; and a proclamation lives as long as the lock that
--        backs it: the value key is extended with the lock key while it
--        holds this leader's proclamation, so a leader that vanishes leaves
--        nothing forever.
if redis.call("get",KEYS[1])~=ARGV[1] then return 0 end
if redis.call("pttl",KEYS[1])<tonumber(ARGV[2]) then
  redis.call("pexpire",KEYS[1],ARGV[2])
end
local v=redis.pcall("get",KEYS[2])
if type(v)=="string" and string.sub(v,1,#ARGV[1]+1)==ARGV[1].." " then
  local t=redis.call("pttl",KEYS[1])
  if redis.call("pttl",KEYS[2])<t then redis.call("pexpire",KEYS[2],t) end
end
return 1
