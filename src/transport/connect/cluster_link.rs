//! A Redis Cluster as one node's [`Link`]: each request goes to the master
//! serving its keys' hash slot, over that master's own pooled connection
//! ([`RedisLink`], with the cluster's key layout), and the master's votes
//! count only while its own admission allows (see `admission.rs`): one
//! vote for the whole cluster, made of its masters' answers.
//!
//! A batch's requests for several masters are written to all of them
//! first and read after, so while at most one master is slow they take
//! its time, not the sum (each master read after it waits up to its own
//! timeout: several stalled masters add up). One worker serves the whole
//! cluster, so a batch that includes a silent master waits its timeout
//! for every answer: a master that did not answer in time gets no request
//! for [`SILENT_FOR`] of its timeouts (they fail at once), then the next
//! batch probes it.
//!
//! # Redirections
//!
//! - `MOVED slot host:port` (the slot moved for good): the map learns it,
//!   the request goes there, and the whole map is read again before the
//!   next batch.
//! - `ASK slot host:port` (the slot is migrating, and the key is not here):
//!   the request goes there once, after `ASKING`.
//! - `TRYAGAIN` (a script's keys are split between the two ends of a
//!   migration, or some of them do not exist while its slot migrates:
//!   a release with its queue key, a fenced acquisition, the rw-lock and
//!   election scripts): sent again to the same master, after `ASKING` if
//!   it went so, after a pause that doubles from 1 ms to 16 ms, for one
//!   per-node timeout from the batch's start at most (about the time its
//!   caller waits for it; the cluster's other requests wait meanwhile). A
//!   request no caller waits for (a clean-up, a dropped guard's release, a
//!   leave) is sent again as for a redirection, at most [`PASSES`] sends.
//!
//! `MOVED` and `ASK` only while the request's caller still waits, and at
//! most [`PASSES`] sends of one request. A request for a slot no master
//! serves in the map read last (a cluster still forming, slots added since
//! the client started) has the map read again first. Any other failure (a master
//! unreachable, silent, refusing writes, or `CLUSTERDOWN`) also has the map
//! read again, at most every [`REFRESH_GAP`], through the masters that
//! answer first, then the seeds; a request a master could not be sent
//! goes to the master that serves its slot after that reading (a failover
//! shows at the first request that meets it). Reading the map takes at
//! most one per-node timeout of the batch.
//!
//! # Several hash slots in one request
//!
//! A lock on several resources whose names hash to several slots cannot be
//! one script. Each slot's keys go as one all-or-nothing script of their
//! own, and the node's vote is yes only if every one of them is. When one
//! refuses, the others may have granted their keys: the round's clean-up
//! (every failed round releases its token on every node it reached)
//! removes them, as it removes what a round left on nodes that voted no for
//! any reason.
//! Meanwhile another client may find part of these keys taken on this node
//! and be refused there: a refusal, never a second holder.
//!
//! # Masters
//!
//! Each master has its own admission and its own marker key, in the first
//! hash slot it serves now (the key moves with the map: a reshard that
//! moves that slot away moves the marker to the next). A master that takes
//! over slots another master served (a promoted replica, or a reshard) is
//! a new incarnation for those keys: with the restart quarantine on, it
//! waits the whole period, as a restarted master does.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cluster::{ClusterSource, SlotMap, ask_map};
use super::conn::{NodeManager, NodeShared};
use super::link::Link;
use super::redis_link::{Pools, Raw, RedisLink, Sending};
use super::source::Source;
use crate::algorithm::{Answer, Vote};
use crate::error::{FailureKind, NodeFailure};
use crate::transport::protocol::hash_slot::{SLOTS, tag_for};
use crate::transport::protocol::keys::Layout;
use crate::transport::protocol::request::{Kind, Op, Request};
use crate::transport::trust::admission::{Admission, Registry, Rules};
use crate::transport::trust::facts::MARKER;

/// At most this many sends of one request (redirections and retries).
const PASSES: usize = 4;

/// The shortest time between two readings of the map forced by failures.
const REFRESH_GAP: Duration = Duration::from_millis(100);

