//! Local `redis-server` nodes for tests and examples: started on free loopback
//! ports, each in its own temporary directory, and killed when dropped (even
//! on panic). A node can be paused (SIGSTOP), resumed, killed and restarted.
//!
//! Shared by the integration tests, the examples and the bench
//! (`#[path = "../tests/harness/mod.rs"] mod harness;`). `proxy` injects network
//! faults; `witness` checks mutual exclusion from outside the lock nodes.
#![allow(dead_code, unreachable_pub, unused_imports)]

mod clients;
pub mod clock;
mod fenced;
pub mod partition;
mod proxy;
pub mod pubsub;
pub mod redis_cluster;
pub mod sentinel;
mod tls;
mod turns;
mod witness;

pub use clients::{builder, capture_logs, client, log_mark, logs, logs_since, test_client};
pub use fenced::FencedStore;
pub use proxy::{Fault, Proxy};
pub use tls::Pki;
pub use turns::{alone, heavy};
pub use witness::{Contention, Inside, contend, contend_counting, contend_while, witness_counter};

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The per-node timeout of clients in tests that are not about it. Derived
/// from a short TTL the timeout is 10 ms, which a 2-core machine whose
/// cores are busy misses now and then (a thread waits its turn for longer):
/// such a test then failed on a `Timeout` that had nothing to do with what
/// it checks. 250 ms is the derived timeout's ceiling.
pub const ROOMY_NODE_TIMEOUT: Duration = Duration::from_millis(250);

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
    /// Also listen on a unix socket in the node's directory.
    pub unix_socket: bool,
    /// Run with the clock-shift library preloaded, so that the test can
    /// move the node's wall clock ([`Node::set_clock_offset`]).
    pub shift_clock: bool,
    /// Also serve TLS, with these arguments ([`Pki::server_tls`]), on a
    /// port of its own ([`Node::tls_port`]), picked afresh at each try to
    /// start, as the plain port is.
    pub tls: Option<Vec<String>>,
}

/// One local `redis-server` process.
#[derive(Debug)]
pub struct Node {
    pub port: u16,
    /// The TLS port, with [`NodeOptions::tls`].
    pub tls_port: Option<u16>,
    dir: PathBuf,
    options: NodeOptions,
    child: Option<Child>,
    paused: bool,
    /// The harness's own connection for reading node state, kept open
    /// between reads (see [`Node::query`]).
    probe: Probe,
}

/// How long the harness's own connections wait to connect and for a reply:
/// generous, so that a loaded machine slows a test instead of failing it.
/// They never carry the client under test's traffic.
const PATIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the harness keeps trying to reach a running node for its own
/// reads and set-up before it fails the test.
const PATIENT_FOR: Duration = Duration::from_secs(30);

/// A cached inspection connection. Opening a connection per read (a poll
/// every few ms over five nodes) was thousands of connections a second under
/// `settles`, each with its own handshake for the loaded node to answer.
#[derive(Default)]
struct Probe(parking_lot::Mutex<Option<redis::Connection>>);

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Probe")
    }
}

/// Whether `err` says the connection (not the command) failed: worth a new
/// connection and another try.
fn is_connection_failure(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
}

