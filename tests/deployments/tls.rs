//! `rediss://` nodes (real `redis-server --tls-port`, certificates made by
//! the test): mutual TLS against a custom CA works for every operation; a
//! wrong CA, an expired certificate, a certificate for another host or a
//! missing client certificate is a quick `NoQuorum` naming each node.
#![cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]

use std::time::{Duration, Instant};

use crate::harness::{BlackHole, Node, NodeOptions, Pki, settles, threads_named};
use redlock_sync::{Error, FailureKind, Redlock, RedlockBuilder};

const TTL: Duration = Duration::from_secs(10);

/// Three TLS nodes serving `cert`; returns them with their `rediss://` URLs.
fn tls_nodes(pki: &Pki, cert: &str) -> (Vec<Node>, Vec<String>) {
    (0..3)
        .map(|_| {
            let node = Node::start(&NodeOptions {
                tls: Some(pki.server_tls(cert)),
                ..NodeOptions::default()
            });
            let url = format!("rediss://127.0.0.1:{}", node.tls_port.expect("TLS"));
            (node, url)
        })
        .unzip()
}

/// Generous for a debug build's handshakes on a loaded 2-core CI machine (a
/// first connection is TCP + TLS + `HELLO` + `CLIENT ID` + `INFO`); a
/// refusal is answered long before it.
const CONNECT: Duration = Duration::from_secs(2);

fn builder(urls: &[String], pki: &Pki, ca: &str) -> RedlockBuilder {
    Redlock::builder(urls)
        .tls_root_certificate(pki.read(ca))
        .tls_client_certificate(pki.read("client.pem"), pki.read("client.key"))
        .connect_timeout(CONNECT)
        .retry_count(0)
}

#[test]
fn mutual_tls_against_a_custom_ca_works_for_every_operation() {
    let pki = Pki::generate();
    let (nodes, urls) = tls_nodes(&pki, "server.pem");
    let client = builder(&urls, &pki, "ca.pem")
        .fencing(true)
        .build()
        .unwrap();
    let mut guard = client.lock("tls:res", TTL).unwrap();
    guard.extend(TTL).unwrap();
    assert!(guard.fencing_token().is_some());
    guard.release().unwrap();
    let both = client.lock_all(&["tls:a", "tls:b"], TTL).unwrap();
    both.release().unwrap();
    // A release returns at a majority; the last node deletes a moment later.
    settles("every node deleted the released keys", || {
        nodes.iter().all(|n| {
            ["tls:res", "tls:a", "tls:b"]
                .iter()
                .all(|k| n.get_now(k).is_none())
        })
    });
    // The key never shows.
    let shown = format!("{:?}", builder(&urls, &pki, "ca.pem"));
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    assert!(shown.contains("client_certificate: true"), "{shown}");
}

/// A failure case: a clear NoQuorum naming every node, quickly, each failed
/// node with the TLS library's reason (one of `reasons`: rustls and
/// native-tls word them differently).
fn refused(client: &Redlock, urls: &[String], reasons: &[&str]) -> String {
    let started = Instant::now();
    let err = client.lock("tls:res", TTL).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    let Error::NoQuorum { failures, .. } = &err else {
        panic!("expected NoQuorum, got {err:?}");
    };
    assert_eq!(failures.len(), urls.len(), "every node named: {err}");
    let causes: Vec<_> = failures
        .iter()
        .filter(|f| f.kind() != FailureKind::Unanswered)
        .collect();
    assert!(causes.len() >= 2, "a majority's causes: {err}");
    for cause in causes {
        let text = cause.detail().to_lowercase();
        assert!(
            reasons.iter().any(|r| text.contains(&r.to_lowercase())),
            "{cause} gives none of {reasons:?}"
        );
    }
    for failure in failures {
        assert!(
            matches!(
                failure.kind(),
                FailureKind::Connection | FailureKind::Timeout | FailureKind::Unanswered
            ),
            "{failure}"
        );
    }
    err.to_string()
}

