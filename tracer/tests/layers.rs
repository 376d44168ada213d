//! The layers of `tracer/src` hold: each top-level module imports only
//! modules of its own layer or below (docs/architecture.md draws the same
//! order), and no files import each other in a circle.
//!
//! Read from the source text: every `use crate::...` (grouped imports
//! flattened) and every `crate::a::b` path written inline, resolved to the
//! file that defines the module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom to top. A module may use its own layer and the layers before it.
const LAYERS: &[&[&str]] = &[
    &["units", "text", "error", "log"],
    &["model"],
    &["catalogue"],
    &["cli"],
    &["config"],
    &["host"],
    &["json"],
    &["cache"],
    &["graphs"],
    &["names"],
    &["lt"],
    &["nccl"],
    &["stacks"],
    &["schema"],
    &["probes"],
    &["budget"],
    &["decode"],
    &["gpu"],
    &["session"],
    &["summary"],
    &["outputs"],
    &["read"],
    &["tui"],
    &["commands"],
];

/// Files allowed to import from anywhere: the crate's root and entry point.
const ROOTS: &[&str] = &["lib.rs", "main.rs"];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `a/b/mod.rs` and `a/b.rs` are the module `a::b`.
fn module_of(rel: &str) -> Vec<String> {
    let stem = rel.strip_suffix(".rs").unwrap_or(rel);
    let mut parts: Vec<String> = stem.split('/').map(str::to_string).collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Splits `a, b::{c, d}` at the commas outside braces.
fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// Every path a use tree names, flattened.
fn flatten(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
    for item in split_top(tree) {
        if let Some(open) = item.find('{') {
            let head = item[..open].trim_end_matches("::");
            let inner = &item[open + 1..item.rfind('}').unwrap_or(item.len())];
            let mut p = prefix.to_vec();
            p.extend(
                head.split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            );
            flatten(&p, inner, out);
        } else {
            let item = item.split(" as ").next().unwrap_or(item).trim();
            let mut p = prefix.to_vec();
            p.extend(
                item.split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            );
            out.push(p);
        }
    }
}

/// The crate paths a file names (without the leading `crate`), tests left out.
fn crate_paths(text: &str) -> Vec<Vec<String>> {
    // Unit tests may reach anything; they are not part of the layering.
    let body = match text.find("#[cfg(test)]") {
        Some(at) => &text[..at],
        None => text,
    };
    let flat: String = body
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    // Use statements first, then blanked out so the inline scan below sees
    // only paths written in code.
    let mut code = String::with_capacity(flat.len());
    let mut rest = flat.as_str();
    while let Some(at) = rest.find("use ") {
        let before = rest[..at].chars().last();
        code.push_str(&rest[..at]);
        rest = &rest[at + 4..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            code.push_str("use ");
            continue;
        }
        let end = rest.find(';').unwrap_or(rest.len());
        let tree: String = rest[..end].split_whitespace().collect::<Vec<_>>().join(" ");
        if tree.starts_with("crate::") {
            flatten(&[], &tree, &mut out);
        }
        rest = &rest[end..];
    }
    code.push_str(rest);
    let flat = code;
    // Inline paths: crate::a::b written in code.
    let bytes = flat.as_bytes();
    let mut i = 0;
    while let Some(at) = flat[i..].find("crate::") {
        let start = i + at;
        let prev = start.checked_sub(1).map(|p| bytes[p]);
        i = start + 7;
        if prev.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':' || c == b'$') {
            continue;
        }
        let tail: String = flat[start..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        out.push(
            tail.split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
        );
    }
    out.into_iter()
        .filter(|p| p.first().is_some_and(|s| s == "crate"))
        .map(|p| p[1..].to_vec())
        .collect()
}

fn layer_of(top: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&top))
}

struct Crate {
    /// Module path -> file (relative to src).
    files: BTreeMap<Vec<String>, String>,
    /// File -> the files it imports.
    edges: BTreeMap<String, BTreeSet<String>>,
}

fn read_crate() -> Crate {
    let src = src_dir();
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let mut files = BTreeMap::new();
    let mut texts = BTreeMap::new();
    for p in &paths {
        let rel = p
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .into_owned();
        files.insert(module_of(&rel), rel.clone());
        texts.insert(rel, std::fs::read_to_string(p).expect("read source"));
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, text) in &texts {
        let to = edges.entry(rel.clone()).or_default();
        for path in crate_paths(text) {
            // The longest prefix that is a file module.
            let target = (1..=path.len())
                .rev()
                .find_map(|n| files.get(&path[..n]))
                .cloned();
            if let Some(t) = target {
                if &t != rel {
                    to.insert(t);
                }
            }
        }
    }
    Crate { files, edges }
}

#[test]
fn every_top_level_module_has_a_layer() {
    let c = read_crate();
    let mut missing = BTreeSet::new();
    for module in c.files.keys() {
        if let Some(top) = module.first() {
            if layer_of(top).is_none() {
                missing.insert(top.clone());
            }
        }
    }
    assert!(missing.is_empty(), "modules not in LAYERS: {missing:?}");
}

#[test]
fn modules_import_only_their_layer_and_those_below() {
    let c = read_crate();
    let mut wrong = Vec::new();
    for (from, tos) in &c.edges {
        if ROOTS.contains(&from.as_str()) {
            continue;
        }
        let top = |f: &str| module_of(f).first().cloned().unwrap_or_default();
        let (ft, fl) = (top(from), layer_of(&top(from)));
        for to in tos {
            let tt = top(to);
            if let (Some(fl), Some(tl)) = (fl, layer_of(&tt)) {
                if tl > fl {
                    wrong.push(format!("{from} ({ft}) imports {to} ({tt}), a layer above"));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} imports run up:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn no_files_import_each_other_in_a_circle() {
    let c = read_crate();
    // Tarjan's strongly connected components.
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        circles: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        let edges = s.edges;
        for w in edges.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                comp.push(w);
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.circles.push(comp);
            }
        }
    }
    let mut s = State {
        edges: &c.edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        circles: Vec::new(),
    };
    for v in c.edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    let text: Vec<String> = s.circles.iter().map(|c| c.join(" -> ")).collect();
    assert!(
        text.is_empty(),
        "{} circles:\n{}",
        text.len(),
        text.join("\n")
    );
}

#[test]
fn the_reader_of_use_lines_finds_what_it_should() {
    let text = "use crate::a::{b::C, d};\nuse std::x;\nfn f() { crate::e::f(); }\n";
    let mut paths = crate_paths(text);
    paths.sort();
    assert_eq!(
        paths,
        vec![
            vec!["a".to_string(), "b".into(), "C".into()],
            vec!["a".into(), "d".into()],
            vec!["e".into(), "f".into()],
        ]
    );
}
