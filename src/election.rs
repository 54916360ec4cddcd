//! [`Election`]: one leader among many candidates, with a value the rest
//! of the fleet can read and watch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::acquire::Acquire;
use crate::cancel::CancelToken;
use crate::core::{Core, Seen};
use crate::error::{Error, LostCause};
use crate::guard::LockGuard;

/// An election across processes and machines: candidates
/// [`campaign`](Self::campaign), one at a time leads, and anyone can ask
/// [`leader`](Self::leader) or [`observe`](Self::observe) the changes.
/// From [`Redlock::election`](crate::Redlock::election); cheap to clone,
/// and usable from many threads.
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_sync::Redlock;
///
/// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
/// let scheduler = redlock.election("scheduler");
/// // Blocks until this process leads (kept alive from then on).
/// let leadership = scheduler.campaign("host-a:8080", Duration::from_secs(10)).win()?;
/// while leadership.is_leader() {
///     // ... run the jobs, passing leadership.term() along as a fencing token ...
///     # break;
/// }
/// leadership.resign()?;
/// # Ok::<(), redlock_sync::Error>(())
/// ```
///
/// # What it guarantees
///
/// * **At most one valid [`Leadership`] at a time.** Leading is holding a
///   lock (on `redlock-elect:{name}#l`), kept alive for as long as the
///   leadership lives; a leader cut off from its majority, or paused past
///   its validity, sees [`Leadership::is_leader`] turn false (and a warning
///   is logged) before anyone else can win.
/// * **Terms only grow.** A leadership's [`term`](Leadership::term) is its
///   lock's fencing token (always fenced, whatever the client's
///   [`fencing`](crate::RedlockBuilder::fencing) setting): a leadership
///   won after another's [`win`](Campaign::win) returned has a larger
///   term. Pass it to whatever the leader writes, and have that refuse a
///   smaller term than it has seen: a deposed leader that still believes
///   it leads (a long pause) is then refused, which no lock alone can do.
///   [`proclaim`](Leadership::proclaim) keeps the term.
/// * **[`leader`](Self::leader) reports only what a leader proclaimed**,
///   and only while its lock is held on a majority: each node answers with
///   the value its lock key's holder proclaimed, and a majority must
///   agree. After a resignation or an expiry it reports `None`, or the
///   next leader once that one's [`win`](Campaign::win) has returned.
///
/// The leader's value lives in `redlock-elect:{name}#v` on every node,
/// expiring with the leader's lock (and extended with it): a resigning
/// leader deletes it, and a leader that vanished leaves it until its lock
/// expires or the next one overwrites it (it is never read as anyone's
/// meanwhile).
///
/// The handle keeps its client alive: the client's threads run, and what
/// it holds stays held, until the last handle, clone and guard is gone —
/// or until [`Redlock::shutdown`](crate::Redlock::shutdown), after which
/// its calls fail with [`Error::Shutdown`](crate::Error::Shutdown).
#[derive(Clone)]
pub struct Election {
    core: Arc<Core>,
    name: Arc<str>,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .finish()
    }
}

impl Election {
    pub(crate) fn new(core: Arc<Core>, name: &str) -> Self {
        Election {
            core,
            name: Arc::from(name),
        }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A campaign to lead with `value` (what [`leader`](Self::leader) shows
    /// the others: an address, a host name), holding the leadership for
    /// `ttl` at a time and renewing it for as long as it lasts. Configure
    /// how long to wait and what cancels it, then
    /// [`win`](Campaign::win) or [`try_win`](Campaign::try_win).
    pub fn campaign(&self, value: &str, ttl: Duration) -> Campaign {
        Campaign {
            election: self.clone(),
            acquire: Acquire::election(&self.core, &self.name, ttl),
            value: value.to_owned(),
            limited: false,
        }
    }

    /// Who leads now, as a majority of the nodes says: `None` when nobody
    /// does (or a new leader's campaign has not returned yet). One round on
    /// every node, a few when a hand-off is under way and the nodes
    /// disagree.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when too few nodes answered to tell;
    /// [`Error::Config`] for an empty name.
    pub fn leader(&self) -> Result<Option<Leader>, Error> {
        let read = self
            .core
            .read_leader(&self.name)
            .map_err(|err| err.in_call("Election::leader"))?;
        Ok(read.map(|(term, value)| Leader {
            term,
            value: value.to_string(),
        }))
    }

    /// Watches who leads: the first item is the state now, and each later
    /// one a change — a new leader, a new value, no leader. See
    /// [`Observer`].
    pub fn observe(&self) -> Observer {
        Observer {
            election: self.clone(),
            last: None,
            followed: false,
        }
    }
}

/// A campaign, from [`Election::campaign`]: how long to wait for the
/// leadership and what may cancel the wait. With no limit set,
/// [`win`](Self::win) waits for as long as it takes. Like an
/// [`Acquire`], it owns what it needs and borrows nothing.
#[must_use = "a campaign does nothing until win() or try_win() is called"]
pub struct Campaign {
    election: Election,
    acquire: Acquire,
    value: String,
    /// A wait or a deadline was set.
    limited: bool,
}

impl std::fmt::Debug for Campaign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Campaign")
            .field("election", &self.election.name)
            .field("value", &self.value)
            .field("acquire", &self.acquire)
            .finish()
    }
}

