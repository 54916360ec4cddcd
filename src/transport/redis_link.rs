//! The real [`Link`]: one pooled connection per node, kept checked out
//! between batches, with each batch written as one pipeline and its replies
//! read in order.
//!
//! Nothing here orders commands across a reconnect: a command still in
//! flight on a dropped connection may reach Redis after the replacement's.
//! Nor within a batch, for a script the node refused by its hash: it goes
//! again after the rest of its batch (see [`exchange`]).
//! Every command is harmless late: an acquisition's key expires by its TTL
//! (and a failed round releases it; on a gate node, where a late one may
//! also queue a waiter that already left, the key is one vote among N and
//! the waiter drops out after its alive period), an extension never
//! shortens a key, a release only acts while the key
//! holds that acquisition's token, and a fence value is only ever raised.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::admission::examine;
use super::codec::{encode, interpret};
use super::conn::{NodeConn, NodeManager, NodeShared};
use super::failure::classify;
use super::link::Link;
use super::request::Op;
use super::request::Request;
use super::scripts::Sent;
use super::source::Source;
use crate::algorithm::Answer;
use crate::error::{FailureKind, NodeFailure};

pub(crate) struct RedisLink {
    shared: Arc<NodeShared>,
    pool: r2d2::Pool<NodeManager>,
    connect_timeout: Duration,
    /// The connection in use, kept checked out between batches (the worker is
    /// the pool's only user); returned to the pool, and so dropped, once
    /// broken.
    conn: Option<r2d2::PooledConnection<NodeManager>>,
    /// A Sentinel-managed node's source: a connection to another address
    /// than the master it names now is replaced.
    follow: Option<Source>,
}

impl RedisLink {
    pub(crate) fn new(
        shared: Arc<NodeShared>,
        pool: r2d2::Pool<NodeManager>,
        connect_timeout: Duration,
        follow: Option<Source>,
    ) -> Self {
        RedisLink {
            shared,
            pool,
            connect_timeout,
            conn: None,
            follow,
        }
    }

    /// A pooled connection, without waiting on a node known to be down and
    /// never longer than the connect timeout or the jobs' deadline.
    fn checkout(&self, until: Instant) -> Result<r2d2::PooledConnection<NodeManager>, NodeFailure> {
        if let Some(conn) = self.pool.try_get() {
            return Ok(conn);
        }
        if let Some(failure) = self.shared.down() {
            return Err(failure);
        }
        let wait = until
            .saturating_duration_since(Instant::now())
            .min(self.connect_timeout);
        self.pool.get_timeout(wait).map_err(|_| {
            self.shared.down().unwrap_or_else(|| {
                NodeFailure::new(
                    self.shared.address.clone(),
                    FailureKind::Connection,
                    "no connection available in time",
                )
            })
        })
    }

    /// A Redis error as this node's failure; a timeout says which per-node
    /// timeout fired and how to change it.
    fn failure(&self, err: &redis::RedisError, req: &Request) -> NodeFailure {
        if classify(err) == FailureKind::Timeout {
            return NodeFailure::timed_out(
                self.shared.address.clone(),
                req.timeout.value,
                format!("no answer within {}", req.timeout),
            );
        }
        self.shared.failure(err)
    }
}

