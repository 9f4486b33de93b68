//! Back-translation (issue 5): an `mlx-metal` candidate rewritten into an `mlx-cuda` candidate, so that the
//! logic of a Metal kernel can be checked against the reference on an NVIDIA GPU through
//! `mx.fast.cuda_kernel`. Plans keep their kernels, launches, buffers, tunables and constraints; bodies are
//! rewritten token by token, and the Metal built-ins they use are emulated by a CUDA prelude
//! (`cuda/metal_prelude.cuh`) that becomes part of every kernel's header. What is emulated, and how
//! faithfully, is in `docs/back-translation.md`.
//!
//! The rewrite is lexical: it knows the MLX Metal subset (address spaces, thread attributes, barriers,
//! simd functions, `metal::` math, vector types, atomics, 8x8 `simdgroup_matrix`), not all of MSL. A construct
//! outside that subset is an error naming the file, the line and the construct, never dropped.

use ksearch_model::candidate::{Candidate, CandidateError, KernelDecl, Plan};
use ksearch_model::cpplex::{Kind, Tok, lex};
use ksearch_model::expr::{Env, ExprField};
use ksearch_model::target::Target;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The CUDA emulation of the Metal built-ins, prepended to every back-translated kernel's header.
pub const PRELUDE: &str = include_str!("../../../cuda/metal_prelude.cuh");
/// The header file of a kernel that had none.
pub const PRELUDE_FILE: &str = "metal_prelude.cuh";

#[derive(Debug, thiserror::Error)]
pub enum BackTranslateError {
    #[error(
        "{file}:{line}: cannot back-translate `{construct}`: {why}. Rewrite it with the MLX Metal subset listed in docs/back-translation.md"
    )]
    Construct {
        file: String,
        line: usize,
        construct: String,
        why: String,
    },
    #[error("{file}: {message}")]
    Plan { file: String, message: String },
    #[error(transparent)]
    Candidate(#[from] CandidateError),
    #[error("{}: {message}", dir.display())]
    Output { dir: PathBuf, message: String },
}

/// What a back-translation did, per kernel: for reports and the `--json` output.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub name: String,
    pub kernels: Vec<KernelReport>,
    /// Things that hold only approximately (see docs/back-translation.md).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct KernelReport {
    pub kernel: String,
    pub metal_source: String,
    pub cuda_source: String,
    pub header: String,
    /// Rewrite kind -> how many times it was applied.
    pub rewrites: BTreeMap<String, usize>,
    /// Metal thread attributes the body uses, defined from threadIdx / blockIdx / blockDim.
    pub attributes: Vec<String>,
    /// The grid, as CUDA code, when the Metal grid is not a whole number of threadgroups and threads
    /// outside it (which Metal never launches) leave at the start.
    pub ghost_guard: Option<String>,
}

/// An `mlx-metal` candidate folder back-translated; `write_dir` writes the `mlx-cuda` folder.
#[derive(Debug, Clone)]
pub struct BackTranslation {
    pub candidate: Candidate,
    pub report: Report,
}

impl BackTranslation {
    /// Writes the `mlx-cuda` folder; refuses the Metal candidate's own folder, which it would overwrite.
    pub fn write(&self, metal_dir: &Path, out: &Path) -> Result<(), BackTranslateError> {
        let same = match (metal_dir.canonicalize(), out.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        if same {
            return Err(BackTranslateError::Output {
                dir: out.to_path_buf(),
                message: "is the Metal candidate itself; give --out another folder".into(),
            });
        }
        self.candidate
            .write_dir(out)
            .map_err(|e| BackTranslateError::Output {
                dir: out.to_path_buf(),
                message: format!("cannot write the back-translated candidate: {e}"),
            })
    }
}

/// Loads the `mlx-metal` candidate in `dir` and back-translates it.
pub fn back_translate_dir(dir: &Path) -> Result<BackTranslation, BackTranslateError> {
    let c = Candidate::load(dir)?;
    back_translate(&c, &dir.join("plan.toml").display().to_string())
}

/// The launches of kernel `name` and the scalars they pass, which must agree: they become `name[0]` in
/// one body.
fn launches_of(plan: &Plan, name: &str) -> Result<(Vec<usize>, Vec<String>), String> {
    let launch_ix: Vec<usize> = (0..plan.launch.len())
        .filter(|&i| plan.launch[i].kernel == name)
        .collect();
    let scalar_lists: BTreeSet<Vec<String>> = launch_ix
        .iter()
        .map(|&i| scalar_names(&plan.launch[i].scalars))
        .collect();
    if scalar_lists.len() > 1 {
        return Err(format!(
            "kernel `{name}` is launched with different scalar lists {scalar_lists:?}; its body can read only one set"
        ));
    }
    Ok((
        launch_ix,
        scalar_lists.into_iter().next().unwrap_or_default(),
    ))
}

/// Back-translates a loaded `mlx-metal` candidate; `plan_file` names it in messages.
pub fn back_translate(
    c: &Candidate,
    plan_file: &str,
) -> Result<BackTranslation, BackTranslateError> {
    let plan_err = |message: String| BackTranslateError::Plan {
        file: plan_file.to_string(),
        message,
    };
    if c.plan.target != Target::MlxMetal {
        return Err(plan_err(format!(
            "target is {}, but back-translation reads mlx-metal candidates",
            c.plan.target
        )));
    }
    let mut plan = c.plan.clone();
    plan.target = Target::MlxCuda;
    plan.description = format!(
        "back-translated from mlx-metal by ksearch: {}",
        c.plan.description
    );
    let mut files = BTreeMap::new();
    let mut kernels = Vec::new();
    let mut notes = Vec::new();
    // Messages name kernel files by their path next to the plan.
    let in_dir = |name: &str| match Path::new(plan_file).parent() {
        Some(d) if !d.as_os_str().is_empty() => d.join(name).display().to_string(),
        _ => name.to_string(),
    };
    let mut headers_done: BTreeMap<String, String> = BTreeMap::new();
    let mut header_names: BTreeMap<String, String> = BTreeMap::new();

    for (ki, k) in c.plan.kernel.iter().enumerate() {
        let (launch_ix, mut scalars) = launches_of(&plan, &k.name).map_err(plan_err)?;
        let file_of = |name: &str| {
            c.files.get(name).ok_or_else(|| {
                plan_err(format!(
                    "kernel `{}`: its file `{name}` is not in the candidate",
                    k.name
                ))
            })
        };
        let header_text = match &k.header {
            Some(h) => Some(file_of(h)?.clone()),
            None => None,
        };
        let user_fns: BTreeSet<String> = header_text
            .as_deref()
            .map(defined_functions)
            .unwrap_or_default();
        let body_src = file_of(&k.source)?;
        let body_idents = identifiers(body_src);

        // Threads outside the Metal grid: only when the grid is not provably whole threadgroups.
        let ghost = ghost_guard(
            &Kernel {
                c,
                k,
                launch_ix: &launch_ix,
                body_idents: &body_idents,
                body_src,
            },
            &mut plan,
            &mut scalars,
            &mut notes,
        )
        .map_err(plan_err)?;
        let header_name = header_file(
            k,
            header_text.as_deref(),
            &user_fns,
            &in_dir,
            &mut header_names,
            &mut headers_done,
        )?;

        let mut counts = BTreeMap::new();
        let mut attrs = BTreeSet::new();
        let body = rewrite(
            body_src,
            &in_dir(&k.source),
            &Ctx {
                scalars: &scalars,
                user_fns: &user_fns,
                is_body: true,
            },
            &mut counts,
            &mut attrs,
        )?;
        let preamble = attribute_preamble(&attrs, ghost.as_deref());
        let cuda_source = format!("{}.cu", k.name);
        files.insert(
            cuda_source.clone(),
            format!(
                "// Generated by `ksearch back-translate` from {} (mlx-metal); the Metal built-ins are in {header_name}.\n{preamble}{body}",
                k.source
            ),
        );
        plan.kernel[ki] = KernelDecl {
            name: k.name.clone(),
            source: cuda_source.clone(),
            header: Some(header_name.clone()),
        };
        kernels.push(KernelReport {
            kernel: k.name.clone(),
            metal_source: k.source.clone(),
            cuda_source,
            header: header_name,
            rewrites: counts,
            attributes: attrs.into_iter().collect(),
            ghost_guard: ghost,
        });
    }
    for l in &mut plan.launch {
        // mlx-cuda has no atomic outputs: the body's atomics act on plain pointers (see the prelude).
        l.atomic_outputs = false;
    }
    files.extend(headers_done);
    let candidate = Candidate { plan, files };
    candidate
        .validate()
        .map_err(|m| plan_err(format!("the back-translated plan is not valid: {m}")))?;
    Ok(BackTranslation {
        report: Report {
            name: c.plan.name.clone(),
            kernels,
            notes,
        },
        candidate,
    })
}

/// One kernel of the candidate being back-translated, with what its body names.
struct Kernel<'k> {
    c: &'k Candidate,
    k: &'k KernelDecl,
    launch_ix: &'k [usize],
    body_idents: &'k BTreeSet<String>,
    body_src: &'k str,
}

