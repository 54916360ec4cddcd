-- read_release.lua: a reader leaves a reader-writer lock.
--
-- KEYS   [1] the readers' set
-- ARGV   [1] the token
-- Reply  1 the reader was in the set and its time had not passed, else 0
-- Keeps  only the token's own entry leaves (and entries past their time).
local t=redis.call("time")
local now=t[1]*1000+math.floor(t[2]/1000)
local until_=redis.call("zscore",KEYS[1],ARGV[1])
redis.call("zrem",KEYS[1],ARGV[1])
redis.call("zremrangebyscore",KEYS[1],"-inf",now)
if until_ and tonumber(until_)>now then return 1 end
return 0