impl Link for RedisLink {
    fn run(&mut self, batch: &[&Request]) -> Vec<Answer> {
        let Some(until) = batch.iter().map(|req| req.expires).max() else {
            return Vec::new();
        };
        if let (Some(conn), Some(source)) = (self.conn.as_mut(), &self.follow)
            && source.moved_from(&conn.address)
        {
            // A failover: the Sentinels name another master now.
            conn.broken = true;
            self.conn = None;
        }
        let mut conn = match self.conn.take() {
            Some(conn) => conn,
            None => match self.checkout(until) {
                Ok(conn) => conn,
                Err(failure) => return batch.iter().map(|_| Err(failure.clone())).collect(),
            },
        };
        if let Some(source) = &self.follow
            && source.moved_from(&conn.address)
        {
            // A pooled connection opened before the Sentinels named another
            // master: nothing is sent there (an acquisition would leave its
            // key on the old master), and it is replaced.
            conn.broken = true;
            let failure = NodeFailure::new(
                self.shared.address.clone(),
                FailureKind::Connection,
                "the Sentinels name another master now; reconnecting",
            );
            return batch.iter().map(|_| Err(failure.clone())).collect();
        }
        let timeout = batch
            .iter()
            .map(|req| req.timeout.value)
            .max()
            .unwrap_or(Duration::from_millis(1));
        // Asked now and then what it is (a policy changed at run time, a
        // quarantine ended: the marker to write), within the connect
        // timeout: connection work, not a request's.
        if self.shared.admission.due() {
            let examined = conn
                .set_io_timeout(self.connect_timeout)
                .and_then(|()| examine(&mut conn.conn, &self.shared.admission));
            match examined {
                Ok(identity) => conn.identity = identity,
                Err(err) => {
                    conn.broken = true;
                    let failure = self.shared.failure(&err);
                    return batch.iter().map(|_| Err(failure.clone())).collect();
                }
            }
        }
        // Its votes to take or keep a lock do not count while it is not
        // admitted, or while no Sentinel confirms that it is still the
        // master; releases do. A connection to another process than the
        // node's last examination found (a probe, say, found another one
        // behind this address since) does not vote at all: it reconnects.
        let refused = match self.shared.admission.refusal_for(conn.identity.as_deref()) {
            Err(failure) => {
                conn.broken = true;
                return batch.iter().map(|_| Err(failure.clone())).collect();
            }
            Ok(refused) => refused.or_else(|| {
                self.follow
                    .as_ref()
                    .and_then(|source| source.unconfirmed(&conn.address, self.connect_timeout))
                    .map(|why| {
                        NodeFailure::new(self.shared.address.clone(), FailureKind::Connection, why)
                    })
            }),
        };
        // A node that does not count gets nothing but clean-ups: an
        // acquisition there would not count, and on a server another
        // listed address reaches (a duplicate) it would take the key from
        // the node that counts.
        let goes = |req: &Request| {
            refused.is_none() || matches!(req.op, Op::Release | Op::Leave | Op::Resign)
        };
        let sent: Vec<&Request> = batch.iter().copied().filter(|req| goes(req)).collect();
        let mut replies = if sent.is_empty() {
            Vec::new()
        } else {
            exchange(&mut conn, &sent, timeout, &self.shared)
        }
        .into_iter();
        let answers: Vec<Answer> = batch
            .iter()
            .map(|req| match (&refused, goes(req)) {
                (Some(failure), false) => Err(failure.clone()),
                _ => match replies.next() {
                    Some(Ok(value)) => interpret(req, value, &self.shared.address),
                    Some(Err(err)) => Err(self.failure(&err, req)),
                    None => Err(NodeFailure::new(
                        self.shared.address.clone(),
                        FailureKind::Server,
                        "no reply for this request",
                    )),
                },
            })
            .collect();
        // A Sentinel-managed node that answers `READONLY` (or `LOADING`)
        // became a replica in a failover: the next connection goes to
        // whichever server the Sentinels name as master now. (A fixed
        // address would reconnect to the same server: no point.)
        if self.follow.is_some()
            && answers.iter().any(|a| {
                a.as_ref()
                    .is_err_and(|f| f.kind() == FailureKind::NotWritable)
            })
        {
            conn.broken = true;
        }
        if !conn.broken {
            self.conn = Some(conn);
        }
        answers
    }
}

