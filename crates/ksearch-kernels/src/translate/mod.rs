//! `ksearch translate`: CUDA kernels → MLX candidates. The analyzer (`analyze.rs`) reads a `.cu` file
//! with tree-sitter-cuda and records, per `__global__` kernel, its parameters and the constructs it
//! uses, with a short brief of how it maps to MLX. The translator (`emit.rs`) rewrites the common
//! subset into a candidate folder for `mlx-metal` or `mlx-cuda` (plan.toml + body-only sources).
//! Whatever it cannot translate is reported with a coded diagnostic (`rules.toml`, documented in
//! docs/translate.md) and marked `// TODO(Txxx)` in the output, never dropped silently.

mod analyze;
mod candidate;
mod emit;
mod groups;
pub mod includes;
mod launch;
mod macros;
mod ptx;
mod storage;

pub use analyze::{Analysis, KernelAnalysis, Param, ParamRole, SharedArray, analyze};
pub use candidate::translate_candidate;
pub use emit::{Translation, translate};

use ksearch_model::target::Target;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

#[derive(Debug, thiserror::Error)]
pub enum TranslateError {
    #[error("{}: cannot read: {err}", file.display())]
    Read { file: PathBuf, err: std::io::Error },
    #[error("{}: cannot write: {err}", file.display())]
    Write { file: PathBuf, err: std::io::Error },
    #[error(
        "{}: no `__global__` kernel found; translate needs a .cu file that defines at least one (T002)",
        file.display()
    )]
    NoKernel { file: PathBuf },
    #[error("{}: target {target} is not a translation target; use --to mlx-metal or --to mlx-cuda", file.display())]
    BadTarget { file: PathBuf, target: Target },
    #[error("{0}")]
    Includes(String),
    /// A cuda candidate folder that cannot be translated as one (not loadable, another target).
    #[error("{0}")]
    Candidate(String),
    #[error("{}: the translated plan does not validate: {message}", file.display())]
    Plan { file: PathBuf, message: String },
    #[error(
        "{}:{line}: code nested {depth} levels deep (the translator handles up to {MAX_NESTING}); split the expression or the blocks",
        file.display()
    )]
    TooDeep {
        file: PathBuf,
        line: usize,
        depth: usize,
    },
}

/// Deepest syntax tree the translator walks: its analysis and rewriting recurse once per level, so deeper
/// code (generated, or hostile) is refused with an error rather than overflowing the stack.
pub const MAX_NESTING: usize = 1500;
/// Stack of the translation's thread: 1500 levels took under 8 MiB; four times that.
const TRANSLATE_STACK: usize = 32 << 20;

/// Parses `src` and hands the tree to `work`, both on a thread whose stack fits MAX_NESTING levels of the
/// analysis's recursion (whatever thread calls: test threads get 2 MiB); Err((depth, line)) for deeper code.
pub(crate) fn with_tree<T: Send>(
    src: &str,
    work: impl FnOnce(&tree_sitter::Tree) -> T + Send,
) -> Result<T, (usize, usize)> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(TRANSLATE_STACK)
            .spawn_scoped(s, || {
                let tree = analyze::parse(src);
                let (depth, line) = deepest(&tree);
                if depth > MAX_NESTING {
                    return Err((depth, line));
                }
                Ok(work(&tree))
            })
            .expect("a thread for the translation")
            .join()
    })
    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// How deep `src` nests (its syntax tree's depth) and the line of its deepest node.
pub fn nesting(src: &str) -> (usize, usize) {
    deepest(&analyze::parse(src))
}

