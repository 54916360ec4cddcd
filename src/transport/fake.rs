//! A scripted in-memory node for unit tests: the fake side of the [`Link`]
//! seam. It keeps keys with tokens and expiry like Redis, and can be told to
//! fail, to answer late, or to hold every request until released, so that
//! rounds, extensions, the keeper and the hand-off can be driven through
//! exact interleavings in milliseconds.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::{NodeShared, Transport};
use crate::algorithm::{Answer, Held, Vote};
use crate::error::{FailureKind, NodeFailure};
use crate::transport::connect::link::Link;
use crate::transport::protocol::keys::{Layout, fence_key};
use crate::transport::protocol::request::{Kind, Op, Request};
use crate::transport::protocol::token;

/// What a fake node calls with every member it wakes.
type OnWake = Arc<dyn Fn(&str, Op) + Send + Sync>;

/// How a fake node treats requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Behaviour {
    /// Applies every request like Redis would.
    Normal,
    /// Answers every request with this failure, applying nothing.
    Fail(FailureKind),
    /// Receives requests but answers none until set back to another
    /// behaviour (never longer than 10 s, so a broken test cannot hang).
    /// With a single node, whose idle rounds run on the caller's thread,
    /// that holds the caller too.
    Hold,
}

struct Inner {
    keys: HashMap<String, (String, Instant)>,
    behaviour: Behaviour,
    delay: Duration,
    received: Vec<Op>,
    /// The first key of each request received, in order.
    received_keys: Vec<String>,
    /// The next batch received with an acquisition in it turns the node
    /// to [`Behaviour::Hold`].
    hold_next: bool,
    /// The name of the thread that ran each batch, in order.
    served_on: Vec<String>,
    /// Fenced acquisitions are applied, but their answers are lost (as if
    /// the connection broke right after the node ran the command).
    lose_fenced_grants: bool,
    /// Queues of waiters by gate name (`Kind::gate_name`), as on a gate node: members in
    /// arrival order, with until when each counts as alive.
    queues: HashMap<String, Vec<(String, Instant)>>,
    /// Until when each queue's last grant counts (its round's per-node
    /// timeout; see `turn` in `scripts/lib_queue.lua`): the key it set is the
    /// queue's, not "held".
    granted: HashMap<String, Instant>,
    /// Called with every member this node wakes, and the operation that
    /// woke it.
    on_wake: Option<OnWake>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("keys", &self.keys.len())
            .field("behaviour", &self.behaviour)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Shared {
    inner: Mutex<Inner>,
    changed: Condvar,
}

/// The test's handle on one fake node.
#[derive(Debug, Clone)]
pub(crate) struct FakeNode {
    shared: Arc<Shared>,
    address: Arc<str>,
}

impl FakeNode {
    pub(crate) fn new(address: &str) -> Self {
        FakeNode {
            shared: Arc::new(Shared {
                inner: Mutex::new(Inner {
                    keys: HashMap::new(),
                    behaviour: Behaviour::Normal,
                    delay: Duration::ZERO,
                    received: Vec::new(),
                    received_keys: Vec::new(),
                    hold_next: false,
                    served_on: Vec::new(),
                    lose_fenced_grants: false,
                    queues: HashMap::new(),
                    granted: HashMap::new(),
                    on_wake: None,
                }),
                changed: Condvar::new(),
            }),
            address: Arc::from(address),
        }
    }

    pub(crate) fn set(&self, behaviour: Behaviour) {
        self.shared.inner.lock().behaviour = behaviour;
        self.shared.changed.notify_all();
    }

    /// The next batch this node receives with an acquisition in it, and
    /// every later batch, is held (see [`Behaviour::Hold`]) until the
    /// behaviour is set again: a test stops the node between two rounds of
    /// one caller.
    pub(crate) fn hold_next_acquisition(&self) {
        self.shared.inner.lock().hold_next = true;
    }

    /// Fenced acquisitions are applied but answered with a connection
    /// failure (the grant happened; the caller never hears of it).
    pub(crate) fn lose_fenced_grants(&self, lose: bool) {
        self.shared.inner.lock().lose_fenced_grants = lose;
    }

    /// Releases report reaching this many subscribers.
    /// Calls `wake` with every queue member this node wakes (and the
    /// operation that woke it).
    pub(crate) fn on_wake(&self, wake: impl Fn(&str, Op) + Send + Sync + 'static) {
        self.shared.inner.lock().on_wake = Some(Arc::new(wake));
    }

