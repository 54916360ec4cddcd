//! The house's shape: data flows down (API → core → transport → Redis).
//! Drawn from the source's paths (`use` lines, re-exports, `crate::`,
//! `super::` and a parent's paths into its children), two rules hold:
//!
//! - no circle: no module depends, directly or not, on one that depends on
//!   it;
//! - nothing reaches up: no module names an item of a module above it (its
//!   parent, any ancestor, or the crate root's re-exports). A parent's
//!   `mod.rs` declares and re-exports; what its children share lives in a
//!   sibling leaf module.
//!
//! Test modules, the fake node and comments are left out (a doc link is no
//! dependency). The reader is tested on a small made-up tree, so each rule
//! is known to fire.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module's name (`a::b`, the root is `""`) and its code.
type Source = (String, String);

/// What the reader found: each module's dependencies, and every path that
/// reaches up (module, the ancestor it names, the path).
#[derive(Debug, Default)]
struct House {
    deps: BTreeMap<String, BTreeSet<String>>,
    up: BTreeSet<(String, String, String)>,
}

/// Every `.rs` file under `src/`, as (module name, code).
fn sources() -> Vec<Source> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
        .iter()
        .map(|path| {
            let rel = path.strip_prefix(&src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
                parts.pop();
            }
            (parts.join("::"), std::fs::read_to_string(path).unwrap())
        })
        .collect()
}

/// `a::{b, c::{d, e}}` as the paths `a::b`, `a::c::d`, `a::c::e`.
fn flatten(path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else {
        return vec![path.to_owned()];
    };
    let head = &path[..open];
    let (mut depth, mut start, mut out) = (0, open + 1, Vec::new());
    for (i, c) in path.char_indices().skip(open) {
        match c {
            '{' => depth += 1,
            '}' | ',' if depth == 1 => {
                let piece = path[start..i].trim();
                if !piece.is_empty() {
                    out.extend(flatten(piece).into_iter().map(|p| format!("{head}{p}")));
                }
                start = i + 1;
                if c == '}' {
                    break;
                }
            }
            '}' => depth -= 1,
            _ => {}
        }
    }
    out
}

/// The paths a line of code names, each with the module it starts from
/// (`crate::`, `super::`, `self::` or a child of `module`).
fn paths(
    line: &str,
    module: &str,
    inline: bool,
    modules: &BTreeSet<String>,
) -> Vec<(String, Vec<String>)> {
    let parent = |m: &str| {
        m.rsplit_once("::")
            .map_or(String::new(), |(p, _)| p.to_owned())
    };
    let join = |base: &str, name: &str| {
        if base.is_empty() {
            name.to_owned()
        } else {
            format!("{base}::{name}")
        }
    };
    let mut found = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < line.len() {
        let boundary = i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b':');
        let rest = &line[i..];
        let word_len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if !boundary || word_len == 0 || !rest[word_len..].starts_with("::") {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        }
        // The whole path: words, `::`, and a `{…}` group.
        let mut end = 0;
        let mut depth = 0;
        for (j, c) in rest.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth > 0 => depth -= 1,
                c if c.is_alphanumeric() || c == '_' || c == ':' || c == '*' => {}
                ',' | ' ' if depth > 0 => {}
                _ if depth > 0 => {}
                _ => break,
            }
            end = j + c.len_utf8();
            if depth == 0 && c == '}' {
                break;
            }
        }
        let path = &rest[..end];
        let mut segs: Vec<&str> = path.splitn(2, "::").collect();
        let (first, tail) = (segs.remove(0), segs.pop().unwrap_or(""));
        let mut base = match first {
            "crate" => Some(String::new()),
            // In an inline `mod x { … }`, `super` is the file's module.
            "super" if inline => Some(module.to_owned()),
            "super" => Some(parent(module)),
            "self" => Some(module.to_owned()),
            child if modules.contains(&join(module, child)) => Some(module.to_owned()),
            _ => None,
        };
        let mut tail = if matches!(first, "crate" | "super" | "self") {
            tail.to_owned()
        } else {
            path.to_owned()
        };
        while let (Some(b), Some(rest)) = (&base, tail.strip_prefix("super::")) {
            base = Some(parent(b));
            tail = rest.to_owned();
        }
        if let Some(base) = base {
            for p in flatten(&tail) {
                let segs: Vec<String> = p
                    .split("::")
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty() && s != "*")
                    .collect();
                found.push((base.clone(), segs));
            }
        }
        i += end.max(1);
    }
    found
}

