//! What a node says about itself: asked on every connection (and now and
//! then on a live one), parsed here, judged in `admission.rs`.
//!
//! One pipeline, one round trip: `INFO server` (which process: `run_id`,
//! `uptime_in_seconds`, `redis_version`, `redis_mode`), `INFO replication`
//! (`master_replid`, which a promotion changes), `INFO memory`
//! (`maxmemory`, `maxmemory_policy`: whether keys can vanish before they
//! expire), `TIME` (its wall clock, judged in `clock.rs`), the jump
//! marker [`CLOCK_MARKER`] and the admission marker [`MARKER`].

use std::time::{Duration, Instant};

use super::clock::Reading;

/// The marker key: which process was last admitted at this node, and by
/// whom (see [`Marker`]). It lives in the node's data set, so it replicates
/// to replicas, is persisted and restored with the data, and is lost by a
/// restart without persistence.
pub(crate) const MARKER: &str = "redlock:admitted";

/// The jump marker: a client saw the node's clock jump ahead by the value
/// (milliseconds), and the node stays out until the key expires.
pub(crate) const CLOCK_MARKER: &str = "redlock:clock-jumped";

/// The oldest Redis this client speaks to (`SET … NX GET`, `ZADD … GT`).
const OLDEST: (u32, u32) = (7, 0);

/// What a node said about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Facts {
    /// The server process (what tells two addresses of one server apart).
    pub(crate) run_id: String,
    /// Its replication ID: a replica's is its master's, and a promotion
    /// gives it a new one. With the `run_id`, it names one *incarnation*
    /// of a master — what a restart or a promotion replaces (see
    /// [`continues`](Self::continues)).
    pub(crate) replid: String,
    /// Whether a promotion is on record: a promotion keeps the replication
    /// ID it had as a replica as `master_replid2`; a master that resets its
    /// ID (its first replica when it had no backlog, or its backlog freed
    /// after `repl-backlog-ttl` without replicas) clears it.
    pub(crate) promoted: bool,
    /// `role:master`.
    pub(crate) master: bool,
    /// `redis_mode:cluster`: a member of a Redis Cluster (a plain URL to
    /// one reaches only the slots it serves).
    pub(crate) cluster: bool,
    /// As the node reports it (whole seconds, wall clock).
    pub(crate) uptime: Duration,
    /// `redis_version`, as reported.
    pub(crate) version: String,
    /// `maxmemory` in bytes (0: no limit).
    pub(crate) maxmemory: u64,
    pub(crate) policy: String,
    pub(crate) marker: Option<Marker>,
    /// The marker could not be read here: its key is in a hash slot this
    /// cluster master does not serve (now, or while the slot migrates), or
    /// the cluster was down.
    pub(crate) marker_elsewhere: bool,
    /// Its clock, read in the same exchange.
    pub(crate) time: Option<Reading>,
    /// A jump marker on it: how long it has left, and the jump's size.
    pub(crate) clock_jumped: Option<(Duration, Duration)>,
}

/// Who admitted which master at a node (the value of [`MARKER`]):
/// `{run_id}:{master_replid} operator` — an operator, for any quarantine
/// period — or `{run_id}:{master_replid} client {period_ms}` — a client
/// whose quarantine period was that long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Marker {
    Operator { id: String },
    Client { id: String, period: Duration },
}

impl Marker {
    /// Reads a marker; anything else (not text, another shape) is none.
    pub(crate) fn parse(value: &[u8]) -> Option<Marker> {
        let text = std::str::from_utf8(value).ok()?;
        let parts: Vec<&str> = text.split_whitespace().collect();
        match parts.as_slice() {
            [id, "operator"] => Some(Marker::Operator {
                id: (*id).to_owned(),
            }),
            [id, "client", ms] => Some(Marker::Client {
                id: (*id).to_owned(),
                period: Duration::from_millis(ms.parse().ok()?),
            }),
            _ => None,
        }
    }

    /// The incarnation it names ([`Facts::identity`]).
    pub(crate) fn id(&self) -> &str {
        match self {
            Marker::Operator { id } | Marker::Client { id, .. } => id,
        }
    }

