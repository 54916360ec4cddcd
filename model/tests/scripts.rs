//! The model's node against the scripts' own tables: every case that
//! `tests/scripts/main.rs` runs against a real `redis-server` for the scripts
//! the model speaks for (`release`, `acquire_fenced`, `slot_acquire`,
//! `slot_acquire_fenced`, `read_acquire`, `read_release`, `write_acquire`,
//! and the gate node's `gate_acquire`, `gate_release` and `leave`) runs
//! here against [`Node::serve`], and must agree with the table: the same
//! reply, the same answers to the case's follow-up commands, and the same
//! waiter woken. So a
//! script and the model cannot drift apart without a table, and so a real
//! node, saying which.
//!
//! A case the model has no words for (a key of another type, the waiting
//! writer's mark, ...) cannot be put to it: [`agree`] says why. Such a case
//! must be named in [`OUTSIDE`], and every case named there must be one
//! that cannot be put, or that disagrees.

#[path = "../../src/transport/protocol/scripts/mod.rs"]
#[allow(dead_code)]
mod scripts;

#[path = "../../tests/script_tables/mod.rs"]
mod script_tables;

use std::collections::BTreeMap;

use redlock_model::{Broken, Entry, Node, Reply, Request, Token};
use script_tables::{Case, TABLES, matches, timed};

/// How many cases agree: a case added to (or removed from) the tables the
/// model speaks for changes it, and this with it.
const AGREEING: usize = 32;

/// The node's time, in ms, while a case runs.
const NOW: i64 = 1_000_000_000;

/// A key set without `PX` never expires.
const NEVER: u64 = u64::MAX;

const WRONG_TYPE: &str = "the model's keys are the crate's own: no key of another type";
const SEVERAL: &str = "the model's locks are of one resource (no lock_all)";
const NOT_A_FENCE: &str = "the model's fence values are integers the crate wrote";
const MARK: &str = "the model leaves out the waiting writer's mark";
const FENCED_WRITER: &str = "the model's writers are not fenced";
const NOT_WAITING: &str = "the model's callers of the gate node all wait";
const GRACE: &str = "the model leaves out the grant's grace note";
const GATED_SEMAPHORE: &str = "the model's queue is a lock's";
const BACK_FIRST: &str = "the model's waiter whose round failed queues again at the back";

/// How long a place in the queue counts (lib_queue.lua's `ALIVE`).
const ALIVE_MS: u64 = 2000;
/// The one listed case that the model can be put, and disagrees with.
const STALE_NOT_ERROR: &str =
    "2^53 is a number to the model, which answers stale where the script refuses it";

/// A queue's scores as node times: the model keeps the queue as an order
/// only, and reads no score but a plain number (its refusal says "a
/// score").
const SCORES: &str = "a score";

