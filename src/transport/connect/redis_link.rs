//! The real [`Link`]: one pooled connection per node, kept checked out
//! between batches, with each batch written as one pipeline and its replies
//! read in order.
//!
//! Nothing here orders commands across a reconnect: a command still in
//! flight on a dropped connection may reach Redis after the replacement's.
//! Nor within a batch, for a script the node refused by its hash: it goes
//! again after the rest of its batch, but never past its own lease's later
//! request on its keys (see [`exchange`]).
//! Every command is harmless late: an acquisition's key expires by its TTL
//! (and a failed round releases it; on a gate node, where a late one may
//! also queue a waiter that already left, the key is one vote among N and
//! the waiter drops out after its alive period), an extension never
//! shortens a key, a release only acts while the key
//! holds that acquisition's token, and a fence value is only ever raised.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::conn::{HealthErrors, HealthEvents, NodeConn, NodeManager, NodeShared};
use super::link::Link;
use super::source::Source;
use crate::algorithm::Answer;
use crate::error::{FailureKind, NodeFailure};
use crate::transport::protocol::codec::{encode, interpret};
use crate::transport::protocol::keys::Layout;
use crate::transport::protocol::request::Request;
use crate::transport::protocol::scripts::Sent;
use crate::transport::trust::admission::examine;
use crate::transport::trust::clock::{Judged, Reading};
use crate::transport::trust::failure::classify;

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
    /// How its keys are laid out (a cluster master's: by hash slot).
    layout: Layout,
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
            layout: Layout::Plain,
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

/// How a node's (or a cluster master's) connection pool is built: one
/// connection, kept open, reconnected in the background by a helper thread
/// of its own. (Helpers shared by all nodes let two black-holed nodes,
/// each connect waiting out the connect timeout, keep the nodes that were
/// up from their connections for seconds.)
#[derive(Clone)]
pub(crate) struct Pools {
    pub(crate) connect_timeout: Duration,
}

impl Pools {
    /// A link over a pool of `manager`'s connections for the node `shared`.
    pub(crate) fn link(
        &self,
        shared: Arc<NodeShared>,
        manager: NodeManager,
        follow: Option<Source>,
    ) -> RedisLink {
        let pool = r2d2::Pool::builder()
            .max_size(1)
            .min_idle(Some(1))
            .test_on_check_out(false)
            .idle_timeout(None)
            .max_lifetime(None)
            .connection_timeout(self.connect_timeout)
            .thread_pool(Arc::new(
                scheduled_thread_pool::ScheduledThreadPool::builder()
                    .num_threads(1)
                    .thread_name_pattern("redlock-conn-{}")
                    .build(),
            ))
            .error_handler(Box::new(HealthErrors(shared.clone())))
            .event_handler(Box::new(HealthEvents(shared.clone())))
            .build_unchecked(manager);
        RedisLink::new(shared, pool, self.connect_timeout, follow)
    }
}

/// What a node did with one request of a batch, before it is read as a
/// vote: its reply, or why there is none.
pub(crate) enum Raw {
    Reply(redis::Value),
    Failed(NodeFailure),
}

/// A batch between [`RedisLink::send`] and [`RedisLink::receive`].
pub(crate) struct Sending {
    /// The connection, once it was written to.
    conn: Option<r2d2::PooledConnection<NodeManager>>,
    /// Every request's outcome so far: `None` for those written.
    early: Vec<Option<NodeFailure>>,
    /// The failure of the write, if it failed.
    write: Option<redis::RedisError>,
    timeout: Duration,
    started: Instant,
    /// Per request written, whether it went after `ASKING`.
    asking: Vec<bool>,
    /// The scripts the connection had sent before this batch.
    scripts_before: Sent,
    /// `TIME` follows the batch: it holds votes, judged with the node's
    /// clock as it was when it voted (see `clock.rs`).
    timed: bool,
    /// The TTLs announced in front of the batch (`in_use.rs`), if any.
    announcing: Option<(u64, u64)>,
}

impl RedisLink {
    /// The node's shared state (health, admission).
    pub(crate) fn shared(&self) -> &Arc<NodeShared> {
        &self.shared
    }

