-- force_release.lua: an operator's release of a lock, whoever holds it
-- (after lib_queue.lua).
--
-- KEYS   [1] the lock key, then on its gate node the queue keys q, a
-- ARGV   none
-- Reply  what was there, as inspect.lua answers for one key
-- Keeps  the fence key stays, so fencing tokens still only grow; on the
--        gate node the head of the queue is woken: the key is free here.
local v=redis.pcall("get",KEYS[1])
if type(v)~="string" then
  v=redis.call("exists",KEYS[1])==1 and "" or false
end
local out={v,redis.call("pttl",KEYS[1])}
redis.call("del",KEYS[1])
if KEYS[3] then
  q,a=KEYS[2],KEYS[3]
  now=clock()
  local h=head()
  if h then wake(h) end
end
return out
