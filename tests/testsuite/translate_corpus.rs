//! `ksearch translate` on public CUDA code nobody here wrote, fetched at test time by `scripts/corpus.sh`
//! (run by `scripts/test`, which sets KSEARCH_CORPUS) and never committed: ggml's CUDA kernels (llama.cpp,
//! with its headers through `-I`) and the CUDA sources of the `mamba-ssm`, `causal-conv1d` and `flash-attn`
//! sdists. Every file that spells `__global__` is translated to both MLX targets.
//!
//! What must hold on every file, whatever the translator can or cannot do with it:
//! - an answer: a translation (exit 0, or 1 with error diagnostics), or "no kernel found" (exit 2, for
//!   kernels made by macros); never a crash, nor a plan that does not validate;
//! - the translation never lies: exit 0 only with no error diagnostic; a `const` pointer is never an
//!   output (the plan's outputs name none); a floating-point scalar is never an int32 plan scalar.
//!
//! And the share translated with no error may only grow: the bars below are what main translates today.
//! Each file's verdict is printed, so a failure shows which files moved.

use crate::common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Kernels translated with no error diagnostic on mlx-cuda, of ~200 (28 when the corpus came in: before
/// headers were read in, 0), and files that translated whole.
const CUDA_CLEAN_KERNELS: usize = 28;
const CUDA_CLEAN_FILES: usize = 10;
/// Kernels with no error diagnostic of their own on mlx-metal (the checker's findings name no kernel), and
/// files that translated whole (0 before headers were read in).
const METAL_CLEAN_KERNELS: usize = 27;
const METAL_CLEAN_FILES: usize = 7;

/// Every file under `dir` (recursively) with a CUDA extension that spells `__global__`.
fn kernel_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/corpus.sh)", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            kernel_files(&p, out);
        } else if p
            .extension()
            .is_some_and(|x| x == "cu" || x == "cuh" || x == "h")
            && String::from_utf8_lossy(&std::fs::read(&p).unwrap()).contains("__global__")
        {
            out.push(p);
        }
    }
}

/// What one translation said: exit code, its JSON, the plan written (as TOML), stderr.
struct Said {
    code: Option<i32>,
    json: Option<Value>,
    plan: Option<toml::Value>,
    stderr: String,
}

