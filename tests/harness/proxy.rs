//! A TCP proxy in front of a node, to inject network faults.

use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU16, AtomicUsize, Ordering};
use std::time::Duration;

/// What a [`Proxy`] does to the traffic it forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything at once.
    Pass,
    /// Delay every reply chunk by this much.
    Latency(Duration),
    /// Accept connections but forward nothing in either direction.
    Stall,
    /// Forward requests, then send half of the next reply and close.
    DropMidReply,
}

struct ProxyShared {
    fault: std::sync::Mutex<Fault>,
    /// The port new connections go to (see [`Proxy::retarget`]).
    target: AtomicU16,
    stop: std::sync::atomic::AtomicBool,
    /// Per connection: its pumps still running, and its two sockets.
    sockets: std::sync::Mutex<Vec<(Arc<AtomicUsize>, [TcpStream; 2])>>,
    /// Per connection: whether it went silent (see
    /// [`Proxy::silence_existing`]).
    silenced: std::sync::Mutex<Vec<(Arc<AtomicUsize>, Arc<AtomicBool>)>>,
    /// Chunks read and not yet forwarded because of a [`Fault::Stall`].
    held: std::sync::atomic::AtomicUsize,
    /// Connections that held a request back and that the node has not
    /// closed yet (see [`Proxy::late`]).
    late: std::sync::atomic::AtomicUsize,
}

/// A TCP proxy in front of a node, to inject network faults. Dropping it
/// stops it and closes every connection through it.
pub struct Proxy {
    pub port: u16,
    /// The loopback address the proxy listens on.
    ip: std::net::Ipv4Addr,
    shared: std::sync::Arc<ProxyShared>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Proxy({} -> {})",
            self.port,
            self.shared.target.load(Ordering::SeqCst)
        )
    }
}

impl Proxy {
    /// Starts forwarding a free loopback port to `127.0.0.1:target`.
    pub fn start(target: u16) -> Proxy {
        Proxy::start_on(std::net::Ipv4Addr::LOCALHOST, target)
    }

