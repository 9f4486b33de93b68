//! A task is a kernel problem kept as a folder (`docs/formats.md` §1): `task.toml`, `spec.md`,
//! `reference.py`, optional `baselines.py`, and seed candidates per target.
//!
//! Loading validates everything that can be checked without Python, and every error names the file,
//! the field and what is expected, because task folders are written by hand.

use crate::dtype::Dtype;
use crate::expr::{Env, ExprField};
use crate::target::Target;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("{}: {message}", file.display())]
    Invalid { file: PathBuf, message: String },
    #[error("{}: cannot read: {err}", file.display())]
    Io { file: PathBuf, err: std::io::Error },
}

fn invalid(file: &Path, field: &str, message: impl std::fmt::Display) -> TaskError {
    TaskError::Invalid {
        file: file.to_path_buf(),
        message: format!("field `{field}`: {message}"),
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<ExprField>,
    /// A dtype name or a type variable declared in `[types]`.
    pub dtype: String,
    #[serde(default)]
    pub init: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub name: String,
    pub dims: BTreeMap<String, i64>,
    #[serde(default)]
    pub types: BTreeMap<String, String>,
    #[serde(default)]
    pub held_out: bool,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Roofline {
    pub bytes: ExprField,
    pub flops: ExprField,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    pub name: String,
    pub function: String,
    #[serde(default)]
    pub targets: Option<Vec<Target>>,
}

/// `task.toml` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TaskToml {
    pub name: String,
    pub description: String,
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// Kernel family (attention, scan, reduction, matmul): selects the knowledge an LLM gets.
    #[serde(default)]
    pub family: Option<String>,
    /// Expert properties of the family (knowledge/assertions.toml ids) that do not hold for this problem (a
    /// decode task's causal skip): neither judged on its candidates nor put in its prompts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_applicable: Vec<String>,
    /// A CUDA kernel for this problem (a file in the task folder): its analysis goes into MLX prompts.
    #[serde(default)]
    pub cuda_source: Option<String>,
    pub dims: BTreeMap<String, String>,
    #[serde(default)]
    pub types: BTreeMap<String, String>,
    pub input: Vec<TensorSpec>,
    pub output: Vec<TensorSpec>,
    pub workload: Vec<Workload>,
    pub tolerance: BTreeMap<String, Tolerance>,
    pub roofline: Roofline,
    #[serde(default)]
    pub baseline: Vec<Baseline>,
}

#[derive(Debug, Clone)]
pub struct SeedRef {
    pub name: String,
    pub dir: PathBuf,
}

/// A validated task.
#[derive(Debug, Clone)]
pub struct Task {
    pub dir: PathBuf,
    pub toml: TaskToml,
    pub spec: String,
    pub seeds: BTreeMap<Target, Vec<SeedRef>>,
}

pub const DEFAULT_TIMEOUT_S: f64 = 30.0;

/// Concrete shapes and dtypes of every input and output of one workload.
#[derive(Debug, Clone, Serialize)]
pub struct ResolvedWorkload {
    pub name: String,
    pub dims: BTreeMap<String, i64>,
    pub shapes: BTreeMap<String, Vec<i64>>,
    pub dtypes: BTreeMap<String, Dtype>,
    #[serde(skip)]
    pub held_out: bool,
}

impl Task {
    /// What identifies the task for cached reference outputs: its `task.toml` and every Python file of its
    /// folder (the reference, its helpers, `make_inputs`), hashed. Any change computes them again.
    pub fn fingerprint(&self) -> String {
        let mut hasher = blake3::Hasher::new();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name() == Some("task.toml".as_ref())
                    || p.extension().is_some_and(|x| x == "py")
            })
            .collect();
        files.sort();
        for f in files {
            hasher.update(f.file_name().unwrap_or_default().as_encoded_bytes());
            hasher.update(b"\0");
            hasher.update(&std::fs::read(&f).unwrap_or_default());
            hasher.update(b"\0");
        }
        hasher.finalize().to_hex()[..24].to_string()
    }

    /// The task's specification (task.toml checked, reference.py present) and its seed folders found;
    /// the seeds' plans are not read here (a seed is a candidate: `Task::load` in `candidate` reads them).
    pub fn load_spec(dir: &Path) -> Result<Task, TaskError> {
        let file = dir.join("task.toml");
        let text = std::fs::read_to_string(&file).map_err(|source| TaskError::Io {
            file: file.clone(),
            err: source,
        })?;
        let toml: TaskToml = toml::from_str(&text).map_err(|e| TaskError::Invalid {
            file: file.clone(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let spec_file = dir.join("spec.md");
        let spec = std::fs::read_to_string(&spec_file).map_err(|source| TaskError::Io {
            file: spec_file,
            err: source,
        })?;
        let reference = dir.join("reference.py");
        if !reference.is_file() {
            return Err(TaskError::Invalid {
                file: reference,
                message: "missing: every task needs reference.py defining reference(inputs, dims)"
                    .into(),
            });
        }
        let mut task = Task {
            dir: dir.to_path_buf(),
            toml,
            spec,
            seeds: BTreeMap::new(),
        };
        task.validate(&file)?;
        task.seeds = find_seeds(dir)?;
        Ok(task)
    }

    pub fn name(&self) -> &str {
        &self.toml.name
    }

    pub fn timeout_s(&self) -> f64 {
        self.toml.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S)
    }

    pub fn targets(&self) -> Vec<Target> {
        self.seeds.keys().copied().collect()
    }

    pub fn baselines_for(&self, target: Target) -> Vec<&Baseline> {
        self.toml
            .baseline
            .iter()
            .filter(|b| b.targets.as_ref().is_none_or(|t| t.contains(&target)))
            .collect()
    }

    pub fn workloads(&self, held_out: bool) -> impl Iterator<Item = &Workload> {
        self.toml
            .workload
            .iter()
            .filter(move |w| w.held_out == held_out)
    }

    /// Every check of a task.toml, in the order its sections appear. Long by design: each check is a few
    /// independent lines with its own message naming the field and the fix, and one list reads best.
    #[expect(
        clippy::too_many_lines,
        reason = "independent checks in the file's order, each naming its field and fix"
    )]
    fn validate(&self, file: &Path) -> Result<(), TaskError> {
        let t = &self.toml;
        if let Some(c) = &t.cuda_source {
            let plain = !c.is_empty()
                && Path::new(c)
                    .components()
                    .all(|p| matches!(p, std::path::Component::Normal(_)));
            if !plain || !self.dir.join(c).is_file() {
                return Err(invalid(
                    file,
                    "cuda_source",
                    format!(
                        "`{c}` must be a .cu file inside the task folder (a relative path such as \"kernel.cu\")"
                    ),
                ));
            }
        }
        let dims: Vec<&String> = t.dims.keys().collect();
        let mut names = std::collections::BTreeSet::new();
        for (kind, list) in [("input", &t.input), ("output", &t.output)] {
            if list.is_empty() && kind == "output" {
                return Err(invalid(
                    file,
                    "output",
                    "at least one [[output]] is required",
                ));
            }
            for (i, spec) in list.iter().enumerate() {
                let field = format!("{kind}[{i}]");
                if !is_ident(&spec.name) {
                    return Err(invalid(
                        file,
                        &format!("{field}.name"),
                        format!("`{}` must be an identifier", spec.name),
                    ));
                }
                if !names.insert(spec.name.clone()) {
                    return Err(invalid(
                        file,
                        &format!("{field}.name"),
                        format!("`{}` is used twice", spec.name),
                    ));
                }
                for e in &spec.shape {
                    for v in e.0.vars() {
                        if !t.dims.contains_key(&v) {
                            return Err(invalid(
                                file,
                                &format!("{field}.shape"),
                                format!(
                                    "`{}` uses `{v}`, which is not declared in [dims] (declared: {dims:?})",
                                    e.0
                                ),
                            ));
                        }
                    }
                }
                if spec.dtype.parse::<Dtype>().is_err() && !t.types.contains_key(&spec.dtype) {
                    return Err(invalid(
                        file,
                        &format!("{field}.dtype"),
                        format!(
                            "`{}` is neither a dtype nor a type variable declared in [types]",
                            spec.dtype
                        ),
                    ));
                }
                if let Some(init) = &spec.init {
                    check_init(init).map_err(|m| invalid(file, &format!("{field}.init"), m))?;
                }
            }
        }
        for (k, tol) in &t.tolerance {
            k.parse::<Dtype>()
                .map_err(|m| invalid(file, &format!("tolerance.{k}"), m))?;
            if !(tol.atol >= 0.0 && tol.rtol >= 0.0) {
                return Err(invalid(
                    file,
                    &format!("tolerance.{k}"),
                    "atol and rtol must be >= 0",
                ));
            }
        }
        if t.workload.is_empty() || t.workload.iter().all(|w| w.held_out) {
            return Err(invalid(
                file,
                "workload",
                "at least one [[workload]] with held_out = false is required",
            ));
        }
        let mut wnames = std::collections::BTreeSet::new();
        for (i, w) in t.workload.iter().enumerate() {
            let field = format!("workload[{i}]");
            if !wnames.insert(&w.name) {
                return Err(invalid(
                    file,
                    &format!("{field}.name"),
                    format!("`{}` is used twice", w.name),
                ));
            }
            for d in t.dims.keys() {
                match w.dims.get(d) {
                    // 0 is allowed for flag dims (attention's CAUSAL); a shape extent of 0 is still an
                    // error when the workload is resolved.
                    Some(v) if *v >= 0 => {}
                    Some(v) => {
                        return Err(invalid(
                            file,
                            &format!("{field}.dims.{d}"),
                            format!("must be a non-negative integer, got {v}"),
                        ));
                    }
                    None => {
                        return Err(invalid(
                            file,
                            &format!("{field}.dims"),
                            format!("`{}` gives no value for dim `{d}`", w.name),
                        ));
                    }
                }
            }
            for d in w.dims.keys() {
                if !t.dims.contains_key(d) {
                    return Err(invalid(
                        file,
                        &format!("{field}.dims.{d}"),
                        format!("`{d}` is not declared in [dims]"),
                    ));
                }
            }
            for tv in t.types.keys() {
                let Some(v) = w.types.get(tv) else {
                    return Err(invalid(
                        file,
                        &format!("{field}.types"),
                        format!("`{}` gives no dtype for type variable `{tv}`", w.name),
                    ));
                };
                v.parse::<Dtype>()
                    .map_err(|m| invalid(file, &format!("{field}.types.{tv}"), m))?;
            }
            let rw = self.resolve(w).map_err(|m| invalid(file, &field, m))?;
            for o in &t.output {
                let dt = rw.dtypes[&o.name];
                if dt.is_float() && !t.tolerance.contains_key(dt.name()) {
                    return Err(invalid(
                        file,
                        "tolerance",
                        format!(
                            "output `{}` is {dt} in workload `{}`, but there is no [tolerance.{dt}]",
                            o.name, w.name
                        ),
                    ));
                }
            }
            let env = self.roofline_env(&rw);
            for (what, e) in [("bytes", &t.roofline.bytes), ("flops", &t.roofline.flops)] {
                e.0.eval(&env)
                    .map_err(|m| invalid(file, &format!("roofline.{what}"), m))?;
            }
        }
        for (i, b) in t.baseline.iter().enumerate() {
            if !is_ident(&b.function) {
                return Err(invalid(
                    file,
                    &format!("baseline[{i}].function"),
                    "must be the name of a function in baselines.py",
                ));
            }
        }
        if !t.baseline.is_empty() && !self.dir.join("baselines.py").is_file() {
            return Err(invalid(
                file,
                "baseline",
                "baselines are listed but baselines.py is missing",
            ));
        }
        Ok(())
    }

    /// Dims as an expression environment.
    pub fn dims_env(w: &BTreeMap<String, i64>) -> Env {
        w.iter().map(|(k, v)| (k.clone(), *v as f64)).collect()
    }

    pub fn resolve(&self, w: &Workload) -> Result<ResolvedWorkload, String> {
        let env = Self::dims_env(&w.dims);
        let mut shapes = BTreeMap::new();
        let mut dtypes = BTreeMap::new();
        for spec in self.toml.input.iter().chain(&self.toml.output) {
            let shape = spec
                .shape
                .iter()
                .map(|e| e.0.eval_int(&env).map_err(|e| e.to_string()))
                .collect::<Result<Vec<_>, _>>()?;
            if let Some(bad) = shape.iter().find(|d| **d <= 0) {
                return Err(format!(
                    "`{}` gets a non-positive extent {bad} in workload `{}`",
                    spec.name, w.name
                ));
            }
            let dt = match spec.dtype.parse::<Dtype>() {
                Ok(d) => d,
                Err(_) => w
                    .types
                    .get(&spec.dtype)
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| format!("no dtype for `{}`", spec.dtype))?,
            };
            shapes.insert(spec.name.clone(), shape);
            dtypes.insert(spec.name.clone(), dt);
        }
        Ok(ResolvedWorkload {
            name: w.name.clone(),
            dims: w.dims.clone(),
            shapes,
            dtypes,
            held_out: w.held_out,
        })
    }

    /// Dims plus `io_bytes` (every input and output once) and `bytes_NAME` for each of them, for roofline
    /// formulas (a kernel that reads only part of an input, as a paged cache, counts that part).
    pub fn roofline_env(&self, rw: &ResolvedWorkload) -> Env {
        let mut env = Self::dims_env(&rw.dims);
        let mut io = 0i64;
        for (n, s) in &rw.shapes {
            let bytes = s.iter().product::<i64>() * rw.dtypes[n].size() as i64;
            env.insert(format!("bytes_{n}"), bytes as f64);
            io += bytes;
        }
        env.insert("io_bytes".into(), io as f64);
        env
    }

    /// Minimum bytes moved and useful flops of one workload.
    pub fn roofline(&self, rw: &ResolvedWorkload) -> (f64, f64) {
        let env = self.roofline_env(rw);
        let r = &self.toml.roofline;
        (
            r.bytes.0.eval(&env).unwrap_or(0.0),
            r.flops.0.eval(&env).unwrap_or(0.0),
        )
    }

    /// What the worker needs of this task (`load_task`).
    pub fn worker_json(&self, target: Target) -> serde_json::Value {
        serde_json::json!({
            "name": self.toml.name,
            "inputs": self.toml.input.iter().map(|i| serde_json::json!({
                "name": i.name, "init": i.init.clone().unwrap_or_else(|| "normal(0, 1)".into())
            })).collect::<Vec<_>>(),
            "outputs": self.toml.output.iter().map(|o| serde_json::json!({"name": o.name})).collect::<Vec<_>>(),
            "tolerances": self.toml.tolerance,
            "baselines": self.baselines_for(target).iter().map(|b| serde_json::json!({
                "name": b.name, "function": b.function
            })).collect::<Vec<_>>(),
        })
    }

    pub fn find_seed(&self, target: Target, name: Option<&str>) -> Option<&SeedRef> {
        let seeds = self.seeds.get(&target)?;
        match name {
            Some(n) => seeds.iter().find(|s| s.name == n),
            None => seeds
                .iter()
                .find(|s| s.name == "naive")
                .or_else(|| seeds.first()),
        }
    }
}

