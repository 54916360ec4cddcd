//! Acquisition: one round (`SET NX PX` on every node — for several resources
//! one all-or-nothing script per node —, a quorum within the validity) and
//! the retry policy around it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::acquisition::{Acquisition, Failed, Next, Pacing, Patience, Route};
use super::handoff::{Ticket, Woken};
use super::lease::Lease;
use super::session::Core;
use super::slots::Slots;
use super::verdict::{answer_by, millis, no_quorum};
use crate::algorithm::{Outcome, Verdict, Vote};
use crate::error::{Error, Wanted};
use crate::metrics;
use crate::transport::{
    Keys, Kind, MAX_PERMITS, OWN_KEYS, Op, PendingRound, QUEUE_ALIVE, RESERVED, Request, Role,
};

/// The most resources one lock may hold at once.
pub(crate) const MAX_RESOURCES: usize = 128;

/// What a caller asks to acquire, before it is checked: [`Core::plan`]
/// turns it into the [`Kind`] its rounds ask for.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// Every one of these resources (all or none).
    Resources(Keys),
    /// One permit of the semaphore `name`.
    Semaphore { name: Arc<str>, permits: u32 },
    /// The reader-writer lock `name`, as a reader or as its writer.
    Rw { name: Arc<str>, role: Role },
    /// The leadership of the election `name`: its lock key, always fenced.
    Election { name: Arc<str> },
}

impl Target {
    /// Checks the names and numbers asked for, or a `Config` error.
    pub(crate) fn check(&self) -> Result<(), Error> {
        match self {
            Target::Resources(resources) => checked_keys(resources),
            Target::Semaphore { name, permits } => checked_semaphore(name, *permits),
            Target::Rw { name, .. } if name.is_empty() => Err(Error::argument(
                "the lock name is empty; name what you lock",
            )),
            Target::Rw { .. } => Ok(()),
            Target::Election { name } => checked_election(name),
        }
    }

    /// The kind of hold a round asks for: a semaphore's `slot`, a writer
    /// that `waits` (marks that it waits when readers refuse it).
    pub(super) fn kind(self, slot: u32, waits: bool) -> Kind {
        match self {
            Target::Resources(resources) => Kind::Lock(resources),
            Target::Semaphore { name, permits } => Kind::Permit {
                semaphore: name,
                slot,
                permits,
            },
            Target::Rw {
                name,
                role: Role::Read,
            } => Kind::Read { lock: name },
            Target::Rw {
                name,
                role: Role::Write,
            } => Kind::Write { lock: name, waits },
            Target::Election { name } => Kind::Leadership { election: name },
        }
    }

    /// What a `Busy` error says was asked for.
    fn wanted(&self) -> Wanted {
        match self {
            Target::Resources(_) => Wanted::Lock,
            Target::Semaphore { .. } => Wanted::Permit,
            Target::Rw {
                role: Role::Read, ..
            } => Wanted::Read,
            Target::Rw {
                role: Role::Write, ..
            } => Wanted::Write,
            Target::Election { .. } => Wanted::Leadership,
        }
    }
}

/// One round's request, as the call's state says.
struct Round<'a> {
    kind: &'a Kind,
    name: &'a Arc<str>,
    ttl: Duration,
    route: Route,
    /// In the gate node's queue as this member (`None`: this client keeps
    /// no queues; `""`: not waiting).
    member: Option<Arc<str>>,
    /// The largest fence value the nodes reported so far (0: none).
    seen: u64,
}

/// A round on its way.
struct Sent {
    pending: PendingRound,
    /// When to stop waiting for its answers.
    by: Instant,
    /// What its keys hold (see `protocol::token`).
    token: Arc<str>,
    /// The fencing token it proposed.
    proposed: Option<u64>,
}

/// What a call asked for, as its rounds and errors name it.
struct Asked {
    /// The resource, or the resources joined by `, `.
    name: Arc<str>,
    wanted: Wanted,
    /// The TTL, in whole milliseconds.
    ttl: Duration,
}

