-- slot_acquire_fenced.lua: a fencing client's semaphore slot acquisition on
-- a node that is not the semaphore's gate (after lib_fence.lua and lib_slots.lua).
--
-- KEYS   [1] the slot key, [2] its fence key, then every slot key (k)
-- ARGV   [1] the token, [2] ttl ms, [3] 1, [4] the proposed fencing token,
--        [5] idle ms, [6] k
-- Reply  {r, held}: r as acquire_fenced.lua's reply, held the slots this
--        node holds (see slots_held); an error as is
-- Keeps  as acquire_fenced.lua.
local r=acquire_fenced(1)
if type(r)=="table" and r.err then return r end
return {r,slots_held(tonumber(ARGV[6]))}
