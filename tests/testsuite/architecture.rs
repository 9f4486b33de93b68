//! The layering ARCHITECTURE.md describes, checked on the sources: cargo already refuses a cycle between
//! crates, these tests refuse one between the top-level modules of a crate (which cargo allows) and an
//! upward use of the application from a lower crate.

use crate::common::repo;
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A file's text without its unit-test module (tests may reach anywhere) and without comments.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The graph of one crate's top-level modules: module -> the modules it names as `crate::X`.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let uses = Regex::new(r"\bcrate::(\w+)").unwrap();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let top = top.trim_end_matches(".rs").to_string();
        if top == "lib" || top == "main" {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(&f).unwrap());
        let entry = graph.entry(top.clone()).or_default();
        for c in uses.captures_iter(&code) {
            if c[1] != *top {
                entry.insert(c[1].to_string());
            }
        }
    }
    graph
}

/// One cycle of the graph if it has any (depth-first search, the path kept).
fn a_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        v: &str,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(v.to_string(), 1);
        path.push(v.to_string());
        for w in g.get(v).into_iter().flatten() {
            match state.get(w.as_str()) {
                Some(1) => {
                    let start = path.iter().position(|p| p == w).unwrap();
                    let mut cycle = path[start..].to_vec();
                    cycle.push(w.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(g, w, state, path) {
                        return Some(c);
                    }
                }
            }
        }
        path.pop();
        state.insert(v.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for v in graph.keys() {
        if !state.contains_key(v.as_str())
            && let Some(c) = visit(graph, v, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

const CRATES: [&str; 3] = [
    "src",
    "crates/ksearch-model/src",
    "crates/ksearch-kernels/src",
];

#[test]
fn no_crate_has_a_cycle_between_its_modules() {
    for src in CRATES {
        let graph = module_graph(&repo().join(src));
        assert!(graph.len() > 4, "{src}: too few modules read: {graph:?}");
        if let Some(cycle) = a_cycle(&graph) {
            panic!(
                "{src}: the modules {} use each other in a cycle; move what both need into a module \
                 below them (ARCHITECTURE.md, Layers)",
                cycle.join(" -> ")
            );
        }
    }
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let g: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]
        .iter()
        .map(|(k, v)| (k.to_string(), BTreeSet::from([v.to_string()])))
        .collect();
    let c = a_cycle(&g).expect("a -> b -> c -> a");
    assert_eq!(c.first(), c.last());
    assert_eq!(c.len(), 4);
    let acyclic: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c")]
        .iter()
        .map(|(k, v)| (k.to_string(), BTreeSet::from([v.to_string()])))
        .collect();
    assert_eq!(a_cycle(&acyclic), None);
}

#[test]
fn the_model_names_no_other_ksearch_crate_and_the_kernels_only_the_model() {
    let upward = Regex::new(r"\b(ksearch_kernels|ksearch)::").unwrap();
    let app = Regex::new(r"\bksearch::").unwrap();
    for (src, pattern) in [
        ("crates/ksearch-model/src", &upward),
        ("crates/ksearch-kernels/src", &app),
    ] {
        let mut files = Vec::new();
        rust_files(&repo().join(src), &mut files);
        assert!(!files.is_empty(), "{src}: no sources");
        for f in files {
            let code = code_of(&std::fs::read_to_string(&f).unwrap());
            assert!(
                !pattern.is_match(&code),
                "{}: names a crate above its own (ARCHITECTURE.md, Layers)",
                f.display()
            );
        }
    }
}

#[test]
fn the_world_model_core_uses_nothing_of_the_application_but_units() {
    let uses = Regex::new(r"\bcrate::(\w+)(::\w+)?(::\w+)?").unwrap();
    for core in ["tree", "ops", "select", "wire"] {
        let f = repo().join(format!("src/search/world_model/{core}.rs"));
        let code = code_of(&std::fs::read_to_string(&f).unwrap());
        for c in uses.captures_iter(&code) {
            let path = c[0].to_string();
            assert!(
                path.starts_with("crate::search::world_model") || &c[1] == "units",
                "{}: uses `{path}`; the world model's core stays free of the application \
                 (ARCHITECTURE.md, Invariants)",
                f.display()
            );
        }
    }
}
