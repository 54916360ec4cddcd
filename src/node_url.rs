//! Node URLs: parsing the list given to the builder into what the
//! transport connects to, and showing a URL without its secrets.

use std::collections::HashSet;
use std::fmt;

use redis::IntoConnectionInfo;

use crate::error::Error;
use crate::sentinel_url::{self, SentinelAuth};
use crate::transport::{ClusterSource, NodeSpec, Source};

/// Certificates for `rediss://` nodes. Debug shows only what is set: the
/// client key is a secret.
#[derive(Clone, Default)]
pub(crate) struct Tls {
    pub(crate) root: Option<Vec<u8>>,
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("root_certificate", &self.root.is_some())
            .field("client_certificate", &self.client.is_some())
            .finish()
    }
}

pub(crate) fn parse_nodes(
    urls: &[String],
    tls: &Tls,
    sentinel: &SentinelAuth,
) -> Result<Vec<NodeSpec>, Error> {
    let custom = tls.root.is_some() || tls.client.is_some();
    if custom && !cfg!(any(feature = "tls-native-tls", feature = "tls-rustls")) {
        return Err(Error::config(
            "TLS certificates were given, but TLS needs the `tls-rustls` or `tls-native-tls` \
             feature of redlock-sync",
        ));
    }
    if urls.is_empty() {
        return Err(Error::config(
            "no nodes given; pass the URLs of independent Redis masters (3 or 5 is usual)",
        ));
    }
    if custom
        && let Some(index) = urls.iter().position(|u| {
            let u = u.to_ascii_lowercase();
            !u.starts_with("rediss://") && !u.starts_with("rediss+cluster://")
        })
    {
        return Err(Error::config(format!(
            "TLS certificates were given, but node #{index} ({}) is not a rediss:// URL; \
             use rediss:// for every node (or give no certificates)",
            redact(&urls[index])
        )));
    }
    let mut seen = HashSet::new();
    let mut nodes = Vec::with_capacity(urls.len());
    for (index, url) in urls.iter().enumerate() {
        let node = parse_node(index, url, tls, sentinel)?;
        if !seen.insert(node.address.clone()) {
            return Err(Error::config(format!(
                "node #{index} ({}) is listed twice; each node must be a distinct Redis master",
                node.address
            )));
        }
        nodes.push(node);
    }
    Ok(nodes)
}

/// Parses node `#index`'s URL into what the transport connects to; errors
/// show the URL only as [`redact`] does.
fn parse_node(
    index: usize,
    url: &str,
    tls: &Tls,
    sentinel: &SentinelAuth,
) -> Result<NodeSpec, Error> {
    let trimmed = url.trim();
    if trimmed.len() != url.len() {
        return Err(Error::config(format!(
            "node #{index} ({}) has a space or line break before or after it; remove it",
            redact(trimmed)
        )));
    }
    let bad = |why: &str| Error::config(format!("node #{index} ({}): {why}", redact(url)));
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(no_scheme(index, url, &bad));
    };
    let scheme = scheme.to_ascii_lowercase();
    check_scheme(&scheme, &bad)?;
    if ambiguous(url) {
        return Err(bad(
            "part of the URL before an '@' could be read as the host or socket path; \
             percent-encode '@', '/', '?' and '#' in user names, passwords and socket paths \
             (%40, %2F, %3F, %23)",
        ));
    }
    if scheme == sentinel_url::SCHEME {
        return sentinel_url::parse(rest, sentinel, bad);
    }
    if let Some(seed_scheme @ ("redis" | "rediss")) = scheme.strip_suffix("+cluster") {
        return parse_cluster(index, seed_scheme, rest, tls, sentinel, bad);
    }
    parse_direct(url, &scheme, rest, tls, &bad)
}

