//! `ksearch check`: catches on Linux what would fail on a Mac, for Metal kernels.
//!
//! A source is compiled with the system C++ compiler (`-fsyntax-only -std=c++17`) against a shim of the Metal
//! language (`metal/shim/`: address spaces, attributes, vector, `half`/`bfloat`, math, simd, barriers,
//! atomics, `simdgroup_matrix`), which catches syntax and type errors; rules then catch what the compiler
//! cannot see (threadgroup memory and size limits, barriers in divergent flow, CUDA leftovers, `double`,
//! missing bounds guards, clashes with MLX's injected names, recursion, ...). Every code is documented
//! in `docs/check.md`.
//!
//! Library API (what other commands call):
//! - [`check_source`]: a complete Metal file (with its `[[kernel]]` signature).
//! - [`check_candidate`]: a candidate folder (`target = "mlx-metal"`), its task found above it or given.
//! - [`check_loaded`]: an already loaded [`Candidate`] (what `eval` and `export` use).
//! - [`check_body`]: one kernel body with the launch MLX would make ([`signature::KernelSpec`]).
//! - [`has_errors`], [`render_text`], [`to_json`], [`summary`] to use the findings.
//!
//! Findings carry the file and line in the user's files: the generated signature and the shim are joined
//! with `#line` directives, so compiler messages point at the body or header line that caused them.

mod compile;
pub mod includes;
pub mod infer;
pub mod lex;
pub mod rules;
pub mod signature;
mod spaces;

use ksearch_model::candidate::{Candidate, CandidateError};
use ksearch_model::dtype::Dtype;
use ksearch_model::expr::Env;
use ksearch_model::target::Target;
use ksearch_model::task::Task;
use serde::Serialize;
use signature::{ATTRIBUTES, Input, KernelSpec, VARYING};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Metal's threadgroup memory limit (bytes) and thread limit per threadgroup.
pub const MAX_THREADGROUP_BYTES: u64 = 32768;
pub const MAX_THREADS: i64 = 1024;
/// Buffer arguments a Metal kernel can take.
pub const MAX_BUFFERS: usize = 31;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Finding {
    /// `M0xx`, see docs/check.md.
    pub code: String,
    pub severity: Severity,
    /// The file the line belongs to (a kernel source, a header, `plan.toml`).
    pub file: String,
    /// 1-based line in `file` (0: the file as a whole).
    pub line: usize,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("{}: {err}", file.display())]
    Io { file: PathBuf, err: std::io::Error },
    #[error(
        "no C++ compiler found (tried $KSEARCH_CXX, $CXX, c++, g++, clang++): install g++ or clang++, or set KSEARCH_CXX"
    )]
    NoCompiler,
    #[error(transparent)]
    Candidate(#[from] CandidateError),
    #[error("{0}")]
    Task(String),
    #[error(
        "{}: field `target`: `ksearch check` checks Metal kernels; this candidate's target is `{target}` (use a candidate with target = \"mlx-metal\")",
        file.display()
    )]
    NotMetal { file: PathBuf, target: String },
    #[error(
        "the C++ compiler failed without a diagnostic on the kernel (it runs confined: crates/ksearch-kernels/src/jail.rs): {0}"
    )]
    CompilerFailed(String),
    #[error("{0}")]
    Includes(String),
}

pub fn has_errors(f: &[Finding]) -> bool {
    f.iter().any(|f| f.severity == Severity::Error)
}

/// `file:line: severity[code]: message`, one finding per line.
pub fn render_text(f: &[Finding]) -> String {
    f.iter()
        .map(|f| {
            format!(
                "{}:{}: {}[{}]: {}\n",
                f.file, f.line, f.severity, f.code, f.message
            )
        })
        .collect()
}

/// The error findings as one message (for an evaluation that refuses the candidate).
pub fn summary(f: &[Finding]) -> String {
    let errors: Vec<Finding> = f
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .cloned()
        .collect();
    format!(
        "ksearch check found {} error(s) that would fail on a Mac:\n{}",
        errors.len(),
        render_text(&errors)
    )
}

pub fn to_json(target: &str, f: &[Finding]) -> serde_json::Value {
    serde_json::json!({
        "target": target,
        "errors": f.iter().filter(|f| f.severity == Severity::Error).count(),
        "warnings": f.iter().filter(|f| f.severity == Severity::Warning).count(),
        "findings": f,
    })
}

/// A launch as far as the rules need it.
#[derive(Debug, Clone, Default)]
pub struct LaunchInfo {
    /// The threadgroup extents, when known.
    pub threadgroup: Option<Vec<i64>>,
    /// Why the grid may hold threads past the data (a rounded-up extent), when it may.
    pub overshoot: Option<String>,
    /// Where findings about the plan go: (file, line).
    pub plan_at: (String, usize),
}

/// A launch's kernel as MLX would build it when no workload decides the sizes: tensor dtypes from
/// `dtype`, template ints from the tunables (1 for a name that is no tunable), and the threadgroup when
/// the tunables alone decide it. Used by `ksearch check` without a task and by `ksearch translate`.
pub fn launch_spec(
    c: &Candidate,
    l: &ksearch_model::candidate::Launch,
    dtype: impl Fn(&str) -> Dtype,
) -> (KernelSpec, Option<Vec<i64>>) {
    let params = c.params();
    let env: Env = params.iter().map(|(k, v)| (k.clone(), *v as f64)).collect();
    let mut inputs: Vec<Input> = l
        .inputs
        .iter()
        .map(|n| Input::Array {
            name: n.clone(),
            dtype: dtype(n),
            elements: None,
        })
        .collect();
    inputs.extend(l.scalars.iter().map(|s| Input::Scalar {
        name: s.0.src().to_string(),
    }));
    let mut template_ints: Vec<(String, i64)> = l
        .template
        .iter()
        .map(|t| (t.clone(), params.get(t).copied().unwrap_or(1)))
        .collect();
    template_ints.sort();
    let spec = KernelSpec {
        name: l.kernel.clone(),
        inputs,
        outputs: l.outputs.iter().map(|n| (n.clone(), dtype(n))).collect(),
        atomic_outputs: l.atomic_outputs,
        template_ints,
        template_types: l
            .type_args
            .iter()
            .map(|(a, tensor)| (a.clone(), dtype(tensor)))
            .collect(),
    };
    let threadgroup = l.threadgroup.as_ref().and_then(|tg| {
        tg.iter()
            .map(|e| e.0.eval_int(&env).ok())
            .collect::<Option<Vec<i64>>>()
    });
    (spec, threadgroup)
}

