//! Local `redis-server` nodes for tests and examples: started on free loopback
//! ports, each in its own temporary directory, and killed when dropped (even
//! on panic). A node can be paused (SIGSTOP), resumed, killed and restarted.
//!
//! Shared by the integration tests and the examples
//! (`#[path = "../tests/harness/mod.rs"] mod harness;`).
#![allow(dead_code, unreachable_pub)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How to install the server when it is missing.
pub const INSTALL_HINT: &str = "redis-server was not found on PATH. Install it (Debian/Ubuntu: \
     `sudo apt-get install -y redis-server`, or run `sh scripts/ensure-redis.sh`) and try again.";

/// Fails loudly (never skips) when `redis-server` is missing.
pub fn require_redis_server() {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(found, "{INSTALL_HINT}");
}

/// Options for starting nodes.
#[derive(Clone, Debug, Default)]
pub struct NodeOptions {
    /// `requirepass` for every node.
    pub password: Option<String>,
    /// Extra `redis-server` arguments, e.g. `["--appendonly", "yes"]`.
    pub extra_args: Vec<String>,
}

/// One local `redis-server` process.
#[derive(Debug)]
pub struct Node {
    pub port: u16,
    dir: PathBuf,
    options: NodeOptions,
    child: Option<Child>,
    paused: bool,
}

impl Node {
    /// Starts a node on a free port.
    pub fn start(options: &NodeOptions) -> Node {
        require_redis_server();
        for _ in 0..20 {
            let port = free_port();
            let mut node = Node {
                port,
                dir: temp_dir(port),
                options: options.clone(),
                child: None,
                paused: false,
            };
            if node.spawn() {
                return node;
            }
        }
        panic!("could not start redis-server on a free port after 20 tries");
    }

    /// `redis://[:password@]127.0.0.1:port`.
    pub fn url(&self) -> String {
        match &self.options.password {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// `127.0.0.1:port`, the name the client logs and reports this node by.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A direct connection for assertions (bypasses the lock client).
    pub fn conn(&self) -> redis::Connection {
        let client = redis::Client::open(self.url()).expect("node url");
        let conn = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .expect("direct connection to node");
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        conn
    }

    /// `GET key` straight from this node.
    pub fn get(&self, key: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut self.conn())
            .expect("GET")
    }

    /// `PTTL key` straight from this node (-2 when absent).
    pub fn pttl(&self, key: &str) -> i64 {
        redis::cmd("PTTL")
            .arg(key)
            .query(&mut self.conn())
            .expect("PTTL")
    }

    /// Suspends the process (SIGSTOP): it keeps its sockets but answers nothing.
    pub fn pause(&mut self) {
        self.signal("-STOP");
        self.paused = true;
    }

    /// Resumes a paused process (SIGCONT).
    pub fn resume(&mut self) {
        self.signal("-CONT");
        self.paused = false;
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the process (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Starts the killed node again on the same port, with no data.
    pub fn restart(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.spawn() {
            assert!(
                Instant::now() < deadline,
                "could not restart redis-server on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn signal(&self, sig: &str) {
        let child = self.child.as_ref().expect("node is not running");
        let ok = Command::new("kill")
            .arg(sig)
            .arg(child.id().to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} failed");
    }

    /// Spawns the server and waits until it answers PING; false if it exited
    /// (port taken).
    fn spawn(&mut self) -> bool {
        std::fs::create_dir_all(&self.dir).expect("node directory");
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--protected-mode", "no"])
            .args(["--daemonize", "no"])
            .args(["--loglevel", "warning"])
            .arg("--dir")
            .arg(&self.dir);
        if let Some(pw) = &self.options.password {
            cmd.args(["--requirepass", pw]);
        }
        cmd.args(&self.options.extra_args);
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{INSTALL_HINT} ({e})"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                let _ = status;
                self.child = None;
                return false;
            }
            if self.answers_ping() {
                return true;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer within 10 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn answers_ping(&self) -> bool {
        if TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            return false;
        }
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(500)) else {
            return false;
        };
        redis::cmd("PING").query::<String>(&mut conn).is_ok()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A set of independent nodes.
#[derive(Debug)]
pub struct Cluster {
    pub nodes: Vec<Node>,
}

impl Cluster {
    /// Starts `n` nodes without passwords.
    pub fn start(n: usize) -> Cluster {
        Cluster::start_with(n, &NodeOptions::default())
    }

    /// Starts `n` nodes in parallel with the given options.
    pub fn start_with(n: usize, options: &NodeOptions) -> Cluster {
        let nodes = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n).map(|_| s.spawn(|| Node::start(options))).collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("node start"))
                .collect()
        });
        Cluster { nodes }
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// How many nodes hold `key` with exactly `value`.
    pub fn holders(&self, key: &str, value: &str) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.is_running() && n.get(key).as_deref() == Some(value))
            .count()
    }

    /// How many running nodes have `key` at all.
    pub fn count_key(&self, key: &str) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.is_running() && !n.paused && n.get(key).is_some())
            .count()
    }

    /// The values of `key` on running, unpaused nodes.
    pub fn values(&self, key: &str) -> Vec<Option<String>> {
        self.nodes
            .iter()
            .filter(|n| n.is_running() && !n.paused)
            .map(|n| n.get(key))
            .collect()
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

fn temp_dir(port: u16) -> PathBuf {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("redlock-sync-{}-{seq}-{port}", std::process::id()))
}

