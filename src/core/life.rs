//! A client's life: open, shutting down, shut down ([`Core::shutdown`]).
//!
//! [`Life`] knows every lease a guard holds (so that a shutdown can release
//! them) and how many calls are under way (so that the transport stops only
//! once their clean-ups went out).
//!
//! # Shared state and who touches it
//!
//! One mutex, held only for a lookup, never across I/O:
//! * callers entering and leaving a core operation ([`Life::enter`],
//!   through `Core::enter`, and dropping its [`Busy`]); the last to leave after a shutdown that could
//!   not wait for it stops the transport;
//! * a new guard's lease registering ([`Life::adopt`]) and a released or
//!   dropped one leaving ([`Life::forget`]);
//! * the shutting-down caller: [`Life::close`] ends `Open` and takes the
//!   leases under the same lock, so every lease is either taken by it (and
//!   released by the shutdown) or refused registration afterwards (and
//!   released by its acquisition); [`Life::wait_idle`] and
//!   [`Life::finished`];
//! * a second shutting-down caller, waiting in [`Life::wait_finished`].
//!
//! [`Core::shutdown`]: super::Core::shutdown

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::lease::Lease;
use crate::error::Error;
use crate::transport::Transport;

/// How long the last call under way, ending after a shutdown that could not
/// wait for it, waits for the workers to send what it queued.
const LATE_DRAIN: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(crate) struct Life {
    state: Mutex<State>,
    /// Signalled when the last call under way leaves after the close, and
    /// when the shutdown finishes.
    changed: Condvar,
}

#[derive(Default)]
struct State {
    phase: Phase,
    /// Calls under way.
    busy: usize,
    /// The shutdown could not wait for the calls under way: the last of
    /// them stops the transport.
    stop_when_idle: bool,
    /// The leases guards hold, by address. The `Weak` keeps the allocation,
    /// so no other lease can take an address while its entry is here.
    leases: HashMap<usize, Weak<Lease>>,
}

#[derive(Default)]
enum Phase {
    #[default]
    Open,
    /// A shutdown is releasing and stopping.
    Closing,
    /// Shut down, with the first shutdown's result.
    Closed(Result<(), Error>),
}

/// A call under way; it ends when this is dropped.
pub(crate) struct Busy<'a> {
    life: &'a Life,
    /// Stopped by the last call to leave after a shutdown that could not
    /// wait for it.
    transport: &'a Transport,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        if self.life.leave() {
            self.transport.stop(Instant::now() + LATE_DRAIN);
        }
    }
}

fn key(lease: &Arc<Lease>) -> usize {
    Arc::as_ptr(lease) as usize
}

impl Life {
    /// A call starts: `Err(Shutdown)` once the client is shutting down.
    /// The last call to leave after a shutdown that could not wait for it
    /// stops `transport`.
    pub(crate) fn enter<'a>(&'a self, transport: &'a Transport) -> Result<Busy<'a>, Error> {
        let mut state = self.state.lock();
        if !matches!(state.phase, Phase::Open) {
            return Err(Error::Shutdown);
        }
        state.busy += 1;
        Ok(Busy {
            life: self,
            transport,
        })
    }

    /// A call ends: true if it was the last after a shutdown that left the
    /// transport's stop to it.
    fn leave(&self) -> bool {
        let mut state = self.state.lock();
        state.busy -= 1;
        if state.busy > 0 || matches!(state.phase, Phase::Open) {
            return false;
        }
        self.changed.notify_all();
        std::mem::take(&mut state.stop_when_idle)
    }

    /// Whether the client is shutting down or shut down.
    pub(crate) fn is_closed(&self) -> bool {
        !matches!(self.state.lock().phase, Phase::Open)
    }

    /// Registers a guard's lease: false once the client is shutting down
    /// (the caller then releases it itself).
    pub(crate) fn adopt(&self, lease: &Arc<Lease>) -> bool {
        let mut state = self.state.lock();
        if !matches!(state.phase, Phase::Open) {
            return false;
        }
        state.leases.insert(key(lease), Arc::downgrade(lease));
        true
    }

    /// A guard's lease was released or dropped.
    pub(crate) fn forget(&self, lease: &Arc<Lease>) {
        self.state.lock().leases.remove(&key(lease));
    }

    /// Whether a valid lease a guard holds is one that `matches`.
    pub(crate) fn holds(&self, matches: impl Fn(&Lease) -> bool) -> bool {
        let leases: Vec<Arc<Lease>> = {
            let state = self.state.lock();
            state.leases.values().filter_map(Weak::upgrade).collect()
        };
        leases
            .iter()
            .any(|lease| !lease.remaining().is_zero() && matches(lease))
    }

    /// Begins the shutdown: from now on every call fails. Returns the
    /// leases guards hold, for the caller to release, or `None` if another
    /// shutdown began first.
    pub(crate) fn close(&self) -> Option<Vec<Arc<Lease>>> {
        let mut state = self.state.lock();
        if !matches!(state.phase, Phase::Open) {
            return None;
        }
        state.phase = Phase::Closing;
        let leases = std::mem::take(&mut state.leases);
        Some(leases.into_values().filter_map(|l| l.upgrade()).collect())
    }

    /// Waits until no call is under way, or `until`: whether none is. If
    /// some still are, the last of them stops the transport when it ends.
    pub(crate) fn wait_idle(&self, until: Instant) -> bool {
        let mut state = self.state.lock();
        while state.busy > 0 {
            if self.changed.wait_until(&mut state, until).timed_out() && state.busy > 0 {
                state.stop_when_idle = true;
                return false;
            }
        }
        true
    }

    /// The shutdown ended with `result`: later shutdowns return it.
    pub(crate) fn finished(&self, result: &Result<(), Error>) {
        self.state.lock().phase = Phase::Closed(result.clone());
        self.changed.notify_all();
    }

    /// For a shutdown that found another under way: that one's result once
    /// it ends, or `Shutdown` if it has not ended by `until`.
    pub(crate) fn wait_finished(&self, until: Instant) -> Result<(), Error> {
        let mut state = self.state.lock();
        loop {
            if let Phase::Closed(result) = &state.phase {
                return result.clone();
            }
            if self.changed.wait_until(&mut state, until).timed_out() {
                return match &state.phase {
                    Phase::Closed(result) => result.clone(),
                    _ => Err(Error::Shutdown),
                };
            }
        }
    }
}