fn translate(file: &Path, to: &str, includes: &[PathBuf]) -> Said {
    let work = tempfile::tempdir().unwrap();
    let out_dir = work.path().join("out");
    let mut args = vec![
        "translate".to_string(),
        file.display().to_string(),
        "--to".into(),
        to.into(),
        "--out".into(),
        out_dir.display().to_string(),
        "--json".into(),
        "-q".into(),
    ];
    for i in includes {
        args.push("-I".into());
        args.push(i.display().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(work.path(), &args);
    let json = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok());
    let plan = std::fs::read_to_string(out_dir.join("plan.toml"))
        .ok()
        .map(|t| toml::from_str(&t).expect("the written plan.toml parses"));
    Said {
        code: out.status.code(),
        json,
        plan,
        stderr: stderr(&out),
    }
}

/// A parameter's element type is a floating-point one.
fn float_type(t: &str, template_types: &[Value]) -> bool {
    let t = t.replace("const", "");
    let t = t.trim();
    matches!(
        t,
        "float" | "double" | "half" | "__half" | "__nv_bfloat16" | "nv_bfloat16" | "bfloat16"
    ) || template_types.iter().any(|x| x.as_str() == Some(t))
}

/// The lies a translation tells about its own kernels, if any; and its kernels with no error of their own,
/// and whether the whole file translated with no error.
fn judge(said: &Said) -> (Vec<String>, usize, usize, bool) {
    let Some(v) = &said.json else {
        return (Vec::new(), 0, 0, false);
    };
    let mut lies = Vec::new();
    let diags = v["diagnostics"].as_array().cloned().unwrap_or_default();
    let errors: Vec<&Value> = diags.iter().filter(|d| d["severity"] == "error").collect();
    if (said.code == Some(0)) != errors.is_empty() {
        lies.push(format!(
            "exit {:?} with {} error diagnostic(s)",
            said.code,
            errors.len()
        ));
    }
    let kernels = v["kernels"].as_array().cloned().unwrap_or_default();
    let mut clean = 0;
    for k in &kernels {
        let name = k["name"].as_str().unwrap_or("?");
        let types = k["template_types"].as_array().cloned().unwrap_or_default();
        let mut consts = Vec::new();
        for p in k["params"].as_array().into_iter().flatten() {
            let pname = p["name"].as_str().unwrap_or("?");
            let role = p["role"].as_str().unwrap_or("?");
            if p["is_const"] == true && p["pointer"] == true {
                consts.push(pname.to_string());
                if matches!(role, "output" | "inout") {
                    lies.push(format!("{name}: const `{pname}` is an {role}"));
                }
            }
            if p["pointer"] == false
                && role == "scalar"
                && float_type(p["elem_type"].as_str().unwrap_or(""), &types)
            {
                lies.push(format!("{name}: float scalar `{pname}` is an int32 scalar"));
            }
        }
        // The plan as written: no launch of this kernel writes a const parameter.
        for l in said
            .plan
            .as_ref()
            .and_then(|p| p.get("launch"))
            .and_then(|l| l.as_array())
            .into_iter()
            .flatten()
            .filter(|l| l.get("kernel").and_then(|k| k.as_str()) == Some(name))
        {
            for o in l
                .get("outputs")
                .and_then(|o| o.as_array())
                .into_iter()
                .flatten()
            {
                let o = o.as_str().unwrap_or("");
                if consts.iter().any(|c| c == o || format!("{c}_out") == o) {
                    lies.push(format!("{name}: the plan writes const `{o}`"));
                }
            }
        }
        if !errors.iter().any(|d| d["kernel"].as_str() == Some(name)) {
            clean += 1;
        }
    }
    let whole = said.code == Some(0);
    (lies, clean, if whole { kernels.len() } else { 0 }, whole)
}

#[test]
fn public_cuda_translates_without_lies_and_no_worse_than_before() {
    let Some(root) = corpus() else { return };
    let ggml = root.join("ggml").canonicalize().expect("ggml's folder");
    let mut files = Vec::new();
    kernel_files(&ggml.join("src/ggml-cuda"), &mut files);
    let from_ggml = files.len();
    kernel_files(&root.join("cuda-sdists"), &mut files);
    assert!(
        from_ggml >= 40 && files.len() - from_ggml >= 5,
        "only {from_ggml} ggml and {} sdist files with kernels found",
        files.len() - from_ggml
    );
    let includes = [ggml.join("include"), ggml.join("src")];
    let mut problems = Vec::new();
    let mut totals: BTreeMap<&str, (usize, usize, usize, usize)> = BTreeMap::new();
    for to in ["mlx-cuda", "mlx-metal"] {
        let said = in_parallel(&files, |f| {
            let inc: &[PathBuf] = if f.starts_with(&ggml) { &includes } else { &[] };
            translate(f, to, inc)
        });
        let t = totals.entry(to).or_default();
        for (f, s) in files.iter().zip(&said) {
            let shown = f.strip_prefix(&root).unwrap_or(f).display().to_string();
            let shown = if f.starts_with(&ggml) {
                f.strip_prefix(&ggml).unwrap().display().to_string()
            } else {
                shown
            };
            let no_kernel = s.code == Some(2) && s.stderr.contains("(T002)");
            if s.json.is_none() && !no_kernel {
                problems.push(format!(
                    "{to} {shown}: no translation (exit {:?}): {}",
                    s.code,
                    s.stderr.trim()
                ));
                continue;
            }
            let (lies, clean, whole_kernels, whole) = judge(s);
            let kernels = s
                .json
                .as_ref()
                .map_or(0, |v| v["kernels"].as_array().map_or(0, Vec::len));
            let mut codes: BTreeMap<String, usize> = BTreeMap::new();
            for d in s
                .json
                .as_ref()
                .and_then(|v| v["diagnostics"].as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter(|d| d["severity"] == "error")
            {
                *codes
                    .entry(d["code"].as_str().unwrap_or("?").into())
                    .or_default() += 1;
            }
            println!(
                "{to:9} exit {:>2} {:>3} kernel(s) {:>3} clean  {shown}  {}",
                s.code.unwrap_or(-1),
                kernels,
                clean,
                if no_kernel {
                    "no kernel found (made by macros)".to_string()
                } else {
                    format!("{codes:?}")
                }
            );
            problems.extend(lies.into_iter().map(|l| format!("{to} {shown}: {l}")));
            t.0 += kernels;
            t.1 += clean;
            t.2 += usize::from(whole);
            t.3 += whole_kernels;
        }
    }
    for (to, (kernels, clean, files_whole, kernels_whole)) in &totals {
        println!(
            "{to}: {} files, {kernels} kernels; {clean} kernels with no error of their own; {files_whole} files ({kernels_whole} kernels) translated with no error",
            files.len()
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let (_, cuda_clean, cuda_files, _) = totals["mlx-cuda"];
    let (_, metal_clean, metal_files, _) = totals["mlx-metal"];
    assert!(
        cuda_clean >= CUDA_CLEAN_KERNELS && cuda_files >= CUDA_CLEAN_FILES,
        "mlx-cuda: {cuda_clean} kernels and {cuda_files} files translate with no error, under the bars ({CUDA_CLEAN_KERNELS}, {CUDA_CLEAN_FILES})"
    );
    assert!(
        metal_clean >= METAL_CLEAN_KERNELS && metal_files >= METAL_CLEAN_FILES,
        "mlx-metal: {metal_clean} kernels and {metal_files} files translate with no error, under the bars ({METAL_CLEAN_KERNELS}, {METAL_CLEAN_FILES})"
    );
}
