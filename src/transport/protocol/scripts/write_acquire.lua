-- write_acquire.lua: a writer's acquisition of a reader-writer lock on a
-- node that is not its gate, plain or fenced (after lib_fence.lua).
--
-- KEYS   [1] the writer's key, [2] the readers' set, [3] the waiting
--        writer's mark, and on a fencing client [4] the writer key's fence
--        key
-- ARGV   [1] the token, [2] ttl ms, [3] mark ms ("0": do not mark), and on
--        a fencing client [4] the proposed fencing token, [5] idle ms
-- Reply  plain: 1 set, 0 no (or the writer's token while a writer holds);
--        fenced: 1 set (the proposed token stored), -1 no (or the writer's
--        token), {v} stale as in acquire_fenced.lua
-- Keeps  one writer, and no writer while a reader's time runs. While
--        readers hold, the writer marks that it waits, for mark ms, so new
--        readers are turned away: a mark already there keeps its value (the
--        first waiting writer's) and only lives on. A writer that gets in
--        removes the mark; one still waiting marks again with its next
--        round, once readers hold again.
local fenced=#KEYS==4
local no=0
if fenced then no=-1 end
local t=redis.call("time")
local now=t[1]*1000+math.floor(t[2]/1000)
if redis.call("exists",KEYS[1])==1 then
  local h=redis.pcall("get",KEYS[1])
  if type(h)=="string" then return h end
  return no
end
redis.call("zremrangebyscore",KEYS[2],"-inf",now)
if redis.call("zcard",KEYS[2])>0 then
  if ARGV[3]~="0" and not redis.call("set",KEYS[3],ARGV[1],"NX","PX",ARGV[3]) then
    redis.call("pexpire",KEYS[3],ARGV[3])
  end
  return no
end
if fenced then
  local stale_=refuse_stale(4,1,ARGV[4])
  if stale_ then return stale_ end
end
redis.call("set",KEYS[1],ARGV[1],"PX",ARGV[2])
redis.call("del",KEYS[3])
if fenced then fence(4,1,ARGV[4],ARGV[5]) end
return 1