/// Checks one kernel body as MLX would compile it for `spec`. `header` is (file name, text).
pub fn check_body(
    spec: &KernelSpec,
    header: Option<(&str, &str)>,
    body_file: &str,
    body: &str,
    launch: &LaunchInfo,
) -> Result<Vec<Finding>, CheckError> {
    check_body_with(spec, header, body_file, body, launch, true)
}

/// `check_body`, with the compile step (a compiler process, tens of milliseconds) only when `compile`.
pub fn check_body_with(
    spec: &KernelSpec,
    header: Option<(&str, &str)>,
    body_file: &str,
    body: &str,
    launch: &LaunchInfo,
    compile: bool,
) -> Result<Vec<Finding>, CheckError> {
    let mut out = Vec::new();
    let lex::View {
        toks, directives, ..
    } = lex::view(body);
    let mut deep = Vec::new();
    deep.extend(too_deep(body_file, &toks));
    if let Some((hfile, htext)) = header {
        deep.extend(too_deep(hfile, &lex::view(htext).toks));
    }
    if !deep.is_empty() {
        return Ok(deep);
    }
    rules::text_rules(body_file, &toks, &directives, &mut out);
    let (helpers, constants, helper_code) = header_rules(header, &mut out);
    let params = spec.params(body);
    let (guarded, varying) = body_flow(
        spec, body_file, body, &toks, &params, helpers, constants, &mut out,
    );
    // A body that is one call of a helper holding the kernel (a translation) guards inside it; looked for
    // only where a guard is needed.
    let guarded = guarded
        || launch.overshoot.is_none()
        || helper_code
            .is_some_and(|(htoks, fns)| rules::guards_in_helpers(&toks, &varying, &htoks, &fns));
    launch_rules(spec, launch, &params, guarded, body_file, &mut out);
    if compile {
        compile_body(spec, header, body_file, body, &toks, &mut out)?;
    }
    Ok(finish(out))
}

/// What a header gives the body's flow: its helpers (the address space of each parameter), its `constant`
/// names, and its tokens and functions (for guards inside helpers).
type HeaderFacts = (
    HashMap<String, Vec<Option<String>>>,
    Vec<String>,
    Option<(Vec<lex::Tok>, Vec<rules::Function>)>,
);

/// The rules of a kernel's header; what the body's flow needs from it: its helper functions (which
/// argument each writes through), its `constant` names, and its tokens and functions.
fn header_rules(header: Option<(&str, &str)>, out: &mut Vec<Finding>) -> HeaderFacts {
    let mut helpers = HashMap::new();
    let mut constants = Vec::new();
    let mut code = None;
    if let Some((hfile, htext)) = header {
        let lex::View {
            toks: htoks,
            directives: hdirs,
            ..
        } = lex::view(htext);
        rules::text_rules(hfile, &htoks, &hdirs, out);
        let fns = rules::program_scope(hfile, &htoks, &rules::constant_macros(&hdirs), out);
        rules::recursion(hfile, &htoks, &fns, out);
        rules::threadgroup_outside_kernel(hfile, &htoks, &fns, out);
        helpers = rules::helper_map(&fns);
        constants = rules::constant_names(&htoks);
        code = Some((htoks, fns));
    }

    (helpers, constants, code)
}

/// The body's flow rules (address spaces, barriers, races, names MLX reserves); whether the body
/// compares a thread index with a size somewhere (a guard), and the names that vary between threads.
#[allow(clippy::too_many_arguments)] // the body, its tokens and what the header and signature give it
fn body_flow(
    spec: &KernelSpec,
    body_file: &str,
    body: &str,
    toks: &[lex::Tok],
    params: &[signature::Param],
    helpers: HashMap<String, Vec<Option<String>>>,
    constants: Vec<String>,
    out: &mut Vec<Finding>,
) -> (bool, BTreeSet<String>) {
    let mut flow = rules::Flow::new(body_file, toks);
    flow.helpers = helpers;
    for n in constants {
        flow.spaces.insert(n, "constant".into());
    }
    for p in params {
        if p.pointer {
            flow.spaces.insert(p.name.clone(), p.space.to_string());
        }
    }
    for a in VARYING.iter().filter(|a| body.contains(*a)) {
        flow.seed(a, a);
    }
    for (a, _) in ATTRIBUTES {
        flow.reserved.push((
            a.to_string(),
            format!("MLX's attribute argument `{a}` (MLX adds it to the signature because the name occurs in the body)"),
        ));
    }
    for p in params.iter().filter(|p| p.buffer) {
        flow.reserved.push((
            p.name.clone(),
            format!("the kernel argument `{}` that MLX generates", p.name),
        ));
    }
    for (n, _) in &spec.template_ints {
        flow.reserved
            .push((n.clone(), format!("the template parameter `{n}`")));
    }
    for (n, _) in &spec.template_types {
        flow.reserved
            .push((n.clone(), format!("the template parameter `{n}`")));
    }
    flow.run(0, toks.len());
    out.append(&mut flow.findings);
    (flow.guarded, flow.varying)
}

