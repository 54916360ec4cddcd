//! Admission: whether a node's votes count toward quorums. Every lock,
//! semaphore, rw-lock and election is correct only if the nodes are
//! distinct servers whose keys vanish only by expiry, and a node that lost
//! data is not counted. The client checks what it can, here, from what the
//! node says about itself (`facts.rs`) on every connection and every
//! [`RECHECK`] on a live one; every batch asks [`Admission::refusal`]
//! before its votes count (releases always go through).
//!
//! A node counts only while:
//!
//! - **it speaks what we need**: Redis 7.0 or later, and `INFO` allowed
//!   (without it the client cannot tell which server it is);
//! - **its keys can only expire**: no memory limit, or `noeviction` —
//!   unless the user accepted eviction (`allow_eviction`);
//! - **no other node of this client reaches the same server** (one
//!   `run_id`): of two addresses that reach one server, the one listed
//!   first counts if both answered while the client started, else the one
//!   that reached it first; the other never does ([`Registry`]);
//! - **it is what its URL says**: a member of a Redis Cluster is listed as
//!   a cluster (`redis+cluster://`), not as one `redis://` server;
//! - **with the restart quarantine on, it cannot have lost acknowledged
//!   writes** within the period. A master *incarnation* replaced at a node
//!   (a restart changes the `run_id`, a promotion the `master_replid`) may
//!   have. So:
//!   - an incarnation replacing one this client saw waits the whole period
//!     from when the client noticed (only an operator's marker ends that);
//!   - one met for the first time is admitted by the marker ([`MARKER`],
//!     which replicates with the data and which a restart without
//!     persistence loses) when it names this very incarnation as admitted
//!     by an operator, or by a client whose period was at least ours; a
//!     marker naming another incarnation (its data came from there) or a
//!     shorter period means it waits the whole period; no marker (a new
//!     cluster, or a restart without data) admits it once its process has
//!     been up for the period;
//!   - once this client admits an incarnation it writes the marker for it,
//!     so that clients started later (after a failover, say) know;
//!   - only a connection to the incarnation last examined votes
//!     ([`Admission::refusal_for`]).
//!
//! The argument is in `docs/operations.md`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

use super::clock::{Clocks, FRESH, Judged, Reading, Step};
use super::facts::{self, CLOCK_MARKER, Facts, MARKER, Marker};
use super::in_use::{self, Announced, TTLS};
use crate::error::{FailureKind, NodeFailure};
use crate::human::Human;
use crate::metrics;

/// How often a live connection's node is asked again what it is (a
/// policy changed at run time, the marker written by another client),
/// when requests go to it.
pub(crate) const RECHECK: Duration = Duration::from_secs(5);

/// Added to every quarantine: `uptime_in_seconds` may be a second ahead.
const MARGIN: Duration = Duration::from_secs(1);

/// The least a round allows a node's clock to be ahead of the others':
/// NTP keeps servers within a few milliseconds of each other, more than a
/// short TTL's drift allowance (3 ms for 100 ms).
const ROUND_FLOOR: Duration = Duration::from_millis(5);

const REPLACED: &str = "another process since the last connection (restarted, or a replica \
                        promoted by a failover)";
const UNPROVEN: &str = "not admitted by any client with this quarantine yet, and its data may \
                        come from another process (restarted with its data, restored from a \
                        backup, or a promoted replica)";
const RESTARTED: &str = "restarted (or new)";

/// What the client asks of every node.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// The restart quarantine period, if on.
    pub(crate) quarantine: Option<Duration>,
    /// Admit nodes that may evict keys.
    pub(crate) allow_eviction: bool,
    /// How far a node's clock may be from the others' median, steadily.
    pub(crate) max_clock_offset: Duration,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            quarantine: None,
            allow_eviction: false,
            max_clock_offset: crate::settings::DEFAULT_MAX_CLOCK_OFFSET,
        }
    }
}

/// Which server each node of one client reached (by `run_id`), and which
/// nodes count now (for the metrics gauge).
#[derive(Debug)]
pub(crate) struct Registry {
    /// How many nodes the client lists (the metrics gauge counts these; a
    /// cluster's masters come after them).
    listed: usize,
    claims: Mutex<Claims>,
    clocks: Arc<Clocks>,
}

#[derive(Debug)]
struct Claims {
    /// Each node's address, then each cluster master's.
    addresses: Vec<Arc<str>>,
    /// Per entry, the listed node it belongs to: itself, or for a cluster
    /// master, its cluster node.
    owners: Vec<usize>,
    /// Per entry: the `run_id` it reached last, and when it first reached
    /// it: 0 while the client starts, else a sequence number.
    ids: Vec<Option<(String, u64)>>,
    /// The last sequence number given.
    next: u64,
    /// The client has started: a server's claims rank by arrival from now.
    started: bool,
    counting: Vec<bool>,
}

impl Claims {
    /// Who entry `index` is, for a message: a node, or a cluster node's
    /// master.
    fn who(&self, index: usize) -> String {
        let owner = self.owners[index];
        if owner == index {
            format!("node {}", self.addresses[index])
        } else {
            format!(
                "cluster node {} (master {})",
                self.addresses[owner], self.addresses[index]
            )
        }
    }
}

impl Registry {
    /// With the client's drift factor 0.01 (the unit tests').
    #[cfg(test)]
    pub(crate) fn new(addresses: Vec<Arc<str>>) -> Arc<Registry> {
        Registry::for_client(addresses, 0.01)
    }

    /// The registry of a client with `drift_factor` over the nodes at
    /// `addresses`.
    pub(crate) fn for_client(addresses: Vec<Arc<str>>, drift_factor: f64) -> Arc<Registry> {
        let n = addresses.len();
        Arc::new(Registry {
            listed: n,
            clocks: Arc::new(Clocks::new(n, drift_factor)),
            claims: Mutex::new(Claims {
                addresses,
                owners: (0..n).collect(),
                ids: vec![None; n],
                next: 0,
                started: false,
                counting: vec![false; n],
            }),
        })
    }

    /// A master, `address`, of the cluster listed as node `owner`: a server
    /// whose admission is its own (and which no other node or master may
    /// reach). Its index.
    pub(crate) fn add(&self, address: Arc<str>, owner: usize) -> usize {
        let mut claims = self.claims.lock();
        claims.addresses.push(address);
        claims.owners.push(owner);
        claims.ids.push(None);
        claims.counting.push(false);
        let index = claims.addresses.len() - 1;
        self.clocks.add(index, owner);
        index
    }

    /// The nodes' clocks.
    pub(crate) fn clocks(&self) -> &Arc<Clocks> {
        &self.clocks
    }

    /// A cluster's master `index` is no longer used (its link is gone): it
    /// claims no server until it is used again.
    pub(crate) fn forget(&self, index: usize) {
        self.claim(index, None);
    }

    /// The address of node (or master) `index`.
    fn address(&self, index: usize) -> Arc<str> {
        self.claims.lock().addresses[index].clone()
    }

    /// Whether entry `index` is a cluster's master (not a listed node).
    fn in_cluster(&self, index: usize) -> bool {
        index >= self.listed
    }

    /// The client has started (its first answers are in): from now on, of
    /// two entries that reach one server, the one that reached it first
    /// counts, so that an entry that counts (whose votes may be in a round
    /// under way) is never pushed aside.
    pub(crate) fn started(&self) {
        self.claims.lock().started = true;
    }

    /// Node `index` reached server `run_id` (`None`: it claims none).
    fn claim(&self, index: usize, run_id: Option<&str>) {
        let mut claims = self.claims.lock();
        if claims.ids[index].as_ref().map(|(r, _)| r.as_str()) == run_id {
            return;
        }
        let seq = if claims.started {
            claims.next += 1;
            claims.next
        } else {
            0
        };
        claims.ids[index] = run_id.map(|r| (r.to_owned(), seq));
    }

