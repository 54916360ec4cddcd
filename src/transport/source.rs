//! Where a node is: a fixed address, or whichever server a set of Redis
//! Sentinels names as a service's master right now.
//!
//! The lookup is ours, not the `redis` crate's (whose blocking lookup has
//! no timeouts: a Sentinel that accepts connections and never answers, or
//! a frozen master's `ROLE`, held it forever). Every step is bounded by the
//! connect timeout: connect to a Sentinel, ask it
//! `SENTINEL GET-MASTER-ADDR-BY-NAME`, then check with `ROLE` that the
//! server it names is a master. A Sentinel that fails is skipped; the one
//! that answered last is asked first. The connections to the Sentinels and
//! to the master are kept between lookups.
//!
//! Each Sentinel-managed node has one lookup thread; callers wait for its
//! answer only until their connect timeout, so a slow lookup delays that
//! node's reconnects, never a caller past its deadline, and never another
//! node.
//!
//! A failover does not always show on the old connection: Sentinel may
//! leave the old master running as a master for a while (until it
//! reconfigures it as a replica, when it answers `READONLY`). So the lookup
//! thread also asks the Sentinels every [`FOLLOW_EVERY`] while nobody asks
//! it, and a connection to another address than the latest answer is
//! replaced (the worker checks before each batch, a subscriber at each of
//! its pings). And a node whose master no lookup has confirmed for
//! [`CONFIRMED_FOR`] (the Sentinels cannot be reached) stops counting
//! towards a majority (`RedisLink`): a client cut off from the Sentinels
//! with the old master could otherwise keep a lock there, unseen by the
//! clients that follow the new one.
//!
//! # Threads
//!
//! The lookup thread, and whoever connects: the connection helpers, a
//! subscriber thread, the worker. They send a reply channel and wait on it
//! with a timeout; the thread answers every request waiting when a lookup
//! ends with that lookup, and records the master's address it found and
//! when (`resolved`, read by the worker and the subscriber). It stops once
//! the source is dropped (its request channel disconnects); a request that
//! finds it gone starts another.

use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the lookup thread asks the Sentinels who the master is when
/// nobody asked it meanwhile.
pub(crate) const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// How long after the last lookup that confirmed a node's master its votes
/// to take or keep a lock still count.
pub(crate) const CONFIRMED_FOR: Duration = Duration::from_secs(5);

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::error::FailureKind;

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
    /// How to log in to the master (database, user, password).
    master: redis::RedisConnectionInfo,
    /// The lookup thread's requests, once it runs (started by the first
    /// lookup: parsing a URL starts nothing).
    lookups: Mutex<Option<Sender<Sender<Answer>>>>,
    /// The master's address the last lookup found (safe to show), and
    /// when; shared with the lookup thread.
    resolved: Arc<Mutex<Option<(String, Instant)>>>,
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
            Source::Sentinel(sentinel) => sentinel.resolved.lock().as_ref().map(|r| r.0.clone()),
        }
    }

    /// How long no lookup has named the node's master, when that is more
    /// than [`CONFIRMED_FOR`] (`None`: a fixed address, or confirmed
    /// recently).
    pub(crate) fn unconfirmed_for(&self) -> Option<Duration> {
        let Source::Sentinel(sentinel) = self else {
            return None;
        };
        let since = match &*sentinel.resolved.lock() {
            Some((_, at)) => at.elapsed(),
            None => CONFIRMED_FOR,
        };
        (since >= CONFIRMED_FOR).then_some(since)
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
        master: redis::RedisConnectionInfo,
    ) -> Arc<SentinelSource> {
        Arc::new(SentinelSource {
            service,
            sentinels,
            master,
            lookups: Mutex::new(None),
            resolved: Arc::new(Mutex::new(None)),
        })
    }

    /// The lookup thread's request channel, starting the thread if needed
    /// (each of its steps bounded by `timeout`).
    fn lookups(&self, timeout: Duration) -> redis::RedisResult<Sender<Sender<Answer>>> {
        let mut lookups = self.lookups.lock();
        if let Some(sender) = &*lookups {
            return Ok(sender.clone());
        }
        let (sender, requests) = crossbeam_channel::unbounded();
        let finder = Finder {
            service: self.service.clone(),
            sentinels: self
                .sentinels
                .iter()
                .map(|info| (info.clone(), None))
                .collect(),
            master: self.master.clone(),
            at_master: None,
            first: 0,
            timeout,
        };
        let latest = self.resolved.clone();
        std::thread::Builder::new()
            .name("redlock-sentinel".into())
            .spawn(move || serve(finder, &requests, &latest))?;
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
        if self.lookups(timeout)?.send(reply).is_err() {
            // The thread is gone (it cannot be, short of a panic): the
            // next lookup starts another.
            *self.lookups.lock() = None;
            return Err(timed_out());
        }
        answer.recv_timeout(timeout).map_err(|_| timed_out())?
    }
}

