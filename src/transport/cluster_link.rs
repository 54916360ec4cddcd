//! A Redis Cluster as one node's [`Link`]: each request goes to the master
//! serving its keys' hash slot, over that master's own pooled connection
//! ([`RedisLink`], with the cluster's key layout), and the master's votes
//! count only while its own admission allows (see `admission.rs`): one
//! vote for the whole cluster, made of its masters' answers.
//!
//! A batch's requests for several masters are written to all of them
//! first and read after, so they take the slowest master's time, not the
//! sum.
//!
//! # Redirections
//!
//! - `MOVED slot host:port` (the slot moved for good): the map learns it,
//!   the request goes there, and the whole map is read again before the
//!   next batch.
//! - `ASK slot host:port` (the slot is migrating, and the key is not here):
//!   the request goes there once, after `ASKING`.
//! - `TRYAGAIN` (a request's keys are split between the two ends of a
//!   migration for a moment): sent again after a pause of a millisecond.
//!
//! Each only while the request's caller still waits, and at most
//! [`PASSES`] times. A master that fails by connection or timeout (dead,
//! or failed over) also has the map read again, at most every
//! [`REFRESH_GAP`]; reading it is bounded by the batch's per-node timeout
//! and its deadline.
//!
//! # Several hash slots in one request
//!
//! A lock on several resources whose names hash to several slots cannot be
//! one script. Each slot's keys go as one all-or-nothing script of their
//! own, and the node's vote is yes only if every one of them is: when one
//! refuses (or fails), the others that were granted are released before
//! the node answers no. Another client may meanwhile find some of these
//! keys taken on this node and be refused there: a refusal that needs no
//! lock, never a second holder.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::admission::{Admission, Registry, Rules};
use super::cluster::{ClusterSource, SlotMap, ask_map};
use super::conn::{NodeManager, NodeShared};
use super::facts::MARKER;
use super::hash_slot::tag_for;
use super::keys::Layout;
use super::link::Link;
use super::redis_link::{Pools, Raw, RedisLink};
use super::request::{Op, Request};
use super::source::Source;
use crate::algorithm::{Answer, Vote};
use crate::error::{FailureKind, NodeFailure};

/// At most this many sends of one request (redirections and retries).
const PASSES: usize = 4;

/// The shortest time between two readings of the map forced by failures.
const REFRESH_GAP: Duration = Duration::from_millis(100);

/// A master's address.
type Master = (String, u16);

/// A cluster, as one node.
pub(crate) struct ClusterLink {
    /// The cluster node's shared state (its masters' are their links').
    shared: Arc<NodeShared>,
    source: Arc<ClusterSource>,
    pools: Pools,
    rules: Rules,
    registry: Arc<Registry>,
    map: SlotMap,
    /// A link per master the map names (or a redirection named).
    masters: HashMap<Master, RedisLink>,
    /// Each master's place in the client's registry of servers (kept for
    /// an address met again: its claim is replaced, not doubled).
    indices: HashMap<Master, usize>,
    /// When the map was last read.
    read_at: Option<Instant>,
    /// A redirection or a master's failure says the map is out of date.
    stale: bool,
}

/// One request (or, of a request on several hash slots, one slot's part)
/// and where it goes.
struct Part {
    /// Its request's place in the batch.
    of: usize,
    req: Request,
    slot: u16,
}

impl ClusterLink {
    /// A cluster node: reads the map within `timeout` (through any seed)
    /// and opens a connection to each master, each within the connect
    /// timeout, in parallel. A cluster that cannot be reached now is
    /// marked down: the map is read again with the first batch.
    pub(crate) fn open(
        shared: Arc<NodeShared>,
        source: Arc<ClusterSource>,
        pools: Pools,
        rules: Rules,
        registry: Arc<Registry>,
    ) -> Self {
        let mut link = ClusterLink {
            shared,
            source,
            pools,
            rules,
            registry,
            map: SlotMap::empty(),
            masters: HashMap::new(),
            indices: HashMap::new(),
            read_at: None,
            stale: true,
        };
        let timeout = link.pools.connect_timeout;
        link.refresh(timeout, Instant::now() + timeout, true);
        link
    }

