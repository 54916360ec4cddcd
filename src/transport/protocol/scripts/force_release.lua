-- force_release.lua: an operator's release of a lock's holder, whoever it
-- is.
--
-- KEYS   [1] the lock key
-- ARGV   [1] the holder: the first 16 hex digits of its token's SHA-1, as
--        inspect.lua names it
-- Reply  1 deleted; 0 that holder is not here (the key is gone, holds
--        another's token, or is not a lock's: another type)
-- Keeps  only the holder the operator found is released: a holder that
--        came after holds another token and is never touched; the fence
--        key stays, so fencing tokens still only grow.
local v=redis.pcall("get",KEYS[1])
if type(v)=="string" and string.sub(redis.sha1hex(v),1,16)==ARGV[1] then
  redis.call("del",KEYS[1])
  return 1
end
return 0
