//! One long-lived worker thread per node. It takes jobs from the node's queue,
//! drops those whose caller has stopped waiting, and sends the rest to Redis
//! as one pipelined write, reading the replies in order.
//!
//! One worker per node keeps each node's jobs in FIFO order, which the
//! algorithm relies on: a release queued after a `SET` runs after it, so a
//! failed acquisition's clean-up never overtakes its own `SET`.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::conn::{
    EXTEND_SCRIPT, NodeConn, NodeManager, NodeShared, RELEASE_SCRIPT, classify_code,
};
use super::{Job, Op, Request};
use crate::algorithm::Answer;
use crate::error::{FailureKind, NodeFailure};

/// At most this many jobs share one pipelined round trip.
const MAX_BATCH: usize = 128;

static RELEASE_SHA: LazyLock<String> =
    LazyLock::new(|| redis::Script::new(RELEASE_SCRIPT).get_hash().to_owned());
static EXTEND_SHA: LazyLock<String> =
    LazyLock::new(|| redis::Script::new(EXTEND_SCRIPT).get_hash().to_owned());

pub(crate) struct Worker {
    shared: Arc<NodeShared>,
    pool: r2d2::Pool<NodeManager>,
    queue: Receiver<Job>,
    connect_timeout: Duration,
    /// The connection in use, kept checked out between batches (this worker
    /// is the pool's only user); returned to the pool, and so dropped, once
    /// broken.
    conn: Option<r2d2::PooledConnection<NodeManager>>,
    /// Whether the last batch failed, so that failures are warned about once
    /// per outage rather than once per request.
    failing: bool,
}

impl Worker {
    pub(crate) fn new(
        shared: Arc<NodeShared>,
        pool: r2d2::Pool<NodeManager>,
        queue: Receiver<Job>,
        connect_timeout: Duration,
    ) -> Self {
        Worker {
            shared,
            pool,
            queue,
            connect_timeout,
            conn: None,
            failing: false,
        }
    }

    /// Serves jobs until every sender (every clone of the client and every
    /// guard) is gone.
    pub(crate) fn run(mut self) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while let Ok(first) = self.queue.recv() {
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match self.queue.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            self.serve(&mut batch);
            batch.clear();
        }
        log::trace!("redlock: worker for node {} stops", self.shared.address);
    }

    fn serve(&mut self, batch: &mut Vec<Job>) {
        let now = Instant::now();
        batch.retain(|job| {
            let live = job.req.expires > now;
            if !live {
                let failure = self.failure(FailureKind::Timeout, "expired while queued");
                job.finish(&self.shared, Err(failure));
            }
            live
        });
        let Some(until) = batch.iter().map(|job| job.req.expires).max() else {
            return;
        };
        let started = Instant::now();
        let mut conn = match self.conn.take() {
            Some(conn) => conn,
            None => match self.checkout(until) {
                Ok(conn) => conn,
                Err(failure) => return self.fail_all(batch, &failure),
            },
        };
        let timeout = batch
            .iter()
            .map(|job| job.req.io_timeout)
            .max()
            .unwrap_or(Duration::from_millis(1));
        let requests: Vec<&Request> = batch.iter().map(|job| &*job.req).collect();
        let replies = exchange(&mut conn, &requests, timeout, Script::Sha);
        let replies = retry_noscript(&mut conn, &requests, replies, timeout);
        if !conn.broken {
            self.conn = Some(conn);
        }
        let mut failed = false;
        for (job, reply) in batch.iter().zip(replies) {
            let answer = match reply {
                Ok(value) => interpret(&job.req.op, value, &self.shared.address),
                Err(err) => Err(self.shared.failure(&err)),
            };
            failed |= answer.is_err();
            job.finish(&self.shared, answer);
        }
        log::trace!(
            "redlock: node {} served {} request(s) in {:?}",
            self.shared.address,
            batch.len(),
            started.elapsed()
        );
        self.note_health(failed);
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
                self.failure(FailureKind::Connection, "no connection available in time")
            })
        })
    }

    fn fail_all(&mut self, batch: &[Job], failure: &NodeFailure) {
        for job in batch.iter() {
            job.finish(&self.shared, Err(failure.clone()));
        }
        self.note_health(true);
    }

    fn failure(&self, kind: FailureKind, detail: &str) -> NodeFailure {
        NodeFailure::new(self.shared.address.clone(), kind, detail)
    }

    fn note_health(&mut self, failed: bool) {
        if failed && !self.failing {
            log::warn!(
                "redlock: requests to node {} are failing",
                self.shared.address
            );
        } else if !failed && self.failing {
            log::info!(
                "redlock: requests to node {} succeed again",
                self.shared.address
            );
        }
        self.failing = failed;
    }
}

