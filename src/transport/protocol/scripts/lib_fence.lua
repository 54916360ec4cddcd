-- lib_fence.lua: fencing tokens, for the scripts joined after it (see
-- mod.rs). Only function definitions, as in lib_queue.lua.

-- Of the fence keys KEYS[first..first+n-1], the largest value not below
-- the proposed token p (-1: none is); an error reply for a fence key that
-- holds anything but an integer in [0, 2^53), exact in a Lua number.
local function stale(first,n,p)
  local worst=-1
  for i=first,first+n-1 do
    local raw=redis.call("get",KEYS[i])
    if raw then
      local s=tonumber(raw)
      if not s or s~=math.floor(s) or s<0 or s>=9007199254740992 then
        return redis.error_reply("ERR redlock: "..KEYS[i].." holds no fence value")
      end
      if s>=p and s>worst then worst=s end
    end
  end
  return worst
end

-- The fenced answer for the fence keys KEYS[first..first+n-1] and the
-- proposed token p: nil when p may be granted, else the reply to give —
-- {v} for a stale p (v: the larger value stored), or stale's error.
local function refuse_stale(first,n,p)
  local w=stale(first,n,tonumber(p))
  if type(w)=="table" then return w end
  if w>=0 then return {w} end
  return nil
end

-- Stores the granted token p in the fence keys KEYS[first..first+n-1],
-- living idle ms without a new grant.
local function fence(first,n,p,idle)
  for i=first,first+n-1 do redis.call("set",KEYS[i],p,"PX",idle) end
end

-- A fenced acquisition of the n lock keys KEYS[1..n], whose fence keys are
-- KEYS[n+1..2n]; ARGV = token, ttl ms, n, proposed token, idle ms. Sets
-- every lock key or none. Answers the token of the first key held (-1 for
-- a key that holds no string), the stale reply (see refuse_stale), or 1
-- once the keys hold the token for ttl ms and the fence keys the proposed
-- token for idle ms.
local function acquire_fenced(n)
  for i=1,n do
    if redis.call("exists",KEYS[i])==1 then
      local holder=redis.pcall("get",KEYS[i])
      if type(holder)=="string" then return holder end
      return -1
    end
  end
  local no=refuse_stale(n+1,n,ARGV[4])
  if no then return no end
  for i=1,n do redis.call("set",KEYS[i],ARGV[1],"PX",ARGV[2]) end
  fence(n+1,n,ARGV[4],ARGV[5])
  return 1
end