/// The Metal grid as C expressions, for the body to exit the threads outside it, when the grid is not
/// provably whole threadgroups (None when it is, or nothing launches the kernel); the names the grid uses
/// are added to the kernel's launches. Err: why the plan cannot be back-translated.
fn ghost_guard(
    kn: &Kernel<'_>,
    plan: &mut Plan,
    scalars: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> Result<Option<String>, String> {
    let Kernel {
        c,
        k,
        launch_ix,
        body_idents,
        body_src,
    } = *kn;
    let Some(&first) = launch_ix.first() else {
        return Ok(None);
    };
    let l0 = &plan.launch[first];
    let grid = l0.grid.clone().unwrap_or_default();
    let tg = l0.threadgroup.clone().unwrap_or_default();
    let whole = (0..3).all(|d| whole_groups(c, &grid[d], &tg[d]));
    let uses_grid = body_idents.contains("threads_per_grid")
        || body_idents.contains("grid_size")
        || body_idents.contains("threads_per_threadgroup")
        || body_idents.contains("simdgroups_per_threadgroup");
    if !whole || uses_grid {
        for &i in &launch_ix[1..] {
            let l = &plan.launch[i];
            if l.grid != l0.grid || l.threadgroup != l0.threadgroup {
                return Err(format!(
                    "kernel `{}` is launched with different grids; the body needs its exact Metal grid, so give each grid its own [[kernel]]",
                    k.name
                ));
            }
        }
    }
    if whole {
        return Ok(None);
    }
    // The grid's names must reach the kernel: dims as scalars, tunables as template ints.
    let mut c_exprs = Vec::new();
    for e in &grid {
        for v in e.0.vars() {
            let is_tunable = plan.tunable.contains_key(&v);
            let have = plan.launch[first].template.contains(&v) || scalars.contains(&v);
            if !have {
                if body_idents.contains(&v) {
                    return Err(format!(
                        "kernel `{}`: its grid uses `{v}`, which the back-translated kernel needs as an argument, but the body already uses that name",
                        k.name
                    ));
                }
                for &i in launch_ix {
                    if is_tunable {
                        plan.launch[i].template.push(v.clone());
                    } else {
                        plan.launch[i].scalars.push(ExprField(
                            ksearch_model::expr::Expr::parse(&v).expect("a name parses"),
                        ));
                    }
                }
                if !is_tunable {
                    scalars.push(v.clone());
                }
            }
        }
        let by_value: Vec<String> = scalars
            .iter()
            .filter(|s| !plan.launch[first].template.contains(s))
            .cloned()
            .collect();
        c_exprs.push(grid_expr_c(e, &by_value).map_err(|why| {
            format!(
                "launch of `{}`: grid `{}` is not a whole number of threadgroups, and {why}",
                k.name, e.0
            )
        })?);
    }
    let whole_warps = always_multiple(c, &grid[0], 32)
        && always_multiple(c, &tg[0], 32)
        && (1..3).all(|d| whole_groups(c, &grid[d], &tg[d]));
    if !whole_warps
        && ["threadgroup_barrier", "simd_", "simdgroup_", "quad_"]
            .iter()
            .any(|p| body_src.contains(p))
    {
        notes.push(format!(
                    "kernel `{}`: the Metal grid is not a whole number of threadgroups and the body synchronises; threads outside the grid leave at the start, and barriers / simd functions then run with the threads that remain (as on Metal), which CUDA guarantees only for whole exited warps",
                    k.name
                ));
    }
    Ok(Some(c_exprs.join(", ")))
}

/// The CUDA header a kernel includes: the prelude (Metal's built-ins in CUDA), then its Metal header
/// rewritten; one per Metal header, shared by the kernels that include it (`a.h` -> `a.cuh`, or
/// `a.h.cuh` when another header took `a.cuh`). Returns its file name; `done` collects the texts.
fn header_file(
    k: &KernelDecl,
    header_text: Option<&str>,
    user_fns: &BTreeSet<String>,
    in_dir: &dyn Fn(&str) -> String,
    header_names: &mut BTreeMap<String, String>,
    headers_done: &mut BTreeMap<String, String>,
) -> Result<String, BackTranslateError> {
    let header_name = match &k.header {
        Some(h) => match header_names.get(h) {
            Some(n) => n.clone(),
            None => {
                let mut n = format!("{}.cuh", stem(h));
                if header_names.values().any(|v| *v == n) || n == PRELUDE_FILE {
                    n = format!("{h}.cuh");
                }
                header_names.insert(h.clone(), n.clone());
                n
            }
        },
        None => PRELUDE_FILE.to_string(),
    };
    if !headers_done.contains_key(&header_name) {
        let mut text = format!(
            "// Generated by `ksearch back-translate`: the Metal built-ins emulated in CUDA, then the kernel's header.\n{PRELUDE}"
        );
        if let (Some(h), Some(src)) = (&k.header, header_text) {
            let mut counts = BTreeMap::new();
            let rewritten = rewrite(
                src,
                &in_dir(h),
                &Ctx {
                    scalars: &[],
                    user_fns,
                    is_body: false,
                },
                &mut counts,
                &mut BTreeSet::new(),
            )?;
            text.push_str(&format!("\n// ---- {h}, back-translated ----\n{rewritten}"));
        }
        headers_done.insert(header_name.clone(), text);
    }
    Ok(header_name)
}

fn scalar_names(v: &[ExprField]) -> Vec<String> {
    v.iter().map(|s| s.0.src().trim().to_string()).collect()
}

fn stem(file: &str) -> &str {
    file.rsplit_once('.').map(|(s, _)| s).unwrap_or(file)
}

/// Does the grid extent `g` (threads) always split into whole threadgroups of `t`? Decided by evaluating
/// both on many random values of the dims and on every listed value of the tunables: a grid written as a
/// multiple of its threadgroup (`256 * ((L + Q - 1) // Q)` over `256`) passes, `B * D` over `TG` does not.
fn whole_groups(c: &Candidate, g: &ExprField, t: &ExprField) -> bool {
    if g.0.src().trim() == t.0.src().trim() || t.0.src().trim() == "1" {
        return true;
    }
    let mut vars = g.0.vars();
    vars.extend(t.0.vars());
    let mut rng = ksearch_model::rng::Rng::new(0x6b73_6274);
    let mut decided = 0;
    for _ in 0..512 {
        let env = random_env(c, &vars, &mut rng);
        let (Ok(gv), Ok(tv)) = (g.0.eval_int(&env), t.0.eval_int(&env)) else {
            continue;
        };
        if tv <= 0 || gv <= 0 {
            continue;
        }
        decided += 1;
        // A grid below one threadgroup is not whole either: MLX-CUDA launches blocks of the threadgroup's
        // size (some versions clamp the block to the grid), where Metal makes the one group smaller.
        if gv % tv != 0 {
            return false;
        }
    }
    decided > 0
}

/// Is `e` a multiple of `m` for every listed value of the tunables and many values of the dims?
fn always_multiple(c: &Candidate, e: &ExprField, m: i64) -> bool {
    sample_all(c, e, |v| v % m == 0)
}

/// Evaluates `e` on random dims and listed tunable values; true when every decided draw satisfies `ok`.
fn sample_all(c: &Candidate, e: &ExprField, ok: impl Fn(i64) -> bool) -> bool {
    let mut rng = ksearch_model::rng::Rng::new(0x6b73_6275);
    let mut decided = 0;
    for _ in 0..512 {
        let env = random_env(c, &e.0.vars(), &mut rng);
        if let Ok(v) = e.0.eval_int(&env) {
            decided += 1;
            if !ok(v) {
                return false;
            }
        }
    }
    decided > 0
}

fn random_env(c: &Candidate, vars: &[String], rng: &mut ksearch_model::rng::Rng) -> Env {
    let mut env = Env::new();
    for v in vars {
        let x = match c.plan.tunable.get(v) {
            Some(tu) => tu.values[rng.below(tu.values.len())] as f64,
            None => {
                let top = if rng.below(2) == 0 { 64 } else { 5000 };
                (1 + rng.below(top)) as f64
            }
        };
        env.insert(v.clone(), x);
    }
    env
}

/// A grid extent as CUDA code over the kernel's arguments: dims are scalar inputs (`D[0]`), tunables
/// are template constants. Integer arithmetic only.
fn grid_expr_c(e: &ExprField, scalars: &[String]) -> Result<String, String> {
    let src = e.0.src();
    let mut out = String::from("(long long)(");
    let chars: Vec<char> = src.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let ch = chars[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch.is_ascii_alphabetic() || ch == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let name: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            if next == Some(&'(') {
                match name.as_str() {
                    "min" | "max" => out.push_str(&format!("ksbt::{name}")),
                    _ => return Err(format!("its function `{name}` has no integer CUDA form")),
                }
            } else if scalars.contains(&name) {
                out.push_str(&format!("(long long){name}[0]"));
            } else {
                out.push_str(&format!("(long long){name}"));
            }
        } else if ch.is_ascii_digit() {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_alphanumeric() {
                i += 1;
            }
            if i < chars.len() && chars[i] == '.' {
                return Err("it has a non-integer number".into());
            }
            out.extend(&chars[start..i]);
            out.push_str("LL");
        } else if ch == '/' {
            if chars.get(i + 1) == Some(&'/') {
                out.push_str(" / "); // extents are positive, so C's truncation is floor division
                i += 2;
            } else {
                return Err("it uses true division `/` (write `//`)".into());
            }
        } else if "+-*%(),".contains(ch) {
            if ch == '*' && chars.get(i + 1) == Some(&'*') {
                return Err("it uses `**`".into());
            }
            out.push(' ');
            out.push(ch);
            out.push(' ');
            i += 1;
        } else {
            return Err(format!("it uses `{ch}`"));
        }
    }
    out.push(')');
    Ok(out)
}