/// The code before a file's inline unit-test module (`mod tests { … }`;
/// a `mod tests;` declaration is code).
fn without_tests(text: &str) -> &str {
    text.split("#[cfg(test)]\nmod tests {").next().unwrap_or("")
}

/// The trimmed lines of `code`, a `use` spread over several lines (as
/// rustfmt writes a long group) joined into one.
fn statements(code: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut open = false;
    for line in code.lines().map(str::trim) {
        if open {
            let last = out.last_mut().expect("an open use");
            last.push(' ');
            last.push_str(line);
        } else {
            out.push(line.to_owned());
        }
        let starts_use = !open
            && line
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub(super) ")
                .trim_start_matches("pub ")
                .starts_with("use ");
        if starts_use || open {
            open = !line.ends_with(';');
        }
    }
    out
}

/// A module's unit tests: its `tests` and everything under it.
fn tests_module(module: &str) -> bool {
    module.split("::").any(|part| part == "tests")
}

/// Test-only modules are not part of the house: the unit tests and the
/// fake node.
fn test_only(module: &str) -> bool {
    tests_module(module) || module.ends_with("fake")
}

/// Reads the house from its sources.
fn read(sources: &[Source]) -> House {
    let modules: BTreeSet<String> = sources.iter().map(|(m, _)| m.clone()).collect();
    let mut house = House::default();
    for (name, text) in sources {
        if test_only(name) {
            continue;
        }
        let code = without_tests(text);
        let mut deps = BTreeSet::new();
        // Inline modules open: (brace depth outside, a test module).
        let (mut depth, mut inline) = (0usize, Vec::<(usize, bool)>::new());
        for line in statements(code) {
            let line = line.as_str();
            let opens = line.strip_suffix('{').and_then(|l| {
                let l = l.trim().trim_start_matches("pub(crate) ");
                l.strip_prefix("mod ")
            });
            let outside = depth;
            depth += line.matches('{').count();
            depth = depth.saturating_sub(line.matches('}').count());
            if let Some(m) = opens {
                inline.push((outside, m.trim().ends_with("tests")));
            }
            while inline.last().is_some_and(|(d, _)| depth <= *d) {
                inline.pop();
            }
            if line.starts_with("//")
                || line.starts_with("#[")
                || inline.iter().any(|(_, test)| *test)
            {
                continue;
            }
            for (base, segs) in paths(line, name, !inline.is_empty(), &modules) {
                // The longest module the path names; else the base itself.
                let mut target = base.clone();
                let mut probe = base.clone();
                for seg in &segs {
                    probe = if probe.is_empty() {
                        seg.clone()
                    } else {
                        format!("{probe}::{seg}")
                    };
                    if modules.contains(&probe) {
                        target = probe.clone();
                    } else {
                        break;
                    }
                }
                if &target == name {
                    continue;
                }
                let above = target.is_empty() || name.starts_with(&format!("{target}::"));
                if above {
                    house
                        .up
                        .insert((name.clone(), target.clone(), segs.join("::")));
                } else {
                    deps.insert(target);
                }
            }
        }
        house.deps.insert(name.clone(), deps);
    }
    house
}

/// A circle through `from`, if any: the path back to it.
fn circle(
    graph: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    at: &str,
    path: &mut Vec<String>,
) -> bool {
    for next in graph.get(at).into_iter().flatten() {
        if next == from {
            path.push(next.clone());
            return true;
        }
        if path.contains(next) {
            continue;
        }
        path.push(next.clone());
        if circle(graph, from, next, path) {
            return true;
        }
        path.pop();
    }
    false
}