    /// The mistake, when another entry reached the server entry `index`
    /// reached and counts for it: of those that reached it while the
    /// client started, the one listed first (a cluster's masters in their
    /// cluster node's place), so that the same list counts the same address
    /// on every run; after that, the one that reached it first.
    fn duplicate(&self, index: usize) -> Option<String> {
        let claims = self.claims.lock();
        let (run_id, _) = claims.ids.get(index)?.as_ref()?;
        let rank = |j: usize| {
            let seq = claims.ids[j].as_ref().map_or(u64::MAX, |(_, seq)| *seq);
            (seq, claims.owners[j], j)
        };
        let first = (0..claims.ids.len())
            .filter(|&j| {
                claims.ids[j].as_ref().is_some_and(|(r, _)| r == run_id) && rank(j) < rank(index)
            })
            .min_by_key(|&j| rank(j))?;
        let (theirs, ours) = (claims.owners[first], claims.owners[index]);
        Some(if theirs != first && ours != index && theirs != ours {
            format!(
                "cluster nodes {} and {} reach the same Redis Cluster (the same masters): list \
                 each cluster once, its seeds in one redis+cluster:// URL",
                claims.addresses[theirs], claims.addresses[ours]
            )
        } else {
            format!(
                "{} and {} are the same Redis server (one run_id): list each server once, by \
                 one address",
                claims.who(first),
                claims.who(index)
            )
        })
    }

    /// Who entry `index` is, for a message.
    fn who(&self, index: usize) -> String {
        self.claims.lock().who(index)
    }

    /// Whether node `index` counts now (reachable and admitted).
    fn counting(&self, index: usize, counts: bool) {
        let mut claims = self.claims.lock();
        if claims.counting[index] != counts {
            claims.counting[index] = counts;
            if index < self.listed {
                metrics::node_admitted(counts);
            }
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        for &counts in &self.claims.get_mut().counting[..self.listed] {
            if counts {
                metrics::node_admitted(false);
            }
        }
    }
}

/// One node's admission, kept in its shared state.
#[derive(Debug)]
pub(crate) struct Admission {
    index: usize,
    address: Arc<str>,
    rules: Rules,
    registry: Arc<Registry>,
    /// The key of its marker: [`MARKER`], or on a cluster's master, one in
    /// a hash slot it serves (see [`Admission::set_marker`]).
    marker: Mutex<Arc<str>>,
    state: Mutex<State>,
    /// What this client last announced of its TTLs at the node.
    announced: Announced,
}

#[derive(Debug, Default)]
struct State {
    /// Why the node's facts refuse it (too old, evicts, unidentified).
    refused: Option<(FailureKind, String)>,
    /// Quarantined until then, and why.
    until: Option<(Instant, &'static str)>,
    /// The incarnation ([`Facts::identity`]) last identified at this node
    /// (kept when an examination cannot identify it).
    seen: Option<String>,
    /// What the last examination found (`None`: unidentified): only a
    /// connection to it may vote.
    current: Option<String>,
    /// The marker admits `seen` for our period (it said so, or we wrote it).
    marked: bool,
    /// A marker write for `seen` was tried (and failed): the next try waits
    /// for the next re-check.
    tried: bool,
    /// When the node last said what it is.
    examined: Option<Instant>,
    /// It takes another server's place (see [`Admission::succeeds`]).
    successor: bool,
    /// Its clock jumped ahead (this client saw it, or a jump marker on the
    /// node says a client did): out until then, and why.
    clock_until: Option<(Instant, String)>,
    /// Its clock is off the others' median by more than the steady bound:
    /// why (as first found, so that the log says it once).
    clock_off: Option<String>,
    /// Connected now (for the gauge).
    up: bool,
    /// What the log last said (with the quarantine's end): `None` while
    /// the node counts.
    said: Option<(FailureKind, String, Option<Instant>)>,
    /// The eviction accepted by the user was logged (once per client).
    said_eviction: bool,
    /// A failed marker write was logged.
    said_marker: bool,
    /// A refused announcement of the TTLs in use was logged.
    said_in_use: bool,
    /// What to log once the lock is released ([`Locked`]).
    to_say: Vec<(log::Level, String)>,
}

impl State {
    /// Logs `line` at `level` once the state is unlocked.
    fn say(&mut self, level: log::Level, line: String) {
        self.to_say.push((level, line));
    }
}

/// The state, locked. What was decided under the lock is logged once it is
/// released: the logger is the user's code, which may take its own locks
/// or ask the client for its nodes' health (which takes this one), so it
/// is never called under a lock of ours.
struct Locked<'a> {
    guard: Option<MutexGuard<'a, State>>,
}

impl std::ops::Deref for Locked<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        self.guard.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.guard.as_mut().expect("held until dropped")
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let said = self
            .guard
            .take()
            .map(|mut state| std::mem::take(&mut state.to_say));
        for (level, line) in said.into_iter().flatten() {
            log::log!(level, "{line}");
        }
    }
}

/// The incarnation a master said it is, as [`Admission::judge`] met it.
struct Incarnation {
    /// Its [`Facts::identity`].
    identity: String,
    /// The first this node showed.
    first: bool,
    /// It replaced the one seen here (or takes another server's place).
    replaced: bool,
}

/// Why a node does not count now.
struct Refusal {
    kind: FailureKind,
    why: String,
    /// A quarantine's end.
    until: Option<Instant>,
}

impl Admission {
    pub(crate) fn new(index: usize, rules: Rules, registry: Arc<Registry>) -> Self {
        Admission {
            index,
            address: registry.address(index),
            rules,
            registry,
            marker: Mutex::new(Arc::from(MARKER)),
            announced: Announced::default(),
            state: Mutex::new(State::default()),
        }
    }