/// The body's prologue: every Metal thread attribute it names, defined from CUDA's indices, and the exit
/// of threads outside a grid that is not a whole number of threadgroups.
fn attribute_preamble(attrs: &BTreeSet<String>, ghost: Option<&str>) -> String {
    if attrs.is_empty() && ghost.is_none() {
        return String::new();
    }
    let mut s = String::from(
        "// ---- ksearch back-translation: Metal thread attributes from CUDA's indices ----\n",
    );
    let grid = match ghost {
        Some(g) => {
            s.push_str(&format!(
                "const long long ksbt_grid[3] = {{{g}}};  // the Metal grid, in threads\n"
            ));
            "make_uint3(uint(ksbt_grid[0]), uint(ksbt_grid[1]), uint(ksbt_grid[2]))".to_string()
        }
        None => {
            "make_uint3(gridDim.x * blockDim.x, gridDim.y * blockDim.y, gridDim.z * blockDim.z)"
                .to_string()
        }
    };
    let pos = "make_uint3(blockIdx.x * blockDim.x + threadIdx.x, blockIdx.y * blockDim.y + threadIdx.y, blockIdx.z * blockDim.z + threadIdx.z)";
    // Metal's edge threadgroup is partial: its size is what is left of the grid.
    let tptg = match ghost {
        Some(_) => "make_uint3(ksbt::min(blockDim.x, uint(ksbt_grid[0] - (long long)blockIdx.x * blockDim.x)), ksbt::min(blockDim.y, uint(ksbt_grid[1] - (long long)blockIdx.y * blockDim.y)), ksbt::min(blockDim.z, uint(ksbt_grid[2] - (long long)blockIdx.z * blockDim.z)))".to_string(),
        None => "make_uint3(blockDim.x, blockDim.y, blockDim.z)".to_string(),
    };
    let lin = "(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))";
    let defs: Vec<(&str, String)> = vec![
        ("thread_position_in_grid", format!("const uint3 thread_position_in_grid = {pos};")),
        ("thread_position_in_threadgroup", "const uint3 thread_position_in_threadgroup = make_uint3(threadIdx.x, threadIdx.y, threadIdx.z);".into()),
        ("threadgroup_position_in_grid", "const uint3 threadgroup_position_in_grid = make_uint3(blockIdx.x, blockIdx.y, blockIdx.z);".into()),
        ("threads_per_threadgroup", format!("const uint3 threads_per_threadgroup = {tptg};")),
        ("dispatch_threads_per_threadgroup", "const uint3 dispatch_threads_per_threadgroup = make_uint3(blockDim.x, blockDim.y, blockDim.z);".into()),
        ("threadgroups_per_grid", "const uint3 threadgroups_per_grid = make_uint3(gridDim.x, gridDim.y, gridDim.z);".into()),
        ("threads_per_grid", format!("const uint3 threads_per_grid = {grid};")),
        ("grid_size", format!("const uint3 grid_size = {grid};")),
        ("grid_origin", "const uint3 grid_origin = make_uint3(0, 0, 0);".into()),
        ("thread_index_in_threadgroup", format!("const uint thread_index_in_threadgroup = {lin};")),
        ("simdgroup_index_in_threadgroup", format!("const uint simdgroup_index_in_threadgroup = {lin} / 32u;")),
        ("thread_index_in_simdgroup", format!("const uint thread_index_in_simdgroup = {lin} % 32u;")),
        ("threads_per_simdgroup", "const uint threads_per_simdgroup = 32u;".into()),
        ("thread_execution_width", "const uint thread_execution_width = 32u;".into()),
        ("simdgroups_per_threadgroup", format!("const uint simdgroups_per_threadgroup = ({tptg}.x * {tptg}.y * {tptg}.z + 31u) / 32u;")),
        ("dispatch_simdgroups_per_threadgroup", "const uint dispatch_simdgroups_per_threadgroup = (blockDim.x * blockDim.y * blockDim.z + 31u) / 32u;".into()),
        ("quadgroup_index_in_threadgroup", format!("const uint quadgroup_index_in_threadgroup = {lin} / 4u;")),
        ("thread_index_in_quadgroup", format!("const uint thread_index_in_quadgroup = {lin} % 4u;")),
        ("threads_per_quadgroup", "const uint threads_per_quadgroup = 4u;".into()),
        ("quadgroups_per_threadgroup", "const uint quadgroups_per_threadgroup = (blockDim.x * blockDim.y * blockDim.z + 3u) / 4u;".into()),
    ];
    for (name, def) in &defs {
        if attrs.contains(*name) {
            s.push_str(def);
            s.push('\n');
        }
    }
    if ghost.is_some() {
        s.push_str(&format!(
            "{{\n  const uint3 p = {pos};\n  if (p.x >= ksbt_grid[0] || p.y >= ksbt_grid[1] || p.z >= ksbt_grid[2]) return;  // Metal launches no thread outside its grid\n}}\n"
        ));
    }
    s.push_str("// ---- the Metal body, back-translated ----\n");
    s
}

