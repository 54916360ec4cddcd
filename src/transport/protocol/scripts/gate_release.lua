-- gate_release.lua: the gate node's release, which wakes the next waiter
-- (after lib_queue.lua).
--
-- KEYS   the lock keys, then the queue keys q, a
-- ARGV   [1] the token, [2] the member ("" unless a queued waiter's round
--        failed after this node granted it), [3] "1" after a lease's
--        release, "0" after a failed round's clean-up
-- Reply  0 unless every key held the token; else 2 if a waiter was woken,
--        1 if nobody waited
-- Keeps  a key is deleted only by its token's holder; nobody waits for a
--        free resource:
--        * after a lease's release the head is woken whatever this node
--          holds: the caller's hold is gone, and this node's view of the
--          key is not the nodes' (it may have missed the holder's SET, or
--          keep a key a release that timed out here left behind). Where
--          the resource is still held, the wake-up costs the head a round.
--        * after a failed round's clean-up, only if the first key is free
--          here now: a caller that never held the resource does not wake
--          the head at every try.
--        A member given is the head this node granted before its round
--        failed: the grant took it out of the queue, where it was first;
--        it goes back in first (score 0) and is not woken. It waits for its
--        next round like any waiter, and keeps its turn.
q,a=KEYS[#KEYS-1],KEYS[#KEYS]
me=ARGV[2]
local n=#KEYS-2
local ours=0
for i=1,n do
  if redis.call("get",KEYS[i])==ARGV[1] then
    redis.call("del",KEYS[i])
    ours=ours+1
  end
end
local woke=0
-- Without a queue and a member to put back, there is nobody to place or
-- wake, and no need of the clock (measured in a loop of lock and release
-- on one node: 17-20 us a call against 27-29 us; release.lua's work, as
-- the floor's, costs 10 us). Dead members of a, if any, then stay until a
-- call that uses the queue drops them, or until a expires: they are never
-- counted, as every reader compares their time with now.
if me~="" or redis.call("exists",q)==1 then
  now=clock()
  if ours>0 and me~="" then place(me,0) end
  if ARGV[3]=="1" or redis.call("exists",KEYS[1])==0 then
    local h=head()
    if h and h~=me then wake(h) woke=1 end
  end
end
if ours<n then return 0 end
return 1+woke
