//! An in-memory node for unit tests: the fake side of the [`Link`] seam.
//! Each request goes out as the crate encodes it for a real node, runs on
//! the second implementation of the scripts ([`node`], held to the scripts'
//! tables beside the real Lua), and its reply is read as a real node's.
//! The fake can be told to fail, to answer late, or to hold every request
//! until released, so that rounds, extensions, the keeper and the hand-off
//! can be driven through exact interleavings in milliseconds.

pub(crate) mod node;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::{NodeShared, Transport};
use crate::algorithm::Answer;
use crate::error::{FailureKind, NodeFailure};
use crate::transport::connect::link::Link;
use crate::transport::protocol::codec;
use crate::transport::protocol::keys::{Layout, fence_key};
use crate::transport::protocol::request::{Op, Request};
use crate::transport::protocol::scripts::{self, Sent};

/// What a fake node calls with every member it wakes.
type OnWake = Arc<dyn Fn(&str, Op) + Send + Sync>;

/// How a fake node treats requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Behaviour {
    /// Applies every request like Redis would.
    Normal,
    /// Answers every request with this failure, applying nothing.
    Fail(FailureKind),
    /// Receives requests but answers none until set back to another
    /// behaviour (never longer than 10 s, so a broken test cannot hang).
    /// With a single node, whose idle rounds run on the caller's thread,
    /// that holds the caller too.
    Hold,
}

struct Inner {
    /// The node's keys and scripts.
    node: node::Node,
    /// When the node's clock read [`EPOCH_MS`].
    started: Instant,
    behaviour: Behaviour,
    delay: Duration,
    received: Vec<Op>,
    /// The first key of each request received, in order.
    received_keys: Vec<String>,
    /// The next batch received with an acquisition in it turns the node
    /// to [`Behaviour::Hold`].
    hold_next: bool,
    /// The name of the thread that ran each batch, in order.
    served_on: Vec<String>,
    /// Fenced acquisitions are applied, but their answers are lost (as if
    /// the connection broke right after the node ran the command).
    lose_fenced_grants: bool,
    /// Called with every member this node wakes, and the operation that
    /// woke it.
    on_wake: Option<OnWake>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the keys: they hold tokens.
        f.debug_struct("Inner")
            .field("behaviour", &self.behaviour)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Shared {
    inner: Mutex<Inner>,
    changed: Condvar,
}

/// The test's handle on one fake node.
#[derive(Debug, Clone)]
pub(crate) struct FakeNode {
    shared: Arc<Shared>,
    address: Arc<str>,
}

impl FakeNode {
    pub(crate) fn new(address: &str) -> Self {
        FakeNode {
            shared: Arc::new(Shared {
                inner: Mutex::new(Inner {
                    node: node::Node::with_alive(ALIVE_MS),
                    started: Instant::now(),
                    behaviour: Behaviour::Normal,
                    delay: Duration::ZERO,
                    received: Vec::new(),
                    received_keys: Vec::new(),
                    hold_next: false,
                    served_on: Vec::new(),
                    lose_fenced_grants: false,
                    on_wake: None,
                }),
                changed: Condvar::new(),
            }),
            address: Arc::from(address),
        }
    }

    pub(crate) fn set(&self, behaviour: Behaviour) {
        self.shared.inner.lock().behaviour = behaviour;
        self.shared.changed.notify_all();
    }

    /// The next batch this node receives with an acquisition in it, and
    /// every later batch, is held (see [`Behaviour::Hold`]) until the
    /// behaviour is set again: a test stops the node between two rounds of
    /// one caller.
    pub(crate) fn hold_next_acquisition(&self) {
        self.shared.inner.lock().hold_next = true;
    }

    /// Fenced acquisitions are applied but answered with a connection
    /// failure (the grant happened; the caller never hears of it).
    pub(crate) fn lose_fenced_grants(&self, lose: bool) {
        self.shared.inner.lock().lose_fenced_grants = lose;
    }