// ---------------------------------------------------------------------------------------------------------
// Lexing

/// Every identifier in a source (comments and strings excluded).
fn identifiers(src: &str) -> BTreeSet<String> {
    lex(src)
        .into_iter()
        .filter(|t| t.kind == Kind::Ident)
        .map(|t| t.text)
        .collect()
}

/// Names of the functions a header defines (`type name(...) {`), which must not be remapped.
fn defined_functions(src: &str) -> BTreeSet<String> {
    let toks: Vec<Tok> = lex(src)
        .into_iter()
        .filter(|t| !matches!(t.kind, Kind::Space | Kind::Comment | Kind::Preproc))
        .collect();
    let mut out = BTreeSet::new();
    let mut depth = 0i32;
    for (i, t) in toks.iter().enumerate() {
        match t.text.as_str() {
            "{" => depth += 1,
            "}" => depth -= 1,
            _ => {}
        }
        if depth == 0
            && t.kind == Kind::Ident
            && toks.get(i + 1).is_some_and(|n| n.text == "(")
            && i > 0
            && matches!(toks[i - 1].kind, Kind::Ident)
        {
            out.insert(t.text.clone());
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------------------
// Rewriting

struct Ctx<'a> {
    scalars: &'a [String],
    user_fns: &'a BTreeSet<String>,
    is_body: bool,
}

const ATTRIBUTES: &[&str] = &[
    "thread_position_in_grid",
    "thread_position_in_threadgroup",
    "threadgroup_position_in_grid",
    "threads_per_threadgroup",
    "dispatch_threads_per_threadgroup",
    "threadgroups_per_grid",
    "threads_per_grid",
    "grid_size",
    "grid_origin",
    "thread_index_in_threadgroup",
    "simdgroup_index_in_threadgroup",
    "thread_index_in_simdgroup",
    "threads_per_simdgroup",
    "thread_execution_width",
    "simdgroups_per_threadgroup",
    "dispatch_simdgroups_per_threadgroup",
    "quadgroup_index_in_threadgroup",
    "thread_index_in_quadgroup",
    "threads_per_quadgroup",
    "quadgroups_per_threadgroup",
];

/// Functions the prelude defines in `ksbt` (math; `metal::`, `fast::` and `precise::` names too).
const MATH: &[&str] = &[
    "exp",
    "exp2",
    "exp10",
    "log",
    "log2",
    "log10",
    "log1p",
    "expm1",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "fabs",
    "abs",
    "floor",
    "ceil",
    "round",
    "rint",
    "trunc",
    "erf",
    "fract",
    "saturate",
    "sign",
    "pow",
    "powr",
    "atan2",
    "fmod",
    "fmin",
    "fmax",
    "copysign",
    "step",
    "min",
    "max",
    "clamp",
    "fma",
    "mix",
    "smoothstep",
    "select",
    "dot",
    "length",
    "normalize",
    "isnan",
    "isinf",
    "isfinite",
    "signbit",
    "popcount",
    "clz",
    "ctz",
    "mulhi",
    "asinh",
    "acosh",
    "atanh",
    "cbrt",
    "hypot",
    "divide",
    "max3",
    "min3",
    "ceildiv",
];

/// Other functions and names of the prelude, rewritten to `ksbt::NAME` wherever they appear unqualified.
const PRELUDE_NAMES: &[&str] = &[
    "threadgroup_barrier",
    "simdgroup_barrier",
    "simd_shuffle",
    "simd_broadcast",
    "simd_shuffle_xor",
    "simd_shuffle_up",
    "simd_shuffle_down",
    "simd_shuffle_rotate_up",
    "simd_shuffle_rotate_down",
    "simd_shuffle_and_fill_up",
    "simd_shuffle_and_fill_down",
    "simd_broadcast_first",
    "simd_is_first",
    "simd_sum",
    "simd_product",
    "simd_max",
    "simd_min",
    "simd_and",
    "simd_or",
    "simd_xor",
    "simd_prefix_inclusive_sum",
    "simd_prefix_inclusive_product",
    "simd_prefix_exclusive_sum",
    "simd_prefix_exclusive_product",
    "simd_ballot",
    "simd_any",
    "simd_all",
    "atomic_fetch_add_explicit",
    "atomic_fetch_sub_explicit",
    "atomic_fetch_max_explicit",
    "atomic_fetch_min_explicit",
    "atomic_exchange_explicit",
    "atomic_load_explicit",
    "atomic_store_explicit",
    "atomic_compare_exchange_weak_explicit",
    "memory_order_relaxed",
    "simdgroup_matrix",
    "simdgroup_float8x8",
    "simdgroup_half8x8",
    "simdgroup_bfloat8x8",
    "make_filled_simdgroup_matrix",
    "simdgroup_load",
    "simdgroup_store",
    "simdgroup_multiply_accumulate",
    "simdgroup_multiply",
    "as_type",
    "quad_shuffle",
    "quad_broadcast",
    "quad_shuffle_xor",
    "quad_shuffle_up",
    "quad_shuffle_down",
    "quad_sum",
    "quad_max",
    "quad_min",
    "Limits",
    "numeric_limits",
];

/// Metal names with no emulation: an error if they appear.
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "texture1d",
        "textures do not exist in mx.fast kernels or the prelude",
    ),
    (
        "texture2d",
        "textures do not exist in mx.fast kernels or the prelude",
    ),
    (
        "texture3d",
        "textures do not exist in mx.fast kernels or the prelude",
    ),
    ("sampler", "samplers are not emulated"),
    ("imageblock", "imageblocks are not emulated"),
    ("threadgroup_imageblock", "imageblocks are not emulated"),
    ("raster_order_group", "raster order groups are not emulated"),
    (
        "simdgroup_async_copy",
        "not public MSL and not emulated; load by hand and barrier",
    ),
    ("visible_function_table", "function tables are not emulated"),
    (
        "half3",
        "half vectors other than half2 are not emulated; use float vectors",
    ),
    (
        "half4",
        "half vectors other than half2 are not emulated; use float vectors",
    ),
    (
        "bfloat2",
        "bfloat vectors are not emulated; use float vectors",
    ),
    (
        "bfloat3",
        "bfloat vectors are not emulated; use float vectors",
    ),
    (
        "bfloat4",
        "bfloat vectors are not emulated; use float vectors",
    ),
    (
        "packed_half4",
        "packed half vectors are not emulated; use float vectors",
    ),
    (
        "simd_vote",
        "use the value of simd_ballot directly (a 64-bit mask here)",
    ),
    (
        "double",
        "Metal has no double, so a Metal kernel using it is already wrong",
    ),
];

