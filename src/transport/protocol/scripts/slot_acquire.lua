-- slot_acquire.lua: a semaphore slot's acquisition on a node that is not
-- the semaphore's gate (after lib_slots.lua).
--
-- KEYS   [1] the slot key, then every slot key of the semaphore (k of them)
-- ARGV   [1] the token, [2] ttl ms, [3] k
-- Reply  {r, held}: r as SET NX GET PX (1 set, or the holder's token; 0 for
--        a key of another type), held the slots this node holds (a "0"/"1"
--        per slot, see slots_held)
-- Keeps  a slot is set only while free.
local r=redis.pcall("set",KEYS[1],ARGV[1],"NX","GET","PX",ARGV[2])
if type(r)=="table" then
  if r.err and string.find(r.err,"WRONGTYPE") then r=0 else return r end
elseif not r then
  r=1
end
return {r,slots_held(tonumber(ARGV[3]))}
