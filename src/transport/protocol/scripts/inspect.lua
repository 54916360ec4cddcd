-- inspect.lua: what holds a resource now, for an operator. Writes nothing.
--
-- KEYS   [1..n] the keys one holder holds each (a lock's key, a
--        semaphore's slots, a reader-writer lock's writer key), then
--        optionally a readers' set (token -> until when, node ms)
-- ARGV   [1] n
-- Reply  a flat array of pairs: for each of the n keys its value ("" for
--        a key of another type; false when there is none) and its
--        remaining ms (-1: no expiry); then for each reader whose time
--        runs, its token and remaining ms
-- Keeps  nothing changes.
local n=tonumber(ARGV[1])
local out={}
for i=1,n do
  local v=redis.pcall("get",KEYS[i])
  if type(v)~="string" then
    v=redis.call("exists",KEYS[i])==1 and "" or false
  end
  out[#out+1]=v
  out[#out+1]=redis.call("pttl",KEYS[i])
end
if KEYS[n+1] then
  local t=redis.call("time")
  local now=t[1]*1000+math.floor(t[2]/1000)
  local r=redis.call("zrangebyscore",KEYS[n+1],"("..now,"+inf","withscores")
  for i=1,#r,2 do
    out[#out+1]=r[i]
    out[#out+1]=math.floor(tonumber(r[i+1])-now)
  end
end
return out
