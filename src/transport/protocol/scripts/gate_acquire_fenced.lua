-- gate_acquire_fenced.lua: the gate node's fenced acquisition, in the queue
-- of waiters (after lib_queue.lua and lib_fence.lua).
--
-- KEYS   [1..n] the lock keys, [n+1..2n] their fence keys, then a
--        semaphore's k slot keys, then the queue keys q, a
-- ARGV   [1] the token, [2] ttl ms, [3] n, [4] the proposed fencing token,
--        [5] idle ms, [6] k, [7] grace ms, [8] the member
-- Reply  as acquire_fenced.lua, except -2 for "free but others queued
--        first" and -1 for held
-- Keeps  the queue's order and the fence's: a stale token is answered only
--        where the turn rule would let the caller in (it keeps its place),
--        so a caller others queued before is told so, never that it is
--        stale. A semaphore's grant that leaves a slot free wakes the next
--        waiter, as in gate_acquire.lua.
q,a=KEYS[#KEYS-1],KEYS[#KEYS]
now=clock()
me,grace=ARGV[8],tonumber(ARGV[7])
local n=tonumber(ARGV[3])
local held=false
for i=1,n do
  if redis.call("exists",KEYS[i])==1 then held=true break end
end
local h=head()
if not held and (not h or h==me) then
  local no=refuse_stale(n+1,n,ARGV[4])
  if no then return no end
end
local r=turn(held)
if r==0 then return -1 elseif r==2 then return -2 end
for i=1,n do redis.call("set",KEYS[i],ARGV[1],"PX",ARGV[2]) end
fence(n+1,n,ARGV[4],ARGV[5])
pass_on(2*n+1,tonumber(ARGV[6]))
return 1