/// A master's address.
type Master = (String, u16);

/// How many of its per-node timeouts a master that did not answer in time
/// gets no request (each request for it fails at once, as from a node
/// known to be down), before the next batch probes it. One worker serves
/// every master of a cluster, and every batch that includes a silent
/// master waits its timeout: this keeps the other masters' answers from
/// waiting behind it more than a fifth of the time.
const SILENT_FOR: u32 = 4;

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
    /// A text hashing to each slot a marker was kept in (found once).
    tags: HashMap<u16, String>,
    /// Masters that did not answer in time, and until when they get no
    /// request but a probe (see [`SILENT_FOR`]).
    silent: HashMap<Master, Instant>,
    /// Every slot's last known master: the map's, or for a slot the map
    /// leaves unserved now, the master that served it last. A master given
    /// a slot another master served, gone since (a promoted replica, a
    /// lost master's slots handed on), takes over its keys, even when the
    /// slot was unserved for a while in between (see [`Self::takes_over`]).
    known: SlotMap,
    /// When the map was last read.
    read_at: Option<Instant>,
    /// A redirection or a master's failure says the map is out of date.
    stale: bool,
    /// Seeds (or masters) that said they are not in cluster mode, by
    /// address: a standalone server listed as a cluster.
    standalone: Vec<String>,
}

/// What the client knew before it read the map again: every slot's last
/// known master, and the map it read before (see
/// [`ClusterLink::takes_over`]).
struct Before {
    known: SlotMap,
    map: SlotMap,
}

/// How a master's link is made: its place in the registry, whether it
/// takes over slots another master served, its marker key.
struct Met {
    index: usize,
    successor: bool,
    marker: Option<String>,
}

/// One request (or, of a request on several hash slots, one slot's part)
/// and where it goes.
struct Part {
    /// Its request's place in the batch.
    of: usize,
    req: Request,
    slot: u16,
}

/// Where a part goes next: its place in the exchange, its master (`None`:
/// none serves its slot), and whether it goes after `ASKING`.
type Route = (usize, Option<Master>, bool);

/// A master and the parts it is sent, each with whether it goes after
/// `ASKING`.
type Group = (Master, Vec<(usize, bool)>);

/// An exchange's state, part by part, across its passes.
struct Progress {
    /// Each part's answer, once it has one.
    answers: Vec<Option<Answer>>,
    /// The redirections each part followed.
    redirected: Vec<usize>,
    /// Until when each part's `TRYAGAIN` is sent again (see [`retry_until`]).
    retry_until: Vec<Option<Instant>>,
}

impl Progress {
    /// Whether part `i`'s `TRYAGAIN` is sent again: until its retry
    /// deadline, or, for one no caller waits for, while it `follows`
    /// redirections.
    fn retries(&self, i: usize, follows: bool) -> bool {
        self.retry_until[i].map_or(follows, |until| Instant::now() < until)
    }
}

/// What one pass of an exchange leaves for the next.
#[derive(Default)]
struct Pass {
    /// Where the parts still unanswered go next.
    next: Vec<Route>,
    /// Parts whose master could not be sent them, and that master.
    unreachable: Vec<(usize, Master)>,
    /// A part was refused with `TRYAGAIN`: the next pass waits first.
    again: bool,
}