    /// Its place in the client's registry: for a listed node, its place in
    /// the list.
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// The state, locked (see [`Locked`]).
    fn lock(&self) -> Locked<'_> {
        Locked {
            guard: Some(self.state.lock()),
        }
    }

    /// Keeps its marker at `key` from now on: a cluster's master keeps it in
    /// a hash slot it serves (it replicates with that slot's data, so a
    /// replica promoted in its place finds it), which changes when slots
    /// move. A marker written at the old key is written again at the new.
    /// Whether the key changed.
    pub(crate) fn set_marker(&self, key: String) -> bool {
        let mut marker = self.marker.lock();
        if **marker == *key {
            return false;
        }
        *marker = Arc::from(key);
        drop(marker);
        let mut state = self.lock();
        state.marked = false;
        state.tried = false;
        true
    }

    /// The clocks of the client's nodes.
    pub(crate) fn clocks(&self) -> &Clocks {
        self.registry.clocks()
    }

    /// The key of its marker now.
    fn marker(&self) -> Arc<str> {
        self.marker.lock().clone()
    }

    /// Takes the place of another server (a cluster's master that took
    /// over slots another served): the first incarnation examined counts
    /// as one that replaced a server this client saw, and so waits the
    /// whole quarantine (only an operator's marker ends it).
    ///
    /// Once examined, it is a quarantine from now (with the quarantine on):
    /// a master already known that takes over a lost master's slots.
    pub(crate) fn succeeds(&self) {
        let mut state = self.lock();
        if state.seen.is_none() {
            state.successor = true;
            return;
        }
        if let Some(period) = self.rules.quarantine {
            state.until = Instant::now()
                .checked_add(period + MARGIN)
                .map(|t| (t, REPLACED));
            state.marked = false;
            state.tried = false;
        }
    }

    /// A node of its own, with no rules (the fake nodes of unit tests).
    #[cfg(test)]
    pub(crate) fn standalone(address: &str) -> Self {
        Admission::new(0, Rules::default(), Registry::new(vec![address.into()]))
    }

    /// Decides from what the node said on a connection (`None`: it could
    /// not be identified). Returns the marker to write on that connection,
    /// if this client admits the incarnation and the marker does not say
    /// so yet.
    pub(crate) fn examined(&self, facts: Option<&Facts>) -> Option<String> {
        let now = Instant::now();
        let mut state = self.lock();
        state.examined = Some(now);
        state.current = facts.map(Facts::identity);
        let marker = match facts {
            None => {
                state.refused = Some((
                    FailureKind::Unsupported,
                    "did not say which server it is (INFO or TIME refused, an answer \
                     incomplete, or GET on redlock:admitted refused), so the client cannot tell \
                     whether it is listed twice, evicts keys, lost data or keeps time: allow \
                     +info, +time and +get (the ACL line in docs/operations.md)"
                        .to_owned(),
                ));
                None
            }
            Some(facts) => {
                let known = state.clock_until.as_ref().filter(|(u, _)| *u > now);
                if let Some((left, size)) = facts.clock_jumped
                    && let Some(until) = now.checked_add(left)
                {
                    if known.is_none() {
                        // News to this client: its leases that counted on
                        // the node lose the jump too.
                        self.registry.clocks().learnt(self.index, size);
                    }
                    // Another client's longer period (its marker made
                    // longer since) counts too; the marker's own jitter,
                    // read again every examination, is no news.
                    if known.is_none_or(|(u, _)| until > *u + MARGIN) {
                        let how = " (a client that saw it left redlock:clock-jumped on the node)";
                        self.clock_jumped(&mut state, until, size, how);
                    }
                }
                self.judge(&mut state, facts, now)
            }
        };
        let refusal = self.verdict(&state, now);
        self.news(&mut state, refusal.as_ref(), now);
        marker
    }

    /// [`examined`](Self::examined) for a node that said what it is.
    fn judge(&self, state: &mut State, facts: &Facts, now: Instant) -> Option<String> {
        let in_cluster = self.registry.in_cluster(self.index);
        // Listed in the wrong form, it claims no server: it must not
        // outrank the entry that reaches the server as listed.
        let listed_right = facts.cluster == in_cluster;
        self.registry
            .claim(self.index, listed_right.then_some(facts.run_id.as_str()));
        state.refused = self.refused_by(facts, in_cluster);
        self.say_eviction(state, facts);
        if !facts.master {
            // A replica (a plain URL to one, or a failover under way): its
            // data follows another server, and its writes are refused.
            state.refused = state.refused.take().or(Some((
                FailureKind::NotWritable,
                "a replica (role is not master): list masters, or a Sentinel service".to_owned(),
            )));
            return None;
        }
        let met = Self::meet(state, facts);
        let period = self.rules.quarantine?;
        Self::quarantine(state, facts, &met, period, now);
        // The same incarnation as before: a quarantine under way runs on.
        let admitted = state.until.is_none_or(|(until, _)| until <= now);
        if admitted && !state.marked {
            state.tried = true;
            return Some(Marker::client(&met.identity, period));
        }
        None
    }

    /// What in the facts keeps the node out whatever it serves (wrong
    /// cluster mode, too old, evicts keys unallowed), if anything.
    fn refused_by(&self, facts: &Facts, in_cluster: bool) -> Option<(FailureKind, String)> {
        if facts.cluster && !in_cluster {
            Some((
                FailureKind::Unsupported,
                "a member of a Redis Cluster (redis_mode:cluster) listed as one server: it \
                 serves only its own hash slots; list the whole cluster as one node, \
                 redis+cluster://host:port[,host:port…] (some of its masters)"
                    .to_owned(),
            ))
        } else if !facts.cluster && in_cluster {
            Some((
                FailureKind::Unsupported,
                "named as a master by the cluster's map, but not in cluster mode".to_owned(),
            ))
        } else if facts.too_old() {
            Some((
                FailureKind::Unsupported,
                format!(
                    "Redis {} is older than 7.0, which redlock-sync needs: upgrade it",
                    facts.version
                ),
            ))
        } else if facts.evicts() && !self.rules.allow_eviction {
            Some((
                FailureKind::Eviction,
                format!(
                    "maxmemory {} with maxmemory-policy {}: lock keys can vanish before they \
                     expire (two holders); set maxmemory-policy noeviction (or maxmemory 0) or \
                     use a dedicated instance; RedlockBuilder::allow_eviction(true) accepts the \
                     risk",
                    facts.maxmemory, facts.policy
                ),
            ))
        } else {
            None
        }
    }

    /// Logs, once per client, that a node that may evict keys is admitted
    /// because the user allowed it.
    fn say_eviction(&self, state: &mut State, facts: &Facts) {
        if facts.evicts() && self.rules.allow_eviction && !state.said_eviction {
            state.said_eviction = true;
            state.say(
                log::Level::Warn,
                format!(
                    "redlock: node {} may evict lock keys (maxmemory {}, maxmemory-policy {}); \
                     admitted because of RedlockBuilder::allow_eviction(true)",
                    self.address, facts.maxmemory, facts.policy
                ),
            );
        }
    }

    /// Records the incarnation a master said it is, forgetting what its
    /// marker said when it is the first met or replaced the one seen.
    fn meet(state: &mut State, facts: &Facts) -> Incarnation {
        let identity = facts.identity();
        let first = state.seen.is_none();
        let replaced = state
            .seen
            .as_ref()
            .map_or(state.successor, |seen| !facts.continues(seen));
        if state.seen.as_deref() != Some(&identity) {
            // A new incarnation, or the same one under a reset replication
            // ID (what markers and connections are compared with).
            state.seen = Some(identity.clone());
        }
        if first || replaced {
            state.marked = false;
            state.tried = false;
            state.said_marker = false;
        }
        Incarnation {
            identity,
            first,
            replaced,
        }
    }

    /// Sets whether the marker admits the incarnation `met` and when its
    /// quarantine of `period` ends (the restart quarantine is on).
    fn quarantine(
        state: &mut State,
        facts: &Facts,
        met: &Incarnation,
        period: Duration,
        now: Instant,
    ) {
        let needed = period + MARGIN;
        let from_now = |cause| now.checked_add(needed).map(|t| (t, cause));
        let marker = facts.marker.as_ref();
        let admits = marker.filter(|m| m.admits(facts, period));
        let by_operator = admits.is_some_and(Marker::by_operator);
        // The marker already says what this client would write.
        state.marked = admits.is_some();
        if met.replaced {
            // This client saw another incarnation here: it waits the whole
            // period from now, unless an operator says otherwise. A client's
            // marker does not shorten it: that client may have admitted
            // this incarnation by its uptime, which says nothing of when a
            // promoted replica took over.
            state.until = if by_operator {
                None
            } else {
                from_now(REPLACED)
            };
        } else if met.first {
            state.until = match marker {
                _ if admits.is_some() => None,
                // A marker it has, or one it cannot show (a cluster
                // master whose marker's slot moved): not proven.
                Some(_) => from_now(UNPROVEN),
                None if facts.marker_elsewhere => from_now(UNPROVEN),
                None if facts.uptime >= needed => None,
                None => now
                    .checked_add(needed - facts.uptime)
                    .map(|t| (t, RESTARTED)),
            };
        } else if by_operator
            || (admits.is_some() && state.until.is_some_and(|(_, cause)| cause != REPLACED))
        {
            // Another client (or an operator) admitted it meanwhile, on
            // what this client knew when it first met it.
            state.until = None;
        }
    }

    /// The marker for `identity` was written.
    fn marked(&self, identity: &str) {
        let mut state = self.lock();
        if state.seen.as_deref() == Some(identity) {
            state.marked = true;
        }
    }

    /// A marker write was refused: said once.
    fn marker_refused(&self, err: &redis::RedisError) {
        let mut state = self.lock();
        if !state.said_marker {
            state.said_marker = true;
            let line = format!(
                "redlock: node {} refused to record its admission in {} ({}): clients \
                 started later judge it by its uptime alone: they wait out the rest of the \
                 period while it has been up for less, and admit it at once after (a replica \
                 promoted later inherits no marker, and is not quarantined by them; retried \
                 every {}; with an ACL, allow +set on {})",
                self.address,
                self.marker(),
                err.code().unwrap_or("error"),
                Human(RECHECK),
                self.marker()
            );
            state.say(log::Level::Warn, line);
        }
    }

    /// Whether the node should be asked again what it is: it has not been
    /// for [`RECHECK`], or its quarantine ended and the marker is not
    /// written (nor tried) yet.
    pub(crate) fn due(&self) -> bool {
        let state = self.lock();
        state.examined.is_none_or(|at| at.elapsed() >= RECHECK)
            || (self.rules.quarantine.is_some()
                && !state.marked
                && !state.tried
                && state.seen.is_some()
                && state.until.is_none_or(|(until, _)| until <= Instant::now()))
    }

    /// Whether the node is connected (for the gauge of nodes that count).
    pub(crate) fn reachable(&self, up: bool) {
        let mut state = self.lock();
        state.up = up;
        let counts = up && state.said.is_none();
        drop(state);
        self.registry.counting(self.index, counts);
    }

    /// Why the node's votes do not count now, if they do not; said once in
    /// the log when that changes.
    pub(crate) fn refusal(&self) -> Option<NodeFailure> {
        let mut state = self.lock();
        self.refusal_locked(&mut state)
    }

    /// Whether a connection whose examination found incarnation `identity`
    /// may vote, decided at once with [`refusal`](Self::refusal): `Err` when
    /// the node's last examination found another process behind the same
    /// address (a probe, a reconnect) — what this connection reaches was not
    /// judged, so it must reconnect.
    pub(crate) fn refusal_for(
        &self,
        identity: Option<&str>,
    ) -> Result<Option<NodeFailure>, NodeFailure> {
        let mut state = self.lock();
        if state.current.as_deref() != identity {
            return Err(NodeFailure::new(
                self.address.clone(),
                FailureKind::Connection,
                "the address reaches another process now than this connection's; reconnecting",
            ));
        }
        Ok(self.refusal_locked(&mut state))
    }

    fn refusal_locked(&self, state: &mut State) -> Option<NodeFailure> {
        let now = Instant::now();
        let refusal = self.verdict(state, now);
        self.news(state, refusal.as_ref(), now);
        refusal.map(|r| {
            let detail = match r.until {
                Some(until) => format!(
                    "{}; counts again in {}",
                    r.why,
                    Human(until.saturating_duration_since(now))
                ),
                None => r.why,
            };
            NodeFailure::new(self.address.clone(), r.kind, detail)
        })
    }

    /// Why the node does not count at `now`, if it does not.
    fn verdict(&self, state: &State, now: Instant) -> Option<Refusal> {
        if let Some((kind, why)) = &state.refused {
            return Some(Refusal {
                kind: *kind,
                why: why.clone(),
                until: None,
            });
        }
        if let Some(why) = self.registry.duplicate(self.index) {
            return Some(Refusal {
                kind: FailureKind::Duplicate,
                why,
                until: None,
            });
        }
        if let Some((until, why)) = state.clock_until.as_ref().filter(|(u, _)| *u > now) {
            return Some(Refusal {
                kind: FailureKind::Clock,
                why: why.clone(),
                until: Some(*until),
            });
        }
        if let Some(why) = &state.clock_off {
            return Some(Refusal {
                kind: FailureKind::Clock,
                why: why.clone(),
                until: None,
            });
        }
        match state.until {
            Some((until, cause)) if until > now => Some(Refusal {
                kind: FailureKind::Quarantined,
                why: cause.to_owned(),
                until: Some(until),
            }),
            _ => None,
        }
    }

    /// Logs a change of whether (and why) the node counts — a quarantine
    /// begun again included.
    fn news(&self, state: &mut State, refusal: Option<&Refusal>, now: Instant) {
        let news = refusal.map(|r| (r.kind, r.why.clone(), r.until));
        if news == state.said {
            return;
        }
        let line = match refusal {
            Some(r) => (
                log::Level::Warn,
                format!(
                    "redlock: node {} does not count toward any quorum: {}: {}{}",
                    self.address,
                    r.kind,
                    r.why,
                    r.until
                        .map(|until| format!(
                            "; for {}",
                            Human(until.saturating_duration_since(now))
                        ))
                        .unwrap_or_default()
                ),
            ),
            // Good news: not a warning.
            None => (
                log::Level::Info,
                format!("redlock: node {} counts toward quorums again", self.address),
            ),
        };
        state.say(line.0, line.1);
        state.said = news;
        self.registry
            .counting(self.index, state.up && state.said.is_none());
    }

    /// Judges the node's clock by `reading` (see `clock.rs`): a jump ahead
    /// is a loss of keys, so the node is out for the [`clock_period`]
    /// (a restart quarantine's, or the longest TTL this client used) from
    /// now; a clock steadily off the others' median by more than
    /// `max_clock_offset` is out while it is. Returns the judgement, and
    /// the jump marker to write on the node if it just jumped. Waits until
    /// `until` at most for the other nodes' readings where they are stale
    /// ([`Clocks::observe`]). A step too small to be a jump by this
    /// client's TTLs is left in [`Judged::stepped`] for
    /// [`judge_clock`](Self::judge_clock) to weigh against every client's.
    ///
    /// [`clock_period`]: Self::clock_period
    fn clock(&self, reading: Reading, until: Instant) -> (Judged, Option<JumpMarker>) {
        let judged = self.registry.clocks().observe(self.index, reading, until);
        let now = Instant::now();
        let mut state = self.lock();
        if judged.disagreement.is_some() {
            match judged.beyond(self.rules.max_clock_offset) {
                None => state.clock_off = None,
                Some(d) if state.clock_off.is_none() => {
                    state.clock_off = Some(format!(
                        "its clock is {} {} the other nodes' (their median), more than \
                         max_clock_offset ({}): Redis expires keys by it, so they may expire \
                         early; fix the node's time synchronisation (NTP)",
                        Human(Duration::from_micros(d.unsigned_abs())),
                        if d > 0 { "ahead of" } else { "behind" },
                        Human(self.rules.max_clock_offset)
                    ));
                }
                Some(_) => {}
            }
        }
        let marker = judged.jumped.map(|size| self.jumped(&mut state, size, now));
        // A jump is said once its marker is written (`judge_clock`).
        if marker.is_none() {
            let refusal = self.verdict(&state, now);
            self.news(&mut state, refusal.as_ref(), now);
        }
        (judged, marker)
    }

    /// Out for the [`clock_period`](Self::clock_period) from `now` for a
    /// jump of `size`; the marker to leave on the node.
    fn jumped(&self, state: &mut State, size: Duration, now: Instant) -> JumpMarker {
        let period = self.clock_period();
        let until = now.checked_add(period).unwrap_or(now);
        self.clock_jumped(state, until, size, "");
        metrics::clock_jump(&self.address);
        JumpMarker {
            key: self.clock_marker(),
            in_use: self.in_use_key(),
            size,
            period,
        }
    }

    /// Judges the node's clock by `reading`, taken on `conn` with a batch
    /// or an examination ([`clock`](Self::clock)), waiting until `until` at
    /// most for the others' readings. A step too small to be a jump by this
    /// client's TTLs is one if it is by the shortest TTL any client
    /// announced there ([`in_use`]); a jump leaves its marker, which lasts
    /// (and keeps the node out, for every client that examines it) as long
    /// as the longest TTL any client announced there, if longer than this
    /// client's.
    pub(crate) fn judge_clock(
        &self,
        conn: &mut redis::Connection,
        reading: Reading,
        until: Instant,
    ) -> redis::RedisResult<Judged> {
        let (mut judged, mut marker) = self.clock(reading, until);
        let mut failed = None;
        if let Some(step) = judged.stepped.take()
            && self
                .beyond_every_clients(conn, &step)
                .unwrap_or_else(|err| {
                    // Not knowing the others' TTLs, the safe reading: a jump
                    // (the step is not seen again by the next reading). A
                    // refusal leaves the connection as it was.
                    if err.code().is_none() {
                        failed = Some(err);
                    }
                    true
                })
        {
            let size = self.registry.clocks().confirm(self.index, &step);
            judged.jumped = Some(size);
            let mut state = self.lock();
            marker = Some(self.jumped(&mut state, size, Instant::now()));
        }
        let Some(marker) = marker else {
            return failed.map_or(Ok(judged), Err);
        };
        // The marker lasts as long as any client's lease may: this client
        // keeps the node out as long as the marker says, so that reading
        // it again is no news, and says the jump once.
        let wrote = match failed {
            Some(err) => Err(err),
            None => marker.write(conn, &self.address),
        };
        let now = Instant::now();
        let mut state = self.lock();
        if let Ok(Some(period)) = wrote
            && let Some(until) = now.checked_add(period)
        {
            self.clock_jumped(&mut state, until, marker.size, "");
        }
        let refusal = self.verdict(&state, now);
        self.news(&mut state, refusal.as_ref(), now);
        drop(state);
        wrote.map(|_| judged)
    }

    /// Whether `step` is beyond the smallest drift allowance any client
    /// announced at the node (and may still use); an error when the node
    /// could not say (taken for a jump).
    fn beyond_every_clients(
        &self,
        conn: &mut redis::Connection,
        step: &Step,
    ) -> redis::RedisResult<bool> {
        Ok(in_use::in_use(conn, &self.in_use_key(), step.size)?
            .is_some_and(|(smallest, _)| step.beyond(smallest)))
    }

    /// The command announcing this client's shortest and longest TTL at
    /// the node, to go in front of a batch whose votes would count there,
    /// unless it was said lately ([`in_use`]); with what it announces.
    pub(crate) fn announcement(&self) -> Option<(Vec<u8>, (u64, u64))> {
        let clocks = self.registry.clocks();
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let longest = clocks.longest_ttl();
        if longest.is_zero() {
            return None;
        }
        let pair = (ms(clocks.allowance(clocks.shortest_ttl())), ms(longest));
        self.announced
            .due(pair)
            .then(|| (Announced::command(&self.in_use_key(), pair), pair))
    }

    /// The node answered the announcement of `pair` with `reply`; a
    /// refusal (an ACL) is logged once, and the votes go on.
    pub(crate) fn announced(&self, pair: (u64, u64), reply: &redis::Value) {
        self.announced.done(pair);
        let redis::Value::ServerError(err) = reply else {
            return;
        };
        let mut state = self.lock();
        if !state.said_in_use {
            state.said_in_use = true;
            let hint = if err.code() == "NOPERM" {
                "; with an ACL, allow +eval, +time, +zadd, +zscore, +zrange, +zrangebyscore, \
                 +zremrangebyscore and +pexpire, on keys ~redlock:ttls*"
            } else {
                ""
            };
            let line = format!(
                "redlock: node {} refused the record of the TTLs in use {} ({}): other clients \
                 judge its clock's jumps by their own TTLs only{hint}",
                self.address,
                self.in_use_key(),
                err.code()
            );
            state.say(log::Level::Warn, line);
        }
    }

    /// The key of the TTLs in use, beside its admission marker (in the
    /// same hash slot on a cluster's master).
    fn in_use_key(&self) -> String {
        let marker = self.marker();
        format!("{TTLS}{}", &marker[MARKER.len().min(marker.len())..])
    }

    /// Out until `until` for a jump of `size` (`how`: how the client
    /// knows, for the reason), unless out longer already.
    fn clock_jumped(&self, state: &mut State, until: Instant, size: Duration, how: &str) {
        if state.clock_until.as_ref().is_some_and(|(u, _)| *u >= until) {
            return;
        }
        let by = if size.is_zero() {
            String::new()
        } else {
            format!(" {}", Human(size))
        };
        state.clock_until = Some((
            until,
            format!(
                "its clock jumped{by} ahead{how}: Redis expires keys by it, so every key it \
                 held expired that much early; it counts again once none of them matters"
            ),
        ));
    }

    /// How long a node whose clock jumped stays out: until every key it
    /// may have dropped early would have expired anyway — the longest TTL
    /// this client used, or the restart quarantine if longer.
    pub(crate) fn clock_period(&self) -> Duration {
        let longest = self.registry.clocks().longest_ttl();
        self.rules.quarantine.unwrap_or_default().max(longest) + MARGIN
    }

    /// The key of its jump marker, beside its admission marker (in the same
    /// hash slot on a cluster's master).
    fn clock_marker(&self) -> String {
        let marker = self.marker();
        format!(
            "{CLOCK_MARKER}{}",
            &marker[MARKER.len().min(marker.len())..]
        )
    }

    /// Whether a round's request with `ttl` may count this node's vote,
    /// given its clock's judgement in the same exchange: not if the clock
    /// is ahead of the median by more than the round's drift allowance,
    /// nor if no other node's fresh reading could judge it (with two
    /// listed nodes or more).
    pub(crate) fn round_refusal(&self, judged: &Judged, ttl: Duration) -> Option<NodeFailure> {
        let clocks = self.registry.clocks();
        if judged.disagreement.is_none() && clocks.comparable() {
            return Some(NodeFailure::new(
                self.address.clone(),
                FailureKind::Clock,
                format!(
                    "its clock could not be judged against another node's: none was read in \
                     the last {} or answered within the round; the vote does not count",
                    Human(FRESH)
                ),
            ));
        }
        let allowance = clocks.allowance(ttl).max(ROUND_FLOOR);
        let d = judged.ahead(allowance)?;
        Some(NodeFailure::new(
            self.address.clone(),
            FailureKind::Clock,
            format!(
                "its clock is {} ahead of the other nodes' (their median), more than this \
                 round's drift allowance ({} for a {} TTL): Redis expires keys by it, so they \
                 may have expired early; fix the node's time synchronisation (NTP)",
                Human(Duration::from_micros(d.unsigned_abs())),
                Human(allowance),
                Human(ttl)
            ),
        ))
    }

    /// What keeps the node out for good, for `build` to refuse: its facts
    /// (too old, evicts, unidentified) or another node reaching its server.
    pub(crate) fn permanent_problem(&self) -> Option<String> {
        let state = self.lock();
        if let Some((_, why)) = &state.refused {
            return Some(format!("{}: {why}", self.registry.who(self.index)));
        }
        self.registry.duplicate(self.index)
    }
}

