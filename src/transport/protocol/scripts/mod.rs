//! The Lua scripts the nodes run, one file each in this folder, read top to
//! bottom: a header gives its `KEYS`, `ARGV`, its reply and the invariant it
//! keeps. The helpers several scripts share are in three libraries by
//! concern, `lib_queue.lua` (the queue of waiters, the turn rule, the
//! election's observers), `lib_fence.lua` and `lib_slots.lua`, joined in
//! front of each script that uses them, at compile time. (One prelude for
//! all was measured: its 15 functions cost every call about 2.5 µs of
//! the node's time, a closure each, against 1 µs for a script's whole
//! `EVALSHA`.) `tests/scripts/main.rs` runs every script against a real node,
//! through a table of the states it can meet.
//!
//! A leaf: nothing here knows of the rest of the crate, so that the tests
//! and the benchmarks include this file as it is.
//!
//! # The queue of waiters
//!
//! A resource's gate node (one node, the same in every client, see
//! `Transport`) keeps the resource's waiters in arrival order:
//! `redlock-queue:{resource}` (a sorted set, member → arrival time) and
//! `redlock-alive:{resource}` (member → until when it counts as alive). A
//! member is `"{client id}:{ticket}"`; its client listens on
//! `redlock-wake:{client id}` (see `keys::wake_channel`). On the gate node only:
//!
//! * an acquisition that asks the gate node first (a queued waiter's, or a
//!   client's that just woke one) sets the key only while the key is free
//!   **and** nobody alive queued before the caller (it is the head, or the
//!   queue is empty);
//!   otherwise it queues the caller (when it will wait) and refuses —
//!   "others queued first" (`2`), or "held" (`0`) to the first in line. A
//!   free key whose head did not come yet gets the head woken again. The
//!   first in line takes "held" as one no among N and asks the other nodes
//!   too (a key left behind on the gate node alone must not stop the
//!   queue); everyone else stops at the gate node. A key the gate node
//!   granted less than the granted round's per-node timeout ago is not
//!   "held" but the queue's: the next in line is told "others queued
//!   first" too, so that it does not take the other nodes while the
//!   granted round is on its way to them.
//! * a lease's release wakes the head, whatever this node holds (a failed
//!   round's clean-up, only if the key is free here): one `PUBLISH` to one
//!   client, whatever the number of waiters (`2`: handed on, `1`: nobody
//!   waited).
//! * a waiter that gives up leaves the queue, and wakes the next head if
//!   the key is free.
//!
//! Members that stopped refreshing their place (crashed, or gone without
//! leaving) drop out after their alive period. The other nodes run the plain
//! commands: the queue only orders waiters and wakes one; every acquisition
//! still needs `SET NX` on a majority.

use std::sync::OnceLock;

/// One script: its name (the file's), its source and, once asked, the body
/// sent (the source without its comments) and the body's SHA-1 (what
/// `EVALSHA` names it by).
pub(crate) struct Script {
    /// Its place in [`ALL`].
    id: u8,
    #[cfg_attr(not(test), allow(dead_code))]
    name: &'static str,
    source: &'static str,
    body: OnceLock<String>,
    hash: OnceLock<String>,
}

impl Script {
    const fn new(id: u8, name: &'static str, source: &'static str) -> Script {
        Script {
            id,
            name,
            source,
            body: OnceLock::new(),
            hash: OnceLock::new(),
        }
    }

    /// The file's name, without `.lua` (the tests and the benchmarks name
    /// scripts by it).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// The source as written, the libraries it uses included.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn source(&self) -> &'static str {
        self.source
    }

    /// What goes out with `EVAL`: the source without its comment lines,
    /// blank lines and indentation (a third of the bytes; the headers are
    /// for readers, not for every call of a user without `EVALSHA`).
    pub(crate) fn body(&self) -> &str {
        self.body.get_or_init(|| {
            self.source
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty() && !line.starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n")
        })
    }

    /// The body's SHA-1 in hex, as Redis names a cached script.
    pub(crate) fn hash(&self) -> &str {
        self.hash
            .get_or_init(|| redis::Script::new(self.body()).get_hash().to_owned())
    }
}

