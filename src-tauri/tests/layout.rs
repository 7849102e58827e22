//! The app shell's layout stays readable (issue 27, items 5 and 6), checked from the
//! sources of `src-tauri/src/` (no GPU, no build of anything else):
//! - no import circle: the graph of `crate::…` / `super::…` / child-module paths between
//!   its files (each file a module; test modules left out) has no cycle;
//! - no file over [`MAX_FILE_LINES`] lines, no non-test function over [`MAX_FN_LINES`].
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One concern a file: past this a file is split (the engine's rule too).
const MAX_FILE_LINES: usize = 600;
/// Past this a function is split into named steps.
const MAX_FN_LINES: usize = 120;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, with its module path (`crate`, `crate::store::records`).
fn modules(dir: &Path, prefix: &str, out: &mut BTreeMap<String, PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            modules(&p, &format!("{prefix}::{stem}"), out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let name = match stem.as_str() {
                "lib" if prefix == "crate" => "crate".to_string(),
                "main" if prefix == "crate" => continue, // the binary: calls `run` only
                "mod" => prefix.to_string(),
                _ => format!("{prefix}::{stem}"),
            };
            out.insert(name, p);
        }
    }
}

/// The file's code without its test module (`#[cfg(test)] mod tests` closes every file
/// here) and without comments.
fn production(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut it = text.lines().peekable();
    while let Some(l) = it.next() {
        if l.trim() == "#[cfg(test)]"
            && it
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod tests"))
        {
            break;
        }
        let code = match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        };
        lines.push(code.to_string());
    }
    lines
}

fn parent(m: &str) -> &str {
    m.rsplit_once("::").map_or("crate", |(p, _)| p)
}

