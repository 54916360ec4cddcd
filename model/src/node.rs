//! A Redis master as the scripts see it: each request runs whole, at the
//! moment it is delivered, on the crate's second implementation of the
//! scripts (`src/transport/fake/node/`, what the unit tests' fake node runs,
//! held to every script's table beside the real Lua). Here the model's
//! requests become the commands the crate sends, with the model's key
//! names, and the replies the model's answers.
//!
//! A lock has one key (`k`), a semaphore of K a key per slot (`s0`..), a
//! reader-writer lock a writer's key, a readers' set and the waiting
//! writer's mark (`w`, `r`, `m`); a fenced key's fence value is `f{key}`.
//! The gate node (node 0, where a lock's waiters queue) keeps the queue
//! keys `q` and `a`.

#[path = "../../src/transport/fake/node/mod.rs"]
#[allow(dead_code)]
mod in_rust;

use redis::Value;

/// Who set a key: a client and its attempt (the crate's random token).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token {
    /// The client's index.
    pub client: u8,
    /// The client's attempt: every round has a token of its own.
    pub attempt: u8,
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
    /// `now + ttl`, unless a writer holds or waits (its mark).
    ReadAcquire {
        /// The round's token.
        token: Token,
        /// The reader's time to live.
        ttl: u64,
    },
    /// `write_acquire.lua`: the writer's key (slot 0) is set when nobody
    /// holds it and no reader's time runs; a writer readers refuse marks
    /// that it waits.
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
    /// key's head is woken. A grant is the queue's for the grace: the next
    /// in line is told "others first" meanwhile.
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
}

/// How a node runs the model's requests: the model's settings for what the
/// crate passes as arguments, and the deliberate defect, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    /// How long a fence value stays after its last use.
    pub fence_idle: u64,
    /// A semaphore's permits (its slot keys), if the clients take one.
    pub permits: Option<u8>,
    /// The clients take a reader-writer lock: slot 0 is the writer's key.
    pub rw: bool,
    /// How long a gate node's grant is the queue's (the crate's per-node
    /// timeout of the granted round).
    pub grace: u64,
    /// How long a refused writer marks that it waits.
    pub mark: u64,
    /// The deliberate defect.
    pub broken: Broken,
}

/// One node: its keys, on the scripts in Rust, and since when its votes
/// do not count.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    redis: in_rust::Node,
    /// When the node last came back empty or its clock last jumped: its
    /// votes do not count until the quarantine after it ran out.
    pub suspect_since: Option<u64>,
}

/// Every key name a request may touch, but the fence values and the queue
/// (a clock jump expires these: the keys with a lock's TTL).
const EXPIRING: [&str; 12] = [
    "k", "w", "r", "m", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7",
];

impl Node {
    /// An empty node whose queue places count `alive` after their
    /// waiter last asked.
    pub fn new(alive: u64) -> Node {
        Node {
            redis: in_rust::Node::with_alive(i64::try_from(alive).unwrap_or(i64::MAX)),
            suspect_since: None,
        }
    }

    /// Runs `request` at node time `now`: the reply, and the waiter woken,
    /// if any.
    pub fn serve(&mut self, request: Request, now: u64, s: &Setting) -> (Reply, Option<u8>) {
        let reply = reply(request, self.run(request, now, s));
        let woken = self.redis.take_wakes().into_iter().next().and_then(|w| {
            let (client, _) = w.split_once(':')?;
            client.strip_prefix('c')?.parse().ok()
        });
        (reply, woken)
    }

