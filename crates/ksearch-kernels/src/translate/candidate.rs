//! `ksearch translate FOLDER`: a cuda candidate's kernels translated for an MLX target under its own plan,
//! so a kernel found on NVIDIA starts a search on Apple Silicon (or on mlx-cuda).
//!
//! Each kernel file is read as any CUDA is (`translate_file_with`: includes, macros, the analyzer, the
//! rewrites), with one difference: the plan's launch says what each parameter is (inputs, outputs, scalars
//! in order), where the analyzer would guess from the body (an output written only inside a helper is still
//! the launch's output). The plan itself is kept whole (launches, grids, template values, type arguments,
//! buffers, tunables, constraints, `when` dispatch): only the target and the kernel files change. MLX names a
//! kernel's arrays, scalars and template arguments after the plan, so a kernel whose parameters are named
//! otherwise is reported (T035, T036) rather than translated into a body that reads names that are not there.

use super::emit::Roles;
use super::{Diagnostic, ParamRole, TranslateError, Translation, diag, translate_file_roles};
use ksearch_model::candidate::{Candidate, KernelDecl, Launch};
use ksearch_model::target::Target;
use std::collections::BTreeMap;
use std::path::Path;

/// The cuda candidate in `dir` translated for `target` (mlx-metal or mlx-cuda), its plan kept.
pub fn translate_candidate(dir: &Path, target: Target) -> Result<Translation, TranslateError> {
    let cand = Candidate::load(dir).map_err(|e| TranslateError::Candidate(e.to_string()))?;
    if cand.plan.target != Target::Cuda {
        return Err(TranslateError::Candidate(format!(
            "{}: a folder is translated when it holds a cuda candidate; this one is for {} (translate a .cu file instead)",
            dir.join("plan.toml").display(),
            cand.plan.target
        )));
    }
    let mut sources: Vec<&str> = Vec::new();
    for k in &cand.plan.kernel {
        if !sources.contains(&k.source.as_str()) {
            sources.push(&k.source);
        }
    }
    let mut merged: Option<Translation> = None;
    let mut files = BTreeMap::new();
    let mut kernels: Vec<KernelDecl> = Vec::new();
    let mut diags: Vec<Diagnostic> = Vec::new();
    for source in &sources {
        let declared: Vec<&KernelDecl> = cand
            .plan
            .kernel
            .iter()
            .filter(|k| k.source == *source)
            .collect();
        let roles: Roles = declared
            .iter()
            .filter_map(|k| Some((k.name.clone(), launch_roles(first_launch(&cand, &k.name)?))))
            .collect();
        let file = dir.join(source);
        let mut t = translate_file_roles(&file, target, &[dir.to_path_buf()], Some(&roles))?;
        // The plan gives every launch (T011: none found in the file, one guessed) and its kernels (T026).
        t.diagnostics
            .retain(|d| d.code != "T011" && d.code != "T026");
        for d in t.diagnostics.iter_mut().filter(|d| d.file.is_none()) {
            d.file = Some(source.to_string());
        }
        for k in &declared {
            let Some(launch) = first_launch(&cand, &k.name) else {
                continue; // a kernel no launch calls: nothing to translate it for
            };
            let Some(a) = t.analysis.kernels.iter().find(|a| a.name == k.name) else {
                let mut d = diag(
                    target,
                    "T036",
                    0,
                    None,
                    format!("{source} defines no `__global__` function `{}`", k.name),
                );
                d.file = Some(source.to_string());
                diags.push(d);
                continue;
            };
            diags.extend(
                parameter_findings(a, launch, target, source)
                    .into_iter()
                    .map(|mut d| {
                        d.file = Some(source.to_string());
                        d
                    }),
            );
            let Some(decl) = t
                .candidate
                .as_ref()
                .and_then(|c| c.plan.kernel.iter().find(|d| d.name == k.name))
            else {
                continue; // the translation said why (T003, ...)
            };
            let c = t
                .candidate
                .as_ref()
                .expect("a declaration comes from a candidate");
            let decl = carried(decl, c, source, sources.len() > 1, &mut files);
            kernels.push(decl);
        }
        merged = Some(match merged {
            None => t,
            Some(m) => merge(m, t),
        });
    }
    let mut t = merged.ok_or_else(|| {
        TranslateError::Candidate(format!("{}: no kernel", dir.join("plan.toml").display()))
    })?;
    t.diagnostics.extend(diags);
    if target == Target::MlxMetal {
        // Dynamic shared memory is a CUDA launch's byte count; a Metal plan has none to carry it.
        for l in cand
            .plan
            .launch
            .iter()
            .filter(|l| l.shared_memory.is_some())
        {
            t.diagnostics.push(diag(
                target,
                "T038",
                0,
                Some(&l.kernel),
                format!("launch of `{}`", l.kernel),
            ));
        }
    }
    if kernels.len() != cand.plan.kernel.len() || t.errors() > 0 {
        // A kernel the translation could not make, or a parameter that names nothing: no candidate.
        t.candidate = None;
        return Ok(t);
    }
    let mut plan = cand.plan.clone();
    plan.target = target;
    plan.kernel = kernels;
    plan.description = format!(
        "{} (translated from the cuda candidate `{}` by `ksearch translate --to {target}`)",
        cand.plan.description, cand.plan.name
    );
    let out = Candidate { plan, files };
    out.validate().map_err(|message| TranslateError::Plan {
        file: dir.join("plan.toml"),
        message,
    })?;
    t.candidate = Some(out);
    Ok(t)
}