/// Cases the model does not speak to, by script and case, and why.
const OUTSIDE: &[(&str, &str, &str)] = &[
    (
        "gate_acquire",
        "held, the last arrival not before now: a newcomer queued behind it",
        SCORES,
    ),
    ("gate_acquire", "a waiter that asks again keeps its arrival", SCORES),
    (
        "release",
        "a key of another type is an error, and kept",
        WRONG_TYPE,
    ),
    (
        "acquire_fenced",
        "held by a key of another type: -1",
        WRONG_TYPE,
    ),
    (
        "acquire_fenced",
        "two keys, the larger fence value answered, nothing set",
        SEVERAL,
    ),
    (
        "acquire_fenced",
        "two keys, the second held: its holder, the first not left set",
        SEVERAL,
    ),
    (
        "acquire_fenced",
        "a fence key holding no integer is an error, nothing set",
        NOT_A_FENCE,
    ),
    (
        "acquire_fenced",
        "a fence value of 2^53 is no fence value",
        STALE_NOT_ERROR,
    ),
    ("slot_acquire", "a key of another type: 0", WRONG_TYPE),
    (
        "slot_acquire_fenced",
        "a fence key holding no integer: the error itself",
        NOT_A_FENCE,
    ),
    ("read_acquire", "a writer waits (the mark): 0", MARK),
    ("write_acquire", "free: set, any mark removed", MARK),
    (
        "write_acquire",
        "readers hold: 0, the writer marks that it waits",
        MARK,
    ),
    (
        "write_acquire",
        "a mark already there keeps the first writer's value",
        MARK,
    ),
    ("write_acquire", "readers hold, mark 0: no mark", MARK),
    (
        "write_acquire",
        "fenced, free: set, the proposed token stored",
        FENCED_WRITER,
    ),
    ("write_acquire", "fenced, readers hold: -1", FENCED_WRITER),
    (
        "write_acquire",
        "fenced, a writer key of another type: -1",
        FENCED_WRITER,
    ),
    (
        "write_acquire",
        "fenced, stale: {v}, nothing set",
        FENCED_WRITER,
    ),
    (
        "gate_acquire",
        "free, nobody queued, not waiting: set, the grant noted",
        NOT_WAITING,
    ),
    (
        "gate_acquire",
        "held, not waiting: 0, not queued",
        NOT_WAITING,
    ),
    (
        "gate_acquire",
        "held while a grant is the queue's: 2 (others first)",
        GRACE,
    ),
    (
        "gate_acquire",
        "a slot free but another is the head: 2, the head woken again",
        GATED_SEMAPHORE,
    ),
    (
        "gate_acquire",
        "the head's semaphore grant, a slot left: the next woken",
        GATED_SEMAPHORE,
    ),
    (
        "gate_acquire",
        "several lock keys, one held: 0, none set",
        SEVERAL,
    ),
    (
        "gate_acquire",
        "several lock keys, all free: all set",
        SEVERAL,
    ),
    (
        "gate_acquire",
        "the head's semaphore grant, no slot left: nobody woken",
        GATED_SEMAPHORE,
    ),
    (
        "gate_release",
        "a granted head whose round failed goes back first, unwoken",
        BACK_FIRST,
    ),
    (
        "gate_release",
        "a granted head that was the only waiter goes back, though no queue is left",
        BACK_FIRST,
    ),
    (
        "gate_release",
        "ours, no queue but a grant's note: 1, nobody woken, the note kept",
        GRACE,
    ),
    (
        "gate_release",
        "several keys: 0 unless every one was ours",
        SEVERAL,
    ),
    (
        "leave",
        "a semaphore with one slot free: the next head woken",
        GATED_SEMAPHORE,
    ),
];

/// Where a script's keys and arguments sit, and how its reply reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Release,
    AcquireFenced,
    SlotAcquire,
    SlotAcquireFenced,
    ReadAcquire,
    ReadRelease,
    WriteAcquire,
    GateAcquire,
    GateRelease,
    Leave,
}

impl Shape {
    fn of(script: &str) -> Option<Shape> {
        Some(match script {
            "release" => Shape::Release,
            "acquire_fenced" => Shape::AcquireFenced,
            "slot_acquire" => Shape::SlotAcquire,
            "slot_acquire_fenced" => Shape::SlotAcquireFenced,
            "read_acquire" => Shape::ReadAcquire,
            "read_release" => Shape::ReadRelease,
            "write_acquire" => Shape::WriteAcquire,
            "gate_acquire" => Shape::GateAcquire,
            "gate_release" => Shape::GateRelease,
            "leave" => Shape::Leave,
            _ => return None,
        })
    }

    /// A semaphore's slot keys, after the slot (and its fence) in KEYS.
    fn slots<'a>(self, keys: &'a [&'static str]) -> &'a [&'static str] {
        match self {
            Shape::SlotAcquire => &keys[1..],
            Shape::SlotAcquireFenced => &keys[2..],
            _ => &[],
        }
    }
}

/// What a case's key names are to the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// A lock key (a semaphore's slot, a writer's key).
    Key(u8),
    /// A slot's fence value.
    Fence(u8),
    /// The readers' set.
    Readers,
    /// The gate node's queue (members by arrival).
    Queue,
    /// The gate node's alive times (members by until when they count).
    Alive,
}

/// One case's world: its key names' roles and its tokens by name.
struct World {
    roles: BTreeMap<&'static str, Role>,
    /// The waiting writer's mark, which the model leaves out.
    mark: Option<&'static str>,
    tokens: Vec<String>,
    /// The queue's members by score, as given.
    arrivals: Vec<(i64, u8)>,
}