impl Campaign {
    /// Gives up after this long (counted from [`win`](Self::win)) with
    /// [`Error::Busy`]. Replaces an earlier [`deadline`](Self::deadline).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.acquire = self.acquire.wait(wait);
        self.limited = true;
        self
    }

    /// Gives up at `deadline` with [`Error::Busy`]. Replaces an earlier
    /// [`wait`](Self::wait).
    pub fn deadline(mut self, deadline: Instant) -> Self {
        self.acquire = self.acquire.deadline(deadline);
        self.limited = true;
        self
    }

    /// Ends the wait with [`Error::Cancelled`] when `token` is cancelled
    /// (at once between rounds, within one per-node timeout during one).
    pub fn cancel_on(mut self, token: &CancelToken) -> Self {
        self.acquire = self.acquire.cancel_on(token);
        self
    }

    /// Waits until elected, then proclaims the campaign's value and
    /// returns the leadership, kept alive from then on.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] when a [`wait`](Self::wait) or
    /// [`deadline`](Self::deadline) ran out, [`Error::Cancelled`],
    /// [`Error::NoQuorum`] when too few nodes answered the proclamation
    /// (the leadership is resigned) or a failure that lasts (bad
    /// credentials) stopped the campaign, [`Error::LockLost`] when the
    /// leadership ran out or was refused before it could be proclaimed,
    /// [`Error::TooSlow`] when the nodes answer too slowly for the TTL,
    /// [`Error::Shutdown`], [`Error::Config`] for an empty name or an
    /// unusable TTL. After `NoQuorum` (not a lasting one) or `LockLost`,
    /// campaigning again may well win.
    pub fn win(self) -> Result<Leadership, Error> {
        let acquire = if self.limited {
            self.acquire
        } else {
            self.acquire.wait(Duration::MAX)
        };
        let guard = acquire.keep_alive().lock_as("Campaign::win")?;
        Leadership::elected(self.election, guard, self.value, "Campaign::win")
    }

    /// One round: the leadership if nobody holds it now, `Ok(None)` if
    /// someone does.
    ///
    /// # Errors
    ///
    /// As [`win`](Self::win), except that a leadership held by another is
    /// `Ok(None)`.
    pub fn try_win(self) -> Result<Option<Leadership>, Error> {
        let guard = self.acquire.keep_alive().try_lock_as("Campaign::try_win")?;
        match guard {
            Some(guard) => Leadership::elected(
                self.election.clone(),
                guard,
                self.value,
                "Campaign::try_win",
            )
            .map(Some),
            None => Ok(None),
        }
    }
}

/// Leading an election, from [`Campaign::win`]: kept alive until resigned
/// or dropped (which resigns too).
#[must_use = "the leadership is resigned as soon as it is dropped"]
pub struct Leadership {
    election: Election,
    /// `None` once resigned.
    guard: Option<LockGuard>,
    term: u64,
    value: String,
    /// The number of the last proclamation.
    seq: u64,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.election.name)
            .field("term", &self.term)
            .field("value", &self.value)
            .field("leader", &self.is_leader())
            .finish()
    }
}