    /// Queues `member` for `key` (as its busy round would, alive for 60 s).
    pub(crate) fn enqueue(&self, key: &str, member: &str) {
        let alive = Instant::now() + Duration::from_secs(60);
        let mut inner = self.shared.inner.lock();
        let queue = inner.queues.entry(key.to_owned()).or_default();
        queue.push((member.to_owned(), alive));
    }

    /// The members queued for `key`, first first.
    pub(crate) fn queue(&self, key: &str) -> Vec<String> {
        let inner = self.shared.inner.lock();
        inner
            .queues
            .get(key)
            .map(|q| q.iter().map(|(m, _)| m.clone()).collect())
            .unwrap_or_default()
    }

    /// Every answer comes this much later (the request is applied at once).
    pub(crate) fn set_delay(&self, delay: Duration) {
        self.shared.inner.lock().delay = delay;
    }

    /// Another client's key.
    pub(crate) fn put(&self, key: &str, token: &str, ttl: Duration) {
        let expires = Instant::now() + ttl;
        let mut inner = self.shared.inner.lock();
        inner.keys.insert(key.into(), (token.into(), expires));
    }

    /// The fence value stored for `key`, if any.
    pub(crate) fn fence(&self, key: &str) -> Option<u64> {
        let inner = self.shared.inner.lock();
        live(&inner.keys, &fence_key(key), Instant::now()).and_then(|(v, _)| v.parse().ok())
    }

    /// Forgets everything, as a node restarted without its data.
    pub(crate) fn flush(&self) {
        self.shared.inner.lock().keys.clear();
    }

    /// The token `key` holds now, if it exists and has not expired.
    pub(crate) fn holder(&self, key: &str) -> Option<String> {
        let inner = self.shared.inner.lock();
        live(&inner.keys, key, Instant::now()).map(|(token, _)| token.clone())
    }

    /// How long `key` still lives, if it exists.
    pub(crate) fn pttl(&self, key: &str) -> Option<Duration> {
        let now = Instant::now();
        let inner = self.shared.inner.lock();
        live(&inner.keys, key, now).map(|(_, expires)| expires.saturating_duration_since(now))
    }

    /// Every request received so far, in order.
    pub(crate) fn received(&self) -> Vec<Op> {
        self.shared.inner.lock().received.clone()
    }

    /// The first key of every acquisition received so far, in order.
    pub(crate) fn acquired_keys(&self) -> Vec<String> {
        let inner = self.shared.inner.lock();
        let ops = inner.received.iter();
        ops.zip(&inner.received_keys)
            .filter(|(op, _)| matches!(op, Op::Acquire { .. } | Op::AcquireFenced { .. }))
            .map(|(_, key)| key.clone())
            .collect()
    }

    /// The name of the thread that ran each batch so far (a worker's is
    /// `redlock-node-{index}`), in order.
    pub(crate) fn served_on(&self) -> Vec<String> {
        self.shared.inner.lock().served_on.clone()
    }

    /// Waits until a received request matches `what`; false after `within`.
    pub(crate) fn wait_for(&self, within: Duration, what: impl Fn(&[Op]) -> bool) -> bool {
        let deadline = Instant::now() + within;
        let mut inner = self.shared.inner.lock();
        while !what(&inner.received) {
            if self
                .shared
                .changed
                .wait_until(&mut inner, deadline)
                .timed_out()
            {
                return what(&inner.received);
            }
        }
        true
    }

    pub(crate) fn link(&self) -> Box<dyn Link> {
        Box::new(FakeLink {
            shared: self.shared.clone(),
            address: self.address.clone(),
        })
    }
}

fn live<'a>(
    keys: &'a HashMap<String, (String, Instant)>,
    key: &str,
    now: Instant,
) -> Option<&'a (String, Instant)> {
    keys.get(key).filter(|(_, expires)| *expires > now)
}

/// A second client's transport over the same fake nodes.
pub(crate) fn transport_for(nodes: &[FakeNode]) -> Transport {
    let links = nodes
        .iter()
        .map(|node| (Arc::new(NodeShared::new(&node.address)), node.link()));
    Transport::with_links(links, 1024).expect("worker threads")
}