/// The scripts a connection has sent with their source, so that the node
/// has them cached (unless its cache was flushed since, or, from Redis 7.4,
/// evicted among more than 500 scripts sent with `EVAL`; then the node
/// answers `NOSCRIPT` and the script goes again with its source, see
/// `redis_link.rs`): the first call of
/// each script on a connection goes out as `EVAL` with the source, the next
/// ones as `EVALSHA` with its hash — a few bytes, and no hashing on the
/// node.
///
/// A connection whose user may not run `EVALSHA` (an ACL written for an
/// older release lists `+eval` alone) sends every script with its source:
/// see [`Sent::no_hashes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sent {
    /// One bit per script (its place in [`ALL`]).
    cached: u32,
    /// Whether the node takes `EVALSHA` from this connection.
    by_hash: bool,
}

impl Sent {
    /// Nothing sent yet: every script goes out with its source.
    pub(crate) const fn none() -> Sent {
        Sent {
            cached: 0,
            by_hash: true,
        }
    }

    /// From now on every script goes out with its source: the node
    /// refused `EVALSHA` itself.
    pub(crate) fn no_hashes(&mut self) {
        self.by_hash = false;
    }

    /// Forgets the scripts sent since `before` (a batch the node refused
    /// before running: their sources were not cached).
    pub(crate) fn forget_since(&mut self, before: Sent) {
        self.cached &= before.cached;
    }

    /// Every script goes out with its source, every time (a request the
    /// node refused by hash, sent again).
    pub(crate) const fn sources_only() -> Sent {
        Sent {
            cached: 0,
            by_hash: false,
        }
    }
    /// Every script sent: each goes out by its hash.
    #[cfg(test)]
    pub(crate) const fn all() -> Sent {
        Sent {
            cached: u32::MAX,
            by_hash: true,
        }
    }
}

/// Starts `cmd` (empty) as a call of `script`: `EVALSHA` with its hash if
/// `sent` has it, else `EVAL` with its source, noted in `sent`.
pub(crate) fn eval<'c>(
    cmd: &'c mut redis::Cmd,
    script: &Script,
    sent: &mut Sent,
) -> &'c mut redis::Cmd {
    let bit = 1u32 << script.id;
    if sent.by_hash && sent.cached & bit != 0 {
        return cmd.arg("EVALSHA").arg(script.hash());
    }
    sent.cached |= bit;
    cmd.arg("EVAL").arg(script.body())
}

/// Compare-and-delete.
pub(crate) static RELEASE: Script = Script::new(0, "release", include_str!("release.lua"));
/// Compare-and-pexpire, never shorter.
pub(crate) static EXTEND: Script = Script::new(1, "extend", include_str!("extend.lua"));
/// `lock_all` on one node: every key or none.
pub(crate) static ACQUIRE_ALL: Script =
    Script::new(2, "acquire_all", include_str!("acquire_all.lua"));
/// Deletes every key that holds the token.
pub(crate) static RELEASE_ALL: Script =
    Script::new(3, "release_all", include_str!("release_all.lua"));