#[derive(Clone, Copy)]
enum Script {
    /// `EVALSHA`: the scripts were preloaded when the connection opened.
    Sha,
    /// `EVAL`: the node lost its script cache (restart, `SCRIPT FLUSH`).
    Source,
}

fn encode(req: &Request, script: Script, out: &mut Vec<u8>) {
    let key = req.key.as_bytes();
    let token = req.token.as_bytes();
    let mut cmd = match (&req.op, script) {
        (Op::Acquire { ttl_ms }, _) => {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(token).arg("NX").arg("PX").arg(*ttl_ms);
            return cmd.write_packed_command(out);
        }
        (Op::Release, Script::Sha) => {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(RELEASE_SHA.as_str());
            cmd
        }
        (Op::Release, Script::Source) => {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(RELEASE_SCRIPT);
            cmd
        }
        (Op::Extend { .. }, Script::Sha) => {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(EXTEND_SHA.as_str());
            cmd
        }
        (Op::Extend { .. }, Script::Source) => {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(EXTEND_SCRIPT);
            cmd
        }
    };
    cmd.arg(1).arg(key).arg(token);
    if let Op::Extend { ttl_ms } = req.op {
        cmd.arg(ttl_ms);
    }
    cmd.write_packed_command(out);
}

/// Writes all of `jobs`' commands at once and reads one reply per job. After
/// an I/O error or timeout the connection is flagged broken and every job
/// still unanswered gets that error.
fn exchange(
    conn: &mut NodeConn,
    jobs: &[&Request],
    timeout: Duration,
    script: Script,
) -> Vec<redis::RedisResult<redis::Value>> {
    let mut packed = Vec::with_capacity(jobs.len() * 96);
    for req in jobs {
        encode(req, script, &mut packed);
    }
    let mut replies = Vec::with_capacity(jobs.len());
    let sent = conn
        .set_io_timeout(timeout)
        .and_then(|()| conn.conn.send_packed_command(&packed));
    if let Err(err) = sent {
        conn.broken = true;
        replies.resize_with(jobs.len(), || Err(err.clone()));
        return replies;
    }
    for _ in jobs {
        match conn.conn.recv_response() {
            Ok(value) => replies.push(Ok(value)),
            Err(err) => {
                conn.broken = true;
                replies.resize_with(jobs.len(), || Err(err.clone()));
                break;
            }
        }
    }
    replies
}

/// Re-sends, as `EVAL`, the script calls a node answered with `NOSCRIPT`.
fn retry_noscript(
    conn: &mut NodeConn,
    batch: &[&Request],
    mut replies: Vec<redis::RedisResult<redis::Value>>,
    timeout: Duration,
) -> Vec<redis::RedisResult<redis::Value>> {
    let missing: Vec<usize> = replies
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!(r, Ok(redis::Value::ServerError(e)) if e.code() == "NOSCRIPT"))
        .map(|(i, _)| i)
        .collect();
    if missing.is_empty() || conn.broken {
        return replies;
    }
    let jobs: Vec<&Request> = missing.iter().map(|&i| batch[i]).collect();
    let again = exchange(conn, &jobs, timeout, Script::Source);
    for (i, reply) in missing.into_iter().zip(again) {
        replies[i] = reply;
    }
    replies
}

/// Reads a node's reply to one operation as a vote.
fn interpret(op: &Op, value: redis::Value, node: &Arc<str>) -> Answer {
    use redis::Value;
    match (op, value) {
        (Op::Acquire { .. }, Value::Okay) => Ok(true),
        (Op::Acquire { .. }, Value::SimpleString(s)) if s == "OK" => Ok(true),
        (Op::Acquire { .. }, Value::Nil) => Ok(false),
        (Op::Release | Op::Extend { .. }, Value::Int(n)) => Ok(n == 1),
        (_, Value::ServerError(err)) => Err(NodeFailure::new(
            node.clone(),
            classify_code(err.code()),
            format!("{} {}", err.code(), err.details().unwrap_or(""))
                .trim_end()
                .to_owned(),
        )),
        // Never echo the reply itself: it could carry a token.
        (_, _) => Err(NodeFailure::new(
            node.clone(),
            FailureKind::Server,
            "unexpected reply type",
        )),
    }
}
