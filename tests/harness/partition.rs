//! Network partitions between each client and each node, and a history
//! checker for what the holders believed.
//!
//! Every (client, node) link is its own [`Proxy`] on loopback, so each
//! client can see a different part of the cluster. A link is
//! * **cut** ([`Net::cut`]): bytes in both directions are held back, no RST,
//!   no FIN — the client's requests time out as behind a dropped route. A
//!   new connection completes its TCP handshake (the proxy's listener
//!   accepts it) and then hears nothing: the client sees its first request
//!   hang, not its connect. Dropped SYNs proper would need the kernel
//!   (a network namespace whose link is down); this harness does not
//!   model them;
//! * **healed** ([`Net::heal`]): what was held back is delivered, late and in
//!   order per connection;
//! * **half-open** ([`Net::half_open`]): the connections open now go silent
//!   for good while new connections work.
//!
//! Traffic never leaves 127.0.0.1.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{Cluster, Fault, Proxy};

/// A link per (client, node): `links[client][node]`.
pub struct Net {
    links: Vec<Vec<Proxy>>,
}

impl Net {
    /// `clients` rows of links, one per node of `cluster`, all passing.
    ///
    /// Node `i`'s links listen on `127.0.0.{10 + i}` (any port), so every
    /// client's addresses sort in node order, as the same nodes' addresses
    /// would in a real deployment: clients pick a resource's gate node by
    /// that order, and must agree on it for wake-ups to reach them.
    pub fn new(cluster: &Cluster, clients: usize) -> Net {
        assert!(cluster.nodes.len() <= 90, "node addresses 127.0.0.10–99");
        let links = (0..clients)
            .map(|_| {
                (0..cluster.nodes.len())
                    .map(|i| {
                        let ip = std::net::Ipv4Addr::new(127, 0, 0, 10 + i as u8);
                        Proxy::start_on(ip, cluster.nodes[i].port)
                    })
                    .collect()
            })
            .collect();
        Net { links }
    }

    /// The node URLs client `client` uses.
    pub fn urls(&self, client: usize) -> Vec<String> {
        self.links[client].iter().map(Proxy::url).collect()
    }

    /// Holds back everything between `client` and `node`.
    pub fn cut(&self, client: usize, node: usize) {
        self.links[client][node].set(Fault::Stall);
    }

    /// Delivers what was held back between `client` and `node`, and passes
    /// traffic again.
    pub fn heal(&self, client: usize, node: usize) {
        self.links[client][node].set(Fault::Pass);
    }

    /// Chunks of traffic held back between `client` and `node` now.
    pub fn held(&self, client: usize, node: usize) -> usize {
        self.links[client][node].held()
    }

    /// Connections between `client` and `node` whose held-back requests
    /// the node has not finished with (see [`Proxy::late`]).
    pub fn late(&self, client: usize, node: usize) -> usize {
        self.links[client][node].late()
    }

    /// `client` sees exactly the nodes not in `cut`.
    pub fn view(&self, client: usize, cut: &[usize]) {
        for node in 0..self.links[client].len() {
            if cut.contains(&node) {
                self.cut(client, node);
            } else {
                self.heal(client, node);
            }
        }
    }

    /// The connections open now between `client` and `node` go silent for
    /// good; new ones pass.
    pub fn half_open(&self, client: usize, node: usize) {
        self.links[client][node].silence_existing();
    }

    /// Every link passes again.
    pub fn heal_all(&self) {
        for client in 0..self.links.len() {
            self.view(client, &[]);
        }
    }
}

/// Microseconds since the Unix epoch: one clock for every process on this
/// machine.
pub fn now_us() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_micros()).unwrap()
}

/// `until` (a moment of this process) on the [`now_us`] clock.
pub fn wall_us(until: Instant) -> u64 {
    let now = Instant::now();
    let wall = now_us();
    if until >= now {
        wall + u64::try_from((until - now).as_micros()).unwrap()
    } else {
        wall.saturating_sub(u64::try_from((now - until).as_micros()).unwrap())
    }
}

/// The interval a holder believed it held `resource`: from `lock()`
/// returning to the earlier of its release and the end of its validity,
/// on the [`now_us`] clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interval {
    pub holder: String,
    pub resource: String,
    pub start: u64,
    pub end: u64,
}

impl Interval {
    /// One line of a child's report: `INTERVAL holder resource start end`.
    pub fn to_line(&self) -> String {
        format!(
            "INTERVAL {} {} {} {}",
            self.holder, self.resource, self.start, self.end
        )
    }

    /// The interval in a line from [`to_line`](Self::to_line) (libtest may
    /// print before it on the same line).
    pub fn parse(line: &str) -> Option<Interval> {
        let rest = line.split("INTERVAL ").nth(1)?;
        let mut parts = rest.split_whitespace();
        Some(Interval {
            holder: parts.next()?.to_owned(),
            resource: parts.next()?.to_owned(),
            start: parts.next()?.parse().ok()?,
            end: parts.next()?.parse().ok()?,
        })
    }
}

/// Every pair of intervals of one resource that overlap (empty: the
/// history is exclusive).
pub fn overlaps(intervals: &[Interval]) -> Vec<(Interval, Interval)> {
    let mut sorted: Vec<&Interval> = intervals.iter().collect();
    sorted.sort_by(|a, b| (&a.resource, a.start).cmp(&(&b.resource, b.start)));
    let mut found = Vec::new();
    for (i, a) in sorted.iter().enumerate() {
        for b in &sorted[i + 1..] {
            if b.resource != a.resource || b.start >= a.end {
                break;
            }
            found.push(((*a).clone(), (*b).clone()));
        }
    }
    found
}

/// A random view of 5 nodes: 0–2 cut, sometimes 3.
pub fn random_cut(rng: &mut impl rand::RngExt, nodes: usize) -> Vec<usize> {
    let count = match rng.random_range(0..10) {
        0..=2 => 0,
        3..=5 => 1,
        6..=8 => 2,
        _ => 3,
    };
    let mut all: Vec<usize> = (0..nodes).collect();
    for i in 0..count {
        let j = rng.random_range(i..nodes);
        all.swap(i, j);
    }
    all.truncate(count);
    all
}

/// A pause of 100–300 ms between two views.
pub fn random_hold(rng: &mut impl rand::RngExt) -> Duration {
    Duration::from_millis(rng.random_range(100..=300))
}

/// The most intervals of `resource` that cover one moment.
pub fn most_at_once(intervals: &[Interval], resource: &str) -> usize {
    let mut edges: Vec<(u64, i32)> = intervals
        .iter()
        .filter(|i| i.resource == resource)
        // An end sorts before a start at the same moment: touching
        // intervals do not overlap.
        .flat_map(|i| [(i.start, 1), (i.end, -1)])
        .collect();
    edges.sort_by_key(|&(at, delta)| (at, delta));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}
