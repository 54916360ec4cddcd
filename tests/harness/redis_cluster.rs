//! A real Redis Cluster on loopback: `redis-server --cluster-enabled yes`
//! processes joined by `redis-cli --cluster create`, with replicas when
//! asked. The tests move slots and fail masters over through it.

use std::process::Command;
use std::time::Duration;

use super::{Node, NodeOptions, eventually};

/// A cluster's processes (masters first, then replicas, as created).
#[derive(Debug)]
pub struct RedisCluster {
    pub nodes: Vec<Node>,
}

/// Runs one command on `node`, panicking with the command on failure.
pub fn query<T: redis::FromRedisValue>(node: &Node, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query(&mut node.conn())
        .unwrap_or_else(|e| panic!("{args:?} on {}: {e}", node.port))
}

impl RedisCluster {
    /// `masters` masters with `replicas` replicas each (failover after a
    /// master is silent for `node_timeout_ms`), up and agreeing on who
    /// serves every slot.
    pub fn start(masters: usize, replicas: usize, node_timeout_ms: u64) -> RedisCluster {
        Self::start_with(masters, replicas, node_timeout_ms, |_| None)
    }

    /// [`start`](Self::start) without replicas, every node's wall clock
    /// movable ([`Node::set_clock_offset`]).
    pub fn start_shifted(masters: usize) -> RedisCluster {
        Self::start_with(masters, 0, 5000, |options| {
            options.shift_clock = true;
            None
        })
    }

    /// [`start`](Self::start) over TLS too: each node also listens on a TLS
    /// port with `pki`'s server certificate, the cluster bus and the map
    /// (`CLUSTER SLOTS`) use the TLS ports; the nodes' `tls_ports`.
    pub fn start_tls(masters: usize, pki: &super::Pki) -> (RedisCluster, Vec<u16>) {
        let cluster = Self::start_with(masters, 0, 5000, |options| {
            options.tls = Some(pki.server_tls("server.pem"));
            options
                .extra_args
                .extend(["--tls-cluster".into(), "yes".into()]);
            Some(vec![
                "--tls".into(),
                "--cacert".into(),
                pki.path("ca.pem"),
                "--cert".into(),
                pki.path("client.pem"),
                "--key".into(),
                pki.path("client.key"),
            ])
        });
        let ports = cluster
            .nodes
            .iter()
            .map(|n| n.tls_port.expect("TLS"))
            .collect();
        (cluster, ports)
    }

