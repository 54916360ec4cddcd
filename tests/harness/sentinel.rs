//! Sentinel-managed node groups: each a master and a replica, watched by
//! three `redis-server --sentinel` processes (the same binary), all on
//! loopback.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Node, NodeOptions, free_port};

/// Passwords for the masters (and replicas) and for the Sentinels.
#[derive(Clone, Debug, Default)]
pub struct Secrets {
    pub master: Option<String>,
    pub sentinel: Option<String>,
}

/// One group: a master, and its replica.
pub struct Group {
    pub name: String,
    pub nodes: Vec<Node>,
}

/// One Sentinel process. Killed on drop.
pub struct Sentinel {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Sentinel {
    /// Stops this Sentinel (the others carry on).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Groups and the Sentinels that watch them all.
pub struct Sentinels {
    pub groups: Vec<Group>,
    pub sentinels: Vec<Sentinel>,
    secrets: Secrets,
}

impl Sentinels {
    /// `groups` groups (`g0`, `g1`, …) of a master and a synced replica,
    /// and three Sentinels that know every group and its replica.
    pub fn start(groups: usize, secrets: &Secrets) -> Sentinels {
        Self::start_with(groups, secrets, false)
    }

    /// [`start`](Self::start), every node's wall clock movable with
    /// `shift_clock` ([`Node::set_clock_offset`]).
    pub fn start_with(groups: usize, secrets: &Secrets, shift_clock: bool) -> Sentinels {
        let options = NodeOptions {
            password: secrets.master.clone(),
            shift_clock,
            ..NodeOptions::default()
        };
        let groups: Vec<Group> = (0..groups)
            .map(|g| {
                // A replica syncs at once, not after the 5 s Redis waits
                // for more replicas to share a diskless sync.
                let master = Node::start(&NodeOptions {
                    extra_args: vec!["--repl-diskless-sync-delay".into(), "0".into()],
                    ..options.clone()
                });
                let mut args = vec![
                    "--replicaof".to_owned(),
                    "127.0.0.1".to_owned(),
                    master.port.to_string(),
                ];
                if let Some(pw) = &secrets.master {
                    args.extend(["--masterauth".to_owned(), pw.clone()]);
                }
                let replica = Node::start(&NodeOptions {
                    extra_args: args,
                    ..options.clone()
                });
                Group {
                    name: format!("g{g}"),
                    nodes: vec![master, replica],
                }
            })
            .collect();
        for group in &groups {
            super::eventually("the replica synced", Duration::from_secs(20), || {
                info(&group.nodes[1], "replication").contains("master_link_status:up")
            });
        }
        let sentinels = (0..3).map(|_| spawn_sentinel(&groups, secrets)).collect();
        let all = Sentinels {
            groups,
            sentinels,
            secrets: secrets.clone(),
        };
        for g in 0..all.groups.len() {
            super::eventually(
                "every Sentinel knows the group's replica and the other Sentinels",
                Duration::from_secs(30),
                || {
                    all.sentinels.iter().all(|s| {
                        let replicas = all.ask(s, &["SENTINEL", "REPLICAS", &all.groups[g].name]);
                        let sentinels = all.ask(s, &["SENTINEL", "SENTINELS", &all.groups[g].name]);
                        matches!(&replicas, Ok(redis::Value::Array(r)) if r.len() == 1)
                            && matches!(&sentinels, Ok(redis::Value::Array(o)) if o.len() == 2)
                    })
                },
            );
        }
        all
    }

    /// One `redis+sentinel://` URL per group, naming all three Sentinels.
    pub fn urls(&self) -> Vec<String> {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        let auth = self
            .secrets
            .master
            .as_ref()
            .map(|pw| format!(":{pw}@"))
            .unwrap_or_default();
        self.groups
            .iter()
            .map(|g| format!("redis+sentinel://{auth}{}/{}", hosts.join(","), g.name))
            .collect()
    }

    /// A command to Sentinel `s`.
    fn ask(&self, s: &Sentinel, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let url = match &self.secrets.sentinel {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}", s.port),
            None => format!("redis://127.0.0.1:{}", s.port),
        };
        let client = redis::Client::open(url)?;
        let mut conn = client.get_connection_with_timeout(Duration::from_secs(2))?;
        conn.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut conn)
    }

    /// Starts Sentinel `i` again after [`Sentinel::kill`], on its port and
    /// with the state it saved.
    pub fn restart_sentinel(&mut self, i: usize) {
        let sentinel = &mut self.sentinels[i];
        assert!(sentinel.child.is_none(), "Sentinel {i} runs");
        sentinel.child = Some(launch(&sentinel.dir.join("sentinel.conf")));
        assert!(
            wait_answers(sentinel, &self.secrets),
            "the restarted Sentinel exited (its port was taken)"
        );
    }

