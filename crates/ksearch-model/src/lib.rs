//! The model: what a kernel problem and a kernel are, as data. A task (`task`: shapes, dtypes, workloads,
//! roofline formulas), a candidate and its plan (`candidate`: kernels, buffers, launches, tunables, `when`
//! dispatch), the expression language they share (`expr`), element types (`dtype`), targets (`target`),
//! and the small pieces every layer above needs: C++ source reading and the lossless lexer (`cpplex`),
//! file-name and include rules (`names`), the CUDA/Metal type names that differ (`dialect`), and OS
//! randomness (`rng`).
//!
//! Architecture invariants:
//! - No I/O beyond reading a task or candidate folder (and `Candidate::write_dir` into a folder it is handed);
//!   no processes, no network, no database. Everything here but `rng`'s OS randomness is deterministic
//!   given its files.
//! - Nothing here knows of evaluation, searching, the store, the LLM or the command line: this crate
//!   depends on no other ksearch crate.
//! - Values are typed and validated on load: a `Task` or `Candidate` that exists has passed its checks,
//!   and a load error names the file, the field and the fix.

pub mod candidate;
pub mod cpplex;
pub mod dialect;
pub mod dtype;
pub mod expr;
pub mod names;
pub mod rng;
pub mod target;
pub mod task;