    /// Whether it admits the incarnation `facts` describe for a client
    /// whose quarantine period is `period`: an operator's word for it, or a
    /// client's that waited at least as long (in whole milliseconds, as
    /// written).
    pub(crate) fn admits(&self, facts: &Facts, period: Duration) -> bool {
        facts.continues(self.id())
            && match self {
                Marker::Operator { .. } => true,
                Marker::Client { period: theirs, .. } => theirs.as_millis() >= period.as_millis(),
            }
    }

    /// Whether it is an operator's word.
    pub(crate) fn by_operator(&self) -> bool {
        matches!(self, Marker::Operator { .. })
    }

    /// The value a client writes once it admitted incarnation `id`.
    pub(crate) fn client(id: &str, period: Duration) -> String {
        format!("{id} client {}", period.as_millis())
    }
}

impl Facts {
    /// Reads `INFO server`, `INFO replication` and `INFO memory` (`None`
    /// if a field it needs is missing or malformed) and the marker's value.
    pub(crate) fn parse(
        server: &str,
        replication: &str,
        memory: &str,
        marker: Option<&[u8]>,
    ) -> Option<Facts> {
        Some(Facts {
            run_id: field(server, "run_id")?.to_owned(),
            replid: field(replication, "master_replid")?.to_owned(),
            promoted: field(replication, "master_replid2")
                .is_some_and(|id| id.bytes().any(|b| b != b'0')),
            master: field(replication, "role")? == "master",
            cluster: field(server, "redis_mode") == Some("cluster"),
            uptime: Duration::from_secs(field(server, "uptime_in_seconds")?.parse().ok()?),
            version: field(server, "redis_version")?.to_owned(),
            maxmemory: field(memory, "maxmemory")?.parse().ok()?,
            policy: field(memory, "maxmemory_policy")?.to_owned(),
            marker: marker.and_then(Marker::parse),
            marker_elsewhere: false,
            time: None,
            clock_jumped: None,
        })
    }

    /// The master incarnation as markers name it: `{run_id}:{master_replid}`.
    pub(crate) fn identity(&self) -> String {
        format!("{}:{}", self.run_id, self.replid)
    }

    /// Whether this is the incarnation `id` names, or continues it: the
    /// same process (`run_id`: a restart changes it) that was not promoted
    /// since — its replication ID is the same, or changed with no
    /// promotion on record (a master resetting its ID). A process promoted
    /// back after it served as a replica (its data then came from another
    /// master) does not continue its old incarnation. A promotion stays on
    /// record until the master's backlog is freed (`repl-backlog-ttl`, an
    /// hour by default, without replicas).
    pub(crate) fn continues(&self, id: &str) -> bool {
        match id.split_once(':') {
            Some((run_id, replid)) => {
                run_id == self.run_id && (replid == self.replid || !self.promoted)
            }
            None => false,
        }
    }

    /// Whether the node may evict keys before they expire: a memory limit
    /// with any policy but `noeviction`. Every key this client writes has
    /// a TTL, so `volatile-*` policies pick them first.
    pub(crate) fn evicts(&self) -> bool {
        self.maxmemory > 0 && self.policy != "noeviction"
    }

    /// Whether its Redis is older than this client needs (an unreadable
    /// version is taken as too old).
    pub(crate) fn too_old(&self) -> bool {
        let mut parts = self.version.split('.').map(|p| p.parse::<u32>().ok());
        match (parts.next().flatten(), parts.next().flatten()) {
            (Some(major), Some(minor)) => (major, minor) < OLDEST,
            _ => true,
        }
    }
}

fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// Asks the node, reads its clock and the jump marker at `clock`, and the
/// admission marker at `marker` (`None`: not needed, without a restart
/// quarantine); `Ok(None)` when an ACL refused (`NOPERM`: no `INFO`, or no
/// `GET` on a marker) or its answer lacks a field: it cannot be identified.
/// A cluster master that answers `MOVED` or `ASK` for a marker's key (its
/// slot moved, or is migrating), or `CLUSTERDOWN` (its cluster lost a
/// master a moment ago), is identified without them
/// ([`Facts::marker_elsewhere`]): the connection stays, and the requests
/// sent on it get the cluster's own answers. Any other error reply
/// (`LOADING`, say) fails the connection, which is retried.
///
/// Each of its pipelines (a refusal asks again without the markers) is
/// read within `within` in all, the socket's read timeout (see
/// [`Within`]).
pub(crate) fn ask(
    conn: &mut redis::Connection,
    marker: Option<&str>,
    clock: Option<&str>,
    within: Duration,
) -> redis::RedisResult<Option<Facts>> {
    // The markers as bytes: one that is not UTF-8 is no marker, not a
    // conversion error (which the `redis` crate reports as a parse error,
    // read as "not a Redis server"). `INFO` as a string: over RESP3 it is
    // a verbatim string, which does not convert to bytes.
    let mut pipe = redis::pipe();
    pipe.cmd("INFO")
        .arg("server")
        .cmd("INFO")
        .arg("replication")
        .cmd("INFO")
        .arg("memory")
        .cmd("TIME");
    if let Some(key) = clock {
        pipe.cmd("PTTL").arg(key).cmd("GET").arg(key);
    }
    if let Some(key) = marker {
        pipe.cmd("GET").arg(key);
    }
    let sent = Instant::now();
    let asked: redis::RedisResult<Vec<redis::Value>> = pipe.query(&mut Within { conn, within });
    let got = Instant::now();
    match asked {
        Ok(values) => Ok(read(values, clock.is_some(), marker.is_some(), sent, got)),
        // A key pattern written before the jump marker (it covers
        // `redlock:admitted` only): without the marker, clients started
        // later judge the node's clock as they find it.
        Err(err) if err.code() == Some("NOPERM") && clock.is_some() => {
            ask(conn, marker, None, within)
        }
        Err(err) if err.code() == Some("NOPERM") => Ok(None),
        Err(err)
            if (marker.is_some() || clock.is_some())
                && matches!(err.code(), Some("MOVED" | "ASK" | "CLUSTERDOWN")) =>
        {
            Ok(ask(conn, None, None, within)?.map(|facts| Facts {
                marker_elsewhere: true,
                ..facts
            }))
        }
        Err(err) => Err(err),
    }
}

/// A connection whose pipeline's replies are read within `within` in all
/// (a reply's bytes that trickle in may take one read timeout more), and
/// not past the first read that fails. `redis` reads every reply of a
/// pipeline, each with the socket's whole read timeout, even after one
/// timed out: on a node that stopped answering, [`ask`]'s seven commands
/// held the node's worker seven connect timeouts, and every round of the
/// client meanwhile waited for that node's clock reading (half its
/// timeout, `clock.rs`). `within` must be the socket's read timeout as the
/// caller set it: it is set back to that once the replies are read. A
/// failed read leaves replies unread: the caller drops the connection, as
/// it does after any failure.
struct Within<'a> {
    conn: &'a mut redis::Connection,
    within: Duration,
}

impl redis::ConnectionLike for Within<'_> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        self.conn.req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        let until = Instant::now() + self.within;
        self.conn.send_packed_command(cmd)?;
        let mut values = Vec::with_capacity(count);
        let mut i = 0;
        while i < offset + count {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no answer within the connect timeout",
                )
                .into());
            }
            self.conn.set_read_timeout(Some(left))?;
            // A RESP3 push is no reply (as `redis` reads a pipeline).
            let value = match self.conn.recv_response()? {
                redis::Value::Push { .. } => continue,
                value => value,
            };
            if i >= offset {
                values.push(value);
            }
            i += 1;
        }
        self.conn.set_read_timeout(Some(self.within))?;
        Ok(values)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.conn.check_connection()
    }

    fn is_open(&self) -> bool {
        self.conn.is_open()
    }
}

