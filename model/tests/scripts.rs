//! The model's node against the scripts' own tables: every case that
//! `tests/scripts.rs` runs against a real `redis-server` for the scripts
//! the model speaks for (`release`, `acquire_fenced`, `slot_acquire`,
//! `slot_acquire_fenced`, `read_acquire`, `read_release`, `write_acquire`)
//! runs here against [`Node::run`], and must agree with the table: the same
//! reply, and the same answers to the case's follow-up commands. So a
//! script and the model cannot drift apart without a table, and so a real
//! node, saying which.
//!
//! The cases the model has no words for are named in [`OUTSIDE`], each with
//! why; the list is checked too (every name in it is a case, and no case
//! outside the model's words is missing from it). A case's commands on the
//! reader-writer lock's "writer waits" mark are skipped: the model leaves
//! the mark out (it only turns readers away, `node.rs`).

#[path = "../../src/transport/protocol/scripts/mod.rs"]
#[allow(dead_code)]
mod scripts;

#[path = "../../tests/script_tables/mod.rs"]
mod script_tables;

use std::collections::BTreeMap;

use redlock_model::{Broken, Entry, Node, Reply, Request, Token};
use script_tables::{Case, TABLES, matches, timed};

/// The node's time, in ms, while a case runs.
const NOW: i64 = 1_000_000_000;

/// A key set without `PX` never expires.
const NEVER: u64 = u64::MAX;

/// Cases the model does not speak to, by script and case, and why.
const OUTSIDE: &[(&str, &str, &str)] = &[
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
        "a fence key holding no integer is an error, nothing set",
        NOT_A_FENCE,
    ),
    (
        "acquire_fenced",
        "a fence value of 2^53 is no fence value",
        NOT_A_FENCE,
    ),
    ("slot_acquire", "a key of another type: 0", WRONG_TYPE),
    (
        "slot_acquire_fenced",
        "a fence key holding no integer: the error itself",
        NOT_A_FENCE,
    ),
    ("read_acquire", "a writer waits (the mark): 0", MARK),
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
];

const WRONG_TYPE: &str = "the model's keys are the crate's own: no key of another type";
const SEVERAL: &str = "the model's locks are of one resource (no lock_all)";
const NOT_A_FENCE: &str = "the model's fence values are integers the crate wrote";
const MARK: &str = "the model leaves out the waiting writer's mark";
const FENCED_WRITER: &str = "the model's writers are not fenced";

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
            _ => return None,
        })
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
    /// The waiting writer's mark (not modelled).
    Mark,
}

/// One case's world: its key names' roles and its tokens by name.
struct World {
    roles: BTreeMap<&'static str, Role>,
    tokens: Vec<String>,
}

impl World {
    fn new(shape: Shape, case: &Case) -> World {
        let k = case.keys;
        let mut roles = BTreeMap::new();
        match shape {
            Shape::Release => {
                roles.insert(k[0], Role::Key(0));
            }
            Shape::AcquireFenced => {
                roles.insert(k[0], Role::Key(0));
                roles.insert(k[1], Role::Fence(0));
            }
            Shape::SlotAcquire | Shape::SlotAcquireFenced => {
                let all = if shape == Shape::SlotAcquire {
                    &k[1..]
                } else {
                    &k[2..]
                };
                for (i, name) in all.iter().enumerate() {
                    let slot = u8::try_from(i).expect("a few slots");
                    roles.insert(*name, Role::Key(slot));
                }
                if shape == Shape::SlotAcquireFenced {
                    roles.insert(k[1], Role::Fence(slot_of(&roles, k[0])));
                }
            }
            Shape::ReadAcquire | Shape::WriteAcquire => {
                roles.insert(k[0], Role::Key(0));
                roles.insert(k[1], Role::Readers);
                roles.insert(k[2], Role::Mark);
            }
            Shape::ReadRelease => {
                roles.insert(k[0], Role::Readers);
            }
        }
        World {
            roles,
            tokens: Vec::new(),
        }
    }

