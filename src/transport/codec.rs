//! The Redis side of each operation: the commands we send and how a reply
//! reads as a vote.
//!
//! Scripts go out as `EVAL` with their source every time, never `EVALSHA`:
//! a node whose script cache was flushed (restart, `SCRIPT FLUSH`) then never
//! answers `NOSCRIPT`, so no request has to be re-sent after the rest of its
//! batch, and a node runs the requests of one connection in the order they
//! were queued (not across a reconnect: see `redis_link.rs`). Redis caches
//! the compiled script by its hash, so `EVAL` costs the node a SHA-1 of ~120
//! bytes more than `EVALSHA`: nothing measurable.
//!
//! # The queue of waiters
//!
//! A resource's gate node (one node, the same in every client, see
//! `Transport`) keeps the resource's waiters in arrival order:
//! `redlock-queue:{resource}` (a sorted set, member → arrival time) and
//! `redlock-alive:{resource}` (member → until when it counts as alive). A
//! member is `"{client id}:{ticket}"`; its client listens on
//! `redlock-wake:{client id}` (see [`wake_channel`]). On the gate node only:
//!
//! * an acquisition that asks the gate node first (a queued waiter's, or a
//!   client's that just woke one) sets the key only while the key is free
//!   **and** nobody alive queued before the caller (it is the head, or the
//!   queue is empty);
//!   otherwise it queues the caller (when it will wait) and refuses —
//!   "others queued first" (`2`), or "held" (`0`) to the first in line. A
//!   free key whose head did not come yet gets the head woken again. The
//!   first in line takes "held" as one no among N and asks the other nodes
//!   too (a key left behind on the gate node alone must not stop the
//!   queue); everyone else stops at the gate node. A key the gate node
//!   granted less than the granted round's per-node timeout ago is not
//!   "held" but the queue's: the next in line is told "others queued
//!   first" too, so that it does not take the other nodes while the
//!   granted round is on its way to them.
//! * a lease's release wakes the head, whatever this node holds (a failed
//!   round's clean-up, only if the key is free here): one `PUBLISH` to one
//!   client, whatever the number of waiters (`2`: handed on, `1`: nobody
//!   waited).
//! * a waiter that gives up leaves the queue, and wakes the next head if
//!   the key is free.
//!
//! Members that stopped refreshing their place (crashed, or gone without
//! leaving) drop out after their alive period. The other nodes run the plain
//! commands: the queue only orders waiters and wakes one; every acquisition
//! still needs `SET NX` on a majority.

use std::sync::Arc;

use super::failure::server_failure;
use super::keys::{QUEUE_ALIVE, Role, gate_name, rw_parts, slot_siblings};
use super::request::{Op, Request};
use crate::algorithm::{Answer, Vote};
use crate::error::{FailureKind, NodeFailure};

/// Compare-and-delete: deletes the key only while it still holds our token.
pub(crate) const RELEASE_SCRIPT: &str = r#"if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
else
    return 0
end"#;