fn circles(house: &House) -> Vec<String> {
    let mut found = Vec::new();
    for module in house.deps.keys() {
        let mut path = vec![module.clone()];
        if circle(&house.deps, module, module, &mut path) {
            found.push(path.join(" → "));
        }
    }
    found
}

#[test]
fn no_module_depends_on_one_that_depends_on_it() {
    let house = read(&sources());
    assert!(house.deps.len() > 30, "the source was read: {house:?}");
    assert!(
        house.deps["transport::protocol::codec"].contains("transport::protocol::keys"),
        "dependencies were found: {:?}",
        house.deps["transport::protocol::codec"]
    );
    assert!(
        house.deps["transport"].contains("transport::connect::conn"),
        "a parent's paths into its children were read: {:?}",
        house.deps["transport"]
    );
    assert!(
        house.deps["core"].contains("transport")
            && house.deps["core::acquire"].contains("transport"),
        "a mod.rs past its `mod tests;` line and groups over several lines were read: {:?} {:?}",
        house.deps["core"],
        house.deps["core::acquire"]
    );
    assert_eq!(circles(&house), Vec::<String>::new());
}

#[test]
fn no_module_reaches_up() {
    let house = read(&sources());
    assert!(house.deps.len() > 30, "the source was read: {house:?}");
    assert!(house.up.is_empty(), "paths that reach up: {:#?}", house.up);
}

/// `Core`, the session every clone and guard share, keeps its fields to
/// its own file: it is defined once, in `core/session.rs`, which has no
/// child module, and no field of it is visible outside (the compiler then
/// holds every other file to its methods).
#[test]
fn the_session_keeps_its_fields_to_itself() {
    let sources = sources();
    let defining: Vec<&str> = sources
        .iter()
        .filter(|(_, code)| code.contains("struct Core {"))
        .map(|(module, _)| module.as_str())
        .collect();
    assert_eq!(defining, ["core::session"], "where `Core` is defined");
    let code = &sources
        .iter()
        .find(|(module, _)| module == "core::session")
        .expect("core/session.rs")
        .1;
    assert!(
        !code
            .lines()
            .any(|line| line.trim_start().starts_with("mod ")),
        "core/session.rs has no child module"
    );
    let body = code
        .split_once("struct Core {")
        .and_then(|(_, rest)| rest.split_once("\n}"))
        .expect("the struct's fields")
        .0;
    let fields: Vec<&str> = body
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("//") && !line.starts_with('#'))
        .collect();
    assert!(fields.len() >= 3, "the fields were read: {fields:?}");
    let open: Vec<&&str> = fields.iter().filter(|f| f.starts_with("pub")).collect();
    assert!(
        open.is_empty(),
        "fields visible outside session.rs: {open:?}"
    );
}

/// The reader on a made-up tree: each rule fires on what it forbids.
#[test]
fn the_reader_sees_circles_and_paths_that_reach_up() {
    let tree = |files: &[(&str, &str)]| -> Vec<Source> {
        files
            .iter()
            .map(|(m, c)| ((*m).to_owned(), (*c).to_owned()))
            .collect()
    };
    // A child naming its parent's item, through `super::` and `crate::`.
    let up = read(&tree(&[
        ("", "mod a;\npub use a::Thing;"),
        ("a", "mod b;\npub(crate) struct Shared;"),
        ("a::b", "use super::{Shared, c::Other};\nuse crate::a::c;"),
        (
            "a::c",
            "pub(crate) struct Other;\nfn f() -> crate::Thing { todo!() }",
        ),
    ]));
    assert_eq!(
        up.up
            .iter()
            .map(|(m, t, p)| format!("{m}>{t}:{p}"))
            .collect::<Vec<_>>(),
        ["a::b>a:Shared", "a::c>:Thing"],
    );
    assert!(up.deps["a::b"].contains("a::c"), "{up:?}");
    // A group spread over lines, after a `mod tests;` declaration.
    let spread = read(&tree(&[
        (
            "p",
            "mod q;\n#[cfg(test)]\nmod tests;\npub(crate) struct Hub;",
        ),
        (
            "p::q",
            "#[cfg(test)]\nmod tests;\nuse super::{\n    Hub,\n    r::R,\n};",
        ),
        ("p::r", "pub(crate) struct R;"),
    ]));
    assert_eq!(
        spread
            .up
            .iter()
            .map(|(m, t, p)| format!("{m}>{t}:{p}"))
            .collect::<Vec<_>>(),
        ["p::q>p:Hub"],
    );
    assert!(spread.deps["p::q"].contains("p::r"), "{spread:?}");
    assert!(up.deps[""].contains("a"), "a re-export is a tie: {up:?}");
    // A circle between siblings, one through a group and a parent's
    // re-export into its child.
    let round = read(&tree(&[
        ("x", "mod p;\nmod q;\npub(crate) use q::Q;"),
        ("x::p", "use crate::x::q::{self, Q};"),
        ("x::q", "fn f() { super::p::go() }"),
    ]));
    assert_eq!(circles(&round).len(), 2, "{round:?}");
    assert!(round.deps["x"].contains("x::q"), "{round:?}");
}