impl Node {
    /// Starts a node on a free port.
    pub fn start(options: &NodeOptions) -> Node {
        require_redis_server();
        for _ in 0..20 {
            let port = free_port();
            let mut node = Node {
                port,
                tls_port: options.tls.as_ref().map(|_| free_port()),
                dir: temp_dir(port),
                options: options.clone(),
                child: None,
                paused: false,
                probe: Probe::default(),
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

    /// The unix socket (with `NodeOptions::unix_socket`).
    pub fn socket_path(&self) -> PathBuf {
        self.dir.join("redis.sock")
    }

    /// `unix:///…/redis.sock` (with `NodeOptions::unix_socket`).
    pub fn unix_url(&self) -> String {
        format!("unix://{}", self.socket_path().display())
    }

    /// `127.0.0.1:port`, the name the client logs and reports this node by.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A direct connection for assertions and set-up (bypasses the lock
    /// client), opened patiently: see [`Node::conn_db`].
    pub fn conn(&self) -> redis::Connection {
        self.conn_db(0)
    }

    /// A direct connection, or `None` when the node does not answer
    /// within a second (killed, paused).
    pub fn conn_quiet(&self) -> Option<redis::Connection> {
        let client = redis::Client::open(self.url()).ok()?;
        let conn = client
            .get_connection_with_timeout(Duration::from_secs(1))
            .ok()?;
        conn.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        Some(conn)
    }

    /// A direct connection to this node, in database `db`: each try waits
    /// [`PATIENT_TIMEOUT`] to connect, and a failed try is repeated for
    /// [`PATIENT_FOR`] before the test fails (a connect that timed out
    /// under load failed a partition test once). Replies are awaited for
    /// [`PATIENT_TIMEOUT`].
    pub fn conn_db(&self, db: u32) -> redis::Connection {
        let deadline = Instant::now() + PATIENT_FOR;
        loop {
            match self.try_conn_db(db) {
                Ok(conn) => return conn,
                Err(err) if Instant::now() < deadline && is_connection_failure(&err) => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(err) => panic!("direct connection to node {}: {err}", self.address()),
            }
        }
    }

    fn try_conn_db(&self, db: u32) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(format!("{}/{db}", self.url()))?;
        let conn = client.get_connection_with_timeout(PATIENT_TIMEOUT)?;
        conn.set_read_timeout(Some(PATIENT_TIMEOUT))?;
        conn.set_write_timeout(Some(PATIENT_TIMEOUT))?;
        Ok(conn)
    }

    /// Runs `cmd` on the harness's own cached connection to this node and
    /// returns its reply, reconnecting and trying again for
    /// [`PATIENT_FOR`] while the connection fails (a server error fails at
    /// once). A command may so run twice: only for reads and commands
    /// that can (set-up that must run once goes through [`Node::conn`]). This reads the node **once**: after a call that returns at a
    /// majority, the call's other sends may still be on their way, so
    /// assert such state through [`settles`] (or [`Cluster::await_count`]).
    pub fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        let deadline = Instant::now() + PATIENT_FOR;
        let mut cached = self.probe.0.lock();
        loop {
            let conn = match cached.as_mut() {
                Some(conn) => conn,
                None => cached.insert(self.conn_db(0)),
            };
            match cmd.query(conn) {
                Ok(value) => return value,
                Err(err) if Instant::now() < deadline && is_connection_failure(&err) => {
                    *cached = None;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(err) => panic!("a query on node {}: {err}", self.address()),
            }
        }
    }

    /// `GET key` straight from this node, once (see [`Node::query`]).
    pub fn get_now(&self, key: &str) -> Option<String> {
        self.query(redis::cmd("GET").arg(key))
    }

    /// `PTTL key` straight from this node, once (-2 when absent; see
    /// [`Node::query`]).
    pub fn pttl_now(&self, key: &str) -> i64 {
        self.query(redis::cmd("PTTL").arg(key))
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
        *self.probe.0.lock() = None;
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Kills the node and starts it again on the same port with whatever it
    /// persisted (its AOF, with `appendonly yes` among the extra args).
    pub fn restart_keeping_data(&mut self) {
        self.kill();
        self.respawn();
    }

    /// Admits the node as an operator starting a new cluster would (the
    /// one-liner in docs/operations.md): sets `redlock:admitted` to its
    /// `{run_id}:{master_replid} operator`.
    pub fn admit(&self) {
        let field = |section: &str, name: &str| -> String {
            let info: String = self.query(redis::cmd("INFO").arg(section));
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .unwrap_or_else(|| panic!("{name} in INFO {section}"))
                .trim()
                .to_owned()
        };
        let id = format!(
            "{}:{}",
            field("server", "run_id"),
            field("replication", "master_replid")
        );
        let _: () = self.query(
            redis::cmd("SET")
                .arg("redlock:admitted")
                .arg(format!("{id} operator")),
        );
    }

    /// A copy of the node's data directory as it is now (an operator's
    /// backup), to bring back with [`restore`](Self::restore).
    pub fn backup(&self) -> PathBuf {
        let backup = self.dir.with_extension("backup");
        let _ = std::fs::remove_dir_all(&backup);
        copy_dir(&self.dir, &backup);
        backup
    }

    /// Kills the node and starts it again on the same port from `backup`
    /// (a restored backup: older data than it had acknowledged).
    pub fn restore(&mut self, backup: &std::path::Path) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        copy_dir(backup, &self.dir);
        self.respawn();
    }

    /// Starts the killed node again on the same port, with no data.
    pub fn restart(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        self.respawn();
    }

    /// Starts the (killed) node again on its port, waiting for the port.
    /// One try can take 10 s (a server that does not answer, seen beside
    /// busy loops with the machine's I/O stalled, is killed and tried
    /// again): the tries go on for 30 s, as the harness's connections do.
    fn respawn(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
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
        if self.options.unix_socket {
            cmd.arg("--unixsocket").arg(self.socket_path());
            cmd.args(["--unixsocketperm", "700"]);
        }
        cmd.args(&self.options.extra_args);
        if let (Some(port), Some(args)) = (self.tls_port, &self.options.tls) {
            cmd.args(["--tls-port", &port.to_string()]).args(args);
        }
        if self.options.shift_clock {
            if !self.clock_file().exists() {
                std::fs::write(self.clock_file(), "0").expect("clock offset file");
            }
            cmd.env("LD_PRELOAD", clock::library())
                .env("CLOCKSHIFT_FILE", self.clock_file());
        }
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
            if Instant::now() >= deadline {
                // Seen beside busy loops, with the machine's I/O stalled:
                // this try ends, and `start` tries again on another port,
                // as for a port lost to another process.
                eprintln!(
                    "redis-server on port {} did not answer within 10 s: trying again",
                    self.port
                );
                self.kill();
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether *our* process answers on the port, done loading its data: two
    /// nodes started at once can be handed the same free port, and the
    /// loser's check must not be answered by the winner's server.
    fn answers_ping(&self) -> bool {
        let Some(pid) = self.child.as_ref().map(Child::id) else {
            return false;
        };
        if TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            return false;
        }
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(500)) else {
            return false;
        };
        let Ok(info) = redis::cmd("INFO").arg("server").query::<String>(&mut conn) else {
            return false;
        };
        // A node loading its data answers INFO but refuses commands
        // (`LOADING`): not ready yet (a restored backup's `GET` failed so
        // once under load).
        info.lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .is_some_and(|p| p.trim() == pid.to_string())
            && redis::cmd("PING").query::<String>(&mut conn).is_ok()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(self.dir.with_extension("backup"));
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

    /// How many running, unpaused nodes hold `key` with exactly `value`,
    /// read once: after a
    /// call that returns at a majority, use [`Cluster::await_holders`].
    pub fn holders_now(&self, key: &str, value: &str) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.is_running() && !n.paused && n.get_now(key).as_deref() == Some(value))
            .count()
    }

    /// How many running, unpaused nodes have `key` at all, read once: after
    /// a call that returns at a majority, use [`Cluster::await_count`].
    pub fn count_key_now(&self, key: &str) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.is_running() && !n.paused && n.get_now(key).is_some())
            .count()
    }

    /// Waits (up to 10 s) until exactly `n` running, unpaused nodes have
    /// `key`, and fails the test with the last count otherwise. A call that
    /// returns at a majority (an acquisition, a release, a failed round's
    /// clean-up) is still sending to the other nodes: this awaits them.
    pub fn await_count(&self, key: &str, n: usize) {
        settles_at(&format!("the nodes that have {key}"), n, || {
            self.count_key_now(key)
        });
    }

    /// Waits (up to 5 s) until no running, unpaused node has `key`: a
    /// release's or a failed round's clean-up landed everywhere. Give the
    /// key a TTL above 5 s, so that a key left behind fails this instead of
    /// expiring first.
    pub fn await_gone(&self, key: &str) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let left = self.count_key_now(key);
            if left == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{key} still on {left} node(s) after 5 s: left behind"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits (up to 10 s) until exactly `n` running nodes hold `key` with
    /// `value` (see [`Cluster::await_count`]).
    pub fn await_holders(&self, key: &str, value: &str, n: usize) {
        settles_at(&format!("the nodes that hold {key}"), n, || {
            self.holders_now(key, value)
        });
    }

    /// Connections other clients hold to each node (the harness's own
    /// inspection connection excluded).
    pub fn client_connections(&self) -> Vec<usize> {
        self.nodes
            .iter()
            .map(|n| {
                let info: String = n.query(redis::cmd("INFO").arg("clients"));
                let count: usize = info
                    .lines()
                    .find_map(|l| l.strip_prefix("connected_clients:"))
                    .and_then(|v| v.trim().parse().ok())
                    .expect("connected_clients in INFO");
                count - 1
            })
            .collect()
    }

    /// The values of `key` on running, unpaused nodes, read once (see
    /// [`Node::query`]).
    pub fn values_now(&self, key: &str) -> Vec<Option<String>> {
        self.nodes
            .iter()
            .filter(|n| n.is_running() && !n.paused)
            .map(|n| n.get_now(key))
            .collect()
    }
}