impl Asked {
    /// The call's next round; `ticket`: its place in the gate node's queue.
    fn round<'a>(&'a self, call: &'a mut Acquisition, ticket: Option<&Ticket<'_>>) -> Round<'a> {
        let (route, in_queue) = call.begin_round();
        let member = in_queue.then(|| ticket.map_or_else(|| Arc::from(""), |t| t.member().clone()));
        Round {
            kind: call.kind(),
            name: &self.name,
            ttl: self.ttl,
            route,
            member,
            seen: call.fence_seen(),
        }
    }
}

/// Why a call ended without a lease.
enum Ending {
    Shutdown,
    Cancelled,
    /// These nodes' quickest round trip leaves the TTL no chance.
    TooSlow(Duration),
    /// The last round's failure, after this many tries.
    GaveUp(Failed, u32),
}

/// The caller's error for a call that gave up after `tries`; for `Busy`,
/// `busy` says what was asked for and whether a guard of this client holds
/// it.
fn into_error(failed: Failed, resource: &str, tries: u32, busy: (Wanted, bool)) -> Error {
    match failed {
        Failed::Stale { then, .. } => into_error(*then, resource, tries, busy),
        Failed::Busy { .. } => Error::Busy {
            resource: resource.to_owned(),
            attempts: tries,
            wanted: busy.0,
            held_here: busy.1,
        },
        Failed::NoQuorum { outcome, .. } => no_quorum(resource, *outcome),
        Failed::TooSlow { elapsed, ttl } => Error::TooSlow {
            resource: resource.to_owned(),
            elapsed,
            ttl,
        },
    }
}

impl Core {
    /// The tests' shorthand: [`acquire_target`](Self::acquire_target) of
    /// a lock on every one of `resources`.
    #[cfg(test)]
    pub(crate) fn acquire(
        &self,
        resources: &[&str],
        ttl: Duration,
        patience: Patience,
    ) -> Result<Arc<Lease>, Error> {
        let keys = resources.iter().map(|r| Arc::from(*r)).collect();
        self.acquire_target(Target::Resources(keys), ttl, patience)
    }

    /// Acquires `target` for `ttl` (a lock: every one of its resources, or
    /// none), retrying as `patience` allows.
    ///
    /// The first round is a plain `SET NX` on every node. A caller that may
    /// retry and finds the resource held then queues on the first
    /// resource's gate node (see `transport/protocol/scripts/`) with a round there,
    /// and the node wakes it when its turn comes. Once queued it asks the
    /// gate node first, and between rounds it sleeps until woken, its retry
    /// is due, the queue refresh (which keeps its place alive) or its
    /// deadline. Only a round made because its retry was due or a release
    /// woke it counts against the retries; the round that joins the queue
    /// and those that only keep the place do not.
    ///
    /// A semaphore's round tries one of its slots; a busy one goes on at
    /// once with the slot the nodes report free on the most nodes, until
    /// none is left (see `slots.rs`), and only then waits or gives up.
    ///
    /// The lease is registered for a shutdown to release; one won as the
    /// client shuts down is released at once (`Shutdown`).
    pub(crate) fn acquire_target(
        &self,
        target: Target,
        ttl: Duration,
        patience: Patience,
    ) -> Result<Arc<Lease>, Error> {
        let _busy = self.enter()?;
        let lease = Arc::new(self.rounds(target, ttl, patience)?);
        if self.adopt(&lease) {
            Ok(lease)
        } else {
            lease.abandon(self.nodes());
            Err(Error::Shutdown)
        }
    }