/// Runs `batch` on the node: every command written at once, and one reply
/// read per command. A script goes out with its source on its
/// connection's first call of it, by its hash after that (see [`Sent`]).
/// Those the node refuses by hash go out once more with their source,
/// before anything else is sent on the connection: `NOSCRIPT` (its script
/// cache was flushed since; the source caches them again), or a user whose
/// ACL does not allow `EVALSHA` (the connection then sends every script
/// with its source). They ran nowhere, so sending them again is sending
/// them once. Only requests whose caller still waits go again, within the
/// time left to the latest of them (one timeout at most); the others keep
/// the refusal, as a server failure their caller no longer reads. Only
/// their order against the rest of their batch changes, which every
/// request tolerates as it tolerates arriving late (see above): the
/// requests of one batch were sent together, none waiting for another's
/// answer.
fn exchange(
    conn: &mut NodeConn,
    batch: &[&Request],
    timeout: Duration,
    shared: &NodeShared,
) -> Vec<redis::RedisResult<redis::Value>> {
    let mut sent = conn.sent;
    let mut replies = send_and_read(conn, batch, &mut sent, timeout, shared);
    conn.sent = sent;
    let missing: Vec<usize> = (0..replies.len())
        .filter(|&i| refused_by_hash(&replies[i]).is_some())
        .collect();
    if missing.is_empty() || conn.broken {
        return replies;
    }
    if missing
        .iter()
        .any(|&i| refused_by_hash(&replies[i]) == Some(Refusal::NotAllowed))
    {
        conn.sent.no_hashes();
    }
    let now = Instant::now();
    let live: Vec<usize> = missing
        .into_iter()
        .filter(|&i| batch[i].expires > now)
        .collect();
    let Some(until) = live.iter().map(|&i| batch[i].expires).max() else {
        return replies;
    };
    let again: Vec<&Request> = live.iter().map(|&i| batch[i]).collect();
    let left = timeout.min(until.saturating_duration_since(now));
    let resent = send_and_read(conn, &again, &mut Sent::sources_only(), left, shared);
    for (i, reply) in live.into_iter().zip(resent) {
        replies[i] = reply;
    }
    replies
}

/// Why a node refused a script by its hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// `NOSCRIPT`: not cached.
    NotCached,
    /// `NOPERM` for `evalsha`: the user's ACL does not allow it.
    NotAllowed,
}

/// Whether, and why, the node refused a script by its hash.
fn refused_by_hash(reply: &redis::RedisResult<redis::Value>) -> Option<Refusal> {
    let Ok(redis::Value::ServerError(err)) = reply else {
        return None;
    };
    match err.code() {
        "NOSCRIPT" => Some(Refusal::NotCached),
        "NOPERM" if err.details().is_some_and(|d| d.contains("'evalsha'")) => {
            Some(Refusal::NotAllowed)
        }
        _ => None,
    }
}

/// Writes all of `batch`'s commands at once and reads one reply per
/// command. After an I/O error or timeout the connection is flagged broken
/// and every request still unanswered gets that error.
fn send_and_read(
    conn: &mut NodeConn,
    batch: &[&Request],
    sent: &mut Sent,
    timeout: Duration,
    shared: &NodeShared,
) -> Vec<redis::RedisResult<redis::Value>> {
    let mut packed = Vec::with_capacity(batch.len() * 160);
    for req in batch {
        encode(req, sent, &mut packed);
    }
    let mut replies = Vec::with_capacity(batch.len());
    let sent = conn
        .set_io_timeout(timeout)
        .and_then(|()| conn.conn.send_packed_command(&packed));
    if let Err(err) = sent {
        conn.broken = true;
        replies.resize_with(batch.len(), || Err(err.clone()));
        return replies;
    }
    // The round trip, as the node's estimate takes it: from the write to
    // the last reply — or, when the replies did not come within the
    // timeout, twice the timeout (a bound, backed off as TCP does: a node
    // farther away than the timeout raises its estimate until it fits).
    let started = std::time::Instant::now();
    for _ in batch {
        match conn.conn.recv_response() {
            Ok(value) => replies.push(Ok(value)),
            Err(err) => {
                conn.broken = true;
                if err.is_timeout() {
                    shared.note_round_trip(timeout.saturating_mul(2));
                }
                replies.resize_with(batch.len(), || Err(err.clone()));
                return replies;
            }
        }
    }
    shared.note_round_trip(started.elapsed());
    replies
}