/// Extends every key, only if all hold the token.
pub(crate) static EXTEND_ALL: Script = Script::new(4, "extend_all", include_str!("extend_all.lua"));
/// A fenced acquisition.
pub(crate) static ACQUIRE_FENCED: Script = Script::new(
    5,
    "acquire_fenced",
    concat!(
        include_str!("lib_fence.lua"),
        include_str!("acquire_fenced.lua")
    ),
);
/// A semaphore slot, with the slots held.
pub(crate) static SLOT_ACQUIRE: Script = Script::new(
    6,
    "slot_acquire",
    concat!(
        include_str!("lib_slots.lua"),
        include_str!("slot_acquire.lua")
    ),
);
/// A fenced semaphore slot, with the slots held.
pub(crate) static SLOT_ACQUIRE_FENCED: Script = Script::new(
    7,
    "slot_acquire_fenced",
    concat!(
        include_str!("lib_fence.lua"),
        include_str!("lib_slots.lua"),
        include_str!("slot_acquire_fenced.lua")
    ),
);
/// The gate node's acquisition, in the queue.
pub(crate) static GATE_ACQUIRE: Script = Script::new(
    8,
    "gate_acquire",
    concat!(
        include_str!("lib_queue.lua"),
        include_str!("gate_acquire.lua")
    ),
);
/// The gate node's fenced acquisition, in the queue.
pub(crate) static GATE_ACQUIRE_FENCED: Script = Script::new(
    9,
    "gate_acquire_fenced",
    concat!(
        include_str!("lib_queue.lua"),
        include_str!("lib_fence.lua"),
        include_str!("gate_acquire_fenced.lua")
    ),
);
/// The gate node's release, waking the next waiter.
pub(crate) static GATE_RELEASE: Script = Script::new(
    10,
    "gate_release",
    concat!(
        include_str!("lib_queue.lua"),
        include_str!("gate_release.lua")
    ),
);
/// A waiter gives up its place.
pub(crate) static LEAVE: Script = Script::new(
    11,
    "leave",
    concat!(include_str!("lib_queue.lua"), include_str!("leave.lua")),
);
/// A reader's acquisition.
pub(crate) static READ_ACQUIRE: Script =
    Script::new(12, "read_acquire", include_str!("read_acquire.lua"));
/// A reader's release.
pub(crate) static READ_RELEASE: Script =
    Script::new(13, "read_release", include_str!("read_release.lua"));
/// A reader's extension.
pub(crate) static READ_EXTEND: Script =
    Script::new(14, "read_extend", include_str!("read_extend.lua"));
/// A writer's acquisition, plain or fenced.
pub(crate) static WRITE_ACQUIRE: Script = Script::new(
    15,
    "write_acquire",
    concat!(
        include_str!("lib_fence.lua"),
        include_str!("write_acquire.lua")
    ),
);
/// The gate node's reader or writer acquisition, in the queue.
pub(crate) static GATE_RW_ACQUIRE: Script = Script::new(
    16,
    "gate_rw_acquire",
    concat!(
        include_str!("lib_queue.lua"),
        include_str!("lib_fence.lua"),
        include_str!("gate_rw_acquire.lua")
    ),
);
/// The gate node's reader release, waking the writer or the next waiter.
pub(crate) static GATE_READ_RELEASE: Script = Script::new(
    17,
    "gate_read_release",
    concat!(
        include_str!("lib_queue.lua"),
        include_str!("gate_read_release.lua")
    ),
);
/// A leader publishes its value.
pub(crate) static PROCLAIM: Script = Script::new(
    18,
    "proclaim",
    concat!(include_str!("lib_queue.lua"), include_str!("proclaim.lua")),
);
/// An election lock's extension, its value with it.
pub(crate) static ELECT_EXTEND: Script =
    Script::new(19, "elect_extend", include_str!("elect_extend.lua"));
/// Who leads, and what it proclaimed.
pub(crate) static LEADER: Script = Script::new(20, "leader", include_str!("leader.lua"));
/// A leader clears its value.
pub(crate) static RESIGN: Script = Script::new(
    21,
    "resign",
    concat!(include_str!("lib_queue.lua"), include_str!("resign.lua")),
);
/// A "no" for a request never sent.
pub(crate) static NO: Script = Script::new(22, "no", include_str!("no.lua"));
/// What holds a resource, for an operator.
pub(crate) static INSPECT: Script = Script::new(23, "inspect", include_str!("inspect.lua"));
/// An operator's release of the holder it found.
pub(crate) static FORCE_RELEASE: Script =
    Script::new(24, "force_release", include_str!("force_release.lua"));