    /// The rounds of an acquisition, until one wins or the patience ends:
    /// [`Acquisition`] decides what follows each failed round.
    fn rounds(&self, target: Target, ttl: Duration, patience: Patience) -> Result<Lease, Error> {
        let (mut call, asked) = self.plan(target, ttl, patience)?;
        let started = metrics::Started::now();
        if call.patience().cancelled() {
            metrics::acquired(metrics::Acquired::Cancelled, 0, &started);
            return Err(Error::Cancelled {
                resource: asked.name.to_string(),
            });
        }
        // A caller that may retry sleeps on a ticket between rounds; with
        // queues on, the ticket is also its place in the gate node's queue.
        let gate = self.nodes().transport().gate_index(call.kind());
        let mut ticket = call
            .patience()
            .waits()
            .then(|| self.nodes().waiters().enter(gate));
        // After this client's release woke a waiter, it queues behind.
        let gate_name = call.kind().gate_name().into_owned();
        call.queue_behind(|| self.nodes().waiters().yields(&gate_name));
        let mut watch = None;
        loop {
            let end = |ending, call: &Acquisition, ticket: Option<&Ticket<'_>>| {
                Err(self.end(ending, call, &asked, ticket, &started))
            };
            if self.is_closed() {
                // Woken by the shutdown (or shut between rounds).
                return end(Ending::Shutdown, &call, ticket.as_ref());
            }
            let round = self.attempt(&asked.round(&mut call, ticket.as_ref()));
            if call.patience().cancelled() {
                // What a round took as it was cancelled is released like
                // the partial lock of any failed round.
                if let Ok(lease) = round {
                    lease.abandon(self.nodes());
                }
                return end(Ending::Cancelled, &call, ticket.as_ref());
            }
            let failed = match round {
                Ok(lease) => {
                    let attempts = call.count().attempts;
                    metrics::acquired(metrics::Acquired::Ok, attempts, &started);
                    return Ok(lease);
                }
                Err(failed) => failed,
            };
            let next = call.after(failed, || self.nodes().hopeless(asked.ttl));
            if call.watching() {
                // Held (or queued): hear the gate node when the turn comes.
                watch.get_or_insert_with(|| self.nodes().transport().watch());
            }
            let ending = match next {
                Next::Round => None,
                Next::Pause(until) => {
                    std::thread::sleep(until.saturating_duration_since(Instant::now()));
                    None
                }
                Next::Wait(until) => {
                    let woken = match &mut ticket {
                        Some(ticket) => ticket.wait(until, call.patience().cancel.as_ref()),
                        None => Woken::TimedOut,
                    };
                    call.woken(woken);
                    (woken == Woken::Cancelled).then_some(Ending::Cancelled)
                }
                Next::Hopeless(round_trip) => Some(Ending::TooSlow(round_trip)),
                Next::GiveUp(failed, tries) => Some(Ending::GaveUp(failed, tries)),
            };
            if let Some(ending) = ending {
                return end(ending, &call, ticket.as_ref());
            }
        }
    }

    /// Ends a call that did not win: leaves the gate node's queue, counts
    /// it, and says why.
    fn end(
        &self,
        ending: Ending,
        call: &Acquisition,
        asked: &Asked,
        ticket: Option<&Ticket<'_>>,
        started: &metrics::Started,
    ) -> Error {
        self.leave(call.kind(), ticket);
        let attempts = call.count().attempts;
        let resource = asked.name.to_string();
        match ending {
            Ending::Shutdown => {
                metrics::acquired(metrics::Acquired::Cancelled, attempts, started);
                Error::Shutdown
            }
            Ending::Cancelled => {
                metrics::acquired(metrics::Acquired::Cancelled, attempts, started);
                Error::Cancelled { resource }
            }
            Ending::TooSlow(elapsed) => {
                metrics::acquired(metrics::Acquired::TooSlow, attempts, started);
                let ttl = asked.ttl;
                Error::TooSlow {
                    resource,
                    elapsed,
                    ttl,
                }
            }
            Ending::GaveUp(failed, tries) => {
                metrics::acquired(failed.kind(), attempts, started);
                let kind = call.kind();
                let held_here =
                    failed.is_busy() && self.holds(|lease| kind.waits_for(lease.kind()));
                into_error(failed, &resource, tries, (asked.wanted, held_here))
            }
        }
    }

    /// Checks what `target` asks for and sets up its call: the call (with
    /// the [`Kind`] its first round asks for), and what errors say was
    /// asked.
    fn plan(
        &self,
        target: Target,
        ttl: Duration,
        patience: Patience,
    ) -> Result<(Acquisition, Asked), Error> {
        let wanted = target.wanted();
        target.check()?;
        // A semaphore's call walks its slots, from the one it starts at.
        let slots = match &target {
            Target::Semaphore { permits, .. } => {
                Some(Slots::new(*permits, self.node_count(), self.quorum()))
            }
            _ => None,
        };
        let slot = slots.as_ref().map_or(0, Slots::current);
        let kind = target.kind(slot, patience.waits());
        if let Some(problem) = self.nodes().transport().key_problem(&kind) {
            return Err(Error::argument(problem));
        }
        let ttl = self.nodes().whole_ttl(ttl)?;
        let pacing = Pacing {
            retry: (self.settings().retry_delay, self.settings().retry_jitter),
            queue_refresh: self.settings().queue_refresh,
            notifications: self.settings().notifications,
        };
        let name = match &kind {
            Kind::Lock(keys) => Arc::from(display_name(keys)),
            _ => kind.names().next().map_or_else(|| Arc::from(""), Arc::from),
        };
        let call = Acquisition::new(kind, slots, (patience, pacing), ttl);
        Ok((call, Asked { name, wanted, ttl }))
    }

    /// Takes `ticket`'s waiter out of its gate node's queue (without
    /// waiting); the node wakes the next waiter if the resource is free.
    fn leave(&self, kind: &Kind, ticket: Option<&Ticket<'_>>) {
        if let Some(ticket) = ticket
            && self.settings().notifications
        {
            self.leave_as(kind, ticket.member().clone());
        }
    }

    /// Takes `member` out of the gate node's queue for `kind` (unawaited).
    fn leave_as(&self, kind: &Kind, member: Arc<str>) {
        let ttl = Duration::from_secs(1);
        // Sent however long the gate node's connection is busy: until the
        // member would have dropped out of the queue by itself.
        let expires = Instant::now() + QUEUE_ALIVE;
        let timeout = self.nodes().node_timeout(ttl);
        let mut request = Request::new(Op::Leave, kind.clone(), Arc::from(""), timeout, expires);
        request.queue = Some(member);
        self.nodes().transport().broadcast(request, &[]);
    }

    /// One acquisition round, sent as `round.route` says. On failure the
    /// partial lock is released everywhere (without waiting).
    fn attempt(&self, round: &Round<'_>) -> Result<Lease, Failed> {
        let start = Instant::now();
        let sent = self.send_round(round, start)?;
        let token = sent.token.clone();
        let (outcome, gate) = sent.pending.collect_with_gate(sent.by);
        // In a round that takes part in the gate node's queue, its vote is
        // awaited until the deadline: a late "others queued first" still
        // outweighs the others.
        let gate = gate.settled();
        metrics::round(metrics::RoundOp::Acquire, start);
        let unsent = outcome.unsent.clone();
        let failed = match self.judge_round(round, outcome, gate, start) {
            Ok(voters) => {
                log::debug!(
                    "redlock: acquired {:?} in {:?}",
                    round.kind,
                    start.elapsed()
                );
                return Ok(self.new_lease(round, token, start, sent.proposed, unsent, voters));
            }
            Err(failed) => failed,
        };
        // Where the gate node granted it, this release also wakes the next
        // waiter — unless a majority refused it: then the resource is held
        // elsewhere, and a queued waiter keeps its turn (see `clean_up`).
        let keep = (round.member.clone())
            .filter(|_| matches!(failed, Failed::Busy { .. } | Failed::Stale { .. }));
        self.nodes()
            .clean_up(round.kind, &token, (start, round.ttl), keep, &unsent);
        log::debug!("redlock: round for {:?} failed", round.kind);
        Err(failed)
    }

    /// Builds the round's request and sends it as its route says; the gate
    /// node's refusal of a gated round is `Busy` at once.
    fn send_round(&self, round: &Round<'_>, start: Instant) -> Result<Sent, Failed> {
        let timeout = self.nodes().node_timeout(round.ttl);
        let by = answer_by(start, timeout, None);
        let ttl_ms = millis(round.ttl);
        let fenced = round.kind.fenced(self.settings().fencing);
        let proposed = fenced.then(|| self.propose_fence(round.seen));
        let op = match proposed {
            Some(proposed) => Op::AcquireFenced {
                ttl_ms,
                proposed,
                idle_ms: millis(self.settings().fencing_idle),
            },
            None => Op::Acquire { ttl_ms },
        };
        let token = crate::transport::new_token(proposed);
        let mut request = Request::new(op, round.kind.clone(), token.clone(), timeout, by);
        request.queue = round.member.clone();
        let pending = match round.route {
            // Nothing was set anywhere, and a waiter keeps its place.
            Route::Gated => self
                .nodes()
                .transport()
                .start_gated_round(request, by)
                .ok_or_else(Failed::behind)?,
            Route::Called => self.nodes().transport().start_called_round(request, by),
            Route::Plain => self.nodes().transport().start_round(request),
        };
        Ok(Sent {
            pending,
            by,
            token,
            proposed,
        })
    }

    /// A round's result from its outcome and the gate node's vote: the
    /// nodes that confirmed it, or why it failed.
    fn judge_round(
        &self,
        round: &Round<'_>,
        outcome: Outcome,
        gate: Option<Vote>,
        start: Instant,
    ) -> Result<Vec<usize>, Failed> {
        let valid_until = self.nodes().valid_until(start, round.ttl);
        // Less what a voter's clock jump learnt during the round took.
        let cut_until = self.nodes().transport().clocks().holds_until(
            &outcome.voters,
            start,
            valid_until,
            self.quorum(),
        );
        // The gate node's word that others queued first outweighs a
        // majority of the other nodes: the resource is theirs next.
        let behind = gate.as_ref().is_some_and(|vote| vote.queued && !vote.yes);
        // Some nodes refused the proposed token as stale: unless the others'
        // refusals (or failures that will not heal) alone rule out a
        // majority, a round with a larger token may well be granted (never
        // behind others queued first: that would take them ahead).
        let stale = (!behind
            && matches!(outcome.verdict, Verdict::Refused | Verdict::Unreachable)
            && outcome.stale > 0
            && !outcome.permanent
            && outcome.confirmed + outcome.stale + outcome.failures.len() >= outcome.quorum)
            .then(|| outcome.fence.unwrap_or(0));
        let failed = match outcome.verdict {
            Verdict::Confirmed if behind => Failed::behind(),
            Verdict::Confirmed if Instant::now() < cut_until => {
                if let Some(member) = round.member.clone().filter(|m| !m.is_empty())
                    && !gate.as_ref().is_some_and(|vote| vote.yes)
                {
                    // Won without the gate node: still queued there.
                    self.leave_as(round.kind, member);
                }
                return Ok(outcome.voters);
            }
            Verdict::Confirmed => Failed::TooSlow {
                elapsed: start.elapsed(),
                ttl: round.ttl,
            },
            // Held: a majority answered (or the refusals alone rule it out).
            _ if outcome.held() => Failed::Busy {
                granted: gate.is_some_and(|vote| vote.yes),
                split: outcome.split,
                behind,
                reports: outcome.slots,
            },
            Verdict::Refused | Verdict::Unreachable => Failed::NoQuorum {
                permanent: outcome.permanent,
                outcome: Box::new(outcome),
            },
        };
        Err(match stale {
            Some(seen) => Failed::Stale {
                seen,
                then: Box::new(failed),
            },
            None => failed,
        })
    }

    /// The lease a won round holds.
    fn new_lease(
        &self,
        round: &Round<'_>,
        token: Arc<str>,
        start: Instant,
        proposed: Option<u64>,
        unsent: Vec<usize>,
        voters: Vec<usize>,
    ) -> Lease {
        let ttl = round.ttl;
        let valid_until = self.nodes().valid_until(start, ttl);
        let gone_by = self.nodes().keys_gone_by(start, ttl);
        let (kind, name) = (round.kind.clone(), round.name.clone());
        let lease = Lease::new(kind, name, token, ttl, valid_until, gone_by);
        let clocks = self.nodes().transport().clocks().clone();
        lease.with_fence(proposed).with_unsent(unsent).with_voters(
            clocks,
            self.quorum(),
            voters,
            start,
        )
    }

    /// The fencing token an acquisition proposes next: one more than the
    /// largest fence value the nodes reported to it (`seen`, from a round
    /// they refused as stale), never below the wall clock in
    /// microseconds (with the floor on), so that tokens keep growing after
    /// a resource's fence values expired or a node lost them. A node grants
    /// a fenced acquisition only above every fence value it stores, and
    /// stores the token with the grant: an acquisition that returned had it
    /// stored on a majority, and any later one's majority meets that
    /// majority in a node that grants only a larger token.
    fn propose_fence(&self, seen: u64) -> u64 {
        let floor = if self.settings().fencing_floor {
            wall_clock_micros()
        } else {
            0
        };
        floor.max(seen.saturating_add(1))
    }
}

