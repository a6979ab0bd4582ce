//! No workspace crate has an import circle (issues 12 and 34): no two modules of a crate
//! use each other, directly or through others. A module may use its own parent and
//! children (`engine` and `engine::qp` are one unit); any other edge counts, so in
//! rnic-core `cm` taking `QpAttr` from `engine::qp` while `engine` holds a `cm::CmAgent`
//! would be a circle.
//!
//! The graph is read from each crate's `src/`: the modules its root declares (`mod x;`,
//! followed file by file, so a `#[cfg(test)] mod tests;` file is not one), and in each of
//! them every `crate::` / `super::` path (a `use crate::{a, b::{C, d}}` group gives one
//! per member) in code that is not a comment, a string or an item under `#[cfg(test)]`,
//! resolved to the longest module it names. A path inside an inline `mod x { .. }` is
//! resolved from there and counts for the file's module.
//!
//! Circles known and not yet fixed are listed in [`ALLOWED`], each by the edge that closes
//! it: the check fails on any other circle, and on an entry whose edge no longer closes
//! one (so the list only shrinks).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Known circles: (crate, from, to, why). Each entry allows the one edge `from -> to`
/// that closes a circle still there; remove it with the fix (the test fails on an entry
/// that no longer closes a circle).
const ALLOWED: &[(&str, &str, &str, &str)] = &[];

/// A module's source: where it is (for messages) and its text.
struct Source {
    file: String,
    text: String,
}

/// An edge and where it is used: `file:line` of each path that makes it.
type Graph = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// A crate root's modules (module path -> source) and its graph.
type Crate = (BTreeMap<String, Source>, Graph);

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The workspace's member crates, as the root `Cargo.toml` lists them.
fn members() -> Vec<String> {
    let toml = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let line = toml.lines().find(|l| l.trim_start().starts_with("members")).expect("members = [...]");
    line.split('"').skip(1).step_by(2).map(str::to_owned).collect()
}

/// The source with comments and string and char literals blanked to spaces (newlines
/// kept, so offsets and line numbers stay).
fn blank_comments_and_strings(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        // Before a raw string's `r` may stand a `b` (br".."), itself no identifier's end.
        let prev_ident = i > 0 && ident(b[i - 1]) && !(b[i - 1] == b'b' && (i < 2 || !ident(b[i - 2])));
        if b[i..].starts_with(b"//") {
            let end = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if b[i] == b'r' && !prev_ident && matches!(b.get(i + 1), Some(b'"' | b'#')) {
            // A raw string r"..", r#".."#: ends at a quote and as many hashes.
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            let start = i + 2 + hashes;
            let end = b[start..].windows(close.len()).position(|w| w == close).map_or(b.len(), |n| start + n);
            blank(&mut out, start, end);
            i = (end + close.len()).min(b.len());
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i + 1, j.min(b.len()));
            i = j + 1;
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}'), or a lifetime ('a), left as is.
            let end = if b.get(i + 1) == Some(&b'\\') {
                // Past the escaped character, so '\'' ends at its last quote.
                b.get(i + 3..).and_then(|r| r.iter().position(|&c| c == b'\'')).map(|n| i + 3 + n)
            } else {
                // One (possibly multi-byte) character, then the quote.
                let len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 1 + len)
            };
            match end {
                Some(e) => {
                    blank(&mut out, i + 1, e);
                    i = e + 1;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).expect("blanking keeps UTF-8: only whole characters are replaced")
}