    /// Calls `wake` with every queue member this node wakes (and the
    /// operation that woke it), under the node's lock: `wake` must not
    /// use this node.
    pub(crate) fn on_wake(&self, wake: impl Fn(&str, Op) + Send + Sync + 'static) {
        self.shared.inner.lock().on_wake = Some(Arc::new(wake));
    }

    /// Runs one command on the node now, as a test's own connection would.
    fn command(&self, words: &[&str]) -> redis::Value {
        let mut inner = self.shared.inner.lock();
        let now = inner.now();
        run(&mut inner.node, now, words)
    }

    /// Queues `member` at the back of the queue of gate name `gate`
    /// (`Kind::gate_name`), as its busy round would, alive for 60 s. (Its
    /// arrival comes after every member's there: a round queues at the
    /// node's time, and members that arrive in the same ms go by name.)
    pub(crate) fn enqueue(&self, gate: &str, member: &str) {
        let (queue, alive) = queue_keys(gate);
        let mut inner = self.shared.inner.lock();
        let now = inner.now();
        let node = &mut inner.node;
        let last = match run(node, now, &["ZRANGE", &queue, "-1", "-1", "WITHSCORES"]) {
            redis::Value::Array(found) => found.get(1).and_then(text),
            _ => None,
        };
        let last = last.and_then(|s| s.parse::<u64>().ok());
        let arrival = last.map_or(now, |last| now.max(last + 1)).to_string();
        let (until, ms) = (now + ALIVE_MS.unsigned_abs(), ALIVE_MS.to_string());
        run(node, now, &["ZADD", &queue, "NX", &arrival, member]);
        run(node, now, &["ZADD", &alive, &until.to_string(), member]);
        run(node, now, &["PEXPIRE", &queue, &ms]);
        run(node, now, &["PEXPIRE", &alive, &ms]);
    }

    /// The members queued in the queue of gate name `gate`, first first.
    pub(crate) fn queue(&self, gate: &str) -> Vec<String> {
        self.members(&queue_keys(gate).0)
    }

    /// The members of the sorted set `key` (an election's observers), by
    /// score.
    pub(crate) fn members(&self, key: &str) -> Vec<String> {
        match self.command(&["ZRANGE", key, "0", "-1"]) {
            redis::Value::Array(members) => members.iter().filter_map(text).collect(),
            _ => Vec::new(),
        }
    }

    /// Every answer comes this much later (the request is applied at once).
    pub(crate) fn set_delay(&self, delay: Duration) {
        self.shared.inner.lock().delay = delay;
    }

    /// Another client's key, for `ttl` (zero: the key is gone).
    pub(crate) fn put(&self, key: &str, token: &str, ttl: Duration) {
        let ms = ttl.as_millis().to_string();
        let done = match ttl.is_zero() {
            true => self.command(&["DEL", key]),
            false => self.command(&["SET", key, token, "PX", &ms]),
        };
        assert!(!matches!(done, redis::Value::ServerError(_)), "{done:?}");
    }

    /// The fence value stored for `key`, if any.
    pub(crate) fn fence(&self, key: &str) -> Option<u64> {
        text(&self.command(&["GET", &fence_key(key)]))?.parse().ok()
    }

    /// Forgets everything, as a node restarted without its data.
    pub(crate) fn flush(&self) {
        self.shared.inner.lock().node.flush();
    }

    /// The token `key` holds now, if it exists and has not expired.
    pub(crate) fn holder(&self, key: &str) -> Option<String> {
        text(&self.command(&["GET", key]))
    }

    /// How long `key` still lives, if it exists.
    pub(crate) fn pttl(&self, key: &str) -> Option<Duration> {
        match self.command(&["PTTL", key]) {
            redis::Value::Int(ms) if ms >= 0 => Some(Duration::from_millis(ms.unsigned_abs())),
            redis::Value::Int(-1) => Some(Duration::MAX),
            _ => None,
        }
    }

