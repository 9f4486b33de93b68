//! The integration tests, as one binary (the layout cargo's own tests use): each former `tests/X.rs`
//! is the module `X` here, and `common` holds the helpers they share. One binary is compiled and linked
//! once, where one per file linked the whole crate and its dependencies again for each.
//!
//! `cargo test --test testsuite` runs them all, `cargo test --test testsuite adversarial::` the tests
//! of one module (a filter matches any part of a test's path, so `translate::` picks `back_translate::`
//! too; add `--skip back_translate::` where that matters).
//!
//! Every test shares this process: none may change the process's environment, current directory or
//! other process-wide state, or use a fixed path or port another test could use at the same time. What
//! a test needs in its environment it gives per command (`Command::env`) or per client
//! (`LlmConfig::env`).

// The length rule (clippy.toml) is for the product's functions: a test is one scenario read top to bottom.
#![allow(clippy::too_many_lines)]

mod common;

mod adversarial;
mod architecture;
mod back_translate;
mod check;
mod check_corpus;
mod cluster;
mod cuda_seeds_cpu;
mod cuda_target;
mod dashboard;
mod evaluation;
mod export;
mod fault_tolerance;
mod flags;
mod llama_e2e;
mod llm;
mod mlx_metal;
mod python_worker;
mod reply_fuzz;
mod runs;
mod sandbox;
mod translate;
mod translate_corpus;
mod wheel;
mod world_model;

/// A test file put in tests/ becomes a binary of its own again, and one put here but not declared
/// above is never compiled: both are caught here.
#[test]
fn every_test_file_is_a_module_of_this_one_binary() {
    let tests = common::repo().join("tests");
    let here = tests.join("testsuite");
    let stray: Vec<_> = std::fs::read_dir(&tests)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs") || p.join("main.rs").is_file())
        .filter(|p| *p != here)
        .collect();
    assert!(
        stray.is_empty(),
        "{stray:?}: put integration tests in tests/testsuite/ as modules of main.rs"
    );
    let main = std::fs::read_to_string(here.join("main.rs")).unwrap();
    for e in std::fs::read_dir(&here).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if name == "main" || !(path.is_dir() || path.extension().is_some_and(|x| x == "rs")) {
            continue;
        }
        assert!(
            main.lines().any(|l| l == format!("mod {name};")),
            "tests/testsuite/{name} is not declared in main.rs (`mod {name};`), so it never runs"
        );
    }
}