/// `n` fake nodes and a transport over them.
pub(crate) fn cluster(n: usize) -> (Vec<FakeNode>, Transport) {
    cluster_with_capacity(n, 1024)
}

/// `n` fake nodes and a transport over them whose per-node queues hold
/// `capacity` requests.
pub(crate) fn cluster_with_capacity(n: usize, capacity: usize) -> (Vec<FakeNode>, Transport) {
    let nodes: Vec<FakeNode> = (0..n)
        .map(|i| FakeNode::new(&format!("fake:{i}")))
        .collect();
    let links = nodes
        .iter()
        .map(|node| (Arc::new(NodeShared::new(&node.address)), node.link()));
    let transport = Transport::with_links(links, capacity).expect("worker threads");
    (nodes, transport)
}

struct FakeLink {
    shared: Arc<Shared>,
    address: Arc<str>,
}

impl Link for FakeLink {
    fn run(&mut self, batch: &[&Request]) -> Vec<Answer> {
        let mut inner = self.shared.inner.lock();
        inner
            .received
            .extend(batch.iter().map(|req| req.op.clone()));
        let first_keys = batch.iter().map(|req| req.keys()[0].to_string());
        inner.received_keys.extend(first_keys);
        let acquires =
            |req: &&Request| matches!(req.op, Op::Acquire { .. } | Op::AcquireFenced { .. });
        if inner.hold_next && batch.iter().any(acquires) {
            inner.hold_next = false;
            inner.behaviour = Behaviour::Hold;
        }
        let thread = std::thread::current().name().unwrap_or("").to_owned();
        inner.served_on.push(thread);
        self.shared.changed.notify_all();
        let give_up = Instant::now() + Duration::from_secs(10);
        while inner.behaviour == Behaviour::Hold {
            if self
                .shared
                .changed
                .wait_until(&mut inner, give_up)
                .timed_out()
            {
                break;
            }
        }
        let answers: Vec<Answer> = match inner.behaviour {
            Behaviour::Fail(kind) => batch
                .iter()
                .map(|_| {
                    Err(NodeFailure::new(
                        self.address.clone(),
                        kind,
                        "scripted failure",
                    ))
                })
                .collect(),
            _ => {
                let lose = inner.lose_fenced_grants;
                let mut woken = Vec::new();
                let answers = batch
                    .iter()
                    .map(|req| {
                        let answer = match &req.queue {
                            _ if req.op.elects() => Ok(observed(&mut inner, req, &mut woken)),
                            Some(member) => queued(&mut inner, req, member, &mut woken),
                            None => apply(&mut inner.keys, req)
                                .map(|vote| report(&inner.keys, req, vote)),
                        };
                        match req.op {
                            Op::AcquireFenced { .. } if lose => Err(NodeFailure::new(
                                self.address.clone(),
                                FailureKind::Connection,
                                "scripted failure after the grant",
                            )),
                            _ => answer,
                        }
                    })
                    .collect();
                if let Some(wake) = inner.on_wake.clone() {
                    for (member, op) in woken {
                        wake(&member, op);
                    }
                }
                answers
            }
        };
        let delay = inner.delay;
        drop(inner);
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        answers
    }
}

