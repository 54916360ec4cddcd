//! `redis+sentinel://[user:password@]host:port[,host:port…]/service_name[/db]`:
//! one node that is whichever server the Sentinels name as the service's
//! master. The user and password are the master's; the Sentinels' own are
//! set with [`RedlockBuilder::sentinel_password`](crate::RedlockBuilder::sentinel_password).

use std::fmt;

use crate::error::Error;
use crate::transport::{NodeSpec, SentinelSource, Source};

/// The scheme of a Sentinel service node.
pub(crate) const SCHEME: &str = "redis+sentinel";

/// The port a Sentinel listens on unless the URL says otherwise.
const SENTINEL_PORT: u16 = 26379;

/// The Sentinels' own credentials. Debug never shows the password.
#[derive(Clone, Default)]
pub(crate) struct SentinelAuth {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

impl fmt::Debug for SentinelAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelAuth")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// How a Sentinel URL is written, for the errors that refuse one.
const USAGE: &str =
    "write redis+sentinel://[user:password@]host:port[,host:port…]/service_name[/db]";

/// Parses the part of a Sentinel URL after `://` (`bad` makes the error,
/// which never shows the URL's user information) and starts its lookup
/// thread.
pub(crate) fn parse(
    rest: &str,
    auth: &SentinelAuth,
    bad: impl Fn(&str) -> Error,
) -> Result<NodeSpec, Error> {
    // As in other URLs, a query or fragment may carry secrets: none is
    // taken, and nothing after one is shown.
    if rest.contains(['?', '#']) {
        return Err(bad(&format!(
            "takes no query or fragment (percent-encode '?' and '#' in the password); {USAGE}"
        )));
    }
    let Some((authority, path)) = rest.split_once('/') else {
        return Err(bad(&format!("names no service; {USAGE}")));
    };
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    let sentinels = parse_sentinels(hosts, auth, &bad)?;
    let (service, db) = parse_path(path, &bad)?;
    let master = master_settings(userinfo, db, &bad)?;
    let address = match db {
        0 => format!("sentinel:{service}"),
        db => format!("sentinel:{service}/{db}"),
    };
    Ok(NodeSpec {
        address,
        source: Source::Sentinel(SentinelSource::new(service, sentinels, master)),
    })
}

/// The Sentinels of a comma-separated `host[:port]` list, each with the
/// Sentinels' own credentials; refuses one listed twice.
fn parse_sentinels(
    hosts: &str,
    auth: &SentinelAuth,
    bad: &impl Fn(&str) -> Error,
) -> Result<Vec<redis::ConnectionInfo>, Error> {
    let mut sentinels = Vec::new();
    for host in hosts.split(',') {
        let info = parse_sentinel(host, auth, bad)?;
        if sentinels
            .iter()
            .any(|s: &redis::ConnectionInfo| s.addr() == info.addr())
        {
            // A majority of the Sentinels must agree: one listed twice
            // would vote twice.
            return Err(bad(
                "lists a Sentinel twice; list each once (the same complete set in every client)",
            ));
        }
        sentinels.push(info);
    }
    Ok(sentinels)
}

/// One Sentinel's `host[:port]` (port 26379 unless given), with the
/// Sentinels' own credentials.
fn parse_sentinel(
    host: &str,
    auth: &SentinelAuth,
    bad: &impl Fn(&str) -> Error,
) -> Result<redis::ConnectionInfo, Error> {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) => {
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| bad("a Sentinel's port is not a number from 1 to 65535"))?;
            (name, port)
        }
        None => (host, SENTINEL_PORT),
    };
    if name.is_empty() || name.contains(['[', ']', ' ']) {
        return Err(bad(&format!("a Sentinel has no usable host name; {USAGE}")));
    }
    let mut redis = redis::RedisConnectionInfo::default();
    if let Some(user) = &auth.username {
        redis = redis.set_username(user);
    }
    if let Some(password) = &auth.password {
        redis = redis.set_password(password);
    }
    let info = redis::IntoConnectionInfo::into_connection_info(format!("redis://{name}:{port}"))
        .map_err(|_| bad(&format!("a Sentinel's address is not usable; {USAGE}")))?;
    Ok(info.set_redis_settings(redis))
}