/// The deepest node of `tree` (its depth and 1-based line), walked without recursion.
fn deepest(tree: &tree_sitter::Tree) -> (usize, usize) {
    let mut cursor = tree.walk();
    let (mut depth, mut best, mut line) = (0usize, 0usize, 1usize);
    loop {
        if depth > best {
            best = depth;
            line = cursor.node().start_position().row + 1;
        }
        if cursor.goto_first_child() {
            depth += 1;
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return (best, line);
            }
            depth -= 1;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Diagnostic {
    pub code: String,
    pub severity: Severity,
    /// 1-based line in the .cu file (0 when it concerns the whole file), or in `file`.
    pub line: usize,
    /// The header the line is in, when it is one the translation read in (crates/ksearch-kernels/src/translate/includes.rs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    pub message: String,
}

/// One entry of `rules.toml` `[[code]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeInfo {
    pub code: String,
    pub title: String,
    pub metal: Severity,
    pub cuda: Severity,
    pub fix: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    pub code: Vec<CodeInfo>,
    pub metal_functions: BTreeMap<String, String>,
    pub metal_operators: BTreeMap<String, String>,
    pub concepts: BTreeMap<String, Vec<String>>,
}

/// The translator's data (embedded; checked by the tests, so a parse failure is a build defect).
pub fn rules() -> &'static Rules {
    static R: OnceLock<Rules> = OnceLock::new();
    R.get_or_init(|| {
        toml::from_str(include_str!("rules.toml")).unwrap_or_else(|e| {
            panic!("crates/ksearch-kernels/src/translate/rules.toml is invalid: {e}")
        })
    })
}

pub fn code_info(code: &str) -> &'static CodeInfo {
    rules()
        .code
        .iter()
        .find(|c| c.code == code)
        .unwrap_or_else(|| panic!("diagnostic code {code} is missing from rules.toml"))
}

/// A diagnostic with the severity its code has on `target`; the message is the code's title plus `detail`.
pub fn diag(
    target: Target,
    code: &str,
    line: usize,
    kernel: Option<&str>,
    detail: impl AsRef<str>,
) -> Diagnostic {
    let info = code_info(code);
    let severity = if target == Target::MlxCuda {
        info.cuda
    } else {
        info.metal
    };
    let detail = detail.as_ref();
    Diagnostic {
        code: code.to_string(),
        severity,
        line,
        file: None,
        kernel: kernel.map(str::to_string),
        message: if detail.is_empty() {
            format!("{}; {}", info.title, info.fix)
        } else {
            format!("{}: {detail}; {}", info.title, info.fix)
        },
    }
}

/// Conversion statistics: every construct occurrence the translator met, and what became of it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// Lines of the .cu file, and of its kernels (`__global__` and `__device__` functions).
    pub lines: usize,
    pub kernel_lines: usize,
    pub kernels: usize,
    pub seen: usize,
    pub translated: usize,
    pub not_translated: usize,
    /// construct → {seen, translated, not_translated}.
    pub constructs: BTreeMap<String, ConstructCount>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ConstructCount {
    pub seen: usize,
    pub translated: usize,
    pub not_translated: usize,
}

impl Stats {
    /// Another file's counts added to these (a candidate's kernel files translated one by one).
    pub fn add(&mut self, other: Stats) {
        self.lines += other.lines;
        self.kernel_lines += other.kernel_lines;
        self.kernels += other.kernels;
        self.seen += other.seen;
        self.translated += other.translated;
        self.not_translated += other.not_translated;
        for (name, c) in other.constructs {
            let mine = self.constructs.entry(name).or_default();
            mine.seen += c.seen;
            mine.translated += c.translated;
            mine.not_translated += c.not_translated;
        }
    }

    pub fn record(&mut self, construct: &str, translated: bool) {
        let c = self.constructs.entry(construct.to_string()).or_default();
        c.seen += 1;
        self.seen += 1;
        if translated {
            c.translated += 1;
            self.translated += 1;
        } else {
            c.not_translated += 1;
            self.not_translated += 1;
        }
    }
}

/// Reads `file`, analyses and translates it for `target`; its local headers are found next to it.
pub fn translate_file(file: &Path, target: Target) -> Result<Translation, TranslateError> {
    translate_file_with(file, target, &[])
}

/// `translate_file`, with local headers also searched for in `dirs` (`-I`).
pub fn translate_file_with(
    file: &Path,
    target: Target,
    dirs: &[PathBuf],
) -> Result<Translation, TranslateError> {
    translate_file_roles(file, target, dirs, None)
}