/// The error for a node URL without `scheme://`, which shows the input only
/// when it is plainly `host:port` (anything else may be a secret pasted in
/// the wrong place).
fn no_scheme(index: usize, url: &str, bad: &impl Fn(&str) -> Error) -> Error {
    match host_and_port(url) {
        Some(_) => Error::config(format!(
            "node #{index} ({url}) has no scheme; write it as redis://{url}"
        )),
        None => bad(
            "has no scheme; write it as redis://[user:password@]host[:port][/db], \
             rediss://… or unix:///path/to/socket",
        ),
    }
}

/// Refuses a (lowercased) scheme that is not a Redis one, or a TLS one
/// when no TLS feature is enabled.
fn check_scheme(scheme: &str, bad: &impl Fn(&str) -> Error) -> Result<(), Error> {
    match scheme {
        "redis" | "unix" | "redis+unix" | sentinel_url::SCHEME | CLUSTER => Ok(()),
        "rediss" | TLS_CLUSTER if cfg!(any(feature = "tls-native-tls", feature = "tls-rustls")) => {
            Ok(())
        }
        "rediss" | TLS_CLUSTER => Err(bad(
            "rediss:// needs TLS support; enable the `tls-rustls` or `tls-native-tls` \
             feature of redlock-sync",
        )),
        _ => Err(bad(
            "not a Redis URL; use redis://[user:password@]host[:port][/db], rediss://…, \
             unix:///path/to/socket, redis+sentinel://host:port[,host:port…]/service or \
             redis+cluster://host:port[,host:port…]",
        )),
    }
}

/// A `redis://`, `rediss://` or unix node (`rest`: after `://`): its port
/// checked, then opened as a client named by its address (nothing is
/// connected yet).
fn parse_direct(
    url: &str,
    scheme: &str,
    rest: &str,
    tls: &Tls,
    bad: &impl Fn(&str) -> Error,
) -> Result<NodeSpec, Error> {
    if !scheme.ends_with("unix") {
        check_port(&rest[..head("redis", rest)]).map_err(|why| bad(&why))?;
    }
    let info = connection_info(url, bad)?;
    let address = info.addr().to_string();
    let tcp = redis::io::tcp::TcpSettings::default().set_nodelay(true);
    let info = info.set_tcp_settings(tcp);
    let client = open_client(info, tls, bad)?;
    Ok(NodeSpec {
        address,
        source: Source::Direct(Box::new(client)),
    })
}

/// Reads a direct node's URL with the `redis` crate, turning its refusal
/// (or a URL with no host) into an error that quotes none of the URL.
fn connection_info(
    url: &str,
    bad: &impl Fn(&str) -> Error,
) -> Result<redis::ConnectionInfo, Error> {
    let info = url.into_connection_info().map_err(|e| {
        let reason = safe_reason(&e);
        if reason.contains("hostname") {
            bad("the URL has no host; write redis://host:port, such as redis://localhost:6379")
        } else if reason.contains("database") {
            bad(
                "the path after the host must be a database number, such as /0; \
                 percent-encode '/' in a password as %2F",
            )
        } else {
            bad(&format!("not a valid Redis URL ({reason})"))
        }
    })?;
    let place = match info.addr() {
        redis::ConnectionAddr::Tcp(host, _) | redis::ConnectionAddr::TcpTls { host, .. } => {
            host.clone()
        }
        redis::ConnectionAddr::Unix(path) => path.to_string_lossy().into_owned(),
        _ => String::new(),
    };
    if place.is_empty() {
        return Err(bad("the URL has no host"));
    }
    Ok(info)
}

/// Opens a direct node's client, with the given certificates when it is a
/// TLS node and some were given.
fn open_client(
    info: redis::ConnectionInfo,
    tls: &Tls,
    bad: &impl Fn(&str) -> Error,
) -> Result<redis::Client, Error> {
    let client = match info.addr() {
        #[cfg(any(feature = "tls-native-tls", feature = "tls-rustls"))]
        redis::ConnectionAddr::TcpTls { .. } if tls.root.is_some() || tls.client.is_some() => {
            let certificates = redis::TlsCertificates {
                client_tls: tls
                    .client
                    .as_ref()
                    .map(|(cert, key)| redis::ClientTlsConfig {
                        client_cert: cert.clone(),
                        client_key: key.clone(),
                    }),
                root_cert: tls.root.clone(),
            };
            redis::Client::build_with_tls(info, certificates).map_err(|e| {
                bad(&format!(
                    "the TLS certificates are not usable ({}); pass PEM data",
                    safe_reason(&e)
                ))
            })?
        }
        _ => redis::Client::open(info)
            .map_err(|e| bad(&format!("not a valid Redis URL ({})", safe_reason(&e))))?,
    };
    let _ = tls;
    Ok(client)
}