impl ClusterLink {
    /// A cluster node: reads the map within the connect timeout (through
    /// any seed) and opens a connection to each master, each within the
    /// connect timeout, in parallel. A cluster that cannot be reached now
    /// is marked down: the map is read again with the first batch.
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
            known: SlotMap::empty(),
            masters: HashMap::new(),
            indices: HashMap::new(),
            tags: HashMap::new(),
            silent: HashMap::new(),
            read_at: None,
            stale: true,
            standalone: Vec::new(),
        };
        let timeout = link.pools.connect_timeout;
        link.refresh(timeout, Instant::now() + timeout, true);
        link
    }

    /// Whether its map was read (at least one master to send to).
    pub(crate) fn opened(&self) -> bool {
        !self.map.masters.is_empty()
    }

    /// Why the node can never count: a seed is no cluster member, or a
    /// master's admission refuses it for good (too old, evicts keys,
    /// listed twice).
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems: Vec<String> = self
            .masters
            .values()
            .filter_map(|m| m.shared().admission.permanent_problem())
            .chain(self.standalone.iter().map(|seed| {
                format!(
                    "node {}: seed {seed} is not in cluster mode (cluster support disabled): \
                     list a standalone server as redis://host:port (or rediss://), not \
                     redis+cluster://",
                    self.shared.address
                )
            }))
            .collect();
        // A cluster listed twice says so once, not once per master.
        problems.sort();
        problems.dedup();
        problems
    }

    /// Reads the map when it is out of date (at most every
    /// [`REFRESH_GAP`]), by `until`, each step within `timeout`: through
    /// the masters that answer lately, then the seeds, then the other
    /// masters. Keeps the old map when none answers. With `connect`, opens
    /// the masters' first connections before it returns (start-up).
    fn refresh(&mut self, timeout: Duration, until: Instant, connect: bool) {
        if !self.stale
            || self
                .read_at
                .is_some_and(|at| at.elapsed() < REFRESH_GAP && !self.map.masters.is_empty())
        {
            return;
        }
        self.read_at = Some(Instant::now());
        let (healthy, silent): (Vec<&Master>, Vec<&Master>) =
            self.map.masters.iter().partition(|m| {
                self.masters
                    .get(*m)
                    .is_some_and(|l| l.shared().gate_wait().is_some())
            });
        let client = |(host, port): &Master| self.source.master(host, *port).ok();
        let candidates: Vec<redis::Client> = healthy
            .into_iter()
            .filter_map(client)
            .chain(self.source.seeds().iter().cloned())
            .chain(silent.into_iter().filter_map(client))
            .collect();
        let bound = timeout.min(self.pools.connect_timeout);
        match ask_map(&candidates, bound, until, &mut self.standalone) {
            Ok(map) => {
                self.stale = false;
                self.shared.mark_up();
                let known = map.over(&self.known);
                let before = Before {
                    known: std::mem::replace(&mut self.known, known),
                    map: std::mem::replace(&mut self.map, map),
                };
                self.keep_masters(&before, connect);
            }
            Err(err) => {
                if self.map.masters.is_empty() {
                    self.shared.mark_down(&err);
                }
            }
        }
    }

    /// Opens a link to every master of the map that has none (a successor
    /// where it takes over slots another master served `before`), drops
    /// those of masters it no longer names (their connections close, and
    /// they claim no server in the registry), and keeps each master's
    /// marker in the first slot it serves now.
    fn keep_masters(&mut self, before: &Before, connect: bool) {
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
        let known: Vec<Master> = self.masters.keys().cloned().collect();
        let new: Vec<Master> = named
            .iter()
            .filter(|m| !self.masters.contains_key(*m))
            .cloned()
            .collect();
        let new: Vec<(Master, Met)> = new
            .into_iter()
            .map(|m| {
                let met = Met {
                    index: self.index(&m),
                    successor: self.takes_over(&m, before),
                    marker: self.marker(&m),
                };
                (m, met)
            })
            .collect();
        let this = &*self;
        let made: Vec<(Master, RedisLink)> = std::thread::scope(|scope| {
            let making: Vec<_> = new
                .into_iter()
                .map(|(master, met)| {
                    scope.spawn(move || (this.make(&master, met, connect), master))
                })
                .collect();
            making
                .into_iter()
                .filter_map(|h| h.join().ok())
                .filter_map(|(link, master)| Some((master, link?)))
                .collect()
        });
        self.masters.extend(made);
        for master in named {
            // A master known before that takes over a lost master's slots
            // (an operator's `--cluster fix` or `ADDSLOTS`): their keys may
            // be lost. (A new one was made a successor.)
            let gained = known.contains(&master) && self.takes_over(&master, before);
            if let Some(link) = self.masters.get(&master)
                && gained
            {
                link.shared().admission.succeeds();
            }
            if let Some(marker) = self.marker(&master)
                && let Some(link) = self.masters.get(&master)
            {
                link.shared().admission.set_marker(marker);
            }
        }
        self.publish_masters();
    }

    /// Whether `master` serves a slot whose last known master was another
    /// that is gone from the map now (a promoted replica, or a master given
    /// a lost master's slots), or that the map read before left unserved (a
    /// master given slots that were lost: their keys were not moved to it).
    /// A slot moved from a master still in the map without going unserved
    /// (a reshard, which moves the keys with it) is not taken over. A flap
    /// that no reading of the map saw cannot be told from a reshard.
    fn takes_over(&self, master: &Master, before: &Before) -> bool {
        (0..SLOTS).any(|slot| {
            self.map.master(slot) == Some(master)
                && before.known.master(slot).is_some_and(|was| {
                    was != master
                        && (!self.map.masters.contains(was) || before.map.master(slot).is_none())
                })
        })
    }

    /// The key of `master`'s marker: in the first slot it serves now.
    fn marker(&mut self, master: &Master) -> Option<String> {
        let slot = self.map.first_slot(master)?;
        let tag = match self.tags.entry(slot) {
            std::collections::hash_map::Entry::Occupied(tag) => tag.into_mut(),
            std::collections::hash_map::Entry::Vacant(room) => room.insert(tag_for(slot)?),
        };
        Some(format!("{MARKER}{{{tag}}}"))
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
        let index = self.registry.add(address, self.shared.admission.index());
        self.indices.insert(master.clone(), index);
        index
    }

    /// A link to `master`, as `met` says (with `connect`, its first
    /// connection opened now, within the connect timeout).
    fn make(&self, master: &Master, met: Met, connect: bool) -> Option<RedisLink> {
        let address: Arc<str> = Arc::from(format!("{}:{}", master.0, master.1).as_str());
        let client = self.source.master(&master.0, master.1).ok()?;
        let admission = Admission::new(met.index, self.rules, self.registry.clone());
        if met.successor {
            admission.succeeds();
        }
        if let Some(marker) = met.marker {
            admission.set_marker(marker);
        }
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
    /// redirection to a master not yet known: a successor, as it serves a
    /// slot the map gave another).
    fn master(&mut self, master: &Master) -> Option<&mut RedisLink> {
        if !self.masters.contains_key(master) {
            let met = Met {
                index: self.index(master),
                successor: true,
                marker: self.marker(master),
            };
            let link = self.make(master, met, false)?;
            self.masters.insert(master.clone(), link);
            self.publish_masters();
        }
        self.masters.get_mut(master)
    }

    /// Sends every part to its master, following redirections: one answer
    /// per part.
    fn exchange(&mut self, parts: &[Part]) -> Vec<Answer> {
        let answers: Vec<Option<Answer>> = (0..parts.len()).map(|_| None).collect();
        let mut route: Vec<Route> = parts
            .iter()
            .enumerate()
            .map(|(i, part)| (i, self.map.master(part.slot).cloned(), false))
            .collect();
        let started = Instant::now();
        let mut progress = Progress {
            answers,
            redirected: vec![0; parts.len()],
            retry_until: retry_until(parts, started),
        };
        let mut pause = Duration::from_millis(1);
        // The first pass's time is the round trip: redirections and the
        // pauses of `TRYAGAIN` say nothing of how fast the masters answer.
        let mut first_pass = None;
        for pass in 0.. {
            let now = Instant::now();
            let groups = self.group(parts, &mut route, pass, now, &mut progress.answers);
            let sendings = self.send_all(parts, &groups);
            let mut step = Pass::default();
            for (group, sending) in groups.iter().zip(sendings) {
                self.settle(parts, group, sending, &mut progress, &mut step);
            }
            if !step.unreachable.is_empty() && pass + 1 < PASSES {
                self.reroute(
                    parts,
                    now,
                    step.unreachable,
                    &mut progress.answers,
                    &mut step.next,
                );
            }
            first_pass.get_or_insert_with(|| started.elapsed());
            if step.next.is_empty() {
                break;
            }
            if step.again {
                // Until the migration moves the rest of the keys: 1 ms,
                // then twice as long each time, at most 16 ms.
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(16));
            }
            route = step.next;
        }
        if let Some(took) = first_pass {
            self.shared.note_round_trip(took);
        }
        progress
            .answers
            .into_iter()
            .zip(parts)
            .map(|(answer, part)| answer.unwrap_or_else(|| Err(self.gave_up(part))))
            .collect()
    }

    /// Groups the parts `route` sends on by master, in order, each with
    /// whether it goes after `ASKING`; a part past its deadline (after the
    /// first pass), in a slot no master serves, or for a silent master gets
    /// its failure in `answers` instead.
    fn group(
        &self,
        parts: &[Part],
        route: &mut Vec<Route>,
        pass: usize,
        now: Instant,
        answers: &mut [Option<Answer>],
    ) -> Vec<Group> {
        let mut groups: Vec<Group> = Vec::new();
        for (i, master, asking) in route.drain(..) {
            if pass > 0 && parts[i].req.expires <= now {
                answers[i] = Some(Err(self.gave_up(&parts[i])));
                continue;
            }
            let Some(master) = master else {
                answers[i] = Some(Err(self.unserved(parts[i].slot)));
                continue;
            };
            if let Some(until) = self.silent.get(&master).filter(|until| **until > now) {
                answers[i] = Some(Err(self.silenced(&parts[i], &master, *until, now)));
                continue;
            }
            match groups.iter_mut().find(|(m, _)| *m == master) {
                Some((_, members)) => members.push((i, asking)),
                None => groups.push((master, vec![(i, asking)])),
            }
        }
        groups
    }

    /// Writes each group's parts to its master, all of them before any
    /// reply is read, so that the masters answer in parallel (`None`: no
    /// link to the master could be made).
    fn send_all(&mut self, parts: &[Part], groups: &[Group]) -> Vec<Option<Sending>> {
        let mut sendings = Vec::with_capacity(groups.len());
        for (master, members) in groups {
            let batch: Vec<&Request> = members.iter().map(|&(i, _)| &parts[i].req).collect();
            let asking: Vec<bool> = members.iter().map(|&(_, a)| a).collect();
            sendings.push(self.master(master).map(|link| link.send(&batch, &asking)));
        }
        sendings
    }

    /// Reads a master's replies to its group's parts: each part's answer
    /// in `progress`, or, for a redirection it may still follow, where it
    /// goes next in `step`.
    fn settle(
        &mut self,
        parts: &[Part],
        (master, members): &Group,
        sending: Option<Sending>,
        progress: &mut Progress,
        step: &mut Pass,
    ) {
        let batch: Vec<&Request> = members.iter().map(|&(i, _)| &parts[i].req).collect();
        let Some((link, sending)) = self.masters.get_mut(master).zip(sending) else {
            for &(i, _) in members {
                progress.answers[i] = Some(Err(unreachable_master(&self.shared.address, master)));
            }
            return;
        };
        let raws = link.receive(sending, &batch);
        note_silence(&mut self.silent, master, &batch, &raws);
        let mut failed = false;
        for (&(i, asking), raw) in members.iter().zip(raws) {
            let redirect = redirection(&raw, &master.0);
            let follows = progress.redirected[i] + 1 < PASSES;
            match redirect {
                Some(Redirect::Moved(slot, to)) if follows => {
                    progress.redirected[i] += 1;
                    self.map.moved(slot, to.clone());
                    self.stale = true;
                    step.next.push((i, Some(to), false));
                }
                Some(Redirect::Ask(to)) if follows => {
                    progress.redirected[i] += 1;
                    step.next.push((i, Some(to), true));
                }
                // The keys are split between the two ends of a migration:
                // the same master again, `ASKING` again if it was asked so
                // (an importing master answers `MOVED` back without it).
                Some(Redirect::TryAgain) if progress.retries(i, follows) => {
                    if progress.retry_until[i].is_none() {
                        progress.redirected[i] += 1;
                    }
                    step.again = true;
                    step.next.push((i, Some(master.clone()), asking));
                }
                _ => {
                    if let Raw::Failed(failure) = &raw
                        && failure.kind() == FailureKind::Connection
                    {
                        step.unreachable.push((i, master.clone()));
                    }
                    let answer = link.interpret(&parts[i].req, raw);
                    if answer.as_ref().is_err_and(|f| !f.kind().is_admission()) {
                        failed = true;
                        self.stale = true;
                    }
                    progress.answers[i] = Some(answer);
                }
            }
        }
        link.shared().note_batch(failed);
    }

    /// Reads the map again for parts whose master could not be sent them
    /// (it may have been failed over), and sends each to the master that
    /// serves its slot now, if another. (Not after a timeout: the request
    /// may have run there.)
    fn reroute(
        &mut self,
        parts: &[Part],
        now: Instant,
        unreachable: Vec<(usize, Master)>,
        answers: &mut [Option<Answer>],
        next: &mut Vec<Route>,
    ) {
        let until = unreachable
            .iter()
            .map(|(i, _)| parts[*i].req.expires)
            .max()
            .unwrap_or(now);
        let timeout = unreachable
            .iter()
            .map(|(i, _)| parts[*i].req.timeout.value)
            .max()
            .unwrap_or_default();
        self.refresh(timeout, until.min(Instant::now() + timeout), false);
        for (i, was) in unreachable {
            if let Some(now) = self.map.master(parts[i].slot).filter(|m| **m != was) {
                answers[i] = None;
                next.push((i, Some(now.clone()), false));
            }
        }
    }

    /// A part for a master that did not answer in time lately, failed at
    /// once until `until` (see [`SILENT_FOR`]).
    fn silenced(&self, part: &Part, master: &Master, until: Instant, now: Instant) -> NodeFailure {
        NodeFailure::timed_out(
            self.shared.address.clone(),
            part.req.timeout.value,
            format!(
                "master {}:{} of the cluster did not answer in time; it is asked again in {}",
                master.0,
                master.1,
                crate::human::Human(until.saturating_duration_since(now))
            ),
        )
    }

    /// A part still redirected when its caller stopped waiting (or after
    /// [`PASSES`] redirections), or still refused with `TRYAGAIN` after one
    /// per-node timeout.
    fn gave_up(&self, part: &Part) -> NodeFailure {
        NodeFailure::timed_out(
            self.shared.address.clone(),
            part.req.timeout.value,
            "redirected by the cluster until its deadline passed",
        )
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
}