    /// [`start`](Self::start), each node's options changed by `tweak`
    /// first, which may give `redis-cli`'s own arguments. `redis-cli
    /// --cluster create` names a node by its TLS port where it has one.
    fn start_with(
        masters: usize,
        replicas: usize,
        node_timeout_ms: u64,
        tweak: impl Fn(&mut NodeOptions) -> Option<Vec<String>>,
    ) -> RedisCluster {
        let mut cli_args = Vec::new();
        let mut addresses = Vec::new();
        let nodes: Vec<Node> = (0..masters * (1 + replicas))
            .map(|_| {
                let mut options = NodeOptions {
                    extra_args: vec![
                        "--cluster-enabled".into(),
                        "yes".into(),
                        "--cluster-node-timeout".into(),
                        node_timeout_ms.to_string(),
                        // A replica takes over however long ago it last
                        // heard from its master (a test kills masters
                        // seconds after the cluster starts, when a replica
                        // may not have synced).
                        "--cluster-replica-validity-factor".into(),
                        "0".into(),
                    ],
                    ..NodeOptions::default()
                };
                if let Some(args) = tweak(&mut options) {
                    cli_args = args;
                }
                let node = Node::start(&options);
                addresses.push(format!("127.0.0.1:{}", node.tls_port.unwrap_or(node.port)));
                node
            })
            .collect();
        let created = Command::new("redis-cli")
            .args(&cli_args)
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string()])
            .arg("--cluster-yes")
            .output()
            .expect("redis-cli (package redis-tools, installed with redis-server)");
        assert!(
            created.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        let cluster = RedisCluster { nodes };
        cluster.settled();
        cluster
    }

    /// Waits until every live node says the cluster is up and every live
    /// node serves the slots the others say it does.
    pub fn settled(&self) {
        eventually("the cluster is up", Duration::from_secs(30), || {
            let live: Vec<&Node> = self.nodes.iter().filter(|n| n.is_running()).collect();
            let up = live.iter().all(|n| {
                n.conn_quiet()
                    .and_then(|mut c| {
                        redis::cmd("CLUSTER")
                            .arg("INFO")
                            .query::<String>(&mut c)
                            .ok()
                    })
                    .is_some_and(|info| info.contains("cluster_state:ok"))
            });
            let maps: Vec<Option<String>> = live.iter().map(|n| self.map_seen_by(n)).collect();
            up && maps.iter().all(|m| m.is_some() && *m == maps[0])
        });
    }

    /// The slot ranges and their masters' ports, as `node` sees them.
    fn map_seen_by(&self, node: &Node) -> Option<String> {
        let mut conn = node.conn_quiet()?;
        let slots: Vec<(i64, i64, (String, i64))> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query::<Vec<redis::Value>>(&mut conn)
            .ok()?
            .into_iter()
            .filter_map(|range| {
                let redis::Value::Array(fields) = range else {
                    return None;
                };
                let first = redis::from_redis_value::<i64>(fields.first()?.clone()).ok()?;
                let last = redis::from_redis_value::<i64>(fields.get(1)?.clone()).ok()?;
                let master =
                    redis::from_redis_value::<(String, i64)>(fields.get(2)?.clone()).ok()?;
                Some((first, last, master))
            })
            .collect();
        let mut slots = slots;
        slots.sort();
        Some(format!("{slots:?}"))
    }

    /// `redis+cluster://` naming every master (`seeds` of them).
    pub fn url(&self, seeds: usize) -> String {
        let hosts: Vec<String> = self.nodes.iter().take(seeds).map(Node::address).collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// The hash slot of `key`.
    pub fn slot(&self, key: &str) -> u16 {
        let live = self
            .nodes
            .iter()
            .find(|n| n.is_running())
            .expect("a live node");
        query::<u16>(live, &["CLUSTER", "KEYSLOT", key])
    }

    /// The node that serves `slot` now.
    pub fn master_of_slot(&self, slot: u16) -> &Node {
        self.serving(slot).expect("a master serves the slot")
    }

    /// The live node that says it serves `slot` as a master, if any.
    pub fn serving(&self, slot: u16) -> Option<&Node> {
        self.nodes.iter().filter(|n| n.is_running()).find(|n| {
            let owns: String = n.query(redis::cmd("CLUSTER").arg("NODES"));
            owns.lines().any(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                fields
                    .get(2)
                    .is_some_and(|f| f.contains("myself") && f.contains("master"))
                    && fields[8..].iter().any(|range| match range.split_once('-') {
                        Some((a, b)) => {
                            a.parse::<u16>().is_ok_and(|a| a <= slot)
                                && b.parse::<u16>().is_ok_and(|b| slot <= b)
                        }
                        None => range.parse::<u16>().is_ok_and(|s| s == slot),
                    })
            })
        })
    }

    /// Whether `key` exists on `node`, asked after `ASKING` (a slot being
    /// imported there).
    pub fn exists_asking(node: &Node, key: &str) -> bool {
        let (_, exists): ((), bool) = redis::pipe()
            .cmd("ASKING")
            .cmd("EXISTS")
            .arg(key)
            .query(&mut node.conn())
            .expect("ASKING EXISTS");
        exists
    }

    /// The node that serves `key` now.
    pub fn master_of(&self, key: &str) -> &Node {
        self.master_of_slot(self.slot(key))
    }

    /// `key`'s value on the master serving it, read once (see
    /// [`Node::query`]).
    pub fn get_now(&self, key: &str) -> Option<String> {
        self.master_of(key).get_now(key)
    }

    /// This node's cluster id.
    pub fn id(node: &Node) -> String {
        query(node, &["CLUSTER", "MYID"])
    }

    /// The live masters.
    pub fn masters(&self) -> Vec<&Node> {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .filter(|n| query::<String>(n, &["INFO", "replication"]).contains("role:master"))
            .collect()
    }

    /// How many keys the live masters hold in all (but the record of the
    /// TTLs in use: [`super::data_keys`]).
    pub fn keys(&self) -> i64 {
        self.masters()
            .iter()
            .map(|n| super::data_keys(&mut n.conn()) as i64)
            .sum()
    }
}