    /// How this link lays keys out.
    pub(crate) fn with_layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Writes `batch` to the node (each command after `ASKING` with
    /// `asking`: a cluster's redirection during a slot's migration), after
    /// the checks of a batch: the connection still goes where the node is,
    /// the node was examined lately, its votes count. Read the replies
    /// with [`receive`](Self::receive). Nothing here waits for the node
    /// but the write.
    pub(crate) fn send(&mut self, batch: &[&Request], asking: &[bool]) -> Sending {
        let timeout = batch
            .iter()
            .map(|req| req.timeout.value)
            .max()
            .unwrap_or(Duration::from_millis(1));
        let mut sending = Sending {
            conn: None,
            early: vec![None; batch.len()],
            write: None,
            timeout,
            started: Instant::now(),
            asking: Vec::new(),
            scripts_before: Sent::none(),
            timed: false,
            announcing: None,
        };
        let fail_all = |mut sending: Sending, failure: NodeFailure| {
            sending.early = vec![Some(failure); batch.len()];
            sending
        };
        let Some(until) = batch.iter().map(|req| req.expires).max() else {
            return sending;
        };
        let mut conn = match self.connection(until) {
            Ok(conn) => conn,
            Err(failure) => return fail_all(sending, failure),
        };
        if let Err(failure) = self.examine_if_due(&mut conn) {
            return fail_all(sending, failure);
        }
        let refused = match self.refusal(&mut conn) {
            Ok(refused) => refused,
            Err(failure) => return fail_all(sending, failure),
        };
        // A node that does not count gets nothing but clean-ups: an
        // acquisition there would not count, and on a server another
        // listed address reaches (a duplicate) it would take the key from
        // the node that counts.
        if let Some(failure) = refused {
            for (early, req) in sending.early.iter_mut().zip(batch) {
                if !req.op.cleans_up() {
                    *early = Some(failure.clone());
                }
            }
        }
        self.write_batch(&mut conn, batch, asking, &mut sending);
        sending.conn = Some(conn);
        sending
    }

    /// The connection a batch goes on (the one kept, or one from the pool
    /// by `until`), never one to another master than the Sentinels name
    /// now: that one is marked broken, so that it is replaced.
    fn connection(
        &mut self,
        until: Instant,
    ) -> Result<r2d2::PooledConnection<NodeManager>, NodeFailure> {
        if let (Some(conn), Some(source)) = (self.conn.as_mut(), &self.follow)
            && source.moved_from(&conn.address)
        {
            // A failover: the Sentinels name another master now.
            conn.broken = true;
            self.conn = None;
        }
        let mut conn = match self.conn.take() {
            Some(conn) => conn,
            None => self.checkout(until)?,
        };
        if let Some(source) = &self.follow
            && source.moved_from(&conn.address)
        {
            // A pooled connection opened before the Sentinels named another
            // master: nothing is sent there (an acquisition would leave its
            // key on the old master), and it is replaced.
            conn.broken = true;
            return Err(NodeFailure::new(
                self.shared.address.clone(),
                FailureKind::Connection,
                "the Sentinels name another master now; reconnecting",
            ));
        }
        Ok(conn)
    }

    /// Asks the node what it is when it is due (a policy changed at run
    /// time, a quarantine ended: the marker to write), within the connect
    /// timeout: connection work, not a request's.
    fn examine_if_due(&self, conn: &mut NodeConn) -> Result<(), NodeFailure> {
        if !self.shared.admission.due() {
            return Ok(());
        }
        let examined = conn.set_io_timeout(self.connect_timeout).and_then(|()| {
            let within = conn.io_timeout();
            examine(&mut conn.conn, &self.shared.admission, within)
        });
        match examined {
            Ok(identity) => {
                conn.identity = identity;
                Ok(())
            }
            Err(err) => {
                conn.broken = true;
                Err(self.shared.failure(&err))
            }
        }
    }

    /// Why the node's votes to take or keep a lock do not count now (it is
    /// not admitted, or no Sentinel confirms that it is still the master;
    /// releases do count), or `Err` when `conn` reaches another process
    /// than the node's last examination found: it does not vote at all,
    /// and is marked broken, so that it reconnects.
    fn refusal(&self, conn: &mut NodeConn) -> Result<Option<NodeFailure>, NodeFailure> {
        match self.shared.admission.refusal_for(conn.identity.as_deref()) {
            Err(failure) => {
                conn.broken = true;
                Err(failure)
            }
            Ok(refused) => Ok(refused.or_else(|| {
                self.follow
                    .as_ref()
                    .and_then(|source| source.unconfirmed(&conn.address, self.connect_timeout))
                    .map(|why| {
                        NodeFailure::new(self.shared.address.clone(), FailureKind::Connection, why)
                    })
            })),
        }
    }

    /// Writes, as one pipeline, the requests of `batch` that `sending` has
    /// no early outcome for (with `TIME` after them if any may vote yes),
    /// noting their TTLs for the node's clock and the scripts `conn` sent.
    fn write_batch(
        &self,
        conn: &mut NodeConn,
        batch: &[&Request],
        asking: &[bool],
        sending: &mut Sending,
    ) {
        let (sent, asked): (Vec<&Request>, Vec<bool>) = batch
            .iter()
            .enumerate()
            .filter(|(i, _)| sending.early[*i].is_none())
            .map(|(i, req)| (*req, asking.get(i).copied().unwrap_or(false)))
            .unzip();
        if !sent.is_empty() {
            let admission = &self.shared.admission;
            for ttl in sent.iter().filter_map(|req| req.op.ttl_ms()) {
                admission.clocks().used(ttl);
            }
            sending.timed = sent.iter().any(|req| !req.op.cleans_up());
            // Every client's TTLs are on the node before a vote counts
            // there (`in_use.rs`): in front of the batch, when not said
            // lately.
            let announcement = sending.timed.then(|| admission.announcement()).flatten();
            sending.announcing = announcement.as_ref().map(|(_, pair)| *pair);
            let mut scripts = conn.sent;
            sending.scripts_before = scripts;
            sending.started = Instant::now();
            let out = Out {
                layout: self.layout,
                timeout: sending.timeout,
                asking: &asked,
                timed: sending.timed,
                first: announcement.as_ref().map(|(command, _)| command.as_slice()),
            };
            sending.write = write(conn, &sent, &mut scripts, &out).err();
            conn.sent = scripts;
        }
        sending.asking = asked;
    }

    /// Reads the replies to what [`send`](Self::send) wrote, one per
    /// request of `batch` (the same batch), sending again what the node
    /// refused by a script's hash (see [`exchange`]).
    pub(crate) fn receive(&mut self, mut sending: Sending, batch: &[&Request]) -> Vec<Raw> {
        let Some(mut conn) = sending.conn.take() else {
            if batch.iter().any(|req| !req.op.cleans_up()) {
                self.shared
                    .admission
                    .clocks()
                    .missed(self.shared.admission.index());
            }
            return sending
                .early
                .into_iter()
                .map(|e| Raw::Failed(e.unwrap_or_else(|| self.no_reply())))
                .collect();
        };
        let sent: Vec<&Request> = batch
            .iter()
            .zip(&sending.early)
            .filter(|(_, early)| early.is_none())
            .map(|(req, _)| *req)
            .collect();
        let Replies { replies, reading } = self.read_replies(&mut conn, &sent, &mut sending);
        // A cluster master refuses a script before it runs it (`MOVED`,
        // `ASK`, `TRYAGAIN`, `CLUSTERDOWN`): its source was not cached
        // there, so the scripts this batch sent count as not sent.
        if replies.iter().any(refused_before_running) {
            conn.sent.forget_since(sending.scripts_before);
        }
        let raws = self.raws(batch, sending.early, replies);
        // A Sentinel-managed node that answers `READONLY` (or `LOADING`)
        // became a replica in a failover: the next connection goes to
        // whichever server the Sentinels name as master now. (A fixed
        // address would reconnect to the same server: no point.)
        if self.follow.is_some() && raws.iter().any(|raw| self.not_writable(raw)) {
            conn.broken = true;
        }
        // A vote judged after waiting for the others' readings still
        // reaches its caller: within half the batch's time, and before the
        // first of its requests expires.
        let half = sending.started + sending.timeout / 2;
        let until = batch
            .iter()
            .map(|req| req.expires.min(half))
            .min()
            .unwrap_or(half);
        let wanted = batch.iter().any(|req| !req.op.cleans_up());
        let raws = match reading {
            Some(reading) => self.judge_clock(&mut conn, reading, until, batch, raws),
            // A vote whose node's clock could not be read with it (`TIME`
            // refused, or the connection failed first) is not judged, so
            // it does not count.
            None if wanted => {
                let admission = &self.shared.admission;
                admission.clocks().missed(admission.index());
                if sending.timed {
                    self.unjudged(batch, raws)
                } else {
                    raws
                }
            }
            None => raws,
        };
        if !conn.broken {
            self.conn = Some(conn);
        }
        raws
    }

    /// Reads the replies to the requests `sent` on `conn` (all the write's
    /// failure, if it failed), with the clock reading after them if `TIME`
    /// followed, and sends again what the node refused by a script's hash.
    fn read_replies(
        &self,
        conn: &mut NodeConn,
        sent: &[&Request],
        sending: &mut Sending,
    ) -> Replies {
        let mut reading = None;
        let replies = match sending.write.take() {
            Some(err) => {
                conn.broken = true;
                vec![Err(err); sent.len()]
            }
            None if sent.is_empty() => Vec::new(),
            None => {
                let (asking, timeout) = (&sending.asking, sending.timeout);
                if let Some(pair) = sending.announcing
                    && let Err(err) = self.read_announced(conn, pair, timeout)
                {
                    return Replies {
                        replies: vec![Err(err); sent.len()],
                        reading,
                    };
                }
                let replies = read(conn, asking, timeout, &self.shared, sending.started);
                if sending.timed && !conn.broken {
                    reading = read_time(conn, sending.started);
                }
                exchange(
                    conn,
                    sent,
                    replies,
                    timeout,
                    &self.shared,
                    self.layout,
                    asking,
                )
            }
        };
        Replies { replies, reading }
    }

    /// Reads the reply to the announcement of `pair` in front of a batch.
    fn read_announced(
        &self,
        conn: &mut NodeConn,
        pair: (u64, u64),
        timeout: Duration,
    ) -> redis::RedisResult<()> {
        let reply = conn
            .set_io_timeout(timeout)
            .and_then(|()| conn.conn.recv_response());
        match reply {
            Ok(value) => {
                self.shared.admission.announced(pair, &value);
                Ok(())
            }
            Err(err) => {
                conn.broken = true;
                Err(err)
            }
        }
    }

    /// Each request of `batch` as the node left it: its `early` failure,
    /// or the next of `replies` (one per request written, in order).
    fn raws(
        &self,
        batch: &[&Request],
        early: Vec<Option<NodeFailure>>,
        replies: Vec<redis::RedisResult<redis::Value>>,
    ) -> Vec<Raw> {
        let mut replies = replies.into_iter();
        batch
            .iter()
            .zip(early)
            .map(|(req, early)| match early {
                Some(failure) => Raw::Failed(failure),
                None => match replies.next() {
                    Some(Ok(value)) => Raw::Reply(value),
                    Some(Err(err)) => Raw::Failed(self.failure(&err, req)),
                    None => Raw::Failed(self.no_reply()),
                },
            })
            .collect()
    }

    /// Judges the node's clock by the `reading` taken with the batch's
    /// votes: a vote counts only if the clock was trusted when it was cast
    /// (no jump, within the round's drift allowance of the others' and the
    /// steady bound; see `clock.rs`), waiting until `until` at most for the
    /// others' readings where they are stale. Writes the jump marker on
    /// `conn` if the clock just jumped.
    fn judge_clock(
        &self,
        conn: &mut NodeConn,
        reading: Reading,
        until: Instant,
        batch: &[&Request],
        raws: Vec<Raw>,
    ) -> Vec<Raw> {
        let admission = &self.shared.admission;
        let yes: Vec<bool> = batch
            .iter()
            .zip(&raws)
            .map(|(req, raw)| matches!(raw, Raw::Reply(value) if self.says_yes(req, value)))
            .collect();
        // Only a yes needs the others' readings to be judged by.
        let until = if yes.contains(&true) {
            until
        } else {
            Instant::now()
        };
        // The connection failing here (asking what TTLs are in use, or
        // leaving the jump marker) leaves no judgement: no yes counts.
        let judged = match admission.judge_clock(&mut conn.conn, reading, until) {
            Ok(judged) => judged,
            Err(_) => {
                conn.broken = true;
                Judged::default()
            }
        };
        let out = admission.refusal();
        batch
            .iter()
            .zip(raws)
            .zip(yes)
            .map(|((req, raw), yes)| match raw {
                Raw::Reply(value) if yes => {
                    // An election's proclaim or read: the leadership's TTL
                    // is the client's longest, as far as it knows.
                    let ttl = req.op.ttl_ms().map_or_else(
                        || admission.clocks().longest_ttl().max(Duration::from_secs(1)),
                        Duration::from_millis,
                    );
                    match out
                        .clone()
                        .or_else(|| admission.round_refusal(&judged, ttl))
                    {
                        Some(failure) => Raw::Failed(failure),
                        None => Raw::Reply(value),
                    }
                }
                raw => raw,
            })
            .collect()
    }

    /// Whether `value` is a yes to `req` (not a clean-up): what a node
    /// whose clock cannot be trusted must not give. Its no (the key is
    /// there; others queued first; a larger fence) only holds a caller back,
    /// which is safe, and keeps the queue of waiters in order.
    fn says_yes(&self, req: &Request, value: &redis::Value) -> bool {
        !req.op.cleans_up()
            && interpret(req, value.clone(), &self.shared.address).is_ok_and(|vote| vote.yes)
    }

    /// The yes votes of a batch whose clock reading is missing, as failures.
    fn unjudged(&self, batch: &[&Request], raws: Vec<Raw>) -> Vec<Raw> {
        batch
            .iter()
            .zip(raws)
            .map(|(req, raw)| match raw {
                Raw::Reply(value) if self.says_yes(req, &value) => Raw::Failed(NodeFailure::new(
                    self.shared.address.clone(),
                    FailureKind::Clock,
                    "its clock could not be read with its vote (TIME refused, or the connection \
                     failed first): the vote does not count; allow +time",
                )),
                raw => raw,
            })
            .collect()
    }

    /// Reads `raw` as a vote on `req`.
    pub(crate) fn interpret(&self, req: &Request, raw: Raw) -> Answer {
        match raw {
            Raw::Reply(value) => interpret(req, value, &self.shared.address),
            Raw::Failed(failure) => Err(failure),
        }
    }

    fn not_writable(&self, raw: &Raw) -> bool {
        match raw {
            Raw::Failed(failure) => failure.kind() == FailureKind::NotWritable,
            Raw::Reply(redis::Value::ServerError(err)) => {
                crate::transport::trust::failure::classify_code(err.code())
                    == FailureKind::NotWritable
            }
            Raw::Reply(_) => false,
        }
    }

    fn no_reply(&self) -> NodeFailure {
        NodeFailure::new(
            self.shared.address.clone(),
            FailureKind::Server,
            "no reply for this request",
        )
    }
}

impl Link for RedisLink {
    fn run(&mut self, batch: &[&Request]) -> Vec<Answer> {
        let sending = self.send(batch, &[]);
        let raws = self.receive(sending, batch);
        batch
            .iter()
            .zip(raws)
            .map(|(req, raw)| self.interpret(req, raw))
            .collect()
    }
}

/// Completes the `replies` of `batch`, read on `conn`: a script goes out
/// with its source on its connection's first call of it, by its hash
/// after that (see [`Sent`]). Those the node refuses by hash go out once
/// more with their source, before anything else is sent on the
/// connection: `NOSCRIPT` (its script cache was flushed since; the source
/// caches them again), or a user whose ACL does not allow `EVALSHA` (the
/// connection then sends every script with its source). They ran
/// nowhere, so sending them again is sending them once. Only requests
/// whose caller still waits go again, within the time left to the latest
/// of them (one timeout at most), and none past a later request of its own
/// lease (the same token) on its keys that ran (see [`resendable`]); the
/// others keep the refusal, as a server failure. Only their order against
/// other leases' requests changes, which every request tolerates as it
/// tolerates arriving late (see above).
fn exchange(
    conn: &mut NodeConn,
    batch: &[&Request],
    mut replies: Vec<redis::RedisResult<redis::Value>>,
    timeout: Duration,
    shared: &NodeShared,
    layout: Layout,
    asking: &[bool],
) -> Vec<redis::RedisResult<redis::Value>> {
    let refusals: Vec<Option<Refusal>> = replies.iter().map(refused_by_hash).collect();
    if refusals.iter().all(Option::is_none) || conn.broken {
        return replies;
    }
    if refusals.contains(&Some(Refusal::NotAllowed)) {
        conn.sent.no_hashes();
    }
    let refused: Vec<bool> = refusals.iter().map(Option::is_some).collect();
    let now = Instant::now();
    let live = resendable(batch, &refused, now);
    let Some(until) = live.iter().map(|&i| batch[i].expires).max() else {
        return replies;
    };
    let again: Vec<&Request> = live.iter().map(|&i| batch[i]).collect();
    let left = timeout.min(until.saturating_duration_since(now));
    let sources = &mut Sent::sources_only();
    let asked: Vec<bool> = live.iter().map(|&i| asking[i]).collect();
    let out = Out {
        layout,
        timeout: left,
        asking: &asked,
        timed: false,
        first: None,
    };
    let resent = match write(conn, &again, sources, &out) {
        Ok(()) => read(conn, &asked, left, shared, Instant::now()),
        Err(err) => {
            conn.broken = true;
            vec![Err(err); again.len()]
        }
    };
    for (i, reply) in live.into_iter().zip(resent) {
        replies[i] = reply;
    }
    replies
}

/// Which requests of `batch` that the node `refused` by hash go again:
/// those whose caller still waits (`now` is before their expiry), and only
/// where no later request of the batch that ran is its own lease's on one
/// of its keys (same token): a resend goes after the whole batch, and an
/// acquisition resent after its own round's release would set a key
/// nobody releases before its TTL. (Another client's or round's request
/// tolerates the reorder as it tolerates arriving late.)
fn resendable(batch: &[&Request], refused: &[bool], now: Instant) -> Vec<usize> {
    // A `Leave` has no token (""): two waiters' leaves are not one lease.
    let shares_a_key = |a: &Request, b: &Request| {
        !a.token.is_empty() && a.token == b.token && a.keys().iter().any(|k| b.keys().contains(k))
    };
    (0..batch.len())
        .filter(|&i| refused.get(i).copied().unwrap_or(false) && batch[i].expires > now)
        .filter(|&i| {
            !(i + 1..batch.len()).any(|j| {
                !refused.get(j).copied().unwrap_or(false) && shares_a_key(batch[i], batch[j])
            })
        })
        .collect()
}

/// Whether a cluster master refused a command before running it (its
/// slot is elsewhere, moving, or the cluster is down).
fn refused_before_running(reply: &redis::RedisResult<redis::Value>) -> bool {
    matches!(reply, Ok(redis::Value::ServerError(err))
        if matches!(err.code(), "MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN"))
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

/// A batch's replies, as [`RedisLink::receive`] reads them.
struct Replies {
    /// One per request written, in order.
    replies: Vec<redis::RedisResult<redis::Value>>,
    /// The node's clock, read with them (`None`: no `TIME` followed them,
    /// or it could not be read).
    reading: Option<Reading>,
}

/// How a batch goes out.
struct Out<'a> {
    /// How its keys are laid out.
    layout: Layout,
    timeout: Duration,
    /// Per request, whether it goes after `ASKING`.
    asking: &'a [bool],
    /// `TIME` follows it.
    timed: bool,
    /// A command that goes in front of it (the TTLs in use), its reply
    /// read first.
    first: Option<&'a [u8]>,
}

/// Writes all of `batch`'s commands at once, as `out` says.
fn write(
    conn: &mut NodeConn,
    batch: &[&Request],
    sent: &mut Sent,
    out: &Out<'_>,
) -> redis::RedisResult<()> {
    let mut packed = Vec::with_capacity(batch.len() * 160 + 16);
    packed.extend_from_slice(out.first.unwrap_or_default());
    for (i, req) in batch.iter().enumerate() {
        if out.asking.get(i).copied().unwrap_or(false) {
            redis::cmd("ASKING").write_packed_command(&mut packed);
        }
        encode(req, out.layout, sent, &mut packed);
    }
    if out.timed {
        packed.extend_from_slice(b"*1\r\n$4\r\nTIME\r\n");
    }
    conn.set_io_timeout(out.timeout)?;
    conn.conn.send_packed_command(&packed)
}

/// Reads the reply to the `TIME` after a batch written at `sent` (`None`:
/// not a clock reading; the connection is broken if it failed).
fn read_time(conn: &mut NodeConn, sent: Instant) -> Option<Reading> {
    match conn.conn.recv_response() {
        Ok(value) => Reading::parse(&value, sent, Instant::now()),
        Err(_) => {
            conn.broken = true;
            None
        }
    }
}

/// Reads one reply per command of a batch written at `started`, one
/// command per entry of `asking` (and drops the reply to the `ASKING`
/// before those it marks, unless it is an error: then it is the
/// command's). After an I/O error or timeout
/// the connection is flagged broken and every request still unanswered
/// gets that error.
fn read(
    conn: &mut NodeConn,
    asking: &[bool],
    timeout: Duration,
    shared: &NodeShared,
    started: Instant,
) -> Vec<redis::RedisResult<redis::Value>> {
    let count = asking.len();
    let mut replies = Vec::with_capacity(count);
    if let Err(err) = conn.set_io_timeout(timeout) {
        conn.broken = true;
        replies.resize_with(count, || Err(err.clone()));
        return replies;
    }
    // The round trip, as the node's estimate takes it: from the write to
    // the last reply. An exchange that timed out is no sample: it says the
    // node stalled, not how fast the network answers (a 150 ms stall once
    // raised the estimate past a 300 ms TTL's reach: `TooSlow`). A node
    // farther away than the timeout is measured by the connection that
    // replaces the timed-out one (its first question, within the connect
    // timeout).
    for &asked in asking {
        let mut reply = None;
        for _ in 0..1 + usize::from(asked) {
            match conn.conn.recv_response() {
                Ok(value) => {
                    let asked = reply.take();
                    reply = Some(match asked {
                        Some(redis::Value::ServerError(err)) => redis::Value::ServerError(err),
                        _ => value,
                    });
                }
                Err(err) => {
                    conn.broken = true;
                    replies.resize_with(count, || Err(err.clone()));
                    return replies;
                }
            }
        }
        replies.extend(reply.map(Ok));
    }
    shared.note_round_trip(started.elapsed());
    replies
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::NodeTimeout;
    use crate::transport::protocol::request::Op;

    fn req(op: Op, keys: &[&str], expires: Instant) -> Request {
        Request::lock(
            op,
            keys,
            NodeTimeout::fixed(Duration::from_millis(50)),
            expires,
        )
    }

    /// An acquisition refused by hash in the batch that also held
    /// its round's release is not sent again after that release (it set a
    /// key that stayed until its TTL); one on other keys still is, and so
    /// is the release itself when it was refused too.
    #[test]
    fn a_resend_never_passes_a_later_request_on_its_keys() {
        let now = Instant::now();
        let later = now + Duration::from_secs(1);
        let acquire = req(Op::Acquire { ttl_ms: 10_000 }, &["a"], later);
        let other = req(Op::Acquire { ttl_ms: 10_000 }, &["b"], later);
        let release = req(Op::Release { held: true }, &["a"], later);
        let batch = [&acquire, &other, &release];
        assert_eq!(resendable(&batch, &[true, true, false], now), vec![1]);
        // Another lease's request on the same key does not hold it back.
        let mut theirs = req(Op::Acquire { ttl_ms: 10_000 }, &["a"], later);
        theirs.token = Arc::from("theirs");
        assert_eq!(
            resendable(&[&acquire, &theirs], &[true, false], now),
            vec![0]
        );
        assert_eq!(
            resendable(&batch, &[true, true, true], now),
            vec![0, 1, 2],
            "all refused: resent in their order"
        );
        assert_eq!(resendable(&batch, &[false, true, false], now), vec![1]);
        // Two waiters' leaves (no token) are no lease of one another.
        let mut leave = req(Op::Leave, &["a"], later);
        leave.token = Arc::from("");
        assert_eq!(
            resendable(&[&leave, &leave.clone()], &[true, false], now),
            vec![0]
        );
        // A request whose caller no longer waits keeps its refusal.
        let gone = req(Op::Acquire { ttl_ms: 10_000 }, &["c"], now);
        assert!(resendable(&[&gone], &[true], now).is_empty());
    }

    /// A script a cluster master refused before running it
    /// (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`) is not counted as sent
    /// on the connection: its next call goes with its source again, not by
    /// a hash the master never cached.
    #[test]
    fn a_batch_refused_before_running_counts_no_script_as_sent() {
        let reply = |line: &str| redis::parse_redis_value(format!("-{line}\r\n").as_bytes());
        for line in [
            "MOVED 12 127.0.0.1:7001",
            "ASK 12 127.0.0.1:7001",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "CLUSTERDOWN The cluster is down",
        ] {
            assert!(refused_before_running(&reply(line)), "{line}");
        }
        assert!(!refused_before_running(&reply(
            "NOSCRIPT No matching script"
        )));
        assert!(!refused_before_running(&Ok(redis::Value::Okay)));
        let before = Sent::none();
        let mut sent = before;
        let mut cmd = redis::Cmd::new();
        crate::transport::protocol::scripts::eval(
            &mut cmd,
            &crate::transport::protocol::scripts::RELEASE,
            &mut sent,
        );
        assert_ne!(sent, before, "noted as sent");
        sent.forget_since(before);
        assert_eq!(sent, before, "forgotten");
    }
}
