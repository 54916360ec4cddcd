-- gate_read_release.lua: the gate node's reader release, which wakes the
-- waiting writer or the next waiter (after lib_queue.lua).
--
-- KEYS   [1] the readers' set, [2] the writer's key, [3] the waiting
--        writer's mark, then the queue keys q, a
-- ARGV   [1] the token, [2] the member, [3] "1" after a lease's release,
--        "0" after a failed round's clean-up (as in gate_release.lua)
-- Reply  0 unless the reader was in the set and its time had not passed;
--        else 2 if a waiter was woken, 1 if not
-- Keeps  nobody waits for a free lock. The reader leaves the set; the
--        writer whose member the mark holds is woken if it still waits,
--        else the head of the queue:
--        * after a reader's release, whatever readers or writer this node
--          holds (it may have missed this reader, or keep one the nodes do
--          not; the mark turns new readers away, so a waiting writer is
--          woken at most once per reader that held when it marked);
--        * after a failed round's clean-up, only where this node held the
--          reader and no reader or writer is left here.
--        A member given goes back to the head of the queue, unwoken, as in
--        gate_release.lua.
q,a=KEYS[#KEYS-1],KEYS[#KEYS]
now=clock()
me=ARGV[2]
local until_=redis.call("zscore",KEYS[1],ARGV[1])
redis.call("zrem",KEYS[1],ARGV[1])
redis.call("zremrangebyscore",KEYS[1],"-inf",now)
if until_ and me~="" then place(me,0) end
local woke=0
if ARGV[3]=="1" or (until_ and redis.call("zcard",KEYS[1])==0
    and redis.call("exists",KEYS[2])==0) then
  local h=redis.call("get",KEYS[3])
  if not h or not waits(h) then h=head() end
  if h and h~=me then wake(h) woke=1 end
end
if not until_ or tonumber(until_)<=now then return 0 end
return 1+woke
