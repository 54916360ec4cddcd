-- inspect.lua: what holds a resource now, for an operator. Writes nothing,
-- and answers no token: each holder as its token's SHA-1.
--
-- KEYS   [1..n] the keys one holder holds each (a lock's key, a
--        semaphore's slots, a reader-writer lock's writer key), then
--        optionally a readers' set (token -> until when, node ms)
-- ARGV   [1] n
-- Reply  a flat array of triples: for each of the n keys the SHA-1 (hex)
--        of its value ("other" for a key of another type: no lock's;
--        false when there is none), its remaining ms (-1: no expiry) and
--        the fencing token its
--        value carries (a redlock-sync token "{40 hex}.{digits}"; else
--        false); then for each reader whose time runs, the same for its
--        token and remaining ms
-- Keeps  nothing changes.
local function holder(v)
  if type(v)~="string" then return false,false end
  return redis.sha1hex(v),string.match(v,"^"..string.rep("%x",40).."%.(%d+)$") or false
end
local n=tonumber(ARGV[1])
local out={}
for i=1,n do
  local v=redis.pcall("get",KEYS[i])
  local h,f=holder(v)
  if type(v)~="string" and redis.call("exists",KEYS[i])==1 then h="other" end
  out[#out+1]=h
  out[#out+1]=redis.call("pttl",KEYS[i])
  out[#out+1]=f
end
if KEYS[n+1] then
  local t=redis.call("time")
  local now=t[1]*1000+math.floor(t[2]/1000)
  local r=redis.call("zrangebyscore",KEYS[n+1],"("..now,"+inf","withscores")
  for i=1,#r,2 do
    out[#out+1]=redis.sha1hex(r[i])
    out[#out+1]=math.floor(tonumber(r[i+1])-now)
    out[#out+1]=false
  end
end
return out