pub fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// Checks an `init` distribution string: `name(a, b)` with a known name and two numbers.
fn check_init(s: &str) -> Result<(), String> {
    let known = ["normal", "uniform", "laplace", "lognormal", "randint"];
    let expected = || {
        format!(
            "`{s}` is not a distribution; expected one of {} with two numbers, e.g. \"uniform(-1, 1)\"",
            known.map(|k| format!("{k}(a, b)")).join(", ")
        )
    };
    let open = s.find('(').ok_or_else(expected)?;
    let name = s[..open].trim();
    let args = s[open + 1..].strip_suffix(')').ok_or_else(expected)?;
    if !known.contains(&name) {
        return Err(expected());
    }
    let nums: Vec<_> = args.split(',').map(|a| a.trim().parse::<f64>()).collect();
    if nums.len() != 2 || nums.iter().any(|n| n.is_err()) {
        return Err(expected());
    }
    Ok(())
}

fn find_seeds(dir: &Path) -> Result<BTreeMap<Target, Vec<SeedRef>>, TaskError> {
    let mut out = BTreeMap::new();
    let root = dir.join("seeds");
    let Ok(targets) = std::fs::read_dir(&root) else {
        return Ok(out);
    };
    for t in targets.flatten() {
        if !t.path().is_dir() {
            continue;
        }
        let tname = t.file_name().to_string_lossy().to_string();
        let target: Target = tname.parse().map_err(|m| TaskError::Invalid {
            file: t.path(),
            message: format!("seeds/<target>: {m}"),
        })?;
        let mut seeds: Vec<SeedRef> = std::fs::read_dir(t.path())
            .map_err(|source| TaskError::Io {
                file: t.path(),
                err: source,
            })?
            .flatten()
            .filter(|e| e.path().join("plan.toml").is_file())
            .map(|e| SeedRef {
                name: e.file_name().to_string_lossy().to_string(),
                dir: e.path(),
            })
            .collect();
        seeds.sort_by(|a, b| a.name.cmp(&b.name));
        if !seeds.is_empty() {
            out.insert(target, seeds);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_strings() {
        assert!(check_init("uniform(-1, 1)").is_ok());
        assert!(check_init("normal(0,3)").is_ok());
        assert!(check_init("gauss(0, 1)").is_err());
        assert!(check_init("uniform(-1)").is_err());
        assert!(check_init("uniform(a, 1)").is_err());
    }
}