    /// What the crate sends for `request`, run: the node's reply.
    fn run(&mut self, request: Request, now: u64, s: &Setting) -> Value {
        let b = s.broken;
        match request {
            Request::Acquire {
                slot,
                token,
                ttl,
                fence: None,
            } => match (s.permits, b.per_node_permits) {
                (Some(_), Some(permits)) => self.per_node(slot, token, ttl, permits, now),
                (Some(k), None) => {
                    let mut keys = vec![slot_key(slot)];
                    keys.extend((0..k).map(slot_key));
                    let argv = [name(token), ms(ttl), k.to_string()];
                    self.eval(now, "slot_acquire", &keys, &argv)
                }
                (None, _) => {
                    let set = ["SET", "k", &name(token), "NX", "GET", "PX", &ms(ttl)];
                    self.command(now, &set)
                }
            },
            Request::Acquire {
                token,
                ttl,
                fence: Some(proposed),
                ..
            } => {
                // Where the key is free, the fence value is gone before the
                // script compares it.
                if b.no_stale_check && self.command(now, &["EXISTS", "k"]) == Value::Int(0) {
                    self.command(now, &["DEL", "fk"]);
                }
                let argv = [
                    name(token),
                    ms(ttl),
                    "1".into(),
                    ms(proposed),
                    ms(s.fence_idle),
                ];
                self.eval(now, "acquire_fenced", &["k", "fk"], &argv)
            }
            Request::ReadAcquire { token, ttl } => self.eval(
                now,
                "read_acquire",
                &["w", "r", "m"],
                &[name(token), ms(ttl)],
            ),
            Request::WriteAcquire { token, ttl } if b.writer_ignores_readers => self.command(
                now,
                &["SET", "w", &name(token), "NX", "GET", "PX", &ms(ttl)],
            ),
            Request::WriteAcquire { token, ttl } => {
                let argv = [name(token), ms(ttl), ms(s.mark)];
                self.eval(now, "write_acquire", &["w", "r", "m"], &argv)
            }
            Request::ReadRelease { token } => {
                self.eval(now, "read_release", &["r"], &[name(token)])
            }
            Request::Release { slot, token } => {
                let key = match (s.permits, s.rw) {
                    (Some(_), _) => slot_key(slot),
                    (None, true) => "w".into(),
                    (None, false) => "k".into(),
                };
                if b.release_without_token_check {
                    return self.command(now, &["DEL", &key]);
                }
                self.eval(now, "release", &[&key], &[name(token)])
            }
            Request::GateAcquire { token, ttl, member } => {
                let argv = [
                    name(token),
                    ms(ttl),
                    "0".into(),
                    ms(s.grace),
                    member_name(member),
                ];
                self.eval(now, "gate_acquire", &["k", "q", "a"], &argv)
            }
            Request::GateRelease { token, lease } => {
                let argv = [name(token), String::new(), u8::from(lease).to_string()];
                self.eval(now, "gate_release", &["k", "q", "a"], &argv)
            }
            Request::Leave { member } => {
                self.eval(now, "leave", &["k", "q", "a"], &[member_name(member)])
            }
            Request::Wake => Value::Nil,
        }
    }

    /// The semaphore that counts permits per node (a defect): the client's
    /// own key is set while fewer keys than `permits` are held here, and
    /// the first holder's token answered otherwise.
    fn per_node(&mut self, slot: u8, token: Token, ttl: u64, permits: u8, now: u64) -> Value {
        let held: Vec<String> = (0..8u8)
            .map(slot_key)
            .filter(|key| self.command(now, &["EXISTS", key]) == Value::Int(1))
            .collect();
        if held.len() >= usize::from(permits) {
            return self.command(now, &["GET", &held[0]]);
        }
        self.command(now, &["SET", &slot_key(slot), &name(token), "PX", &ms(ttl)])
    }

    fn eval(&mut self, now: u64, script: &str, keys: &[impl AsRef<str>], argv: &[String]) -> Value {
        let keys: Vec<String> = keys.iter().map(|k| k.as_ref().to_owned()).collect();
        self.redis.eval(now, script, &keys, argv)
    }

    fn command(&mut self, now: u64, line: &[&str]) -> Value {
        self.redis.command(now, &words(line))
    }

    /// The node restarts without persistence: every key and fence value is
    /// gone.
    pub fn restart(&mut self, now: u64) {
        self.redis.flush();
        self.suspect_since = Some(now);
    }

    /// The node's wall clock steps ahead by more than any TTL: its keys
    /// expire at once. (Its fence values, kept far longer, stay, and so do
    /// the queue's places, which the model times apart.)
    pub fn jump(&mut self, now: u64) {
        let mut del = vec!["DEL"];
        del.extend(EXPIRING);
        self.command(now, &del);
        self.suspect_since = Some(now);
    }