    /// Why the node can never count: a master's admission refuses it for
    /// good (too old, evicts keys, listed twice).
    pub(crate) fn problems(&self) -> Vec<String> {
        self.masters
            .values()
            .filter_map(|m| m.shared().admission.permanent_problem())
            .map(|problem| format!("cluster {}: {problem}", self.shared.address))
            .collect()
    }

    /// Reads the map when it is out of date (at most every
    /// [`REFRESH_GAP`]), within `timeout` and `until`, through the masters
    /// known and then the seeds; keeps the old map when none answers.
    /// With `connect`, opens the masters' first connections before it
    /// returns (start-up).
    fn refresh(&mut self, timeout: Duration, until: Instant, connect: bool) {
        if !self.stale
            || self
                .read_at
                .is_some_and(|at| at.elapsed() < REFRESH_GAP && !self.map.masters.is_empty())
        {
            return;
        }
        self.read_at = Some(Instant::now());
        let mut candidates: Vec<redis::Client> = self
            .map
            .masters
            .iter()
            .filter_map(|(host, port)| self.source.master(host, *port).ok())
            .collect();
        candidates.extend(self.source.seeds().iter().cloned());
        let bound = timeout.min(self.pools.connect_timeout);
        match ask_map(&candidates, bound, until) {
            Ok(map) => {
                self.stale = false;
                self.shared.mark_up();
                self.map = map;
                self.keep_masters(connect);
            }
            Err(err) => {
                if self.map.masters.is_empty() {
                    self.shared.mark_down(&err);
                }
            }
        }
    }

    /// Opens a link to every master of the map that has none and drops
    /// those of masters it no longer names (their connections close, and
    /// they claim no server in the registry).
    fn keep_masters(&mut self, connect: bool) {
        let named: Vec<Master> = self.map.masters.clone();
        let gone: Vec<Master> = self
            .masters
            .keys()
            .filter(|m| !named.contains(m))
            .cloned()
            .collect();
        for master in gone {
            self.masters.remove(&master);
            if let Some(&index) = self.indices.get(&master) {
                self.registry.forget(index);
            }
        }
        let new: Vec<Master> = named
            .into_iter()
            .filter(|m| !self.masters.contains_key(m))
            .collect();
        let new: Vec<(Master, usize)> = new
            .into_iter()
            .map(|m| {
                let index = self.index(&m);
                (m, index)
            })
            .collect();
        let this = &*self;
        let made: Vec<(Master, RedisLink)> = std::thread::scope(|scope| {
            let making: Vec<_> = new
                .into_iter()
                .map(|(master, index)| {
                    scope.spawn(move || (this.make(&master, index, connect), master))
                })
                .collect();
            making
                .into_iter()
                .filter_map(|h| h.join().ok())
                .filter_map(|(link, master)| Some((master, link?)))
                .collect()
        });
        self.masters.extend(made);
        self.publish_masters();
    }

    /// Tells the node's health which masters it has now.
    fn publish_masters(&self) {
        let shared = self.masters.values().map(|m| m.shared().clone()).collect();
        self.shared.set_masters(shared);
    }

    /// `master`'s place in the registry (given once per address).
    fn index(&mut self, master: &Master) -> usize {
        if let Some(&index) = self.indices.get(master) {
            return index;
        }
        let address: Arc<str> = Arc::from(format!("{}:{}", master.0, master.1).as_str());
        let index = self.registry.add(address);
        self.indices.insert(master.clone(), index);
        index
    }

