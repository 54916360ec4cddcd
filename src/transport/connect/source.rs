//! Where a node is: a fixed address, or whichever server a set of Redis
//! Sentinels names as a service's master right now.
//!
//! The lookup is ours, not the `redis` crate's (whose blocking lookup has
//! no timeouts: a Sentinel that accepts connections and never answers, or
//! a frozen master's `ROLE`, held it forever). Every step is bounded by the
//! connect timeout: connect to each Sentinel, ask it
//! `SENTINEL GET-MASTER-ADDR-BY-NAME`, and once a majority of the Sentinels
//! listed name one server, check with `ROLE` that it is a master. A
//! Sentinel that fails is skipped; one in a minority partition (still
//! naming the old master) is outvoted. The connections to the Sentinels
//! and to the master are kept between lookups.
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
//! its pings). And a connection whose server no lookup has confirmed as
//! the master within the confirmation window (see
//! [`SentinelSource::window`]; the Sentinels cannot be reached, or a
//! majority of them no longer name it) stops counting towards a majority
//! (`RedisLink`): a client cut off from the Sentinels with the old master
//! could otherwise keep a lock there, unseen by the clients that follow
//! the new one.
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the lookup thread asks the Sentinels who the master is when
/// nobody asked it meanwhile.
pub(crate) const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// The shortest confirmation window (see [`SentinelSource::window`]).
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
    /// A Redis Cluster, reached through its seeds (see `cluster.rs`).
    Cluster(Arc<super::cluster::ClusterSource>),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the connection info: it holds the password.
        match self {
            Source::Direct(_) => f.write_str("Direct"),
            Source::Sentinel(s) => write!(f, "Sentinel({:?})", s.service),
            Source::Cluster(c) => write!(f, "{c:?}"),
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
    /// What the last lookup found; shared with the lookup thread.
    resolved: Arc<Mutex<Option<Found>>>,
    /// A nudge is waiting for the lookup thread (cleared when a lookup
    /// starts): nudges between two lookups are one.
    nudged: Arc<AtomicBool>,
    /// The client shut down: the lookup thread stops and none starts again.
    closed: AtomicBool,
}

/// A master a lookup found.
struct Found {
    /// Its address (safe to show).
    address: String,
    /// When that lookup started.
    asked: Instant,
    /// A client for it.
    client: redis::Client,
}

impl Source {
    /// Stops what the source runs in the background (a Sentinel service's
    /// lookup thread): the client shut down.
    pub(crate) fn close(&self) {
        if let Source::Sentinel(sentinel) = self {
            sentinel.close();
        }
    }

    /// A client for the node's current address: for a Sentinel service,
    /// as the Sentinels answer within `timeout`.
    pub(crate) fn client(&self, timeout: Duration) -> redis::RedisResult<redis::Client> {
        match self {
            Source::Direct(client) => Ok((**client).clone()),
            Source::Sentinel(sentinel) => sentinel.lookup(timeout),
            Source::Cluster(cluster) => Ok(cluster.client()),
        }
    }

    /// The address the last lookup found (a Sentinel-managed node only).
    pub(crate) fn resolved(&self) -> Option<String> {
        match self {
            Source::Direct(_) | Source::Cluster(_) => None,
            Source::Sentinel(sentinel) => {
                sentinel.resolved.lock().as_ref().map(|f| f.address.clone())
            }
        }
    }