/// Microseconds since the Unix epoch (0 for a clock before it): the floor
/// under every fencing token, so that tokens keep growing after a
/// resource's fence values expired or a node lost them.
fn wall_clock_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The resources as keys, or a `Config` error: none, an empty name, a
/// duplicate, or more than [`MAX_RESOURCES`].
fn checked_keys(keys: &Keys) -> Result<(), Error> {
    let resources: Vec<&str> = keys.iter().map(|k| &**k).collect();
    if let Some(name) = resources.iter().find(|r| reserved(r)) {
        return Err(Error::argument(format!(
            "the resource {name:?} would be one of the client's own keys: names starting \
             with {} are reserved; choose another name",
            RESERVED
                .iter()
                .chain(&OWN_KEYS)
                .map(|prefix| format!("`{prefix}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    match &resources[..] {
        [] => Err(Error::argument(
            "no resources given; name at least one resource to lock",
        )),
        [""] => Err(Error::argument(
            "the resource name is empty; name what you lock",
        )),
        [_] => Ok(()),
        _ if resources.len() > MAX_RESOURCES => Err(Error::argument(format!(
            "{} resources given; one lock holds at most {MAX_RESOURCES}",
            resources.len()
        ))),
        _ => {
            let mut seen = std::collections::HashSet::with_capacity(resources.len());
            for (index, resource) in resources.iter().enumerate() {
                if resource.is_empty() {
                    return Err(Error::argument(format!(
                        "resource #{index} has an empty name; name what you lock"
                    )));
                }
                if !seen.insert(*resource) {
                    return Err(Error::argument(format!(
                        "resource {resource:?} is listed twice; list each resource once"
                    )));
                }
            }
            Ok(())
        }
    }
}

/// The client's own keys, which no resource may be named after.
fn reserved(resource: &str) -> bool {
    RESERVED
        .iter()
        .chain(&OWN_KEYS)
        .any(|prefix| resource.starts_with(prefix))
}

/// An election's name, or a `Config` error.
pub(crate) fn checked_election(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::argument(
            "the election name is empty; name what is led",
        ));
    }
    Ok(())
}

/// A semaphore's name and number of permits, or a `Config` error.
fn checked_semaphore(name: &str, permits: u32) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::argument(
            "the semaphore name is empty; name what the permits limit",
        ));
    }
    if permits == 0 {
        return Err(Error::argument(
            "a semaphore of 0 permits admits nobody; give it at least 1",
        ));
    }
    if permits > MAX_PERMITS {
        return Err(Error::argument(format!(
            "{permits} permits asked; a semaphore has at most {MAX_PERMITS}"
        )));
    }
    Ok(())
}