    /// A link to `master`, registry entry `index` (with `connect`, its
    /// first connection opened now, within the connect timeout).
    fn make(&self, master: &Master, index: usize, connect: bool) -> Option<RedisLink> {
        let address: Arc<str> = Arc::from(format!("{}:{}", master.0, master.1).as_str());
        let client = self.source.master(&master.0, master.1).ok()?;
        // Its marker in the first slot it serves: its replicas have it.
        let tag = self.map.first_slot(master).and_then(tag_for)?;
        let admission = Admission::new(index, self.rules, self.registry.clone())
            .with_marker(format!("{MARKER}{{{tag}}}"));
        let shared = Arc::new(NodeShared::admitted_by(&address, admission));
        let manager = NodeManager::new(
            Source::Direct(Box::new(client)),
            self.pools.connect_timeout,
            shared.clone(),
        );
        if connect {
            match manager.open() {
                Ok(conn) => manager.keep_for_pool(conn),
                Err(err) => shared.mark_down(&err),
            }
        }
        Some(
            self.pools
                .link(shared, manager, None)
                .with_layout(Layout::Cluster),
        )
    }

    /// The link to `master`, made if the map did not name it (a
    /// redirection to a master not yet known).
    fn master(&mut self, master: &Master) -> Option<&mut RedisLink> {
        if !self.masters.contains_key(master) {
            let index = self.index(master);
            let link = self.make(master, index, false)?;
            self.masters.insert(master.clone(), link);
            self.publish_masters();
        }
        self.masters.get_mut(master)
    }

    /// Sends every part to its master, following redirections: one answer
    /// per part.
    fn exchange(&mut self, parts: &[Part]) -> Vec<Answer> {
        let mut answers: Vec<Option<Answer>> = (0..parts.len()).map(|_| None).collect();
        let mut route: Vec<(usize, Option<Master>, bool)> = parts
            .iter()
            .enumerate()
            .map(|(i, part)| (i, self.map.master(part.slot).cloned(), false))
            .collect();
        let started = Instant::now();
        for pass in 0..PASSES {
            let mut groups: Vec<(Master, bool, Vec<usize>)> = Vec::new();
            for (i, master, asking) in route.drain(..) {
                let Some(master) = master else {
                    answers[i] = Some(Err(self.unserved(parts[i].slot)));
                    continue;
                };
                match groups
                    .iter_mut()
                    .find(|(m, a, _)| *m == master && *a == asking)
                {
                    Some((_, _, members)) => members.push(i),
                    None => groups.push((master, asking, vec![i])),
                }
            }
            let mut sendings = Vec::with_capacity(groups.len());
            for (master, asking, members) in &groups {
                let batch: Vec<&Request> = members.iter().map(|&i| &parts[i].req).collect();
                let sending = self.master(master).map(|link| link.send(&batch, *asking));
                sendings.push(sending);
            }
            let mut next = Vec::new();
            let mut unreachable: Vec<(usize, Master)> = Vec::new();
            let mut pause = false;
            for ((master, _, members), sending) in groups.iter().zip(sendings) {
                let batch: Vec<&Request> = members.iter().map(|&i| &parts[i].req).collect();
                let Some((link, sending)) = self.masters.get_mut(master).zip(sending) else {
                    // Not even a link (no tag for its marker): say so.
                    for &i in members {
                        answers[i] = Some(Err(self.unreachable(master)));
                    }
                    continue;
                };
                let raws = link.receive(sending, &batch);
                for (&i, raw) in members.iter().zip(raws) {
                    match redirection(&raw) {
                        Some(Redirect::Moved(slot, to)) if pass + 1 < PASSES => {
                            self.map.moved(slot, to.clone());
                            self.stale = true;
                            next.push((i, Some(to), false));
                        }
                        Some(Redirect::Ask(to)) if pass + 1 < PASSES => {
                            next.push((i, Some(to), true));
                        }
                        Some(Redirect::TryAgain) if pass + 1 < PASSES => {
                            pause = true;
                            next.push((i, Some(master.clone()), false));
                        }
                        _ => {
                            if let Raw::Failed(failure) = &raw {
                                let kind = failure.kind();
                                if kind == FailureKind::Connection {
                                    unreachable.push((i, master.clone()));
                                }
                                if matches!(kind, FailureKind::Connection | FailureKind::Timeout) {
                                    self.stale = true;
                                }
                            }
                            answers[i] = Some(link.interpret(&parts[i].req, raw));
                        }
                    }
                }
            }
            // A master that cannot be reached may have been failed over:
            // read the map again, and send what it did not get to the
            // master that serves its slot now. (Not after a timeout: the
            // request may have run there.)
            if !unreachable.is_empty() && pass + 1 < PASSES {
                let until = unreachable
                    .iter()
                    .map(|(i, _)| parts[*i].req.expires)
                    .max()
                    .unwrap_or_else(Instant::now);
                let timeout = unreachable
                    .iter()
                    .map(|(i, _)| parts[*i].req.timeout.value)
                    .max()
                    .unwrap_or_default();
                self.refresh(timeout, until, false);
                for (i, was) in unreachable {
                    if let Some(now) = self.map.master(parts[i].slot).filter(|m| **m != was) {
                        answers[i] = None;
                        next.push((i, Some(now.clone()), false));
                    }
                }
            }
            let now = Instant::now();
            for (i, _, _) in &next {
                if parts[*i].req.expires <= now {
                    answers[*i] = Some(Err(NodeFailure::timed_out(
                        self.shared.address.clone(),
                        parts[*i].req.timeout.value,
                        "redirected by the cluster until its deadline passed",
                    )));
                }
            }
            next.retain(|(i, _, _)| answers[*i].is_none());
            if next.is_empty() {
                break;
            }
            if pause {
                std::thread::sleep(Duration::from_millis(1));
            }
            route = next;
        }
        self.shared.note_round_trip(started.elapsed());
        answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(self.unserved(0))))
            .collect()
    }

    fn unserved(&self, slot: u16) -> NodeFailure {
        NodeFailure::new(
            self.shared.address.clone(),
            FailureKind::Connection,
            format!(
                "no master of the cluster is known to serve hash slot {slot} (its map could not \
                 be read, or the cluster is not fully set up); check that this client reaches \
                 the seeds in the node URL"
            ),
        )
    }

    fn unreachable(&self, master: &Master) -> NodeFailure {
        NodeFailure::new(
            self.shared.address.clone(),
            FailureKind::Connection,
            format!(
                "master {}:{} of the cluster could not be reached",
                master.0, master.1
            ),
        )
    }
}