/// Reads [`ask`]'s replies.
fn read(
    values: Vec<redis::Value>,
    clock: bool,
    marker: bool,
    sent: Instant,
    got: Instant,
) -> Option<Facts> {
    let mut values = values.into_iter();
    let mut text = || -> Option<String> { redis::from_redis_value(values.next()?).ok() };
    let (server, replication, memory) = (text()?, text()?, text()?);
    let time = values.next().and_then(|v| Reading::parse(&v, sent, got));
    let next_bytes = |values: &mut std::vec::IntoIter<redis::Value>| -> Option<Vec<u8>> {
        redis::from_redis_value::<Option<Vec<u8>>>(values.next()?)
            .ok()
            .flatten()
    };
    let clock_jumped = if clock {
        let left: i64 = redis::from_redis_value(values.next()?).ok()?;
        // A size past the longest TTL is no size this client can use.
        let size = next_bytes(&mut values)
            .and_then(|v| String::from_utf8(v).ok()?.parse::<u64>().ok())
            .map(|ms| Duration::from_millis(ms).min(crate::algorithm::MAX_TTL))
            .unwrap_or_default();
        u64::try_from(left)
            .ok()
            .filter(|&ms| ms > 0)
            .map(|ms| (Duration::from_millis(ms), size))
    } else {
        None
    };
    let marker = if marker {
        next_bytes(&mut values)
    } else {
        None
    };
    Some(Facts {
        time,
        clock_jumped,
        ..Facts::parse(&server, &replication, &memory, marker.as_deref())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: &str =
        "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n";
    const MEMORY: &str = "# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:volatile-lru\r\n";
    const REPL: &str = "# Replication\r\nrole:master\r\nmaster_replid:f00d\r\nmaster_replid2:0000000000000000000000000000000000000000\r\n";

    #[test]
    fn info_is_parsed_and_garbage_is_refused() {
        let f = Facts::parse(SERVER, REPL, MEMORY, Some(b"abc123:f00d operator")).unwrap();
        assert_eq!(f.run_id, "abc123");
        assert_eq!(f.identity(), "abc123:f00d");
        assert_eq!(f.uptime, Duration::from_secs(42));
        assert_eq!(f.version, "7.0.15");
        assert!(!f.evicts(), "no memory limit: nothing is evicted");
        assert!(!f.too_old());
        assert!(!f.cluster, "no redis_mode: standalone");
        let member = format!("{SERVER}redis_mode:cluster\r\n");
        assert!(Facts::parse(&member, REPL, MEMORY, None).unwrap().cluster);
        let plain = format!("{SERVER}redis_mode:standalone\r\n");
        assert!(!Facts::parse(&plain, REPL, MEMORY, None).unwrap().cluster);
        assert_eq!(
            f.marker,
            Some(Marker::Operator {
                id: "abc123:f00d".into()
            })
        );
        assert_eq!(Facts::parse("run_id:x\r\n", REPL, MEMORY, None), None);
        assert_eq!(
            Facts::parse(
                "run_id:x\r\nuptime_in_seconds:zz\r\nredis_version:7.0.0\r\n",
                REPL,
                MEMORY,
                None
            ),
            None
        );
        assert_eq!(Facts::parse(SERVER, REPL, "maxmemory:1\r\n", None), None);
        assert_eq!(Facts::parse(SERVER, "role:master\r\n", MEMORY, None), None);
    }

    #[test]
    fn a_memory_limit_with_any_policy_but_noeviction_evicts() {
        for (limit, policy, evicts) in [
            ("0", "allkeys-lru", false),
            ("1024", "noeviction", false),
            ("1024", "volatile-lru", true),
            ("67108864", "allkeys-random", true),
            ("1", "volatile-ttl", true),
        ] {
            let memory = format!("maxmemory:{limit}\r\nmaxmemory_policy:{policy}\r\n");
            let f = Facts::parse(SERVER, REPL, &memory, None).unwrap();
            assert_eq!(f.evicts(), evicts, "{limit} {policy}");
        }
    }

    #[test]
    fn versions_before_7_0_are_too_old() {
        for (version, old) in [
            ("7.0.0", false),
            ("7.2.4", false),
            ("8.0.1", false),
            ("10.0.0", false),
            ("6.2.14", true),
            ("5.0", true),
            ("seven", true),
            ("7", true),
        ] {
            let server = SERVER.replace("7.0.15", version);
            let f = Facts::parse(&server, REPL, MEMORY, None).unwrap();
            assert_eq!(f.too_old(), old, "{version}");
        }
    }

    fn master(run_id: &str, replid: &str, replid2: &str) -> Facts {
        let server = SERVER.replace("abc123", run_id);
        let repl = format!("role:master\r\nmaster_replid:{replid}\r\nmaster_replid2:{replid2}\r\n");
        Facts::parse(&server, &repl, MEMORY, None).unwrap()
    }

    const ZERO: &str = "0000000000000000000000000000000000000000";

    #[test]
    fn an_incarnation_ends_with_a_restart_or_a_promotion() {
        let m = master("r1", "x", ZERO);
        assert!(m.continues("r1:x"));
        assert!(!m.continues("r0:x"), "restarted");
        assert!(!m.continues("r1"), "not an incarnation");
        // The master reset its replication ID (a first replica with no
        // backlog, or its backlog freed): no promotion on record.
        assert!(master("r1", "y", ZERO).continues("r1:x"));
        // Promoted (back, after it served as a replica of another master).
        assert!(!master("r1", "z", "y").continues("r1:x"));
        assert!(master("r1", "z", "y").continues("r1:z"));
        let replica = Facts::parse(SERVER, "role:slave\r\nmaster_replid:x\r\n", MEMORY, None);
        assert!(!replica.unwrap().master);
    }

    #[test]
    fn markers_name_an_incarnation_and_who_admitted_it() {
        let hour = Duration::from_secs(3600);
        let r1 = master("r1", "x", ZERO);
        let op = Marker::parse(b"r1:x operator").unwrap();
        assert!(op.admits(&r1, hour) && !op.admits(&master("r2", "x", ZERO), hour));
        assert!(op.by_operator());
        let client = Marker::parse(Marker::client("r1:x", hour).as_bytes()).unwrap();
        assert!(client.admits(&r1, hour), "the same period");
        assert!(client.admits(&r1, Duration::from_secs(60)), "a shorter one");
        assert!(!client.admits(&r1, hour * 2), "a longer one waits");
        assert!(
            !client.admits(&master("r0", "x", ZERO), hour),
            "another process"
        );
        // A period with a fraction of a millisecond matches what it wrote.
        let odd = Duration::from_micros(1_500_700);
        let written = Marker::parse(Marker::client("r1:x", odd).as_bytes()).unwrap();
        assert!(written.admits(&r1, odd));
        for garbage in [
            &b"r1"[..],
            b"r1 60000",
            b"r1 operator extra",
            b"r1 client",
            b"r1 client x",
            b"\xff\xfe operator",
            b"",
        ] {
            assert_eq!(Marker::parse(garbage), None, "{garbage:?}");
        }
    }

    /// A node that accepts the connection and then answers nothing holds
    /// [`ask`] one read timeout, not one per command of its pipeline
    /// (`redis` reads every reply after one timed out, each with the whole
    /// timeout: seven times 150 ms here). Not a speed claim: the bound is
    /// four timeouts, the old behaviour seven.
    #[test]
    fn a_node_that_stops_answering_holds_ask_one_timeout() {
        use std::io::Read;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let silent = std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().unwrap();
            // Reads what comes and answers nothing, until the client closes.
            let mut buf = [0u8; 4096];
            while matches!(socket.read(&mut buf), Ok(n) if n > 0) {}
        });
        let url = format!("redis://127.0.0.1:{port}");
        let info = redis::IntoConnectionInfo::into_connection_info(url.as_str()).unwrap();
        // No `CLIENT SETINFO` on connect: the silent node would not answer it.
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        let info = info.set_redis_settings(settings);
        let mut conn = redis::Client::open(info)
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        let within = Duration::from_millis(150);
        conn.set_read_timeout(Some(within)).unwrap();
        let started = Instant::now();
        let asked = ask(
            &mut conn,
            Some("redlock:admitted"),
            Some("redlock:clock"),
            within,
        );
        let took = started.elapsed();
        assert!(asked.is_err(), "a silent node cannot be identified");
        assert!(
            took < within * 4,
            "ask held the connection {took:?}: one read timeout per command"
        );
        drop(conn);
        silent.join().unwrap();
    }
}
