//! Opening a connection within its timeout, whatever the node does.
//!
//! `redis`'s `get_connection_with_timeout` bounds every step of a connect
//! but one: with native-tls (and not rustls), the TLS handshake runs on a
//! socket with no read timeout yet, so a node that accepts the connection
//! and never answers (a wedged process, a stuck proxy, a black hole)
//! holds the attempt, and the thread making it, for as long as it stays
//! silent. There such a connect runs on a thread of its own and is waited
//! for until the timeout; a late one is left behind and ends when the
//! node answers or closes, or (TCP keepalive and a user timeout on its
//! socket, on Linux) within seconds of the node's host going away without a word.
//! Until it has, a new attempt at that address fails at once: a thread per
//! address and connecting part of the client (its pool, its wake-up
//! subscriber, a `verify`) at most, never more as time goes on.

use std::time::Duration;

/// Connects with `client` within `timeout` (then sets no I/O timeouts:
/// the caller sets its own).
pub(crate) fn connect(
    client: &redis::Client,
    timeout: Duration,
) -> redis::RedisResult<redis::Connection> {
    #[cfg(all(feature = "tls-native-tls", not(feature = "tls-rustls")))]
    if let redis::ConnectionAddr::TcpTls { host, port, .. } = client.get_connection_info().addr() {
        return watched::connect(client, &format!("{host}:{port}"), timeout);
    }
    client.get_connection_with_timeout(timeout)
}

#[cfg(all(feature = "tls-native-tls", not(feature = "tls-rustls")))]
mod watched {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use parking_lot::Mutex;

    /// The connects left behind and still under way: their address, when
    /// each began, and its number (each clears only its own entry).
    static LEFT_BEHIND: Mutex<Vec<(String, Instant, u64)>> = Mutex::new(Vec::new());

    /// The next connect's number.
    static NEXT: AtomicU64 = AtomicU64::new(0);

    /// A timeout the crate reads as one (`FailureKind::Timeout`).
    fn timed_out(detail: String) -> redis::RedisError {
        std::io::Error::new(std::io::ErrorKind::TimedOut, detail).into()
    }

    /// How long a left-behind connect's socket may stay silent, or leave
    /// data unacknowledged, once its node's host is gone: keepalive probes
    /// after [`IDLE`], every second, [`PROBES`] of them.
    const IDLE: Duration = Duration::from_secs(5);
    const PROBES: u32 = 3;

    /// `client` with keepalive and a user timeout on its TCP socket.
    #[cfg(target_os = "linux")]
    fn with_keepalive(client: &redis::Client) -> redis::RedisResult<redis::Client> {
        let info = client.get_connection_info().clone();
        let keepalive = redis::io::tcp::socket2::TcpKeepalive::new()
            .with_time(IDLE)
            .with_interval(Duration::from_secs(1))
            .with_retries(PROBES);
        let settings = info
            .tcp_settings()
            .clone()
            .set_keepalive(keepalive)
            .set_user_timeout(IDLE + Duration::from_secs(u64::from(PROBES)));
        redis::Client::open(info.set_tcp_settings(settings))
    }

    /// `client` as it is (the socket options are set on Linux only).
    #[cfg(not(target_os = "linux"))]
    fn with_keepalive(client: &redis::Client) -> redis::RedisResult<redis::Client> {
        Ok(client.clone())
    }

    /// [`super::connect`] on a thread of its own, waited for until
    /// `timeout`.
    pub(super) fn connect(
        client: &redis::Client,
        address: &str,
        timeout: Duration,
    ) -> redis::RedisResult<redis::Connection> {
        if let Some((_, since, _)) = LEFT_BEHIND.lock().iter().find(|(a, ..)| a == address) {
            return Err(timed_out(format!(
                "the TLS handshake begun {} ms ago is still unanswered",
                since.elapsed().as_millis()
            )));
        }
        let (done, result) = crossbeam_channel::bounded(1);
        let client = with_keepalive(client)?;
        let number = NEXT.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        // Named by the port, so that a test can count one address's.
        let port = address.rsplit(':').next().unwrap_or("");
        let spawned = std::thread::Builder::new()
            .name(format!("redlock-d{port}"))
            .spawn(move || {
                let connected = client.get_connection_with_timeout(timeout);
                // Under the lock the waiter gives up under: either it takes
                // this, or it has left the address behind and this clears it.
                let mut left = LEFT_BEHIND.lock();
                if done.try_send(connected).is_err() {
                    left.retain(|(.., n)| *n != number);
                }
            });
        if let Err(err) = spawned {
            return Err(std::io::Error::other(format!(
                "could not start a thread to connect: {err}"
            ))
            .into());
        }
        match result.recv_deadline(started + timeout) {
            Ok(connected) => return connected,
            // The thread ended without a word (it panicked): nothing is
            // left behind.
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                return Err(std::io::Error::other("the thread connecting ended early").into());
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
        }
        let mut left = LEFT_BEHIND.lock();
        if let Ok(connected) = result.try_recv() {
            return connected;
        }
        left.push((address.to_owned(), started, number));
        drop(result);
        drop(left);
        Err(timed_out(format!(
            "the TLS handshake was not answered within {} ms",
            timeout.as_millis()
        )))
    }
}
