-- read_acquire.lua: a reader's acquisition of a reader-writer lock.
--
-- KEYS   [1] the writer's key, [2] the readers' set (token -> until when,
--        node ms), [3] the waiting writer's mark
-- ARGV   [1] the token, [2] ttl ms
-- Reply  1 the reader is in the set until now + ttl; the writer's token
--        while a writer holds; 0 while a writer waits (the mark), or for a
--        writer's key that holds no string
-- Keeps  no reader joins while a writer holds or waits; the set lives at
--        least as long as its last reader. (Readers past their time leave
--        the set when a writer or a release looks at it.)
if redis.call("exists",KEYS[1],KEYS[3])>0 then
  local h=redis.pcall("get",KEYS[1])
  if type(h)=="string" then return h end
  return 0
end
local t=redis.call("time")
local ttl=tonumber(ARGV[2])
redis.call("zadd",KEYS[2],t[1]*1000+math.floor(t[2]/1000)+ttl,ARGV[1])
if redis.call("pttl",KEYS[2])<ttl then redis.call("pexpire",KEYS[2],ttl) end
return 1