/// The scheme of a Redis Cluster node, and with TLS.
const CLUSTER: &str = "redis+cluster";
const TLS_CLUSTER: &str = "rediss+cluster";

/// A Redis Cluster node, `redis+cluster://[user:password@]host:port[,host:port…]`
/// (`rest`: after `://`): one node, whose seeds are each read as a
/// `seed_scheme://` URL with the same user information.
fn parse_cluster(
    index: usize,
    seed_scheme: &str,
    rest: &str,
    tls: &Tls,
    sentinel: &SentinelAuth,
    bad: impl Fn(&str) -> Error,
) -> Result<NodeSpec, Error> {
    let usage = "write redis+cluster://[user:password@]host:port[,host:port…] (some of the \
                 cluster's masters)";
    if rest.contains(['?', '#']) {
        return Err(bad(&format!(
            "takes no query or fragment (percent-encode '?' and '#' in the password); {usage}"
        )));
    }
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if !matches!(path, "" | "0") {
        return Err(bad(&format!(
            "a cluster has only database 0: remove the path; {usage}"
        )));
    }
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        // A seed list cut at an `@` (`host:port,user:password@host:port`)
        // would read the first seeds as the user name.
        Some((userinfo, _)) if userinfo.contains(',') => {
            return Err(bad(&format!(
                "the user information holds a ',' (percent-encode it as %2C, and give the user \
                 and password once, before every seed); {usage}"
            )));
        }
        Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
        None => (String::new(), authority),
    };
    let mut seeds = Vec::new();
    let mut addresses: Vec<String> = Vec::new();
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err(bad(&format!("lists an empty seed; {usage}")));
        }
        let seed = parse_node(
            index,
            &format!("{seed_scheme}://{userinfo}{host}"),
            tls,
            sentinel,
        )
        .map_err(|_| {
            // Shown only when plainly `host:port`: anything else may be a
            // password written without its `@`.
            let shown = host_and_port(host).map_or(String::new(), |_| format!(" ({host})"));
            bad(&format!("a seed's address{shown} is not usable; {usage}"))
        })?;
        let Source::Direct(client) = seed.source else {
            return Err(bad(usage));
        };
        if addresses.contains(&seed.address) {
            return Err(bad(&format!(
                "lists seed {} twice; list each once",
                seed.address
            )));
        }
        addresses.push(seed.address);
        seeds.push(*client);
    }
    Ok(NodeSpec {
        address: format!("cluster:{}", addresses.join(",")),
        source: Source::Cluster(ClusterSource::new(seeds)),
    })
}

/// `text` as `(host, port)` when it is plainly `host:port`: `localhost` or
/// an IPv4 address, and a port number. Anything else could be a user and a
/// password (`admin:123456`, `john.doe:48291`): not shown.
fn host_and_port(text: &str) -> Option<(&str, &str)> {
    let (host, port) = text.rsplit_once(':')?;
    let plain = (host == "localhost" || host.parse::<std::net::Ipv4Addr>().is_ok())
        && port.parse::<u16>().is_ok_and(|p| p > 0);
    plain.then_some((host, port))
}