/// A master no link could be made for.
fn unreachable_master(node: &Arc<str>, master: &Master) -> NodeFailure {
    NodeFailure::new(
        node.clone(),
        FailureKind::Connection,
        format!(
            "master {}:{} of the cluster could not be reached",
            master.0, master.1
        ),
    )
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
        let parts: Vec<Part> = batch
            .iter()
            .enumerate()
            .flat_map(|(of, req)| split(of, req))
            .collect();
        // A slot no master serves in the map read last: the cluster may
        // serve it by now (one still forming, slots added since).
        if parts.iter().any(|p| self.map.master(p.slot).is_none()) {
            self.stale = true;
        }
        self.refresh(timeout, until.min(Instant::now() + timeout), false);
        let mut answers = self.exchange(&parts).into_iter();
        let mut at = 0;
        batch
            .iter()
            .enumerate()
            .map(|(of, _)| {
                let count = parts[at..].iter().take_while(|p| p.of == of).count();
                at += count;
                combine(&self.shared.address, answers.by_ref().take(count).collect())
            })
            .collect()
    }
}

/// Until when each part's `TRYAGAIN` is sent again: for as long as its
/// caller waits (one per-node timeout from `started`, never past its
/// deadline); `None` for one no caller waits for, sent again only as a
/// redirection is followed, so that it does not hold up the batch's other
/// answers.
fn retry_until(parts: &[Part], started: Instant) -> Vec<Option<Instant>> {
    parts
        .iter()
        .map(|p| {
            p.req
                .awaited
                .then(|| p.req.expires.min(started + p.req.timeout.value))
        })
        .collect()
}