impl World {
    fn new(shape: Shape, case: &Case) -> World {
        let k = case.keys;
        let mut roles = BTreeMap::new();
        let mut mark = None;
        match shape {
            Shape::Release => {
                roles.insert(k[0], Role::Key(0));
            }
            Shape::AcquireFenced => {
                roles.insert(k[0], Role::Key(0));
                roles.insert(k[1], Role::Fence(0));
            }
            Shape::SlotAcquire | Shape::SlotAcquireFenced => {
                for (i, name) in shape.slots(k).iter().enumerate() {
                    let slot = u8::try_from(i).expect("a few slots");
                    roles.insert(*name, Role::Key(slot));
                }
                if shape == Shape::SlotAcquireFenced
                    && let Some(Role::Key(slot)) = roles.get(k[0]).copied()
                {
                    roles.insert(k[1], Role::Fence(slot));
                }
            }
            Shape::ReadAcquire | Shape::WriteAcquire => {
                roles.insert(k[0], Role::Key(0));
                roles.insert(k[1], Role::Readers);
                mark = Some(k[2]);
            }
            Shape::ReadRelease => {
                roles.insert(k[0], Role::Readers);
            }
            Shape::GateAcquire | Shape::GateRelease | Shape::Leave => {
                roles.insert(k[0], Role::Key(0));
                roles.insert(k[k.len() - 2], Role::Queue);
                roles.insert(k[k.len() - 1], Role::Alive);
            }
        }
        World {
            roles,
            mark,
            tokens: Vec::new(),
            arrivals: Vec::new(),
        }
    }

    /// What `key` is to the model: not the mark, nor a key the script's
    /// call does not name.
    fn role(&self, key: &str) -> Result<Role, String> {
        match self.roles.get(key) {
            Some(role) => Ok(*role),
            None if self.mark == Some(key) => Err(MARK.to_owned()),
            None => Err(format!("{key} is none of the call's keys")),
        }
    }

    /// The slot `key` is.
    fn slot(&self, key: &str) -> Result<u8, String> {
        match self.role(key)? {
            Role::Key(slot) => Ok(slot),
            other => Err(format!("{key} is no slot: {other:?}")),
        }
    }

    /// The model's token for the table's token `name`.
    fn token(&mut self, name: &str) -> Token {
        let at = match self.tokens.iter().position(|t| t == name) {
            Some(at) => at,
            None => {
                self.tokens.push(name.to_owned());
                self.tokens.len() - 1
            }
        };
        Token {
            client: u8::try_from(at).expect("a few tokens"),
            attempt: 0,
        }
    }

    fn name(&self, token: Token) -> &str {
        &self.tokens[usize::from(token.client)]
    }
}

/// A queue member, `c{id}:{ticket}`, as the model's (its client id).
fn member(word: &str) -> Result<u8, String> {
    match word {
        "" => Err(NOT_WAITING.to_owned()),
        "granted" => Err(GRACE.to_owned()),
        _ => word
            .strip_prefix('c')
            .and_then(|rest| rest.split(':').next())
            .and_then(|id| id.parse().ok())
            .ok_or_else(|| format!("{word} is no member")),
    }
}

/// The table's name for the model's member `m`.
fn member_name(m: u8) -> String {
    format!("c{m}:{m}")
}

fn number(word: &str) -> Result<u64, String> {
    timed(word, NOW)
        .parse()
        .map_err(|_| format!("{word}: {NOT_A_FENCE}"))
}

fn at(ms: u64) -> u64 {
    u64::try_from(NOW).expect("positive") + ms
}