/// `translate_file_with`, the parameters of the kernels named in `roles` taken as it says (a plan's launch).
pub(crate) fn translate_file_roles(
    file: &Path,
    target: Target,
    dirs: &[PathBuf],
    roles: Option<&emit::Roles>,
) -> Result<Translation, TranslateError> {
    if !target.is_mlx() {
        return Err(TranslateError::BadTarget {
            file: file.to_path_buf(),
            target,
        });
    }
    let src = ksearch_model::cpplex::read_source(file).map_err(|err| TranslateError::Read {
        file: file.to_path_buf(),
        err,
    })?;
    let flat = includes::flatten(file, &file.display().to_string(), &src, dirs)?;
    let src = macros::expand(&flat.text).into_owned();
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "kernel".into());
    let mut t = with_tree(&src, |tree| {
        emit::translate_tree(tree, &src, &stem, target, Some(&flat), roles)
    })
    .map_err(|(depth, line)| {
        let (header, line) = flat.origin(line);
        TranslateError::TooDeep {
            file: header.map_or_else(|| file.to_path_buf(), PathBuf::from),
            line,
            depth,
        }
    })?;
    // Lines of the flattened text, named by the file they came from (a message's own "line N" too).
    static LINE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let line_ref =
        LINE.get_or_init(|| regex::Regex::new(r"\bline (\d+)").expect("a valid pattern"));
    for d in t.diagnostics.iter_mut() {
        let (header, line) = flat.origin(d.line);
        d.file = header.map(str::to_string);
        d.line = line;
        if !flat.headers.is_empty() {
            d.message = line_ref
                .replace_all(&d.message, |c: &regex::Captures| {
                    match flat.origin(c[1].parse().unwrap_or(0)) {
                        (Some(h), l) => format!("line {l} of {h}"),
                        (None, l) => format!("line {l}"),
                    }
                })
                .into_owned();
        }
    }
    // What the parser missed in a header (its API macros, host code) is one warning per header: most of
    // it never reaches the translation.
    let mut unparsed: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    t.diagnostics.retain(|d| match (&d.file, d.code.as_str()) {
        (Some(f), "T001") => {
            let e = unparsed.entry(f.clone()).or_insert((d.line, 0));
            e.1 += 1;
            false
        }
        _ => true,
    });
    for (f, (first, n)) in unparsed {
        let mut d = diag(
            target,
            "T001",
            first,
            None,
            format!(
                "{n} place(s) in this header, the first here (the translation carries only what its kernels use)"
            ),
        );
        d.file = Some(f);
        t.diagnostics.push(d);
    }
    if !flat.headers.is_empty() {
        // Lines in the JSON are the translated file's own; a header's are in its diagnostics.
        let own = |l: usize| matches!(flat.origin(l), (None, _));
        t.analysis.parse_error_lines = t
            .analysis
            .parse_error_lines
            .iter()
            .filter(|l| own(**l))
            .map(|l| flat.origin(*l).1)
            .collect();
        for l in t.analysis.launches.iter_mut() {
            l.line = flat.origin(l.line).1;
        }
        for k in t.analysis.kernels.iter_mut() {
            k.line = flat.origin(k.line).1;
            k.end_line = flat.origin(k.end_line).1;
            k.brief = analyze::brief(k, target);
        }
    }
    if t.analysis.kernels.is_empty() {
        return Err(TranslateError::NoKernel {
            file: file.to_path_buf(),
        });
    }
    if let Some(c) = &t.candidate {
        c.validate().map_err(|message| TranslateError::Plan {
            file: file.to_path_buf(),
            message,
        })?;
    }
    Ok(t)
}

/// The brief of every kernel in `src`, for the LLM's context (empty when the file has no kernel).
pub fn brief_for_prompt(src: &str, target: Target) -> String {
    let src = &*macros::expand(src);
    let Ok(a) = with_tree(src, |tree| analyze::analyze_tree(tree, src)) else {
        return format!("(the CUDA source nests deeper than {MAX_NESTING} levels: not analysed)\n");
    };
    let mut out = String::new();
    for k in &a.kernels {
        out.push_str(&analyze::brief(k, target));
        out.push('\n');
    }
    out
}