/// What the plan's launch must respect on Metal: a guard where the grid overshoots the data, the
/// threadgroup and buffer limits, no name MLX adds itself, no float64.
fn launch_rules(
    spec: &KernelSpec,
    launch: &LaunchInfo,
    params: &[signature::Param],
    guarded: bool,
    body_file: &str,
    out: &mut Vec<Finding>,
) {
    let (pfile, pline) = (&launch.plan_at.0, launch.plan_at.1);
    if let Some(reason) = &launch.overshoot
        && !guarded
    {
        out.push(rules::finding(
            "M060",
            Severity::Error,
            body_file,
            1,
            format!(
                "the grid may hold threads past the data ({reason}) but the body compares no thread index with a size: guard the work, e.g. `if (i >= uint(n)) return;` (before any barrier, or as a flag)"
            ),
        ));
    }
    if let Some(tg) = &launch.threadgroup {
        let total: i64 = tg.iter().product();
        if total > MAX_THREADS || tg.iter().any(|t| *t <= 0) {
            out.push(rules::finding(
                "M021",
                Severity::Error,
                pfile,
                pline,
                format!(
                    "threadgroup {tg:?} has {total} threads: Metal allows at most {MAX_THREADS} per threadgroup (fewer for register-heavy kernels); shrink the plan's threadgroup"
                ),
            ));
        }
    }
    for p in params.iter().filter(|p| p.buffer) {
        if ATTRIBUTES.iter().any(|(a, _)| *a == p.name) {
            out.push(rules::finding(
                "M050",
                Severity::Error,
                pfile,
                pline,
                format!(
                    "the launch passes a tensor or scalar named `{}`, which is also an attribute MLX adds to the signature: rename it in the plan (and the task)",
                    p.name
                ),
            ));
        }
    }
    let buffers = params.iter().filter(|p| p.buffer).count();
    if buffers > MAX_BUFFERS {
        out.push(rules::finding(
            "M025",
            Severity::Error,
            pfile,
            pline,
            format!(
                "the kernel takes {buffers} buffers (inputs, scalars, shapes/strides and outputs): Metal allows {MAX_BUFFERS}; pack scalars or tensors together"
            ),
        ));
    }
    for (n, d) in spec
        .inputs
        .iter()
        .filter_map(|i| match i {
            Input::Array { name, dtype, .. } => Some((name, *dtype)),
            Input::Scalar { .. } => None,
        })
        .chain(spec.outputs.iter().map(|(n, d)| (n, *d)))
        .chain(spec.template_types.iter().map(|(n, d)| (n, *d)))
    {
        if d == Dtype::Float64 {
            out.push(rules::finding(
                "M061",
                Severity::Error,
                pfile,
                pline,
                format!("`{n}` is float64: Apple GPUs (and MLX's Metal back-end) have no float64"),
            ));
        }
    }
}

/// The body compiled as MLX would instantiate it, with a size probe after every threadgroup declaration;
/// the compiler's errors placed in the user's files, and the threadgroup memory total.
fn compile_body(
    spec: &KernelSpec,
    header: Option<(&str, &str)>,
    body_file: &str,
    body: &str,
    toks: &[lex::Tok],
    out: &mut Vec<Finding>,
) -> Result<(), CheckError> {
    // Compile, with a size probe after every threadgroup declaration of the body.
    let probed = with_probes(body, &rules::threadgroup_decls(toks));
    let mut files = vec![body_file];
    if let Some((h, _)) = header {
        files.push(h);
    }
    let unit = spec.unit(header, body_file, &probed);
    let outcome = compile::compile(&unit, &files)?;
    let targs: Vec<String> = spec
        .template_ints
        .iter()
        .map(|(n, v)| format!("{n} = {v}"))
        .chain(
            spec.template_types
                .iter()
                .map(|(n, d)| format!("{n} = {}", signature::metal_type(*d))),
        )
        .collect();
    let mut texts = vec![(body_file, body)];
    if let Some(h) = header {
        texts.push(h);
    }
    for d in outcome.errors {
        if address_space_overload(&d, &texts) {
            continue;
        }
        let (file, line, message) = match d.file.as_str() {
            "<signature>" => (
                body_file.to_string(),
                1,
                format!("in the signature MLX generates: {}", d.message),
            ),
            "<instantiation>" => (
                body_file.to_string(),
                1,
                format!(
                    "when MLX instantiates the kernel ({}): {}",
                    targs.join(", "),
                    d.message
                ),
            ),
            "<shim>" => (body_file.to_string(), 1, shim_message(&d.message)),
            _ => (d.file, d.line, d.message),
        };
        out.push(rules::finding(
            "M001",
            Severity::Error,
            &file,
            line,
            message,
        ));
    }
    threadgroup_total(body_file, &outcome.threadgroup, &targs, out);
    Ok(())
}

/// Brackets nested deeper than Clang's limit, Apple's compiler included (`-fbracket-depth`, 256).
pub const MAX_NESTING: usize = 256;

/// M001 for a file whose brackets nest deeper than [`MAX_NESTING`]: the Metal compiler refuses it, and
/// the rules (which recurse over blocks) are not run on it.
fn too_deep(file: &str, toks: &[lex::Tok]) -> Option<Finding> {
    let mut depth = 0usize;
    for t in toks {
        match t.text.as_str() {
            "(" | "[" | "{" => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Some(rules::finding(
                        "M001",
                        Severity::Error,
                        file,
                        t.line,
                        format!(
                            "brackets nested more than {MAX_NESTING} levels deep: Apple's compiler (Clang, -fbracket-depth) stops there; split the expression or the blocks"
                        ),
                    ));
                }
            }
            ")" | "]" | "}" => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// The shim erases address spaces, so overloads that differ only in them (`f(device float*)` and
/// `f(threadgroup float*)`) look like a redefinition; Metal accepts them.
fn address_space_overload(d: &compile::Diag, texts: &[(&str, &str)]) -> bool {
    let Some((pf, pl)) = &d.previous else {
        return false;
    };
    // The declaration from the reported line through its `{` or `;` (parameters span lines).
    let line_of = |f: &str, l: usize| -> String {
        let Some((_, t)) = texts.iter().find(|(n, _)| *n == f) else {
            return String::new();
        };
        let mut decl = String::new();
        for line in t.lines().skip(l.saturating_sub(1)).take(40) {
            decl.push_str(line);
            decl.push('\n');
            if line.contains('{') || line.contains(';') {
                break;
            }
        }
        decl
    };
    fn spaces(line: &str) -> Vec<&str> {
        line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| ["device", "constant", "threadgroup", "thread"].contains(w))
            .collect()
    }
    spaces(&line_of(&d.file, d.line)) != spaces(&line_of(pf, *pl))
}