impl Link for ClusterLink {
    fn run(&mut self, batch: &[&Request]) -> Vec<Answer> {
        let Some(until) = batch.iter().map(|req| req.expires).max() else {
            return Vec::new();
        };
        let timeout = batch
            .iter()
            .map(|req| req.timeout.value)
            .max()
            .unwrap_or(Duration::from_millis(1));
        self.refresh(timeout, until.min(Instant::now() + timeout), false);
        let parts: Vec<Part> = batch
            .iter()
            .enumerate()
            .flat_map(|(of, req)| split(of, req))
            .collect();
        let mut answers = self.exchange(&parts).into_iter();
        let mut out = Vec::with_capacity(batch.len());
        let mut undo = Vec::new();
        let mut at = 0;
        for (of, req) in batch.iter().enumerate() {
            let count = parts[at..].iter().take_while(|p| p.of == of).count();
            let mine: Vec<Answer> = answers.by_ref().take(count).collect();
            let (answer, granted) = combine(req, mine);
            undo.extend(
                granted
                    .into_iter()
                    .map(|i| rollback(&parts[at + i], timeout)),
            );
            out.push(answer);
            at += count;
        }
        if !undo.is_empty() {
            // Their votes are given (no); the keys they took expire by
            // their TTL if this fails.
            let _ = self.exchange(&undo);
        }
        out
    }
}

/// What a reply says to do instead of answering.
enum Redirect {
    Moved(u16, Master),
    Ask(Master),
    TryAgain,
}

fn redirection(raw: &Raw) -> Option<Redirect> {
    let Raw::Reply(redis::Value::ServerError(err)) = raw else {
        return None;
    };
    let target = || {
        let mut words = err.details()?.split_whitespace();
        let slot = words.next()?.parse::<u16>().ok()?;
        let (host, port) = words.next()?.rsplit_once(':')?;
        Some((slot, (host.to_owned(), port.parse::<u16>().ok()?)))
    };
    match err.code() {
        "MOVED" => target().map(|(slot, to)| Redirect::Moved(slot, to)),
        "ASK" => target().map(|(_, to)| Redirect::Ask(to)),
        "TRYAGAIN" => Some(Redirect::TryAgain),
        _ => None,
    }
}