/// The keys on the node `conn` reaches, but the record of the TTLs clients
/// use (`redlock:ttls`, which every client keeps on every node it votes
/// on): what a test that counts keys left behind counts.
pub fn data_keys(conn: &mut redis::Connection) -> usize {
    let all: usize = redis::cmd("DBSIZE").query(conn).unwrap();
    let ttls: Vec<String> = redis::cmd("KEYS").arg("redlock:ttls*").query(conn).unwrap();
    all - ttls.len()
}

/// This test binary, to be run again as a child process that runs only
/// its ignored test `name` of `module` (pass `module_path!()`): the child
/// half of a test. Panics when the binary has no such ignored test, so a
/// renamed or moved child never "passes" by running nothing.
pub fn child_test(module: &str, name: &str) -> Command {
    let path = match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{name}"),
        None => name.to_owned(),
    };
    let exe = std::env::current_exe().expect("the path of this test binary");
    let listed = Command::new(&exe)
        .args([path.as_str(), "--exact", "--ignored", "--list"])
        .output()
        .expect("list this binary's tests");
    let line = format!("{path}: test");
    assert!(
        String::from_utf8_lossy(&listed.stdout)
            .lines()
            .any(|l| l == line),
        "{} has no ignored test {path}",
        exe.display()
    );
    let mut child = Command::new(exe);
    child.args([path.as_str(), "--exact", "--ignored"]);
    child
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

