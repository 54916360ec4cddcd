//! A Redis Cluster as one node: its seeds (some of its masters, from the
//! URL), how to reach any of its masters, and the map of which master
//! serves which hash slot.
//!
//! The map is ours, read with `CLUSTER SLOTS` (Redis 3 and later, so a
//! managed cluster answers it too), not the `redis` crate's
//! `ClusterConnection`: that one follows redirections and refreshes its
//! map on its own schedule, with no per-request deadline and no way to
//! keep a batch's order per master, and it hides which master answered,
//! so the per-master checks (admission, quarantine) could not apply.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::transport::protocol::hash_slot::SLOTS;

/// A cluster node's seeds, and how to reach its masters.
pub(crate) struct ClusterSource {
    /// A client per seed, as the URL lists them.
    seeds: Vec<redis::Client>,
    /// The seed [`ClusterSource::client`] gives next.
    next: AtomicUsize,
}

impl std::fmt::Debug for ClusterSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the connection info: it holds the password.
        f.debug_struct("ClusterSource")
            .field("seeds", &self.seeds.len())
            .finish_non_exhaustive()
    }
}

impl ClusterSource {
    /// A cluster reached through `seeds` (at least one).
    pub(crate) fn new(seeds: Vec<redis::Client>) -> Arc<Self> {
        Arc::new(ClusterSource {
            seeds,
            next: AtomicUsize::new(0),
        })
    }

    /// A client for one seed, each call the next: for a subscriber (the
    /// cluster's pub/sub reaches every member), which tries again with
    /// another after a failure.
    pub(crate) fn client(&self) -> redis::Client {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.seeds.len().max(1);
        self.seeds[i].clone()
    }

    /// The seeds' clients.
    pub(crate) fn seeds(&self) -> &[redis::Client] {
        &self.seeds
    }

    /// A client for the master at `host:port`: the seeds' scheme, TLS
    /// settings and credentials.
    pub(crate) fn master(&self, host: &str, port: u16) -> redis::RedisResult<redis::Client> {
        let info = self.seeds[0].get_connection_info().clone();
        let addr = match info.addr() {
            redis::ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => redis::ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => redis::ConnectionAddr::Tcp(host.to_owned(), port),
        };
        redis::Client::open(info.set_addr(addr))
    }
}

/// Which master serves each hash slot (an index into the masters the map
/// names, in the order `CLUSTER SLOTS` gave them), and the masters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotMap {
    /// Per slot, an index into `masters`, or [`NOBODY`].
    owner: Vec<u16>,
    /// Each master's `host:port`.
    pub(crate) masters: Vec<(String, u16)>,
}

/// No master serves the slot (a cluster that is not fully set up).
const NOBODY: u16 = u16::MAX;

impl SlotMap {
    /// A map where no master serves any slot.
    pub(crate) fn empty() -> Self {
        SlotMap {
            owner: vec![NOBODY; usize::from(SLOTS)],
            masters: Vec::new(),
        }
    }

    /// The master serving `slot`, if any.
    pub(crate) fn master(&self, slot: u16) -> Option<&(String, u16)> {
        let owner = *self.owner.get(usize::from(slot))?;
        self.masters.get(usize::from(owner))
    }

    /// Records that `master` serves `slot` now (a `MOVED`).
    pub(crate) fn moved(&mut self, slot: u16, master: (String, u16)) {
        let index = match self.masters.iter().position(|m| *m == master) {
            Some(index) => index,
            None => {
                self.masters.push(master);
                self.masters.len() - 1
            }
        };
        if let (Some(owner), Ok(index)) =
            (self.owner.get_mut(usize::from(slot)), u16::try_from(index))
        {
            *owner = index;
        }
    }

    /// Reads a `CLUSTER SLOTS` reply; `asked` is the host the question went
    /// to, which stands for a master whose host the reply leaves empty (a
    /// cluster that does not know its own address). `None`: not such a
    /// reply.
    pub(crate) fn parse(reply: &redis::Value, asked: &str) -> Option<SlotMap> {
        use redis::Value;
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut map = SlotMap::empty();
        for range in ranges {
            let Value::Array(fields) = range else {
                return None;
            };
            let [
                Value::Int(first),
                Value::Int(last),
                Value::Array(master),
                ..,
            ] = &fields[..]
            else {
                return None;
            };
            let (host, port) = match &master[..] {
                [host, Value::Int(port), ..] => (host, *port),
                _ => return None,
            };
            let host = match host {
                Value::BulkString(host) => String::from_utf8(host.clone()).ok()?,
                Value::SimpleString(host) => host.clone(),
                _ => return None,
            };
            // A master that does not know its own address (`""`) or hides
            // it (`"?"`) is the one asked.
            let host = match host.as_str() {
                "" | "?" => asked.to_owned(),
                _ => host,
            };
            let port = u16::try_from(port).ok()?;
            let (first, last) = (u16::try_from(*first).ok()?, u16::try_from(*last).ok()?);
            if first > last || last >= SLOTS {
                return None;
            }
            let index = match map.masters.iter().position(|m| *m == (host.clone(), port)) {
                Some(index) => index,
                None => {
                    map.masters.push((host, port));
                    map.masters.len() - 1
                }
            };
            let index = u16::try_from(index).ok()?;
            for slot in first..=last {
                map.owner[usize::from(slot)] = index;
            }
        }
        Some(map)
    }