/// `req` as the parts a cluster can run: one, or for a lock on keys in
/// several hash slots, one per slot (in the order of their first key; the
/// first key's part keeps the request's place in its queue of waiters).
fn split(of: usize, req: &Request) -> Vec<Part> {
    let first = req.keys.first().map_or("", |k| &**k);
    let slot = Layout::slot(first);
    let several = matches!(
        req.op,
        Op::Acquire { .. } | Op::AcquireFenced { .. } | Op::Extend { .. } | Op::Release
    ) && req.keys.iter().any(|k| Layout::slot(k) != slot);
    if !several {
        return vec![Part {
            of,
            req: req.clone(),
            slot,
        }];
    }
    let mut slots: Vec<(u16, Vec<Arc<str>>)> = Vec::new();
    for key in req.keys.iter() {
        let s = Layout::slot(key);
        match slots.iter_mut().find(|(t, _)| *t == s) {
            Some((_, keys)) => keys.push(key.clone()),
            None => slots.push((s, vec![key.clone()])),
        }
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(n, (slot, keys))| Part {
            of,
            req: Request {
                keys: keys.into(),
                queue: if n == 0 { req.queue.clone() } else { None },
                ..req.clone()
            },
            slot,
        })
        .collect()
}

/// One request's answer from its parts' (in [`split`]'s order), and which
/// parts granted what must now be given back: an acquisition not granted
/// by every part.
fn combine(req: &Request, parts: Vec<Answer>) -> (Answer, Vec<usize>) {
    if parts.len() <= 1 {
        let answer = parts.into_iter().next().unwrap_or_else(|| {
            Err(NodeFailure::new(
                Arc::from("cluster"),
                FailureKind::Server,
                "no answer for this request",
            ))
        });
        return (answer, Vec::new());
    }
    let acquiring = matches!(req.op, Op::Acquire { .. } | Op::AcquireFenced { .. });
    let granted: Vec<usize> = parts
        .iter()
        .enumerate()
        .filter(|(_, a)| a.as_ref().is_ok_and(|v| v.yes))
        .map(|(i, _)| i)
        .collect();
    let all = granted.len() == parts.len();
    let undo = if acquiring && !all {
        granted
    } else {
        Vec::new()
    };
    if let Some(failure) = parts.iter().find_map(|a| a.as_ref().err()) {
        return (Err(failure.clone()), undo);
    }
    let votes: Vec<Vote> = parts.into_iter().filter_map(Result::ok).collect();
    let Some(mut vote) = votes.first().cloned() else {
        return (Ok(Vote::NO), undo);
    };
    vote.yes = all;
    vote.fence = votes.iter().filter_map(|v| v.fence).max();
    vote.queued = votes.iter().any(|v| v.queued);
    vote.holder = votes.iter().find(|v| !v.yes).and_then(|v| v.holder);
    (Ok(vote), undo)
}