/// The Lua every gate script starts with. The queue keys are the last two
/// `KEYS`. `wake(m)` publishes member `m`'s ticket on its client's wake
/// channel (`redis.pcall`: a user not allowed to publish still releases);
/// `head()` drops members past their alive time and answers the first
/// member left (or nil); `place(m,score)` queues member `m` at `score`
/// (keeping the place it has) and refreshes its alive time.
macro_rules! queue_fns {
    () => {
        r#"local ALIVE=2000
local q,a=KEYS[#KEYS-1],KEYS[#KEYS]
local t=redis.call("time")
local now=t[1]*1000+math.floor(t[2]/1000)
local function wake(m)
local c,n=string.match(m,"^(.*):(%d+)$")
if c then redis.pcall("publish","redlock-wake:"..c,n) end
end
local function waits(m)
local s=redis.call("zscore",a,m)
return s and tonumber(s)>now
end
local function head()
local dead=redis.call("zrangebyscore",a,"-inf",now)
if #dead>0 then redis.call("zrem",q,unpack(dead)) redis.call("zrem",a,unpack(dead)) end
return redis.call("zrange",q,0,0)[1]
end
local function place(m,score)
redis.call("zadd",q,"NX",score,m)
redis.call("zadd",a,now+ALIVE,m)
for _,k in ipairs({q,a}) do
if redis.call("pttl",k)<ALIVE then redis.call("pexpire",k,ALIVE) end
end
end
"#
    };
}

/// The gate node's turn rule for an acquisition, after [`queue_fns`]:
/// `ARGV[#ARGV]` is the caller's member (`""`: it will not wait), and
/// `ARGV[#ARGV-1]` the round's per-node timeout in ms. `turn(held)`
/// answers `1` (the caller may set the key; it leaves the queue), `0`
/// (held, and nobody queued before the caller) or `2` (others queued
/// first), queueing a waiting caller (keeping its place) and refreshing its
/// alive time; a free key's head is woken again.
///
/// `grant()` notes a grant (in the alive set, as `granted`, which no
/// member is named) until the granted round's per-node timeout has passed:
/// while that round is still asking the other nodes, the key it set here
/// is the queue's, not "held" — the next in line is told "others first"
/// and stops here instead of taking the other nodes before the granted
/// round reaches them.
macro_rules! turn_fn {
    () => {
        r#"local me=ARGV[#ARGV]
local function grant()
local grace=tonumber(ARGV[#ARGV-1])
redis.call("zadd",a,"GT",now+grace,"granted")
if redis.call("pttl",a)<grace then redis.call("pexpire",a,grace) end
end
local function granting()
local s=redis.call("zscore",a,"granted")
return s and tonumber(s)>now
end
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
"#
    };
}

/// After [`queue_fns`]: `pass_on(i,k)` wakes the head of the queue if any
/// of `KEYS[i..i+k-1]` is free — a semaphore's slots after a grant or a
/// leave (permits left for the next waiter), a lock's key after a leave.
macro_rules! pass_on_fn {
    () => {
        r#"local function pass_on(first,k)
for i=first,first+k-1 do
if redis.call("exists",KEYS[i])==0 then
local h=head()
if h then wake(h) end
return
end
end
end
"#
    };
}

/// A gate script: the queue functions, the turn rule with the alive period
/// filled in, then `body`.
macro_rules! gate_script {
    ($body:expr) => {
        concat!(queue_fns!(), turn_fn!(), pass_on_fn!(), $body)
    };
}

/// The Lua every fenced acquisition starts with; `ARGV[4]` is the token
/// the client proposes, `ARGV[5]` the fence values' idle expiry (ms).
/// `stale(i,n)`: of the fence keys `KEYS[i..i+n-1]`, the largest value not
/// below the proposed token (`-1`: none is), or an error reply for a fence
/// key that holds anything but an integer in `[0, 2^53)` (exact in a Lua
/// number). `fence(i,n)` stores the proposed token in those fence keys.
/// A fenced script answers `{v}` when the proposed token is stale (`v`: the
/// larger value stored), and sets nothing then.
macro_rules! fence_fns {
    () => {
        r#"local function stale(first,n)
local p=tonumber(ARGV[4])
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
local function fence(first,n)
for i=first,first+n-1 do redis.call("set",KEYS[i],ARGV[4],"PX",ARGV[5]) end
end
"#
    };
}

/// The gate node's acquisition of one or several keys: `KEYS` = the lock
/// keys, a semaphore's `k` slot keys (none for a lock), then the queue
/// keys; `ARGV` = token, ttl ms, `k`, grace ms, member. `1` set, `0` held, `2` free
/// but others queued first. A semaphore's grant that leaves a slot free
/// wakes the next waiter: two releases in a row each free a permit, and
/// the second may have woken the same head as the first.
pub(crate) const GATE_ACQUIRE_SCRIPT: &str = gate_script!(
    r#"local k=tonumber(ARGV[3])
local n=#KEYS-2-k
local held=false
for i=1,n do if redis.call("exists",KEYS[i])==1 then held=true break end end
local r=turn(held)
if r~=1 then return r end
for i=1,n do redis.call("set",KEYS[i],ARGV[1],"PX",ARGV[2]) end
pass_on(n+1,k)
return 1"#
);

/// The gate node's fenced acquisition: `KEYS` = the lock keys, their fence
/// keys, a semaphore's `k` slot keys, then the queue keys; `ARGV` = token,
/// ttl ms, number of lock keys, proposed token, idle ms, `k`, grace ms,
/// member. As
/// [`ACQUIRE_FENCED_SCRIPT`] (and [`GATE_ACQUIRE_SCRIPT`]'s waking), and `-2`
/// for "free but others queued first". A stale token is answered only
/// where the turn rule would let the caller in (it keeps its place): a
/// caller that others queued before is told so, never that it is stale.
pub(crate) const GATE_ACQUIRE_FENCED_SCRIPT: &str = concat!(
    fence_fns!(),
    gate_script!(
        r#"local n=tonumber(ARGV[3])
local held=false
for i=1,n do if redis.call("exists",KEYS[i])==1 then held=true break end end
local h=head()
if not held and (not h or h==me) then
local w=stale(n+1,n)
if type(w)=="table" then return w end
if w>=0 then return {w} end
end
local r=turn(held)
if r==0 then return -1 elseif r==2 then return -2 end
for i=1,n do redis.call("set",KEYS[i],ARGV[1],"PX",ARGV[2]) end
fence(n+1,n)
pass_on(2*n+1,tonumber(ARGV[6]))
return 1"#
    )
);

/// The gate node's release: deletes every lock key that holds our token
/// (`KEYS` = the lock keys, then the queue keys; `ARGV` = token, member,
/// held) and wakes the head of the queue:
///
/// * after a lease's release (`held` = `1`), whatever this node holds: the
///   caller's hold is gone, and this node's view of the key is not the
///   nodes' — it may have missed the holder's `SET`, or keep a key that a
///   release which timed out here left behind; its waiters would otherwise
///   wait for their queue refresh, or that key's expiry. Where the
///   resource is still held, the wake-up costs the head one round;
/// * after a failed round's clean-up (`0`), only if the first key is free
///   here now: a round that took it here hands it on, but a caller that
///   never held the resource does not wake the head at every try.
///
/// `0` unless every key was ours; else `2` if it woke a waiter, `1` if
/// nobody waited.
///
/// The member is a queued waiter's whose round failed after this node
/// granted it (`""` otherwise): the grant took it out of the queue, where
/// it was first; it goes back in first (score 0) and is not woken — it
/// waits for its next round like any waiter, and keeps its turn.
pub(crate) const GATE_RELEASE_SCRIPT: &str = concat!(
    queue_fns!(),
    r#"local ours=0
for i=1,#KEYS-2 do
if redis.call("get",KEYS[i])==ARGV[1] then redis.call("del",KEYS[i]) ours=ours+1 end
end
local me=ARGV[2]
if ours>0 and me~="" then place(me,0) end
local woke=0
if ARGV[3]=="1" or redis.call("exists",KEYS[1])==0 then
local h=head()
if h and h~=me then wake(h) woke=1 end
end
if ours<#KEYS-2 then return 0 end
return 1+woke"#
);

/// A waiter leaves the queue (`KEYS` = the keys whose freedom lets the
/// next waiter in — a lock's key, a semaphore's slots, a reader-writer
/// lock's writer key — then the queue keys; `ARGV` = member) and, if one
/// of them is free, the next head is woken: a waiter that gives up after
/// it was woken hands its turn on. `1`.
pub(crate) const LEAVE_SCRIPT: &str = concat!(
    queue_fns!(),
    pass_on_fn!(),
    r#"redis.call("zrem",q,ARGV[1])
redis.call("zrem",a,ARGV[1])
pass_on(1,#KEYS-2)
return 1"#
);

/// Compare-and-pexpire: while the key holds our token, answers `1` and
/// moves its expiry to `ARGV[2]` ms from now — only if that is later than
/// the one it has. A key is never shortened, so an extension that arrives
/// late (after a later one, on a replacement connection) is harmless.
pub(crate) const EXTEND_SCRIPT: &str = r#"if redis.call("get", KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call("pttl", KEYS[1]) < tonumber(ARGV[2]) then
    redis.call("pexpire", KEYS[1], ARGV[2])
end
return 1"#;

/// Sets every key or none: `1`, or if any of them exists the token it
/// holds (`0` if it holds no string).
pub(crate) const ACQUIRE_ALL_SCRIPT: &str = r#"for _, key in ipairs(KEYS) do
    if redis.call("exists", key) == 1 then
        local holder = redis.pcall("get", key)
        if type(holder) == "string" then return holder end
        return 0
    end
end
for _, key in ipairs(KEYS) do
    redis.call("set", key, ARGV[1], "PX", ARGV[2])
end
return 1"#;

/// Deletes every key that holds our token; `1` only if all of them were
/// ours, else `0`.
pub(crate) const RELEASE_ALL_SCRIPT: &str = r#"local ours = 0
for _, key in ipairs(KEYS) do
    if redis.call("get", key) == ARGV[1] then
        redis.call("del", key)
        ours = ours + 1
    end
end
if ours == #KEYS then return 1 else return 0 end"#;

/// Extends every key, only if every key holds our token, never shortening
/// one (see [`EXTEND_SCRIPT`]).
pub(crate) const EXTEND_ALL_SCRIPT: &str = r#"for _, key in ipairs(KEYS) do
    if redis.call("get", key) ~= ARGV[1] then return 0 end
end
for _, key in ipairs(KEYS) do
    if redis.call("pttl", key) < tonumber(ARGV[2]) then redis.call("pexpire", key, ARGV[2]) end
end
return 1"#;

/// The body of [`ACQUIRE_FENCED_SCRIPT`] (also run inside
/// [`SLOT_ACQUIRE_FENCED_SCRIPT`]), after [`fence_fns`].
macro_rules! acquire_fenced {
    () => {
        r#"local n=tonumber(ARGV[3])
for i=1,n do
if redis.call("exists",KEYS[i])==1 then
local holder=redis.pcall("get",KEYS[i])
if type(holder)=="string" then return holder end
return -1
end
end
local w=stale(n+1,n)
if type(w)=="table" then return w end
if w>=0 then return {w} end
for i=1,n do redis.call("set",KEYS[i],ARGV[1],"PX",ARGV[2]) end
fence(n+1,n)
return 1"#
    };
}

/// Fenced acquisition in one round: `KEYS` = the lock keys, then their
/// fence keys; `ARGV` = token, ttl ms, number of lock keys, proposed token,
/// idle ms. Sets every lock key or none: answers the token of the first
/// that was held (`-1` if it holds no string); `{v}` if a fence key holds
/// `v` not below the proposed token (stale); else sets the lock keys, stores
/// the proposed token in every fence key for the idle period, and answers
/// `1`. So a node grants a token only above every token it granted before.
pub(crate) const ACQUIRE_FENCED_SCRIPT: &str = concat!(fence_fns!(), acquire_fenced!());

/// The end of both slot scripts: with the acquisition's answer `r`, which
/// of the semaphore's slots this node holds — the last `ARGV` is the number
/// of slots `k`, the last `k` `KEYS` are the slot keys — as a string of
/// `0`/`1`, one per slot: `{r, held}`.
macro_rules! slot_report {
    () => {
        r#"
local k=tonumber(ARGV[#ARGV])
local held={}
for i=1,k do
if redis.call("exists",KEYS[#KEYS-k+i])==1 then held[i]="1" else held[i]="0" end
end
return {r,table.concat(held)}"#
    };
}

/// A semaphore slot's acquisition on a node that is not its gate:
/// `KEYS` = the slot key, then every slot key of the semaphore; `ARGV` =
/// token, ttl ms, number of slots. As `SET NX GET PX` (`1` set, or the
/// holder's token; `0` for a key of another type), and the slots held.
pub(crate) const SLOT_ACQUIRE_SCRIPT: &str = concat!(
    r#"local r=redis.pcall("set",KEYS[1],ARGV[1],"NX","GET","PX",ARGV[2])
if type(r)=="table" then
if r.err and string.find(r.err,"WRONGTYPE") then r=0 else return r end
elseif not r then r=1 end"#,
    slot_report!()
);

/// A fencing client's semaphore slot acquisition on a node that is not its
/// gate: `KEYS` = the slot key, its fence key, then every slot key;
/// `ARGV` = token, ttl ms, `1`, proposed token, idle ms, number of slots.
/// As [`ACQUIRE_FENCED_SCRIPT`], and the slots held.
pub(crate) const SLOT_ACQUIRE_FENCED_SCRIPT: &str = concat!(
    fence_fns!(),
    "local function acquire()\n",
    acquire_fenced!(),
    r#"
end
local r=acquire()
if type(r)=="table" and r.err then return r end"#,
    slot_report!()
);

/// The start of the reader-writer scripts: `KEYS` = the writer's key, the
/// readers' set, the waiting writer's mark; `now` in the node's
/// milliseconds. A writer that holds answers its token (`refused()` if the
/// key holds no string).
macro_rules! rw_start {
    () => {
        r#"local t=redis.call("time")
local now=t[1]*1000+math.floor(t[2]/1000)
if redis.call("exists",KEYS[1])==1 then
local h=redis.pcall("get",KEYS[1])
if type(h)=="string" then return h end
return refused()
end
"#
    };
}

/// A reader's acquisition (`ARGV` = token, ttl ms): refused while a writer
/// holds (its token) or waits (`0`); else the reader joins the set until
/// `now + ttl`, the set living at least that long. `1`. (Readers past
/// their time leave the set when a writer or a release looks at it.)
pub(crate) const READ_ACQUIRE_SCRIPT: &str = r#"if redis.call("exists",KEYS[1],KEYS[3])>0 then
local h=redis.pcall("get",KEYS[1])
if type(h)=="string" then return h end
return 0
end
local t=redis.call("time")
local ttl=tonumber(ARGV[2])
redis.call("zadd",KEYS[2],t[1]*1000+math.floor(t[2]/1000)+ttl,ARGV[1])
if redis.call("pttl",KEYS[2])<ttl then redis.call("pexpire",KEYS[2],ttl) end
return 1"#;

/// The body of the writer's acquisition (`ARGV` = token, ttl ms, mark ms,
/// and on a fencing client the proposed token and idle ms): refused while a
/// writer holds (its token); while readers hold, it marks that a writer
/// waits, for the mark's ms (new readers are turned away), and answers
/// `refused()` (a mark already there keeps its value, the first waiting
/// writer's, and only lives on); then `check()` may refuse (a stale token); else it sets the
/// writer's key, removes the mark (a writer still waiting marks again with
/// its next round, once readers hold again) and ends with `ok()`.
macro_rules! write_acquire {
    () => {
        concat!(
            rw_start!(),
            r#"redis.call("zremrangebyscore",KEYS[2],"-inf",now)
if redis.call("zcard",KEYS[2])>0 then
if ARGV[3]~="0" and not redis.call("set",KEYS[3],ARGV[1],"NX","PX",ARGV[3]) then redis.call("pexpire",KEYS[3],ARGV[3]) end
return refused()
end
local w=check()
if w then return w end
redis.call("set",KEYS[1],ARGV[1],"PX",ARGV[2])
redis.call("del",KEYS[3])
return ok()"#
        )
    };
}

/// A writer's acquisition: see `write_acquire`. `1` once set, `0` for no.
pub(crate) const WRITE_ACQUIRE_SCRIPT: &str = concat!(
    "local function ok() return 1 end\nlocal function refused() return 0 end\n",
    "local function check() return nil end\n",
    write_acquire!()
);

/// A fencing client's writer acquisition (`KEYS` also the writer key's
/// fence key, fourth): as [`ACQUIRE_FENCED_SCRIPT`]: `1` once set (the
/// proposed token stored), `{v}` for a stale token, `-1` for no (or the
/// holder's token).
pub(crate) const WRITE_ACQUIRE_FENCED_SCRIPT: &str = concat!(
    fence_fns!(),
    r#"local function refused() return -1 end
local function check()
local w=stale(4,1)
if type(w)=="table" then return w end
if w>=0 then return {w} end
return nil
end
local function ok() fence(4,1) return 1 end
"#,
    write_acquire!()
);

/// The gate node's reader-writer acquisition: `KEYS` = the writer's key,
/// the readers' set, the waiting writer's mark, (on a fencing client the
/// writer key's fence key,) then the queue keys; `ARGV` = token, ttl ms,
/// mark ms, proposed token, idle ms (both `0` unless fenced), `r` or `w`,
/// grace ms, member (grace: see `turn_fn`). A reader counts the lock held while a writer holds or waits, a
/// writer while a writer or a live reader holds (and then marks that it
/// waits); a fencing writer's stale token is answered `{v}` where the turn
/// rule would let it in (it keeps its place); the turn rule decides as for a lock:
/// `1` taken, `2` (`-2` fenced) others queued first, `0` (`-1` fenced) or
/// the writer's token for held. A reader let in wakes the next in line:
/// readers behind it may come too.
///
/// A waiting writer's mark holds its member: once no reader is left, that
/// writer goes ahead of the queue (the mark promised it the lock before new
/// readers), and a reader refused only by the mark wakes it — otherwise a
/// reader queued ahead of the writer would be refused by the mark, the
/// writer would wait for that reader, and both would sit out the mark. The
/// marking writer, held up by readers alone, is told "held" (`0`), not
/// "others first", wherever it is in the queue: its rounds go on to the
/// other nodes and renew its mark there too (they stopped here behind a
/// reader queued ahead of it, the mark lapsed on the others, and that
/// reader, told "held" at the head of the queue, took them and went first),
/// and where readers left only a key behind on this node it gets the others,
/// as its mark promised. A
/// mark whose writer still waits (`waits`: alive in the queue) is not
/// taken over by a later writer: writers go in the order they marked. A
/// mark that names another member no longer in the queue — its writer won
/// on the other nodes without this one, or gave up — promises nothing: a
/// queued round here drops it (the readers it turned away queued behind
/// it, and sat out its 2 s; a plain round and the other nodes still honour
/// it until it expires). A mark that holds a token — a writer's first,
/// plain round left it (that round was in no queue) — is taken over by the
/// waiting writer that finds it, also once the readers left: else the
/// readers queued first are refused by a mark nobody here owns, the writer
/// is told they queued first, and both sit out the mark.
pub(crate) const GATE_RW_ACQUIRE_SCRIPT: &str = concat!(
    fence_fns!(),
    gate_script!(
        r#"local fenced=#KEYS==6
local reader=ARGV[6]=="r"
redis.call("zremrangebyscore",KEYS[2],"-inf",now)
local writer=nil
if redis.call("exists",KEYS[1])==1 then
writer=redis.pcall("get",KEYS[1])
if type(writer)~="string" then writer="" end
end
local readers=redis.call("zcard",KEYS[2])
local marked=redis.call("get",KEYS[3])
if marked and marked~=me and string.match(marked,":%d+$") and not waits(marked) then redis.call("del",KEYS[3]) marked=false end
local held=writer~=nil or (reader and marked~=false) or (not reader and readers>0)
if not reader and not writer and (readers>0 or marked) and ARGV[3]~="0" and not (marked and marked~=me and waits(marked)) then
if me~="" then marked=me else marked=ARGV[1] end
redis.call("set",KEYS[3],marked,"PX",ARGV[3])
end
local h=head()
local mine=not reader and not held and me~="" and marked==me
if fenced and not reader and not held and (not h or h==me or mine) then
local w=stale(4,1)
if type(w)=="table" then return w end
if w>=0 then return {w} end
end
if reader and held and not writer and readers==0 and marked then wake(marked) end
local r
if mine then
redis.call("zrem",q,me) redis.call("zrem",a,me)
grant()
r=1
else
r=turn(held)
if r==2 and not reader and not writer and me~="" and marked==me then r=0 end
end
if r==2 then if fenced then return -2 end return 2 end
if r==0 then
if writer and writer~="" then return writer end
if fenced then return -1 end
return 0
end
if reader then
local ttl=tonumber(ARGV[2])
redis.call("zadd",KEYS[2],now+ttl,ARGV[1])
if redis.call("pttl",KEYS[2])<ttl then redis.call("pexpire",KEYS[2],ttl) end
local h=head()
if h then wake(h) end
return 1
end
redis.call("set",KEYS[1],ARGV[1],"PX",ARGV[2])
redis.call("del",KEYS[3])
if fenced then fence(4,1) end
return 1"#
    )
);

/// The gate node's reader release: `KEYS` = the readers' set, the writer's
/// key, the waiting writer's mark, then the queue keys; `ARGV` = token,
/// member, held (as in [`GATE_RELEASE_SCRIPT`]). Leaves the set and wakes
/// the writer whose member the mark holds if it still waits, else the head
/// of the queue: after a reader's release whatever readers or writer this
/// node holds (it may have missed this reader, or keep one the nodes do
/// not; the mark turns new readers away, so a waiting writer is woken at
/// most once per reader that held when it marked); after a failed round's
/// clean-up only where this node held the reader and no reader or writer
/// is left here. `0` unless the reader was in the set and its time had not
/// passed, else `2` if it woke a waiter, `1` if not. A member goes back to
/// the head of the queue, unwoken, as in [`GATE_RELEASE_SCRIPT`].
pub(crate) const GATE_READ_RELEASE_SCRIPT: &str = concat!(
    queue_fns!(),
    r#"local until_=redis.call("zscore",KEYS[1],ARGV[1])
redis.call("zrem",KEYS[1],ARGV[1])
redis.call("zremrangebyscore",KEYS[1],"-inf",now)
local me=ARGV[2]
if until_ and me~="" then place(me,0) end
local woke=0
if ARGV[3]=="1" or (until_ and redis.call("zcard",KEYS[1])==0 and redis.call("exists",KEYS[2])==0) then
local h=redis.call("get",KEYS[3])
if not h or not waits(h) then h=head() end
if h and h~=me then wake(h) woke=1 end
end
if not until_ or tonumber(until_)<=now then return 0 end
return 1+woke"#
);

/// A reader's release (`KEYS` = the readers' set; `ARGV` = token): leaves
/// the set; `1` if it was in it and its time had not passed.
pub(crate) const READ_RELEASE_SCRIPT: &str = r#"local t=redis.call("time")
local now=t[1]*1000+math.floor(t[2]/1000)
local until_=redis.call("zscore",KEYS[1],ARGV[1])
redis.call("zrem",KEYS[1],ARGV[1])
redis.call("zremrangebyscore",KEYS[1],"-inf",now)
if until_ and tonumber(until_)>now then return 1 end
return 0"#;

/// A reader's extension (`KEYS` = the readers' set; `ARGV` = token, ttl
/// ms): while the reader is in the set and its time has not passed, moves
/// its time to `now + ttl` if that is later (never shorter), the set living
/// at least that long; `1`, else `0`.
pub(crate) const READ_EXTEND_SCRIPT: &str = r#"local t=redis.call("time")
local now=t[1]*1000+math.floor(t[2]/1000)
local until_=redis.call("zscore",KEYS[1],ARGV[1])
if not until_ or tonumber(until_)<=now then return 0 end
local ttl=tonumber(ARGV[2])
if now+ttl>tonumber(until_) then redis.call("zadd",KEYS[1],now+ttl,ARGV[1]) end
if redis.call("pttl",KEYS[1])<ttl then redis.call("pexpire",KEYS[1],ttl) end
return 1"#;

/// How long a waiting writer's mark turns new readers away without a new
/// round from that writer: four of its longest pauses between rounds
/// (a writer waits at most [`QUEUE_REFRESH`](crate::settings::QUEUE_REFRESH)
/// between rounds).
pub(crate) const WRITER_MARK: std::time::Duration = QUEUE_ALIVE;

/// The channel a client's queued waiters are woken on:
/// `redlock-wake:{client id}`.
pub(crate) fn wake_channel(client: &str) -> String {
    format!("{WAKE_PREFIX}{client}")
}

/// What every wake channel's name starts with.
pub(crate) const WAKE_PREFIX: &str = "redlock-wake:";

/// The key that keeps `key`'s fence value: `redlock-fence:{key}`.
pub(crate) fn fence_key(key: &str) -> String {
    format!("redlock-fence:{key}")
}

/// The gate node's queue keys for `key`: arrival order, and alive times.
fn queue_keys(key: &str) -> [String; 2] {
    let key = gate_name(key);
    [
        format!("redlock-queue:{key}"),
        format!("redlock-alive:{key}"),
    ]
}

/// Appends the RESP encoding of `req` to `out`.
pub(crate) fn encode(req: &Request, out: &mut Vec<u8>) {
    if super::elect::is_elect_op(req.op) {
        return super::elect::encode(req, out);
    }
    if super::elect::encode_extend(req, out).is_some() {
        return;
    }
    let first = req.keys.first().map_or("", |k| &**k);
    if req.queue.is_some() || req.op == Op::Leave {
        let member = req.queue.as_deref().unwrap_or("");
        return encode_gate(req, first, member, out);
    }
    if let Some((role, keys)) = rw_parts(first)
        && encode_rw(req, role, &keys, out)
    {
        return;
    }
    if let (Some(permits), Op::Acquire { .. } | Op::AcquireFenced { .. }) = (req.report, req.op) {
        return encode_slot(req, first, permits, out);
    }
    if let Op::AcquireFenced { .. } = req.op {
        return encode_fenced(req, None, out);
    }
    if req.keys.len() > 1 {
        return encode_all(req, out);
    }
    let key = first.as_bytes();
    let token = req.token.as_bytes();
    let mut cmd = redis::cmd("EVAL");
    match req.op {
        Op::Acquire { ttl_ms } => {
            // `GET`: a refusal names the holder (its token, which a vote
            // keeps only as a hash), so a round can tell a split from a
            // holder. Redis 7.0 or later.
            cmd = redis::cmd("SET");
            cmd.arg(key)
                .arg(token)
                .arg("NX")
                .arg("GET")
                .arg("PX")
                .arg(ttl_ms);
        }
        Op::Release => {
            cmd.arg(RELEASE_SCRIPT).arg(1).arg(key).arg(token);
        }
        Op::Extend { ttl_ms } => {
            cmd.arg(EXTEND_SCRIPT)
                .arg(1)
                .arg(key)
                .arg(token)
                .arg(ttl_ms);
        }
        Op::AcquireFenced { .. } => return encode_fenced(req, None, out),
        // Only ever sent to the gate node (see `encode_gate`); an
        // election's commands never come here (see `encode`).
        Op::Leave | Op::Proclaim { .. } | Op::ReadLeader | Op::Resign => {
            cmd.arg("return 0").arg(0);
        }
    }
    cmd.write_packed_command(out);
}

/// The gate node's copy of a request that takes part in the queue of
/// `first` (the first key), for the waiter `member` (`""`: not waiting).
fn encode_gate(req: &Request, first: &str, member: &str, out: &mut Vec<u8>) {
    let [queue, alive] = queue_keys(first);
    let mut cmd = redis::cmd("EVAL");
    let token = req.token.as_bytes();
    let rw = rw_parts(first);
    match (req.op, rw) {
        (
            Op::Acquire { ttl_ms } | Op::AcquireFenced { ttl_ms, .. },
            Some((role, [writer, readers, mark])),
        ) => {
            let reader = role == Role::Read;
            let (proposed, idle_ms) = match req.op {
                Op::AcquireFenced {
                    proposed, idle_ms, ..
                } if !reader => (proposed, idle_ms),
                _ => (0, 0),
            };
            let fenced = proposed > 0;
            cmd.arg(GATE_RW_ACQUIRE_SCRIPT)
                .arg(if fenced { 6 } else { 5 })
                .arg(&writer)
                .arg(readers)
                .arg(mark);
            if fenced {
                cmd.arg(fence_key(&writer));
            }
            cmd.arg(queue).arg(alive).arg(token).arg(ttl_ms);
            cmd.arg(mark_for(req)).arg(proposed).arg(idle_ms);
            cmd.arg(if reader { "r" } else { "w" });
            cmd.arg(grace_ms(req)).arg(member);
        }
        (Op::Release, Some((Role::Read, [writer, readers, mark]))) => {
            cmd.arg(GATE_READ_RELEASE_SCRIPT)
                .arg(5)
                .arg(readers)
                .arg(writer)
                .arg(mark)
                .arg(queue)
                .arg(alive)
                .arg(token)
                .arg(member)
                .arg(u8::from(req.held));
        }
        _ => return encode_gate_lock(req, first, (queue, alive), member, out),
    }
    cmd.write_packed_command(out);
}

/// How long the gate node counts a grant's key as the queue's (see
/// [`turn_fn`]): the granted round's per-node timeout, in whole ms (at
/// least 1).
fn grace_ms(req: &Request) -> u64 {
    u64::try_from(req.timeout.value.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// [`encode_gate`] for a lock's keys (and a writer's release, extension and
/// leave, which are a lock's).
fn encode_gate_lock(
    req: &Request,
    first: &str,
    (queue, alive): (String, String),
    member: &str,
    out: &mut Vec<u8>,
) {
    let mut cmd = redis::cmd("EVAL");
    let token = req.token.as_bytes();
    let keys = req.keys.len() + 2;
    let slots = siblings(req, first);
    match req.op {
        Op::Acquire { ttl_ms } => {
            cmd.arg(GATE_ACQUIRE_SCRIPT).arg(keys + slots.len());
            all_keys(&mut cmd, req).arg(&slots).arg(queue).arg(alive);
            cmd.arg(token).arg(ttl_ms).arg(slots.len());
            cmd.arg(grace_ms(req)).arg(member);
        }
        Op::AcquireFenced { .. } => return encode_fenced(req, Some((queue, alive, member)), out),
        Op::Release => {
            cmd.arg(GATE_RELEASE_SCRIPT).arg(keys);
            all_keys(&mut cmd, req)
                .arg(queue)
                .arg(alive)
                .arg(token)
                .arg(member)
                .arg(u8::from(req.held));
        }
        Op::Leave => {
            // What lets the next waiter in once free: a semaphore's slots,
            // a reader-writer lock's writer key, a lock's (first) key.
            let watched = match rw_parts(first) {
                _ if !slots.is_empty() => slots,
                Some((_, [writer, _, _])) => vec![writer],
                None => vec![first.to_owned()],
            };
            cmd.arg(LEAVE_SCRIPT)
                .arg(watched.len() + 2)
                .arg(&watched)
                .arg(queue)
                .arg(alive)
                .arg(member);
        }
        // Nothing to queue for: the plain command.
        Op::Extend { .. } | Op::Proclaim { .. } | Op::ReadLeader | Op::Resign => {
            let plain = Request {
                queue: None,
                ..req.clone()
            };
            return encode(&plain, out);
        }
    }
    cmd.write_packed_command(out);
}

/// A semaphore slot's request (one with `report`): every slot key of the
/// semaphore; else none.
fn siblings(req: &Request, first: &str) -> Vec<String> {
    req.report
        .map(|permits| slot_siblings(first, permits).collect())
        .unwrap_or_default()
}

/// Adds every lock key to `cmd`.
fn all_keys<'c>(cmd: &'c mut redis::Cmd, req: &Request) -> &'c mut redis::Cmd {
    for key in req.keys.iter() {
        cmd.arg(key.as_bytes());
    }
    cmd
}

/// The fenced acquisition: lock keys, then fence keys (then, on the gate
/// node, the queue keys and the member).
fn encode_fenced(req: &Request, gate: Option<(String, String, &str)>, out: &mut Vec<u8>) {
    let Op::AcquireFenced {
        ttl_ms,
        proposed,
        idle_ms,
    } = req.op
    else {
        return;
    };
    let mut cmd = redis::cmd("EVAL");
    let script = match &gate {
        Some(_) => GATE_ACQUIRE_FENCED_SCRIPT,
        None => ACQUIRE_FENCED_SCRIPT,
    };
    let slots = match gate {
        Some(_) => siblings(req, req.keys.first().map_or("", |k| &**k)),
        None => Vec::new(),
    };
    let queue_keys = if gate.is_some() { 2 } else { 0 };
    cmd.arg(script)
        .arg(req.keys.len() * 2 + slots.len() + queue_keys);
    all_keys(&mut cmd, req);
    for key in req.keys.iter() {
        cmd.arg(fence_key(key));
    }
    if let Some((queue, alive, _)) = &gate {
        cmd.arg(&slots).arg(queue).arg(alive);
    }
    cmd.arg(req.token.as_bytes())
        .arg(ttl_ms)
        .arg(req.keys.len())
        .arg(proposed)
        .arg(idle_ms);
    if let Some((_, _, member)) = gate {
        cmd.arg(slots.len()).arg(grace_ms(req)).arg(member);
    }
    cmd.write_packed_command(out);
}

/// A semaphore slot's acquisition that also reports the slots held.
fn encode_slot(req: &Request, slot: &str, permits: u32, out: &mut Vec<u8>) {
    let mut cmd = redis::cmd("EVAL");
    let (script, ttl_ms, fence) = match req.op {
        Op::AcquireFenced {
            ttl_ms,
            proposed,
            idle_ms,
        } => (
            SLOT_ACQUIRE_FENCED_SCRIPT,
            ttl_ms,
            Some((proposed, idle_ms)),
        ),
        Op::Acquire { ttl_ms } => (SLOT_ACQUIRE_SCRIPT, ttl_ms, None),
        _ => {
            return encode(
                &Request {
                    report: None,
                    ..req.clone()
                },
                out,
            );
        }
    };
    let lock_keys = if fence.is_some() { 2 } else { 1 };
    cmd.arg(script)
        .arg(lock_keys + usize::try_from(permits).unwrap_or(0))
        .arg(slot);
    if fence.is_some() {
        cmd.arg(fence_key(slot));
    }
    for sibling in slot_siblings(slot, permits) {
        cmd.arg(sibling);
    }
    cmd.arg(req.token.as_bytes()).arg(ttl_ms);
    if let Some((proposed, idle_ms)) = fence {
        cmd.arg(1).arg(proposed).arg(idle_ms);
    }
    cmd.arg(permits);
    cmd.write_packed_command(out);
}

/// How long a writer refused by readers marks that it waits: `0` (no
/// mark) for one that will not try again.
fn mark_for(req: &Request) -> u64 {
    if req.waits { mark_ms() } else { 0 }
}

/// [`WRITER_MARK`] in milliseconds.
fn mark_ms() -> u64 {
    u64::try_from(WRITER_MARK.as_millis()).unwrap_or(u64::MAX)
}

/// A reader-writer lock's request, if it needs its own script (`false`:
/// the writer's release and extension, which are those
/// of an ordinary lock on the writer's key). `keys` as [`rw_parts`].
fn encode_rw(req: &Request, role: Role, keys: &[String; 3], out: &mut Vec<u8>) -> bool {
    let [writer, readers, mark] = keys;
    let token = req.token.as_bytes();
    let mut cmd = redis::cmd("EVAL");
    match (role, req.op) {
        (Role::Read, Op::Acquire { ttl_ms } | Op::AcquireFenced { ttl_ms, .. }) => {
            cmd.arg(READ_ACQUIRE_SCRIPT)
                .arg(3)
                .arg(writer)
                .arg(readers)
                .arg(mark)
                .arg(token)
                .arg(ttl_ms);
        }
        (Role::Read, Op::Release) => {
            cmd.arg(READ_RELEASE_SCRIPT).arg(1).arg(readers).arg(token);
        }
        // Never sent: a reader's leave goes to the gate node. A no.
        (Role::Read, Op::Leave | Op::Proclaim { .. } | Op::ReadLeader | Op::Resign) => {
            cmd.arg("return 0").arg(0);
        }
        (Role::Read, Op::Extend { ttl_ms }) => {
            cmd.arg(READ_EXTEND_SCRIPT)
                .arg(1)
                .arg(readers)
                .arg(token)
                .arg(ttl_ms);
        }
        (Role::Write, Op::Acquire { ttl_ms }) => {
            cmd.arg(WRITE_ACQUIRE_SCRIPT)
                .arg(3)
                .arg(writer)
                .arg(readers)
                .arg(mark);
            cmd.arg(token).arg(ttl_ms).arg(mark_for(req));
        }
        (
            Role::Write,
            Op::AcquireFenced {
                ttl_ms,
                proposed,
                idle_ms,
            },
        ) => {
            cmd.arg(WRITE_ACQUIRE_FENCED_SCRIPT)
                .arg(4)
                .arg(writer)
                .arg(readers)
                .arg(mark)
                .arg(fence_key(writer));
            cmd.arg(token).arg(ttl_ms).arg(mark_for(req));
            cmd.arg(proposed).arg(idle_ms);
        }
        (Role::Write, _) => return false,
    }
    cmd.write_packed_command(out);
    true
}

/// Several keys: one script that acts on all of them or on none.
fn encode_all(req: &Request, out: &mut Vec<u8>) {
    let (script, ttl_ms) = match req.op {
        Op::Acquire { ttl_ms } => (ACQUIRE_ALL_SCRIPT, Some(ttl_ms)),
        Op::Extend { ttl_ms } => (EXTEND_ALL_SCRIPT, Some(ttl_ms)),
        Op::Release => (RELEASE_ALL_SCRIPT, None),
        Op::AcquireFenced { .. } => return encode_fenced(req, None, out),
        Op::Leave | Op::Proclaim { .. } | Op::ReadLeader | Op::Resign => (r#"return 0"#, None),
    };
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script).arg(req.keys.len());
    all_keys(&mut cmd, req).arg(req.token.as_bytes());
    if let Some(ttl_ms) = ttl_ms {
        cmd.arg(ttl_ms);
    }
    cmd.write_packed_command(out);
}

/// Reads a node's reply to one request as a vote.
pub(crate) fn interpret(req: &Request, value: redis::Value, node: &Arc<str>) -> Answer {
    if super::elect::is_elect_op(req.op) {
        return super::elect::vote(req, value, node);
    }
    let reports = req.report.is_some()
        && req.queue.is_none()
        && matches!(req.op, Op::Acquire { .. } | Op::AcquireFenced { .. });
    if !reports {
        let scripted = req.keys.len() > 1
            || req.queue.is_some()
            || req.keys.first().is_some_and(|key| rw_parts(key).is_some());
        return vote(req, value, node, scripted);
    }
    // The slot scripts: `{answer, held}`.
    match value {
        redis::Value::Array(parts) if parts.len() == 2 => {
            let mut parts = parts.into_iter();
            let (answer, held) = (parts.next(), parts.next());
            let held = match held {
                Some(redis::Value::BulkString(held)) => slots_held(&held),
                _ => None,
            };
            match (answer, held) {
                (Some(answer), Some(held)) => vote(req, answer, node, true).map(|vote| Vote {
                    slots: Some(held),
                    ..vote
                }),
                _ => Err(unexpected(node)),
            }
        }
        other => vote(req, other, node, true),
    }
}

/// A slot report (`0`/`1` per slot) as a set of slots.
fn slots_held(held: &[u8]) -> Option<u64> {
    if held.len() > 64 {
        return None;
    }
    held.iter()
        .enumerate()
        .try_fold(0u64, |set, (i, c)| match c {
            b'0' => Some(set),
            b'1' => Some(set | 1 << i),
            _ => None,
        })
}

/// A reply that is none of the expected ones. Never echoes the reply
/// itself: it could carry a token.
fn unexpected(node: &Arc<str>) -> NodeFailure {
    NodeFailure::new(node.clone(), FailureKind::Server, "unexpected reply type")
}

/// Reads one reply as a vote; `scripted`: it came from one of the scripts,
/// not from `SET NX GET`.
fn vote(req: &Request, value: redis::Value, node: &Arc<str>, scripted: bool) -> Answer {
    use redis::Value;
    match (req.op, value) {
        // `SET … NX GET`: nil when it set the key, else the holder's token.
        (Op::Acquire { .. }, Value::Nil) if !scripted => Ok(Vote::YES),
        (Op::Acquire { .. }, Value::BulkString(holder)) if !scripted => Ok(Vote::held_by(&holder)),
        // The scripts: 1 set, 0 held, 2 (gate node) others queued first.
        (Op::Acquire { .. }, Value::Int(n @ 0..=2)) if scripted => Ok(match n {
            1 => Vote::YES,
            2 => Vote::queued(false),
            _ => Vote::NO,
        }),
        (Op::Extend { .. } | Op::Leave, Value::Int(n)) => Ok((n == 1).into()),
        // 1 deleted, 2 (gate node) deleted and woke the next waiter.
        (Op::Release, Value::Int(2)) if req.queue.is_some() => Ok(Vote::queued(true)),
        (Op::Release, Value::Int(n)) => Ok((n == 1).into()),
        // 1 set (the proposed token stored), -1 when a key was held, -2
        // (gate node) free but others queued first, `{v}` a stale token.
        (Op::AcquireFenced { .. }, Value::Int(1)) => Ok(Vote::YES),
        (Op::AcquireFenced { .. }, Value::Int(-1)) => Ok(Vote::NO),
        (Op::AcquireFenced { .. }, Value::Array(stored)) => match stored.as_slice() {
            [Value::Int(v)] if *v >= 0 => Ok(Vote::stale(v.unsigned_abs())),
            _ => Err(unexpected(node)),
        },
        // The scripts' no that names the holder (the first held key's).
        (Op::Acquire { .. } | Op::AcquireFenced { .. }, Value::BulkString(holder)) => {
            Ok(Vote::held_by(&holder))
        }
        (Op::AcquireFenced { .. }, Value::Int(-2)) if req.queue.is_some() => {
            Ok(Vote::queued(false))
        }
        // The key holds another type (a list, a hash): it exists, so it is
        // held, as plain `SET NX` and the scripts answer.
        (Op::Acquire { .. }, Value::ServerError(err)) if !scripted && err.code() == "WRONGTYPE" => {
            Ok(Vote::NO)
        }
        // Redis before 7.0 refuses `NX` with `GET`.
        (Op::Acquire { .. }, Value::ServerError(err))
            if !scripted && err.details().is_some_and(|d| d.contains("syntax error")) =>
        {
            Err(NodeFailure::new(
                node.clone(),
                FailureKind::Unsupported,
                "the node refuses SET … NX GET: it runs Redis older than 7.0, which \
                 redlock-sync needs",
            ))
        }
        (_, Value::ServerError(err)) => Err(server_failure(node, &err)),
        (_, _) => Err(unexpected(node)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::NodeTimeout;
    use std::time::{Duration, Instant};

    fn req(op: Op) -> Request {
        Request {
            op,
            keys: Arc::from([Arc::from("res")]),
            token: Arc::from("tok"),
            timeout: NodeTimeout::fixed(Duration::from_millis(5)),
            expires: Instant::now(),
            queue: None,
            report: None,
            value: None,
            waits: true,
            held: true,
        }
    }

    fn encoded(op: Op) -> String {
        encoded_req(&req(op))
    }

    fn encoded_req(r: &Request) -> String {
        let mut out = Vec::new();
        encode(r, &mut out);
        String::from_utf8(out).unwrap()
    }

    fn resp(args: &[&str]) -> String {
        let mut s = format!("*{}\r\n", args.len());
        for a in args {
            s.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s
    }

    #[test]
    fn acquire_is_set_nx_px() {
        assert_eq!(
            encoded(Op::Acquire { ttl_ms: 1500 }),
            resp(&["SET", "res", "tok", "NX", "GET", "PX", "1500"])
        );
    }

    #[test]
    fn scripts_go_out_as_eval_with_their_source() {
        assert_eq!(
            encoded(Op::Release),
            resp(&["EVAL", RELEASE_SCRIPT, "1", "res", "tok"])
        );
        assert_eq!(
            encoded(Op::Extend { ttl_ms: 30 }),
            resp(&["EVAL", EXTEND_SCRIPT, "1", "res", "tok", "30"])
        );
    }

    /// Issue 36: a lease's release tells the gate node it held the
    /// resource (`1`: wake the next waiter whatever is there); a failed
    /// round's clean-up that it did not (`0`), for locks and readers alike.
    #[test]
    fn a_release_says_whether_it_held() {
        let (q, a) = ("redlock-queue:res", "redlock-alive:res");
        for held in [true, false] {
            let mut release = req(Op::Release);
            release.queue = Some(Arc::from(""));
            release.held = held;
            let flag = if held { "1" } else { "0" };
            assert_eq!(
                encoded_req(&release),
                resp(&[
                    "EVAL",
                    GATE_RELEASE_SCRIPT,
                    "3",
                    "res",
                    q,
                    a,
                    "tok",
                    "",
                    flag
                ])
            );
            release.keys = Arc::from([Arc::from("redlock-rw:l#r")]);
            let (q, a) = ("redlock-queue:redlock-rw:l", "redlock-alive:redlock-rw:l");
            assert_eq!(
                encoded_req(&release),
                resp(&[
                    "EVAL",
                    GATE_READ_RELEASE_SCRIPT,
                    "5",
                    "redlock-rw:l#r",
                    "redlock-rw:l#w",
                    "redlock-rw:l#wait",
                    q,
                    a,
                    "tok",
                    "",
                    flag
                ])
            );
        }
    }

    #[test]
    fn several_keys_go_out_as_one_all_or_nothing_script() {
        let mut all = req(Op::Acquire { ttl_ms: 70 });
        all.keys = Arc::from([Arc::from("a"), Arc::from("b")]);
        let mut out = Vec::new();
        encode(&all, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            resp(&["EVAL", ACQUIRE_ALL_SCRIPT, "2", "a", "b", "tok", "70"])
        );
        all.op = Op::Release;
        let mut out = Vec::new();
        encode(&all, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            resp(&["EVAL", RELEASE_ALL_SCRIPT, "2", "a", "b", "tok"])
        );
        all.op = Op::Extend { ttl_ms: 9 };
        let mut out = Vec::new();
        encode(&all, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            resp(&["EVAL", EXTEND_ALL_SCRIPT, "2", "a", "b", "tok", "9"])
        );
    }

    #[test]
    fn the_gate_nodes_copy_carries_the_queue_keys_and_the_member() {
        let gate = |op: Op, keys: &[&str]| {
            let mut r = req(op);
            r.keys = keys.iter().map(|k| Arc::from(*k)).collect();
            r.queue = Some(Arc::from("c:7"));
            let mut out = Vec::new();
            encode(&r, &mut out);
            String::from_utf8(out).unwrap()
        };
        let (q, a) = ("redlock-queue:res", "redlock-alive:res");
        assert_eq!(
            gate(Op::Acquire { ttl_ms: 9 }, &["res"]),
            resp(&[
                "EVAL",
                GATE_ACQUIRE_SCRIPT,
                "3",
                "res",
                q,
                a,
                "tok",
                "9",
                "0",
                "5",
                "c:7"
            ])
        );
        assert_eq!(
            gate(Op::Acquire { ttl_ms: 9 }, &["res", "b"]),
            resp(&[
                "EVAL",
                GATE_ACQUIRE_SCRIPT,
                "4",
                "res",
                "b",
                q,
                a,
                "tok",
                "9",
                "0",
                "5",
                "c:7"
            ])
        );
        assert_eq!(
            gate(
                Op::AcquireFenced {
                    ttl_ms: 9,
                    proposed: 41,
                    idle_ms: 5000
                },
                &["res"]
            ),
            resp(&[
                "EVAL",
                GATE_ACQUIRE_FENCED_SCRIPT,
                "4",
                "res",
                "redlock-fence:res",
                q,
                a,
                "tok",
                "9",
                "1",
                "41",
                "5000",
                "0",
                "5",
                "c:7"
            ])
        );
        assert_eq!(
            gate(Op::Release, &["res"]),
            resp(&[
                "EVAL",
                GATE_RELEASE_SCRIPT,
                "3",
                "res",
                q,
                a,
                "tok",
                "c:7",
                "1"
            ])
        );
        assert_eq!(
            gate(Op::Leave, &["res", "b"]),
            resp(&["EVAL", LEAVE_SCRIPT, "3", "res", q, a, "c:7"])
        );
        // A semaphore's slot: every slot; a reader: the writer's key.
        let mut slot = req(Op::Leave);
        slot.keys = Arc::from([Arc::from("redlock-sem:s#1")]);
        slot.queue = Some(Arc::from("c:7"));
        slot.report = Some(2);
        let mut out = Vec::new();
        encode(&slot, &mut out);
        let (sq, sa) = ("redlock-queue:redlock-sem:s", "redlock-alive:redlock-sem:s");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            resp(&[
                "EVAL",
                LEAVE_SCRIPT,
                "4",
                "redlock-sem:s#0",
                "redlock-sem:s#1",
                sq,
                sa,
                "c:7"
            ])
        );
        let (rq, ra) = ("redlock-queue:redlock-rw:l", "redlock-alive:redlock-rw:l");
        assert_eq!(
            gate(Op::Leave, &["redlock-rw:l#r"]),
            resp(&["EVAL", LEAVE_SCRIPT, "3", "redlock-rw:l#w", rq, ra, "c:7"])
        );
        // A writer's and a reader's acquisition on a reader-writer lock's
        // gate node: role, then the grace (the round's per-node timeout),
        // then the member, last.
        let (rq, ra) = ("redlock-queue:redlock-rw:l", "redlock-alive:redlock-rw:l");
        for (key, role) in [("redlock-rw:l#w", "w"), ("redlock-rw:l#r", "r")] {
            assert_eq!(
                gate(Op::Acquire { ttl_ms: 9 }, &[key]),
                resp(&[
                    "EVAL",
                    GATE_RW_ACQUIRE_SCRIPT,
                    "5",
                    "redlock-rw:l#w",
                    "redlock-rw:l#r",
                    "redlock-rw:l#wait",
                    rq,
                    ra,
                    "tok",
                    "9",
                    &mark_ms().to_string(),
                    "0",
                    "0",
                    role,
                    "5",
                    "c:7"
                ])
            );
        }
        // Nothing to queue for: the plain command.
        assert_eq!(
            gate(Op::Extend { ttl_ms: 30 }, &["res"]),
            resp(&["EVAL", EXTEND_SCRIPT, "1", "res", "tok", "30"])
        );
        assert_eq!(wake_channel("c"), "redlock-wake:c");
        // The alive period in the scripts is four refresh periods.
        let alive = QUEUE_ALIVE.as_millis();
        assert_eq!(alive, crate::settings::QUEUE_REFRESH.as_millis() * 4);
        for script in [
            GATE_ACQUIRE_SCRIPT,
            GATE_ACQUIRE_FENCED_SCRIPT,
            GATE_RELEASE_SCRIPT,
            LEAVE_SCRIPT,
            GATE_RW_ACQUIRE_SCRIPT,
            GATE_READ_RELEASE_SCRIPT,
        ] {
            assert!(
                script.contains(&format!("\nlocal ALIVE={alive}\n"))
                    || script.starts_with(&format!("local ALIVE={alive}\n"))
            );
        }
        assert!(LEAVE_SCRIPT.contains("\"redlock-wake:\".."));
    }

    #[test]
    fn replies_read_as_votes_or_failures() {
        use redis::Value;
        let node: Arc<str> = Arc::from("n:1");
        let read = |op: Op, keys: usize, value: Value| {
            let mut r = req(op);
            r.keys = (0..keys)
                .map(|i| Arc::from(format!("k{i}").as_str()))
                .collect();
            interpret(&r, value, &node)
        };
        let acquire = Op::Acquire { ttl_ms: 1 };
        // `SET … NX GET`: nil when set, else the holder's token.
        assert_eq!(read(acquire, 1, Value::Nil), Ok(Vote::YES));
        let held = read(acquire, 1, Value::BulkString(b"theirs".to_vec())).unwrap();
        assert!(!held.yes);
        assert_eq!(held, Vote::held_by(b"theirs"));
        assert_ne!(held, Vote::held_by(b"others"));
        // The scripts name the first held key's holder too.
        assert_eq!(
            read(acquire, 2, Value::BulkString(b"theirs".to_vec())),
            Ok(held)
        );
        assert_eq!(read(acquire, 2, Value::Int(0)), Ok(Vote::NO));
        let release = Op::Release;
        assert_eq!(read(release, 1, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(read(release, 1, Value::Int(0)), Ok(Vote::NO));
        assert_eq!(read(release, 1, Value::Int(2)), Ok(Vote::NO));
        // The gate node's copies.
        let gate = |op: Op, value: Value| {
            let mut r = req(op);
            r.queue = Some(Arc::from(""));
            interpret(&r, value, &node)
        };
        assert_eq!(gate(release, Value::Int(2)), Ok(Vote::queued(true)));
        assert_eq!(gate(release, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(gate(acquire, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(gate(acquire, Value::Int(0)), Ok(Vote::NO));
        assert_eq!(gate(acquire, Value::Int(2)), Ok(Vote::queued(false)));
        let fenced = Op::AcquireFenced {
            ttl_ms: 1,
            proposed: 5,
            idle_ms: 9,
        };
        assert_eq!(gate(fenced, Value::Int(-2)), Ok(Vote::queued(false)));
        assert_eq!(gate(fenced, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(
            gate(fenced, Value::Array(vec![Value::Int(8)])),
            Ok(Vote::stale(8))
        );
        assert_eq!(
            read(Op::Extend { ttl_ms: 1 }, 1, Value::Int(1)),
            Ok(Vote::YES)
        );
        // Several keys: the script's 1 or 0.
        assert_eq!(read(acquire, 2, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(read(acquire, 2, Value::Int(0)), Ok(Vote::NO));
        // Fenced: 1 granted, -1 refused, `{v}` stale (never a yes),
        // anything else odd.
        let fenced = Op::AcquireFenced {
            ttl_ms: 1,
            proposed: 5,
            idle_ms: 9,
        };
        assert_eq!(read(fenced, 1, Value::Int(1)), Ok(Vote::YES));
        assert_eq!(read(fenced, 1, Value::Int(-1)), Ok(Vote::NO));
        let stale = read(fenced, 1, Value::Array(vec![Value::Int(7)]));
        assert_eq!(stale, Ok(Vote::stale(7)));
        assert!(!stale.unwrap().yes);
        assert!(read(fenced, 1, Value::Int(-2)).is_err());
        assert!(read(fenced, 1, Value::Int(7)).is_err());
        assert!(read(fenced, 1, Value::Array(vec![Value::Int(-3)])).is_err());
        // A reply of the wrong shape is a failure that never echoes it.
        for (keys, odd) in [
            (1, Value::Int(1)),
            (2, Value::Okay),
            (1, Value::SimpleString("tok".into())),
        ] {
            let failure = read(acquire, keys, odd).unwrap_err();
            assert_eq!(failure.kind(), FailureKind::Server);
            assert!(!failure.to_string().contains("tok"));
        }
    }

    #[test]
    fn a_redis_older_than_7_is_named() {
        let node: Arc<str> = Arc::from("n:1");
        let syntax = redis::parse_redis_value(b"-ERR syntax error\r\n").unwrap();
        let failure =
            interpret(&req(Op::Acquire { ttl_ms: 1 }), syntax.clone(), &node).unwrap_err();
        assert_eq!(failure.kind(), FailureKind::Unsupported);
        assert!(failure.kind().is_permanent());
        assert!(
            failure.to_string().contains("Redis older than 7.0"),
            "{failure}"
        );
        // A key of another type is held, as for the scripts.
        let wrong = redis::parse_redis_value(
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        )
        .unwrap();
        assert_eq!(
            interpret(&req(Op::Acquire { ttl_ms: 1 }), wrong, &node),
            Ok(Vote::NO)
        );
        // Another command's syntax error is the server's.
        let other = interpret(&req(Op::Release), syntax, &node).unwrap_err();
        assert_eq!(other.kind(), FailureKind::Server);
    }
}
