//! The key layout on every node, so that keys never collide: a plain
//! lock on resource `r` is the key `r`; every other key of a hold starts
//! with one of `kind::RESERVED`, and the client's keys about a node itself
//! are `trust::OWN_KEYS`: no resource name may start with either. Each
//! kind's own keys are in its room (`kind/`); here are the keys every kind
//! shares:
//!
//! * a lock key's fence value, on a fencing client: `redlock-fence:{key}`;
//! * the queue of waiters, on the gate node: `redlock-queue:{g}` and
//!   `redlock-alive:{g}`, where `g` is the kind's gate name
//!   (`Kind::gate_name`);
//! * a client's wake-up channel (a channel, not a key):
//!   `redlock-wake:{client id}`.
//!
//! [`Layout`] lays every key out for its node: as named, or in the hash
//! slot of the user's name on a Redis Cluster node.

use super::hash_slot;

/// How long a queued waiter keeps its place without a round (`ALIVE` in
/// the gate scripts): four of its longest sleeps between rounds
/// ([`QUEUE_REFRESH`](crate::settings::QUEUE_REFRESH)).
pub(crate) const QUEUE_ALIVE: std::time::Duration = std::time::Duration::from_millis(2000);

/// The channel a client's queued waiters are woken on:
/// `redlock-wake:{client id}`.
pub(crate) fn wake_channel(client: &str) -> String {
    format!("{WAKE_PREFIX}{client}")
}

/// What every wake channel's name starts with.
pub(crate) const WAKE_PREFIX: &str = "redlock-wake:";

/// What a fence value's key starts with.
pub(super) const FENCE_PREFIX: &str = "redlock-fence:";
/// What a queue's arrival order's key starts with.
pub(super) const QUEUE_PREFIX: &str = "redlock-queue:";
/// What a queue's alive times' key starts with.
pub(super) const ALIVE_PREFIX: &str = "redlock-alive:";

/// The key that keeps `key`'s fence value: `redlock-fence:{key}`.
#[cfg(test)]
pub(crate) fn fence_key(key: &str) -> String {
    Layout::Plain.fence(key)
}

/// How a node lays the client's keys out: as named above (a standalone
/// master, a Sentinel service's), or so that every key of one resource
/// lives in one Redis Cluster hash slot.
///
/// On a cluster node a lock key stays the resource's name, so other
/// Redlock clients still exclude and are excluded. Every key the client
/// derives from a name keeps that name's hash slot: the name's hash part
/// (its `{tag}`, or the whole name) goes in braces first, followed by the
/// name itself when it had a tag of its own. So resource `orders:42`
/// keeps its fence value in `redlock-fence:{orders:42}`, resource
/// `{user1}:a` in `redlock-fence:{user1}{user1}:a`, and slot 0 of the
/// semaphore `jobs` is `redlock-sem:{jobs}#0`. A name without a tag that
/// contains `}` cannot be put in braces ([`Layout::problem`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// The names above, unchanged.
    Plain,
    /// Every resource's keys in the slot of its name (see above).
    Cluster,
}

impl Layout {
    /// The key that keeps the fence value of `key` (a key as this layout
    /// lays it out).
    pub(crate) fn fence(self, key: &str) -> String {
        self.companion(FENCE_PREFIX, key)
    }

    /// The hash slot every key about the user's `name` lives in (cluster).
    pub(crate) fn slot(name: &str) -> u16 {
        hash_slot::slot(name.as_bytes())
    }

    /// Why a user's name cannot be laid out on a cluster node: one without
    /// a hash tag that contains `}`. The hash tag's text would end at it.
    pub(crate) fn problem(name: &str) -> Option<String> {
        let tagged = hash_slot::tag(name.as_bytes()).is_some();
        (!tagged && name.contains('}')).then(|| {
            format!(
                "the name {name:?} contains '}}' without a hash tag before it, so a cluster node \
                 cannot keep its keys in one hash slot; remove the '}}', or give the name a tag \
                 such as {{{}}}",
                name.replace('}', "")
            )
        })
    }

    /// `prefix`, the user's `name` (braced on a cluster), `suffix`.
    pub(super) fn named(self, prefix: &str, name: &str, suffix: &str) -> String {
        match self {
            Layout::Plain => format!("{prefix}{name}{suffix}"),
            Layout::Cluster => format!("{prefix}{}{suffix}", braced(name)),
        }
    }

    /// A key that belongs to `owner`, a key as this layout lays it out:
    /// `prefix` and `owner` (braced on a cluster).
    pub(super) fn companion(self, prefix: &str, owner: &str) -> String {
        match self {
            Layout::Plain => format!("{prefix}{owner}"),
            Layout::Cluster => format!("{prefix}{}", braced(owner)),
        }
    }
}

/// `name`'s hash part in braces, then `name` itself if it has a tag (so
/// that no two names give one text): the text keeps `name`'s hash slot.
fn braced(name: &str) -> String {
    match hash_slot::tag(name.as_bytes()) {
        Some(_) => format!(
            "{{{}}}{name}",
            String::from_utf8_lossy(hash_slot::hash_part(name.as_bytes()))
        ),
        None => format!("{{{name}}}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_whose_braces_would_move_its_slot_is_refused() {
        for name in ["a}b", "}", "x{}y", "{}", "a{}b{c}"] {
            let problem = Layout::problem(name).expect(name);
            assert!(problem.contains("hash tag"), "{problem}");
        }
    }
}