/// Checks the port of a TCP URL's authority (`[user:password@]host[:port]`,
/// unambiguous): a number from 1 to 65535 when given.
fn check_port(authority: &str) -> Result<(), String> {
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let port = match host_port.strip_prefix('[') {
        // `[v6 address]:port`
        Some(v6) => v6.split_once("]:").map(|(_, port)| port),
        None => host_port.split_once(':').map(|(_, port)| port),
    };
    match port {
        None | Some("") => Ok(()),
        Some(port) if port.parse::<u16>().is_ok_and(|p| p > 0) => Ok(()),
        Some(port) if port.len() <= 12 && port.chars().all(|c| c.is_ascii_digit()) => Err(format!(
            "port {port} is not a port number; use one from 1 to 65535 (Redis: 6379)"
        )),
        Some(_) => {
            Err("the port is not a number; write host:port, such as localhost:6379".to_owned())
        }
    }
}

/// Whether `head` (the authority of a URL without user information, or a
/// socket path) is plainly hosts: each of its comma-separated parts a
/// host, `[IPv6]`, or a host and a port number (at most 65535).
fn plain_hosts(head: &str) -> bool {
    head.split(',').all(|part| {
        let port = match part.strip_prefix('[') {
            Some(v6) => match v6.split_once(']') {
                Some((_, "")) => return true,
                Some((_, rest)) => rest.strip_prefix(':'),
                None => return false,
            },
            None => part.split_once(':').map(|(_, port)| port),
        };
        port.is_none_or(|p| p.is_empty() || p.parse::<u16>().is_ok())
    })
}

/// The `redis` crate's reason for rejecting a URL, without its detail part
/// (which can quote pieces of the URL, such as a query value).
fn safe_reason(err: &redis::RedisError) -> String {
    if err.detail().is_some() {
        return format!("{:?}", err.kind());
    }
    let text = err.to_string();
    // Reasons are fixed texts ("Invalid database number"); anything longer
    // or with URL punctuation is not shown.
    if text.len() <= 80 && !text.contains(['@', ':', '/', '?', '#', '=']) {
        text
    } else {
        format!("{:?}", err.kind())
    }
}

/// Where a TCP URL's user information and host stand: from `://` to the
/// first `/`, `?` or `#`. For a unix URL: the socket path, up to the first
/// `?` or `#` (its user name and password come in the query).
fn head(scheme: &str, rest: &str) -> usize {
    let ends: &[char] = if scheme.ends_with("unix") {
        &['?', '#']
    } else {
        &['/', '?', '#']
    };
    rest.find(ends).unwrap_or(rest.len())
}

/// Whether an unencoded `@` stands anywhere but in a TCP URL's authority
/// (where it ends the user information). Anywhere else it may end a password
/// that an unencoded `/`, `?` or `#` cut short, so that part of the password
/// would be read as the host or socket path; such URLs are refused, and
/// `@` in a socket path or query is written `%40`.
fn ambiguous(url: &str) -> bool {
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme.ends_with("unix") {
        rest.contains('@')
    } else {
        rest[head(&scheme, rest)..].contains('@')
    }
}