/// What Redis does with one request (several keys: all or nothing, like
/// the scripts in `scripts/`).
fn apply(keys: &mut HashMap<String, (String, Instant)>, req: &Request) -> Answer {
    let now = Instant::now();
    let ours = |keys: &HashMap<String, (String, Instant)>, key: &str| {
        live(keys, key, now).is_some_and(|(token, _)| **token == *req.token)
    };
    let set = |keys: &mut HashMap<String, (String, Instant)>, ttl_ms: u64| {
        let expires = now + Duration::from_millis(ttl_ms);
        for key in req.keys().iter() {
            keys.insert(key.to_string(), (req.token.to_string(), expires));
        }
    };
    match req.op {
        Op::Acquire { ttl_ms } => {
            if let Some((holder, _)) = req.keys().iter().find_map(|key| live(keys, key, now)) {
                return Ok(Vote::held_by(holder.as_bytes()));
            }
            set(keys, ttl_ms);
            Ok(Vote::YES)
        }
        Op::Extend { ttl_ms } => {
            if !req.keys().iter().all(|key| ours(keys, key)) {
                return Ok(Vote::NO);
            }
            // Never shortens a key (as the scripts).
            let until = now + Duration::from_millis(ttl_ms);
            for key in req.keys().iter() {
                if let Some((_, expires)) = keys.get_mut(&**key) {
                    *expires = (*expires).max(until);
                }
            }
            Ok(Vote::YES)
        }
        Op::AcquireFenced {
            ttl_ms,
            proposed,
            idle_ms,
        } => {
            if let Some((holder, _)) = req.keys().iter().find_map(|key| live(keys, key, now)) {
                return Ok(Vote::held_by(holder.as_bytes()));
            }
            if let Some(stored) = stale(keys, req, proposed) {
                return Ok(Vote::stale(stored));
            }
            set(keys, ttl_ms);
            let until = now + Duration::from_millis(idle_ms);
            for key in req.keys().iter() {
                keys.insert(fence_key(key), (proposed.to_string(), until));
            }
            Ok(Vote::YES)
        }
        Op::Leave => Ok(Vote::YES),
        Op::Proclaim { .. } | Op::ReadLeader | Op::Resign => Ok(elect(keys, req, now)),
        Op::Inspect => Ok(read_holders(keys, req, now)),
        Op::ForceRelease { holder } => {
            let key = req.keys().first().map_or("", |k| &**k);
            let ours = live(keys, key, now).is_some_and(|(t, _)| token::holder_of(t) == holder);
            if ours {
                keys.remove(key);
            }
            // Either way the holder is not here now.
            Ok(Vote::YES)
        }
        Op::Release { .. } => {
            let mine: Vec<_> = req.keys().iter().filter(|key| ours(keys, key)).collect();
            let all = mine.len() == req.keys().len();
            for key in mine {
                keys.remove(&**key);
            }
            Ok(all.into())
        }
    }
}

/// What holds a lock's keys (one or several) or a slot's, by place, as
/// `inspect.lua` answers (a semaphore's or a reader-writer lock's other
/// keys are not read here).
fn read_holders(keys: &HashMap<String, (String, Instant)>, req: &Request, now: Instant) -> Vote {
    let held = req.keys().iter().zip(0..);
    let held = held
        .filter_map(|(key, place)| {
            let (token, until) = live(keys, key, now)?;
            let left = until.saturating_duration_since(now).as_millis();
            Some(Held {
                place,
                holder: token::holder_of(token),
                remaining_ms: u64::try_from(left).unwrap_or(u64::MAX),
                fence: token::fence_of(token.as_bytes()),
            })
        })
        .collect();
    Vote::holds(held)
}

/// How long a queued waiter or an observer counts: longer than any test,
/// so that tests that lengthen the queue refresh never see one drop out.
const ALIVE: Duration = Duration::from_secs(60);

/// An election's command on a node that keeps its observers (in `queues`,
/// under the observers key): a read registers its member; a
/// proclamation or resignation that changed the value, or found no lock
/// key held (as the election's scripts), wakes them all.
fn observed(inner: &mut Inner, req: &Request, woken: &mut Vec<(String, Op)>) -> Vote {
    let now = Instant::now();
    let Kind::Leadership { election } = &req.kind else {
        return Vote::NO;
    };
    let [lock, value_key, observers] = Layout::Plain.election(election);
    let before = live(&inner.keys, &value_key, now).map(|(v, _)| v.clone());
    let vote = elect(&mut inner.keys, req, now);
    let list = inner.queues.entry(observers).or_default();
    list.retain(|(_, alive)| *alive > now);
    if let Some(member) = req.queue.as_deref().filter(|m| !m.is_empty()) {
        list.retain(|(m, _)| m != member);
        list.push((member.to_owned(), now + ALIVE));
    }
    let after = live(&inner.keys, &value_key, now).map(|(v, _)| v.clone());
    let unheld = live(&inner.keys, &lock, now).is_none();
    if req.op != Op::ReadLeader && (before != after || unheld) {
        woken.extend(list.iter().map(|(m, _)| (m.clone(), req.op.clone())));
    }
    vote
}

