-- release.lua: compare-and-delete.
--
-- KEYS   [1] the lock key
-- ARGV   [1] the token
-- Reply  1 deleted, 0 the key did not hold the token (gone, or another's)
-- Keeps  a key is deleted only by the acquisition whose token it holds.
if redis.call("get",KEYS[1])==ARGV[1] then
  return redis.call("del",KEYS[1])
end
return 0