/// The service name and database number of the path after the Sentinels
/// (`service_name[/db]`, database 0 unless given).
fn parse_path(path: &str, bad: &impl Fn(&str) -> Error) -> Result<(String, i64), Error> {
    let mut parts = path.split('/');
    let service = decode(parts.next().unwrap_or(""))
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad(&format!("names no service; {USAGE}")))?;
    if service.chars().any(char::is_control) {
        // It names the node in every message and log line.
        return Err(bad(
            "the service name holds a control character; name the service as the Sentinels do",
        ));
    }
    let db: i64 = match parts.next() {
        None | Some("") => 0,
        Some(db) => db
            .parse()
            .ok()
            .filter(|db| *db >= 0)
            .ok_or_else(|| bad("the path after the service name must be a database number"))?,
    };
    if parts.next().is_some() {
        return Err(bad(&format!(
            "has more path than a service and a database; {USAGE}"
        )));
    }
    Ok((service, db))
}

/// The master's settings: database `db`, and the URL's percent-encoded
/// user name and password (`userinfo`, before the `@`) when given.
fn master_settings(
    userinfo: Option<&str>,
    db: i64,
    bad: &impl Fn(&str) -> Error,
) -> Result<redis::RedisConnectionInfo, Error> {
    let mut master = redis::RedisConnectionInfo::default().set_db(db);
    if let Some(userinfo) = userinfo {
        let (user, password) = match userinfo.split_once(':') {
            Some((user, password)) => (user, Some(password)),
            None => (userinfo, None),
        };
        let undecodable = || bad("the user name or password is not valid percent-encoded UTF-8");
        let user = decode(user).ok_or_else(undecodable)?;
        if !user.is_empty() {
            master = master.set_username(user);
        }
        if let Some(password) = password {
            master = master.set_password(decode(password).ok_or_else(undecodable)?);
        }
    }
    Ok(master)
}

/// Percent-decodes `text` (`None`: a bad escape, or not UTF-8).
fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(rest: &str) -> Result<NodeSpec, Error> {
        parse(rest, &SentinelAuth::default(), |why| Error::Config {
            reason: why.to_owned(),
        })
    }

    #[test]
    fn a_service_url_names_its_sentinels_service_and_database() {
        let node = parsed("u:p%40ss@127.0.0.1:26379,localhost/mymaster/2").unwrap();
        assert_eq!(node.address, "sentinel:mymaster/2");
        assert!(node.source.is_sentinel());
        let node = parsed("h1:1,h2:2/svc").unwrap();
        assert_eq!(node.address, "sentinel:svc");
    }

    #[test]
    fn a_bad_service_url_says_what_is_wrong_and_never_shows_a_password() {
        for (rest, says) in [
            ("h:1", "names no service"),
            ("h:1/", "names no service"),
            ("h:0/s", "port"),
            ("h:x/s", "port"),
            (":1/s", "host name"),
            ("h:1/s/x", "database number"),
            ("h:1/s/1/2", "more path"),
            ("u:s3cret%zz@h:1/s", "percent-encoded"),
            ("h:1/s?pass=s3cret", "no query"),
            ("h:1/s#s3cret", "no query"),
            ("h:1,h:2,h:1/s", "twice"),
            ("h:1/s%0Afake%20log%20line", "control character"),
            ("h:1/s%1B[2J", "control character"),
        ] {
            let err = parsed(rest).expect_err(rest).to_string();
            assert!(err.contains(says), "{rest}: {err}");
            assert!(!err.contains("s3cret"), "{err}");
        }
    }

    #[test]
    fn percent_decoding_refuses_bad_escapes() {
        assert_eq!(decode("a%40b%2Fc").as_deref(), Some("a@b/c"));
        assert_eq!(decode("%"), None);
        assert_eq!(decode("%4"), None);
        assert_eq!(decode("%zz"), None);
        assert_eq!(decode("%ff"), None);
    }
}