/// The end (exclusive) of the `{ .. }` block opening at `open`.
fn block_end(code: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (k, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + k + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The code of a source: comments, strings and every item under `#[cfg(test)]` (the
/// attribute's next item, to its closing brace or semicolon) blanked, offsets kept.
fn code_only(src: &str) -> String {
    let mut code = blank_comments_and_strings(src);
    const ATTR: &str = "#[cfg(test)]";
    while let Some(at) = code.find(ATTR) {
        let after = at + ATTR.len();
        // Skip the item: up to a `;` before any `{`, or the `{` block it opens.
        let end = match (code[after..].find('{'), code[after..].find(';')) {
            (Some(b), Some(s)) if s < b => after + s + 1,
            (Some(b), _) => block_end(&code, after + b),
            (None, Some(s)) => after + s + 1,
            (None, None) => code.len(),
        };
        let blanked: String = code[at..end].chars().map(|c| if c == '\n' { c } else { ' ' }).collect();
        code.replace_range(at..end, &blanked);
    }
    code
}

/// The identifier starting at `i`, if one does.
fn ident_at(code: &str, i: usize) -> Option<&str> {
    let s = &code[i..];
    let n = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
    (n > 0 && !s.starts_with(|c: char| c.is_ascii_digit())).then(|| &s[..n])
}

/// Whether `code[i..]` starts the keyword or name `word` (not inside a longer identifier,
/// not after `::` or `$`).
fn word_at(code: &str, i: usize, word: &str) -> bool {
    let before = code[..i].chars().next_back();
    code[i..].starts_with(word)
        && !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':')
        && !code[i + word.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
}

/// The inline modules (`mod x { .. }`) of `code`: name and the span of their block.
fn inline_mods(code: &str) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("mod") {
        if !word_at(code, i, "mod") {
            continue;
        }
        let rest = &code[i + 3..];
        let ws = rest.len() - rest.trim_start().len();
        let Some(name) = ident_at(code, i + 3 + ws) else { continue };
        let after = i + 3 + ws + name.len();
        let ws2 = code[after..].len() - code[after..].trim_start().len();
        if code[after + ws2..].starts_with('{') {
            out.push((name.to_owned(), after + ws2, block_end(code, after + ws2)));
        }
    }
    out
}

/// The inline modules around offset `at`, outermost first.
fn inline_path(mods: &[(String, usize, usize)], at: usize) -> Vec<String> {
    let mut around: Vec<_> = mods.iter().filter(|(_, open, close)| *open < at && at < *close).collect();
    around.sort_by_key(|(_, open, _)| *open);
    around.into_iter().map(|(n, _, _)| n.clone()).collect()
}

/// The file modules `mod x;` declares in `code` (with their inline path), at offsets.
fn declared_mods(code: &str) -> Vec<(Vec<String>, String)> {
    let inline = inline_mods(code);
    let mut out = Vec::new();
    for (i, _) in code.match_indices("mod") {
        if !word_at(code, i, "mod") {
            continue;
        }
        let rest = &code[i + 3..];
        let ws = rest.len() - rest.trim_start().len();
        let Some(name) = ident_at(code, i + 3 + ws) else { continue };
        if code[i + 3 + ws + name.len()..].trim_start().starts_with(';') {
            out.push((inline_path(&inline, i), name.to_owned()));
        }
    }
    out
}

/// The modules of the crate whose root file is `root_file` (module path "engine::qp" ->
/// source), following `mod x;` declarations in code (not under `#[cfg(test)]`).
fn crate_modules(root_file: &Path) -> BTreeMap<String, Source> {
    let dir = root_file.parent().unwrap();
    let ws = root();
    let mut out = BTreeMap::new();
    // (module path, its file, the folder its children's files are in)
    let mut todo = vec![(Vec::<String>::new(), root_file.to_path_buf(), dir.to_path_buf())];
    while let Some((path, file, child_dir)) = todo.pop() {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for (inline, name) in declared_mods(&code_only(&text)) {
            let mut d = child_dir.clone();
            d.extend(&inline);
            let (flat, nested) = (d.join(format!("{name}.rs")), d.join(&name).join("mod.rs"));
            let (f, cd) = if flat.exists() {
                (flat, d.join(&name))
            } else if nested.exists() {
                (nested, d.join(&name))
            } else {
                panic!("{}: mod {name}: no {} or {}", file.display(), flat.display(), nested.display());
            };
            let mut p = path.clone();
            p.extend(inline);
            p.push(name);
            todo.push((p, f, cd));
        }
        let shown = file.strip_prefix(&ws).unwrap_or(&file).display().to_string();
        out.insert(path.join("::"), Source { file: shown, text });
    }
    out
}

/// The paths of a use tree at `code[i..]` (after `crate::` or `super::`), each as its
/// segments: `a::B` gives one, `{a::B, c::{D, e}}` gives one per leaf.
fn use_tree(code: &str, mut i: usize) -> Vec<Vec<String>> {
    fn skip_ws(code: &str, i: usize) -> usize {
        i + (code[i..].len() - code[i..].trim_start().len())
    }
    fn tree(code: &str, i: &mut usize) -> Vec<Vec<String>> {
        let mut segs = Vec::new();
        loop {
            *i = skip_ws(code, *i);
            if code[*i..].starts_with('{') {
                *i += 1;
                let mut out = Vec::new();
                loop {
                    *i = skip_ws(code, *i);
                    if *i >= code.len() || code[*i..].starts_with('}') {
                        *i += 1;
                        break;
                    }
                    for sub in tree(code, i) {
                        out.push(segs.iter().cloned().chain(sub).collect());
                    }
                    *i = skip_ws(code, *i);
                    if code[*i..].starts_with(',') {
                        *i += 1;
                    }
                }
                return out;
            }
            match ident_at(code, *i) {
                Some(id) => {
                    segs.push(id.to_owned());
                    *i += id.len();
                    let j = skip_ws(code, *i);
                    if code[j..].starts_with("::") {
                        *i = j + 2;
                    } else {
                        // `as Name`, generics, a call: the path ends here.
                        if code[j..].starts_with("as ") {
                            *i = skip_ws(code, j + 3);
                            *i += ident_at(code, *i).map_or(0, str::len);
                        }
                        break;
                    }
                }
                None => {
                    // `*`, or anything else: the path so far.
                    if code[*i..].starts_with('*') {
                        *i += 1;
                    }
                    break;
                }
            }
        }
        vec![segs]
    }
    tree(code, &mut i)
}

fn is_within(a: &str, b: &str) -> bool {
    a == b || b.is_empty() || a.starts_with(&format!("{b}::"))
}

fn join(base: &[String], segs: &[String]) -> String {
    base.iter().chain(segs).cloned().collect::<Vec<_>>().join("::")
}

/// Module -> the modules it uses (resolved to the longest known module path), each with
/// where (`file:line`).
fn graph(mods: &BTreeMap<String, Source>) -> Graph {
    let mut g = Graph::new();
    for (m, src) in mods {
        let code = code_only(&src.text);
        let inline = inline_mods(&code);
        let here: Vec<String> = if m.is_empty() { vec![] } else { m.split("::").map(str::to_owned).collect() };
        for (kw, is_crate) in [("crate::", true), ("super::", false)] {
            for (at, _) in code.match_indices(kw) {
                if !word_at(&code, at, &kw[..kw.len() - 2]) {
                    continue;
                }
                // The module the path is written in: the file's, and the inline modules around it.
                let mut current = here.clone();
                current.extend(inline_path(&inline, at));
                for mut segs in use_tree(&code, at + kw.len()) {
                    let mut base = if is_crate { vec![] } else { current[..current.len().saturating_sub(1)].to_vec() };
                    while !is_crate && segs.first().is_some_and(|s| s == "super") {
                        segs.remove(0);
                        base.pop();
                    }
                    let target = (1..=segs.len()).rev().map(|n| join(&base, &segs[..n])).find(|p| mods.contains_key(p));
                    let Some(t) = target else { continue };
                    // A module and its ancestors or descendants are one unit.
                    if is_within(&t, m) || is_within(m, &t) {
                        continue;
                    }
                    let line = code[..at].matches('\n').count() + 1;
                    let at = format!("{}:{line}", src.file);
                    let uses = g.entry(m.clone()).or_default().entry(t).or_default();
                    if !uses.contains(&at) {
                        uses.push(at);
                    }
                }
            }
        }
    }
    g
}

/// The modules `from` reaches in `g` (not itself unless through a circle).
fn reach(g: &Graph, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&str> = g.get(from).into_iter().flat_map(|e| e.keys()).map(String::as_str).collect();
    while let Some(m) = todo.pop() {
        if seen.insert(m.to_owned()) {
            todo.extend(g.get(m).into_iter().flat_map(|e| e.keys()).map(String::as_str));
        }
    }
    seen
}

/// The circles of `g`: each set of modules that all reach each other (a strongly
/// connected component of more than one module), smallest module first.
fn circles(g: &Graph) -> Vec<BTreeSet<String>> {
    let reaches: BTreeMap<&String, BTreeSet<String>> = g.keys().map(|m| (m, reach(g, m))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for (m, r) in &reaches {
        if !r.contains(*m) || out.iter().any(|c| c.contains(*m)) {
            continue;
        }
        let scc =
            r.iter().filter(|o| reaches.get(o).is_some_and(|ro| ro.contains(*m))).cloned().collect::<BTreeSet<_>>();
        out.push(scc);
    }
    out
}

/// One circle through `start` inside `scc`, as the modules along it (first = last).
fn one_circle(g: &Graph, scc: &BTreeSet<String>, start: &str) -> Vec<String> {
    // Breadth-first from start's successors back to start: the shortest circle.
    let mut prev: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.to_owned()]);
    while let Some(m) = queue.pop_front() {
        for next in g.get(&m).into_iter().flat_map(|e| e.keys()).filter(|n| scc.contains(*n)) {
            if next == start {
                let mut path = vec![start.to_owned(), m.clone()];
                let mut at = m.clone();
                while at != start {
                    at = prev[&at].clone();
                    path.push(at.clone());
                }
                path.reverse();
                return path;
            }
            if !prev.contains_key(next) {
                prev.insert(next.clone(), m.clone());
                queue.push_back(next.clone());
            }
        }
    }
    unreachable!("{start} is on a circle of {scc:?}")
}

/// A circle explained: one path around it, then every edge between its modules with
/// where it is used.
fn describe(g: &Graph, scc: &BTreeSet<String>) -> String {
    let first = scc.first().unwrap();
    let mut s = format!("circle {}\n", one_circle(g, scc, first).join(" -> "));
    for m in scc {
        for (t, at) in g.get(m).into_iter().flatten().filter(|(t, _)| scc.contains(*t)) {
            let more = if at.len() > 3 { format!(" (+{} more)", at.len() - 3) } else { String::new() };
            s += &format!("    {m} -> {t}: {}{more}\n", at.iter().take(3).cloned().collect::<Vec<_>>().join(", "));
        }
    }
    s
}

/// What is wrong with one crate's graph given its allowed edges: each circle left once
/// they are taken out, and each allowed edge that no longer closes a circle.
fn problems(name: &str, g: &Graph, allowed: &[(&str, &str, &str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = g.clone();
    for &(_, from, to, _) in allowed.iter().filter(|a| a.0 == name) {
        let on_circle = g.get(from).is_some_and(|e| e.contains_key(to)) && reach(g, to).contains(from);
        if !on_circle {
            out.push(format!(
                "{name}: the allowed edge {from} -> {to} closes no circle any more: remove it from ALLOWED"
            ));
        }
        if let Some(e) = rest.get_mut(from) {
            e.remove(to);
        }
    }
    for scc in circles(&rest) {
        out.push(format!("{name}: {}", describe(&rest, &scc)));
    }
    out
}

/// Every workspace crate's graph: crate name (its folder) -> the graph of each of its roots.
fn workspace() -> BTreeMap<String, Vec<Crate>> {
    let mut out = BTreeMap::new();
    for m in members() {
        let src = root().join(&m).join("src");
        let mut roots: Vec<PathBuf> =
            ["lib.rs", "main.rs"].iter().map(|f| src.join(f)).filter(|p| p.exists()).collect();
        if let Ok(bins) = std::fs::read_dir(src.join("bin")) {
            roots.extend(bins.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "rs")));
        }
        assert!(!roots.is_empty(), "{m}: no lib.rs or main.rs");
        let graphs = roots
            .iter()
            .map(|r| {
                let mods = crate_modules(r);
                let g = graph(&mods);
                (mods, g)
            })
            .collect();
        out.insert(m, graphs);
    }
    out
}

#[test]
fn no_crate_has_an_import_circle() {
    let ws = workspace();
    for c in
        ["rnic-wire", "rnic-io", "rnic-core", "rnic-conform", "rnic-verbs-sys", "rnic-verbs", "rnic-ibverbs", "tools"]
    {
        assert!(ws.contains_key(c), "{c} is not a workspace member: {:?}", ws.keys());
    }
    for &(c, ..) in ALLOWED {
        assert!(ws.contains_key(c), "ALLOWED names {c}, not a workspace crate");
    }
    // The reader sees real edges (a reader that found none would pass anything).
    let (core_mods, core) = &ws["rnic-core"][0];
    assert!(core_mods.contains_key("engine::qp") && core_mods.contains_key("device"), "rnic-core's source not found");
    assert!(core["device"].contains_key("engine") && core["engine::qp"].contains_key("post"), "{:?}", core.keys());
    let ibv = &ws["rnic-ibverbs"][0].1;
    assert!(ibv["device"].contains_key("qp") && ibv["qp"].contains_key("ctx"), "{:?}", ibv.keys());
    let mut all = Vec::new();
    for (name, graphs) in &ws {
        for (_, g) in graphs {
            all.extend(problems(name, g, ALLOWED));
        }
    }
    assert!(all.is_empty(), "import circles (a module may use its parent and children only):\n{}", all.join("\n"));
}

/// The modules of a made-up crate.
fn made_up(files: &[(&str, &str)]) -> BTreeMap<String, Source> {
    files.iter().map(|(m, s)| (m.to_string(), Source { file: format!("{m}.rs"), text: s.to_string() })).collect()
}

/// The checker finds a circle where there is one, through a group import and a `super::`
/// path, and ignores comments, strings, test modules and parent/child use.
#[test]
fn the_checker_finds_a_circle() {
    let mods = made_up(&[
        ("", "mod a; mod b; mod c;\n"),
        ("a", "use crate::{b::{Thing, Other as O}, c};\n// use crate::z;\nfn f() { let _ = \"crate::b::c\"; }\n"),
        ("b", "pub struct Thing;\nfn f() { super::c::g() }\nmod inner { fn h() { super::super::c::g() } }\n"),
        ("c", "pub fn g() {}\n/* crate::a */\n#[cfg(test)]\nmod tests { use crate::a; }\nmod d;\n"),
        ("c::d", "use super::g; use crate::c;\n"),
    ]);
    let g = graph(&mods);
    let targets = |m: &str| g[m].keys().cloned().collect::<BTreeSet<_>>();
    assert_eq!(targets("a"), BTreeSet::from(["b".to_owned(), "c".to_owned()]));
    assert_eq!(targets("b"), BTreeSet::from(["c".to_owned()]));
    assert_eq!(g["b"]["c"], ["b.rs:2", "b.rs:3"]);
    assert!(!g.contains_key("c") && !g.contains_key("c::d"), "{:?}", g.keys());
    assert!(circles(&g).is_empty());
    assert!(problems("x", &g, &[]).is_empty());

    let with_no_circle = made_up(&[("", ""), ("a", "use crate::b;"), ("b", "")]);
    let mut with = mods;
    with.insert("c".into(), Source { file: "c.rs".into(), text: "use crate::a::X;\n".into() });
    let g = graph(&with);
    let found = circles(&g);
    assert_eq!(found, [BTreeSet::from(["a".to_owned(), "b".to_owned(), "c".to_owned()])]);
    let text = describe(&g, &found[0]);
    assert!(text.starts_with("circle a -> c -> a\n") && text.contains("    c -> a: c.rs:1\n"), "{text}");
    assert_eq!(problems("x", &g, &[]).len(), 1);
    // Allowing the edge that closes it passes; an allowed edge on no circle fails.
    assert!(problems("x", &g, &[("x", "c", "a", "test")]).is_empty());
    let stale = problems("x", &g, &[("x", "c", "a", "test"), ("x", "b", "a", "gone")]);
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert!(stale[0].contains("b -> a closes no circle"), "{stale:?}");
    // An edge that is there but on no circle (the circle fixed elsewhere) is stale too.
    let stale = problems("x", &graph(&with_no_circle), &[("x", "a", "b", "fixed")]);
    assert!(stale.len() == 1 && stale[0].contains("a -> b closes no circle"), "{stale:?}");
}

/// Declarations are followed: a `mod x;` under `#[cfg(test)]` is no module, an inline
/// module's `mod y;` is in its folder.
#[test]
fn declared_modules() {
    let code = code_only("mod a;\npub(crate) mod b;\n#[cfg(test)]\nmod tests;\nmod inl { mod y; }\n// mod z;\n");
    assert_eq!(
        declared_mods(&code),
        [(vec![], "a".to_owned()), (vec![], "b".to_owned()), (vec!["inl".to_owned()], "y".to_owned())]
    );
    assert_eq!(
        code_only("let c = '{'; let s = r#\"}\"#; fn f<'a>() {}"),
        "let c = ' '; let s = r#\" \"#; fn f<'a>() {}"
    );
}