/// An election's commands, as the election's scripts: the value key
/// holds `token term seq value`.
fn elect(keys: &mut HashMap<String, (String, Instant)>, req: &Request, now: Instant) -> Vote {
    let Kind::Leadership { election } = &req.kind else {
        return Vote::NO;
    };
    let [lock, value_key, _] = Layout::Plain.election(election);
    let (lock, value_key) = (&lock, &value_key);
    let holder = live(keys, lock, now).map(|(token, _)| token.clone());
    let current = live(keys, value_key, now).map(|(value, _)| value.clone());
    let split = |value: &str| -> Option<(String, String)> {
        let (token, rest) = value.split_once(' ')?;
        Some((token.to_owned(), rest.to_owned()))
    };
    let ours = holder.as_deref() == Some(&*req.token);
    match &req.op {
        Op::Proclaim { term, seq, value } => {
            if !ours {
                return Vote::NO;
            }
            let later = current
                .as_deref()
                .and_then(split)
                .filter(|(token, _)| *token == *req.token)
                .and_then(|(_, rest)| {
                    crate::transport::protocol::kind::leadership::parse(rest.as_bytes())
                })
                .is_some_and(|read| read.seq >= *seq);
            if !later {
                let value = &value.0;
                let forever = now + Duration::from_secs(365 * 24 * 3600);
                keys.insert(
                    value_key.to_string(),
                    (format!("{} {term} {seq} {value}", req.token), forever),
                );
            }
            Vote::YES
        }
        Op::Resign => {
            if ours
                && current
                    .as_deref()
                    .and_then(split)
                    .is_some_and(|(t, _)| *t == *req.token)
            {
                keys.remove(value_key);
            }
            ours.into()
        }
        _ => match (holder, current.as_deref().and_then(split)) {
            (Some(holder), Some((token, rest))) if holder == token => {
                crate::transport::protocol::kind::leadership::parse(rest.as_bytes())
                    .map_or(Vote::NO, Vote::proclaimed)
            }
            _ => Vote::NO,
        },
    }
}

/// The largest fence value of `req`'s keys not below `proposed`, if any
/// (as the fenced scripts in `scripts/`).
fn stale(keys: &HashMap<String, (String, Instant)>, req: &Request, proposed: u64) -> Option<u64> {
    let now = Instant::now();
    req.keys()
        .iter()
        .filter_map(|key| live(keys, &fence_key(key), now))
        .filter_map(|(value, _)| value.parse::<u64>().ok())
        .filter(|stored| *stored >= proposed)
        .max()
}

/// A slot acquisition's vote with the slots this node holds (as the slot
/// scripts in `scripts/`).
fn report(keys: &HashMap<String, (String, Instant)>, req: &Request, vote: Vote) -> Vote {
    let (
        Kind::Permit {
            semaphore, permits, ..
        },
        Op::Acquire { .. } | Op::AcquireFenced { .. },
    ) = (&req.kind, &req.op)
    else {
        return vote;
    };
    let now = Instant::now();
    let held = (Layout::Plain.slots(semaphore, *permits))
        .iter()
        .enumerate()
        .filter(|(_, key)| live(keys, key, now).is_some())
        .fold(0u64, |set, (i, _)| set | 1 << i);
    Vote {
        slots: Some(held),
        ..vote
    }
}

/// What a gate node does with a request that takes part in its kind's
/// queue (as the gate scripts in `scripts/`); members it wakes go to
/// `woken`.
fn queued(inner: &mut Inner, req: &Request, member: &str, woken: &mut Vec<(String, Op)>) -> Answer {
    let now = Instant::now();
    let name = req.kind.gate_name().into_owned();
    let queue = inner.queues.entry(name.clone()).or_default();
    queue.retain(|(_, alive)| *alive > now);
    match req.op {
        Op::Acquire { .. } | Op::AcquireFenced { .. } => {
            queued_acquire(inner, req, member, woken, name, now)
        }
        Op::Release { .. } => queued_release(inner, req, member, woken, name, now),
        Op::Leave => {
            queue.retain(|(m, _)| m != member);
            let next = queue.first().map(|(m, _)| m.clone());
            if slot_free(&inner.keys, req, now) {
                woken.extend(next.map(|h| (h, req.op.clone())));
            }
            Ok(Vote::YES)
        }
        Op::Extend { .. }
        | Op::Proclaim { .. }
        | Op::ReadLeader
        | Op::Resign
        | Op::Inspect
        | Op::ForceRelease { .. } => apply(&mut inner.keys, req),
    }
}

