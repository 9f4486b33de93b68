//! ksearch, the application: evaluation (`eval`, its worker `worker` and `protocol`), the store, the LLM
//! clients, the strategies and the runner (`search`), reports, export and the command line. It sits on
//! `ksearch-kernels` (translate, check, back-translate, knowledge) and `ksearch-model` (task, candidate,
//! expr, dtype, target); ARCHITECTURE.md has the code map.
//!
//! Architecture invariants:
//! - Only `store` writes the database, and every finished evaluation is committed before the next starts.
//! - Only `worker` starts the Python worker, and only through `eval` does anything ask it for work; Rust
//!   owns every deadline.
//! - JSON only at the edges: LLM replies (`reply`, `search::world_model::wire`), the worker's protocol
//!   (`protocol`), `--json` output; inside, values are typed (`run_result`: the run's result, status and phases).
//! - The world model's core (`search::world_model::{tree, ops, select, wire}`) uses nothing of the
//!   application but `units` (how a time reads): it is tested without a worker, a store or an LLM.
//! - No module cycle in any crate (`tests/testsuite/architecture.rs`).

// The lower crates' modules, re-exported under their old paths: `crate::task` here and `ksearch::task` in
// the tests name the one module in `ksearch-model` (likewise for `ksearch-kernels`).
pub use ksearch_kernels::{back_translate, check, codegen, jail, knowledge, translate};
pub use ksearch_model::{candidate, cpplex, dialect, dtype, expr, names, rng, target, task};

pub mod assertions;
pub mod builtin;
pub mod cli;
pub mod clock;
pub mod defaults;
pub mod devices;
pub mod eval;
pub mod export;
pub mod gc;
pub mod llm;
pub mod peaks;
pub mod progress;
pub mod prompts;
pub mod protocol;
pub mod pyenv;
pub mod reply;
pub mod report;
pub mod run_result;
pub mod sandbox;
pub mod scripted;
pub mod search;
pub mod serve;
pub mod store;
pub mod units;
pub mod worker;