/// An error inside the shim that no line of the kernel led to: most likely a gap in the shim itself.
fn shim_message(m: &str) -> String {
    format!(
        "{m} (reported inside ksearch's Metal shim without a line of this kernel: if the kernel is valid Metal, this is a gap in metal/shim/)"
    )
}

/// Inserts after each threadgroup declaration a statement whose compile error reveals its size.
fn with_probes(src: &str, decls: &[(usize, String, usize)]) -> String {
    if decls.is_empty() {
        return src.to_string();
    }
    let toks = lex::view(src).toks;
    let mut chars: Vec<char> = src.chars().collect();
    let mut inserts: Vec<(usize, String)> = decls
        .iter()
        .enumerate()
        .map(|(k, (semi, name, _))| {
            (
                toks[*semi].pos + 1,
                format!(
                    " typedef typename ks_tg_probe<__LINE__, ks_sizeof<decltype({name})>::value>::bytes ks_tg_probe_{k}_;"
                ),
            )
        })
        .collect();
    inserts.sort_by_key(|i| std::cmp::Reverse(i.0));
    for (at, text) in inserts {
        chars.splice(at..at, text.chars());
    }
    chars.into_iter().collect()
}

/// M020: a kernel's threadgroup bytes over Metal's limit, for its largest instantiation (a template kernel's
/// declarations are probed once per instantiation; each instantiation is a kernel of its own).
fn threadgroup_total(
    file: &str,
    probes: &[(String, usize, u64, usize)],
    targs: &[String],
    out: &mut Vec<Finding>,
) {
    let mut instances: BTreeMap<usize, BTreeMap<usize, u64>> = BTreeMap::new();
    for (f, line, bytes, instance) in probes {
        if f == file {
            *instances
                .entry(*instance)
                .or_default()
                .entry(*line)
                .or_default() += bytes;
        }
    }
    let Some(by_line) = instances
        .into_values()
        .max_by_key(|lines| lines.values().sum::<u64>())
    else {
        return;
    };
    let total: u64 = by_line.values().sum();
    if total > MAX_THREADGROUP_BYTES {
        let first = by_line.keys().next().copied().unwrap_or(1);
        let parts: Vec<String> = by_line
            .iter()
            .map(|(l, b)| format!("line {l}: {b} B"))
            .collect();
        let with = if targs.is_empty() {
            String::new()
        } else {
            format!(" with {}", targs.join(", "))
        };
        out.push(rules::finding(
            "M020",
            Severity::Error,
            file,
            first,
            format!(
                "threadgroup memory is {total} bytes{with} ({}): Metal allows {MAX_THREADGROUP_BYTES} per threadgroup; use smaller tiles or fewer buffers",
                parts.join(", ")
            ),
        ));
    }
}

/// Sorts, removes duplicates, and drops a compiler error on a line where a rule already explains the error.
fn finish(mut out: Vec<Finding>) -> Vec<Finding> {
    let explained: BTreeSet<(String, usize)> = out
        .iter()
        .filter(|f| f.code != "M001" && f.severity == Severity::Error)
        .map(|f| (f.file.clone(), f.line))
        .collect();
    out.retain(|f| f.code != "M001" || !explained.contains(&(f.file.clone(), f.line)));
    out.sort_by(|a, b| {
        (&a.file, a.line, &a.code, &a.message).cmp(&(&b.file, b.line, &b.code, &b.message))
    });
    out.dedup();
    out
}

/// Checks a complete Metal source (with its `[[kernel]]` functions); `file` names it in findings. Local
/// includes are not followed (M013); [`check_file`] follows them.
pub fn check_source(src: &str, file: &str) -> Result<Vec<Finding>, CheckError> {
    check_source_with(src, file, None)
}

/// Checks a complete Metal file on disk with the local headers it includes, found next to it or in
/// `include_dirs` (see [`includes`]); findings in a header name the header.
pub fn check_file(path: &Path, include_dirs: &[PathBuf]) -> Result<Vec<Finding>, CheckError> {
    let src = ksearch_model::cpplex::read_source(path).map_err(|e| CheckError::Io {
        file: path.to_path_buf(),
        err: e,
    })?;
    let shown = path.display().to_string();
    let local = includes::gather(path, &shown, &src, include_dirs)?;
    check_source_with(&src, &shown, Some(&local))
}

/// A file's tokens and its preprocessor lines (`lex::view`).
type Lexed = (Vec<lex::Tok>, Vec<(usize, String)>);

/// A file's kernels as (name, first line, last line), and its threadgroup declarations to probe.
type FileKernels = (Vec<(String, usize, usize)>, Vec<(usize, String, usize)>);

