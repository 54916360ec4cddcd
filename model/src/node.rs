//! A Redis master as the scripts see it: each request runs whole, at the
//! moment it is delivered, against the node's keys at that moment.
//!
//! What each request does is what its script does (the script named
//! beside it): a key per slot (a lock has one, slot 0; a semaphore of K
//! has K), holding the token of the client that set it until it expires,
//! and a fence value per slot, kept for the fencing idle time. The gate
//! node (node 0, where a lock's waiters queue) also keeps the queue of
//! waiters, each alive for a while after it last asked.

use std::collections::BTreeMap;

/// Who set a key: a client and its attempt (the crate's random token).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token {
    /// The client's index.
    pub client: u8,
    /// The client's attempt: every round has a token of its own.
    pub attempt: u8,
}

/// A key: its token and when it expires (it exists while `now < expires`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry {
    /// The holder's token.
    pub token: Token,
    /// The node time at which the key is gone.
    pub expires: u64,
}

/// A request, as the client sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Request {
    /// `SET key token NX PX ttl` (`acquire` / `slot_acquire.lua`), or with
    /// a proposed fencing token, `acquire_fenced.lua`: refused as stale
    /// when the node's fence value is at least the proposal, else the key
    /// is set and the fence value becomes the proposal.
    Acquire {
        /// The slot's key.
        slot: u8,
        /// The round's token.
        token: Token,
        /// The key's time to live.
        ttl: u64,
        /// The proposed fencing token, for a fenced lock.
        fence: Option<u64>,
    },
    /// `read_acquire.lua`: a reader joins the readers' set until
    /// `now + ttl`, unless a writer holds. (The waiting writer's mark, which
    /// only turns readers away, is left out: readers may join more often.)
    ReadAcquire {
        /// The round's token.
        token: Token,
        /// The reader's time to live.
        ttl: u64,
    },
    /// `write_acquire.lua`: the writer's key (slot 0) is set when nobody
    /// holds it and no reader's time runs.
    WriteAcquire {
        /// The round's token.
        token: Token,
        /// The key's time to live.
        ttl: u64,
    },
    /// `read_release.lua`: the reader leaves the set.
    ReadRelease {
        /// The reader's token.
        token: Token,
    },
    /// `release.lua`: deletes the key where it holds the token.
    Release {
        /// The slot's key.
        slot: u8,
        /// The token to compare.
        token: Token,
    },
    /// `gate_acquire.lua` on the gate node: the key is set only while it
    /// is free and nobody alive queued before `member`; otherwise `member`
    /// is queued (keeping its place, its alive time refreshed), and a free
    /// key's head is woken. (The grant's grace note, which only spares the
    /// next in line a round, is left out.)
    GateAcquire {
        /// The round's token.
        token: Token,
        /// The key's time to live.
        ttl: u64,
        /// The waiter's place in the queue (its client).
        member: u8,
    },
    /// `gate_release.lua`: deletes the key where it holds the token, then
    /// wakes the head: after a lease's release whatever the node holds,
    /// after a failed round's clean-up only if the key is free.
    GateRelease {
        /// The token to compare.
        token: Token,
        /// A lease's release (not a failed round's clean-up).
        lease: bool,
    },
    /// `leave.lua`: a waiter that won without the gate node's grant
    /// leaves the queue, and the next head is woken if the key is free.
    Leave {
        /// The waiter's place.
        member: u8,
    },
    /// The gate node's wake-up (its `PUBLISH`) on its way to a waiter.
    Wake,
}

/// A node's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// The key was set.
    Granted,
    /// The key exists, set by this token.
    Held(Token),
    /// The proposed fencing token is stale: the node's fence value.
    Stale(u64),
    /// A release: whether the key was deleted.
    Released(bool),
    /// No, and no holder to name (readers hold; the gate node's "held",
    /// to the first in line).
    Refused,
    /// The gate node's "others queued first": the caller waits its turn.
    Behind,
}

/// What a node does differently in a deliberate mutation (the checker must
/// catch each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Broken {
    /// A release deletes the key whoever holds it.
    pub release_without_token_check: bool,
    /// A fenced acquisition sets its proposal without comparing it with
    /// the node's fence value.
    pub no_stale_check: bool,
    /// A semaphore node admits while it holds fewer than this many keys,
    /// whichever they are: each client's own key, counted per node.
    pub per_node_permits: Option<u8>,
    /// A writer gets in whatever readers hold.
    pub writer_ignores_readers: bool,
    /// The gate node keeps a waiter's place however long ago it last
    /// asked.
    pub queue_without_alive_times: bool,
}

/// One node's keys.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    /// The lock keys, by slot.
    pub keys: BTreeMap<u8, Entry>,
    /// The fence values by slot: the value and when it expires.
    pub fences: BTreeMap<u8, (u64, u64)>,
    /// A reader-writer lock's readers: until when each holds.
    pub readers: BTreeMap<Token, u64>,
    /// When the node last came back empty or its clock last jumped: its
    /// votes do not count until the quarantine after it ran out.
    pub suspect_since: Option<u64>,
    /// The gate node's waiters, in arrival order.
    pub queue: Vec<u8>,
    /// Until when each waiter counts as alive.
    pub alive: BTreeMap<u8, u64>,
}