/// A translated kernel's declaration and files, carried into the merged candidate: its helpers' header
/// (every file's translation names it `header.<ext>`) renamed after its source where there are several.
fn carried(
    decl: &KernelDecl,
    c: &Candidate,
    source: &str,
    several: bool,
    files: &mut BTreeMap<String, String>,
) -> KernelDecl {
    let mut decl = decl.clone();
    files.insert(decl.source.clone(), c.files[&decl.source].clone());
    if let Some(h) = &decl.header {
        let stem = Path::new(source)
            .file_stem()
            .map_or_else(|| "kernel".into(), |s| s.to_string_lossy().to_string());
        let ext = Path::new(h)
            .extension()
            .map_or_else(String::new, |e| e.to_string_lossy().to_string());
        let name = if several {
            format!("{stem}_header.{ext}")
        } else {
            h.clone()
        };
        files.insert(name.clone(), c.files[h].clone());
        decl.header = Some(name);
    }
    decl
}

/// Two files' translations as one: kernels, lines, construct counts and diagnostics together.
fn merge(mut m: Translation, t: Translation) -> Translation {
    m.analysis.kernels.extend(t.analysis.kernels);
    m.analysis.lines += t.analysis.lines;
    m.stats.add(t.stats);
    m.diagnostics.extend(t.diagnostics);
    m
}

fn first_launch<'a>(c: &'a Candidate, kernel: &str) -> Option<&'a Launch> {
    c.plan.launch.iter().find(|l| l.kernel == kernel)
}

/// What a launch passes, in the kernel's parameter order: inputs, outputs, scalars.
fn launch_roles(l: &Launch) -> Vec<ParamRole> {
    std::iter::repeat_n(ParamRole::Input, l.inputs.len())
        .chain(std::iter::repeat_n(ParamRole::Output, l.outputs.len()))
        .chain(std::iter::repeat_n(ParamRole::Scalar, l.scalars.len()))
        .collect()
}

/// The kernel's parameters and template parameters against what the launch passes: their number (T036)
/// and their names (T035), which MLX takes from the plan.
fn parameter_findings(
    a: &super::KernelAnalysis,
    l: &Launch,
    target: Target,
    source: &str,
) -> Vec<Diagnostic> {
    let passed: Vec<String> = l
        .inputs
        .iter()
        .chain(&l.outputs)
        .cloned()
        .chain(l.scalars.iter().map(|s| s.0.src().to_string()))
        .collect();
    let written: Vec<&str> = a.params.iter().map(|p| p.name.as_str()).collect();
    let templates: Vec<String> = l
        .template
        .iter()
        .cloned()
        .chain(l.type_args.keys().cloned())
        .collect();
    let declared: Vec<&str> = a.template_order.iter().map(String::as_str).collect();
    let mut out = Vec::new();
    for (what, given, takes) in [
        ("parameters", &passed, &written),
        ("template parameters", &templates, &declared),
    ] {
        if given.len() != takes.len() {
            out.push(diag(
                target,
                "T036",
                a.line,
                None,
                format!(
                    "{source}: `{}` takes {} {what} ({}), its launch passes {} ({})",
                    a.name,
                    takes.len(),
                    takes.join(", "),
                    given.len(),
                    given.join(", ")
                ),
            ));
            continue;
        }
        let differ: Vec<String> = given
            .iter()
            .zip(takes.iter())
            .filter(|(g, t)| g.as_str() != **t)
            .map(|(g, t)| format!("`{t}` is the launch's `{g}`"))
            .collect();
        if !differ.is_empty() {
            out.push(diag(
                target,
                "T035",
                a.line,
                None,
                format!("{source}: `{}`'s {what}: {}", a.name, differ.join(", ")),
            ));
        }
    }
    out
}