/// The rules that read one file of a complete source: its text, its functions, each kernel's flow.
///
/// `macros` are the `constant` macros of the whole source (`rules::constant_macros`).
fn file_rules(
    file: &str,
    toks: &[lex::Tok],
    directives: &[(usize, String)],
    macros: &[String],
    out: &mut Vec<Finding>,
) -> FileKernels {
    rules::text_rules(file, toks, directives, out);
    let fns = rules::program_scope(file, toks, macros, out);
    rules::recursion(file, toks, &fns, out);
    rules::threadgroup_outside_kernel(file, toks, &fns, out);
    let kernels: Vec<&rules::Function> = fns.iter().filter(|f| f.kernel).collect();
    let helpers = rules::helper_map(&fns);
    let mut decls = Vec::new();
    let mut kernel_lines = Vec::new();
    for k in &kernels {
        rules::kernel_signature(file, k, out);
        let mut flow = rules::Flow::new(file, toks);
        flow.helpers = helpers.clone();
        for n in rules::constant_names(toks) {
            flow.spaces.insert(n, "constant".into());
        }
        for p in &k.params {
            let name = p
                .iter()
                .take_while(|t| !t.is("["))
                .filter(|t| t.is_ident())
                .last();
            let attr = p
                .windows(3)
                .find(|w| w[0].is("[") && w[1].is("["))
                .map(|w| w[2].text.clone());
            let Some(name) = name else { continue };
            if let Some(a) = attr.as_deref().filter(|a| VARYING.contains(a)) {
                flow.seed(&name.text, a);
            }
            if p.iter().any(|t| t.is("*"))
                && let Some(sp) = p
                    .iter()
                    .find(|t| ["device", "constant", "threadgroup"].contains(&t.text.as_str()))
            {
                flow.spaces.insert(name.text.clone(), sp.text.clone());
            }
        }
        flow.run(k.body.0, k.body.1);
        out.append(&mut flow.findings);
        let sizes: Vec<String> = k
            .params
            .iter()
            .filter(|p| {
                p.iter().any(|t| t.is("&"))
                    && p.iter().any(|t| t.is("constant"))
                    && p.iter()
                        .any(|t| ["int", "uint", "int32_t", "uint32_t"].contains(&t.text.as_str()))
            })
            .filter_map(|p| {
                p.iter()
                    .take_while(|t| !t.is("["))
                    .filter(|t| t.is_ident())
                    .last()
            })
            .map(|t| t.text.clone())
            .collect();
        if !flow.guarded && !sizes.is_empty() && !flow.varying.is_empty() {
            // A size the body never reads was meant for a guard: that is an error; one used
            // otherwise (a row length, say) may be fine with an exact grid.
            let body = &toks[k.body.0..k.body.1];
            let unused: Vec<&String> = sizes
                .iter()
                .filter(|n| !body.iter().any(|t| t.text == **n))
                .collect();
            let (sev, what) = if unused.is_empty() {
                (Severity::Warning, sizes.join(", "))
            } else {
                (
                    Severity::Error,
                    format!(
                        "{} (never read)",
                        unused
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            };
            out.push(rules::finding(
                "M062",
                sev,
                file,
                k.line,
                format!(
                    "`{}` takes the size {what} but compares no thread index with it: unless the grid matches the data exactly, threads past the end read and write out of bounds; guard with `if (gid >= n) return;`",
                    k.name
                ),
            ));
        }
        let body = &toks[k.body.0..k.body.1];
        for (semi, name, line) in rules::threadgroup_decls(body) {
            decls.push((semi + k.body.0, name, line));
        }
        let first = toks.get(k.body.0).map(|t| t.line).unwrap_or(k.line);
        let last = toks.get(k.body.1).map(|t| t.line).unwrap_or(first);
        kernel_lines.push((k.name.clone(), first, last));
    }
    for (i, t) in toks.iter().enumerate() {
        if t.is("max_total_threads_per_threadgroup")
            && let Some(n) = toks.get(i + 2).and_then(|n| n.text.parse::<i64>().ok())
            && n > MAX_THREADS
        {
            out.push(rules::finding(
                "M021",
                Severity::Error,
                file,
                t.line,
                format!("max_total_threads_per_threadgroup({n}): Metal allows at most {MAX_THREADS} threads per threadgroup"),
            ));
        }
    }
    (kernel_lines, decls)
}

/// [`check_source`], with the local headers `local` found (None: includes are not followed, M013).
fn check_source_with(
    src: &str,
    file: &str,
    local: Option<&includes::Local>,
) -> Result<Vec<Finding>, CheckError> {
    let mut out = Vec::new();
    // Each file (the source, then its local headers) lexed once: the nesting check, the macros, the rules
    // and the search for macro-made kernels all read it.
    let headers_in = local.map(|l| l.headers.as_slice()).unwrap_or_default();
    let lexed: Vec<Lexed> = std::iter::once(src)
        .chain(headers_in.iter().map(|h| h.text.as_str()))
        .map(|t| {
            let v = lex::view(t);
            (v.toks, v.directives)
        })
        .collect();
    let shown: Vec<&str> = std::iter::once(file)
        .chain(headers_in.iter().map(|h| h.shown.as_str()))
        .collect();
    let deep: Vec<Finding> = shown
        .iter()
        .zip(&lexed)
        .filter_map(|(f, (toks, _))| too_deep(f, toks))
        .collect();
    if !deep.is_empty() {
        return Ok(deep);
    }
    // A macro defined in one header is used in another: they are gathered from every file.
    let macros: Vec<String> = lexed
        .iter()
        .flat_map(|(_, d)| rules::constant_macros(d))
        .collect();
    let (kernel_lines, decls) = file_rules(file, &lexed[0].0, &lexed[0].1, &macros, &mut out);
    let mut kernels = vec![(file.to_string(), kernel_lines)];
    let mut headers: Vec<(String, String)> = Vec::new();
    if let Some(local) = local {
        for (h, (toks, directives)) in local.headers.iter().zip(&lexed[1..]) {
            let (k, d) = file_rules(&h.shown, toks, directives, &macros, &mut out);
            kernels.push((h.shown.clone(), k));
            headers.push((h.scratch.clone(), with_probes(&h.text, &d)));
        }
        // Local headers are followed here; one found nowhere is the compiler's to report, since only it
        // knows whether the include is in an active `#if` branch.
        out.retain(|f| f.code != "M013");
    }
    // Kernels a macro makes (`#define UNARY(name) kernel void name(...)`) are not seen by the rules, which
    // read the text unexpanded: a file whose macros hold a kernel is not said to have none.
    let in_macros = lexed.iter().any(|(_, directives)| {
        directives.iter().any(|(_, d)| {
            d.trim_start_matches('#').trim_start().starts_with("define")
                && lex::tokens(d).iter().any(|t| t.is("kernel"))
        })
    });
    if kernels.iter().all(|(_, k)| k.is_empty()) && !in_macros {
        out.push(rules::finding(
            "M002",
            Severity::Error,
            file,
            1,
            "no `[[kernel]]` function: a complete Metal source needs one (for a body-only MLX kernel, check its candidate folder instead)".into(),
        ));
    }
    let probed = with_probes(src, &decls);
    let directives = &lexed[0].1;
    let includes_metal = directives
        .iter()
        .any(|(_, d)| d.contains("include") && d.contains("metal_"));
    // A source without `#include <metal_stdlib>` (nor local headers) is taken as MLX's generated text,
    // which MLX compiles after its own prelude. Metal's compiler knows its scalar and vector types
    // (`int32_t`, `half4`) before any include, so the shim comes first either way.
    let prelude = if includes_metal || local.is_some_and(|l| !l.headers.is_empty()) {
        "#include \"metal_shim.h\"\n"
    } else {
        "#include \"mlx_prelude.h\"\n"
    };
    let unit = format!("{prelude}#line 1 \"{file}\"\n{probed}\n");
    let header_files: Vec<(&str, &str)> = headers
        .iter()
        .map(|(at, t)| (at.as_str(), t.as_str()))
        .collect();
    let roots = local.map(|l| l.roots.clone()).unwrap_or_default();
    let dirs = local.map(|l| l.dirs.clone()).unwrap_or_default();
    let outcome = compile::compile_with(&unit, &[file], &header_files, &dirs, &roots)?;
    // The compiler names a header by its place in the scratch folder; findings name it as the user does.
    let shown = |f: &str| -> String {
        local
            .and_then(|l| l.headers.iter().find(|h| h.scratch == f))
            .map_or_else(|| f.to_string(), |h| h.shown.clone())
    };
    let mut texts: Vec<(&str, &str)> = vec![(file, src)];
    if let Some(l) = local {
        texts.extend(
            l.headers
                .iter()
                .map(|h| (h.scratch.as_str(), h.text.as_str())),
        );
    }
    compiler_findings(
        outcome.errors,
        &texts,
        file,
        local.is_some(),
        &shown,
        &mut out,
    );
    let probes: Vec<(String, usize, u64, usize)> = outcome
        .threadgroup
        .iter()
        .map(|(f, l, b, i)| (shown(f), *l, *b, *i))
        .collect();
    for (f, lines) in &kernels {
        for (_, first, last) in lines {
            let mine: Vec<(String, usize, u64, usize)> = probes
                .iter()
                .filter(|(pf, l, _, _)| pf == f && l >= first && l <= last)
                .cloned()
                .collect();
            threadgroup_total(f, &mine, &[], &mut out);
        }
    }
    Ok(finish(complete_source_hazards(out)))
}

/// The compiler's errors as findings, each file named as the user names it (`shown`); `texts` are the
/// compiled files by the compiler's name for them.
fn compiler_findings(
    mut errors: Vec<compile::Diag>,
    texts: &[(&str, &str)],
    file: &str,
    following_includes: bool,
    shown: &dyn Fn(&str) -> String,
    out: &mut Vec<Finding>,
) {
    // An Apple SDK framework header (`<MetalPerformancePrimitives/MetalPerformancePrimitives.h>`) that the
    // compiler cannot find stops it there: the Mac has it, this machine does not, so what follows is not
    // compiled here. That is a warning naming the header; errors the compiler gave before it stand, and the
    // rules above have read every file.
    let stopped = errors.iter().position(|d| {
        // Included as a system header (`<...>`): a quoted one is the user's file.
        framework_missing(&d.message)
            .is_some_and(|name| texts.iter().any(|(_, t)| t.contains(&format!("<{name}>"))))
    });
    if let Some(at) = stopped {
        let d = errors.remove(at);
        errors.truncate(at);
        let name = framework_missing(&d.message).unwrap_or_default();
        out.push(rules::finding(
            "M005",
            Severity::Warning,
            &shown(&d.file),
            d.line,
            format!(
                "`<{name}>` is an Apple SDK framework header this machine does not have: the compile step was skipped from this include on (syntax, types and threadgroup sizes after it are not checked); the checker's own rules still ran on every file"
            ),
        ));
    }
    for d in errors {
        if address_space_overload(&d, texts) {
            continue;
        }
        let (f, line, message) = if d.file == "<shim>" {
            (file.to_string(), 1, shim_message(&d.message))
        } else {
            let hint = following_includes
                && (d.message.contains("No such file") || d.message.contains("file not found"));
            let message = if hint {
                format!(
                    "{} (not next to the including file nor in an include folder: add its folder with -I DIR; a name that climbs out of the folders with `..`, or a link out of them, is not followed)",
                    d.message
                )
            } else {
                d.message
            };
            (shown(&d.file), d.line, message)
        };
        out.push(rules::finding("M001", Severity::Error, &f, line, message));
    }
}

/// The header named by a compiler's "file not found" message when it is an Apple SDK framework header:
/// `Framework/Header.h`, the framework's name capitalised (`MetalPerformancePrimitives/...`,
/// `Metal/Metal.h`). Other missing headers (`cuda_fp16.h`, `common.h`) stay errors: a Mac has no such
/// header either, or it is one of the user's.
fn framework_missing(message: &str) -> Option<String> {
    let rest = message.strip_prefix('\'')?;
    let (name, tail) = rest.split_once('\'')?;
    if !tail.trim_start().starts_with("file not found") {
        return None;
    }
    let (framework, header) = name.split_once('/')?;
    let framework_like = framework
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_uppercase())
        && framework
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        && header.ends_with(".h");
    framework_like.then(|| name.to_string())
}

/// In a complete source, a barrier after an early `return` (M031) and an initialised threadgroup array
/// (M022) are warnings: Apple's compiler builds both, libraries that run on every Mac ship them (MLX's
/// column reduction and layer norm, candle's quantized sort), and whether threads past the data exist is
/// decided by host code the check does not see. In a candidate, whose grid the plan sets, they stay errors.
fn complete_source_hazards(mut out: Vec<Finding>) -> Vec<Finding> {
    for f in out
        .iter_mut()
        .filter(|f| matches!(f.code.as_str(), "M031" | "M022"))
    {
        if f.severity == Severity::Error {
            f.severity = Severity::Warning;
            f.message.push_str(if f.code == "M031" {
                " (a warning in a complete source: whether threads past the data exist is decided by host code not seen here)"
            } else {
                " (a warning in a complete source: Apple's compiler accepts the initializer, but nothing says every thread sees it done; MLX's layer norm ships one)"
            });
        }
    }
    out
}

/// Checks a candidate folder. Without `task`, the task is the nearest folder above holding a `task.toml`.
pub fn check_candidate(dir: &Path, task: Option<&Task>) -> Result<Vec<Finding>, CheckError> {
    let c = Candidate::load(dir)?;
    if c.plan.target != Target::MlxMetal {
        return Err(CheckError::NotMetal {
            file: dir.join("plan.toml"),
            target: c.plan.target.name().to_string(),
        });
    }
    let found;
    let task = match task {
        Some(t) => Some(t),
        None => {
            let abs = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
            let tdir = abs
                .ancestors()
                .skip(1)
                .take(5)
                .find(|a| a.join("task.toml").is_file());
            found = match tdir {
                Some(t) => Some(Task::load(t).map_err(|e| CheckError::Task(e.to_string()))?),
                None => None,
            };
            found.as_ref()
        }
    };
    let plan_text = std::fs::read_to_string(dir.join("plan.toml")).unwrap_or_default();
    let launch_lines: Vec<usize> = plan_text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_start().starts_with("[[launch]]"))
        .map(|(i, _)| i + 1)
        .collect();
    check_with(&c, task, &launch_lines)
}

