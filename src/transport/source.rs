//! Where a node is: a fixed address, or whichever server a set of Redis
//! Sentinels names as a service's master right now.
//!
//! The `redis` crate's `sentinel` feature does the lookup. Its blocking
//! lookup has no timeouts (a Sentinel that accepts the connection and
//! never answers holds it forever), so each Sentinel-managed node has one
//! lookup thread that owns the `redis::sentinel::Sentinel`, and callers
//! wait for its answer only until their connect timeout. A lookup stuck on
//! a silent Sentinel delays that node's reconnects, never a caller past
//! its deadline, and never another node.
//!
//! A failover does not always show on the old connection: Sentinel may
//! leave the old master running as a master for a while (until it
//! reconfigures it as a replica, when it answers `READONLY`). So the lookup
//! thread also asks the Sentinels every [`FOLLOW_EVERY`] while nobody asks
//! it, and a connection to another address than the latest answer is
//! replaced (the worker checks before each batch, a subscriber at each of
//! its pings).
//!
//! # Threads
//!
//! The lookup thread, and whoever connects: the connection helpers, a
//! subscriber thread, the worker. They send a reply channel and wait on it
//! with a timeout; the thread answers every request waiting when a lookup
//! ends with that lookup, and records the master's address it found
//! (`latest`, read by the worker and the subscriber). It stops once the
//! source is dropped (its request channel disconnects).

use std::sync::Arc;
use std::time::Duration;

/// How often the lookup thread asks the Sentinels who the master is when
/// nobody asked it meanwhile.
pub(crate) const FOLLOW_EVERY: Duration = Duration::from_secs(1);

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

/// A node's place.
#[derive(Clone)]
pub(crate) enum Source {
    /// A fixed address.
    Direct(Box<redis::Client>),
    /// A Sentinel service's current master.
    Sentinel(Arc<SentinelSource>),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the connection info: it holds the password.
        match self {
            Source::Direct(_) => f.write_str("Direct"),
            Source::Sentinel(s) => write!(f, "Sentinel({:?})", s.service),
        }
    }
}

/// What a lookup answers: a client for the master, or why not.
type Answer = redis::RedisResult<redis::Client>;

/// A Sentinel-managed node: its service name, and its lookup thread.
pub(crate) struct SentinelSource {
    service: String,
    sentinels: Vec<redis::ConnectionInfo>,
    master: redis::sentinel::SentinelNodeConnectionInfo,
    /// The lookup thread's requests, once it runs (started by the first
    /// lookup: parsing a URL starts nothing).
    lookups: Mutex<Option<Sender<Sender<Answer>>>>,
    /// The master's address the last lookup found (safe to show); shared
    /// with the lookup thread.
    resolved: Arc<Mutex<Option<String>>>,
}

impl Source {
    /// A client for the node's current address: for a Sentinel service,
    /// as the Sentinels answer within `timeout`.
    pub(crate) fn client(&self, timeout: Duration) -> redis::RedisResult<redis::Client> {
        match self {
            Source::Direct(client) => Ok((**client).clone()),
            Source::Sentinel(sentinel) => sentinel.lookup(timeout),
        }
    }

    /// The address the last lookup found (a Sentinel-managed node only).
    pub(crate) fn resolved(&self) -> Option<String> {
        match self {
            Source::Direct(_) => None,
            Source::Sentinel(sentinel) => sentinel.resolved.lock().clone(),
        }
    }

    /// Whether the node is a Sentinel service's master.
    pub(crate) fn is_sentinel(&self) -> bool {
        matches!(self, Source::Sentinel(_))
    }

    /// Whether a connection to `connected` (an address from
    /// [`address_of`]) should be replaced: the Sentinels name another
    /// master now.
    pub(crate) fn moved_from(&self, connected: &str) -> bool {
        self.resolved().is_some_and(|latest| latest != connected)
    }
}

/// The address a client connects to, as [`Source::resolved`] says it.
pub(crate) fn address_of(client: &redis::Client) -> String {
    client.get_connection_info().addr().to_string()
}

impl SentinelSource {
    /// A source for `service` (`sentinels`: the Sentinels' connection
    /// info; `master`: what to connect to the master with). Its lookup
    /// thread starts with the first lookup.
    pub(crate) fn new(
        service: String,
        sentinels: Vec<redis::ConnectionInfo>,
        master: redis::sentinel::SentinelNodeConnectionInfo,
    ) -> Arc<SentinelSource> {
        Arc::new(SentinelSource {
            service,
            sentinels,
            master,
            lookups: Mutex::new(None),
            resolved: Arc::new(Mutex::new(None)),
        })
    }

    /// The lookup thread's request channel, starting the thread if needed.
    fn lookups(&self) -> redis::RedisResult<Sender<Sender<Answer>>> {
        let mut lookups = self.lookups.lock();
        if let Some(sender) = &*lookups {
            return Ok(sender.clone());
        }
        let (sender, requests) = crossbeam_channel::unbounded();
        let (name, sentinels, master) = (
            self.service.clone(),
            self.sentinels.clone(),
            self.master.clone(),
        );
        let latest = self.resolved.clone();
        std::thread::Builder::new()
            .name("redlock-sentinel".into())
            .spawn(move || serve(&name, sentinels, &master, &requests, &latest))?;
        *lookups = Some(sender.clone());
        Ok(sender)
    }

    fn lookup(&self, timeout: Duration) -> Answer {
        let (reply, answer) = crossbeam_channel::bounded(1);
        let timed_out = || {
            let detail = format!(
                "no Sentinel of service {:?} named its master within {timeout:?}",
                self.service
            );
            redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, detail))
        };
        if self.lookups()?.send(reply).is_err() {
            return Err(timed_out());
        }
        answer.recv_timeout(timeout).map_err(|_| timed_out())?
    }
}

/// The lookup thread: one lookup per batch of waiting requests, and one
/// every [`FOLLOW_EVERY`] when nobody asked; each found address goes to
/// `latest`.
fn serve(
    service: &str,
    sentinels: Vec<redis::ConnectionInfo>,
    master: &redis::sentinel::SentinelNodeConnectionInfo,
    requests: &Receiver<Sender<Answer>>,
    latest: &Mutex<Option<String>>,
) {
    let mut sentinel = redis::sentinel::Sentinel::build(sentinels);
    loop {
        let mut waiting = match requests.recv_timeout(FOLLOW_EVERY) {
            Ok(first) => vec![first],
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Vec::new(),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
        };
        waiting.extend(requests.try_iter());
        let answer = match &mut sentinel {
            Ok(sentinel) => sentinel.master_for(service, Some(master)),
            Err(err) => Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "the Sentinel addresses are not usable",
                err.to_string(),
            ))),
        };
        let answer = answer.map_err(|err| named(service, &err));
        if let Ok(client) = &answer {
            *latest.lock() = Some(address_of(client));
        }
        for reply in waiting {
            let _ = reply.send(answer.clone());
        }
    }
}

/// A lookup's failure, naming the service (the `redis` crate's message
/// may not).
fn named(service: &str, err: &redis::RedisError) -> redis::RedisError {
    let text = if err.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel {
        format!(
            "no Sentinel knows the service {service:?}; check the name after the Sentinels' addresses"
        )
    } else {
        format!("the Sentinels of service {service:?} named no usable master: {err}")
    };
    redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::NotFound, text))
}
