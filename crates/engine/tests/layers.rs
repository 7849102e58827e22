#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
//! The engine's import graph reads top to bottom: every module imports only modules of the
//! layers below its own, no two files import each other (directly or around a circle),
//! and the README's architecture screen states the same layer order.
//!
//! The graph is read from the source: `use crate::…` / `use super::…` trees and inline
//! `crate::…` paths of every non-test file reachable from `lib.rs` (files and inline
//! modules behind `#[cfg(test)]` are left out: tests may reach anywhere).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The engine's layers, bottom to top. A module may import only modules of lower layers.
const LAYERS: &[&[&str]] = &[
    &["error"],
    &["config", "files", "output", "npy"],
    &["format"],
    &["quant", "tokenizer", "sampler"],
    &["constraint"],
    &["gpu"],
    &["ops"],
    &["adapter"],
    &["model"],
    &["api"],
    &["analysis", "profile", "wall_costs", "kernel_bench"],
];

/// A module path inside the crate (`["model", "graph", "build"]`), `[]` for the root.
type ModPath = Vec<String>;

/// The non-test source files of the crate: module path → text without comments and
/// without `#[cfg(test)]` items.
fn sources(src: &Path) -> BTreeMap<ModPath, String> {
    let mut out = BTreeMap::new();
    walk(&src.join("lib.rs"), Vec::new(), &mut out);
    out
}

fn walk(file: &Path, path: ModPath, out: &mut BTreeMap<ModPath, String>) {
    let text = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let text = strip_test_items(&strip_comments(&text));
    // `mod x;` declarations: the child file is x.rs or x/mod.rs beside this module's dir.
    let dir: PathBuf = if file.ends_with("lib.rs") || file.ends_with("mod.rs") {
        file.parent().unwrap().to_path_buf()
    } else {
        file.with_extension("")
    };
    for name in mod_decls(&text) {
        let mut child = path.clone();
        child.push(name.clone());
        let flat = dir.join(format!("{name}.rs"));
        let nested = dir.join(&name).join("mod.rs");
        let f = if flat.exists() { flat } else { nested };
        walk(&f, child, out);
    }
    out.insert(path, text);
}

/// `text` without `//` and `/* */` comments (string literals holding `//` are rare in the
/// engine and would only hide a path, never invent one).
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("//") {
            rest = r.find('\n').map_or("", |i| &r[i..]);
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.find("*/").map_or("", |i| &r[i + 2..]);
        } else {
            let ch = rest.chars().next().unwrap();
            out.push(ch);
            rest = &rest[ch.len_utf8()..];
        }
    }
    out
}

/// `text` without the item after each `#[cfg(test)]` (a `mod x;`, or a braced item).
fn strip_test_items(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let (semi, brace) = (after.find(';'), after.find('{'));
        rest = match (semi, brace) {
            (Some(s), Some(b)) if s < b => &after[s + 1..],
            (_, Some(b)) => &after[matching_brace(after, b) + 1..],
            (Some(s), None) => &after[s + 1..],
            (None, None) => "",
        };
    }
    out.push_str(rest);
    out
}

fn matching_brace(text: &str, open: usize) -> usize {
    let mut depth = 0;
    for (i, ch) in text[open..].char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + i;
                }
            }
            _ => {}
        }
    }
    text.len() - 1
}

/// The names of `mod x;` declarations (file modules) in `text`.
fn mod_decls(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        let l = l.strip_prefix("pub ").unwrap_or(l);
        let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
        let l = l.strip_prefix("pub(super) ").unwrap_or(l);
        if let Some(name) = l.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            names.push(name.trim().to_string());
        }
    }
    names
}

/// Every path of a `use` tree: `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn expand_use(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        return vec![tree];
    };
    let close = matching_brace(&tree, open);
    let (prefix, inner) = (&tree[..open], &tree[open + 1..close]);
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, ch) in inner.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| {
            expand_use(p)
                .into_iter()
                .map(move |q| format!("{prefix}{q}"))
        })
        .collect()
}