impl Node {
    /// A node that stays down for `down` before it comes back empty (the
    /// delayed restart an operator uses to keep Redlock safe without
    /// persistence). Blocks for `down`.
    pub fn restart_after(&mut self, down: Duration) {
        self.kill();
        std::thread::sleep(down);
        self.restart();
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }
}

/// What a [`Proxy`] does to the traffic it forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything at once.
    Pass,
    /// Delay every reply chunk by this much.
    Latency(Duration),
    /// Accept connections but forward nothing in either direction.
    Stall,
    /// Forward requests, then send half of the next reply and close.
    DropMidReply,
}

struct ProxyShared {
    fault: std::sync::Mutex<Fault>,
    stop: std::sync::atomic::AtomicBool,
    sockets: std::sync::Mutex<Vec<TcpStream>>,
}

/// A TCP proxy in front of a node, to inject network faults. Dropping it
/// stops it and closes every connection through it.
pub struct Proxy {
    pub port: u16,
    target: u16,
    shared: std::sync::Arc<ProxyShared>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Proxy({} -> {})", self.port, self.target)
    }
}

impl Proxy {
    /// Starts forwarding a free loopback port to `127.0.0.1:target`.
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy port");
        let port = listener.local_addr().unwrap().port();
        let shared = std::sync::Arc::new(ProxyShared {
            fault: std::sync::Mutex::new(Fault::Pass),
            stop: std::sync::atomic::AtomicBool::new(false),
            sockets: std::sync::Mutex::new(Vec::new()),
        });
        let accept_shared = shared.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if accept_shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut sockets = accept_shared.sockets.lock().unwrap();
                    sockets.push(client.try_clone().unwrap());
                    sockets.push(server.try_clone().unwrap());
                }
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let up = accept_shared.clone();
                std::thread::spawn(move || pump(client, server, &up, false));
                let down = accept_shared.clone();
                std::thread::spawn(move || pump(s2, c2, &down, true));
            }
        });
        Proxy {
            port,
            target,
            shared,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn set(&self, fault: Fault) {
        *self.shared.fault.lock().unwrap() = fault;
    }

    /// Closes every connection through the proxy (new ones are accepted).
    pub fn cut_connections(&self) {
        for socket in self.shared.sockets.lock().unwrap().drain(..) {
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.set(Fault::Pass);
        self.cut_connections();
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wake the accept loop
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, shared: &ProxyShared, replies: bool) {
    use std::io::{Read, Write};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        loop {
            if shared.stop.load(Ordering::SeqCst) {
                break;
            }
            let fault = *shared.fault.lock().unwrap();
            match fault {
                // Hold the data: a stalled peer answers nothing.
                Fault::Stall => std::thread::sleep(Duration::from_millis(2)),
                Fault::Latency(delay) if replies => {
                    std::thread::sleep(delay);
                    break;
                }
                Fault::DropMidReply if replies => {
                    let _ = to.write_all(&buf[..n / 2]);
                    let _ = to.shutdown(std::net::Shutdown::Both);
                    let _ = from.shutdown(std::net::Shutdown::Both);
                    return;
                }
                _ => break,
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}

/// Resumes every paused node of a cluster on drop, so a failing test never
/// leaves a stopped process behind (the nodes are killed anyway on drop).
impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if node.paused && node.child.is_some() {
                node.resume();
            }
        }
    }
}

/// What contending workers saw, recorded against a witness Redis that is not
/// one of the lock nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Contention {
    /// Critical sections entered.
    pub acquisitions: u64,
    /// Times a worker entered while another was inside, both holding a valid guard.
    pub overlaps: u64,
    /// Critical sections whose guard had run out of validity by the exit.
    pub overran: u64,
}