    /// The port of group `g`'s master, as the first Sentinel that answers
    /// says.
    pub fn master_port(&self, g: usize) -> u16 {
        for s in self.sentinels.iter().filter(|s| s.child.is_some()) {
            let answer: redis::RedisResult<(String, String)> = self
                .ask(
                    s,
                    &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.groups[g].name],
                )
                .and_then(|v| redis::from_redis_value(v).map_err(redis::RedisError::from));
            if let Ok((_, port)) = answer {
                return port.parse().expect("a port");
            }
        }
        panic!("no Sentinel names the master of {}", self.groups[g].name);
    }

    /// Group `g`'s master node.
    pub fn master(&self, g: usize) -> &Node {
        let port = self.master_port(g);
        self.groups[g]
            .nodes
            .iter()
            .find(|n| n.port == port)
            .expect("the master is one of the group's nodes")
    }

    /// `SENTINEL FAILOVER` of group `g`; returns once the Sentinels name
    /// the other node as master and it answers as one.
    pub fn failover(&self, g: usize) {
        let before = self.master_port(g);
        let name = &self.groups[g].name;
        let deadline = Instant::now() + Duration::from_secs(60);
        // A Sentinel may refuse while it still settles ("-NOGOODSLAVE"),
        // and a failover it accepted may time out (its failover-timeout is
        // 5 s; on a loaded machine one did, and the master never changed):
        // ask again until the Sentinels name another master, bounded.
        let mut asked_at: Option<Instant> = None;
        while self.master_port(g) == before {
            assert!(
                Instant::now() < deadline,
                "the Sentinels never named a new master for {name}"
            );
            if asked_at.is_none_or(|at| at.elapsed() > Duration::from_secs(6)) {
                let asked = self
                    .sentinels
                    .iter()
                    .filter(|s| s.child.is_some())
                    .find_map(|s| self.ask(s, &["SENTINEL", "FAILOVER", name]).ok());
                if asked.is_some() {
                    asked_at = Some(Instant::now());
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let promoted = self.master(g);
        super::eventually(
            "the promoted node answers as master",
            Duration::from_secs(30),
            || info(promoted, "replication").contains("role:master"),
        );
    }
}

/// `INFO section` of `node`.
pub fn info(node: &Node, section: &str) -> String {
    node.query(redis::cmd("INFO").arg(section))
}

fn spawn_sentinel(groups: &[Group], secrets: &Secrets) -> Sentinel {
    // Two servers started at once can be handed the same free port: the
    // one that loses exits, and starts again on another (as `Node::start`).
    for _ in 0..20 {
        let port = free_port();
        // Numbered: two tries handed the same port must not share (and
        // the loser's drop delete) the winner's directory.
        static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = super::scratch_dir(&format!(
            "redlock-sentinel-{}-{seq}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("sentinel directory");
        let conf = dir.join("sentinel.conf");
        std::fs::File::create(&conf)
            .and_then(|mut f| f.write_all(config(port, &dir, groups, secrets).as_bytes()))
            .expect("sentinel.conf");
        let mut sentinel = Sentinel {
            port,
            child: Some(launch(&conf)),
            dir,
        };
        if wait_answers(&mut sentinel, secrets) {
            return sentinel;
        }
    }
    panic!("could not start a Sentinel on a free port after 20 tries");
}

/// A Sentinel's configuration: on `port`, monitoring `groups`.
fn config(port: u16, dir: &std::path::Path, groups: &[Group], secrets: &Secrets) -> String {
    let mut text = format!(
        "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {}\nlogfile {}\n",
        dir.display(),
        dir.join("sentinel.log").display()
    );
    if let Some(pw) = &secrets.sentinel {
        text.push_str(&format!("requirepass {pw}\nsentinel sentinel-pass {pw}\n"));
    }
    for group in groups {
        let name = &group.name;
        text.push_str(&format!(
            "sentinel monitor {name} 127.0.0.1 {} 2\n\
             sentinel down-after-milliseconds {name} 1000\n\
             sentinel failover-timeout {name} 5000\n\
             sentinel parallel-syncs {name} 1\n",
            group.nodes[0].port
        ));
        if let Some(pw) = &secrets.master {
            text.push_str(&format!("sentinel auth-pass {name} {pw}\n"));
        }
    }
    text
}

/// `redis-server conf --sentinel`.
fn launch(conf: &std::path::Path) -> Child {
    Command::new("redis-server")
        .arg(conf)
        .arg("--sentinel")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server --sentinel")
}

/// Waits until `sentinel`'s own process answers `PING` (not another
/// server on its port): `false` when it exited first (its port was taken).
fn wait_answers(sentinel: &mut Sentinel, secrets: &Secrets) -> bool {
    let url = match &secrets.sentinel {
        Some(pw) => format!("redis://:{pw}@127.0.0.1:{}", sentinel.port),
        None => format!("redis://127.0.0.1:{}", sentinel.port),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let Some(child) = sentinel.child.as_mut() else {
            return false;
        };
        if child.try_wait().ok().flatten().is_some() {
            sentinel.child = None;
            return false;
        }
        let ours = format!("process_id:{}", child.id());
        let answer = redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
            .and_then(|mut c| redis::cmd("INFO").arg("server").query::<String>(&mut c));
        let last = match answer {
            Ok(info) if info.lines().any(|l| l.trim_end() == ours) => return true,
            Ok(_) => "another process answered".to_owned(),
            Err(err) => err.to_string(),
        };
        assert!(
            Instant::now() < deadline,
            "the Sentinel on port {} did not answer within 10 s (last: {last}); its log:\n{}",
            sentinel.port,
            std::fs::read_to_string(sentinel.dir.join("sentinel.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
