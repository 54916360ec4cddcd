-- read_extend.lua: a reader's extension.
--
-- KEYS   [1] the readers' set
-- ARGV   [1] the token, [2] ttl ms
-- Reply  1 the reader is in the set until at least now + ttl, 0 it was not
--        in the set or its time had passed (nothing changed)
-- Keeps  as extend.lua: never shortens, and a reader that lapsed stays out.
local t=redis.call("time")
local now=t[1]*1000+math.floor(t[2]/1000)
local until_=redis.call("zscore",KEYS[1],ARGV[1])
if not until_ or tonumber(until_)<=now then return 0 end
local ttl=tonumber(ARGV[2])
if now+ttl>tonumber(until_) then redis.call("zadd",KEYS[1],now+ttl,ARGV[1]) end
if redis.call("pttl",KEYS[1])<ttl then redis.call("pexpire",KEYS[1],ttl) end
return 1
