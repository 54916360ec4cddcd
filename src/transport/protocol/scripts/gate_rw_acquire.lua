-- gate_rw_acquire.lua: the gate node's reader or writer acquisition, in the
-- queue of waiters (after lib_queue.lua and lib_fence.lua).
--
-- KEYS   [1] the writer's key, [2] the readers' set, [3] the waiting
--        writer's mark, (on a fencing client's writer [4] the writer key's
--        fence key,) then the queue keys q, a
-- ARGV   [1] the token, [2] ttl ms, [3] mark ms, [4] the proposed fencing
--        token, [5] idle ms (both "0" unless fenced), [6] "r" or "w",
--        [7] grace ms, [8] the member
-- Reply  1 taken; 2 (-2 fenced) others queued first; 0 (-1 fenced) or the
--        writer's token for held; {v} a fencing writer's stale token,
--        answered only where the turn rule would let it in (it keeps its
--        place)
-- Keeps  the turn rule decides as for a lock. A reader counts the lock held
--        while a writer holds or waits, a writer while a writer or a live
--        reader holds (and then marks that it waits). A reader let in wakes
--        the next in line: readers behind it may come too.
--
-- The waiting writer's mark holds its member:
-- * once no reader is left, that writer goes ahead of the queue (the mark
--   promised it the lock before new readers), and a reader refused only by
--   the mark wakes it: else a reader queued ahead of the writer would be
--   refused by the mark, the writer would wait for that reader, and both
--   would sit out the mark.
-- * the marking writer, held up by readers alone, is told "held" (0), not
--   "others first", wherever it is in the queue: its rounds go on to the
--   other nodes and renew its mark there too (else they stop here behind a
--   reader queued ahead of it, the mark lapses on the others, and that
--   reader, told "held" at the head of the queue, takes them and goes
--   first); where readers left only a key behind on this node, it gets the
--   others, as its mark promised.
-- * a mark whose writer still waits (alive in the queue) is not taken over
--   by a later writer: writers go in the order they marked.
-- * a mark that names another member no longer in the queue (its writer won
--   on the other nodes without this one, or gave up) promises nothing: a
--   queued round here drops it. (The readers it turned away queued behind
--   it and would sit out its 2 s; a plain round and the other nodes still
--   honour it until it expires.)
-- * a mark that holds a token (a writer's first, plain round left it; that
--   round was in no queue) is taken over by the waiting writer that finds
--   it, also once the readers left: else the readers queued first are
--   refused by a mark nobody here owns, the writer is told they queued
--   first, and both sit out the mark.
q,a=KEYS[#KEYS-1],KEYS[#KEYS]
now=clock()
me,grace=ARGV[8],tonumber(ARGV[7])
local fenced=#KEYS==6
local reader=ARGV[6]=="r"
redis.call("zremrangebyscore",KEYS[2],"-inf",now)
local writer=nil
if redis.call("exists",KEYS[1])==1 then
  writer=redis.pcall("get",KEYS[1])
  if type(writer)~="string" then writer="" end
end
local readers=redis.call("zcard",KEYS[2])
local marked=redis.call("get",KEYS[3])
if marked and marked~=me and string.match(marked,":%d+$") and not waits(marked) then
  redis.call("del",KEYS[3])
  marked=false
end
local held=writer~=nil or (reader and marked~=false) or (not reader and readers>0)
if not reader and not writer and (readers>0 or marked) and ARGV[3]~="0"
    and not (marked and marked~=me and waits(marked)) then
  if me~="" then marked=me else marked=ARGV[1] end
  redis.call("set",KEYS[3],marked,"PX",ARGV[3])
end
local h=head()
local mine=not reader and not held and me~="" and marked==me
if fenced and not reader and not held and (not h or h==me or mine) then
  local no=refuse_stale(4,1,ARGV[4])
  if no then return no end
end
if reader and held and not writer and readers==0 and marked then wake(marked) end
local r
if mine then
  redis.call("zrem",q,me)
  redis.call("zrem",a,me)
  grant()
  r=1
else
  r=turn(held)
  if r==2 and not reader and not writer and me~="" and marked==me then r=0 end
end
if r==2 then
  if fenced then return -2 end
  return 2
end
if r==0 then
  if writer and writer~="" then return writer end
  if fenced then return -1 end
  return 0
end
if reader then
  local ttl=tonumber(ARGV[2])
  redis.call("zadd",KEYS[2],now+ttl,ARGV[1])
  if redis.call("pttl",KEYS[2])<ttl then redis.call("pexpire",KEYS[2],ttl) end
  local next_=head()
  if next_ then wake(next_) end
  return 1
end
redis.call("set",KEYS[1],ARGV[1],"PX",ARGV[2])
redis.call("del",KEYS[3])
if fenced then fence(4,1,ARGV[4],ARGV[5]) end
return 1