    fn role(&self, key: &str) -> Role {
        *self.roles.get(key).unwrap_or_else(|| {
            panic!("the table names key {key}, which the script's call does not")
        })
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

fn slot_of(roles: &BTreeMap<&'static str, Role>, key: &str) -> u8 {
    match roles.get(key) {
        Some(Role::Key(slot)) => *slot,
        other => panic!("{key} is no slot: {other:?}"),
    }
}

fn number(word: &str) -> u64 {
    timed(word, NOW)
        .parse()
        .unwrap_or_else(|_| panic!("{word} is no number"))
}

fn at(ms: u64) -> u64 {
    u64::try_from(NOW).expect("positive") + ms
}

/// Runs a `given` command on the model's node.
fn given(node: &mut Node, world: &mut World, line: &str) {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["SET", key, value, rest @ ..] => {
            let expires = match rest {
                [] => NEVER,
                ["PX", ms] => at(number(ms)),
                _ => panic!("{line}: not a SET the model knows"),
            };
            match world.role(key) {
                Role::Key(slot) => {
                    let token = world.token(value);
                    node.keys.insert(slot, Entry { token, expires });
                }
                Role::Fence(slot) => {
                    node.fences.insert(slot, (number(value), expires));
                }
                Role::Mark => {}
                Role::Readers => panic!("{line}: the readers' set is no string"),
            }
        }
        ["ZADD", key, pairs @ ..] => {
            assert_eq!(world.role(key), Role::Readers, "{line}");
            for pair in pairs.chunks(2) {
                let token = world.token(pair[1]);
                node.readers.insert(token, number(pair[0]));
            }
        }
        _ => panic!("{line}: not a command the model knows"),
    }
}

/// The case's call as the model's request, with the fence idle time.
fn request(shape: Shape, case: &Case, world: &mut World) -> (Request, u64) {
    let argv = case.argv;
    let token = world.token(argv[0]);
    let ttl = || number(argv[1]);
    match shape {
        Shape::Release => (Request::Release { slot: 0, token }, 0),
        Shape::AcquireFenced => {
            assert_eq!(argv[2], "1", "{}: one resource", case.what);
            let fence = Some(number(argv[3]));
            let (slot, ttl) = (0, ttl());
            (
                Request::Acquire {
                    slot,
                    token,
                    ttl,
                    fence,
                },
                number(argv[4]),
            )
        }
        Shape::SlotAcquire => {
            let slot = slot_of(&world.roles, case.keys[0]);
            let ttl = ttl();
            (
                Request::Acquire {
                    slot,
                    token,
                    ttl,
                    fence: None,
                },
                0,
            )
        }
        Shape::SlotAcquireFenced => {
            assert_eq!(argv[2], "1", "{}: one resource", case.what);
            let slot = slot_of(&world.roles, case.keys[0]);
            let fence = Some(number(argv[3]));
            let ttl = ttl();
            (
                Request::Acquire {
                    slot,
                    token,
                    ttl,
                    fence,
                },
                number(argv[4]),
            )
        }
        Shape::ReadAcquire => (Request::ReadAcquire { token, ttl: ttl() }, 0),
        Shape::ReadRelease => (Request::ReadRelease { token }, 0),
        Shape::WriteAcquire => {
            assert!(
                argv.len() == 3,
                "{}: the model's writers are not fenced",
                case.what
            );
            (Request::WriteAcquire { token, ttl: ttl() }, 0)
        }
    }
}

/// The model's reply as the table writes the script's.
fn reply(shape: Shape, answer: Reply, node: &Node, world: &World, case: &Case) -> String {
    let verdict = match answer {
        Reply::Granted => "1".to_owned(),
        Reply::Held(token) => format!("'{}'", world.name(token)),
        Reply::Stale(value) => format!("[{value}]"),
        Reply::Released(done) => u8::from(done).to_string(),
        Reply::Refused => "0".to_owned(),
    };
    match shape {
        // The slots held on the node after the call, one digit each.
        Shape::SlotAcquire | Shape::SlotAcquireFenced => {
            let all = if shape == Shape::SlotAcquire {
                &case.keys[1..]
            } else {
                &case.keys[2..]
            };
            let held: String = all
                .iter()
                .map(|key| match world.role(key) {
                    Role::Key(slot) if node.keys.contains_key(&slot) => '1',
                    _ => '0',
                })
                .collect();
            format!("[{verdict},'{held}']")
        }
        _ => verdict,
    }
}

/// A follow-up command's answer on the model's node, as the table writes
/// it (`None`: about the mark, skipped).
fn then(node: &Node, world: &mut World, line: &str) -> Option<String> {
    let now = at(0);
    let live = |expires: u64| expires > now;
    let words: Vec<&str> = line.split_whitespace().collect();
    Some(match words.as_slice() {
        ["GET", key] => match world.role(key) {
            Role::Key(slot) => match node.keys.get(&slot).filter(|e| live(e.expires)) {
                Some(entry) => format!("'{}'", world.name(entry.token)),
                None => "nil".to_owned(),
            },
            Role::Fence(slot) => match node.fences.get(&slot).filter(|(_, e)| live(*e)) {
                Some((value, _)) => format!("'{value}'"),
                None => "nil".to_owned(),
            },
            Role::Mark => return None,
            Role::Readers => panic!("{line}: the readers' set is no string"),
        },
        ["EXISTS", keys @ ..] => {
            if keys.iter().any(|k| world.role(k) == Role::Mark) {
                return None;
            }
            let count = keys
                .iter()
                .filter(|key| match world.role(key) {
                    Role::Key(slot) => node.keys.get(&slot).is_some_and(|e| live(e.expires)),
                    Role::Fence(slot) => node.fences.get(&slot).is_some_and(|(_, e)| live(*e)),
                    Role::Readers => node.readers.values().any(|&until| live(until)),
                    Role::Mark => false,
                })
                .count();
            count.to_string()
        }
        ["PTTL", key] => {
            let expires = match world.role(key) {
                Role::Key(slot) => node.keys.get(&slot).map(|e| e.expires),
                Role::Fence(slot) => node.fences.get(&slot).map(|(_, e)| *e),
                // The set lives as long as its last reader.
                Role::Readers => node.readers.values().copied().max(),
                Role::Mark => return None,
            };
            match expires.filter(|&e| live(e)) {
                None => "-2".to_owned(),
                Some(NEVER) => "-1".to_owned(),
                Some(e) => (e - now).to_string(),
            }
        }
        ["ZSCORE", key, member] => {
            assert_eq!(world.role(key), Role::Readers, "{line}");
            let token = world.token(member);
            match node.readers.get(&token) {
                Some(until) => format!("'{until}'"),
                None => "nil".to_owned(),
            }
        }
        ["ZRANGE", key, "0", "-1"] => {
            assert_eq!(world.role(key), Role::Readers, "{line}");
            let mut members: Vec<(u64, String)> = node
                .readers
                .iter()
                .map(|(token, until)| (*until, format!("'{}'", world.name(*token))))
                .collect();
            members.sort();
            let names: Vec<String> = members.into_iter().map(|(_, name)| name).collect();
            format!("[{}]", names.join(","))
        }
        _ => panic!("{line}: not a command the model knows"),
    })
}

/// Why `case` of `script` is outside the model, if it is.
fn outside(script: &str, case: &Case) -> Option<&'static str> {
    OUTSIDE
        .iter()
        .find(|(s, what, _)| *s == script && *what == case.what)
        .map(|(_, _, why)| *why)
}