impl Node {
    /// Runs `request` at node time `now`; fence values written now live
    /// `fence_idle`. (Not the gate node's requests: [`serve`](Self::serve)
    /// them, with the queue's alive time.)
    pub fn run(&mut self, request: Request, now: u64, fence_idle: u64, broken: Broken) -> Reply {
        self.serve(request, now, fence_idle, 0, broken).0
    }

    /// As [`run`](Self::run), on the gate node too: a place in the queue
    /// counts `alive` after its waiter last asked. Also the waiter woken,
    /// if any.
    pub fn serve(
        &mut self,
        request: Request,
        now: u64,
        fence_idle: u64,
        alive: u64,
        broken: Broken,
    ) -> (Reply, Option<u8>) {
        self.keys.retain(|_, e| e.expires > now);
        self.fences.retain(|_, (_, expires)| *expires > now);
        self.readers.retain(|_, until| *until > now);
        if !broken.queue_without_alive_times {
            self.alive.retain(|_, until| *until > now);
            let alive = &self.alive;
            self.queue.retain(|m| alive.contains_key(m));
        }
        let reply = match request {
            Request::GateAcquire { token, ttl, member } => {
                let head = self.queue.first().copied();
                let held = self.keys.contains_key(&0);
                if !held && head.is_none_or(|h| h == member) {
                    self.queue.retain(|m| *m != member);
                    self.alive.remove(&member);
                    self.keys.insert(
                        0,
                        Entry {
                            token,
                            expires: now + ttl,
                        },
                    );
                    return (Reply::Granted, None);
                }
                if !self.queue.contains(&member) {
                    self.queue.push(member);
                }
                self.alive.insert(member, now + alive);
                return match (held, head) {
                    (true, Some(h)) if h != member => (Reply::Behind, None),
                    (true, _) => (Reply::Refused, None),
                    (false, h) => (Reply::Behind, h.filter(|h| *h != member)),
                };
            }
            Request::GateRelease { token, lease } => {
                let ours = self.keys.get(&0).is_some_and(|e| e.token == token);
                if ours {
                    self.keys.remove(&0);
                }
                let wake = (lease || !self.keys.contains_key(&0))
                    .then(|| self.queue.first().copied())
                    .flatten();
                return (Reply::Released(ours), wake);
            }
            Request::Leave { member } => {
                self.queue.retain(|m| *m != member);
                self.alive.remove(&member);
                let wake = (!self.keys.contains_key(&0))
                    .then(|| self.queue.first().copied())
                    .flatten();
                return (Reply::Released(true), wake);
            }
            Request::Wake => Reply::Refused,
            Request::ReadAcquire { token, ttl } => {
                if let Some(writer) = self.keys.get(&0) {
                    return (Reply::Held(writer.token), None);
                }
                self.readers.insert(token, now + ttl);
                Reply::Granted
            }
            Request::WriteAcquire { token, ttl } => {
                if let Some(writer) = self.keys.get(&0) {
                    return (Reply::Held(writer.token), None);
                }
                if !self.readers.is_empty() && !broken.writer_ignores_readers {
                    return (Reply::Refused, None);
                }
                let expires = now + ttl;
                self.keys.insert(0, Entry { token, expires });
                Reply::Granted
            }
            Request::ReadRelease { token } => {
                Reply::Released(self.readers.remove(&token).is_some())
            }
            Request::Acquire {
                slot,
                token,
                ttl,
                fence,
            } => {
                if let Some(permits) = broken.per_node_permits {
                    if self.keys.len() >= usize::from(permits) {
                        let holder = self.keys.values().next().map(|e| e.token);
                        return (Reply::Held(holder.unwrap_or(token)), None);
                    }
                } else if let Some(held) = self.keys.get(&slot) {
                    return (Reply::Held(held.token), None);
                }
                if let Some(proposed) = fence {
                    if let Some(&(value, _)) = self.fences.get(&slot)
                        && value >= proposed
                        && !broken.no_stale_check
                    {
                        return (Reply::Stale(value), None);
                    }
                    self.fences.insert(slot, (proposed, now + fence_idle));
                }
                let expires = now + ttl;
                self.keys.insert(slot, Entry { token, expires });
                Reply::Granted
            }
            Request::Release { slot, token } => {
                let ours = self.keys.get(&slot).is_some_and(|e| e.token == token);
                if ours || (broken.release_without_token_check && self.keys.contains_key(&slot)) {
                    self.keys.remove(&slot);
                    return (Reply::Released(true), None);
                }
                Reply::Released(false)
            }
        };
        (reply, None)
    }

    /// The node restarts without persistence: every key and fence value is
    /// gone.
    pub fn restart(&mut self, now: u64) {
        *self = Node {
            suspect_since: Some(now),
            ..Node::default()
        };
    }

    /// The node's wall clock steps ahead by more than any TTL: its keys
    /// expire at once. (Its fence values, kept far longer, stay.)
    pub fn jump(&mut self, now: u64) {
        self.keys.clear();
        self.readers.clear();
        self.suspect_since = Some(now);
    }

    /// Whether a client counts this node's vote at `now` (the restart
    /// quarantine and the clock rule: not until `quarantine` after it came
    /// back or jumped).
    pub fn counts(&self, now: u64, quarantine: u64) -> bool {
        self.suspect_since
            .is_none_or(|since| now >= since + quarantine)
    }
}
