-- release_all.lua: deletes every key that holds the token.
--
-- KEYS   the lock keys
-- ARGV   [1] the token
-- Reply  1 every key held the token, 0 otherwise (those that did are
--        deleted all the same)
-- Keeps  a key is deleted only by the acquisition whose token it holds.
local ours=0
for _,key in ipairs(KEYS) do
  if redis.call("get",key)==ARGV[1] then
    redis.call("del",key)
    ours=ours+1
  end
end
if ours==#KEYS then return 1 end
return 0
