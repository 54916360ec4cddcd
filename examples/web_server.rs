//! A blocking HTTP server (tiny_http) that books seats. Each booking takes a
//! lock on its seat, so concurrent requests for one seat yield exactly one
//! booking and a clear `409 Conflict` for the rest. One `Redlock` is built at
//! start-up and shared by all the server's threads (clones are cheap and share
//! connections and workers).
//!
//! ```text
//! cargo run --example web_server                  # local nodes, port 8080
//! cargo run --example web_server -- --nodes redis://h1,redis://h2,redis://h3 \
//!     --state redis://h4 --port 8080
//! curl -X POST 'http://127.0.0.1:8080/seats/7/book?user=ada'   # 200 booked
//! curl -X POST 'http://127.0.0.1:8080/seats/7/book?user=bob'   # 409 already booked
//! curl http://127.0.0.1:8080/seats/7                           # who has it
//! curl -X POST http://127.0.0.1:8080/seats/7/swap/8              # swap two bookings
//! curl http://127.0.0.1:8080/healthz                             # the lock nodes
//! curl http://127.0.0.1:8080/config                              # read the config
//! curl -X POST 'http://127.0.0.1:8080/config?version=2'          # reload it
//! ```
//!
//! `/healthz` answers 200 while a majority of the lock nodes is up and 503
//! otherwise, with one line per node from `Redlock::node_health`.
//!
//! A swap needs both seats at once: it takes one lock on both with
//! `lock_all`, all or nothing, so two swaps in opposite orders (`7/swap/8`
//! and `8/swap/7`) can neither deadlock nor interleave.
//!
//! The config is read by every request that wants it and reloaded now and
//! then: readers take the read side of the reader-writer lock `config`
//! (many at once), a reload takes the write side (alone). A reload writes
//! the config in two steps — its version, then its body — so a reader
//! without the lock could see one without the other; under the lock it
//! never does.
//!
//! `--port 0` picks a free port; the first line printed says which.

mod common;

use std::io::Write as _;
use std::time::Duration;

use redlock_sync::Redlock;
use tiny_http::{Method, Request, Response, Server};

const THREADS: usize = 8;

fn main() -> std::process::ExitCode {
    let mut nodes_arg = None;
    let mut state_arg = None;
    let mut port = 8080u16;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--nodes", Some(v)) => nodes_arg = Some(v),
            ("--state", Some(v)) => state_arg = Some(v),
            ("--port", Some(v)) => port = v.parse().unwrap_or_else(|_| usage()),
            _ => usage(),
        }
    }
    let nodes = common::Nodes::from_args_or_local(nodes_arg.as_deref(), 5);
    common::on_ctrl_c();
    let state_url = state_arg.unwrap_or_else(|| nodes.urls[0].clone());
    let redlock = Redlock::new(&nodes.urls).unwrap_or_else(|err| {
        eprintln!("web_server: {err}");
        std::process::exit(69);
    });
    common::check_nodes(&redlock);
    let server = Server::http(("127.0.0.1", port)).unwrap_or_else(|err| {
        eprintln!("web_server: cannot listen on port {port}: {err}");
        std::process::exit(69);
    });
    let addr = server.server_addr().to_ip().expect("an IP listener");
    println!("listening on http://{addr}");

    std::thread::scope(|s| {
        // Ctrl-C: every handler thread stops taking requests (a request in
        // hand finishes, and its guards release their locks).
        s.spawn(|| {
            common::shutdown().sleep(Duration::MAX);
            for _ in 0..THREADS {
                server.unblock();
            }
        });
        for _ in 0..THREADS {
            // Each handler thread gets a clone of the one client.
            let (server, redlock, state_url) = (&server, redlock.clone(), &state_url);
            s.spawn(move || {
                let mut state = redis::Client::open(state_url.as_str())
                    .and_then(|c| c.get_connection())
                    .expect("state redis");
                for request in server.incoming_requests() {
                    handle(request, &redlock, &mut state);
                }
            });
        }
    });
    println!("web_server: stopped");
    common::let_go(&redlock);
    drop(nodes);
    common::exit_code()
}

fn usage() -> ! {
    eprintln!("usage: web_server [--nodes URL,...] [--state URL] [--port PORT]");
    std::process::exit(64);
}

fn handle(request: Request, redlock: &Redlock, state: &mut redis::Connection) {
    let url = request.url().to_owned();
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (status, body) = match (request.method(), parts.as_slice()) {
        (Method::Post, ["seats", seat, "book"]) => {
            let user = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("user="))
                .unwrap_or("anonymous");
            book(redlock, state, seat, user)
        }
        (Method::Post, ["seats", a, "swap", b]) if a != b => swap(redlock, state, a, b),
        (Method::Get, ["healthz"]) => healthz(redlock),
        (Method::Get, ["config"]) => read_config(redlock, state),
        (Method::Post, ["config"]) => {
            let version = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("version="))
                .unwrap_or("1");
            reload_config(redlock, state, version)
        }
        (Method::Get, ["seats", seat]) => {
            let holder: Option<String> = redis::cmd("GET")
                .arg(format!("seat:{seat}:booking"))
                .query(state)
                .unwrap_or(None);
            match holder {
                Some(user) => (200, format!("seat {seat} is booked by {user}\n")),
                None => (200, format!("seat {seat} is free\n")),
            }
        }
        _ => (
            404,
            "try POST /seats/N/book?user=NAME, POST /seats/N/swap/M, GET /seats/N, GET /config \
             or POST /config?version=N\n"
                .to_owned(),
        ),
    };
    // A log line; a closed stdout must not take the server down.
    let _ = writeln!(std::io::stdout(), "{} {url} -> {status}", request.method());
    let _ = request.respond(Response::from_string(body).with_status_code(status));
}

