-- acquire_all.lua: sets every key or none (lock_all on one node).
--
-- KEYS   the lock keys
-- ARGV   [1] the token, [2] ttl ms
-- Reply  1 every key now holds the token; else, for the first key that
--        exists, the token it holds (0 if it holds no string)
-- Keeps  all or nothing: a refusal sets no key.
for _,key in ipairs(KEYS) do
  if redis.call("exists",key)==1 then
    local holder=redis.pcall("get",key)
    if type(holder)=="string" then return holder end
    return 0
  end
end
for _,key in ipairs(KEYS) do
  redis.call("set",key,ARGV[1],"PX",ARGV[2])
end
return 1