fn temp_dir(port: u16) -> PathBuf {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    scratch_dir(&format!("redlock-sync-{}-{seq}-{port}", std::process::id()))
}

/// Where the harness keeps a server's files: `/dev/shm` (memory) when a
/// directory can be made there, else the temp directory. A Sentinel
/// `fsync`s its configuration before it answers at start; on the disk,
/// beside the suite's writes, one such `fsync` took over 10 s.
pub fn scratch_dir(name: &str) -> PathBuf {
    static BASE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        let shm = std::path::Path::new("/dev/shm")
            .join(format!("redlock-sync-probe-{}", std::process::id()));
        match std::fs::create_dir_all(&shm) {
            Ok(()) => {
                let _ = std::fs::remove_dir(&shm);
                PathBuf::from("/dev/shm")
            }
            Err(_) => std::env::temp_dir(),
        }
    })
    .join(name)
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

    /// How many scripts this node ran: `EVAL` and `EVALSHA` calls.
    pub fn scripts_run(&self) -> u64 {
        self.calls("eval") + self.calls("evalsha")
    }

    /// How many times this node has run `command` (from `INFO commandstats`;
    /// a subcommand is written `client|kill`).
    pub fn calls(&self, command: &str) -> u64 {
        let info: String = self.query(redis::cmd("INFO").arg("commandstats"));
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }
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