/// A node URL safe to show in an error: a known scheme, and the host part
/// (or socket path) only where it cannot hold a secret. The user
/// information (everything up to the authority's last `@`) is never shown,
/// nor the path, query or fragment of a TCP URL, nor the query of a unix
/// URL; and where an `@` stands anywhere else (it could end a password that
/// an unencoded `/`, `?` or `#` cut short), nothing but the scheme is shown.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not URL-shaped: it may be anything, including a bare secret.
        return "<unparsable URL>".to_owned();
    };
    let scheme = scheme.to_ascii_lowercase();
    let end = head(&scheme, rest);
    let head = &rest[..end];
    let tail = if end < rest.len() { "/…" } else { "" };
    let shown = if ambiguous(url) {
        "***".to_owned()
    } else {
        match head.rfind('@') {
            Some(at) => format!("***@{}", &head[at + 1..]),
            None if plain_hosts(head) => head.to_owned(),
            // `user:password` written without its `@` reads as a host
            // and a port that is no number: not shown.
            None => "***".to_owned(),
        }
    };
    let scheme = match scheme.as_str() {
        known @ ("redis"
        | "rediss"
        | "unix"
        | "redis+unix"
        | sentinel_url::SCHEME
        | CLUSTER
        | TLS_CLUSTER) => known,
        _ => "<unknown scheme>",
    };
    format!("{scheme}://{shown}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn redact_never_shows_user_information() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://***@h:1/…");
        assert_eq!(redact("redis://:secret@h:1"), "redis://***@h:1");
        assert_eq!(redact("redis://h:1/2"), "redis://h:1/…");
        assert_eq!(redact("secret"), "<unparsable URL>");
        // The authority ends at the last `@`, not at the first `/`, `?`
        // or `#`: the password may hold them.
        assert_eq!(redact("redis://user:pa/ss@host:1"), "redis://***/…");
        assert_eq!(redact("redis://user:pa?ss@host:1"), "redis://***/…");
        assert_eq!(redact("redis://user:pa#ss@host:1"), "redis://***/…");
        assert_eq!(redact("redis://user:pa@ss@host:1"), "redis://***@host:1");
        assert_eq!(redact("redis://:pw@h:1/2"), "redis://***@h:1/…");
        assert_eq!(
            redact("unix:///tmp/r.sock?pass=secret"),
            "unix:///tmp/r.sock/…"
        );
        assert_eq!(redact("secret://h"), "<unknown scheme>://h");
        // Secrets in the query or fragment, after the host.
        assert_eq!(
            redact("unix:///tmp/r.sock?pass=hunter@SECRET"),
            "unix://***/…"
        );
        assert_eq!(redact("redis://h:1/0?x=1#frag@SECRET"), "redis://***/…");
        assert_eq!(redact("redis://u:p@h:1/0?x=a@SECRET"), "redis://***/…");
        assert_eq!(redact("unix://u:SECRET@/path"), "unix://***");
    }

    #[test]
    fn at_signs_outside_a_tcp_authority_must_be_percent_encoded() {
        let ok = parse_nodes_plain(&urls(&[
            "unix:///tmp/r.sock?pass=hunter%402",
            "unix:///run/user%401000/r.sock",
        ]))
        .unwrap();
        assert_eq!(ok[0].address, "/tmp/r.sock");
        assert_eq!(ok[1].address, "/run/user@1000/r.sock");
        for url in [
            "unix:///run/user@1000/r.sock",
            "unix:///tmp/r.sock?pass=hunter@2",
        ] {
            let err = parse_nodes_plain(&urls(&[url])).unwrap_err();
            assert!(err.to_string().contains("%40"), "{err}");
            assert!(!err.to_string().contains("hunter"), "{err}");
        }
    }

    #[test]
    fn a_host_that_may_be_part_of_a_password_is_rejected() {
        for url in [
            "redis://:hunter?two@h:1",
            "redis://:hunter#two@h:1",
            "redis://:hunter/two@h:1",
        ] {
            let err = parse_nodes_plain(&urls(&[url])).unwrap_err();
            let text = err.to_string();
            assert!(!text.contains("hunter"), "{text}");
            assert!(!text.contains("two"), "{text}");
            assert!(text.contains("percent-encode"), "{text}");
        }
        let ok = parse_nodes_plain(&urls(&["redis://u:p%40ss@h:1", "redis://[::1]:2"])).unwrap();
        assert_eq!(ok[0].address, "h:1");
        assert_eq!(ok[1].address, "::1:2");
    }

    #[test]
    fn nodes_are_named_by_address_not_url() {
        let nodes = parse_nodes_plain(&urls(&[
            "redis://u:pw@127.0.0.1:7000/3",
            "unix:///tmp/r.sock",
        ]))
        .unwrap();
        assert_eq!(nodes[0].address, "127.0.0.1:7000");
        assert_eq!(nodes[1].address, "/tmp/r.sock");
        assert!(!format!("{:?}", nodes[0]).contains("pw"));
        let Source::Direct(client) = &nodes[0].source else {
            panic!("a direct node");
        };
        assert!(client.get_connection_info().tcp_settings().nodelay());
    }

    #[test]
    fn a_cluster_url_is_one_node_named_by_its_seeds() {
        let nodes = parse_nodes_plain(&urls(&[
            "redis+cluster://u:pw@127.0.0.1:7000,127.0.0.1:7001",
            "REDIS+CLUSTER://127.0.0.1:7002/0",
        ]))
        .unwrap();
        assert_eq!(nodes[0].address, "cluster:127.0.0.1:7000,127.0.0.1:7001");
        assert_eq!(nodes[1].address, "cluster:127.0.0.1:7002");
        assert!(matches!(nodes[0].source, Source::Cluster(_)));
        assert!(!format!("{:?}", nodes[0]).contains("pw"));
        for (url, says) in [
            ("redis+cluster://127.0.0.1:7000/2", "only database 0"),
            ("redis+cluster://127.0.0.1:7000,127.0.0.1:7000", "twice"),
            ("redis+cluster://127.0.0.1:7000,", "empty seed"),
            (
                "redis+cluster://h:1,u:secret@h:2",
                "percent-encode it as %2C",
            ),
            ("redis+cluster://h:1?pw=secret", "no query"),
            ("redis+cluster://admin:secret", "not usable"),
            ("redis+cluster://admin:123456", "not usable"),
        ] {
            let err = parse_nodes_plain(&urls(&[url])).unwrap_err().to_string();
            assert!(err.contains(says), "{url}: {err}");
            assert!(!err.contains("secret") && !err.contains("123456"), "{err}");
        }
    }

    #[test]
    fn bad_node_lists_are_config_errors_without_passwords() {
        for list in [
            &[][..],
            &["redis://h:1", "redis://h:1/2"][..],
            &["http://h:1"][..],
            &["h:1"][..],
            &["redis://:pw@h:notaport"][..],
            &["redis://:pw@h:1/notadb"][..],
            &["redis://"][..],
        ] {
            let err = parse_nodes_plain(&urls(list)).unwrap_err();
            assert!(matches!(err, Error::Config { .. }), "{list:?}: {err}");
            assert!(!err.to_string().contains("pw"), "{err}");
        }
    }

    fn parse_nodes_plain(urls: &[String]) -> Result<Vec<NodeSpec>, Error> {
        parse_nodes(urls, &Tls::default(), &SentinelAuth::default())
    }

    mod secrets {
        use super::*;
        use proptest::prelude::*;

        fn parse_nodes_plain(urls: &[String]) -> Result<Vec<NodeSpec>, Error> {
            parse_nodes(urls, &Tls::default(), &SentinelAuth::default())
        }

        /// A password made of marker words joined by the characters that
        /// end a URL's parts (`/?#@:%=&`).
        fn password() -> impl Strategy<Value = (String, Vec<String>)> {
            prop::collection::vec(("[A-Za-z]{5,9}", "[/?#@:%=&]{0,2}"), 1..4).prop_map(|parts| {
                let words = parts.iter().map(|(w, _)| w.clone()).collect();
                let text = parts.iter().map(|(w, sep)| format!("{w}{sep}")).collect();
                (text, words)
            })
        }

        fn schemes() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("redis".to_owned()),
                Just("rediss".to_owned()),
                Just("unix".to_owned()),
                Just("redis+unix".to_owned()),
                Just("redis+sentinel".to_owned()),
                Just("REDIS+SENTINEL".to_owned()),
                Just("redis+cluster".to_owned()),
                Just("rediss+cluster".to_owned()),
                Just("REDIS".to_owned()),
                "\\PC{0,8}",
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2_000, failure_persistence: None, ..ProptestConfig::default() })]

            /// Any string with secrets in the password (or user) position,
            /// parsable or not, never shows
            /// any part of them in an error's `Display` or `Debug`, nor in
            /// the parsed node's name.
            #[test]
            fn no_part_of_the_user_information_is_ever_shown(
                scheme in schemes(),
                user in "[^@]{0,10}",
                (pw, words) in password(),
                rest in "\\PC{0,24}",
            ) {
                let url = format!("{scheme}://{user}:{pw}@{rest}");
                let mut secrets = words;
                if user.chars().count() >= 5 {
                    secrets.push(user.clone());
                }
                // Only words that appear nowhere but in the user information.
                secrets.retain(|w| !scheme.contains(w.as_str()) && !rest.contains(w.as_str()));
                assert_hidden(&url, &secrets)?;
            }

            /// Input with no scheme is shown only when it is plainly
            /// `host:port` with a dotted host or `localhost`: user
            /// information pasted without a scheme never is.
            #[test]
            fn scheme_less_input_never_shows_user_information(
                user in "[A-Za-z]{5,9}",
                (pw, words) in password(),
                rest in "[a-z0-9.:]{0,12}",
                digits in "[0-9]{5,6}",
            ) {
                // A numeric password after a user name reads like a port.
                assert_hidden(&format!("{user}:{digits}"), std::slice::from_ref(&digits))?;
                let mut secrets = words;
                secrets.push(user.clone());
                secrets.retain(|w| !rest.contains(w.as_str()));
                assert_hidden(&format!("{user}:{pw}@{rest}"), &secrets)?;
                assert_hidden(&format!("{user}:{pw}"), &secrets)?;
            }

            /// The same for secrets in the query or fragment, where unix
            /// URLs carry their password (`?pass=…`).
            #[test]
            fn no_part_of_a_query_or_fragment_is_ever_shown(
                scheme in schemes(),
                place in "[a-z0-9./:]{0,12}",
                sep in prop_oneof![Just("?"), Just("#"), Just("?db=0&")],
                name in prop_oneof![Just("pass="), Just("user="), Just("x=")],
                (secret, words) in password(),
            ) {
                let url = format!("{scheme}://{place}{sep}{name}{secret}");
                let mut secrets = words;
                secrets.retain(|w| !scheme.contains(w.as_str()) && !place.contains(w.as_str()));
                assert_hidden(&url, &secrets)?;
            }
        }

        proptest! {
            /// A cluster URL whose user information lacks its `@` (or
            /// sits among the seeds) shows no part of the password.
            #[test]
            fn a_cluster_url_never_shows_a_password_among_its_seeds(
                user in "[A-Za-z]{0,8}",
                (pw, words) in password(),
                more in "[a-z0-9.:,]{0,12}",
            ) {
                let mut secrets = words;
                secrets.retain(|w| !more.contains(w.as_str()) && !user.contains(w.as_str()));
                assert_hidden(&format!("rediss+cluster://{user}:{pw}@{more}"), &secrets)?;
                // Without an `@` after it, a password's own `@` ends the user
                // information (what follows is the host, as in any URL).
                if !pw.contains('@') {
                    for url in [
                        format!("redis+cluster://{user}:{pw},{more}"),
                        format!("redis+cluster://127.0.0.1:7000,{user}:{pw}"),
                    ] {
                        assert_hidden(&url, &secrets)?;
                    }
                }
            }
        }

        fn assert_hidden(url: &str, secrets: &[String]) -> Result<(), TestCaseError> {
            let shown = match parse_nodes_plain(&[url.to_owned()]) {
                Err(err) => format!("{err} {err:?} {}", redact(url)),
                Ok(nodes) => format!("{:?} {} {}", nodes[0], nodes[0].address, redact(url)),
            };
            for secret in secrets {
                prop_assert!(
                    !shown.contains(secret.as_str()),
                    "{url:?} showed {secret:?}: {shown}"
                );
            }
            Ok(())
        }
    }

    #[cfg(not(any(feature = "tls-native-tls", feature = "tls-rustls")))]
    #[test]
    fn rediss_without_tls_feature_names_the_feature() {
        let err = parse_nodes_plain(&urls(&["rediss://h:1"])).unwrap_err();
        assert!(err.to_string().contains("tls-rustls"), "{err}");
    }
}