/// Runs a `given` command on the model's node.
fn given(node: &mut Node, world: &mut World, line: &str) -> Result<(), String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["SET", key, value, rest @ ..] => {
            let expires = match rest {
                [] => NEVER,
                ["PX", ms] => at(number(ms)?),
                _ => return Err(format!("{line}: not a SET the model knows")),
            };
            match world.role(key)? {
                Role::Key(slot) => {
                    let token = world.token(value);
                    node.keys.insert(slot, Entry { token, expires });
                }
                Role::Fence(slot) => {
                    node.fences.insert(slot, (number(value)?, expires));
                }
                Role::Readers | Role::Queue | Role::Alive => {
                    return Err(format!("{line}: {WRONG_TYPE}"));
                }
            }
        }
        ["ZADD", key, pairs @ ..] if world.role(key)? == Role::Readers => {
            for pair in pairs.chunks(2) {
                let token = world.token(pair[1]);
                node.readers.insert(token, number(pair[0])?);
            }
        }
        ["ZADD", key, pairs @ ..] if world.role(key)? == Role::Queue => {
            for pair in pairs.chunks(2) {
                let score = pair[0].parse().map_err(|_| format!("{line}: a score"))?;
                world.arrivals.push((score, member(pair[1])?));
            }
            world.arrivals.sort();
            node.queue = world.arrivals.iter().map(|(_, m)| *m).collect();
        }
        ["ZADD", key, pairs @ ..] if world.role(key)? == Role::Alive => {
            for pair in pairs.chunks(2) {
                node.alive.insert(member(pair[1])?, number(pair[0])?);
            }
        }
        ["RPUSH", ..] => return Err(format!("{line}: {WRONG_TYPE}")),
        _ => return Err(format!("{line}: not a command the model knows")),
    }
    Ok(())
}

/// Whether the call is one the model makes: of one resource, and no
/// fenced writer.
fn fits(shape: Shape, case: &Case) -> Result<(), String> {
    match shape {
        Shape::AcquireFenced | Shape::SlotAcquireFenced if case.argv[2] != "1" => {
            Err(SEVERAL.to_owned())
        }
        Shape::WriteAcquire if case.argv.len() > 3 => Err(FENCED_WRITER.to_owned()),
        Shape::GateAcquire if case.argv[2] != "0" => Err(GATED_SEMAPHORE.to_owned()),
        Shape::Leave if case.keys.len() != 3 => Err(GATED_SEMAPHORE.to_owned()),
        Shape::GateAcquire | Shape::GateRelease if case.keys.len() != 3 => Err(SEVERAL.to_owned()),
        _ => Ok(()),
    }
}

/// The case's call as the model's request, with the fence idle time.
fn request(shape: Shape, case: &Case, world: &mut World) -> Result<(Request, u64), String> {
    let argv = case.argv;
    let token = world.token(argv[0]);
    let ttl = || number(argv[1]);
    let acquire = |slot, ttl, fence| Request::Acquire {
        slot,
        token,
        ttl,
        fence,
    };
    Ok(match shape {
        Shape::Release => (Request::Release { slot: 0, token }, 0),
        Shape::AcquireFenced => {
            let fence = Some(number(argv[3])?);
            (acquire(0, ttl()?, fence), number(argv[4])?)
        }
        Shape::SlotAcquire => (acquire(world.slot(case.keys[0])?, ttl()?, None), 0),
        Shape::SlotAcquireFenced => {
            let fence = Some(number(argv[3])?);
            let slot = world.slot(case.keys[0])?;
            (acquire(slot, ttl()?, fence), number(argv[4])?)
        }
        Shape::ReadAcquire => (Request::ReadAcquire { token, ttl: ttl()? }, 0),
        Shape::ReadRelease => (Request::ReadRelease { token }, 0),
        Shape::WriteAcquire => (Request::WriteAcquire { token, ttl: ttl()? }, 0),
        Shape::GateAcquire => {
            let ttl = ttl()?;
            let member = member(argv[4])?;
            (Request::GateAcquire { token, ttl, member }, 0)
        }
        Shape::GateRelease => {
            // A member given: a granted head put back first.
            if !argv[1].is_empty() {
                return Err(BACK_FIRST.to_owned());
            }
            let lease = argv[2] == "1";
            (Request::GateRelease { token, lease }, 0)
        }
        Shape::Leave => (
            Request::Leave {
                member: member(argv[0])?,
            },
            0,
        ),
    })
}