/// One launch of a workload as MLX builds it.
#[derive(Debug, Clone)]
pub struct WorkloadLaunch {
    /// Index of the plan's `[[launch]]` (a plan may leave launches out for some workloads).
    pub plan_index: usize,
    pub spec: KernelSpec,
    pub grid: Option<Vec<i64>>,
    pub threadgroup: Option<Vec<i64>>,
    /// Elements of the largest tensor the launch touches.
    pub most_elements: Option<i64>,
}

/// The kernels MLX builds for the resolved plan `rp` of workload `rw`: dtypes, sizes and template values.
pub fn workload_launches(
    c: &Candidate,
    rp: &ksearch_model::candidate::ResolvedPlan,
    rw: &ksearch_model::task::ResolvedWorkload,
) -> Vec<WorkloadLaunch> {
    let buffers: HashMap<&str, (&Vec<i64>, Dtype)> = rp
        .buffers
        .iter()
        .map(|b| (b.name.as_str(), (&b.shape, b.dtype)))
        .collect();
    let tensor = |n: &str| -> Option<(i64, Dtype)> {
        if let (Some(s), Some(d)) = (rw.shapes.get(n), rw.dtypes.get(n)) {
            return Some((s.iter().product(), *d));
        }
        buffers.get(n).map(|(s, d)| (s.iter().product(), *d))
    };
    let mut out = Vec::new();
    for l in &rp.launches {
        let plan_index = c
            .plan
            .launch
            .iter()
            .position(|p| p.kernel == l.kernel && p.inputs == l.inputs && p.outputs == l.outputs)
            .unwrap_or(0);
        let mut inputs = Vec::new();
        for n in &l.inputs {
            let (elements, dtype) = tensor(n).unwrap_or((i64::MAX, Dtype::Float32));
            inputs.push(Input::Array {
                name: n.clone(),
                dtype,
                elements: Some(elements),
            });
        }
        inputs.extend(
            l.scalar_names
                .iter()
                .map(|n| Input::Scalar { name: n.clone() }),
        );
        let outputs = l
            .outputs
            .iter()
            .map(|n| (n.clone(), tensor(n).map(|t| t.1).unwrap_or(Dtype::Float32)))
            .collect();
        let spec = KernelSpec {
            name: l.kernel.clone(),
            inputs,
            outputs,
            atomic_outputs: l.atomic_outputs,
            template_ints: l.template.clone().unwrap_or_default().into_iter().collect(),
            template_types: l
                .type_args
                .iter()
                .map(|(k, d)| (k.clone(), d.parse().unwrap_or(Dtype::Float32)))
                .collect(),
        };
        let most_elements = l
            .inputs
            .iter()
            .chain(&l.outputs)
            .filter_map(|n| tensor(n).map(|t| t.0))
            .max();
        out.push(WorkloadLaunch {
            plan_index,
            spec,
            grid: l.grid.clone(),
            threadgroup: l.threadgroup.clone(),
            most_elements,
        });
    }
    out
}