/// How errors name a lock: its resource, or its resources joined by `, `.
pub(crate) fn display_name(keys: &Keys) -> String {
    match &**keys {
        [one] => one.to_string(),
        many => many.iter().map(|k| &**k).collect::<Vec<_>>().join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> Keys {
        names.iter().map(|n| Arc::from(*n)).collect()
    }

    #[test]
    fn the_clients_own_key_names_are_refused_as_resources() {
        for name in [
            "redlock-fence:a",
            "redlock-queue:a",
            "redlock-alive:a",
            "redlock-sem:a#0",
            "redlock-rw:a#w",
            "redlock-elect:a#l",
            "redlock:admitted",
            "redlock:clock-jumped",
            "redlock:ttls",
        ] {
            let err = checked_keys(&keys(&[name])).unwrap_err().to_string();
            assert!(
                err.contains(&format!("{name:?}")),
                "{err} names the resource"
            );
            let prefix = RESERVED
                .iter()
                .chain(&OWN_KEYS)
                .find(|p| name.starts_with(*p))
                .unwrap();
            assert!(err.contains(&format!("`{prefix}`")), "{err} names {prefix}");
            assert!(checked_keys(&keys(&["ok", name])).is_err(), "{name}");
        }
        assert!(checked_keys(&keys(&["redlock-queue"])).is_ok());
        assert!(checked_keys(&keys(&["redlock:jobs"])).is_ok());
    }
}