/// The readable report of `ksearch translate`: each kernel's brief, the diagnostics, the stats.
pub fn report(t: &Translation, file: &Path) -> String {
    let mut s = String::new();
    for k in &t.analysis.kernels {
        s.push_str(&k.brief);
        s.push('\n');
    }
    for d in &t.diagnostics {
        s.push_str(&format!(
            "{}:{}: {} {}: {}\n",
            d.file
                .as_deref()
                .map_or_else(|| file.display().to_string(), str::to_string),
            d.line,
            d.severity.name(),
            d.code,
            d.message
        ));
    }
    s.push_str(&format!(
        "{} kernel(s), {} lines; constructs: {} seen, {} translated, {} not translated\n",
        t.stats.kernels, t.stats.lines, t.stats.seen, t.stats.translated, t.stats.not_translated
    ));
    s
}

/// The dtype MLX would pass for a CUDA element type (`const` and qualifiers ignored).
pub fn dtype_of(elem: &str) -> Option<ksearch_model::dtype::Dtype> {
    use ksearch_model::dtype::Dtype;
    let t = elem
        .replace("const", "")
        .replace("volatile", "")
        .replace("__restrict__", "");
    if let Some(d) = ksearch_model::dialect::dtype_of(t.trim()) {
        return Some(d);
    }
    Some(match t.trim() {
        "float" => Dtype::Float32,
        "bfloat16" => Dtype::Bfloat16,
        "double" => Dtype::Float64,
        "int" | "int32_t" => Dtype::Int32,
        "unsigned" | "unsigned int" | "uint" | "uint32_t" => Dtype::Uint32,
        // No unsigned 64-bit dtype: sizes and counts, as plan scalars (int32) or int64 tensors.
        "long" | "long long" | "int64_t" | "size_t" | "uint64_t" | "unsigned long"
        | "unsigned long long" => Dtype::Int64,
        "char" | "int8_t" | "signed char" => Dtype::Int8,
        "unsigned char" | "uint8_t" => Dtype::Uint8,
        "short" | "int16_t" | "unsigned short" | "uint16_t" => Dtype::Int16,
        "bool" => Dtype::Bool,
        _ => return None,
    })
}

impl Translation {
    /// Every tensor of the plan with the dtype its CUDA parameter implies (float32 when the type is a
    /// template parameter or unknown), for checking the candidate without a task.
    pub fn tensor_dtypes(&self) -> BTreeMap<String, ksearch_model::dtype::Dtype> {
        let mut out = BTreeMap::new();
        for k in &self.analysis.kernels {
            for p in k.params.iter().filter(|p| p.role != ParamRole::Scalar) {
                let d = dtype_of(&p.elem_type).unwrap_or(ksearch_model::dtype::Dtype::Float32);
                out.insert(p.name.clone(), d);
                if p.role == ParamRole::InOut {
                    out.insert(format!("{}_out", p.name), d);
                }
            }
        }
        out
    }
}

/// The prompt section for a task that supplies a CUDA kernel (`cuda_source` in task.toml): the
/// analyzer's brief of each kernel for an MLX target; empty otherwise.
pub fn task_brief(task: &ksearch_model::task::Task, target: Target) -> String {
    let Some(rel) = task.toml.cuda_source.as_deref() else {
        return String::new();
    };
    if !target.is_mlx() {
        return String::new();
    }
    let path = task.dir.join(rel);
    let briefs = match ksearch_model::cpplex::read_source(&path) {
        Ok(src) => brief_for_prompt(&src, target),
        Err(e) => return format!("(the task's CUDA kernel {rel} could not be read: {e})\n"),
    };
    if briefs.is_empty() {
        return String::new();
    }
    format!(
        "## The CUDA kernel this task comes from ({rel}), analysed\n\
         Port its ideas, not its syntax: `ksearch translate {rel} --to {target}` gives a mechanical start.\n{briefs}"
    )
}

/// Launches of one file whose Metal the checker also compiles (a compiler process each, about 50 ms); the
/// rest get its rules only, and a T031 note says so. A file of 35,000 kernels would otherwise take half an hour.
pub const COMPILE_CHECKED: usize = 256;

/// One launch's findings from the checker.
type Checked = Result<Vec<crate::check::Finding>, crate::check::CheckError>;