/// Checks a loaded candidate (an `mlx-metal` plan; other targets have nothing to check: no findings).
pub fn check_loaded(c: &Candidate, task: Option<&Task>) -> Result<Vec<Finding>, CheckError> {
    if c.plan.target != Target::MlxMetal {
        return Ok(Vec::new());
    }
    check_with(c, task, &[])
}

fn check_with(
    c: &Candidate,
    task: Option<&Task>,
    launch_lines: &[usize],
) -> Result<Vec<Finding>, CheckError> {
    let mut out = Vec::new();
    // Per launch, and per workload when there is a task: the spec and launch facts; identical ones are
    // checked once.
    let mut jobs: Vec<(KernelSpec, LaunchInfo)> = Vec::new();
    let overshoot = |li: usize| -> Option<String> {
        let grid = c.plan.launch[li].grid.as_ref()?;
        grid.iter().find_map(|e| {
            let s = e.0.src();
            (s.contains("//") || s.contains("ceil("))
                .then(|| format!("the plan's grid extent `{s}` is rounded up"))
        })
    };
    let plan_at = |li: usize| {
        (
            "plan.toml".to_string(),
            launch_lines.get(li).copied().unwrap_or(0),
        )
    };
    match task {
        Some(task) => {
            for w in &task.toml.workload {
                let rw = match task.resolve(w) {
                    Ok(rw) => rw,
                    Err(e) => return Err(CheckError::Task(e)),
                };
                let rp = match c.resolve(task, &rw) {
                    Ok(rp) => rp,
                    Err(e) => {
                        out.push(rules::finding(
                            "M004",
                            Severity::Error,
                            "plan.toml",
                            0,
                            format!("the plan does not resolve for workload `{}`: {e}", w.name),
                        ));
                        continue;
                    }
                };
                for wl in workload_launches(c, &rp, &rw) {
                    let li = wl.plan_index;
                    let info = LaunchInfo {
                        threadgroup: wl.threadgroup.clone(),
                        overshoot: overshoot(li).or_else(|| {
                            // More threads than elements in any tensor of the launch: some threads
                            // have nothing to do and must be kept off the buffers.
                            let threads: i64 = wl.grid.as_ref()?.iter().product();
                            let most = wl.most_elements?;
                            (threads > most).then(|| {
                                format!(
                                    "{threads} threads for at most {most} elements in workload `{}`",
                                    w.name
                                )
                            })
                        }),
                        plan_at: plan_at(li),
                    };
                    jobs.push((wl.spec, info));
                }
            }
        }
        None => {
            out.push(rules::finding(
                "M003",
                Severity::Warning,
                "plan.toml",
                0,
                "no task.toml found above the candidate: tensor dtypes are read from how the body uses them (float32 where it does not say) and workload-dependent sizes are not checked; pass --task DIR".into(),
            ));
            for (li, l) in c.plan.launch.iter().enumerate() {
                let Some(k) = c.plan.kernel.iter().find(|k| k.name == l.kernel) else {
                    continue;
                };
                // What MLX is handed: the compacted body and header (comments naming a buffer or an
                // attribute must not change the signature).
                let (body, header) = (
                    crate::codegen::mlx_source(c, k),
                    crate::codegen::mlx_header(c, k),
                );
                let texts = [body.as_str(), header.as_str()];
                let names: Vec<String> = l.inputs.iter().chain(&l.outputs).cloned().collect();
                let inferred = infer::dtypes(&texts, &names, l.atomic_outputs);
                let (spec, threadgroup) =
                    launch_spec(c, l, |n| inferred.get(n).copied().unwrap_or(Dtype::Float32));
                let info = LaunchInfo {
                    threadgroup,
                    overshoot: overshoot(li),
                    plan_at: plan_at(li),
                };
                jobs.push((spec, info));
            }
        }
    }
    let mut done = BTreeSet::new();
    for (spec, info) in jobs {
        let Some(k) = c.plan.kernel.iter().find(|k| k.name == spec.name) else {
            continue;
        };
        // MLX's signature generation and compiler see the compacted text (same lines, no comments).
        let body = &crate::codegen::mlx_source(c, k);
        let header_text = crate::codegen::mlx_header(c, k);
        let header = k
            .header
            .as_ref()
            .map(|h| (h.as_str(), header_text.as_str()));
        let key = format!(
            "{}\0{}\0{:?}\0{:?}",
            k.name,
            spec.unit(header, &k.source, body),
            info.threadgroup,
            info.overshoot
        );
        if !done.insert(key) {
            continue;
        }
        out.extend(check_body(&spec, header, &k.source, body, &info)?);
    }
    Ok(finish(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_go_after_the_declaration_and_keep_lines() {
        let src = "threadgroup float a[4], b[8]; // x\nint y;";
        let toks = lex::view(src).toks;
        let decls = rules::threadgroup_decls(&toks);
        assert_eq!(
            decls.iter().map(|d| d.1.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let p = with_probes(src, &decls);
        assert_eq!(p.lines().count(), 2);
        assert!(p.starts_with("threadgroup float a[4], b[8]; typedef typename ks_tg_probe<"));
        assert!(p.contains("decltype(a)") && p.contains("decltype(b)"));
    }

    #[test]
    fn a_compile_error_explained_by_a_rule_is_dropped() {
        let f =
            |code: &str, line| rules::finding(code, Severity::Error, "k.metal", line, "m".into());
        let out = finish(vec![f("M001", 3), f("M010", 3), f("M001", 4)]);
        let codes: Vec<_> = out.iter().map(|f| (f.code.as_str(), f.line)).collect();
        assert_eq!(codes, [("M010", 3), ("M001", 4)]);
    }
}

#[cfg(test)]
mod nesting_tests {
    use super::*;

    #[test]
    fn nesting_past_the_compilers_limit_is_an_error_not_a_crash() {
        let deep = format!(
            "#include <metal_stdlib>\nkernel void k(device float* o [[buffer(0)]]) {{\n{}o[0] = 1.0f;{}\n}}\n",
            "{".repeat(20_000),
            "}".repeat(20_000)
        );
        // On a thread with a small stack, as the rules would overflow one if they ran.
        let f = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || check_source(&deep, "deep.metal").unwrap())
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].code.as_str(), f[0].line), ("M001", 3));
        assert!(f[0].message.contains("256 levels"), "{}", f[0].message);
    }
}
