//! What an operator sees of a lock: [`Holding`], as
//! [`Redlock::inspect`](crate::Redlock::inspect) and the other primitives'
//! `inspect` find it on a majority of the nodes.

use std::time::Duration;

/// A hold that a majority of the nodes agree on: the same holder (the
/// same token) on at least `N/2 + 1` nodes.
///
/// A snapshot, taken when the inspection returned: the holder may release,
/// extend or lose it at any moment after.
///
/// ```no_run
/// use redlock_sync::Redlock;
///
/// let redlock = Redlock::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
/// match redlock.inspect("reports:nightly")? {
///     Some(holding) => println!("held for {:?} more", holding.remaining()),
///     None => println!("free"),
/// }
/// # Ok::<(), redlock_sync::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holding {
    remaining: Duration,
    fencing_token: Option<u64>,
}

impl Holding {
    pub(crate) fn new(remaining: Duration, fencing_token: Option<u64>) -> Self {
        Holding {
            remaining,
            fencing_token,
        }
    }

    /// How long the hold stands on a majority at least: what is left on
    /// the node where it runs out first among the majority that lasts
    /// longest, less the time the inspection took and the clock-drift
    /// allowance, as a holder counts its own validity. `Duration::MAX` for
    /// keys that never expire (set without a TTL by something other than a
    /// Redlock client).
    pub fn remaining(&self) -> Duration {
        self.remaining
    }

    /// The holder's fencing token, when it locked on a client built with
    /// [`fencing(true)`](crate::RedlockBuilder::fencing) (its key says
    /// so); `None` for a holder that did not fence, or a key that another
    /// library set.
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }
}

/// Who holds a reader-writer lock on a majority of the nodes, as
/// [`RwLock::inspect`](crate::RwLock::inspect) found it: a writer, readers,
/// or nobody.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RwHolders {
    pub(crate) writer: Option<Holding>,
    pub(crate) readers: Vec<Holding>,
}

impl RwHolders {
    /// The writer, if one holds it.
    pub fn writer(&self) -> Option<&Holding> {
        self.writer.as_ref()
    }

    /// The readers that hold it, longest remaining first.
    pub fn readers(&self) -> &[Holding] {
        &self.readers
    }

    /// Whether nobody holds it.
    pub fn is_free(&self) -> bool {
        self.writer.is_none() && self.readers.is_empty()
    }
}