/// Runs the Metal checker (`ksearch check`) on every launch of a translated `mlx-metal` candidate, with the
/// dtypes the CUDA parameters imply (a checker run without a task would take every tensor as float32).
pub fn check_metal(
    t: &Translation,
) -> Result<Vec<crate::check::Finding>, crate::check::CheckError> {
    let Some(c) = t
        .candidate
        .as_ref()
        .filter(|c| c.plan.target == Target::MlxMetal)
    else {
        return Ok(Vec::new());
    };
    let dtypes = t.tensor_dtypes();
    let dtype = |n: &str| {
        dtypes
            .get(n)
            .copied()
            .unwrap_or(ksearch_model::dtype::Dtype::Float32)
    };
    let check = |i: usize| -> Checked {
        let l = &c.plan.launch[i];
        let Some(k) = c.plan.kernel.iter().find(|k| k.name == l.kernel) else {
            return Ok(Vec::new());
        };
        let (spec, threadgroup) = crate::check::launch_spec(c, l, dtype);
        let info = crate::check::LaunchInfo {
            threadgroup,
            overshoot: None,
            plan_at: ("plan.toml".into(), 0),
        };
        // As MLX would be handed them (compacted: same lines, no comments).
        let header_text = crate::codegen::mlx_header(c, k);
        let header = k
            .header
            .as_ref()
            .map(|h| (h.as_str(), header_text.as_str()));
        crate::check::check_body_with(
            &spec,
            header,
            &k.source,
            &crate::codegen::mlx_source(c, k),
            &info,
            i < COMPILE_CHECKED,
        )
    };
    // Launches are checked on every core (each compile is a process of its own), findings kept in order.
    let n = c.plan.launch.len();
    let workers = std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .clamp(1, n.max(1));
    let mut results: Vec<(usize, Checked)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let check = &check;
                // The rules recurse over nested blocks: the translation's own stack size.
                std::thread::Builder::new()
                    .stack_size(TRANSLATE_STACK)
                    .spawn_scoped(s, move || {
                        (w..n)
                            .step_by(workers)
                            .map(|i| (i, check(i)))
                            .collect::<Vec<_>>()
                    })
                    .expect("a checker thread")
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a checker thread"))
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);
    let mut out = Vec::new();
    for (_, r) in results {
        out.extend(r?);
    }
    Ok(out)
}

/// `translate_file` (or, for a folder, `translate_candidate`: a cuda candidate under its own plan) plus the
/// Metal checker's findings as T005 diagnostics (mlx-metal only).
pub fn translate_and_check(
    file: &Path,
    target: Target,
    dirs: &[PathBuf],
) -> Result<Translation, TranslateError> {
    let t = if file.is_dir() {
        translate_candidate(file, target)?
    } else {
        translate_file_with(file, target, dirs)?
    };
    metal_checked(t, target)
}

/// A translation for mlx-metal with the Metal checker's findings on what it wrote.
fn metal_checked(mut t: Translation, target: Target) -> Result<Translation, TranslateError> {
    if target != Target::MlxMetal || t.candidate.is_none() {
        return Ok(t);
    }
    match check_metal(&t) {
        Ok(findings) => {
            for f in findings {
                let severity = match f.severity {
                    crate::check::Severity::Error => Severity::Error,
                    crate::check::Severity::Warning => Severity::Warning,
                };
                let mut d = diag(
                    target,
                    "T005",
                    0,
                    None,
                    format!("{}:{}: {} {}", f.file, f.line, f.code, f.message),
                );
                d.severity = severity;
                t.diagnostics.push(d);
            }
        }
        Err(e) => {
            t.diagnostics
                .push(diag(target, "T006", 0, None, e.to_string()));
            return Ok(t);
        }
    }
    let launches = t.candidate.as_ref().map_or(0, |c| c.plan.launch.len());
    if launches > COMPILE_CHECKED {
        t.diagnostics.push(diag(
            target,
            "T031",
            0,
            None,
            format!("compiled the first {COMPILE_CHECKED} of {launches} launches"),
        ));
    }
    Ok(t)
}
