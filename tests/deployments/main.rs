//! The kinds of node a list can name: a Redis Cluster, Sentinel-managed
//! groups, TLS, unix sockets with an ACL user, and the deployment checks
//! (admission) that hold each to what the algorithm assumes.

#[path = "../harness/mod.rs"]
mod harness;

mod cluster;
mod cluster_edges;
mod cluster_mode;
mod deployment;
mod sentinel;
mod tls;
mod unix_acl;
