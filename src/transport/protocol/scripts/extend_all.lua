-- extend_all.lua: extends every key, only if every key holds the token.
--
-- KEYS   the lock keys
-- ARGV   [1] the token, [2] ttl ms
-- Reply  1 extended (each expiry now at least ttl ms away), 0 some key did
--        not hold the token (nothing changed)
-- Keeps  as extend.lua: never shortens a key, only the holder extends.
for _,key in ipairs(KEYS) do
  if redis.call("get",key)~=ARGV[1] then return 0 end
end
for _,key in ipairs(KEYS) do
  if redis.call("pttl",key)<tonumber(ARGV[2]) then redis.call("pexpire",key,ARGV[2]) end
end
return 1
