//! A client's life: open, then shut down once ([`Core::shutdown`]).
//!
//! [`Life`] knows every lease a guard holds (so that a shutdown can release
//! them) and how many calls are under way (so that a shutdown waits for
//! their clean-ups before it stops the threads that send them).
//!
//! # Shared state and who touches it
//!
//! One mutex, held only for a lookup, never across I/O:
//! * callers entering and leaving a core operation ([`Life::enter`]);
//! * a new guard's lease registering ([`Life::adopt`]) and a released or
//!   dropped one leaving ([`Life::forget`]);
//! * the shutting-down caller: [`Life::close`] sets `closed` and takes the
//!   leases under the same lock, so every lease is either taken by it (and
//!   released by the shutdown) or refused registration afterwards (and
//!   abandoned by its acquisition); and [`Life::wait_idle`].
//!
//! [`Core::shutdown`]: super::Core::shutdown

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::Lease;
use crate::error::Error;

#[derive(Default)]
pub(crate) struct Life {
    state: Mutex<State>,
    /// Signalled when the last call under way leaves after the close.
    idle: Condvar,
}

#[derive(Default)]
struct State {
    closed: bool,
    /// Calls under way.
    busy: usize,
    /// The leases guards hold, by address. The `Weak` keeps the allocation,
    /// so no other lease can take an address while its entry is here.
    leases: HashMap<usize, Weak<Lease>>,
}

/// A call under way; leaving it is dropping it.
pub(crate) struct Busy<'a>(&'a Life);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.busy -= 1;
        if state.busy == 0 && state.closed {
            self.0.idle.notify_all();
        }
    }
}

fn key(lease: &Arc<Lease>) -> usize {
    Arc::as_ptr(lease) as usize
}

impl Life {
    /// A call starts: `Err(Shutdown)` once the client is shut down.
    pub(crate) fn enter(&self) -> Result<Busy<'_>, Error> {
        let mut state = self.state.lock();
        if state.closed {
            return Err(Error::Shutdown);
        }
        state.busy += 1;
        Ok(Busy(self))
    }

    /// Whether the client is shut down.
    pub(crate) fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// Registers a guard's lease: false once the client is shut down (the
    /// caller then releases it itself).
    pub(crate) fn adopt(&self, lease: &Arc<Lease>) -> bool {
        let mut state = self.state.lock();
        if state.closed {
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

    /// Shuts the client: from now on every call fails. Returns the leases
    /// guards hold, for the caller to release, or `None` if it was already
    /// shut.
    pub(crate) fn close(&self) -> Option<Vec<Arc<Lease>>> {
        let mut state = self.state.lock();
        if std::mem::replace(&mut state.closed, true) {
            return None;
        }
        let leases = std::mem::take(&mut state.leases);
        Some(leases.into_values().filter_map(|l| l.upgrade()).collect())
    }

    /// Waits until no call is under way, or `until`: whether none is.
    pub(crate) fn wait_idle(&self, until: Instant) -> bool {
        let mut state = self.state.lock();
        while state.busy > 0 {
            if self.idle.wait_until(&mut state, until).timed_out() {
                return state.busy == 0;
            }
        }
        true
    }
}