/// The model's reply as the table writes the script's.
fn reply(
    shape: Shape,
    (answer, woken): (Reply, Option<u8>),
    node: &Node,
    world: &World,
    case: &Case,
) -> String {
    let verdict = match answer {
        // gate_release.lua: 2 when a waiter was woken after our release.
        Reply::Released(true) if shape == Shape::GateRelease && woken.is_some() => "2".to_owned(),
        Reply::Granted => "1".to_owned(),
        Reply::Held(token) => format!("'{}'", world.name(token)),
        Reply::Stale(value) => format!("[{value}]"),
        Reply::Released(done) => u8::from(done).to_string(),
        Reply::Refused => "0".to_owned(),
        Reply::Behind => "2".to_owned(),
    };
    let all = shape.slots(case.keys);
    if all.is_empty() {
        return verdict;
    }
    // The slots held on the node after the call, one digit each (the
    // model's reply carries no such report: this checks the node's keys).
    let held: String = all
        .iter()
        .map(|key| match world.slot(key) {
            Ok(slot) if node.keys.contains_key(&slot) => '1',
            _ => '0',
        })
        .collect();
    format!("[{verdict},'{held}']")
}

/// A follow-up command's answer on the model's node, as the table writes it.
fn then(node: &Node, world: &mut World, line: &str) -> Result<String, String> {
    let now = at(0);
    let live = |expires: u64| expires > now;
    let words: Vec<&str> = line.split_whitespace().collect();
    Ok(match words.as_slice() {
        ["GET", key] => match world.role(key)? {
            Role::Key(slot) => match node.keys.get(&slot).filter(|e| live(e.expires)) {
                Some(entry) => format!("'{}'", world.name(entry.token)),
                None => "nil".to_owned(),
            },
            Role::Fence(slot) => match node.fences.get(&slot).filter(|(_, e)| live(*e)) {
                Some((value, _)) => format!("'{value}'"),
                None => "nil".to_owned(),
            },
            Role::Readers | Role::Queue | Role::Alive => {
                return Err(format!("{line}: {WRONG_TYPE}"));
            }
        },
        ["EXISTS", keys @ ..] => {
            let mut count = 0;
            for key in keys {
                let exists = match world.role(key)? {
                    Role::Key(slot) => node.keys.get(&slot).is_some_and(|e| live(e.expires)),
                    Role::Fence(slot) => node.fences.get(&slot).is_some_and(|(_, e)| live(*e)),
                    Role::Readers => node.readers.values().any(|&until| live(until)),
                    Role::Queue => !node.queue.is_empty(),
                    Role::Alive => !node.alive.is_empty(),
                };
                count += usize::from(exists);
            }
            count.to_string()
        }
        ["PTTL", key] => {
            let expires = match world.role(key)? {
                Role::Key(slot) => node.keys.get(&slot).map(|e| e.expires),
                Role::Fence(slot) => node.fences.get(&slot).map(|(_, e)| *e),
                // The model keeps no time for the set itself: this assumes
                // the script's rule that it lives at least as long as its
                // last reader, and checks that reader's time.
                Role::Readers => node.readers.values().copied().max(),
                // Likewise the queue's keys live at least as long as its
                // last member's alive time.
                Role::Queue | Role::Alive => node.alive.values().copied().max(),
            };
            match expires.filter(|&e| live(e)) {
                None => "-2".to_owned(),
                Some(NEVER) => "-1".to_owned(),
                Some(e) => (e - now).to_string(),
            }
        }
        ["ZSCORE", key, member] if world.role(key)? == Role::Readers => {
            let token = world.token(member);
            match node.readers.get(&token) {
                Some(until) => format!("'{until}'"),
                None => "nil".to_owned(),
            }
        }
        ["ZRANGE", key, "0", "-1"] if world.role(key)? == Role::Queue => {
            let names: Vec<String> = node
                .queue
                .iter()
                .map(|m| format!("'{}'", member_name(*m)))
                .collect();
            format!("[{}]", names.join(","))
        }
        ["ZCARD", key] if world.role(key)? == Role::Queue => node.queue.len().to_string(),
        ["ZSCORE", key, m] if world.role(key)? == Role::Alive => {
            match node.alive.get(&member(m)?) {
                Some(until) => format!("'{until}'"),
                None => "nil".to_owned(),
            }
        }
        ["ZRANGE", key, "0", "-1"] if world.role(key)? == Role::Readers => {
            let mut members: Vec<(u64, String)> = node
                .readers
                .iter()
                .map(|(token, until)| (*until, format!("'{}'", world.name(*token))))
                .collect();
            members.sort();
            let names: Vec<String> = members.into_iter().map(|(_, name)| name).collect();
            format!("[{}]", names.join(","))
        }
        _ => return Err(format!("{line}: not a command the model knows")),
    })
}