/// Asks the node on `conn` what it is, decides, and writes the marker if
/// this client just admitted it. Returns the incarnation the connection
/// reaches (`None`: unidentified), for [`Admission::refusal_for`].
/// `within` is the socket's read timeout as the caller set it: the
/// node's description (one pipeline, or two or three when it refuses a
/// marker) is read within it in all, each (see `facts::ask`).
pub(crate) fn examine(
    conn: &mut redis::Connection,
    admission: &Admission,
    within: Duration,
) -> redis::RedisResult<Option<String>> {
    let marker = admission.marker();
    // The marker matters only to the restart quarantine.
    let wanted = admission.rules.quarantine.map(|_| &*marker);
    let clock = admission.clock_marker();
    let facts = facts::ask(conn, wanted, Some(&clock), within)?;
    let identity = facts.as_ref().map(Facts::identity);
    if let (Some(value), Some(identity)) = (admission.examined(facts.as_ref()), &identity) {
        let wrote: redis::RedisResult<()> = redis::cmd("SET").arg(&*marker).arg(value).query(conn);
        match wrote {
            Ok(()) => admission.marked(identity),
            Err(err) if err.code().is_some() => admission.marker_refused(&err),
            Err(err) => return Err(err),
        }
    }
    if let Some(reading) = facts.as_ref().and_then(|f| f.time) {
        // Connection work, judged by what is known: no wait.
        admission.judge_clock(conn, reading, Instant::now())?;
    }
    Ok(identity)
}

