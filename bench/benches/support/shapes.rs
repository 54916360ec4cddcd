//! The two thread shapes a Redlock client with a thread per node can take,
//! each built as thin as it can be (raw `redis`, no bookkeeping, no
//! timeouts, a majority decides), to measure what the shape itself costs
//! beside floor-pipe5, which runs every node from the caller's thread:
//!
//! - **workers**: the caller queues a request per node on a channel; the
//!   node's worker writes it, blocks in `read`, and hands the reply to the
//!   caller (redlock-sync's shape today);
//! - **readers**: the caller writes its request to every node's socket
//!   itself; a reader per node is already blocked in `read` and hands the
//!   reply to the caller (the shape a transport of our own could take);
//!   also with `TIME` after each request.
//!
//! Each bench thread gets a client of its own (its connections and node
//! threads), as separate processes would have. `BENCH_ONLY=shapes`.

use std::collections::VecDeque;
use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;

use crossbeam_channel::{Sender, unbounded};
use parking_lot::{Condvar, Mutex};

/// One request's replies: how many nodes said yes and no.
struct Round {
    nodes: usize,
    counts: Mutex<(usize, usize)>,
    decided: Condvar,
}

impl Round {
    fn new(nodes: usize) -> Arc<Self> {
        Arc::new(Round {
            nodes,
            counts: Mutex::new((0, 0)),
            decided: Condvar::new(),
        })
    }

    fn is_decided(&self, (yes, no): (usize, usize)) -> bool {
        let majority = self.nodes / 2 + 1;
        yes >= majority || no > self.nodes - majority || yes + no == self.nodes
    }

    fn record(&self, reply: &redis::RedisResult<redis::Value>) {
        let yes = matches!(reply, Ok(redis::Value::Okay | redis::Value::Int(1)));
        let mut counts = self.counts.lock();
        let was = self.is_decided(*counts);
        if yes {
            counts.0 += 1;
        } else {
            counts.1 += 1;
        }
        if !was && self.is_decided(*counts) {
            self.decided.notify_one();
        }
    }

    /// Waits until a majority decided: whether it said yes.
    fn wait(&self) -> bool {
        let mut counts = self.counts.lock();
        while !self.is_decided(*counts) {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            assert!(
                !self.decided.wait_until(&mut counts, deadline).timed_out(),
                "a shape's round got no majority in 5 s"
            );
        }
        counts.0 > self.nodes / 2
    }
}

/// A request for one node, and the round its reply goes to.
type Job = (Arc<[u8]>, Arc<Round>);

/// The replies a node still owes, oldest first: each to its round, or to
/// nobody (a `TIME` after a request).
type Pending = Arc<Mutex<VecDeque<Option<Arc<Round>>>>>;

/// How a shape's client sends one packed command to every node.
pub trait Shape: Send {
    /// Sends `packed` to every node; whether a majority said yes.
    fn round(&mut self, packed: Arc<[u8]>) -> bool;
}

/// Workers: a channel and a thread per node that writes and reads.
pub struct Workers {
    queues: Vec<Sender<Job>>,
}

impl Workers {
    /// `timed`: each request goes with `TIME` after it, as this crate
    /// reads a node's clock with its votes.
    pub fn connect(urls: &[String], timed: bool) -> Self {
        let queues = urls
            .iter()
            .map(|url| {
                let info = redis::IntoConnectionInfo::into_connection_info(url.as_str())
                    .unwrap()
                    .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
                let mut conn = redis::Client::open(info).unwrap().get_connection().unwrap();
                let (tx, rx) = unbounded::<Job>();
                std::thread::spawn(move || {
                    let mut batch = Vec::new();
                    while let Ok(job) = rx.recv() {
                        batch.push(job);
                        batch.extend(rx.try_iter());
                        // One write for the batch, as a pipeline.
                        let mut out = Vec::new();
                        for (packed, _) in &batch {
                            out.extend_from_slice(packed);
                        }
                        if timed {
                            out.extend_from_slice(b"*1\r\n$4\r\nTIME\r\n");
                        }
                        conn.send_packed_command(&out).unwrap();
                        for (_, round) in batch.drain(..) {
                            round.record(&conn.recv_response());
                        }
                        if timed {
                            conn.recv_response().unwrap();
                        }
                    }
                });
                tx
            })
            .collect();
        Workers { queues }
    }
}

impl Shape for Workers {
    fn round(&mut self, packed: Arc<[u8]>) -> bool {
        let round = Round::new(self.queues.len());
        for queue in &self.queues {
            queue.send((packed.clone(), round.clone())).unwrap();
        }
        round.wait()
    }
}

/// Readers: the caller writes to every node's socket; a thread per node
/// reads.
pub struct Readers {
    nodes: Vec<(TcpStream, Pending)>,
    /// Each request goes with `TIME` after it, in the same write.
    timed: bool,
}

impl Readers {
    pub fn connect(urls: &[String], timed: bool) -> Self {
        let nodes = urls
            .iter()
            .map(|url| {
                let address = url.trim_start_matches("redis://").trim_end_matches('/');
                let writer = TcpStream::connect(address).unwrap();
                writer.set_nodelay(true).unwrap();
                let mut reader = writer.try_clone().unwrap();
                let pending: Pending = Arc::default();
                let waiting = pending.clone();
                std::thread::spawn(move || {
                    let mut parser = redis::Parser::new();
                    loop {
                        let reply = parser.parse_value(&mut reader);
                        if matches!(&reply, Err(e) if e.is_io_error()) {
                            return;
                        }
                        // Taken before the round is told: the caller it
                        // wakes writes its next request under this lock.
                        let next = waiting.lock().pop_front();
                        match next {
                            Some(Some(round)) => round.record(&reply),
                            Some(None) => {}
                            None => return,
                        }
                    }
                });
                (writer, pending)
            })
            .collect();
        Readers { nodes, timed }
    }
}

impl Shape for Readers {
    fn round(&mut self, packed: Arc<[u8]>) -> bool {
        let round = Round::new(self.nodes.len());
        let mut out = packed.to_vec();
        if self.timed {
            out.extend_from_slice(b"*1\r\n$4\r\nTIME\r\n");
        }
        for (writer, pending) in &mut self.nodes {
            let mut pending = pending.lock();
            pending.push_back(Some(round.clone()));
            if self.timed {
                pending.push_back(None);
            }
            drop(pending);
            writer.write_all(&out).unwrap();
        }
        round.wait()
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        for (writer, _) in &self.nodes {
            let _ = writer.shutdown(std::net::Shutdown::Both);
        }
    }
}