/// Runs one case on the model's node; what disagrees with the table.
fn agree(shape: Shape, case: &Case) -> Vec<String> {
    let mut world = World::new(shape, case);
    let mut node = Node::default();
    for line in case.given {
        given(&mut node, &mut world, line);
    }
    let (request, fence_idle) = request(shape, case, &mut world);
    let answer = node.run(request, at(0), fence_idle, Broken::default());
    let mut wrong = Vec::new();
    let got = reply(shape, answer, &node, &world, case);
    if !matches(&got, case.reply, NOW) {
        wrong.push(format!("{}: replied {got}, not {}", case.what, case.reply));
    }
    for (line, want) in case.then {
        if let Some(got) = then(&node, &mut world, line)
            && !matches(&got, want, NOW)
        {
            wrong.push(format!("{}: {line} gave {got}, not {want}", case.what));
        }
    }
    wrong
}

#[test]
fn the_models_node_agrees_with_every_script_table_it_speaks_for() {
    let mut wrong = Vec::new();
    let mut agreed = 0;
    let mut out = 0;
    for (script, table) in &TABLES {
        let Some(shape) = Shape::of(script.name()) else {
            continue;
        };
        for case in *table {
            if outside(script.name(), case).is_some() {
                out += 1;
                continue;
            }
            let disagreements = agree(shape, case);
            if disagreements.is_empty() {
                agreed += 1;
            }
            wrong.extend(
                disagreements
                    .into_iter()
                    .map(|w| format!("{}: {w}", script.name())),
            );
        }
    }
    eprintln!("{agreed} cases agree with the model's node; {out} are outside its words");
    assert!(
        wrong.is_empty(),
        "the model's node disagrees:\n{}",
        wrong.join("\n")
    );
    assert!(
        agreed >= 20,
        "only {agreed} cases ran: the tables were not read"
    );
}

/// Every case named outside the model is one of the tables' (the list
/// cannot keep a case that was renamed or removed), and no case the model
/// has words for hides in it: each, run anyway, fails to map or disagrees.
#[test]
fn the_cases_outside_the_model_are_real_and_really_outside() {
    for (script, what, why) in OUTSIDE {
        let (s, table) = TABLES
            .iter()
            .find(|(s, _)| s.name() == *script)
            .unwrap_or_else(|| panic!("no table for {script}"));
        let case = table
            .iter()
            .find(|c| c.what == *what)
            .unwrap_or_else(|| panic!("{script} has no case \"{what}\""));
        let shape = Shape::of(s.name()).expect("a script the model speaks for");
        let ran = std::panic::catch_unwind(|| agree(shape, case));
        assert!(
            !matches!(ran, Ok(ref wrong) if wrong.is_empty()),
            "{script}: \"{what}\" is listed as outside the model ({why}), but it agrees"
        );
    }
}