impl Leadership {
    /// A leadership just won with `guard`: proclaims `value`, or resigns
    /// and fails.
    fn elected(
        election: Election,
        guard: LockGuard,
        value: String,
        call: &str,
    ) -> Result<Leadership, Error> {
        // Always a token: an election's lock is always fenced.
        let term = guard.fencing_token().unwrap_or_default();
        let mut leadership = Leadership {
            election,
            guard: Some(guard),
            term,
            value: String::new(),
            seq: 0,
        };
        leadership.proclaim_as(&value, call)?;
        Ok(leadership)
    }

    /// This leadership's term: a fencing token, larger than that of every
    /// leadership won before this one's [`win`](Campaign::win) returned.
    ///
    /// What you may rely on: **order only**. Of two terms of one election,
    /// the larger belongs to the later leadership (under the conditions of
    /// every fencing token: see the README's "Fencing tokens" — after a
    /// node restarted empty, no client's clock may run ahead by more than
    /// the gap between two leaderships), so a store that keeps the largest
    /// term it has seen and refuses smaller ones refuses every deposed
    /// leader. Terms are not consecutive and are not times: a term
    /// is one more than the largest the nodes stored, but never below the
    /// wall clock in microseconds since the Unix epoch (so that terms keep
    /// growing after the nodes lost or expired what they stored), which
    /// makes them look like timestamps (`1764115200000000`). Do not read a
    /// time, a count of leaderships or a gap from them, and do not compare
    /// terms of different elections. They fit in an `i64` until the year
    /// 294 247, for stores that want a signed column.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The value last proclaimed.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// Until when this process is guaranteed to lead, as far as it knows
    /// now (the keep-alive moves it on; see [`LockGuard::valid_until`]).
    pub fn valid_until(&self) -> Instant {
        self.guard
            .as_ref()
            .map_or_else(Instant::now, LockGuard::valid_until)
    }

    /// Whether this process still leads: validity is left and the
    /// leadership was not lost. Cheap: no I/O.
    pub fn is_leader(&self) -> bool {
        self.guard.as_ref().is_some_and(LockGuard::is_valid)
    }

    /// `Ok` while this process leads; [`Error::LockLost`] once the
    /// leadership ran out or was lost. Cheap: no I/O. Call it before each
    /// step of the leader's work.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`].
    pub fn ensure_leader(&self) -> Result<(), Error> {
        match &self.guard {
            Some(guard) => guard.ensure_valid(),
            None => Err(self.resigned()),
        }
    }

    /// A token cancelled once this process stops leading, for any reason:
    /// the leadership's lock was lost or ran out, or it was resigned or
    /// dropped (see [`LockGuard::lost_token`]). Cancelled at once if it no
    /// longer leads.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_sync::Redlock;
    ///
    /// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
    /// let leadership = redlock.election("scheduler").campaign("host-a", Duration::from_secs(10)).win()?;
    /// let lost = leadership.lost_token();
    /// while !lost.sleep(Duration::from_secs(1)) {
    ///     // ... one tick of the leader's work ...
    /// }
    /// # Ok::<(), redlock_sync::Error>(())
    /// ```
    pub fn lost_token(&self) -> CancelToken {
        match &self.guard {
            Some(guard) => guard.lost_token(),
            None => {
                let token = CancelToken::new();
                token.cancel();
                token
            }
        }
    }

    /// `LockLost` for a leadership already resigned (never seen: only
    /// `resign(self)` and `Drop` take the guard).
    fn resigned(&self) -> Error {
        Error::lock_lost(
            &self.election.name,
            LostCause::NotHeld,
            (0, self.election.core.quorum()),
            Vec::new(),
        )
    }

    /// Changes the value the others see, on a majority, keeping the term.
    /// Only while leading.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when this process no longer leads;
    /// [`Error::NoQuorum`] when too few nodes answered, after the client's
    /// retries (`retry_count`, `retry_delay`) (the leadership
    /// stands; [`value`](Self::value) is unchanged, and a read may show
    /// either value until a proclamation succeeds).
    pub fn proclaim(&mut self, value: &str) -> Result<(), Error> {
        self.proclaim_as(value, "Leadership::proclaim")
    }