/// The threads one client runs over `nodes` nodes: a worker and a
/// connection helper per node.
pub fn threads_per_client(nodes: usize) -> usize {
    2 * nodes
}

/// The environment variable `var` of a test run as a child process by the
/// test(s) `parent` names, which set it. Panics when it is missing: a child
/// run on its own (`cargo test -- --include-ignored`) fails loudly, never
/// passes without having done anything.
pub fn child_env(var: &str, parent: &str) -> String {
    std::env::var(var).unwrap_or_else(|err| {
        panic!(
            "{var} is missing ({err}): this test is run as a child process by {parent}, \
             which sets it; run that test instead"
        )
    })
}

/// [`eventually`] with the usual 10 s bound.
pub fn settles(what: &str, cond: impl FnMut() -> bool) {
    eventually(what, Duration::from_secs(10), cond);
}

/// Polls `read` until it returns `want`, failing loudly after 10 s with the
/// last value read, how long that read took, and the longest time this
/// process was not scheduled meanwhile ([`stalls`]): [`settles`] for a
/// value whose last reading explains a failure.
pub fn settles_at<T: PartialEq + std::fmt::Debug>(
    what: &str,
    want: T,
    mut read: impl FnMut() -> T,
) {
    let stalls = stalls();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let began = Instant::now();
        let got = read();
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after 10 s waiting for {what} to be {want:?}: last {got:?} (read in \
             {:?}; the longest stall of this process meanwhile: {:?})",
            began.elapsed(),
            stalls.longest()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Watches, from now on, for moments when this process is not scheduled:
/// a thread that sleeps 5 ms at a time notes how much longer each sleep
/// took. Diagnostic only: a failure's message says whether the machine
/// stood still.
pub fn stalls() -> Stalls {
    let longest = Arc::new(AtomicU64::new(0));
    let watched = Arc::downgrade(&longest);
    std::thread::Builder::new()
        .name("harness-stalls".into())
        .spawn(move || {
            let tick = Duration::from_millis(5);
            while let Some(longest) = watched.upgrade() {
                let start = Instant::now();
                std::thread::sleep(tick);
                let late = start.elapsed().saturating_sub(tick);
                longest.fetch_max(late.as_micros() as u64, Ordering::Relaxed);
            }
        })
        .expect("the stall watcher starts");
    Stalls { longest }
}

/// See [`stalls`]; the watcher ends within a tick of this being dropped.
pub struct Stalls {
    longest: Arc<AtomicU64>,
}

impl Stalls {
    /// The longest a 5 ms sleep overran so far.
    pub fn longest(&self) -> Duration {
        Duration::from_micros(self.longest.load(Ordering::Relaxed))
    }
}

/// Threads of this process started by redlock-sync (they are named
/// `redlock-…`). Linux only.
pub fn client_threads() -> usize {
    threads_where(|name| name.starts_with("redlock-"))
}

/// Threads of this process named `name`. Linux only.
pub fn threads_named(name: &str) -> usize {
    threads_where(|n| n == name)
}

/// Threads of this process whose name passes `keep`. Linux only.
fn threads_where(keep: impl Fn(&str) -> bool) -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task (Linux)")
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|n| keep(n.trim_end()))
        })
        .count()
}

/// Copies a directory tree.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("backup directory");
    for entry in std::fs::read_dir(from).expect("node directory").flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a data file");
        }
    }
}

/// A loopback port that takes connections (the kernel completes them into
/// the listen backlog) and never answers a byte: a node this client cannot
/// reach, while other clients reach the real one.
#[derive(Debug)]
pub struct BlackHole {
    listener: TcpListener,
}

impl BlackHole {
    pub fn new() -> BlackHole {
        BlackHole {
            listener: TcpListener::bind("127.0.0.1:0").expect("bind a black hole"),
        }
    }

    pub fn url(&self) -> String {
        let port = self.listener.local_addr().expect("local addr").port();
        format!("redis://127.0.0.1:{port}")
    }
}
