-- lib_queue.lua: the gate node's queue of waiters and its turn rule, for
-- the scripts joined after it (see mod.rs); also the election's observers,
-- which are woken as waiters are.
--
-- Only locals and function definitions: nothing touches a key or asks the
-- node anything until a script calls a helper. Each definition costs every
-- call of the script it is joined to (about 0.15 µs: a closure made), so
-- the helpers come in three libraries by concern, and a script joins only
-- those it uses.
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
-- alive time; both queue keys live at least ALIVE. A newcomer's arrival
-- (score > 0) comes after the last member's: members that arrive in the
-- same ms keep their order, which equal scores would leave to their names.
local function place(m,score)
  if not redis.call("zscore",q,m) then
    if score>0 then
      local last=redis.call("zrange",q,-1,-1,"withscores")[2]
      if last and tonumber(last)>=score then score=tonumber(last)+1 end
    end
    redis.call("zadd",q,score,m)
  end
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

-- Wakes every live observer of an election, the members of the sorted set
-- obs (scored by until when they count), as the queue wakes a waiter.
local function notify(obs)
  redis.call("zremrangebyscore",obs,"-inf",clock())
  for _,m in ipairs(redis.call("zrange",obs,0,-1)) do wake(m) end
end

