-- extend.lua: compare-and-pexpire.
--
-- KEYS   [1] the lock key
-- ARGV   [1] the token, [2] ttl ms
-- Reply  1 the key holds the token (its expiry is now at least ttl ms
--        away), 0 it does not
-- Keeps  a key is never shortened, so an extension that arrives late
--        (after a later one, on a replacement connection) is harmless; only
--        the token's holder extends.
if redis.call("get",KEYS[1])~=ARGV[1] then return 0 end
if redis.call("pttl",KEYS[1])<tonumber(ARGV[2]) then
  redis.call("pexpire",KEYS[1],ARGV[2])
end
return 1