/// The release of what `part` was granted, as a failed round's clean-up.
fn rollback(part: &Part, timeout: Duration) -> Part {
    Part {
        of: part.of,
        req: Request {
            op: Op::Release,
            held: false,
            expires: Instant::now() + timeout,
            ..part.req.clone()
        },
        slot: part.slot,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::NodeTimeout;

    fn req(op: Op, keys: &[&str], queue: Option<&str>) -> Request {
        Request {
            op,
            keys: keys.iter().map(|k| Arc::from(*k)).collect(),
            token: Arc::from("tok"),
            timeout: NodeTimeout::fixed(Duration::from_millis(50)),
            expires: Instant::now() + Duration::from_secs(5),
            queue: queue.map(Arc::from),
            report: None,
            value: None,
            waits: true,
            held: true,
        }
    }

    fn keys(part: &Part) -> Vec<&str> {
        part.req.keys.iter().map(|k| &**k).collect()
    }

    #[test]
    fn a_lock_on_several_slots_goes_as_one_part_per_slot() {
        let acquire = Op::Acquire { ttl_ms: 1000 };
        // `{a}x` and `{a}y` share a slot; `b` and `c` have their own.
        let r = req(acquire, &["{a}x", "b", "{a}y", "c"], Some("me"));
        let parts = split(7, &r);
        assert_eq!(parts.len(), 3);
        assert_eq!(keys(&parts[0]), ["{a}x", "{a}y"]);
        assert_eq!(keys(&parts[1]), ["b"]);
        assert_eq!(keys(&parts[2]), ["c"]);
        assert!(parts.iter().all(|p| p.of == 7));
        assert_eq!(
            parts[0].req.queue.as_deref(),
            Some("me"),
            "the first key's queue"
        );
        assert!(parts[1..].iter().all(|p| p.req.queue.is_none()));
        assert_eq!(parts[1].slot, Layout::slot("b"));
        // One slot, or an operation that touches the first key's only: one.
        assert_eq!(split(0, &req(acquire, &["{a}x", "{a}y"], None)).len(), 1);
        assert_eq!(split(0, &req(Op::Leave, &["b", "c"], Some("me"))).len(), 1);
    }

    #[test]
    fn the_node_says_yes_only_if_every_slot_does_and_gives_back_the_rest() {
        let acquire = req(Op::Acquire { ttl_ms: 1000 }, &["b", "c", "d"], None);
        let (answer, undo) = combine(&acquire, vec![Ok(Vote::YES), Ok(Vote::YES), Ok(Vote::YES)]);
        assert!(answer.unwrap().yes);
        assert!(undo.is_empty());
        let held = Vote {
            holder: Some(9),
            ..Vote::NO
        };
        let (answer, undo) = combine(&acquire, vec![Ok(Vote::YES), Ok(held), Ok(Vote::YES)]);
        let vote = answer.unwrap();
        assert!(!vote.yes);
        assert_eq!(vote.holder, Some(9), "who holds it, from the part refused");
        assert_eq!(undo, [0, 2], "the granted parts are given back");
        let failed = NodeFailure::new(Arc::from("m"), FailureKind::Timeout, "slow");
        let (answer, undo) = combine(&acquire, vec![Ok(Vote::YES), Err(failed), Ok(Vote::NO)]);
        assert_eq!(answer.unwrap_err().kind(), FailureKind::Timeout);
        assert_eq!(undo, [0]);
        let fenced = req(
            Op::AcquireFenced {
                ttl_ms: 1000,
                proposed: 5,
                idle_ms: 1,
            },
            &["b", "c"],
            None,
        );
        let (answer, undo) = combine(&fenced, vec![Ok(Vote::stale(7)), Ok(Vote::stale(9))]);
        assert_eq!(answer.unwrap().fence, Some(9), "the largest fence value");
        assert!(undo.is_empty());
        // An extension or a release gives nothing back.
        let extend = req(Op::Extend { ttl_ms: 1000 }, &["b", "c"], None);
        let (answer, undo) = combine(&extend, vec![Ok(Vote::YES), Ok(Vote::NO)]);
        assert!(!answer.unwrap().yes);
        assert!(undo.is_empty());
    }

    #[test]
    fn redirections_are_read_from_the_reply() {
        let reply = |line: &str| {
            let value = redis::parse_redis_value(format!("-{line}\r\n").as_bytes());
            Raw::Reply(value.expect("an error reply"))
        };
        assert!(matches!(
            redirection(&reply("MOVED 3999 127.0.0.1:6381")),
            Some(Redirect::Moved(3999, (ref h, 6381))) if h == "127.0.0.1"
        ));
        assert!(matches!(
            redirection(&reply("ASK 3999 ::1:6381")),
            Some(Redirect::Ask((ref h, 6381))) if h == "::1"
        ));
        assert!(matches!(
            redirection(&reply("TRYAGAIN x")),
            Some(Redirect::TryAgain)
        ));
        assert!(redirection(&reply("MOVED nonsense")).is_none());
        assert!(redirection(&reply("ERR boom")).is_none());
    }
}