    /// Every request received so far, in order.
    pub(crate) fn received(&self) -> Vec<Op> {
        self.shared.inner.lock().received.clone()
    }

    /// The first key of every acquisition received so far, in order.
    pub(crate) fn acquired_keys(&self) -> Vec<String> {
        let inner = self.shared.inner.lock();
        let ops = inner.received.iter();
        ops.zip(&inner.received_keys)
            .filter(|(op, _)| matches!(op, Op::Acquire { .. } | Op::AcquireFenced { .. }))
            .map(|(_, key)| key.clone())
            .collect()
    }

    /// The name of the thread that ran each batch so far (a worker's is
    /// `redlock-node-{index}`), in order.
    pub(crate) fn served_on(&self) -> Vec<String> {
        self.shared.inner.lock().served_on.clone()
    }

    /// Waits until a received request matches `what`; false after `within`.
    pub(crate) fn wait_for(&self, within: Duration, what: impl Fn(&[Op]) -> bool) -> bool {
        let deadline = Instant::now() + within;
        let mut inner = self.shared.inner.lock();
        while !what(&inner.received) {
            if self
                .shared
                .changed
                .wait_until(&mut inner, deadline)
                .timed_out()
            {
                return what(&inner.received);
            }
        }
        true
    }

    pub(crate) fn link(&self) -> Box<dyn Link> {
        Box::new(FakeLink {
            shared: self.shared.clone(),
            address: self.address.clone(),
        })
    }
}

/// The node's clock at its start, in ms: a wall clock's order of size.
const EPOCH_MS: u64 = 1_750_000_000_000;

/// How long a place in a fake node's queue counts without a refresh, ms:
/// longer than any test (lib_queue.lua's is 2 s), so that a test that
/// lengthens its waiters' queue refresh never sees one drop out.
const ALIVE_MS: i64 = 60_000;

/// Runs one command, given as its words, on `node` at `now`.
fn run(node: &mut node::Node, now: u64, words: &[&str]) -> redis::Value {
    let words: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
    node.command(now, &words)
}

impl Inner {
    /// The node's time, in ms.
    fn now(&self) -> u64 {
        let since = self.started.elapsed().as_millis();
        EPOCH_MS + u64::try_from(since).unwrap_or(u64::MAX / 2)
    }