/// Keeps `master` from requests for [`SILENT_FOR`] of its timeouts when
/// one of its `raws` to `batch` timed out, or lets it be asked again when
/// none did.
fn note_silence(
    silent: &mut HashMap<Master, Instant>,
    master: &Master,
    batch: &[&Request],
    raws: &[Raw],
) {
    let timed_out = raws
        .iter()
        .any(|raw| matches!(raw, Raw::Failed(f) if f.kind() == FailureKind::Timeout));
    if timed_out {
        let timeout = batch
            .iter()
            .map(|r| r.timeout.value)
            .max()
            .unwrap_or_default();
        let quiet = timeout.saturating_mul(SILENT_FOR).max(REFRESH_GAP);
        silent.insert(master.clone(), Instant::now() + quiet);
    } else {
        silent.remove(master);
    }
}

/// What a reply says to do instead of answering.
enum Redirect {
    Moved(u16, Master),
    Ask(Master),
    TryAgain,
}

/// The redirection `raw` asks for, if any; `asked` is the host of the
/// master that answered (a redirection to `:port` means that host).
fn redirection(raw: &Raw, asked: &str) -> Option<Redirect> {
    let Raw::Reply(redis::Value::ServerError(err)) = raw else {
        return None;
    };
    let target = || {
        let mut words = err.details()?.split_whitespace();
        let slot = words.next()?.parse::<u16>().ok()?;
        let (host, port) = words.next()?.rsplit_once(':')?;
        let host = if host.is_empty() { asked } else { host };
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
    let whole = |slot| {
        vec![Part {
            of,
            req: req.clone(),
            slot,
        }]
    };
    let Kind::Lock(keys) = &req.kind else {
        // Every key of any other kind lives in its name's slot.
        return whole(Layout::slot(req.kind.names().next().unwrap_or("")));
    };
    let first = Layout::slot(keys.first().map_or("", |k| k));
    let splits = matches!(
        req.op,
        Op::Acquire { .. } | Op::AcquireFenced { .. } | Op::Extend { .. } | Op::Release { .. }
    );
    if !splits || keys.iter().all(|k| Layout::slot(k) == first) {
        return whole(first);
    }
    let mut slots: Vec<(u16, Vec<Arc<str>>)> = Vec::new();
    for key in keys.iter() {
        let s = Layout::slot(key);
        match slots.iter_mut().find(|(t, _)| *t == s) {
            Some((_, keys)) => keys.push(key.clone()),
            None => slots.push((s, vec![key.clone()])),
        }
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(n, (slot, keys))| {
            let mut part = req.part(keys.into());
            if n > 0 {
                part.queue = None;
            }
            Part {
                of,
                req: part,
                slot,
            }
        })
        .collect()
}

/// One request's answer from its parts' (in [`split`]'s order): yes only
/// if every part's is; a failure if any part failed; with the largest
/// fence value any part reported, the holder a refusing part named, and
/// the queue's word from any part.
fn combine(node: &Arc<str>, parts: Vec<Answer>) -> Answer {
    if let Some(failure) = parts.iter().find_map(|a| a.as_ref().err()) {
        return Err(failure.clone());
    }
    let votes: Vec<Vote> = parts.into_iter().filter_map(Result::ok).collect();
    let Some(mut vote) = votes.first().cloned() else {
        return Err(NodeFailure::new(
            node.clone(),
            FailureKind::Server,
            "no answer for this request",
        ));
    };
    if votes.len() > 1 {
        // A part held by another outweighs a part refused for a stale
        // token: a larger token cannot win a key someone holds.
        let held = votes.iter().find(|v| !v.yes && v.fence.is_none());
        vote.yes = votes.iter().all(|v| v.yes);
        vote.fence = match held {
            Some(_) => None,
            None => votes.iter().filter_map(|v| v.fence).max(),
        };
        vote.queued = votes.iter().any(|v| v.queued);
        vote.holder = held
            .or_else(|| votes.iter().find(|v| !v.yes))
            .and_then(|v| v.holder);
    }
    Ok(vote)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::NodeTimeout;

    fn req(op: Op, keys: &[&str], queue: Option<&str>) -> Request {
        let expires = Instant::now() + Duration::from_secs(5);
        let mut req = Request::lock(
            op,
            keys,
            NodeTimeout::fixed(Duration::from_millis(50)),
            expires,
        );
        req.queue = queue.map(Arc::from);
        req
    }

    fn keys(part: &Part) -> Vec<&str> {
        part.req.keys().iter().map(|k| &**k).collect()
    }

    #[test]
    fn a_lock_on_several_slots_goes_as_one_part_per_slot() {
        let acquire = Op::Acquire { ttl_ms: 1000 };
        // `{a}x` and `{a}y` share a slot; `b` and `c` have their own.
        let r = req(acquire.clone(), &["{a}x", "b", "{a}y", "c"], Some("me"));
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
        assert_eq!(
            split(0, &req(acquire.clone(), &["{a}x", "{a}y"], None)).len(),
            1
        );
        assert_eq!(split(0, &req(Op::Leave, &["b", "c"], Some("me"))).len(), 1);
    }

    #[test]
    fn the_node_says_yes_only_if_every_slot_does() {
        let node: Arc<str> = Arc::from("cluster:n");
        let all_yes = combine(&node, vec![Ok(Vote::YES), Ok(Vote::YES), Ok(Vote::YES)]);
        assert!(all_yes.unwrap().yes);
        let held = Vote {
            holder: Some(9),
            ..Vote::NO
        };
        let vote = combine(&node, vec![Ok(Vote::YES), Ok(held), Ok(Vote::YES)]).unwrap();
        assert!(!vote.yes);
        assert_eq!(vote.holder, Some(9), "who holds it, from the part refused");
        let failed = NodeFailure::new(Arc::from("m"), FailureKind::Timeout, "slow");
        let answer = combine(&node, vec![Ok(Vote::YES), Err(failed), Ok(Vote::NO)]);
        assert_eq!(answer.unwrap_err().kind(), FailureKind::Timeout);
        let stale = combine(&node, vec![Ok(Vote::stale(7)), Ok(Vote::stale(9))]);
        assert_eq!(stale.unwrap().fence, Some(9), "the largest fence value");
        // Held on one slot, stale on another: held (a `Busy`, not a
        // `NoQuorum` after a stale retry that cannot win).
        let held_and_stale = combine(&node, vec![Ok(Vote::stale(7)), Ok(Vote::held_by(b"x"))]);
        let vote = held_and_stale.unwrap();
        assert!(!vote.yes);
        assert_eq!(vote.fence, None, "held, not stale");
        assert!(vote.holder.is_some());
        let queued = Vote {
            queued: true,
            ..Vote::NO
        };
        assert!(
            combine(&node, vec![Ok(queued), Ok(Vote::YES)])
                .unwrap()
                .queued
        );
        assert!(combine(&node, Vec::new()).is_err());
    }

    #[test]
    fn redirections_are_read_from_the_reply() {
        let reply = |line: &str| {
            let value = redis::parse_redis_value(format!("-{line}\r\n").as_bytes());
            Raw::Reply(value.expect("an error reply"))
        };
        let at = |line: &str| redirection(&reply(line), "10.0.0.1");
        assert!(matches!(
            at("MOVED 3999 127.0.0.1:6381"),
            Some(Redirect::Moved(3999, (ref h, 6381))) if h == "127.0.0.1"
        ));
        assert!(matches!(
            at("ASK 3999 ::1:6381"),
            Some(Redirect::Ask((ref h, 6381))) if h == "::1"
        ));
        // Redis 7: an endpoint it does not know is the one that answered.
        assert!(matches!(
            at("MOVED 3999 :6380"),
            Some(Redirect::Moved(3999, (ref h, 6380))) if h == "10.0.0.1"
        ));
        assert!(matches!(at("TRYAGAIN x"), Some(Redirect::TryAgain)));
        assert!(at("MOVED nonsense").is_none());
        assert!(at("ERR boom").is_none());
    }
}
