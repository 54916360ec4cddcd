-- leave.lua: a waiter gives up its place (after lib_queue.lua).
--
-- KEYS   the keys whose freedom lets the next waiter in (a lock's key, a
--        semaphore's slots, a reader-writer lock's writer key), then the
--        queue keys q, a
-- ARGV   [1] the member
-- Reply  1
-- Keeps  a turn is never lost: a waiter that gives up after it was woken
--        hands its turn on (the next head is woken if a watched key is
--        free).
q,a=KEYS[#KEYS-1],KEYS[#KEYS]
now=clock()
redis.call("zrem",q,ARGV[1])
redis.call("zrem",a,ARGV[1])
pass_on(1,#KEYS-2)
return 1