/// Every function of `src/` (test modules aside) longer than `most` lines,
/// from its `fn` line to its closing brace, as `module::name (lines)`.
fn long_functions(sources: &[Source], most: usize) -> Vec<String> {
    let mut found = Vec::new();
    for (module, text) in sources {
        if tests_module(module) {
            continue;
        }
        let code = without_tests(text);
        let lines: Vec<&str> = code.lines().collect();
        for (at, line) in lines.iter().enumerate() {
            let body = line.trim_start();
            let indent = line.len() - body.len();
            // Past the visibility (`pub`, `pub(…)`) and the qualifiers.
            let mut head = body;
            if let Some(rest) = head.strip_prefix("pub") {
                head = match rest.strip_prefix('(') {
                    Some(inner) => inner.split_once(") ").map_or(rest, |(_, after)| after),
                    None => rest.trim_start(),
                };
            }
            for qualifier in ["const ", "async ", "unsafe ", "extern \"C\" "] {
                head = head.strip_prefix(qualifier).unwrap_or(head);
            }
            let Some(rest) = head.strip_prefix("fn ") else {
                continue;
            };
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            // Its closing brace: the first line at its indent that is `}`
            // (a declaration without a body ends with `;` first).
            let close = format!("{}}}", " ".repeat(indent));
            let end = lines[at..].iter().position(|l| {
                *l == close
                    || (l.trim_end().ends_with(';')
                        && !l.contains('{')
                        && l.len() - l.trim_start().len() == indent)
            });
            if let Some(end) = end
                && lines[at + end] == close
                && end + 1 > most
            {
                found.push(format!("{module}::{name} ({})", end + 1));
            }
        }
    }
    found
}

#[test]
fn no_function_is_over_80_lines() {
    let long = long_functions(&sources(), 80);
    assert!(long.is_empty(), "split these into named steps: {long:#?}");
    // The reader finds a long one.
    let body = format!("fn long() {{\n{}}}\n", "    step();\n".repeat(80));
    let made_up = vec![
        ("m".to_owned(), body.clone()),
        ("n".to_owned(), format!("pub(in crate::n) const {body}")),
    ];
    assert_eq!(
        long_functions(&made_up, 80),
        ["m::long (82)", "n::long (82)"]
    );
}

/// The lock file keeps the ASCII-only `idna_adapter` (1.0.0), so that the
/// crate's own builds (the README's demo, the suite) compile no ICU tables
/// for `url`'s internationalized host names, which no node URL here uses.
/// Programs that depend on the crate resolve their own versions. A
/// `cargo update` that moved it fails here.
#[test]
fn the_lock_file_keeps_the_demo_build_small() {
    let lock = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock"))
        .expect("Cargo.lock is committed");
    assert!(
        lock.contains("name = \"idna_adapter\"\nversion = \"1.0.0\""),
        "pin it again: cargo update -p idna_adapter --precise 1.0.0"
    );
    assert!(!lock.contains("name = \"icu_"), "ICU is back in the build");
}
