//! Kernel source, read and written: the CUDA analysis and its translation to MLX candidates (`translate`),
//! the Metal checker (`check`: a Metal source or mlx-metal candidate compiled against a shim, plus rules),
//! back-translation of Metal to CUDA for the H200 (`back_translate`), the CUDA-to-MLX knowledge rendered
//! into prompts (`knowledge`), the text each target's compiler is handed besides a candidate's files
//! (`codegen`), local includes found as a compiler finds them (`includes`), and the confinement of the compiler `check` runs (`jail`).
//!
//! Architecture invariants:
//! - Depends on the model (`ksearch_model`) only: nothing here evaluates, searches, stores or asks an LLM.
//! - Knowledge and rules are data files (`knowledge/*.toml`, `translate/rules.toml`,
//!   `check/cuda_leftovers.txt`, the Metal shim), embedded at build time; the code reads them, never
//!   restates them.
//! - Every compiler this crate runs on a user's or an LLM's source runs jailed (`jail`): unprivileged,
//!   seeing only its scratch folder and the system's headers, killed with its evaluation.
//! - Translation and checking are pure functions of their input files: the same source gives the same
//!   candidate, diagnostics and verdict.

pub mod back_translate;
pub mod check;
pub mod codegen;
pub mod includes;
pub mod jail;
pub mod knowledge;
pub mod translate;
