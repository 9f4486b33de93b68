//! ksearch: search for fast kernels with honest evaluation. See ARCHITECTURE.md for the code map.

pub mod assertions;
pub mod back_translate;
pub mod builtin;
pub mod candidate;
pub mod check;
pub mod cli;
pub mod cpplex;
pub mod dtype;
pub mod eval;
pub mod export;
pub mod expr;
pub mod knowledge;
pub mod llm;
pub mod prompts;
pub mod pyenv;
pub mod reply;
pub mod report;
pub mod rng;
pub mod sandbox;
pub mod search;
pub mod store;
pub mod target;
pub mod task;
pub mod translate;
pub mod worker;