    /// Why the votes of a connection to `connected` (an address from
    /// [`address_of`]) do not count: no lookup within the confirmation
    /// window named that server as the master (`None`: a fixed address,
    /// or confirmed). When so, also asks the lookup thread for a lookup
    /// (starting it again if it is gone) without waiting for it.
    pub(crate) fn unconfirmed(&self, connected: &str, timeout: Duration) -> Option<String> {
        let Source::Sentinel(sentinel) = self else {
            return None;
        };
        let window = sentinel.window(timeout);
        let why = match sentinel
            .resolved
            .lock()
            .as_ref()
            .map(|f| (&*f.address, f.asked))
        {
            Some((at, when)) if at == connected && when.elapsed() < window => return None,
            Some((at, _)) if at != connected => {
                format!("the Sentinels name {at} as the master now, not {connected}")
            }
            Some((_, when)) => format!(
                "a majority of the Sentinels has not confirmed for {} that {connected} is still \
                 the master",
                crate::human::Human(when.elapsed())
            ),
            None => format!("no majority of the Sentinels has confirmed {connected} yet"),
        };
        sentinel.nudge(timeout);
        Some(format!(
            "{why}; it counts again once they do (check that this client reaches the Sentinels)"
        ))
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
            nudged: Arc::new(AtomicBool::new(false)),
            closed: AtomicBool::new(false),
        })
    }

    /// Stops the lookup thread (once it has answered what it was asked)
    /// and starts none again: the client shut down.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        drop(self.lookups.lock().take());
    }

    /// The lookup thread's request channel, starting the thread if needed
    /// (each of its steps bounded by `timeout`).
    fn lookups(&self, timeout: Duration) -> redis::RedisResult<Sender<Sender<Answer>>> {
        let mut lookups = self.lookups.lock();
        if let Some(sender) = &*lookups {
            return Ok(sender.clone());
        }
        if self.closed.load(Ordering::SeqCst) {
            return Err(redis::RedisError::from(std::io::Error::other(
                "the client was shut down (Redlock::shutdown)",
            )));
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
            timeout,
        };
        let latest = self.resolved.clone();
        let nudged = self.nudged.clone();
        std::thread::Builder::new()
            .name("redlock-sentinel".into())
            .spawn(move || serve(finder, &requests, &latest, &nudged))?;
        *lookups = Some(sender.clone());
        Ok(sender)
    }

    /// The confirmation window: how long after a lookup started that
    /// found a server the votes of a connection to it count. At least
    /// [`CONFIRMED_FOR`]; longer when one lookup may take longer (every
    /// Sentinel and the master slow to answer, each step bounded by
    /// `timeout`, twice: connect and query). Lookups slower still (or a
    /// slow name lookup, which has no bound) can let it lapse: the node
    /// then stops counting until the next lookup ends — safe, not live.
    pub(crate) fn window(&self, timeout: Duration) -> Duration {
        let steps = u32::try_from(self.sentinels.len() + 1).unwrap_or(u32::MAX);
        let lookup = timeout.saturating_mul(2).saturating_mul(steps);
        (FOLLOW_EVERY + lookup).max(CONFIRMED_FOR)
    }

    /// Asks the lookup thread for a lookup, answered to nobody (unless
    /// one is asked for already).
    fn nudge(&self, timeout: Duration) {
        if self.nudged.swap(true, Ordering::AcqRel) {
            return;
        }
        let (reply, _) = crossbeam_channel::bounded(1);
        let sent = match self.lookups(timeout) {
            Ok(lookups) => {
                let sent = lookups.send(reply).is_ok();
                if !sent {
                    self.forget(&lookups);
                }
                sent
            }
            Err(_) => false,
        };
        if !sent {
            // Nobody will clear it: the next nudge tries again.
            self.nudged.store(false, Ordering::Release);
        }
    }

    /// Forgets the lookup thread's channel `gone` (its thread is gone:
    /// the next lookup starts another), unless another replaced it.
    fn forget(&self, gone: &Sender<Sender<Answer>>) {
        let mut lookups = self.lookups.lock();
        if lookups.as_ref().is_some_and(|s| s.same_channel(gone)) {
            *lookups = None;
        }
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
        // The lookup thread asks again every second: a master it found
        // within the window is still the answer (a lookup past a silent
        // Sentinel may take longer than the caller may wait).
        let cached = self
            .resolved
            .lock()
            .as_ref()
            .filter(|found| found.asked.elapsed() < self.window(timeout))
            .map(|found| found.client.clone());
        if let Some(client) = cached {
            // A reconnect may follow a failover: look again at once.
            self.nudge(timeout);
            return Ok(client);
        }
        let lookups = self.lookups(timeout)?;
        if lookups.send(reply).is_err() {
            // The thread is gone (it cannot be, short of a panic): the
            // next lookup starts another.
            self.forget(&lookups);
            return Err(redis::RedisError::from(std::io::Error::other(format!(
                "the Sentinel lookup thread of service {:?} stopped; the next attempt starts \
                 another",
                self.service
            ))));
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
    latest: &Mutex<Option<Found>>,
    nudged: &AtomicBool,
) {
    loop {
        let mut waiting = match requests.recv_timeout(FOLLOW_EVERY) {
            Ok(first) => vec![first],
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Vec::new(),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
        };
        waiting.extend(requests.try_iter());
        // What the Sentinels say holds from when they were asked, not
        // from when the lookup ended.
        let asked = Instant::now();
        nudged.store(false, Ordering::Release);
        let answer = finder.find();
        if let Ok(client) = &answer {
            *latest.lock() = Some(Found {
                address: address_of(client),
                asked,
                client: client.clone(),
            });
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
    /// Each Sentinel, and a connection to it with its id (`SENTINEL
    /// MYID`) once it answered.
    sentinels: Vec<(redis::ConnectionInfo, Option<(redis::Connection, String)>)>,
    master: redis::RedisConnectionInfo,
    /// The master last found, its address and a connection to it.
    at_master: Option<(String, redis::Connection)>,
    /// Bounds every step.
    timeout: Duration,
}

impl Finder {
    /// Asks the Sentinels who the master is (those that answered last
    /// time first, until a majority agree); the server a majority of them
    /// names, if it says it is a master.
    fn find(&mut self) -> Answer {
        let majority = self.sentinels.len() / 2 + 1;
        let mut order: Vec<usize> = (0..self.sentinels.len()).collect();
        order.sort_by_key(|&at| self.sentinels[at].1.is_none());
        // Per master named, the ids of the Sentinels that named it: one
        // Sentinel listed under two names (`localhost`, `127.0.0.1`) votes
        // once.
        let mut named_by: Vec<((String, u16), Vec<String>)> = Vec::new();
        let mut unknown = 0;
        let mut errors = Vec::new();
        for at in order {
            match self.ask(at) {
                Ok((Some(master), id)) => match named_by.iter_mut().find(|(m, _)| *m == master) {
                    Some((_, ids)) if ids.contains(&id) => {}
                    Some((_, ids)) => ids.push(id),
                    None => named_by.push((master, vec![id])),
                },
                Ok((None, _)) => unknown += 1,
                Err(err) => errors.push(err),
            }
            if named_by.iter().any(|(_, ids)| ids.len() >= majority) {
                break;
            }
        }
        if let Some(((host, port), _)) = named_by.iter().find(|(_, ids)| ids.len() >= majority) {
            return self
                .check(host.clone(), *port)
                .map_err(|err| named(&self.service, &err));
        }
        // Refused credentials are permanent only when they alone rule out
        // a majority (one misconfigured Sentinel among others that are
        // down for now is not).
        let refusals: Vec<_> = errors
            .iter()
            .filter(|e| crate::transport::trust::failure::classify(e) == FailureKind::Auth)
            .collect();
        let worst = refusals
            .first()
            .copied()
            .or_else(|| errors.iter().find(|e| e.is_timeout()))
            .or(errors.first());
        let err = match worst {
            _ if unknown == self.sentinels.len() => redis::RedisError::from((
                redis::ErrorKind::MasterNameNotFoundBySentinel,
                "unknown service",
            )),
            Some(err) if self.sentinels.len() - refusals.len() < majority => err.clone(),
            _ => redis::RedisError::from(std::io::Error::other(format!(
                "{} of {} Sentinels answered; no {majority} of them named the same master{}",
                named_by.iter().map(|(_, ids)| ids.len()).sum::<usize>() + unknown,
                self.sentinels.len(),
                worst
                    .map(|e| format!(" (another said: {e})"))
                    .unwrap_or_default()
            ))),
        };
        Err(named(&self.service, &err))
    }

    /// Sentinel `at`'s answer — the master's host and port, `None` when it
    /// does not know the service — and the Sentinel's id.
    fn ask(&mut self, at: usize) -> redis::RedisResult<(Option<(String, u16)>, String)> {
        let (info, kept) = &mut self.sentinels[at];
        let (mut conn, id) = match kept.take() {
            Some(kept) => kept,
            None => {
                let mut conn = connect(info.clone(), self.timeout)?;
                let id: String = redis::cmd("SENTINEL").arg("MYID").query(&mut conn)?;
                (conn, id)
            }
        };
        let answer = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.service)
            .query(&mut conn);
        if answer.is_ok() {
            *kept = Some((conn, id.clone()));
        }
        answer.map(|master| (master, id))
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
        let master = is_master(&mut conn)?;
        if !master {
            return Err(redis::RedisError::from(std::io::Error::other(format!(
                "the Sentinels name {address}, which is not a master (yet)"
            ))));
        }
        self.at_master = Some((address, conn));
        Ok(client)
    }
}

/// Whether the server says it is a master: `ROLE`, or `INFO replication`
/// for a user whose ACL lacks `ROLE` (the documented one has `+info`).
fn is_master(conn: &mut redis::Connection) -> redis::RedisResult<bool> {
    match redis::cmd("ROLE").query::<Vec<redis::Value>>(conn) {
        Ok(role) => Ok(matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master")),
        Err(err) if err.code().is_some() => {
            let info: String = redis::cmd("INFO").arg("replication").query(conn)?;
            Ok(info.lines().any(|line| line.trim_end() == "role:master"))
        }
        Err(err) => Err(err),
    }
}

/// A connection whose connect, login and every later request are bounded
/// by `timeout`.
fn connect(
    info: redis::ConnectionInfo,
    timeout: Duration,
) -> redis::RedisResult<redis::Connection> {
    let conn = super::dial::connect(&redis::Client::open(info)?, timeout)?;
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
        // Its own kind: `build` refuses a node list naming an unknown
        // service.
        return redis::RedisError::from((
            redis::ErrorKind::MasterNameNotFoundBySentinel,
            "unknown service",
            text,
        ));
    }
    let text = format!("the Sentinels of service {service:?} named no usable master: {err}");
    match crate::transport::trust::failure::classify(err) {
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
