-- no.lua: a "no" for a request that has no command here (never sent: a
-- reader's leave and an election's commands go elsewhere).
--
-- KEYS   none
-- ARGV   none
-- Reply  0
-- Keeps  everything: it touches nothing.
return 0
