//! Issue 39: the house has no circles. Data flows down (API → core →
//! transport → Redis): drawn from the source's `use` lines and paths, no
//! module depends, directly or not, on a module that depends on it.
//! (Test modules and comments are left out: a doc link is no dependency.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every module of `src/` (as `a::b`), with the modules its code names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
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
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let name_of = |path: &Path| -> Vec<String> {
        let rel = path.strip_prefix(&src).unwrap().with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
            parts.pop();
        }
        parts
    };
    let modules: BTreeSet<String> = files.iter().map(|f| name_of(f).join("::")).collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        let parts = name_of(file);
        let name = parts.join("::");
        // Test-only modules are not part of the house.
        if name.ends_with("tests") || name.ends_with("fake") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        let parent = parts[..parts.len().saturating_sub(1)].join("::");
        let mut deps = BTreeSet::new();
        for line in code.lines().map(str::trim) {
            if line.starts_with("//") {
                continue;
            }
            // `super::x`, `super::{x, y}`, `crate::a::b`, `crate::a`.
            for (prefix, base) in [("super::", parent.as_str()), ("crate::", "")] {
                for piece in line.split(prefix).skip(1) {
                    let names: Vec<&str> = match piece.strip_prefix('{') {
                        Some(list) => list.split(['}', ',']).map(str::trim).collect(),
                        None => vec![piece],
                    };
                    for found in names {
                        let path: Vec<&str> = found
                            .split("::")
                            .map(|s| s.trim_matches(|c: char| !c.is_alphanumeric() && c != '_'))
                            .take(2)
                            .collect();
                        let join = |n: usize| {
                            let tail = path[..n.min(path.len())].join("::");
                            if base.is_empty() {
                                tail
                            } else {
                                format!("{base}::{tail}")
                            }
                        };
                        for candidate in [join(2), join(1)] {
                            if candidate != name && modules.contains(&candidate) {
                                deps.insert(candidate);
                                break;
                            }
                        }
                    }
                }
            }
        }
        graph.insert(name, deps);
    }
    graph
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

#[test]
fn no_module_depends_on_one_that_depends_on_it() {
    let graph = graph();
    assert!(graph.len() > 30, "the source was read: {graph:?}");
    assert!(
        graph["transport::codec"].contains("transport::keys"),
        "dependencies were found: {:?}",
        graph["transport::codec"]
    );
    for module in graph.keys() {
        let mut path = vec![module.clone()];
        assert!(
            !circle(&graph, module, module, &mut path),
            "a circle: {}",
            path.join(" → ")
        );
    }
}