/// What a client that saw a node's clock jump leaves on the node, so that
/// clients started later (after NTP stepped the clock back, say) keep it
/// out as long: a key whose value is the jump's size in milliseconds, which
/// expires at the end of the period (by the node's clock, which only steps
/// back now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JumpMarker {
    pub(crate) key: String,
    /// The key of the TTLs in use at the node (`in_use.rs`).
    pub(crate) in_use: String,
    pub(crate) size: Duration,
    pub(crate) period: Duration,
}

/// Writes a jump marker, keeping what another client's said if more: the
/// larger size and the later end, and at least the longest TTL any client
/// announced there (`KEYS[2]`, see `in_use.rs`) and a second. `KEYS[1]`
/// the marker, `ARGV` the size and the period in milliseconds; returns the
/// period set. (One call per jump seen: not worth a cached script.)
/// Clients, this one too, learn the period at their next examination.
const WRITE_JUMP_MARKER: &str = "local size = math.max(tonumber(redis.call('get', KEYS[1])) or 0, \
     tonumber(ARGV[1])) \
     local t = redis.call('time') \
     local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
     local period = tonumber(ARGV[2]) \
     for _, m in ipairs(redis.call('zrangebyscore', KEYS[2], '(' .. (now - tonumber(ARGV[1])), \
       '+inf')) do \
       local v = tonumber(string.sub(m, 2)) \
       if v and string.sub(m, 1, 1) == 't' and v + 1000 > period then period = v + 1000 end \
     end \
     local left = redis.call('pttl', KEYS[1]) \
     redis.call('set', KEYS[1], size, 'px', math.max(left, period)) \
     return period";