    /// This map, with each slot it leaves unserved given to its master in
    /// `older` (the slots' last known masters).
    pub(crate) fn over(&self, older: &SlotMap) -> SlotMap {
        let mut known = self.clone();
        for slot in 0..SLOTS {
            if known.master(slot).is_none()
                && let Some(was) = older.master(slot)
            {
                known.moved(slot, was.clone());
            }
        }
        known
    }

    /// The first slot `master` serves, if any.
    pub(crate) fn first_slot(&self, master: &(String, u16)) -> Option<u16> {
        let index = self.masters.iter().position(|m| m == master)?;
        let index = u16::try_from(index).ok()?;
        let slot = self.owner.iter().position(|&o| o == index)?;
        u16::try_from(slot).ok()
    }

    /// How many slots no master serves.
    pub(crate) fn unserved(&self) -> usize {
        self.owner.iter().filter(|&&o| o == NOBODY).count()
    }
}

/// Asks the cluster for its map through `candidates` in order, each
/// (connection and answer together) within `bound` and all by `until`:
/// the first that answers with a map is the answer. `Err`: why none did (the
/// last failure). Each candidate asked that is not in cluster mode (a
/// standalone server listed as a cluster) goes to `standalone`, by address.
pub(crate) fn ask_map(
    candidates: &[redis::Client],
    bound: Duration,
    until: Instant,
    standalone: &mut Vec<String>,
) -> Result<SlotMap, redis::RedisError> {
    let mut last = redis::RedisError::from(std::io::Error::other("no seed to ask"));
    for client in candidates {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no master answered with the cluster's slots in time",
            )));
        }
        let timeout = bound.min(left).max(Duration::from_millis(1));
        let asked = match client.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(host, _) | redis::ConnectionAddr::TcpTls { host, .. } => {
                host.clone()
            }
            _ => String::new(),
        };
        // Connecting and asking together within `timeout`.
        let by = Instant::now() + timeout;
        let answer = super::dial::connect(client, timeout).and_then(|mut conn| {
            let left = by
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            conn.set_read_timeout(Some(left))?;
            conn.set_write_timeout(Some(left))?;
            redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query::<redis::Value>(&mut conn)
        });
        match answer {
            Ok(reply) => match SlotMap::parse(&reply, &asked) {
                Some(map) if map.unserved() < usize::from(SLOTS) => return Ok(map),
                _ => {
                    last = redis::RedisError::from((
                        redis::ErrorKind::Extension,
                        "no slots",
                        "the cluster answered CLUSTER SLOTS with no slot served".to_owned(),
                    ));
                }
            },
            Err(err) => {
                if err.code() == Some("ERR")
                    && err
                        .detail()
                        .is_some_and(|d| d.contains("cluster support disabled"))
                {
                    let address = client.get_connection_info().addr().to_string();
                    if !standalone.contains(&address) {
                        standalone.push(address);
                    }
                }
                last = err;
            }
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    fn range(first: i64, last: i64, host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::Int(first),
            Value::Int(last),
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ]),
            Value::Array(vec![
                Value::BulkString(b"10.0.0.9".to_vec()),
                Value::Int(7009),
            ]),
        ])
    }

    #[test]
    fn the_map_says_which_master_serves_a_slot() {
        let reply = Value::Array(vec![
            range(0, 5460, "127.0.0.1", 7001),
            range(5461, 10922, "", 7002),
            range(10923, 16383, "127.0.0.1", 7003),
        ]);
        let map = SlotMap::parse(&reply, "seed").unwrap();
        assert_eq!(map.master(0), Some(&("127.0.0.1".to_owned(), 7001)));
        assert_eq!(map.master(5461), Some(&("seed".to_owned(), 7002)));
        assert_eq!(map.master(16383), Some(&("127.0.0.1".to_owned(), 7003)));
        assert_eq!(map.masters.len(), 3, "replicas are not masters");
        assert_eq!(map.unserved(), 0);
        let mut moved = map.clone();
        moved.moved(0, ("127.0.0.1".to_owned(), 7003));
        assert_eq!(moved.master(0), Some(&("127.0.0.1".to_owned(), 7003)));
        assert_eq!(moved.master(1), Some(&("127.0.0.1".to_owned(), 7001)));
        let partial = SlotMap::parse(&Value::Array(vec![range(0, 99, "h", 1)]), "s").unwrap();
        assert_eq!(partial.unserved(), 16384 - 100);
        assert_eq!(partial.master(100), None);
        // A slot left unserved keeps its last known master.
        let known = partial.over(&map);
        assert_eq!(known.master(0), Some(&("h".to_owned(), 1)));
        assert_eq!(known.master(100), Some(&("127.0.0.1".to_owned(), 7001)));
        assert_eq!(known.master(16383), Some(&("127.0.0.1".to_owned(), 7003)));
        assert_eq!(known.unserved(), 0);
        assert_eq!(partial.over(&SlotMap::empty()), partial);
        for bad in [
            Value::Nil,
            Value::Array(vec![range(5, 4, "h", 1)]),
            Value::Array(vec![range(0, 16384, "h", 1)]),
            Value::Array(vec![Value::Int(1)]),
        ] {
            assert_eq!(SlotMap::parse(&bad, "s"), None, "{bad:?}");
        }
    }
}