/// The lookup thread: one lookup per batch of waiting requests, and one
/// every [`FOLLOW_EVERY`] when nobody asked; each found address goes to
/// `latest`, with the time it was found.
fn serve(
    mut finder: Finder,
    requests: &Receiver<Sender<Answer>>,
    latest: &Mutex<Option<(String, Instant)>>,
) {
    loop {
        let mut waiting = match requests.recv_timeout(FOLLOW_EVERY) {
            Ok(first) => vec![first],
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Vec::new(),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
        };
        waiting.extend(requests.try_iter());
        let answer = finder.find();
        if let Ok(client) = &answer {
            *latest.lock() = Some((address_of(client), Instant::now()));
        }
        for reply in waiting {
            let _ = reply.send(answer.clone());
        }
    }
}

/// The lookup thread's state: the Sentinels (and a connection to each
/// that answered), and a connection to the master last found.
struct Finder {
    service: String,
    sentinels: Vec<(redis::ConnectionInfo, Option<redis::Connection>)>,
    master: redis::RedisConnectionInfo,
    /// The master last found, its address and a connection to it.
    at_master: Option<(String, redis::Connection)>,
    /// The Sentinel to ask first: the one that answered last.
    first: usize,
    /// Bounds every step.
    timeout: Duration,
}

impl Finder {
    /// Asks the Sentinels in turn who the master is, until one names a
    /// server that says it is a master.
    fn find(&mut self) -> Answer {
        let mut last_err = None;
        let mut unknown = 0;
        for i in 0..self.sentinels.len() {
            let at = (self.first + i) % self.sentinels.len();
            match self.ask(at) {
                Ok(Some((host, port))) => match self.check(host, port) {
                    Ok(client) => {
                        self.first = at;
                        return Ok(client);
                    }
                    Err(err) => last_err = Some(err),
                },
                Ok(None) => unknown += 1,
                Err(err) => last_err = Some(err),
            }
        }
        let err = match last_err {
            Some(err) if unknown == 0 => err,
            _ => redis::RedisError::from((
                redis::ErrorKind::MasterNameNotFoundBySentinel,
                "unknown service",
            )),
        };
        Err(named(&self.service, &err))
    }

    /// Sentinel `at`'s answer: the master's host and port, `None` when it
    /// does not know the service.
    fn ask(&mut self, at: usize) -> redis::RedisResult<Option<(String, u16)>> {
        let (info, conn) = &mut self.sentinels[at];
        if conn.is_none() {
            *conn = Some(connect(info.clone(), self.timeout)?);
        }
        let Some(open) = conn.as_mut() else {
            return Ok(None);
        };
        let answer = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.service)
            .query(open);
        if answer.is_err() {
            *conn = None;
        }
        answer
    }

    /// A client for the server at `host:port` if it says it is a master
    /// (`ROLE`).
    fn check(&mut self, host: String, port: u16) -> Answer {
        let info = redis::IntoConnectionInfo::into_connection_info(redis::ConnectionAddr::Tcp(
            host, port,
        ))?
        .set_redis_settings(self.master.clone())
        .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
        let client = redis::Client::open(info)?;
        let address = address_of(&client);
        let mut conn = match self.at_master.take() {
            Some((at, conn)) if at == address => conn,
            _ => connect(client.get_connection_info().clone(), self.timeout)?,
        };
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut conn)?;
        let master = matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master");
        if !master {
            return Err(redis::RedisError::from(std::io::Error::other(format!(
                "the Sentinels name {address}, which is not a master (yet)"
            ))));
        }
        self.at_master = Some((address, conn));
        Ok(client)
    }
}

/// A connection whose connect, login and every later request are bounded
/// by `timeout`.
fn connect(
    info: redis::ConnectionInfo,
    timeout: Duration,
) -> redis::RedisResult<redis::Connection> {
    let conn = redis::Client::open(info)?.get_connection_with_timeout(timeout)?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    Ok(conn)
}

/// A lookup's failure, naming the service, of the kind the caller acts on:
/// refused credentials stay an authentication failure (retrying does not
/// help), a timeout a timeout, anything else a connection failure.
fn named(service: &str, err: &redis::RedisError) -> redis::RedisError {
    if err.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel {
        let text = format!(
            "no Sentinel knows the service {service:?}; check the name after the Sentinels' addresses"
        );
        return redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::NotFound, text));
    }
    let text = format!("the Sentinels of service {service:?} named no usable master: {err}");
    match super::conn::classify(err) {
        FailureKind::Auth => redis::RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "credentials refused",
            format!(
                "{text}; check the password in the URL (the master's) and RedlockBuilder::sentinel_password (the Sentinels')"
            ),
        )),
        FailureKind::Timeout => {
            redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, text))
        }
        _ => redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::NotFound, text)),
    }
}
