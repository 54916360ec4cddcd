-- force_release.lua: an operator's release of a lock's holder, whoever
-- it is (after lib_queue.lua).
--
-- KEYS   [1] the lock key, then on its gate node the queue keys q, a
-- ARGV   [1] the holder: the first 16 hex digits of its token's SHA-1, as
--        inspect.lua names it
-- Reply  1 deleted, 0 the key did not hold that holder's token (gone, or
--        another's: a holder that came after is never touched)
-- Keeps  only the holder the operator found is released; the fence key
--        stays, so fencing tokens still only grow; on the gate node the
--        head of the queue is woken once the key is free there.
local v=redis.pcall("get",KEYS[1])
local ours=type(v)=="string" and string.sub(redis.sha1hex(v),1,16)==ARGV[1]
if ours then redis.call("del",KEYS[1]) end
if KEYS[3] and redis.call("exists",KEYS[1])==0 then
  q,a=KEYS[2],KEYS[3]
  now=clock()
  local h=head()
  if h then wake(h) end
end
if ours then return 1 end
return 0
