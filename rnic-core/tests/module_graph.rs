//! rnic-core has no import circle (issue 12): no two modules use each other, directly or
//! through others. A module may use its own parent and children (`engine` and
//! `engine::qp` are one unit); any other edge counts, so `cm` taking `QpAttr` from
//! `engine::qp` while `engine` holds a `cm::CmAgent` is a circle.
//!
//! The graph is read from the source: every `crate::` / `super::` path in code that is
//! not a comment and not under `#[cfg(test)]`, resolved to the longest module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path ("engine::qp") -> its source file's code.
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(&root).unwrap().with_extension("");
                let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
                if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
                    parts.pop();
                }
                out.insert(parts.join("::"), code_only(&std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    out
}

/// The source without comment lines and without items under `#[cfg(test)]` (the attribute's
/// next item, to its closing brace or semicolon).
fn code_only(src: &str) -> String {
    let lines: Vec<&str> = src.lines().filter(|l| !l.trim_start().starts_with("//")).collect();
    let text = lines.join("\n");
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        let after = &rest[i + "#[cfg(test)]".len()..];
        // Skip the item: up to a `;` before any `{`, or the `{` block it opens.
        let end = match (after.find('{'), after.find(';')) {
            (Some(b), Some(s)) if s < b => s + 1,
            (Some(b), _) => {
                let mut depth = 0usize;
                let mut end = after.len();
                for (k, c) in after[b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, Some(s)) => s + 1,
            (None, None) => after.len(),
        };
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The paths after each `crate::` and `super::` in `code`, each as its segments; a group
/// (`crate::{a::B, c}`) gives one path per member.
fn paths(code: &str) -> Vec<(bool, Vec<String>)> {
    let ident = |s: &str| -> Vec<String> {
        let end = s.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(s.len());
        s[..end].split("::").filter(|p| !p.is_empty()).map(str::to_owned).collect()
    };
    let mut out = Vec::new();
    for (kw, is_crate) in [("crate::", true), ("super::", false)] {
        let mut from = 0;
        while let Some(i) = code[from..].find(kw) {
            let at = from + i;
            from = at + kw.len();
            // `$crate::` in a macro and `foo_crate::` are not this crate's paths.
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                continue;
            }
            let rest = &code[from..];
            if let Some(group) = rest.strip_prefix('{') {
                let close = group.find('}').unwrap_or(group.len());
                for member in group[..close].split(',') {
                    out.push((is_crate, ident(member.trim())));
                }
            } else {
                out.push((is_crate, ident(rest)));
            }
        }
    }
    out
}

fn is_within(a: &str, b: &str) -> bool {
    a == b || b.is_empty() || a.starts_with(&format!("{b}::"))
}

/// Module -> the modules it uses (resolved to the longest known module path).
fn graph(mods: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, code) in mods {
        let parent = m.rsplit_once("::").map_or("", |(p, _)| p);
        for (is_crate, segs) in paths(code) {
            let base = if is_crate { "" } else { parent };
            let target = (1..=segs.len()).rev().find_map(|n| {
                let p = segs[..n].join("::");
                let full = if base.is_empty() { p } else { format!("{base}::{p}") };
                mods.contains_key(&full).then_some(full)
            });
            if let Some(t) = target {
                // A module and its ancestors or descendants are one unit.
                if !is_within(&t, m) && !is_within(m, &t) {
                    g.entry(m.clone()).or_default().insert(t);
                }
            }
        }
    }
    g
}

/// One circle in `g`, if any, as the modules along it.
fn find_circle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        m: &str,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(m.to_owned(), Mark::Open);
        stack.push(m.to_owned());
        for next in g.get(m).into_iter().flatten() {
            match marks.get(next) {
                Some(Mark::Open) => {
                    let start = stack.iter().position(|s| s == next).unwrap();
                    let mut c = stack[start..].to_vec();
                    c.push(next.clone());
                    return Some(c);
                }
                Some(Mark::Done) => {}
                None => {
                    if let Some(c) = visit(g, next, marks, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        marks.insert(m.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for m in g.keys() {
        if !marks.contains_key(m) {
            if let Some(c) = visit(g, m, &mut marks, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn rnic_core_has_no_import_circle() {
    let mods = modules();
    assert!(mods.contains_key("engine::qp") && mods.contains_key("device"), "source not found");
    let g = graph(&mods);
    // The reader sees real edges (a reader that found none would pass anything).
    assert!(g["device"].contains("engine") && g["engine::qp"].contains("post"), "{g:?}");
    if let Some(c) = find_circle(&g) {
        panic!("import circle: {}", c.join(" -> "));
    }
}

/// The checker finds a circle where there is one, through a group import and a `super::`
/// path, and ignores comments, test modules and parent/child use.
#[test]
fn the_checker_finds_a_circle() {
    let mods: BTreeMap<String, String> = [
        ("a", "use crate::{b::Thing, c};\n// use crate::z;\n"),
        ("b", "pub struct Thing;\nfn f() { super::c::g() }\n"),
        ("c", "pub fn g() {}\n#[cfg(test)]\nmod tests { use crate::a; }\n"),
        ("c::d", "use super::g; use crate::c;\n"),
    ]
    .into_iter()
    .map(|(m, s)| (m.to_owned(), code_only(s)))
    .collect();
    let g = graph(&mods);
    assert_eq!(g["a"], BTreeSet::from(["b".to_owned(), "c".to_owned()]));
    assert_eq!(g["b"], BTreeSet::from(["c".to_owned()]));
    assert!(!g.contains_key("c") && !g.contains_key("c::d"), "{g:?}");
    assert_eq!(find_circle(&g), None);
    let mut with = mods.clone();
    with.insert("c".into(), code_only("use crate::a::X;\n"));
    let c = find_circle(&graph(&with)).expect("a -> c -> a");
    assert_eq!((c.first(), c.last()), (c.last(), c.first()), "{c:?}");
    assert!(c.contains(&"a".to_owned()) && c.contains(&"c".to_owned()));
}
