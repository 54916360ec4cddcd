//! Opening a connection within its timeout, whatever the node does.
//!
//! `redis`'s `get_connection_with_timeout` bounds every step of a connect
//! but one: with native-tls (and not rustls), the TLS handshake runs on a
//! socket with no read timeout yet, so a node that accepts the connection
//! and never answers (a wedged process, a stuck proxy, a black hole)
//! holds the attempt, and the thread making it, for as long as it stays
//! silent. There such a connect runs on a thread of its own and is waited
//! for until the timeout; a late one is left behind and ends when the
//! node answers or closes. Until it has, a new attempt at that address
//! fails at once: at most one thread per address is ever left behind.

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
        let client = client.clone();
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
        if let Ok(connected) = result.recv_deadline(started + timeout) {
            return connected;
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