#[test]
fn bad_certificates_are_a_quick_no_quorum_naming_each_node() {
    let pki = Pki::generate();
    let (_good, urls) = tls_nodes(&pki, "server.pem");
    // A CA that signed none of the servers' certificates.
    let wrong_ca = builder(&urls, &pki, "other-ca.pem").build().unwrap();
    let text = refused(
        &wrong_ca,
        &urls,
        &["UnknownIssuer", "certificate verify failed"],
    );
    println!("wrong CA: {text}");
    // No client certificate for servers that require one.
    let anonymous = Redlock::builder(&urls)
        .tls_root_certificate(pki.read("ca.pem"))
        .connect_timeout(CONNECT)
        .retry_count(0)
        .build()
        .unwrap();
    println!(
        "no client certificate: {}",
        refused(
            &anonymous,
            &urls,
            &[
                "CertificateRequired",
                "certificate required",
                "connection reset"
            ]
        )
    );

    let (_expired, urls) = tls_nodes(&pki, "expired.pem");
    let client = builder(&urls, &pki, "ca.pem").build().unwrap();
    println!("expired: {}", refused(&client, &urls, &["expired"]));

    let (_other_host, urls) = tls_nodes(&pki, "wronghost.pem");
    let client = builder(&urls, &pki, "ca.pem").build().unwrap();
    println!(
        "another host's certificate: {}",
        refused(&client, &urls, &["not valid for name", "mismatch"])
    );
}

#[test]
fn certificates_with_a_plaintext_url_are_a_config_error() {
    let pki = Pki::generate();
    let err = Redlock::builder(["rediss://127.0.0.1:1", "redis://127.0.0.1:2"])
        .tls_root_certificate(pki.read("ca.pem"))
        .build()
        .unwrap_err();
    let Error::Config { reason } = &err else {
        panic!("expected Config, got {err:?}");
    };
    assert!(
        reason.contains("node #1") && reason.contains("rediss://"),
        "{reason}"
    );
}

/// `rediss+cluster://`: a cluster whose members speak TLS (the bus too,
/// so its map names their TLS ports) is one node, reached with the same
/// certificates as any `rediss://` node.
#[test]
fn a_tls_cluster_is_one_node_on_every_master() {
    let pki = Pki::generate();
    let (cluster, tls_ports) = crate::harness::redis_cluster::RedisCluster::start_tls(3, &pki);
    let url = format!(
        "rediss+cluster://127.0.0.1:{},127.0.0.1:{}",
        tls_ports[0], tls_ports[1]
    );
    let client = builder(&[url], &pki, "ca.pem")
        .fencing(true)
        .build()
        .unwrap();
    let mut masters = std::collections::HashSet::new();
    for i in 0..30 {
        let name = format!("tls-cluster:{i}");
        let guard = client.try_lock(&name, TTL).unwrap().expect("granted");
        assert!(guard.fencing_token().is_some());
        assert!(cluster.get_now(&name).is_some(), "{name} on its master");
        masters.insert(cluster.master_of(&name).port);
        guard.release().unwrap();
    }
    assert_eq!(masters.len(), 3, "names on every master");
    let health = &client.node_health()[0];
    assert_eq!(health.masters().len(), 3, "{health:?}");
    for master in health.masters() {
        assert!(master.is_admitted(), "{master:?}");
        let port: u16 = master
            .address()
            .rsplit_once(':')
            .unwrap()
            .1
            .parse()
            .unwrap();
        assert!(
            tls_ports.contains(&port),
            "{} is a TLS port",
            master.address()
        );
    }
}

/// A TLS node that accepts the connection and never answers (a black hole;
/// a wedged process or proxy): each attempt to connect ends within the
/// connect timeout, as a timeout the node's health shows, while the other
/// nodes serve. native-tls's handshake has no timeout of its own: it runs
/// on a thread that is left behind when late, one per address at most, and
/// ends once the node closes.
#[test]
fn a_silent_tls_node_costs_a_timeout_not_a_thread_per_attempt() {
    let pki = Pki::generate();
    let (_nodes, mut urls) = tls_nodes(&pki, "server.pem");
    let hole = BlackHole::new();
    let hole_url = hole.url().replace("redis://", "rediss://");
    let port = hole_url.rsplit(':').next().expect("a port").to_owned();
    urls.push(hole_url);
    let client = builder(&urls, &pki, "ca.pem")
        .build()
        .expect("builds while a node is silent");
    settles("the silent node's attempt timed out", || {
        client.node_health()[3]
            .refusal()
            .is_some_and(|f| f.kind() == FailureKind::Timeout)
    });
    let guard = client.lock("tls:silent", TTL).expect("three nodes answer");
    guard.release().unwrap();
    // The pool tries again a second or so after each timeout; sampled over
    // 3 s (a try or two more), the threads waiting on the silent node
    // never pile up.
    let named = format!("redlock-d{port}");
    for _ in 0..60 {
        let waiting = threads_named(&named);
        assert!(
            waiting <= 1,
            "{waiting} threads connecting to the silent node"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(hole);
    settles("no thread waits on the closed node", || {
        threads_named(&named) == 0
    });
}
