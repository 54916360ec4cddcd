-- gate_acquire.lua: the gate node's acquisition of a lock's keys or a
-- semaphore's slot, in the queue of waiters (after lib_queue.lua).
--
-- KEYS   [1..n] the lock keys, then the semaphore's k slot keys (none for a
--        lock), then the queue keys q, a
-- ARGV   [1] the token, [2] ttl ms, [3] k, [4] grace ms, [5] the member
--        ("": the caller will not wait)
-- Reply  1 set, 0 held, 2 free but others queued first (the turn rule)
-- Keeps  the queue's order: the keys are set only while free and nobody
--        alive queued before the caller. A semaphore's grant that leaves a
--        slot free wakes the next waiter: two releases in a row each free a
--        permit, and the second may have woken the same head as the first.
q,a=KEYS[#KEYS-1],KEYS[#KEYS]
now=clock()
me,grace=ARGV[5],tonumber(ARGV[4])
local k=tonumber(ARGV[3])
local n=#KEYS-2-k
local held=false
for i=1,n do
  if redis.call("exists",KEYS[i])==1 then held=true break end
end
local r=turn(held)
if r~=1 then return r end
for i=1,n do redis.call("set",KEYS[i],ARGV[1],"PX",ARGV[2]) end
pass_on(n+1,k)
return 1