/// Metal library functions with no emulation: an error where they are called (unless the kernel's header
/// defines a function of that name).
const UNSUPPORTED_CALLS: &[&str] = &[
    "any",
    "all",
    "sincos",
    "fdim",
    "modf",
    "frexp",
    "ldexp",
    "ilogb",
    "cospi",
    "sinpi",
    "tanpi",
    "extract_bits",
    "insert_bits",
    "reverse_bits",
    "rotate",
    "absdiff",
    "addsat",
    "subsat",
    "madhi",
    "madsat",
    "mad24",
    "mul24",
    "distance",
    "cross",
    "reflect",
    "refract",
    "faceforward",
    "simd_active_threads_mask",
    "quad_ballot",
    "quad_any",
    "quad_all",
];

/// Metal scalar and vector types with a different CUDA name.
fn type_map(name: &str) -> Option<&'static str> {
    if let Some(cuda) = ksearch_model::dialect::cuda_of(name) {
        return Some(cuda);
    }
    Some(match name {
        "atomic_int" => "int",
        "atomic_uint" => "uint",
        "atomic_float" => "float",
        "packed_float2" => "float2",
        "packed_float4" => "float4",
        _ => return None,
    })
}

fn is_swizzle(s: &str) -> bool {
    (2..=4).contains(&s.len())
        && (s.chars().all(|c| "xyzw".contains(c)) || s.chars().all(|c| "rgba".contains(c)))
}

fn swizzle_index(c: char) -> usize {
    match c {
        'x' | 'r' => 0,
        'y' | 'g' => 1,
        'z' | 'b' => 2,
        _ => 3,
    }
}

fn bump(counts: &mut BTreeMap<String, usize>, what: &str) {
    *counts.entry(what.to_string()).or_default() += 1;
}

