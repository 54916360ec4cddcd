-- prelude.lua: the helpers the queue, fence and observer scripts share.
--
-- Joined in front of every script that uses one (see mod.rs), so each name
-- below is a local of that script. Only function definitions and empty
-- locals: the prelude touches no key and asks nothing of the node until a
-- script calls a helper.
--
-- A script that uses the queue helpers first sets:
--   q, a   the gate node's queue keys: members by arrival time, and members
--          by until when they count as alive (node ms). A member is
--          "{client id}:{ticket}"; its client listens on
--          "redlock-wake:{client id}".
--   now    the node's time in ms: now=clock()
--   me     the caller's member ("": it will not wait)       (turn, grant)
--   grace  how long a grant is the queue's, in ms           (grant)

-- How long a place in a queue counts without a refresh, in ms: the crate's
-- QUEUE_ALIVE (a unit test holds the two equal).
local ALIVE=2000
local q,a,now,me,grace

-- The node's time in milliseconds.
local function clock()
  local t=redis.call("time")
  return t[1]*1000+math.floor(t[2]/1000)
end

-- Publishes member m's ticket on its client's wake channel. pcall: a user
-- not allowed to publish still releases and acquires.
local function wake(m)
  local c,n=string.match(m,"^(.*):(%d+)$")
  if c then redis.pcall("publish","redlock-wake:"..c,n) end
end

-- Whether member m still counts as alive in the queue.
local function waits(m)
  local s=redis.call("zscore",a,m)
  return s and tonumber(s)>now
end

-- Drops the members past their alive time; answers the first member left,
-- or nil.
local function head()
  local dead=redis.call("zrangebyscore",a,"-inf",now)
  if #dead>0 then
    redis.call("zrem",q,unpack(dead))
    redis.call("zrem",a,unpack(dead))
  end
  return redis.call("zrange",q,0,0)[1]
end

-- Queues member m at score (keeping a place it has) and refreshes its
-- alive time; both queue keys live at least ALIVE.
local function place(m,score)
  redis.call("zadd",q,"NX",score,m)
  redis.call("zadd",a,now+ALIVE,m)
  for _,k in ipairs({q,a}) do
    if redis.call("pttl",k)<ALIVE then redis.call("pexpire",k,ALIVE) end
  end
end

-- Notes a grant for grace ms, as the member "granted" of the alive set
-- (no client's member is named so). While the granted round is still
-- asking the other nodes, the key it set here is the queue's, not "held":
-- the next in line is told "others first" and stops here, instead of
-- taking the other nodes before the granted round reaches them.
local function grant()
  redis.call("zadd",a,"GT",now+grace,"granted")
  if redis.call("pttl",a)<grace then redis.call("pexpire",a,grace) end
end

-- Whether a grant is still the queue's (see grant).
local function granting()
  local s=redis.call("zscore",a,"granted")
  return s and tonumber(s)>now
end

-- The gate node's turn rule for an acquisition; held: whether the keys are
-- held here. Answers
--   1  the caller may set the keys (it leaves the queue; the grant is noted)
--   0  held, and nobody queued before the caller
--   2  others queued first
-- A caller that will wait is queued (keeping its place) and its alive time
-- refreshed; a free key whose head did not come is the head's: it is woken
-- again.
local function turn(held)
  local h=head()
  if not held and (not h or h==me) then
    if h then redis.call("zrem",q,me) redis.call("zrem",a,me) end
    grant()
    return 1
  end
  if me~="" then place(me,now) end
  if held then
    if (h and h~=me) or granting() then return 2 end
    return 0
  end
  if h~=me then wake(h) end
  return 2
end

-- Wakes the head of the queue if any of KEYS[first..first+k-1] is free: a
-- semaphore's slots after a grant or a leave (permits left for the next
-- waiter), a lock's key after a leave.
local function pass_on(first,k)
  for i=first,first+k-1 do
    if redis.call("exists",KEYS[i])==0 then
      local h=head()
      if h then wake(h) end
      return
    end
  end
end

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

-- Which of a semaphore's k slots, the last k KEYS, this node holds: a
-- string of "0"/"1", one per slot.
local function slots_held(k)
  local held={}
  for i=1,k do
    if redis.call("exists",KEYS[#KEYS-k+i])==1 then held[i]="1" else held[i]="0" end
  end
  return table.concat(held)
end

-- Wakes every live observer of an election, the members of the sorted set
-- obs (scored by until when they count), as the queue wakes a waiter.
local function notify(obs)
  redis.call("zremrangebyscore",obs,"-inf",clock())
  for _,m in ipairs(redis.call("zrange",obs,0,-1)) do wake(m) end
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
