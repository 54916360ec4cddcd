-- lib_slots.lua: a semaphore's slots, for the scripts joined after it (see
-- mod.rs). Only a function definition, as in lib_queue.lua.

-- Which of a semaphore's k slots, the last k KEYS, this node holds: a
-- string of "0"/"1", one per slot.
local function slots_held(k)
  local held={}
  for i=1,k do
    if redis.call("exists",KEYS[#KEYS-k+i])==1 then held[i]="1" else held[i]="0" end
  end
  return table.concat(held)
end