/// A gate node's acquisition on queue `name`: granted when no key is held
/// and it is the caller's turn; otherwise the caller keeps its place, and a
/// free key wakes the head of the queue.
fn queued_acquire(
    inner: &mut Inner,
    req: &Request,
    member: &str,
    woken: &mut Vec<(String, Op)>,
    name: String,
    now: Instant,
) -> Answer {
    let granting = inner.granted.get(&name).is_some_and(|until| *until > now);
    let queue = inner.queues.entry(name.clone()).or_default();
    let head = queue.first().map(|(m, _)| m.clone());
    let held = req
        .keys()
        .iter()
        .any(|key| live(&inner.keys, key, now).is_some());
    if !held && head.as_deref().is_none_or(|h| h == member) {
        // A stale token is answered where the turn rule would let
        // the caller in: it keeps its place.
        if let Op::AcquireFenced { proposed, .. } = req.op
            && let Some(stored) = stale(&inner.keys, req, proposed)
        {
            return Ok(Vote::stale(stored));
        }
        queue.retain(|(m, _)| m != member);
        let next = queue.first().map(|(h, _)| h.clone());
        let vote = apply(&mut inner.keys, req)?;
        inner.granted.insert(name, now + req.timeout.value);
        if matches!(req.kind, Kind::Permit { .. }) && vote.yes && slot_free(&inner.keys, req, now) {
            woken.extend(next.map(|h| (h, req.op.clone())));
        }
        return Ok(vote);
    }
    if !member.is_empty() {
        match queue.iter_mut().find(|(m, _)| m == member) {
            Some((_, alive)) => *alive = now + ALIVE,
            None => queue.push((member.to_owned(), now + ALIVE)),
        }
    }
    if held {
        return Ok(match head {
            Some(h) if h != member => Vote::queued(false),
            _ if granting => Vote::queued(false),
            _ => Vote::NO,
        });
    }
    woken.extend(head.filter(|h| h != member).map(|h| (h, req.op.clone())));
    Ok(Vote::queued(false))
}

/// A gate node's release on queue `name`: applied, then the head of the
/// queue woken when the key is handed on.
fn queued_release(
    inner: &mut Inner,
    req: &Request,
    member: &str,
    woken: &mut Vec<(String, Op)>,
    name: String,
    now: Instant,
) -> Answer {
    let vote = apply(&mut inner.keys, req)?;
    let queue = inner.queues.entry(name).or_default();
    // A queued waiter's failed round that this node had granted:
    // back to the head of the queue, unwoken.
    if vote.yes && !member.is_empty() && !queue.iter().any(|(m, _)| m == member) {
        queue.insert(0, (member.to_owned(), now + ALIVE));
    }
    // After a lease's release whatever this node holds (it may
    // have missed the holder's `SET`, or keep a key the nodes do
    // not); after a failed round's clean-up only if the key is free
    // here.
    let head = queue.first().map(|(m, _)| m.clone());
    let first = req.keys().first().map_or("", |k| &**k);
    let held = matches!(req.op, Op::Release { held: true });
    let handed = (held || live(&inner.keys, first, now).is_none())
        && head.as_deref().is_some_and(|h| h != member);
    woken.extend(head.filter(|_| handed).map(|h| (h, req.op.clone())));
    // As the script: "woke" only where every key was ours.
    Ok(if handed && vote.yes {
        Vote::queued(true)
    } else {
        vote
    })
}

/// Whether the kind's queue may let its next waiter in: for a semaphore a
/// slot free (as `pass_on` in the gate scripts), for a reader-writer lock
/// its writer key free, else the (first) key free.
fn slot_free(keys: &HashMap<String, (String, Instant)>, req: &Request, now: Instant) -> bool {
    let first = req.keys().first().map_or("", |k| &**k);
    match &req.kind {
        Kind::Permit {
            semaphore, permits, ..
        } => (Layout::Plain.slots(semaphore, *permits))
            .iter()
            .any(|key| live(keys, key, now).is_none()),
        // As `leave.lua` is given: a reader-writer lock's writer key.
        Kind::Read { lock } | Kind::Write { lock, .. } => {
            let [writer, ..] = Layout::Plain.rw(lock);
            live(keys, &writer, now).is_none()
        }
        Kind::Lock(_) | Kind::Leadership { .. } => live(keys, first, now).is_none(),
    }
}