/// Rewrites one Metal source (a body, or a header when `!ctx.is_body`) into the MLX-CUDA dialect.
/// `attrs` collects the thread attributes a body names. Long by design: one pass over the tokens with a
/// case per Metal construct (literals, attributes, swizzles, `metal::` names, address spaces, atomics,
/// types, built-ins), read top to bottom as a table.
#[expect(
    clippy::too_many_lines,
    reason = "one pass over the tokens, a case per Metal construct, read as a table"
)]
fn rewrite(
    src: &str,
    file: &str,
    ctx: &Ctx,
    counts: &mut BTreeMap<String, usize>,
    attrs: &mut BTreeSet<String>,
) -> Result<String, BackTranslateError> {
    let toks = lex(src);
    let mut out: Vec<String> = toks.iter().map(|t| t.text.clone()).collect();
    let sig: Vec<usize> = (0..toks.len())
        .filter(|&i| !matches!(toks[i].kind, Kind::Space | Kind::Comment))
        .collect();
    let err = |t: &Tok, construct: &str, why: &str| BackTranslateError::Construct {
        file: file.to_string(),
        line: t.line,
        construct: construct.to_string(),
        why: why.to_string(),
    };
    // position in `sig` of each significant token
    let text = |j: usize| -> &str { sig.get(j).map(|&i| toks[i].text.as_str()).unwrap_or("") };
    let mut j = 0;
    while j < sig.len() {
        let i = sig[j];
        let t = &toks[i];
        let prev = if j > 0 { text(j - 1) } else { "" };
        let next = text(j + 1);
        match t.kind {
            Kind::Preproc => {
                out[i] = rewrite_preproc(t).map_err(|why| err(t, t.text.trim(), &why))?;
                if out[i] != t.text {
                    bump(counts, "preprocessor");
                }
            }
            Kind::Number => {
                let lower = t.text.to_ascii_lowercase();
                if lower.ends_with('h') && !lower.starts_with("0x") {
                    out[i] = format!("__float2half({}f)", &t.text[..t.text.len() - 1]);
                    bump(counts, "half literal");
                }
            }
            Kind::Punct if t.text == "[[" => {
                let a = text(j + 1);
                if ![
                    "maybe_unused",
                    "likely",
                    "unlikely",
                    "fallthrough",
                    "nodiscard",
                ]
                .contains(&a)
                {
                    return Err(err(
                        t,
                        &format!("[[{a}]]"),
                        "Metal attributes belong to signatures, which MLX writes",
                    ));
                }
            }
            Kind::Ident => {
                let name = t.text.as_str();
                let member = prev == "." || prev == "->";
                let qualified = prev == "::";
                if member {
                    if is_swizzle(name) {
                        let after = next;
                        if after == "="
                            || (after.len() == 1
                                && "+-*/%&|^".contains(after)
                                && text(j + 2) == "=")
                        {
                            return Err(err(
                                t,
                                &format!(".{name} ="),
                                "writing through a swizzle is not emulated; assign the components one by one",
                            ));
                        }
                        // find the start of the operand on the left of the `.`
                        let start = operand_start(&sig, &toks, j - 1)
                            .ok_or_else(|| err(t, &format!(".{name}"), "a swizzle of a complex expression is not emulated; name the vector first"))?;
                        let idx: Vec<String> =
                            name.chars().map(|c| swizzle_index(c).to_string()).collect();
                        out[sig[start]] =
                            format!("ksbt::swizzle<{}>({}", idx.join(", "), out[sig[start]]);
                        out[sig[j - 1]] = String::new();
                        out[i] = ")".into();
                        bump(counts, "swizzle");
                    }
                } else if !qualified && next == "::" {
                    match name {
                        "metal" | "fast" | "precise" => {
                            // metal::[fast::|precise::]NAME
                            let mut k = j + 2;
                            if text(k - 2) == "metal"
                                && ["fast", "precise"].contains(&text(k))
                                && text(k + 1) == "::"
                            {
                                k += 2;
                            }
                            let f = text(k);
                            if !(MATH.contains(&f) || PRELUDE_NAMES.contains(&f)) {
                                return Err(err(
                                    t,
                                    &format!("{name}::{f}"),
                                    "this Metal library function has no CUDA emulation in the prelude",
                                ));
                            }
                            for m in j..k {
                                out[sig[m]] = String::new();
                            }
                            out[sig[k]] = format!("ksbt::{f}");
                            bump(counts, "metal math");
                            j = k + 1;
                            continue;
                        }
                        "mem_flags" => {
                            out[i] = "ksbt::mem_flags".into();
                        }
                        _ => {}
                    }
                } else if !qualified {
                    if let Some((_, why)) = UNSUPPORTED.iter().find(|(n, _)| *n == name) {
                        return Err(err(t, name, why));
                    }
                    if next == "("
                        && UNSUPPORTED_CALLS.contains(&name)
                        && !ctx.user_fns.contains(name)
                    {
                        return Err(err(
                            t,
                            &format!("{name}(...)"),
                            "this Metal library function has no CUDA emulation in the prelude",
                        ));
                    }
                    if ctx.is_body && ATTRIBUTES.contains(&name) {
                        attrs.insert(name.to_string());
                    } else if ctx.is_body && ctx.scalars.iter().any(|s| s == name) {
                        out[i] = format!("{name}[0]");
                        bump(counts, "scalar");
                    } else if name == "device" || name == "thread" {
                        out[i] = String::new();
                        bump(counts, "address space");
                    } else if name == "constant"
                        && prev == "static"
                        && next == "constexpr"
                        && in_struct_body(&sig, &toks, j)
                    {
                        // `static constant constexpr int N = 4;` in a struct: a compile-time member (as MLX's
                        // own structs write them); CUDA allows no `__constant__` on a member.
                        out[i] = String::new();
                        bump(counts, "address space");
                    } else if name == "constant" || name == "threadgroup" {
                        // `static` may come first (`static constant float table[] = ...` in a header), and
                        // an alignment (`alignas(16) threadgroup half tile[...]`)
                        let mut k = if prev == "static" { j - 1 } else { j };
                        if k >= 4 && text(k - 1) == ")" {
                            let open = (0..k - 1).rev().find(|&m| text(m) == "(");
                            if let Some(o) = open.filter(|&o| o > 0 && text(o - 1) == "alignas") {
                                k = o - 1;
                            }
                        }
                        let before = if k > 0 { text(k - 1) } else { "" };
                        let stmt_start = matches!(before, "" | ";" | "{" | "}")
                            || (k > 0 && toks[sig[k - 1]].kind == Kind::Preproc);
                        if stmt_start && !declares_pointer(&sig, &toks, j + 1) {
                            out[i] = if name == "threadgroup" {
                                "__shared__".into()
                            } else {
                                "__constant__".into()
                            };
                            bump(counts, "threadgroup memory");
                        } else {
                            // constant memory is read-only: the pointee stays const
                            out[i] = if name == "constant" && prev != "const" && next != "const" {
                                "const".into()
                            } else {
                                String::new()
                            };
                            bump(counts, "address space");
                        }
                    } else if name == "using"
                        && next == "namespace"
                        && text(j + 2) == "metal"
                        && text(j + 3) == ";"
                    {
                        for m in j..=j + 3 {
                            out[sig[m]] = String::new();
                        }
                        j += 4;
                        continue;
                    } else if name == "atomic" && next == "<" {
                        // atomic<T> -> T: outputs are plain pointers on MLX-CUDA
                        let close = matching_angle(&sig, &toks, j + 1)
                            .ok_or_else(|| err(t, "atomic<", "no closing `>`"))?;
                        out[i] = String::new();
                        out[sig[j + 1]] = String::new();
                        out[sig[close]] = String::new();
                        bump(counts, "atomic");
                    } else if let Some(to) = type_map(name) {
                        out[i] = to.into();
                        bump(counts, "type");
                    } else if next == "("
                        && !ctx.user_fns.contains(name)
                        && is_vector_type(name)
                        && prev != "<"
                    {
                        out[i] = format!("ksbt::make_{name}");
                        bump(counts, "vector constructor");
                    } else if ctx.user_fns.contains(name) {
                    } else if PRELUDE_NAMES.contains(&name) {
                        out[i] = format!("ksbt::{name}");
                        bump(
                            counts,
                            if name.starts_with("simd_") {
                                "simd function"
                            } else if name.ends_with("barrier") {
                                "barrier"
                            } else if name.contains("simdgroup") {
                                "simdgroup_matrix"
                            } else if name.starts_with("atomic") || name.starts_with("memory_order")
                            {
                                "atomic"
                            } else {
                                "other"
                            },
                        );
                    } else if MATH.contains(&name) && next == "(" {
                        out[i] = format!("ksbt::{name}");
                        bump(counts, "math");
                    }
                }
            }
            _ => {}
        }
        j += 1;
    }
    Ok(out.concat())
}

fn is_vector_type(name: &str) -> bool {
    name == "ulong2"
        || ["float", "int", "uint"].iter().any(|p| {
            name.strip_prefix(p)
                .is_some_and(|n| ["2", "3", "4"].contains(&n))
        })
}

/// From the significant token `j` (just after `threadgroup` / `constant`), does the declaration declare a
/// pointer or reference (the qualifier then names the pointee's address space, and is dropped)?
fn declares_pointer(sig: &[usize], toks: &[Tok], mut j: usize) -> bool {
    let mut angle = 0;
    while let Some(&i) = sig.get(j) {
        match toks[i].text.as_str() {
            "<" => angle += 1,
            ">" => angle -= 1,
            "*" | "&" if angle == 0 => return true,
            // `threadgroup float (&rows)[4][8] = s.rows;`: a reference (or pointer) to an array.
            "(" if angle == 0
                && sig
                    .get(j + 1)
                    .is_some_and(|&n| matches!(toks[n].text.as_str(), "*" | "&")) =>
            {
                return true;
            }
            ";" | "=" | "[" | "," | "(" | "{" | ")" => return false,
            _ => {}
        }
        j += 1;
    }
    false
}