/// Every script (the tests and the benchmarks go through them all).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) static ALL: [&Script; 25] = [
    &RELEASE,
    &EXTEND,
    &ACQUIRE_ALL,
    &RELEASE_ALL,
    &EXTEND_ALL,
    &ACQUIRE_FENCED,
    &SLOT_ACQUIRE,
    &SLOT_ACQUIRE_FENCED,
    &GATE_ACQUIRE,
    &GATE_ACQUIRE_FENCED,
    &GATE_RELEASE,
    &LEAVE,
    &READ_ACQUIRE,
    &READ_RELEASE,
    &READ_EXTEND,
    &WRITE_ACQUIRE,
    &GATE_RW_ACQUIRE,
    &GATE_READ_RELEASE,
    &PROCLAIM,
    &ELECT_EXTEND,
    &LEADER,
    &RESIGN,
    &NO,
    &INSPECT,
    &FORCE_RELEASE,
];

/// How long a place in a queue counts without a refresh, as
/// `lib_queue.lua` says it (`local ALIVE=…`), in ms.
#[cfg(test)]
pub(crate) fn queue_alive_ms() -> Option<u64> {
    include_str!("lib_queue.lua")
        .lines()
        .find_map(|line| line.strip_prefix("local ALIVE="))
        .and_then(|ms| ms.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_script_knows_its_place_and_has_its_own_name() {
        for (i, script) in ALL.iter().enumerate() {
            assert_eq!(usize::from(script.id), i, "{}", script.name());
            assert!(i < 32, "Sent holds one bit per script");
        }
        let mut names: Vec<&str> = ALL.iter().map(|s| s.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
    }

    #[test]
    fn a_request_sent_again_goes_with_its_source_every_time() {
        let mut sent = Sent::sources_only();
        for _ in 0..2 {
            let mut cmd = redis::Cmd::new();
            eval(&mut cmd, &RELEASE, &mut sent);
            assert_eq!(cmd.args_iter().count(), 2);
            assert!(matches!(
                cmd.args_iter().next(),
                Some(redis::Arg::Simple(b"EVAL"))
            ));
        }
        let mut refused = Sent::none();
        refused.no_hashes();
        eval(&mut redis::Cmd::new(), &EXTEND, &mut refused);
        let mut cmd = redis::Cmd::new();
        eval(&mut cmd, &EXTEND, &mut refused);
        assert!(matches!(
            cmd.args_iter().next(),
            Some(redis::Arg::Simple(b"EVAL"))
        ));
    }

    #[test]
    fn a_body_is_its_source_without_comments_and_indentation() {
        for script in ALL {
            let body = script.body();
            assert!(
                body.lines().all(|l| !l.trim_start().starts_with("--")),
                "{}",
                script.name()
            );
            assert!(
                body.lines().all(|l| l == l.trim() && !l.is_empty()),
                "{}",
                script.name()
            );
            assert!(body.len() < script.source().len(), "{}", script.name());
        }
    }

    #[test]
    fn a_script_goes_out_with_its_source_once_then_by_hash() {
        let mut sent = Sent::none();
        let mut first = redis::Cmd::new();
        eval(&mut first, &RELEASE, &mut sent);
        let mut second = redis::Cmd::new();
        eval(&mut second, &RELEASE, &mut sent);
        let mut other = redis::Cmd::new();
        eval(&mut other, &EXTEND, &mut sent);
        let args = |cmd: &redis::Cmd| -> Vec<Vec<u8>> {
            cmd.args_iter()
                .map(|a| match a {
                    redis::Arg::Simple(b) => b.to_vec(),
                    _ => Vec::new(),
                })
                .collect()
        };
        assert_eq!(
            args(&first),
            [b"EVAL".to_vec(), RELEASE.body().as_bytes().to_vec()]
        );
        assert_eq!(
            args(&second),
            [b"EVALSHA".to_vec(), RELEASE.hash().as_bytes().to_vec()]
        );
        assert_eq!(args(&other)[0], b"EVAL");
    }
}