/// Why `case` of `script` is listed outside the model, if it is.
fn outside(script: &str, case: &Case) -> Option<&'static str> {
    OUTSIDE
        .iter()
        .find(|(s, what, _)| *s == script && *what == case.what)
        .map(|(_, _, why)| *why)
}

/// Runs one case on the model's node: what disagrees with the table, or
/// why the case cannot be put to the model.
fn agree(shape: Shape, case: &Case) -> Result<Vec<String>, String> {
    fits(shape, case)?;
    let mut world = World::new(shape, case);
    let mut node = Node::default();
    for line in case.given {
        given(&mut node, &mut world, line)?;
    }
    let (request, fence_idle) = request(shape, case, &mut world)?;
    let served = node.serve(request, at(0), fence_idle, ALIVE_MS, Broken::default());
    let mut wrong = Vec::new();
    let got = reply(shape, served, &node, &world, case);
    if !matches(&got, case.reply, NOW) {
        wrong.push(format!("{}: replied {got}, not {}", case.what, case.reply));
    }
    let woken: Vec<String> = served.1.into_iter().map(member_name).collect();
    if woken != case.woken {
        wrong.push(format!(
            "{}: woke {woken:?}, not {:?}",
            case.what, case.woken
        ));
    }
    for (line, want) in case.then {
        let got = then(&node, &mut world, line)?;
        if !matches(&got, want, NOW) {
            wrong.push(format!("{}: {line} gave {got}, not {want}", case.what));
        }
    }
    Ok(wrong)
}

/// Every case of the tables the model speaks for, with its script's name.
fn cases() -> impl Iterator<Item = (&'static str, Shape, &'static Case)> {
    TABLES.iter().flat_map(|(script, table)| {
        let shape = Shape::of(script.name());
        table
            .iter()
            .filter_map(move |case| Some((script.name(), shape?, case)))
    })
}

#[test]
fn the_models_node_agrees_with_every_script_table_it_speaks_for() {
    let mut wrong = Vec::new();
    let mut agreed = 0;
    for (script, shape, case) in cases() {
        match (agree(shape, case), outside(script, case)) {
            (_, Some(_)) => {}
            (Ok(disagreements), None) => {
                agreed += usize::from(disagreements.is_empty());
                wrong.extend(disagreements.into_iter().map(|w| format!("{script}: {w}")));
            }
            (Err(why), None) => wrong.push(format!(
                "{script}: \"{}\" cannot be put to the model ({why}), and is not listed outside",
                case.what
            )),
        }
    }
    eprintln!(
        "{agreed} cases agree with the model's node; {} are outside its words",
        OUTSIDE.len()
    );
    assert!(
        wrong.is_empty(),
        "the model's node disagrees:\n{}",
        wrong.join("\n")
    );
    assert_eq!(agreed, AGREEING, "the tables changed: count again");
}

/// Every case named outside the model is one of the tables' (the list
/// cannot keep a case that was renamed or removed), and none the model has
/// words for hides in it: each cannot be put to the model for the reason
/// given, or disagrees (the 2^53 fence value).
#[test]
fn the_cases_outside_the_model_are_real_and_really_outside() {
    for (script, what, why) in OUTSIDE {
        let (_, shape, case) = cases()
            .find(|(s, _, c)| s == script && c.what == *what)
            .unwrap_or_else(|| panic!("{script} has no case \"{what}\""));
        match agree(shape, case) {
            Ok(wrong) => assert!(
                *why == STALE_NOT_ERROR && wrong.iter().any(|w| w.contains("replied [")),
                "{script}: \"{what}\" is listed as outside the model ({why}), but it can be \
                 put, with these disagreements: {wrong:?}"
            ),
            Err(reason) => assert!(
                reason.contains(why),
                "{script}: \"{what}\" is listed for \"{why}\", but cannot be put for \"{reason}\""
            ),
        }
    }
}