/// Whether significant position `j` is directly inside a `struct` or `class` body.
fn in_struct_body(sig: &[usize], toks: &[Tok], j: usize) -> bool {
    let mut depth = 0;
    for k in (0..j).rev() {
        match toks[sig[k]].text.as_str() {
            "}" => depth += 1,
            "{" if depth > 0 => depth -= 1,
            "{" => {
                // The head of the innermost open brace: back to the statement before it.
                return (0..k)
                    .rev()
                    .map(|m| toks[sig[m]].text.as_str())
                    .take_while(|t| !matches!(*t, ";" | "{" | "}"))
                    .any(|t| t == "struct" || t == "class");
            }
            _ => {}
        }
    }
    false
}

/// The `>` matching the `<` at significant position `j`.
fn matching_angle(sig: &[usize], toks: &[Tok], j: usize) -> Option<usize> {
    let mut depth = 0;
    for (k, &i) in sig.iter().enumerate().skip(j) {
        match toks[i].text.as_str() {
            "<" => depth += 1,
            ">" => {
                depth -= 1;
                if depth == 0 {
                    return Some(k);
                }
            }
            ";" | "{" => return None,
            _ => {}
        }
    }
    None
}

/// The first significant position of the operand that ends just before the `.` at position `dot`:
/// a name, subscripts and calls on it, member chains, or a parenthesised expression.
fn operand_start(sig: &[usize], toks: &[Tok], dot: usize) -> Option<usize> {
    let mut k = dot.checked_sub(1)?;
    loop {
        let t = &toks[sig[k]];
        match t.text.as_str() {
            ")" | "]" => {
                let (open, close) = if t.text == ")" {
                    ("(", ")")
                } else {
                    ("[", "]")
                };
                let mut depth = 0;
                loop {
                    let s = toks[sig[k]].text.as_str();
                    if s == close {
                        depth += 1;
                    } else if s == open {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    k = k.checked_sub(1)?;
                }
                // a call or subscript continues to the left; a bare parenthesis ends the operand
                if k > 0
                    && (toks[sig[k - 1]].kind == Kind::Ident
                        || [")", "]"].contains(&toks[sig[k - 1]].text.as_str()))
                {
                    k -= 1;
                    continue;
                }
                return Some(k);
            }
            _ if t.kind == Kind::Ident => {
                if k >= 2 && [".", "->", "::"].contains(&toks[sig[k - 1]].text.as_str()) {
                    k -= 2;
                    continue;
                }
                return Some(k);
            }
            _ => return None,
        }
    }
}

fn rewrite_preproc(t: &Tok) -> Result<String, String> {
    let words: Vec<&str> = t.text.trim_start_matches('#').split_whitespace().collect();
    let s = words.join(" ");
    if let Some(rest) = s.strip_prefix("pragma clang loop ") {
        let compact: String = rest.chars().filter(|c| !c.is_whitespace()).collect();
        if compact.contains("unroll(full)") || compact.contains("unroll(enable)") {
            return Ok("#pragma unroll".into());
        }
        if compact.contains("unroll(disable)") {
            return Ok("#pragma unroll 1".into());
        }
        if let Some(n) = compact
            .split("unroll_count(")
            .nth(1)
            .and_then(|r| r.split(')').next())
        {
            return Ok(format!("#pragma unroll {n}"));
        }
        return Ok(format!("// (dropped: {})", t.text.trim()));
    }
    if let Some(rest) = s.strip_prefix("include ") {
        let r = rest.trim();
        if r.starts_with("<metal_") || r.starts_with("\"metal_") {
            return Ok(format!(
                "// (dropped: {}; the prelude emulates it)",
                t.text.trim()
            ));
        }
        return Err(format!(
            "only Metal standard headers can be included (the prelude replaces them); `{r}` has no CUDA counterpart"
        ));
    }
    Ok(t.text.clone())
}

/// The report for people.
pub fn report_text(r: &Report, out: &Path) -> String {
    let mut s = format!(
        "back-translated `{}` (mlx-metal -> mlx-cuda) into {}\n",
        r.name,
        out.display()
    );
    for k in &r.kernels {
        let rw: Vec<String> = k.rewrites.iter().map(|(k, v)| format!("{k} {v}")).collect();
        s.push_str(&format!(
            "  {}: {} -> {} (header {}); rewrites: {}; attributes: {}{}\n",
            k.kernel,
            k.metal_source,
            k.cuda_source,
            k.header,
            if rw.is_empty() {
                "none".into()
            } else {
                rw.join(", ")
            },
            if k.attributes.is_empty() {
                "none".into()
            } else {
                k.attributes.join(", ")
            },
            k.ghost_guard
                .as_ref()
                .map(|g| format!("; grid guard ({g})"))
                .unwrap_or_default()
        ));
    }
    for n in &r.notes {
        s.push_str(&format!("  note: {n}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx<'a>(scalars: &'a [String], fns: &'a BTreeSet<String>) -> Ctx<'a> {
        Ctx {
            scalars,
            user_fns: fns,
            is_body: true,
        }
    }

    fn rw(src: &str, scalars: &[&str]) -> Result<(String, BTreeSet<String>), BackTranslateError> {
        let sc: Vec<String> = scalars.iter().map(|s| s.to_string()).collect();
        let fns = BTreeSet::new();
        let mut attrs = BTreeSet::new();
        let out = rewrite(
            src,
            "k.metal",
            &ctx(&sc, &fns),
            &mut BTreeMap::new(),
            &mut attrs,
        )?;
        Ok((out, attrs))
    }

    #[test]
    fn scalars_become_first_elements() {
        let (o, _) = rw("const uint n = uint(N); x.N = N + M::N;", &["N"]).unwrap();
        assert_eq!(o, "const uint n = uint(N[0]); x.N = N[0] + M::N;");
    }

    #[test]
    fn address_spaces_and_threadgroup_arrays() {
        let (o, _) = rw(
            "threadgroup float s[32];\nthreadgroup float* p = (threadgroup float*)s;\nconst device T* x0 = x;\n",
            &[],
        )
        .unwrap();
        assert_eq!(
            o,
            "__shared__ float s[32];\n float* p = ( float*)s;\nconst  T* x0 = x;\n"
        );
    }

    #[test]
    fn program_scope_constant_tables() {
        let fns = BTreeSet::new();
        let c = Ctx {
            scalars: &[],
            user_fns: &fns,
            is_body: false,
        };
        let out = rewrite(
            "constant float w[2] = {1, 2};\nstatic constant int n[1] = {3};\ninline float f(constant float* p) { return p[0]; }\n",
            "h.metal",
            &c,
            &mut BTreeMap::new(),
            &mut BTreeSet::new(),
        )
        .unwrap();
        assert_eq!(
            out,
            "__constant__ float w[2] = {1, 2};\nstatic __constant__ int n[1] = {3};\ninline float f(const float* p) { return p[0]; }\n"
        );
    }

    #[test]
    fn constant_members_and_references_to_threadgroup_arrays() {
        let fns = BTreeSet::new();
        let c = Ctx {
            scalars: &[],
            user_fns: &fns,
            is_body: false,
        };
        // A struct's compile-time member loses `constant` (CUDA has no __constant__ member); a program-scope
        // table keeps it (read at run time by device code); a reference binds, it declares nothing.
        let out = rewrite(
            "struct S { static constant constexpr int N = 4; float a[N]; };
static constant constexpr float lut[2] = {1, 2};
inline void f(threadgroup S& s) { threadgroup float (&a)[4] = s.a; a[0] = lut[1]; }
",
            "h.metal",
            &c,
            &mut BTreeMap::new(),
            &mut BTreeSet::new(),
        )
        .unwrap();
        assert_eq!(
            out,
            "struct S { static  constexpr int N = 4; float a[N]; };
static __constant__ constexpr float lut[2] = {1, 2};
inline void f( S& s) {  float (&a)[4] = s.a; a[0] = lut[1]; }
"
        );
    }

    #[test]
    fn barriers_simd_and_math_map_to_the_prelude() {
        let (o, _) = rw(
            "threadgroup_barrier(mem_flags::mem_threadgroup); float s = simd_sum(v) + metal::exp(x) + fast::exp2(y) + metal::precise::sqrt(z) + max(a, b);",
            &[],
        )
        .unwrap();
        assert_eq!(
            o,
            "ksbt::threadgroup_barrier(ksbt::mem_flags::mem_threadgroup); float s = ksbt::simd_sum(v) + ksbt::exp(x) + ksbt::exp2(y) + ksbt::sqrt(z) + ksbt::max(a, b);"
        );
    }

    #[test]
    fn attributes_are_collected_and_swizzles_rewritten() {
        let (o, a) = rw(
            "uint2 g = threadgroup_position_in_grid.xy; uint l = thread_index_in_simdgroup; float2 v = float2(1.0f, 2.0f); float w = p[i].yx.x;",
            &[],
        )
        .unwrap();
        assert!(
            a.contains("threadgroup_position_in_grid") && a.contains("thread_index_in_simdgroup")
        );
        assert!(
            o.contains("uint2 g = ksbt::swizzle<0, 1>(threadgroup_position_in_grid);"),
            "{o}"
        );
        assert!(o.contains("ksbt::make_float2(1.0f, 2.0f)"), "{o}");
        assert!(o.contains("ksbt::swizzle<1, 0>(p[i]).x"), "{o}");
    }

    #[test]
    fn types_pragmas_and_literals() {
        let (o, _) = rw(
            "#pragma clang loop unroll(full)\nfor (int i = 0; i < 4; ++i) {}\n#pragma clang loop unroll_count(4)\nhalf h = 1.5h; bfloat16_t b; float16_t c;\n",
            &[],
        )
        .unwrap();
        assert_eq!(
            o,
            "#pragma unroll\nfor (int i = 0; i < 4; ++i) {}\n#pragma unroll 4\n__half h = __float2half(1.5f); __nv_bfloat16 b; __half c;\n"
        );
    }

    #[test]
    fn atomics_and_simdgroup_matrix() {
        let (o, _) = rw(
            "atomic_fetch_add_explicit((device atomic<float>*)&out[i], v, memory_order_relaxed);\nsimdgroup_float8x8 a = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);\nsimdgroup_multiply_accumulate(a, a, a, a);",
            &[],
        )
        .unwrap();
        assert!(
            o.contains(
                "ksbt::atomic_fetch_add_explicit(( float*)&out[i], v, ksbt::memory_order_relaxed);"
            ),
            "{o}"
        );
        assert!(o.contains(
            "ksbt::simdgroup_float8x8 a = ksbt::make_filled_simdgroup_matrix<float, 8, 8>(0.0f);"
        ));
        assert!(o.contains("ksbt::simdgroup_multiply_accumulate(a, a, a, a);"));
    }

    #[test]
    fn limits_quads_and_metal_utils() {
        let (o, _) = rw(
            "float a = metal::numeric_limits<float>::max(); float b = Limits<T>::finite_min; float c = quad_sum(x) + max3(a, b, c);",
            &[],
        )
        .unwrap();
        assert_eq!(
            o,
            "float a = ksbt::numeric_limits<float>::max(); float b = ksbt::Limits<T>::finite_min; float c = ksbt::quad_sum(x) + ksbt::max3(a, b, c);"
        );
    }

    #[test]
    fn comments_and_strings_are_untouched() {
        let (o, _) = rw(
            "// threadgroup device N simd_sum\n/* metal::exp */ x = 1;",
            &["N"],
        )
        .unwrap();
        assert_eq!(
            o,
            "// threadgroup device N simd_sum\n/* metal::exp */ x = 1;"
        );
    }

    #[test]
    fn unsupported_constructs_name_the_line() {
        let e = rw("float a;\nhalf4 v = 0;", &[]).unwrap_err().to_string();
        assert!(e.contains("k.metal:2") && e.contains("`half4`"), "{e}");
        let e = rw("x = metal::frexp(y);", &[]).unwrap_err().to_string();
        assert!(e.contains("metal::frexp"), "{e}");
        let e = rw("#include <foo.h>\n", &[]).unwrap_err().to_string();
        assert!(e.contains("k.metal:1") && e.contains("foo.h"), "{e}");
        let e = rw("v.xy = w;", &[]).unwrap_err().to_string();
        assert!(e.contains("swizzle"), "{e}");
        let e = rw("bool2 b;\nif (any(b)) {}", &[]).unwrap_err().to_string();
        assert!(e.contains("k.metal:2") && e.contains("any(...)"), "{e}");
        let e = rw("x = double(y);", &[]).unwrap_err().to_string();
        assert!(e.contains("`double`"), "{e}");
    }

    #[test]
    fn header_functions_are_not_remapped() {
        let fns = defined_functions("inline float sign(float x) { return x; }");
        assert!(fns.contains("sign"));
        let sc = Vec::new();
        let out = rewrite(
            "y = sign(x) + exp(x);",
            "k.metal",
            &ctx(&sc, &fns),
            &mut BTreeMap::new(),
            &mut BTreeSet::new(),
        )
        .unwrap();
        assert_eq!(out, "y = sign(x) + ksbt::exp(x);");
    }

    #[test]
    fn grid_expressions_become_cuda() {
        let e = |s: &str| ExprField(ksearch_model::expr::Expr::parse(s).unwrap());
        assert_eq!(
            grid_expr_c(&e("B * D"), &["B".into(), "D".into()]).unwrap(),
            "(long long)((long long)B[0] * (long long)D[0])"
        );
        assert!(grid_expr_c(&e("ceil(N / 4)"), &[]).is_err());
        assert!(
            grid_expr_c(&e("TG * ((N + TG - 1) // TG)"), &["N".into()])
                .unwrap()
                .contains(" / ")
        );
    }
}