    /// Runs `req` as a real node would run what the crate sends for it,
    /// and reads the reply as the crate reads a real node's.
    fn serve(&mut self, req: &Request, address: &Arc<str>) -> Answer {
        let mut bytes = Vec::new();
        codec::encode(req, Layout::Plain, &mut Sent::all(), &mut bytes);
        let words = resp_words(&bytes);
        let now = self.now();
        let value = match words.first().map(String::as_str) {
            Some("EVALSHA") => {
                let script = scripts::ALL.iter().find(|s| s.hash() == words[1]);
                let script = script.map_or("", |s| s.name());
                let n: usize = words[2].parse().unwrap_or(0);
                let (keys, argv) = words[3..].split_at(n.min(words.len() - 3));
                self.node.eval(now, script, keys, argv)
            }
            _ => self.node.command(now, &words),
        };
        codec::interpret(req, value, address)
    }
}

/// The gate node's queue keys for gate name `gate`.
fn queue_keys(gate: &str) -> (String, String) {
    (
        format!("redlock-queue:{gate}"),
        format!("redlock-alive:{gate}"),
    )
}

/// A bulk string reply's text.
fn text(value: &redis::Value) -> Option<String> {
    match value {
        redis::Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        _ => None,
    }
}

/// The words of one RESP command (an array of bulk strings), as the crate
/// wrote it.
fn resp_words(bytes: &[u8]) -> Vec<String> {
    let mut words = Vec::new();
    let mut at = 0;
    // `*n` or `$len`, then CRLF.
    let header = |at: &mut usize| -> Option<usize> {
        let end = bytes.get(*at..)?.windows(2).position(|w| w == b"\r\n")? + *at;
        let n = std::str::from_utf8(bytes.get(*at + 1..end)?)
            .ok()?
            .parse()
            .ok()?;
        *at = end + 2;
        Some(n)
    };
    let Some(n) = header(&mut at) else {
        return words;
    };
    for _ in 0..n {
        let Some(len) = header(&mut at) else { break };
        let Some(word) = bytes.get(at..at + len) else {
            break;
        };
        words.push(String::from_utf8_lossy(word).into_owned());
        at += len + 2;
    }
    words
}

/// A second client's transport over the same fake nodes.
pub(crate) fn transport_for(nodes: &[FakeNode]) -> Transport {
    let links = nodes
        .iter()
        .map(|node| (Arc::new(NodeShared::new(&node.address)), node.link()));
    Transport::with_links(links, 1024).expect("worker threads")
}

/// `n` fake nodes and a transport over them.
pub(crate) fn cluster(n: usize) -> (Vec<FakeNode>, Transport) {
    cluster_with_capacity(n, 1024)
}

/// `n` fake nodes and a transport over them whose per-node queues hold
/// `capacity` requests.
pub(crate) fn cluster_with_capacity(n: usize, capacity: usize) -> (Vec<FakeNode>, Transport) {
    let nodes: Vec<FakeNode> = (0..n)
        .map(|i| FakeNode::new(&format!("fake:{i}")))
        .collect();
    let links = nodes
        .iter()
        .map(|node| (Arc::new(NodeShared::new(&node.address)), node.link()));
    let transport = Transport::with_links(links, capacity).expect("worker threads");
    (nodes, transport)
}

struct FakeLink {
    shared: Arc<Shared>,
    address: Arc<str>,
}

impl Link for FakeLink {
    fn run(&mut self, batch: &[&Request]) -> Vec<Answer> {
        let mut inner = self.shared.inner.lock();
        inner
            .received
            .extend(batch.iter().map(|req| req.op.clone()));
        let first_keys = batch.iter().map(|req| req.keys()[0].to_string());
        inner.received_keys.extend(first_keys);
        let acquires =
            |req: &&Request| matches!(req.op, Op::Acquire { .. } | Op::AcquireFenced { .. });
        if inner.hold_next && batch.iter().any(acquires) {
            inner.hold_next = false;
            inner.behaviour = Behaviour::Hold;
        }
        let thread = std::thread::current().name().unwrap_or("").to_owned();
        inner.served_on.push(thread);
        self.shared.changed.notify_all();
        let give_up = Instant::now() + Duration::from_secs(10);
        while inner.behaviour == Behaviour::Hold {
            if self
                .shared
                .changed
                .wait_until(&mut inner, give_up)
                .timed_out()
            {
                break;
            }
        }
        let mut woken = Vec::new();
        let answers: Vec<Answer> = match inner.behaviour {
            Behaviour::Fail(kind) => batch
                .iter()
                .map(|_| {
                    Err(NodeFailure::new(
                        self.address.clone(),
                        kind,
                        "scripted failure",
                    ))
                })
                .collect(),
            _ => {
                let lose = inner.lose_fenced_grants;
                batch
                    .iter()
                    .map(|req| {
                        let answer = inner.serve(req, &self.address);
                        let wakes = inner.node.take_wakes();
                        woken.extend(wakes.into_iter().map(|m| (m, req.op.clone())));
                        match req.op {
                            Op::AcquireFenced { .. } if lose => Err(NodeFailure::new(
                                self.address.clone(),
                                FailureKind::Connection,
                                "scripted failure after the grant",
                            )),
                            _ => answer,
                        }
                    })
                    .collect()
            }
        };
        // Told under the node's lock, in the order the node woke them (two
        // clients' links may run batches on one node at once).
        if let Some(wake) = inner.on_wake.clone() {
            for (member, op) in woken {
                wake(&member, op);
            }
        }
        let delay = inner.delay;
        drop(inner);
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        answers
    }
}