/// The paths `text` names: `use crate|super|self::…` trees and inline `crate::a::b` paths.
fn named_paths(text: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("use ") {
        let before = rest[..i].chars().last();
        let after = &rest[i + 4..];
        rest = after;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let tree = after.split(';').next().unwrap_or("").trim();
        if ["crate::", "super::", "self::"]
            .iter()
            .any(|p| tree.starts_with(p))
        {
            paths.extend(expand_use(tree));
        }
    }
    for (i, _) in text.match_indices("crate::") {
        let before = text[..i].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let path: String = text[i..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        paths.push(path);
    }
    paths
}

/// The file module `path` (named from inside `from`) resolves to: its longest prefix that
/// is a file of the crate.
fn resolve(from: &ModPath, path: &str, files: &BTreeSet<ModPath>) -> Option<ModPath> {
    let path = path.split(" as ").next().unwrap_or(path);
    let mut segs = path.split("::").filter(|s| !s.is_empty()).peekable();
    let mut full: ModPath = match segs.peek() {
        Some(&"crate") => {
            segs.next();
            Vec::new()
        }
        Some(&"super") | Some(&"self") => from.clone(),
        _ => return None,
    };
    for s in segs {
        match s {
            "super" => {
                full.pop();
            }
            "self" => {}
            _ => full.push(s.to_string()),
        }
    }
    (0..=full.len())
        .rev()
        .map(|k| full[..k].to_vec())
        .find(|p| files.contains(p))
}

/// File-level import edges: (importer, imported), leaving out a file's imports of its own
/// ancestors (a module's `mod.rs` holds what its files share) and of itself.
fn edges(srcs: &BTreeMap<ModPath, String>) -> BTreeSet<(ModPath, ModPath)> {
    let files: BTreeSet<ModPath> = srcs.keys().cloned().collect();
    let mut out = BTreeSet::new();
    for (from, text) in srcs {
        for p in named_paths(text) {
            if let Some(to) = resolve(from, &p, &files) {
                if to != *from && !from.starts_with(&to) {
                    out.insert((from.clone(), to));
                }
            }
        }
    }
    out
}

/// A circle of the directed graph `edges`, if it has one.
fn find_cycle<T: Ord + Clone>(edges: &BTreeSet<(T, T)>) -> Option<Vec<T>> {
    let mut adj: BTreeMap<&T, Vec<&T>> = BTreeMap::new();
    for (a, b) in edges {
        adj.entry(a).or_default().push(b);
    }
    // 0 unvisited, 1 on the stack, 2 done
    let mut mark: BTreeMap<&T, u8> = BTreeMap::new();
    fn visit<'a, T: Ord>(
        n: &'a T,
        adj: &BTreeMap<&'a T, Vec<&'a T>>,
        mark: &mut BTreeMap<&'a T, u8>,
        stack: &mut Vec<&'a T>,
    ) -> Option<Vec<&'a T>> {
        mark.insert(n, 1);
        stack.push(n);
        for &m in adj.get(n).map_or(&[][..], |v| &v[..]) {
            match mark.get(m).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|&s| s == m).unwrap();
                    return Some(stack[at..].to_vec());
                }
                0 => {
                    if let Some(c) = visit(m, adj, mark, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        mark.insert(n, 2);
        None
    }
    let nodes: Vec<&T> = adj.keys().copied().collect();
    for n in nodes {
        if mark.get(n).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, &adj, &mut mark, &mut Vec::new()) {
                return Some(c.into_iter().cloned().collect());
            }
        }
    }
    None
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn show(p: &ModPath) -> String {
    if p.is_empty() {
        "lib".into()
    } else {
        p.join("/")
    }
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn every_module_is_in_a_layer() {
    let srcs = sources(&src_dir());
    let top: BTreeSet<&str> = srcs
        .keys()
        .filter(|p| p.len() == 1)
        .map(|p| p[0].as_str())
        .collect();
    for m in &top {
        assert!(
            layer_of(m).is_some(),
            "module `{m}` is in no layer of LAYERS"
        );
    }
    for m in LAYERS.iter().flat_map(|l| l.iter()) {
        assert!(
            top.contains(m),
            "LAYERS names `{m}`, which lib.rs does not declare"
        );
    }
}

#[test]
fn imports_run_down_the_layers() {
    let srcs = sources(&src_dir());
    let mut up = Vec::new();
    for (from, to) in edges(&srcs) {
        let (Some(a), Some(b)) = (from.first(), to.first()) else {
            continue; // lib.rs re-exports everything
        };
        if a == b {
            continue;
        }
        let (la, lb) = (layer_of(a).unwrap(), layer_of(b).unwrap());
        if lb >= la {
            up.push(format!(
                "{} -> {} (layer {la} -> {lb})",
                show(&from),
                show(&to)
            ));
        }
    }
    assert!(
        up.is_empty(),
        "imports that do not run down the layers:\n{}",
        up.join("\n")
    );
}

#[test]
fn no_import_circle_between_files() {
    let srcs = sources(&src_dir());
    let e: BTreeSet<(ModPath, ModPath)> = edges(&srcs)
        .into_iter()
        .filter(|(a, _)| !a.is_empty())
        .collect();
    if let Some(c) = find_cycle(&e) {
        let names: Vec<String> = c.iter().map(show).collect();
        panic!("import circle: {} -> {}", names.join(" -> "), names[0]);
    }
}

#[test]
fn readme_states_the_layers() {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let text = fs::read_to_string(&readme).unwrap();
    let line: Vec<String> = LAYERS.iter().map(|l| l.join(", ")).collect();
    let line = format!("Engine layers, bottom to top: {}.", line.join(" < "));
    assert!(
        text.lines().any(|l| l.trim() == line),
        "README.md's architecture screen must hold the line\n{line}"
    );
}

// The reader itself, on inputs whose answer is known.

#[test]
fn use_trees_expand() {
    let got = expand_use("crate::{a::B, c::{d, e::F as G}, self}");
    assert_eq!(
        got,
        [
            "crate::a::B",
            "crate::c::d",
            "crate::c::e::FasG",
            "crate::self"
        ]
    );
    let text = "use super::x::Y;\nfn f() { crate::z::w(); }\n// use crate::nope;\n";
    let paths = named_paths(&strip_comments(text));
    assert_eq!(paths, ["super::x::Y", "crate::z::w"]);
}

#[test]
fn test_items_are_left_out() {
    let text =
        "use crate::a;\n#[cfg(test)]\nmod tests {\n use crate::b;\n}\n#[cfg(test)]\nmod more;\n";
    let kept = strip_test_items(text);
    assert!(kept.contains("crate::a") && !kept.contains("crate::b") && !kept.contains("more"));
}

#[test]
fn circles_are_found() {
    let e: BTreeSet<(u8, u8)> = [(1, 2), (2, 3), (3, 1), (3, 4)].into_iter().collect();
    let c = find_cycle(&e).unwrap();
    assert_eq!(c.len(), 3);
    let acyclic: BTreeSet<(u8, u8)> = [(1, 2), (2, 3), (1, 3)].into_iter().collect();
    assert!(find_cycle(&acyclic).is_none());
}