    fn proclaim_as(&mut self, value: &str, call: &str) -> Result<(), Error> {
        let Some(guard) = &self.guard else {
            return Err(self.resigned().in_call(call));
        };
        guard.ensure_valid().map_err(|err| err.in_call(call))?;
        let (core, lease) = guard.parts();
        core.proclaim(
            lease,
            &self.election.name,
            (self.term, &mut self.seq),
            value,
        )
        .map_err(|err| err.in_call(call))?;
        self.value = value.to_owned();
        Ok(())
    }

    /// Stops leading: clears the value and releases the leadership, so the
    /// next candidate can win at once.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`]: [`Error::LockLost`] if the leadership was
    /// already lost, [`Error::NoQuorum`] if too few nodes answered (it then
    /// expires after its TTL), [`Error::Shutdown`] if the client was shut
    /// down (the shutdown released it).
    pub fn resign(mut self) -> Result<(), Error> {
        match self.guard.take() {
            Some(guard) => {
                let (core, lease) = guard.parts();
                core.clear_proclamation(lease, &self.election.name);
                guard
                    .release()
                    .map_err(|err| err.in_call("Leadership::resign"))
            }
            None => Ok(()),
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            let (core, lease) = guard.parts();
            core.clear_proclamation(lease, &self.election.name);
            // Dropping the guard releases it (and warns if that fails).
            drop(guard);
        }
    }
}

/// Who leads, from [`Election::leader`] or an [`Observer`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    term: u64,
    value: String,
}

impl Leader {
    /// The value the leader proclaimed last.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The leader's term (see [`Leadership::term`]).
    pub fn term(&self) -> u64 {
        self.term
    }
}

/// Watches who leads an election, from [`Election::observe`]. The first
/// item is the state when it is first asked; after that each item is a
/// change: a new leader, a new value, or `None` for no leader. Changes
/// that come faster than they are asked for are coalesced, always ending
/// on the latest.
///
/// While it is asked for an item, the observer is registered on the
/// election's gate node, which wakes it (through the client's wake-up
/// subscriptions, as it wakes waiters) when a leader proclaims a value —
/// winning included — or resigns; it then reads who leads (one round on
/// every node). A leader that vanished (a crash, a partition) changes
/// nothing on the nodes until its leadership expires, so the observer
/// also reads every 500 ms. A read that fails (too few nodes answered) is
/// tried again then. With
/// [`release_notifications(false)`](crate::RedlockBuilder::release_notifications)
/// it only reads every 500 ms.
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_sync::Redlock;
///
/// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
/// let mut observer = redlock.election("scheduler").observe();
/// while let Some(change) = observer.next_timeout(Duration::from_secs(60)) {
///     match change {
///         Some(leader) => println!("led by {} (term {})", leader.value(), leader.term()),
///         None => println!("nobody leads"),
///     }
/// }
/// # Ok::<(), redlock_sync::Error>(())
/// ```
#[derive(Debug)]
pub struct Observer {
    election: Election,
    /// What the last item said (`None`: no item yet).
    last: Option<Seen>,
    /// Whether a read found the gate node ahead since the last item.
    followed: bool,
}

impl Observer {
    /// The next change (or, the first time, the state now), waiting at most
    /// `timeout`: `None` when nothing changed in time (or the election's
    /// name is empty, or the client was shut down: then at once, and the
    /// iterator ends).
    pub fn next_timeout(&mut self, timeout: Duration) -> Option<Option<Leader>> {
        let deadline = Instant::now().checked_add(timeout);
        let next = self.election.core.next_leader_after(
            &self.election.name,
            self.last.as_ref(),
            deadline,
            &mut self.followed,
        );
        match next {
            Ok(Some(now)) => {
                self.last = Some(now.clone());
                Some(now.map(|p| Leader {
                    term: p.term,
                    value: p.value.to_string(),
                }))
            }
            Ok(None) | Err(Error::Shutdown) => None,
            Err(err) => {
                log::warn!("redlock: cannot observe {:?}: {err}", self.election.name);
                None
            }
        }
    }
}

/// Blocks until the next change (the first item: the state now). Never
/// ends; use [`Observer::next_timeout`] to wait with a limit.
impl Iterator for Observer {
    type Item = Option<Leader>;

    fn next(&mut self) -> Option<Option<Leader>> {
        self.next_timeout(Duration::MAX)
    }
}