impl std::ops::AddAssign for Contention {
    fn add_assign(&mut self, other: Contention) {
        self.acquisitions += other.acquisitions;
        self.overlaps += other.overlaps;
        self.overran += other.overran;
    }
}

/// One worker: until `until`, take `resource`, then on the witness `INCR` an
/// "inside" counter (anything but 1 is an overlap), do an unprotected
/// read-modify-write of a shared counter (a lost update shows an overlap the
/// counter missed), `DECR`, and release.
pub fn contend(
    client: &redlock_sync::Redlock,
    witness_url: &str,
    resource: &str,
    ttl: Duration,
    until: Instant,
) -> Contention {
    contend_counting(
        client,
        witness_url,
        resource,
        ttl,
        until,
        &AtomicUsize::new(0),
    )
}

/// [`contend`], also counting acquisitions in `progress` as they happen.
pub fn contend_counting(
    client: &redlock_sync::Redlock,
    witness_url: &str,
    resource: &str,
    ttl: Duration,
    until: Instant,
    progress: &AtomicUsize,
) -> Contention {
    let mut witness = redis::Client::open(witness_url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .expect("witness connection");
    let inside_key = format!("witness:{resource}:inside");
    let counter_key = format!("witness:{resource}:counter");
    let mut seen = Contention::default();
    while Instant::now() < until {
        let Ok(guard) = client.lock_for(resource, ttl, Duration::from_millis(500)) else {
            continue;
        };
        let inside: i64 = redis::cmd("INCR")
            .arg(&inside_key)
            .query(&mut witness)
            .unwrap();
        if inside != 1 && guard.is_valid() {
            seen.overlaps += 1;
        }
        let value: Option<i64> = redis::cmd("GET")
            .arg(&counter_key)
            .query(&mut witness)
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg(&counter_key)
            .arg(value.unwrap_or(0) + 1)
            .query(&mut witness)
            .unwrap();
        let _: i64 = redis::cmd("DECR")
            .arg(&inside_key)
            .query(&mut witness)
            .unwrap();
        if !guard.is_valid() {
            seen.overran += 1;
        }
        seen.acquisitions += 1;
        progress.fetch_add(1, Ordering::Relaxed);
        drop(guard);
    }
    seen
}

/// The witness's shared counter for `resource` (compare with acquisitions).
pub fn witness_counter(witness: &Node, resource: &str) -> u64 {
    witness
        .get(&format!("witness:{resource}:counter"))
        .map_or(0, |v| v.parse().expect("counter"))
}

/// Polls `cond` until it holds, failing loudly after `within`. Only for state
/// the client updates asynchronously on the nodes, where no event can be
/// awaited.
pub fn eventually(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for: {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Threads of this process started by redlock-sync (they are named
/// `redlock-…`). Linux only.
pub fn client_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task (Linux)")
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|n| n.starts_with("redlock-"))
        })
        .count()
}