    /// Starts forwarding a free port of loopback address `ip` (any of
    /// 127.0.0.0/8) to `127.0.0.1:target`.
    pub fn start_on(ip: std::net::Ipv4Addr, target: u16) -> Proxy {
        assert!(ip.is_loopback(), "{ip} is not a loopback address");
        let listener = TcpListener::bind((ip, 0)).expect("bind proxy port");
        let port = listener.local_addr().unwrap().port();
        let shared = std::sync::Arc::new(ProxyShared {
            fault: std::sync::Mutex::new(Fault::Pass),
            target: AtomicU16::new(target),
            stop: std::sync::atomic::AtomicBool::new(false),
            sockets: std::sync::Mutex::new(Vec::new()),
            silenced: std::sync::Mutex::new(Vec::new()),
            held: std::sync::atomic::AtomicUsize::new(0),
            late: std::sync::atomic::AtomicUsize::new(0),
        });
        let accept_shared = shared.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if accept_shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else {
                    // Out of descriptors, say: not a hot loop.
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                let target = accept_shared.target.load(Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                // Ended connections are forgotten (their descriptors
                // closed) as new ones come.
                let pumps = Arc::new(AtomicUsize::new(2));
                // Out of descriptors: this connection is dropped, the proxy
                // goes on.
                let (Ok(c1), Ok(s1), Ok(c2), Ok(s2)) = (
                    client.try_clone(),
                    server.try_clone(),
                    client.try_clone(),
                    server.try_clone(),
                ) else {
                    continue;
                };
                {
                    let mut sockets = accept_shared.sockets.lock().unwrap();
                    sockets.retain(|(live, _)| live.load(Ordering::SeqCst) > 0);
                    sockets.push((pumps.clone(), [c1, s1]));
                }
                let silenced = Arc::new(AtomicBool::new(false));
                {
                    let mut all = accept_shared.silenced.lock().unwrap();
                    all.retain(|(live, _)| live.load(Ordering::SeqCst) > 0);
                    all.push((pumps.clone(), silenced.clone()));
                }
                let down_pumps = pumps.clone();
                let up = accept_shared.clone();
                let up_silenced = silenced.clone();
                let late = Arc::new(AtomicU8::new(NOT_LATE));
                let up_late = late.clone();
                std::thread::spawn(move || {
                    pump(client, server, &up, &up_silenced, &up_late, false);
                    pumps.fetch_sub(1, Ordering::SeqCst);
                });
                let down = accept_shared.clone();
                std::thread::spawn(move || {
                    pump(s2, c2, &down, &silenced, &late, true);
                    down_pumps.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Proxy { port, ip, shared }
    }

    pub fn url(&self) -> String {
        format!("redis://{}:{}", self.ip, self.port)
    }

    pub fn address(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    pub fn set(&self, fault: Fault) {
        *self.shared.fault.lock().unwrap() = fault;
    }

    /// Every connection open now goes silent for good, both ways, without
    /// closing (a NAT or firewall that forgot it: half-open); new
    /// connections pass.
    pub fn silence_existing(&self) {
        for (_, flag) in self.shared.silenced.lock().unwrap().iter() {
            flag.store(true, Ordering::SeqCst);
        }
    }

    /// Chunks of traffic held back by a [`Fault::Stall`] right now: after
    /// the link passes again, 0 once they were all delivered.
    pub fn held(&self) -> usize {
        self.shared.held.load(Ordering::SeqCst)
    }

    /// Connections whose requests were held back by a [`Fault::Stall`] and
    /// that the node has not answered or closed since they were delivered.
    /// When the link passes again, the held requests are delivered; the
    /// node answers (or, once the client had closed, closes) only after
    /// running them, so 0 means every late request ran. (An answer to an
    /// earlier request still in flight may end the wait early.)
    pub fn late(&self) -> usize {
        self.shared.late.load(Ordering::SeqCst)
    }

    /// Sends new connections to `127.0.0.1:target` and closes the open ones:
    /// what a managed service's endpoint does when it promotes a replica.
    pub fn retarget(&self, target: u16) {
        self.shared.target.store(target, Ordering::SeqCst);
        self.cut_connections();
    }

    /// Closes every connection through the proxy (new ones are accepted).
    pub fn cut_connections(&self) {
        for (_, pair) in self.shared.sockets.lock().unwrap().drain(..) {
            for socket in pair {
                let _ = socket.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.set(Fault::Pass);
        self.cut_connections();
        let _ = TcpStream::connect((self.ip, self.port)); // wake the accept loop
    }
}

fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    shared: &ProxyShared,
    silenced: &AtomicBool,
    late: &AtomicU8,
    replies: bool,
) {
    use std::io::{Read, Write};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut holding = false;
        loop {
            if shared.stop.load(Ordering::SeqCst) {
                break;
            }
            if silenced.load(Ordering::SeqCst) {
                // Swallowed: nothing arrives, nothing is closed.
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            let fault = *shared.fault.lock().unwrap();
            match fault {
                // Hold the data: a stalled peer answers nothing.
                Fault::Stall => {
                    if !holding {
                        holding = true;
                        shared.held.fetch_add(1, Ordering::SeqCst);
                        if !replies
                            && late
                                .compare_exchange(
                                    NOT_LATE,
                                    HELD,
                                    Ordering::SeqCst,
                                    Ordering::SeqCst,
                                )
                                .is_ok()
                        {
                            shared.late.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                Fault::Latency(delay) if replies => {
                    std::thread::sleep(delay);
                    break;
                }
                Fault::DropMidReply if replies => {
                    let _ = to.write_all(&buf[..n / 2]);
                    let _ = to.shutdown(std::net::Shutdown::Both);
                    let _ = from.shutdown(std::net::Shutdown::Both);
                    if holding {
                        shared.held.fetch_sub(1, Ordering::SeqCst);
                    }
                    return;
                }
                _ => break,
            }
        }
        if holding && !replies {
            // Before the write: the node's answer may come before this
            // thread runs again.
            let _ = late.compare_exchange(HELD, DELIVERED, Ordering::SeqCst, Ordering::SeqCst);
        }
        let written = to.write_all(&buf[..n]).is_ok();
        if holding {
            shared.held.fetch_sub(1, Ordering::SeqCst);
        }
        if replies && !holding {
            // The node answered after a late request reached it: it ran it.
            end_late(shared, late, DELIVERED);
        }
        if !written {
            break;
        }
    }
    if replies {
        // The node closed (or the client is gone): the connection is over.
        end_late(shared, late, HELD);
        end_late(shared, late, DELIVERED);
        let _ = to.shutdown(std::net::Shutdown::Both);
        let _ = from.shutdown(std::net::Shutdown::Both);
    } else {
        // The client closed: pass the close on, and let the node answer
        // what it still runs (it closes its side after).
        let _ = to.shutdown(std::net::Shutdown::Write);
    }
}

/// A connection's [`Proxy::late`] state: nothing held back ...
const NOT_LATE: u8 = 0;
/// ... a request held back ...
const HELD: u8 = 1;
/// ... and delivered late, the node's answer not yet seen.
const DELIVERED: u8 = 2;

/// Counts a late connection as done if it is in state `from`.
fn end_late(shared: &ProxyShared, late: &AtomicU8, from: u8) {
    if late
        .compare_exchange(from, NOT_LATE, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
    {
        shared.late.fetch_sub(1, Ordering::SeqCst);
    }
}