impl JumpMarker {
    /// Writes it on `conn` (a refusal, by an ACL say, is logged: clients
    /// started later then judge the clock as they find it), for at least
    /// the longest TTL any client announced there. A marker another client
    /// left is never lowered: the larger size and the later end stay
    /// ([`WRITE_JUMP_MARKER`]).
    /// Returns the period the node set, when it took the marker.
    pub(crate) fn write(
        &self,
        conn: &mut redis::Connection,
        node: &str,
    ) -> redis::RedisResult<Option<Duration>> {
        let ms = u64::try_from(self.period.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let size = u64::try_from(self.size.as_millis()).unwrap_or(u64::MAX);
        let wrote: redis::RedisResult<u64> = redis::cmd("EVAL")
            .arg(WRITE_JUMP_MARKER)
            .arg(2)
            .arg(&self.key)
            .arg(&self.in_use)
            .arg(size)
            .arg(ms)
            .query(conn);
        match wrote {
            Err(err) if err.code().is_some() => {
                let hint = if err.code() == Some("NOPERM") {
                    "; with an ACL, allow +eval, +time, +get, +pttl, +set and +zrangebyscore, on \
                     keys ~redlock:clock-jumped* and ~redlock:ttls*"
                } else {
                    ""
                };
                log::warn!(
                    "redlock: node {node} refused the clock-jump marker {} ({}): clients \
                     started later judge its clock as they find it{hint}",
                    self.key,
                    err.code().unwrap_or("error")
                );
                Ok(None)
            }
            other => other.map(|ms| Some(Duration::from_millis(ms))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What node `run_id` (replication ID `rep`) says.
    fn facts(id: &str, uptime: u64, marker: Option<&str>) -> Facts {
        facts_with(
            id,
            uptime,
            marker,
            "maxmemory:0\r\nmaxmemory_policy:noeviction\r\n",
        )
    }

    /// `id` is `{run_id}:{master_replid}`.
    fn facts_with(id: &str, uptime: u64, marker: Option<&str>, memory: &str) -> Facts {
        // `run_id:replid`, or `run_id:replid<previous` for a promotion on
        // record (`master_replid2` previous).
        let (run_id, replid) = id.split_once(':').expect("run_id:replid");
        let (replid, replid2) = replid
            .split_once('<')
            .unwrap_or((replid, "0000000000000000000000000000000000000000"));
        let server =
            format!("run_id:{run_id}\r\nuptime_in_seconds:{uptime}\r\nredis_version:7.0.15\r\n");
        let replication =
            format!("role:master\r\nmaster_replid:{replid}\r\nmaster_replid2:{replid2}\r\n");
        Facts::parse(&server, &replication, memory, marker.map(str::as_bytes)).expect("facts")
    }

    fn quarantined(period: u64) -> Admission {
        let rules = Rules {
            quarantine: Some(Duration::from_secs(period)),
            ..Rules::default()
        };
        Admission::new(0, rules, Registry::new(vec!["n".into()]))
    }

    fn see(a: &Admission, f: Facts) -> Option<String> {
        a.examined(Some(&f))
    }

    fn admitted(a: &Admission) -> bool {
        a.refusal().is_none()
    }

    fn left(a: &Admission) -> Duration {
        let failure = a.refusal().expect("refused");
        assert_eq!(failure.kind(), FailureKind::Quarantined, "{failure}");
        a.state.lock().until.unwrap().0 - Instant::now()
    }

    #[test]
    fn what_the_node_says_decides_its_admission() {
        // An operator admitted this very incarnation.
        let a = quarantined(60);
        assert_eq!(see(&a, facts("r1:x", 5, Some("r1:x operator"))), None);
        assert!(admitted(&a));
        // A marker naming another incarnation — another process (restarted
        // with its data, restored) or the same process promoted again after
        // it served as a replica: the whole period, whatever the uptime.
        for (id, m) in [
            ("r1:x", "r0:x operator"),
            ("r1:x", "r0:x client 60000"),
            ("r1:x<y", "r1:w operator"),
            ("r1:x", "r1 operator"),
        ] {
            let a = quarantined(60);
            see(&a, facts(id, 86_400, Some(m)));
            assert!(left(&a) > Duration::from_secs(60), "{m}");
        }
        // A client admitted this incarnation, after a shorter quarantine
        // than ours: the whole period too. After ours or longer: admitted.
        let a = quarantined(60);
        see(&a, facts("r1:x", 86_400, Some("r1:x client 30000")));
        assert!(left(&a) > Duration::from_secs(60));
        let a = quarantined(60);
        assert_eq!(see(&a, facts("r1:x", 5, Some("r1:x client 60000"))), None);
        assert!(admitted(&a));
        // Garbage is no marker: the uptime rule, which admits a process up
        // for long.
        for m in ["r1:x 60000", "r1:x operator extra", "r1:x"] {
            let a = quarantined(60);
            see(&a, facts("r1:x", 5, Some(m)));
            assert!(!admitted(&a), "{m}");
            let a = quarantined(60);
            see(&a, facts("r1:x", 86_400, Some(m)));
            assert!(admitted(&a), "{m}");
        }
        // No marker: restarted (or new), for the rest of the period plus
        // the margin for the node's coarse uptime.
        let a = quarantined(60);
        assert_eq!(see(&a, facts("r4:x", 20, None)), None);
        let l = left(&a);
        assert!(
            l > Duration::from_secs(40) && l <= Duration::from_secs(41),
            "{l:?}"
        );
        // Up for the period (and the margin) already: admitted, and this
        // client writes the marker for clients started later.
        let a = quarantined(60);
        assert_eq!(
            see(&a, facts("r5:x", 61, None)),
            Some("r5:x client 60000".to_owned())
        );
        assert!(admitted(&a));
        a.marked("r5:x");
        assert!(!a.due(), "marked");
    }

    #[test]
    fn a_successor_waits_the_whole_period_however_long_it_has_run() {
        let a = quarantined(60);
        a.succeeds();
        see(&a, facts("r2:y", 400_000, None));
        assert!(left(&a) > Duration::from_secs(60), "no marker, up for days");
        let a = quarantined(60);
        a.succeeds();
        see(&a, facts("r2:y", 400_000, Some("r2:y client 60000")));
        assert!(left(&a) > Duration::from_secs(60), "a client's marker");
        let a = quarantined(60);
        a.succeeds();
        see(&a, facts("r2:y", 400_000, Some("r2:y operator")));
        assert!(admitted(&a), "an operator's marker admits it");
        let a = quarantined(60);
        see(&a, facts("r2:y", 400_000, None));
        assert!(admitted(&a), "not a successor: admitted by its uptime");
        // Known, then given a lost master's slots: from now.
        a.succeeds();
        assert!(left(&a) > Duration::from_secs(60), "quarantined from now");
        see(&a, facts("r2:y", 400_010, Some("r2:y client 60000")));
        assert!(
            left(&a) > Duration::from_secs(50),
            "a client's marker does not end it"
        );
        // Refusing the marker's slot does not prove anything either.
        let a = quarantined(60);
        let mut elsewhere = facts("r3:z", 400_000, None);
        elsewhere.marker_elsewhere = true;
        see(&a, elsewhere);
        assert!(
            left(&a) > Duration::from_secs(60),
            "a marker it cannot show"
        );
    }

    #[test]
    fn a_marker_that_moves_is_written_again() {
        let a = quarantined(60);
        assert_eq!(
            see(&a, facts("r5:x", 61, None)),
            Some("r5:x client 60000".to_owned())
        );
        a.marked("r5:x");
        assert!(!a.due());
        a.set_marker("redlock:admitted{7}".to_owned());
        assert_eq!(&*a.marker(), "redlock:admitted{7}");
        assert!(a.due(), "the marker is written at its new key");
    }

    #[test]
    fn an_incarnation_that_replaced_one_seen_here_waits_the_whole_period() {
        let a = quarantined(60);
        see(&a, facts("r1:x", 3600, None));
        assert!(admitted(&a), "up for an hour, first seen");
        // The same incarnation again (a reconnect): still admitted.
        assert_eq!(
            see(&a, facts("r1:x", 3700, Some("r1:x client 60000"))),
            None
        );
        assert!(admitted(&a));
        // A replica promoted by a failover: up for days, with the old
        // master's marker.
        see(&a, facts("r2:y", 400_000, Some("r1:x client 60000")));
        let l = left(&a);
        assert!(l > Duration::from_secs(60), "{l:?}");
        assert!(a.refusal().unwrap().detail().contains("promoted"));
        // Reconnecting to it again does not restart the period.
        see(&a, facts("r2:y", 400_010, Some("r1:x client 60000")));
        assert!(left(&a) <= l);
        // Another client's marker for it does not cut it short: that
        // client may have admitted it by its uptime.
        see(&a, facts("r2:y", 400_020, Some("r2:y client 60000")));
        assert!(left(&a) <= l && left(&a) > Duration::from_secs(50));
        // An operator's word does.
        see(&a, facts("r2:y", 400_030, Some("r2:y operator")));
        assert!(admitted(&a));
    }

    /// Failover and back: the old master returns as a replica (its data
    /// now the promoted replica's) and is promoted again. Its `run_id` is
    /// the one its marker names, but its replication ID is new.
    #[test]
    fn a_master_promoted_back_is_another_incarnation() {
        let a = quarantined(60);
        see(&a, facts("m1:x", 3600, None));
        assert!(admitted(&a));
        // Fresh clients meet m1 again, promoted back (it served as a replica
        // of y), with m1's marker from before the first failover
        // (replicated through the replica).
        let fresh = quarantined(60);
        see(&fresh, facts("m1:z<y", 3700, Some("m1:x client 60000")));
        assert!(left(&fresh) > Duration::from_secs(60));
        // And this client, which saw it before.
        see(&a, facts("m1:z<y", 3700, Some("m1:x client 60000")));
        assert!(left(&a) > Duration::from_secs(60));
    }

    /// A master that resets its replication ID (its first replica with no
    /// backlog, or its backlog freed) is the same incarnation: no
    /// quarantine, and its marker still admits it.
    #[test]
    fn a_master_resetting_its_replication_id_stays_admitted() {
        let a = quarantined(60);
        see(&a, facts("m1:x", 3600, Some("m1:x client 60000")));
        assert!(admitted(&a));
        see(&a, facts("m1:w", 3700, Some("m1:x client 60000")));
        assert!(admitted(&a), "the same process, no promotion on record");
        let fresh = quarantined(60);
        see(&fresh, facts("m1:w", 5, Some("m1:x client 60000")));
        assert!(admitted(&fresh));
    }

    /// An examination that cannot identify the node does not make this
    /// client forget what it saw replace what.
    #[test]
    fn an_unidentified_examination_keeps_a_quarantine_under_way() {
        let a = quarantined(60);
        see(&a, facts("r1:x", 3600, None));
        see(&a, facts("r2:y<x", 400_000, Some("r1:x client 60000")));
        let l = left(&a);
        a.examined(None);
        assert_eq!(a.refusal().unwrap().kind(), FailureKind::Unsupported);
        // Identified again, with another client's marker (which may come
        // from an admission by uptime): still the quarantine it began.
        see(&a, facts("r2:y<x", 400_010, Some("r2:y client 60000")));
        assert!(left(&a) <= l && left(&a) > Duration::from_secs(55));
    }

    #[test]
    fn a_replica_does_not_count() {
        let a = quarantined(60);
        let replica = Facts::parse(
            "run_id:r1\r\nuptime_in_seconds:9999\r\nredis_version:7.0.15\r\n",
            "role:slave\r\nmaster_replid:x\r\n",
            "maxmemory:0\r\nmaxmemory_policy:noeviction\r\n",
            None,
        )
        .unwrap();
        assert_eq!(a.examined(Some(&replica)), None, "no marker for a replica");
        assert_eq!(a.refusal().unwrap().kind(), FailureKind::NotWritable);
    }

    #[test]
    fn a_first_met_quarantine_ends_on_another_clients_word() {
        let a = quarantined(60);
        see(&a, facts("r1:x", 86_400, Some("r0:w client 60000")));
        assert!(!admitted(&a));
        // Another client, which met it earlier, served its period.
        see(&a, facts("r1:x", 86_405, Some("r1:x client 60000")));
        assert!(admitted(&a));
    }

    #[test]
    fn the_marker_is_written_once_the_quarantine_ends_and_retried_if_refused() {
        let a = quarantined(60);
        see(&a, facts("r1:x", 86_400, Some("r0:x client 60000")));
        assert!(!admitted(&a));
        assert!(!a.due());
        // Pretend the period passed.
        a.state.lock().until = Some((Instant::now(), UNPROVEN));
        assert!(a.due(), "due to write the marker");
        let again = facts("r1:x", 86_470, Some("r0:x client 60000"));
        assert_eq!(see(&a, again.clone()), Some("r1:x client 60000".to_owned()));
        assert!(admitted(&a));
        // The write failed: tried again at the next re-check, not before.
        assert!(!a.due());
        a.state.lock().examined = Some(Instant::now() - RECHECK);
        assert!(a.due());
        assert_eq!(see(&a, again), Some("r1:x client 60000".to_owned()));
        a.marked("r1:x");
        assert!(!a.due());
    }

    #[test]
    fn only_a_connection_to_the_incarnation_last_examined_may_vote() {
        let a = quarantined(60);
        see(&a, facts("r1:x", 3600, None));
        assert_eq!(a.refusal_for(Some("r1:x")), Ok(None));
        // A probe through the same address reached another process.
        see(&a, facts("r2:y", 3600, None));
        let not_current = a.refusal_for(Some("r1:x")).unwrap_err();
        assert!(not_current.detail().contains("reconnecting"));
        assert_eq!(
            a.refusal_for(Some("r2:y")).unwrap().unwrap().kind(),
            FailureKind::Quarantined
        );
    }

    #[test]
    fn facts_refuse_a_node_whatever_the_quarantine() {
        let evicting = "maxmemory:67108864\r\nmaxmemory_policy:volatile-lru\r\n";
        let a = Admission::new(0, Rules::default(), Registry::new(vec!["n".into()]));
        see(&a, facts_with("r1:x", 5, None, evicting));
        let failure = a.refusal().unwrap();
        assert_eq!(failure.kind(), FailureKind::Eviction);
        assert!(failure.detail().contains("noeviction"), "{failure}");
        assert!(a.permanent_problem().unwrap().contains("noeviction"));
        // Switched at run time: noticed at the next examination.
        see(&a, facts("r1:x", 6, None));
        assert!(admitted(&a));
        let allowed = Rules {
            allow_eviction: true,
            ..Rules::default()
        };
        let a = Admission::new(0, allowed, Registry::new(vec!["n".into()]));
        see(&a, facts_with("r1:x", 5, None, evicting));
        assert!(admitted(&a));
        // Unidentified (INFO refused): does not count.
        let a = Admission::standalone("n");
        a.examined(None);
        let failure = a.refusal().unwrap();
        assert_eq!(failure.kind(), FailureKind::Unsupported);
        assert!(failure.detail().contains("+info"), "{failure}");
    }

    #[test]
    fn of_two_nodes_reaching_one_server_only_the_first_listed_counts() {
        let registry = Registry::new(vec!["a:1".into(), "b:1".into(), "c:1".into()]);
        let nodes: Vec<Admission> = (0..3)
            .map(|i| Admission::new(i, Rules::default(), registry.clone()))
            .collect();
        see(&nodes[1], facts("same:x", 5, None));
        see(&nodes[2], facts("other:x", 5, None));
        assert!(nodes.iter().all(admitted), "no duplicate yet");
        // Node 0 was down, and reaches the same server as node 1: listed
        // first, it counts from now on, whichever answered first.
        see(&nodes[0], facts("same:x", 5, None));
        assert!(admitted(&nodes[0]), "the first listed counts");
        let failure = nodes[1].refusal().unwrap();
        assert_eq!(failure.kind(), FailureKind::Duplicate);
        assert!(failure.detail().contains("a:1"), "{failure}");
        let problem = nodes[1].permanent_problem().unwrap();
        assert_eq!(
            problem,
            "node a:1 and node b:1 are the same Redis server (one run_id): list each server \
             once, by one address"
        );
        assert_eq!(nodes[0].permanent_problem(), None);
        // Reconnecting to the same server changes nothing.
        see(&nodes[0], facts("same:x", 6, None));
        assert!(admitted(&nodes[0]) && !admitted(&nodes[1]));
        // Node 0 now reaches another server: node 1 counts, and node 0's
        // connection to the first server (examined before) no longer votes.
        see(&nodes[0], facts("third:x", 1, None));
        assert!(admitted(&nodes[0]) && admitted(&nodes[1]));
        assert!(nodes[0].refusal_for(Some("same:x")).is_err());
    }

    #[test]
    fn once_started_a_node_that_counts_is_never_pushed_aside() {
        let registry = Registry::new(vec!["a:1".into(), "b:1".into()]);
        let nodes: Vec<Admission> = (0..2)
            .map(|i| Admission::new(i, Rules::default(), registry.clone()))
            .collect();
        registry.started();
        // Node 0 was down when the client started; node 1 counts, and its
        // votes may be in a round under way when node 0 comes up.
        see(&nodes[1], facts("same:x", 5, None));
        see(&nodes[0], facts("same:x", 5, None));
        assert!(admitted(&nodes[1]), "the one that counted keeps counting");
        let failure = nodes[0].refusal().unwrap();
        assert_eq!(failure.kind(), FailureKind::Duplicate);
        assert!(
            failure.detail().starts_with("node b:1 and node a:1"),
            "{failure}"
        );
        // Reconnecting to the same server changes nothing.
        see(&nodes[1], facts("same:x", 6, None));
        assert!(admitted(&nodes[1]) && !admitted(&nodes[0]));
    }

    #[test]
    fn a_cluster_listed_twice_or_as_one_server_is_named() {
        let member = |id: &str| Facts {
            cluster: true,
            ..facts(id, 5, None)
        };
        // Listed: a plain node, then two cluster nodes.
        let registry = Registry::new(vec![
            "p:1".into(),
            "cluster:s:1".into(),
            "cluster:s:2".into(),
        ]);
        let plain = Admission::new(0, Rules::default(), registry.clone());
        see(&plain, member("m1:x"));
        let failure = plain.refusal().unwrap();
        assert_eq!(failure.kind(), FailureKind::Unsupported);
        assert!(failure.detail().contains("redis+cluster://"), "{failure}");
        assert!(plain.permanent_problem().unwrap().starts_with("node p:1: "));
        // The same two masters, reached through either cluster node.
        let master = |address: &str, owner| {
            let index = registry.add(address.into(), owner);
            Admission::new(index, Rules::default(), registry.clone())
        };
        let (b1, a1) = (master("m2:1", 2), master("m2:1", 1));
        see(&b1, member("m2:x"));
        see(&a1, member("m2:x"));
        assert!(admitted(&a1), "the cluster listed first counts");
        assert_eq!(b1.refusal().unwrap().kind(), FailureKind::Duplicate);
        assert_eq!(
            b1.permanent_problem().unwrap(),
            "cluster nodes cluster:s:1 and cluster:s:2 reach the same Redis Cluster (the same \
             masters): list each cluster once, its seeds in one redis+cluster:// URL"
        );
        // A cluster's master that the plainly listed entry also reaches:
        // the plain one, listed in the wrong form, claims nothing, so the
        // master counts.
        let master_of_plain = master("p:1", 1);
        see(&master_of_plain, member("m1:x"));
        assert!(
            admitted(&master_of_plain),
            "{:?}",
            master_of_plain.refusal()
        );
        // A cluster's master in standalone mode (never so in practice).
        let odd = master("m3:1", 1);
        see(&odd, facts("m3:x", 5, None));
        assert!(
            odd.permanent_problem()
                .unwrap()
                .starts_with("cluster node cluster:s:1 (master m3:1): ")
        );
    }

    /// A yes from a node no other node's fresh reading could judge does
    /// not count where another node is listed; with one node listed there
    /// is never another, and it counts.
    #[test]
    fn an_unjudged_clock_counts_no_yes_where_another_could_judge_it() {
        let ttl = Duration::from_secs(10);
        let registry = Registry::new(vec!["a:1".into(), "b:1".into(), "c:1".into()]);
        let a = Admission::new(0, Rules::default(), registry);
        let refused = a.round_refusal(&Judged::default(), ttl).expect("refused");
        assert_eq!(refused.kind(), FailureKind::Clock);
        assert!(
            refused.detail().contains("could not be judged"),
            "{refused}"
        );
        let alone = Admission::new(0, Rules::default(), Registry::new(vec!["n".into()]));
        assert!(alone.round_refusal(&Judged::default(), ttl).is_none());
    }
}