    /// Whether a client counts this node's vote at `now` (the restart
    /// quarantine and the clock rule: not until `quarantine` after it came
    /// back or jumped).
    pub fn counts(&self, now: u64, quarantine: u64) -> bool {
        self.suspect_since
            .is_none_or(|since| now >= since + quarantine)
    }

    /// Queues `member` first on the gate node, alive until `until` (a
    /// waiter that crashed there).
    pub fn queue_first(&mut self, member: u8, until: u64) {
        let name = member_name(member);
        self.command(0, &["ZADD", "q", "0", &name]);
        self.command(0, &["ZADD", "a", &ms(until), &name]);
    }

    /// The first waiter in the gate node's queue whose place has not run
    /// out at `now` (lib_queue's `head()`: a member without an alive time
    /// stays), if any.
    pub fn head(&self, now: u64) -> Option<u8> {
        let mut node = self.redis.clone();
        let Value::Array(queued) = node.command(now, &words(&["ZRANGE", "q", "0", "-1"])) else {
            return None;
        };
        queued.iter().find_map(|m| {
            let Value::BulkString(m) = m else { return None };
            let name = String::from_utf8_lossy(m).into_owned();
            let alive = node.command(now, &["ZSCORE".into(), "a".into(), name]);
            let until = match alive {
                Value::BulkString(s) => String::from_utf8_lossy(&s).parse::<u64>().ok(),
                _ => None,
            };
            until
                .is_none_or(|u| u > now)
                .then(|| member_of(m))
                .flatten()
        })
    }
}

fn words(line: &[&str]) -> Vec<String> {
    line.iter().map(|w| (*w).to_owned()).collect()
}

fn ms(n: u64) -> String {
    n.to_string()
}

fn slot_key(slot: u8) -> String {
    format!("s{slot}")
}

/// A token as the crate's: a string (here `t{client}.{attempt}`).
fn name(token: Token) -> String {
    format!("t{}.{}", token.client, token.attempt)
}

fn token_of(value: &[u8]) -> Option<Token> {
    let text = std::str::from_utf8(value).ok()?;
    let (client, attempt) = text.strip_prefix('t')?.split_once('.')?;
    Some(Token {
        client: client.parse().ok()?,
        attempt: attempt.parse().ok()?,
    })
}

/// A waiter's member as the crate's, `{client id}:{ticket}`.
fn member_name(member: u8) -> String {
    format!("c{member}:{member}")
}

fn member_of(value: &[u8]) -> Option<u8> {
    let text = std::str::from_utf8(value).ok()?;
    text.strip_prefix('c')?.split_once(':')?.0.parse().ok()
}

/// The node's reply to `request` as the model's answer. An acquisition:
/// 1 (or `SET`'s nil or OK) granted; a token held; `{v}` stale; 0 (-1
/// fenced) refused; 2 (-2 fenced) others queued first; a semaphore's
/// `{r, held}` as `r`. A release: whether it deleted (1 or more).
fn reply(request: Request, value: Value) -> Reply {
    let acquires = matches!(
        request,
        Request::Acquire { .. }
            | Request::ReadAcquire { .. }
            | Request::WriteAcquire { .. }
            | Request::GateAcquire { .. }
    );
    match value {
        Value::Int(n) if !acquires => Reply::Released(n >= 1),
        Value::Nil | Value::Okay | Value::Int(1) => Reply::Granted,
        Value::Int(2 | -2) => Reply::Behind,
        Value::BulkString(holder) => token_of(&holder).map_or(Reply::Refused, Reply::Held),
        Value::Array(parts) => match parts.as_slice() {
            [Value::Int(v)] => Reply::Stale(v.unsigned_abs()),
            [first, _held] => reply(request, first.clone()),
            _ => Reply::Refused,
        },
        Value::ServerError(err) => {
            panic!("the node refuses the model's {request:?}: {err:?} (the mapping is wrong)")
        }
        _ => Reply::Refused,
    }
}