/// Paths `a::b::c` in `line` that start at an identifier boundary.
fn paths(line: &str) -> Vec<Vec<String>> {
    let b = line.as_bytes();
    let is_id = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if is_id(b[i]) && (i == 0 || !(is_id(b[i - 1]) || b[i - 1] == b':')) {
            let mut segs = Vec::new();
            let mut j = i;
            loop {
                let s = j;
                while j < b.len() && is_id(b[j]) {
                    j += 1;
                }
                segs.push(line[s..j].to_string());
                if line[j..].starts_with("::") && b.get(j + 2).is_some_and(|c| is_id(*c)) {
                    j += 2;
                } else {
                    break;
                }
            }
            if segs.len() > 1 {
                out.push(segs);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// The modules `file` (module `me`) refers to, resolved to the longest known module.
fn arrows(me: &str, lines: &[String], known: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    // Inline modules (`mod x {`): `super::` inside them names this file's module.
    let mut inline: Vec<usize> = Vec::new();
    for l in lines {
        let indent = l.len() - l.trim_start().len();
        let t = l.trim();
        if inline
            .last()
            .is_some_and(|&d| d == indent && t.starts_with('}'))
        {
            inline.pop();
        }
        if (t.starts_with("mod ") || t.starts_with("pub mod ")) && t.ends_with('{') {
            inline.push(indent);
        }
        for segs in paths(l) {
            let (mut base, rest) = match segs[0].as_str() {
                "crate" => ("crate".to_string(), &segs[1..]),
                "super" => {
                    let mut m = me.to_string();
                    let mut k = 0;
                    let mut depth = inline.len();
                    while segs.get(k).is_some_and(|s| s == "super") {
                        if depth > 0 {
                            depth -= 1;
                        } else {
                            m = parent(&m).to_string();
                        }
                        k += 1;
                    }
                    (m, &segs[k..])
                }
                // A child module named without `crate::` (`use files::…`, `commands::app::…`).
                first if known.contains(&format!("{me}::{first}")) => (me.to_string(), &segs[..]),
                _ => continue,
            };
            for s in rest {
                let next = format!("{base}::{s}");
                if known.contains(&next) {
                    base = next;
                } else {
                    break;
                }
            }
            if base != me {
                out.insert(base);
            }
        }
    }
    out
}

/// The strongly connected components of more than one module (Tarjan).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                t.out.push(scc);
            }
        }
    }
    let mut t = T {
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn app_modules() -> BTreeMap<String, PathBuf> {
    let mut files = BTreeMap::new();
    modules(&src(), "crate", &mut files);
    assert!(files.contains_key("crate::store::recovery"), "{files:?}");
    files
}

#[test]
fn no_import_circle_in_the_app_shell() {
    let files = app_modules();
    let known: BTreeSet<String> = files.keys().cloned().collect();
    let mut graph = BTreeMap::new();
    for (m, p) in &files {
        let lines = production(&std::fs::read_to_string(p).unwrap());
        graph.insert(m.clone(), arrows(m, &lines, &known));
    }
    // The checker sees arrows at all (a parser that finds none would pass anything).
    assert!(
        graph["crate::commands::chat"].contains("crate::chat"),
        "{graph:#?}"
    );
    assert!(
        graph["crate::store"].contains("crate::store::recovery"),
        "{graph:#?}"
    );
    assert!(
        graph["crate::worker"].contains("crate::worker::adapters"),
        "{graph:#?}"
    );
    let found = circles(&graph);
    assert!(found.is_empty(), "import circles: {found:?}\n{graph:#?}");
}

#[test]
fn the_circle_finder_finds_circles() {
    let g = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert!(circles(&g(&[("a", "b"), ("b", "c")])).is_empty());
    assert_eq!(
        circles(&g(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])),
        [["a", "b", "c"]]
    );
    let known: BTreeSet<String> = ["crate", "crate::x", "crate::x::y", "crate::x::z"]
        .map(String::from)
        .into();
    let lines = [
        "use super::z::Thing;",
        "pub mod inner {",
        "    use super::Local;",
        "}",
        "use crate::Root;",
    ]
    .map(String::from);
    assert_eq!(
        arrows("crate::x::y", &lines, &known),
        ["crate".to_string(), "crate::x::z".to_string()].into(),
        "`super::z` from x::y is x::z; `super` in an inline mod is y itself"
    );
    let lines = ["use crate::x::y::{A, B};", "y::call();"].map(String::from);
    assert_eq!(
        arrows("crate::x", &lines, &known),
        ["crate::x::y".to_string()].into()
    );
}

#[test]
fn files_and_functions_stay_short() {
    let mut long = Vec::new();
    for p in app_modules().values() {
        let text = std::fs::read_to_string(p).unwrap();
        let name = p.strip_prefix(src()).unwrap().display().to_string();
        let n = text.lines().count();
        if n > MAX_FILE_LINES {
            long.push(format!("{name}: {n} lines"));
        }
        let lines = production(&text);
        for (i, l) in lines.iter().enumerate() {
            let t = l.trim_start();
            let words: Vec<&str> = t.split_whitespace().collect();
            let Some(k) = words.iter().position(|w| *w == "fn") else {
                continue;
            };
            let qualifiers = [
                "pub",
                "pub(crate)",
                "pub(super)",
                "const",
                "async",
                "unsafe",
            ];
            if !words[..k].iter().all(|w| qualifiers.contains(w)) || t.ends_with(';') {
                continue;
            }
            // rustfmt closes a body at the indentation of its `fn`.
            let indent = l.len() - t.len();
            let end = lines[i + 1..].iter().position(|m| {
                m.len() - m.trim_start().len() == indent && m.trim_start().starts_with('}')
            });
            let len = end.map_or(1, |e| e + 2);
            if len > MAX_FN_LINES {
                let f = words[k + 1].split(['(', '<']).next().unwrap_or("");
                long.push(format!("{name}:{}: {f} is {len} lines", i + 1));
            }
        }
    }
    assert!(long.is_empty(), "too long: {long:#?}");
}