/// The config under a read lock: `version N: body for version N`.
fn read_config(redlock: &Redlock, state: &mut redis::Connection) -> (u16, String) {
    let read = match redlock
        .rw_lock("config")
        .acquire_read(Duration::from_secs(5))
        .wait(Duration::from_secs(5))
        .lock()
    {
        Ok(read) => read,
        Err(err) => return (503, format!("config is being reloaded: {err}\n")),
    };
    let (version, body): (Option<String>, Option<String>) = redis::pipe()
        .get("config:version")
        .get("config:body")
        .query(state)
        .unwrap_or((None, None));
    drop(read);
    match (version, body) {
        (Some(version), Some(body)) => (200, format!("version {version}: {body}\n")),
        _ => (200, "no config yet\n".to_owned()),
    }
}

/// A reload under the write lock, in two steps a reader must never see
/// apart.
fn reload_config(redlock: &Redlock, state: &mut redis::Connection, version: &str) -> (u16, String) {
    let write = match redlock
        .rw_lock("config")
        .acquire_write(Duration::from_secs(5))
        .wait(Duration::from_secs(5))
        .lock()
    {
        Ok(write) => write,
        Err(err) => return (503, format!("could not reload: {err}\n")),
    };
    let _: () = redis::cmd("SET")
        .arg("config:version")
        .arg(version)
        .query(state)
        .unwrap();
    // The reload takes a moment (fetching, parsing, ...).
    std::thread::sleep(Duration::from_millis(5));
    let _: () = redis::cmd("SET")
        .arg("config:body")
        .arg(format!("body for version {version}"))
        .query(state)
        .unwrap();
    if write.ensure_valid().is_err() {
        return (503, "lost the write lock during the reload\n".to_owned());
    }
    drop(write);
    (200, format!("reloaded version {version}\n"))
}

/// 200 while a majority of the lock nodes is up and counts toward quorums,
/// else 503; a line per node.
fn healthz(redlock: &Redlock) -> (u16, String) {
    let nodes = redlock.node_health();
    let up = nodes
        .iter()
        .filter(|n| n.is_up() && n.is_admitted())
        .count();
    let mut body = format!(
        "{up} of {} lock nodes up, {} needed\n",
        nodes.len(),
        redlock.quorum()
    );
    for node in &nodes {
        let latency = node
            .latency()
            .map_or("-".to_owned(), |l| format!("{} µs", l.as_micros()));
        let last = node
            .last_failure()
            .map_or("-".to_owned(), |f| f.to_string());
        let state = match node.refusal() {
            _ if !node.is_up() => "DOWN".to_owned(),
            None => "up".to_owned(),
            Some(why) => format!("up, NOT COUNTING ({})", why.kind()),
        };
        body.push_str(&format!(
            "{} {state} latency {latency} last failure {last}\n",
            node.address()
        ));
    }
    (if up >= redlock.quorum() { 200 } else { 503 }, body)
}

/// The booking: check and write under the seat's lock.
fn book(redlock: &Redlock, state: &mut redis::Connection, seat: &str, user: &str) -> (u16, String) {
    let guard = match redlock.try_lock(&format!("seat:{seat}"), Duration::from_secs(5)) {
        Ok(Some(guard)) => guard,
        Ok(None) => {
            return (
                409,
                format!("seat {seat} is being booked by another request; try again\n"),
            );
        }
        Err(err) => return (503, format!("lock service unavailable: {err}\n")),
    };
    let key = format!("seat:{seat}:booking");
    let booked: Option<String> = redis::cmd("GET").arg(&key).query(state).unwrap_or(None);
    if let Some(holder) = booked {
        return (409, format!("seat {seat} is already booked by {holder}\n"));
    }
    std::thread::sleep(Duration::from_millis(20)); // e.g. a payment call
    if guard.ensure_valid().is_err() {
        return (
            503,
            "lost the seat lock before booking; try again\n".to_owned(),
        );
    }
    let _: () = redis::cmd("SET").arg(&key).arg(user).query(state).unwrap();
    drop(guard);
    (200, format!("booked seat {seat} for {user}\n"))
}

/// Swaps the bookings of two seats: read both, write both, under one lock on
/// both seats. (The same seat locks as `book`, so a booking and a swap of the
/// same seat exclude each other too.)
fn swap(redlock: &Redlock, state: &mut redis::Connection, a: &str, b: &str) -> (u16, String) {
    let seats = [format!("seat:{a}"), format!("seat:{b}")];
    let guard = match redlock.lock_all(&[&seats[0], &seats[1]], Duration::from_secs(5)) {
        Ok(guard) => guard,
        Err(redlock_sync::Error::Busy { .. }) => {
            return (409, format!("seats {a} and {b} are busy; try again\n"));
        }
        Err(err) => return (503, format!("lock service unavailable: {err}\n")),
    };
    let keys = [format!("seat:{a}:booking"), format!("seat:{b}:booking")];
    let read = |state: &mut redis::Connection, key: &str| -> Option<String> {
        redis::cmd("GET").arg(key).query(state).unwrap_or(None)
    };
    let (first, second) = (read(state, &keys[0]), read(state, &keys[1]));
    std::thread::sleep(Duration::from_millis(5)); // e.g. notify both holders
    if guard.ensure_valid().is_err() {
        return (
            503,
            "lost the seat locks before swapping; try again\n".to_owned(),
        );
    }
    for (key, value) in [(&keys[0], &second), (&keys[1], &first)] {
        let _: () = match value {
            Some(user) => redis::cmd("SET").arg(key).arg(user).query(state).unwrap(),
            None => redis::cmd("DEL").arg(key).query(state).unwrap(),
        };
    }
    drop(guard);
    (200, format!("swapped seats {a} and {b}\n"))
}
