//! A Redis node in Rust, as the scripts see it: a keyspace of strings,
//! sorted sets and lists with expiry in node ms, the commands the crate and
//! the scripts' tables send, and each Lua script of
//! `transport/protocol/scripts/` written again in Rust, line for line
//! (`scripts.rs`, `queue.rs`, `elect.rs`).
//!
//! This is the crate's one second implementation of the scripts. The fake
//! node of the unit tests runs it behind the real encoding and reply
//! reading; `tests/scripts/` holds it to every script's table, case for
//! case, beside the real Lua on a real `redis-server`; the model checker's
//! nodes are made of it.
//!
//! A leaf: it knows nothing of the rest of the crate (only `redis::Value`,
//! the replies, and `redis::Script`'s SHA-1), so that the tests and the
//! model include this folder as it is.

mod commands;
mod data;
mod elect;
mod queue;
mod reply;
mod scripts;

pub(crate) use queue::ALIVE;

use data::Keys;
use redis::Value;
use reply::error;

/// One node: its keys, and the wake-ups its scripts published since they
/// were last taken.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Node {
    keys: Keys,
    /// `client:ticket` for each `PUBLISH redlock-wake:client ticket`, in
    /// order.
    wakes: Vec<String>,
    /// How long a place in a queue counts without a refresh, ms
    /// (lib_queue.lua's `ALIVE`).
    alive: i64,
}

impl Default for Node {
    fn default() -> Node {
        Node::with_alive(ALIVE)
    }
}

impl Node {
    /// An empty node whose queue places count `alive` ms (lib_queue.lua's
    /// `ALIVE` scaled, as the model checker's short time needs).
    pub(crate) fn with_alive(alive: i64) -> Node {
        Node {
            keys: Keys::default(),
            wakes: Vec::new(),
            alive,
        }
    }

    /// Runs the script named `script` (a file of `scripts/` without its
    /// `.lua`) at node time `now` (ms), as `EVAL` would.
    pub(crate) fn eval(
        &mut self,
        now: u64,
        script: &str,
        keys: &[String],
        argv: &[String],
    ) -> Value {
        self.keys.expire(now);
        let mut call = scripts::Call {
            k: &mut self.keys,
            wakes: &mut self.wakes,
            keys,
            argv,
            now,
            alive: self.alive,
        };
        match call.run(script) {
            Ok(value) => value,
            Err(failed) => error(&failed),
        }
    }

    /// Runs one command, given as its words, at node time `now`.
    pub(crate) fn command(&mut self, now: u64, words: &[String]) -> Value {
        self.keys.expire(now);
        let Some((name, args)) = words.split_first() else {
            return error("ERR no command");
        };
        let name = name.to_ascii_uppercase();
        match commands::run(&mut self.keys, &mut self.wakes, now, &name, args) {
            Ok(value) => value,
            Err(failed) => error(&failed),
        }
    }

    /// The wake-ups published since the last call, `client:ticket` each.
    pub(crate) fn take_wakes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.wakes)
    }

    /// Forgets every key, as a node restarted without persistence.
    pub(crate) fn flush(&mut self) {
        self.keys = Keys::default();
    }
}
