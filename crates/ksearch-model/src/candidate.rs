//! A candidate is device code plus a declarative launch plan (`docs/formats.md` §2): `plan.toml` and
//! kernel files. No host code comes from a generator; the plan says what to launch and the worker does it.
//!
//! The chosen tunable values live in the plan as the tunables' defaults, so a candidate is fully
//! described by its plan and files, and its content hash identifies exactly what was measured.

use crate::dtype::Dtype;
use crate::expr::{Env, ExprField};
use crate::target::Target;
use crate::task::{ResolvedWorkload, Task, TaskError, is_ident};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The most threads a threadgroup (CUDA block) may have on every GPU target.
pub const MAX_THREADGROUP: i64 = 1024;

#[derive(Debug, thiserror::Error)]
pub enum CandidateError {
    #[error("{}: {message}", file.display())]
    Invalid { file: PathBuf, message: String },
    #[error("{}: cannot read: {err}", file.display())]
    Io { file: PathBuf, err: std::io::Error },
    #[error("{0}")]
    Plan(String),
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KernelDecl {
    pub name: String,
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BufferDecl {
    pub name: String,
    pub shape: Vec<ExprField>,
    /// A dtype, or a type variable of the task.
    pub dtype: String,
    /// The buffer exists only for workloads where this holds (e.g. `"Tq == 1"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<ExprField>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    pub kernel: String,
    /// The launch runs only for workloads where this holds, so one candidate can dispatch on
    /// shape (a split-K decode for `Tq == 1`, a tiled prefill otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<ExprField>,
    #[serde(default)]
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    #[serde(default)]
    pub scalars: Vec<ExprField>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grid: Option<Vec<ExprField>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threadgroup: Option<Vec<ExprField>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub template: Vec<String>,
    /// GPU targets: type template arguments, each the dtype of a named tensor (`{ T = "u" }`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub type_args: BTreeMap<String, String>,
    /// mlx-cuda: bytes of dynamic shared memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_memory: Option<ExprField>,
    /// mlx-cuda: thread-block cluster dims in blocks (`["NC", 1, 1]`): the kernel is declared with
    /// `__cluster_dims__`, so its blocks can meet in distributed shared memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<Vec<ExprField>>,
    /// GPU targets: the value outputs start at (default: NaN poison, so unwritten elements fail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_value: Option<f64>,
    /// mlx-metal: outputs become `device atomic<T>*`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub atomic_outputs: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Tunable {
    pub values: Vec<i64>,
    pub default: i64,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub name: String,
    pub target: Target,
    #[serde(default)]
    pub description: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<ExprField>,
    pub kernel: Vec<KernelDecl>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buffer: Vec<BufferDecl>,
    pub launch: Vec<Launch>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tunable: BTreeMap<String, Tunable>,
}

#[derive(Debug, Clone)]
pub struct Candidate {
    pub plan: Plan,
    /// File name -> content, for every kernel source and header.
    pub files: BTreeMap<String, String>,
}

/// Values of every tunable.
pub type Params = BTreeMap<String, i64>;

/// A CPU kernel's C signature: the plan's launch arguments with their C types.
#[derive(Debug, Clone, PartialEq)]
pub struct CSignature {
    pub kernel: String,
    pub params: Vec<CParam>,
}

/// One argument: its C type (`const float*`, `int64_t`) and name.
#[derive(Debug, Clone, PartialEq)]
pub struct CParam {
    pub ty: String,
    pub name: String,
}

impl CParam {
    fn new(ty: String, name: &str) -> CParam {
        CParam {
            ty,
            name: name.to_string(),
        }
    }
}

/// One workload's launch program, everything evaluated; the worker's `run` request carries it.
#[derive(Debug, Clone, Serialize)]
pub struct ResolvedPlan {
    pub buffers: Vec<ResolvedBuffer>,
    pub launches: Vec<ResolvedLaunch>,
}

impl ResolvedPlan {
    /// The first launch whose grid, threadgroup or cluster no GPU target can run: an extent below 1, more
    /// threads per threadgroup than any allows, a cluster too large or not tiling the grid; a message
    /// naming the limit (evaluation refuses it before anything runs; `ksearch check` reports the
    /// threadgroup limit as M021).
    pub fn oversized_threadgroup(&self, workload: &str) -> Option<String> {
        self.launches.iter().find_map(|l| {
            for (what, dims) in [("grid", &l.grid), ("threadgroup", &l.threadgroup)] {
                if let Some(d) = dims.as_ref().and_then(|d| d.iter().find(|x| **x < 1)) {
                    return Some(format!(
                        "launch of `{}`: {what} extent {d} in workload `{workload}`; every extent must be at least 1",
                        l.kernel
                    ));
                }
            }
            if let Some(m) = l.cluster_misfit(workload) {
                return Some(m);
            }
            let tg = l.threadgroup.as_ref()?;
            // Each extent is checked before multiplying, so the product cannot overflow.
            let threads = tg
                .iter()
                .try_fold(1i64, |acc, x| (*x <= MAX_THREADGROUP).then(|| acc * x))
                .filter(|t| *t <= MAX_THREADGROUP);
            threads.is_none().then(|| {
                format!(
                    "launch of `{}`: a threadgroup of {tg:?} threads in workload `{workload}` is more than any GPU target allows ({MAX_THREADGROUP} per threadgroup on Apple GPUs and on NVIDIA; fewer when the kernel's registers or threadgroup memory are large)",
                    l.kernel
                )
            })
        })
    }
}

/// The most blocks a cluster may have without opting in to non-portable sizes (which MLX's launch
/// does not do).
pub const MAX_CLUSTER_BLOCKS: i64 = 8;

impl ResolvedLaunch {
    /// Why this launch's cluster dims cannot hold, if they cannot: an extent below 1, more than
    /// `MAX_CLUSTER_BLOCKS` blocks, or a grid whose blocks do not tile into whole clusters.
    fn cluster_misfit(&self, workload: &str) -> Option<String> {
        let c = self.cluster.as_ref()?;
        let (grid, tg) = (self.grid.as_ref()?, self.threadgroup.as_ref()?);
        // Each extent bounded before multiplying, so the product cannot overflow.
        if c.iter().any(|x| !(1..=MAX_CLUSTER_BLOCKS).contains(x))
            || c.iter().product::<i64>() > MAX_CLUSTER_BLOCKS
        {
            return Some(format!(
                "launch of `{}`: cluster {c:?} in workload `{workload}`; each extent at least 1 and at most {MAX_CLUSTER_BLOCKS} blocks in all",
                self.kernel
            ));
        }
        for d in 0..3 {
            let n = (grid[d] + tg[d] - 1) / tg[d].max(1);
            if n % c[d] != 0 {
                return Some(format!(
                    "launch of `{}`: {n} blocks along axis {d} in workload `{workload}` do not tile into clusters of {}; make the grid's blocks a multiple of the cluster",
                    self.kernel, c[d]
                ));
            }
        }
        None
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ResolvedBuffer {
    pub name: String,
    pub shape: Vec<i64>,
    pub dtype: Dtype,
}

#[derive(Debug, Clone, Serialize)]
pub struct ResolvedLaunch {
    pub kernel: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub scalars: Vec<i64>,
    pub grid: Option<Vec<i64>>,
    pub threadgroup: Option<Vec<i64>>,
    pub template: Option<BTreeMap<String, i64>>,
    /// The template's names in the plan's order (`template` is keyed by name): the cuda target instantiates
    /// a kernel with its template values in this order, then its type arguments in name order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub template_order: Vec<String>,
    /// GPU targets: the names the scalars are passed under (each scalar is a plain name there).
    pub scalar_names: Vec<String>,
    /// Type argument name -> dtype name.
    pub type_args: BTreeMap<String, String>,
    pub shared_memory: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<Vec<i64>>,
    pub init_value: Option<f64>,
    pub atomic_outputs: bool,
}

impl Task {
    /// A task folder read and checked whole: its specification (`Task::load_spec`) and every seed's plan
    /// loaded and checked against it, so a broken seed is refused with its task. It lives here rather than
    /// in `task` because a seed is a candidate and `task` knows nothing of plans.
    pub fn load(dir: &Path) -> Result<Task, TaskError> {
        let task = Task::load_spec(dir)?;
        for seeds in task.seeds.values() {
            for s in seeds {
                Candidate::load(&s.dir)
                    .map_err(|e| e.to_string())
                    .and_then(|c| c.check_against(&task))
                    .map_err(|e| TaskError::Invalid {
                        file: s.dir.join("plan.toml"),
                        message: format!("seed `{}`: {e}", s.name),
                    })?;
            }
        }
        Ok(task)
    }
}

impl Candidate {
    pub fn load(dir: &Path) -> Result<Candidate, CandidateError> {
        let file = dir.join("plan.toml");
        let text = std::fs::read_to_string(&file).map_err(|source| CandidateError::Io {
            file: file.clone(),
            err: source,
        })?;
        let plan: Plan = toml::from_str(&text).map_err(|e| CandidateError::Invalid {
            file: file.clone(),
            message: e.to_string().trim_end().to_string(),
        })?;
        // Names are checked before any is read: none may leave the folder or pose as an option.
        check_kernel_file_names(&plan).map_err(|message| CandidateError::Invalid {
            file: file.clone(),
            message,
        })?;
        let mut files = BTreeMap::new();
        for k in &plan.kernel {
            for name in std::iter::once(&k.source).chain(k.header.as_ref()) {
                let p = dir.join(name);
                let content = std::fs::read_to_string(&p).map_err(|source| CandidateError::Io {
                    file: p,
                    err: source,
                })?;
                files.insert(name.clone(), content);
            }
        }
        if plan.target == Target::Cuda {
            // Whole CUDA files include the candidate's own headers by name: those present in the folder are
            // part of the candidate (its hash covers them; the worker hands them to NVRTC).
            files = crate::names::include_closure(files, |name| {
                let p = dir.join(name);
                if !p.is_file() {
                    return Ok(None);
                }
                std::fs::read_to_string(&p)
                    .map(Some)
                    .map_err(|source| CandidateError::Io {
                        file: p,
                        err: source,
                    })
            })?;
        }
        let c = Candidate { plan, files };
        c.validate().map_err(|m| CandidateError::Invalid {
            file: file.clone(),
            message: m,
        })?;
        Ok(c)
    }

    /// Checks that need no task: names, references between kernels and launches, tunables. Long by design:
    /// independent checks in the plan's order, each with its own message naming the field.
    #[expect(
        clippy::too_many_lines,
        reason = "independent checks in the plan's order, each with its own message"
    )]
    pub fn validate(&self) -> Result<(), String> {
        let p = &self.plan;
        if p.kernel.is_empty() {
            return Err("field `kernel`: at least one [[kernel]] is required".into());
        }
        if p.launch.is_empty() {
            return Err("field `launch`: at least one [[launch]] is required".into());
        }
        self.check_file_names()?;
        if p.target.is_gpu() {
            // GPU kernels are compiled inside the worker, where no jail applies: what they may include is
            // checked here (CPU candidates compile in the jail, which the OS confines).
            for (name, text) in &self.files {
                crate::names::check_includes(text).map_err(|e| format!("{name}: {e}"))?;
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, k) in p.kernel.iter().enumerate() {
            if p.target == Target::Cuda
                && is_ident(&k.name)
                && let Some(text) = self.files.get(&k.source)
                && !declares_global(text, &k.name)
            {
                return Err(format!(
                    "field `kernel[{i}].source`: {} defines no `__global__` function `{}`; on the cuda target a kernel file holds whole CUDA functions (`__global__ void {}(...)`, a template where the launch passes `template` or `type_args`)",
                    k.source, k.name, k.name
                ));
            }
            if !is_ident(&k.name) {
                return Err(format!(
                    "field `kernel[{i}].name`: `{}` must be an identifier (the entry symbol)",
                    k.name
                ));
            }
            if !seen.insert(&k.name) {
                return Err(format!(
                    "field `kernel[{i}].name`: `{}` is declared twice",
                    k.name
                ));
            }
        }
        for (i, l) in p.launch.iter().enumerate() {
            if !p.kernel.iter().any(|k| k.name == l.kernel) {
                return Err(format!(
                    "field `launch[{i}].kernel`: `{}` is not a declared [[kernel]]",
                    l.kernel
                ));
            }
            if l.outputs.is_empty() {
                return Err(format!(
                    "field `launch[{i}].outputs`: a launch must write at least one output or buffer"
                ));
            }
            let gpu_only = l.grid.is_some()
                || l.threadgroup.is_some()
                || !l.template.is_empty()
                || !l.type_args.is_empty()
                || l.shared_memory.is_some()
                || l.cluster.is_some()
                || l.init_value.is_some()
                || l.atomic_outputs;
            if p.target.is_gpu() {
                for (what, v) in [("grid", &l.grid), ("threadgroup", &l.threadgroup)] {
                    match v {
                        Some(v) if v.len() == 3 => {}
                        _ => {
                            return Err(format!(
                                "field `launch[{i}].{what}`: {} launches need three extents, e.g. [\"N\", 1, 1]",
                                p.target
                            ));
                        }
                    }
                }
                if let Some(s) = l.scalars.iter().find(|s| !is_ident(s.0.src())) {
                    return Err(format!(
                        "field `launch[{i}].scalars`: `{}`: on GPU targets a scalar is passed by name, so it must be a dim or a tunable",
                        s.0
                    ));
                }
                if l.shared_memory.is_some() && !p.target.is_cuda_dialect() {
                    return Err(format!(
                        "field `launch[{i}].shared_memory`: only the CUDA targets have dynamic shared memory; declare a threadgroup array sized by a template int"
                    ));
                }
                if let Some(c) = &l.cluster {
                    if p.target == Target::Cuda {
                        return Err(format!(
                            "field `launch[{i}].cluster`: on the cuda target the kernel declares its clusters itself: write `__cluster_dims__(x, y, z)` on the `__global__` function and drop the field"
                        ));
                    }
                    if p.target != Target::MlxCuda {
                        return Err(format!(
                            "field `launch[{i}].cluster`: thread-block clusters are CUDA's (sm_90 and later); drop the field for {}",
                            p.target
                        ));
                    }
                    if c.len() != 3 {
                        return Err(format!(
                            "field `launch[{i}].cluster`: three extents in blocks, e.g. [\"NC\", 1, 1]"
                        ));
                    }
                }
                if l.atomic_outputs && p.target != Target::MlxMetal {
                    return Err(format!(
                        "field `launch[{i}].atomic_outputs`: only mlx-metal has it; on mlx-cuda call atomicAdd on the output pointer"
                    ));
                }
            } else if gpu_only {
                return Err(format!(
                    "field `launch[{i}]`: grid, threadgroup, template, type_args, shared_memory, cluster, init_value and atomic_outputs are for GPU targets; a cpu kernel is called once"
                ));
            }
            for t in &l.template {
                if !is_ident(t) {
                    return Err(format!(
                        "field `launch[{i}].template`: `{t}` must be the name of a tunable or a dim"
                    ));
                }
            }
        }
        for (name, t) in &p.tunable {
            if !is_ident(name) {
                return Err(format!(
                    "field `tunable.{name}`: the name must be an identifier"
                ));
            }
            if t.values.is_empty() {
                return Err(format!(
                    "field `tunable.{name}.values`: list at least one value"
                ));
            }
            if !t.values.contains(&t.default) {
                return Err(format!(
                    "field `tunable.{name}.default`: {} is not one of the values {:?}",
                    t.default, t.values
                ));
            }
        }
        if !self.satisfies_constraints(&Env::new())? {
            return Err(format!(
                "field `constraints`: the default tunable values {:?} violate a constraint",
                self.params()
            ));
        }
        Ok(())
    }

    /// Checks against the task: every name a launch uses exists, every output gets written.
    pub fn check_against(&self, task: &Task) -> Result<(), String> {
        let p = &self.plan;
        let t = &task.toml;
        let is_input = |n: &str| t.input.iter().any(|i| i.name == n);
        let is_output = |n: &str| t.output.iter().any(|o| o.name == n);
        let is_buffer = |n: &str| p.buffer.iter().any(|b| b.name == n);
        let known = |v: &str| t.dims.contains_key(v) || p.tunable.contains_key(v);
        for (i, b) in p.buffer.iter().enumerate() {
            if is_input(&b.name) || is_output(&b.name) {
                return Err(format!(
                    "field `buffer[{i}].name`: `{}` is already a task input or output",
                    b.name
                ));
            }
            if b.dtype.parse::<Dtype>().is_err() && !t.types.contains_key(&b.dtype) {
                return Err(format!(
                    "field `buffer[{i}].dtype`: `{}` is neither a dtype nor a type variable of the task",
                    b.dtype
                ));
            }
            for e in b.shape.iter().chain(b.when.iter()) {
                if let Some(v) = e.0.vars().into_iter().find(|v| !known(v)) {
                    return Err(format!(
                        "field `buffer[{i}]`: `{v}` (in `{}`) is neither a dim of the task nor a tunable",
                        e.0
                    ));
                }
            }
        }
        for (i, l) in p.launch.iter().enumerate() {
            for n in &l.inputs {
                if !(is_input(n) || is_buffer(n)) {
                    return Err(format!(
                        "field `launch[{i}].inputs`: `{n}` is neither a task input nor a [[buffer]] (task inputs: {:?})",
                        t.input.iter().map(|i| &i.name).collect::<Vec<_>>()
                    ));
                }
            }
            for (arg, n) in &l.type_args {
                if !(is_input(n) || is_output(n) || is_buffer(n)) {
                    return Err(format!(
                        "field `launch[{i}].type_args.{arg}`: `{n}` is not a tensor of the task or a [[buffer]]"
                    ));
                }
            }
            for n in &l.outputs {
                if !(is_output(n) || is_buffer(n)) {
                    return Err(format!(
                        "field `launch[{i}].outputs`: `{n}` is neither a task output nor a [[buffer]] (task outputs: {:?}); inputs are read-only",
                        t.output.iter().map(|o| &o.name).collect::<Vec<_>>()
                    ));
                }
            }
            if let Some(t) = l.template.iter().find(|t| !known(t)) {
                return Err(format!(
                    "field `launch[{i}].template`: `{t}` is neither a [tunable] nor a dim of the task"
                ));
            }
            let exprs = l
                .scalars
                .iter()
                .chain(l.grid.iter().flatten())
                .chain(l.threadgroup.iter().flatten())
                .chain(l.when.iter());
            for e in exprs {
                if let Some(v) = e.0.vars().into_iter().find(|v| !known(v)) {
                    return Err(format!(
                        "field `launch[{i}]`: `{}` uses `{v}`, which is neither a dim of the task nor a tunable",
                        e.0
                    ));
                }
            }
        }
        for o in &t.output {
            if !p.launch.iter().any(|l| l.outputs.contains(&o.name)) {
                return Err(format!(
                    "field `launch`: no launch writes the task output `{}`",
                    o.name
                ));
            }
        }
        if p.target == Target::Cpu {
            self.c_signatures(task, None)?;
        }
        Ok(())
    }

    /// The chosen value of every tunable.
    pub fn params(&self) -> Params {
        self.plan
            .tunable
            .iter()
            .map(|(k, t)| (k.clone(), t.default))
            .collect()
    }

    /// The same code with other tunable values (unknown names and values outside a tunable's list are errors).
    pub fn with_params(&self, params: &Params) -> Result<Candidate, String> {
        let mut c = self.clone();
        for (k, v) in params {
            let t = c.plan.tunable.get_mut(k).ok_or_else(|| {
                let names: Vec<&str> = self.plan.tunable.keys().map(|n| n.as_str()).collect();
                format!(
                    "`{k}` is not a tunable of `{}` (its tunables: {})",
                    self.plan.name,
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                )
            })?;
            if !t.values.contains(v) {
                return Err(format!("{k} = {v} is not one of {:?}", t.values));
            }
            t.default = *v;
        }
        Ok(c)
    }

    /// Constraints that can be decided with the given extra names (dims) and the tunables.
    /// A constraint naming something unknown is skipped here and checked when resolving.
    pub fn satisfies_constraints(&self, extra: &Env) -> Result<bool, String> {
        let mut env = extra.clone();
        env.extend(self.params().into_iter().map(|(k, v)| (k, v as f64)));
        for c in &self.plan.constraints {
            if c.0.vars().iter().all(|v| env.contains_key(v)) {
                match c.0.eval_bool(&env) {
                    Ok(true) => {}
                    Ok(false) => return Ok(false),
                    Err(e) => return Err(format!("constraint `{}`: {e}", c.0)),
                }
            }
        }
        Ok(true)
    }

    /// blake3 of the canonical plan and every file: what was measured, exactly.
    pub fn hash(&self) -> String {
        let mut h = blake3::Hasher::new();
        h.update(b"ksearch-candidate-v1\0");
        h.update(
            serde_json::to_string(&self.plan)
                .expect("plan serialises")
                .as_bytes(),
        );
        for (name, content) in &self.files {
            h.update(&(name.len() as u64).to_le_bytes());
            h.update(name.as_bytes());
            h.update(&(content.len() as u64).to_le_bytes());
            h.update(content.as_bytes());
        }
        h.finalize().to_hex()[..16].to_string()
    }

    /// Evaluates the plan for one workload.
    pub fn resolve(&self, task: &Task, rw: &ResolvedWorkload) -> Result<ResolvedPlan, String> {
        let mut env = Task::dims_env(&rw.dims);
        let params = self.params();
        env.extend(params.iter().map(|(k, v)| (k.clone(), *v as f64)));
        for c in &self.plan.constraints {
            if !c.0.eval_bool(&env).map_err(|e| e.to_string())? {
                return Err(format!(
                    "constraint `{}` does not hold for workload `{}`",
                    c.0, rw.name
                ));
            }
        }
        let ints = |v: &[ExprField]| -> Result<Vec<i64>, String> {
            v.iter()
                .map(|e| e.0.eval_int(&env).map_err(|e| e.to_string()))
                .collect()
        };
        let holds = |when: &Option<ExprField>| -> Result<bool, String> {
            when.as_ref().map_or(Ok(true), |w| {
                w.0.eval_bool(&env)
                    .map_err(|e| format!("`when = \"{}\"`: {e}", w.0))
            })
        };
        let mut buffers = Vec::new();
        for b in &self.plan.buffer {
            if !holds(&b.when)? {
                continue;
            }
            let shape = ints(&b.shape)?;
            if shape.iter().any(|d| *d <= 0) {
                return Err(format!(
                    "buffer `{}` gets shape {shape:?} in workload `{}`",
                    b.name, rw.name
                ));
            }
            buffers.push(ResolvedBuffer {
                name: b.name.clone(),
                shape,
                dtype: buffer_dtype(task, rw, &b.dtype)?,
            });
        }
        let mut launches = Vec::new();
        for l in &self.plan.launch {
            if !holds(&l.when)? {
                continue;
            }
            launches.push(ResolvedLaunch {
                kernel: l.kernel.clone(),
                inputs: l.inputs.clone(),
                outputs: l.outputs.clone(),
                scalars: ints(&l.scalars)?,
                grid: l.grid.as_deref().map(ints).transpose()?,
                threadgroup: l.threadgroup.as_deref().map(ints).transpose()?,
                // A template int is a tunable or, for shape-specialised code (e.g. the head dim), a dim.
                template: (!l.template.is_empty())
                    .then(|| {
                        l.template
                            .iter()
                            .map(|t| match params.get(t) {
                                Some(v) => Ok((t.clone(), *v)),
                                None => {
                                    env.get(t).map(|v| (t.clone(), *v as i64)).ok_or_else(|| {
                                        format!("template `{t}`: no tunable or dim of that name")
                                    })
                                }
                            })
                            .collect::<Result<_, String>>()
                    })
                    .transpose()?,
                template_order: l.template.clone(),
                scalar_names: l.scalars.iter().map(|s| s.0.src().to_string()).collect(),
                type_args: l
                    .type_args
                    .iter()
                    .map(|(k, t)| {
                        let d = rw
                            .dtypes
                            .get(t)
                            .copied()
                            .or_else(|| buffers.iter().find(|b| &b.name == t).map(|b| b.dtype))
                            .ok_or_else(|| format!("type argument `{k}`: no tensor `{t}`"))?;
                        Ok((k.clone(), d.name().to_string()))
                    })
                    .collect::<Result<_, String>>()?,
                shared_memory: l
                    .shared_memory
                    .as_ref()
                    .map(|e| e.0.eval_int(&env))
                    .transpose()
                    .map_err(|e| e.to_string())?,
                cluster: l.cluster.as_deref().map(ints).transpose()?,
                init_value: l.init_value,
                atomic_outputs: l.atomic_outputs,
            });
        }
        // With `when`, a workload may leave out launches and buffers: what runs must still be whole.
        for l in &launches {
            let missing = l.inputs.iter().chain(&l.outputs).find(|n| {
                self.plan.buffer.iter().any(|b| &b.name == *n)
                    && !buffers.iter().any(|b| &b.name == *n)
            });
            if let Some(n) = missing {
                return Err(format!(
                    "launch of `{}` uses buffer `{n}`, whose `when` excludes workload `{}`",
                    l.kernel, rw.name
                ));
            }
        }
        if let Some(o) = task
            .toml
            .output
            .iter()
            .find(|o| !launches.iter().any(|l| l.outputs.contains(&o.name)))
        {
            return Err(format!(
                "no launch writes `{}` in workload `{}`: every output needs a launch whose `when` holds",
                o.name, rw.name
            ));
        }
        Ok(ResolvedPlan { buffers, launches })
    }

    /// Each kernel's C signature on the CPU target, from the dtypes of one workload (or the first
    /// workload), in kernel-name order. A kernel launched twice must take the same argument types (names
    /// may differ); the C text is generated from these by the kernels crate (`codegen::c_header`).
    pub fn c_signatures(
        &self,
        task: &Task,
        rw: Option<&ResolvedWorkload>,
    ) -> Result<Vec<CSignature>, String> {
        let first;
        let rw = match rw {
            Some(rw) => rw,
            None => {
                first = task.resolve(&task.toml.workload[0])?;
                &first
            }
        };
        let dtype_of = |n: &str| -> Result<Dtype, String> {
            match rw.dtypes.get(n) {
                Some(d) => Ok(*d),
                None => {
                    let b = self
                        .plan
                        .buffer
                        .iter()
                        .find(|b| b.name == n)
                        .ok_or_else(|| format!("unknown tensor `{n}`"))?;
                    buffer_dtype(task, rw, &b.dtype)
                }
            }
        };
        let ctype = |n: &str| -> Result<&'static str, String> {
            let d = dtype_of(n)?;
            d.c_type()
                .ok_or_else(|| format!("`{n}` is {d}, which the cpu target cannot pass to C"))
        };
        let mut sigs: BTreeMap<&str, CSignature> = BTreeMap::new();
        for l in &self.plan.launch {
            let mut params = Vec::new();
            for n in &l.inputs {
                params.push(CParam::new(format!("const {}*", ctype(n)?), n));
            }
            for n in &l.outputs {
                params.push(CParam::new(format!("{}*", ctype(n)?), n));
            }
            for (i, s) in l.scalars.iter().enumerate() {
                let src = s.0.src();
                let name = if is_ident(src) {
                    src.to_string()
                } else {
                    format!("s{i}")
                };
                params.push(CParam::new("int64_t".into(), &name));
            }
            let types = |ps: &[CParam]| ps.iter().map(|p| p.ty.clone()).collect::<Vec<_>>();
            if let Some(prev) = sigs.get(l.kernel.as_str()) {
                if types(&prev.params) != types(&params) {
                    return Err(format!(
                        "kernel `{}` is launched with two different signatures:\n  ({})\n  ({})",
                        l.kernel,
                        types(&prev.params).join(", "),
                        types(&params).join(", ")
                    ));
                }
            } else {
                sigs.insert(
                    &l.kernel,
                    CSignature {
                        kernel: l.kernel.clone(),
                        params,
                    },
                );
            }
        }
        Ok(sigs.into_values().collect())
    }

    /// Every file name the candidate has, in its plan and among its files, against the one rule
    /// ([`crate::names`]): these names become files in a build folder and go on a compiler's command line.
    pub fn check_file_names(&self) -> Result<(), String> {
        check_kernel_file_names(&self.plan)?;
        for name in self.files.keys() {
            crate::names::check_file_name(name).map_err(|e| format!("file {e}"))?;
        }
        Ok(())
    }

    /// Writes the candidate as a folder a person can read. Refuses (before writing anything) a file
    /// name the rule of [`crate::names`] does not allow, however the candidate was made.
    /// The files `write_dir` writes in `dir`.
    pub fn written_paths(&self, dir: &Path) -> Vec<std::path::PathBuf> {
        std::iter::once(dir.join("plan.toml"))
            .chain(self.files.keys().map(|n| dir.join(n)))
            .collect()
    }

    pub fn write_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.check_file_names()
            .map_err(|m| std::io::Error::new(std::io::ErrorKind::InvalidInput, m))?;
        std::fs::create_dir_all(dir)?;
        let plan = toml::to_string_pretty(&self.plan).map_err(std::io::Error::other)?;
        std::fs::write(dir.join("plan.toml"), plan)?;
        for (name, content) in &self.files {
            std::fs::write(dir.join(name), content)?;
        }
        Ok(())
    }

    /// Sources and the plan as one JSON value, for the store.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"plan": self.plan, "files": self.files})
    }

    pub fn from_json(v: &serde_json::Value) -> Result<Candidate, String> {
        let plan: Plan = serde_json::from_value(v["plan"].clone()).map_err(|e| e.to_string())?;
        let files: BTreeMap<String, String> =
            serde_json::from_value(v["files"].clone()).map_err(|e| e.to_string())?;
        Ok(Candidate { plan, files })
    }
}

/// Every kernel's `source` and `header` against the rule of [`crate::names`]; the message names the field.
fn check_kernel_file_names(plan: &Plan) -> Result<(), String> {
    for (i, k) in plan.kernel.iter().enumerate() {
        let fields =
            std::iter::once(("source", &k.source)).chain(k.header.iter().map(|h| ("header", h)));
        for (field, name) in fields {
            crate::names::check_file_name(name)
                .map_err(|e| format!("field `kernel[{i}].{field}` (kernel `{}`): {e}", k.name))?;
        }
    }
    Ok(())
}

fn buffer_dtype(task: &Task, rw: &ResolvedWorkload, dtype: &str) -> Result<Dtype, String> {
    if let Ok(d) = dtype.parse() {
        return Ok(d);
    }
    let tv = task
        .toml
        .workload
        .iter()
        .find(|w| w.name == rw.name)
        .and_then(|w| w.types.get(dtype))
        .ok_or_else(|| format!("no dtype for `{dtype}` in workload `{}`", rw.name))?;
    tv.parse()
}

/// Space of tunable values: names in order and their allowed values.
pub fn space(c: &Candidate) -> Vec<(String, Vec<i64>)> {
    c.plan
        .tunable
        .iter()
        .map(|(k, t)| (k.clone(), t.values.clone()))
        .collect()
}

/// Whether `src` declares a `__global__` function named `name`: `__global__`, then (before the next `;`,
/// `{` or `}`) the name followed by `(`. Comments, strings and directives are not read.
fn declares_global(src: &str, name: &str) -> bool {
    use crate::cpplex::{Kind, lex};
    let toks: Vec<_> = lex(src)
        .into_iter()
        .filter(|t| !matches!(t.kind, Kind::Space | Kind::Comment | Kind::Preproc))
        .collect();
    toks.iter().enumerate().any(|(i, t)| {
        t.kind == Kind::Ident
            && t.text == "__global__"
            && toks[i + 1..]
                .iter()
                .take_while(|u| !matches!(u.text.as_str(), ";" | "{" | "}"))
                .collect::<Vec<_>>()
                .windows(2)
                .any(|w| w[0].text == name && w[1].text == "(")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::Expr;

    fn plan(extra: &str) -> Candidate {
        let text = format!(
            r#"
name = "t"
target = "cpu"
{extra}
[[kernel]]
name = "k"
source = "k.c"

[[launch]]
kernel = "k"
inputs = ["x"]
outputs = ["y"]
scalars = ["N"]

[tunable.B]
values = [1, 2, 4]
default = 2
"#
        );
        let plan: Plan = toml::from_str(&text).unwrap();
        Candidate {
            plan,
            files: [("k.c".to_string(), "void k(){}".to_string())].into(),
        }
    }

    #[test]
    fn hash_depends_on_params_and_files() {
        let c = plan("");
        let h = c.hash();
        assert_eq!(h, plan("").hash(), "hash is deterministic");
        let c4 = c.with_params(&[("B".to_string(), 4)].into()).unwrap();
        assert_ne!(h, c4.hash());
        let mut c2 = c.clone();
        c2.files.insert("k.c".into(), "void k(){ }".into());
        assert_ne!(h, c2.hash());
        assert_eq!(
            c4.with_params(&[("B".to_string(), 2)].into())
                .unwrap()
                .hash(),
            h
        );
    }

    #[test]
    fn with_params_rejects_values_outside_the_list() {
        let c = plan("");
        assert!(c.with_params(&[("B".to_string(), 3)].into()).is_err());
        assert!(c.with_params(&[("Q".to_string(), 1)].into()).is_err());
    }

    #[test]
    fn constraints_are_checked() {
        let c = plan("constraints = [\"B <= 2\"]");
        assert!(c.validate().is_ok());
        let c4 = c.with_params(&[("B".to_string(), 4)].into()).unwrap();
        assert!(!c4.satisfies_constraints(&Env::new()).unwrap());
        // A constraint naming a dim is decided only once the dim is known.
        let c = plan("constraints = [\"N % B == 0\"]");
        assert!(c.satisfies_constraints(&Env::new()).unwrap());
        assert!(
            !c.satisfies_constraints(&[("N".to_string(), 5.0)].into())
                .unwrap()
        );
    }

    /// mamba-scan's expert seed (one launch writing y and state), with `edit` applied to its plan.
    fn scan_expert(edit: impl FnOnce(&mut Plan)) -> (Task, Candidate) {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tasks/mamba-scan");
        let task = Task::load(&root).unwrap();
        let mut c = Candidate::load(&root.join("seeds/mlx-cuda/expert")).unwrap();
        edit(&mut c.plan);
        c.validate().unwrap();
        c.check_against(&task).unwrap();
        (task, c)
    }

    fn when(src: &str) -> Option<ExprField> {
        Some(ExprField(Expr::parse(src).unwrap()))
    }

    fn resolve_named(task: &Task, c: &Candidate, name: &str) -> Result<ResolvedPlan, String> {
        let w = task.toml.workload.iter().find(|w| w.name == name).unwrap();
        c.resolve(task, &task.resolve(w).unwrap())
    }

    #[test]
    fn when_selects_launches_and_buffers_per_workload() {
        // A second launch writing a scratch buffer, both only for long sequences.
        let (task, c) = scan_expert(|p| {
            let mut extra = p.launch[0].clone();
            extra.outputs = vec!["scratch".into()];
            extra.when = when("L >= 1024");
            p.launch.push(extra);
            p.buffer.push(BufferDecl {
                name: "scratch".into(),
                shape: vec![ExprField(Expr::parse("L").unwrap())],
                dtype: "float32".into(),
                when: when("L >= 1024"),
            });
        });
        let long = resolve_named(&task, &c, "ks_d768_l2048").unwrap();
        assert_eq!((long.launches.len(), long.buffers.len()), (2, 1));
        let short = resolve_named(&task, &c, "ks_d768_l512").unwrap();
        assert_eq!((short.launches.len(), short.buffers.len()), (1, 0));

        // A buffer left out while a launch that runs still writes it.
        let (task, c) = scan_expert(|p| {
            p.launch[0].outputs.push("scratch".into());
            p.buffer.push(BufferDecl {
                name: "scratch".into(),
                shape: vec![ExprField(Expr::parse("L").unwrap())],
                dtype: "float32".into(),
                when: when("L >= 1024"),
            });
        });
        let err = resolve_named(&task, &c, "ks_d768_l512").unwrap_err();
        assert!(err.contains("buffer `scratch`"), "{err}");

        // A `when` that leaves an output unwritten is named.
        let (task, c) = scan_expert(|p| p.launch[0].when = when("L >= 1024"));
        let err = resolve_named(&task, &c, "ks_d768_l512").unwrap_err();
        assert!(err.contains("no launch writes `y`"), "{err}");
    }

    #[test]
    fn a_threadgroup_past_1024_threads_is_refused_with_the_limit() {
        let (task, c) = scan_expert(|p| {
            p.launch[0].threadgroup = Some(vec![
                ExprField(Expr::parse("64").unwrap()),
                ExprField(Expr::parse("32").unwrap()),
                ExprField(Expr::parse("1").unwrap()),
            ])
        });
        let plan = resolve_named(&task, &c, "ks_d768_l512").unwrap();
        let err = plan.oversized_threadgroup("ks_d768_l512").unwrap();
        assert!(
            err.contains("[64, 32, 1] threads") && err.contains("1024 per threadgroup"),
            "{err}"
        );
        // Huge extents do not overflow the product; a zero extent is named.
        let mut huge = plan.clone();
        huge.launches[0].threadgroup = Some(vec![1 << 40, 1 << 40, 1 << 40]);
        assert!(
            huge.oversized_threadgroup("w")
                .unwrap()
                .contains("1024 per threadgroup")
        );
        huge.launches[0].threadgroup = Some(vec![32, 0, 1]);
        assert!(
            huge.oversized_threadgroup("w")
                .unwrap()
                .contains("threadgroup extent 0")
        );
        let (task, c) = scan_expert(|_| {});
        let plan = resolve_named(&task, &c, "ks_d768_l512").unwrap();
        assert_eq!(plan.oversized_threadgroup("ks_d768_l512"), None);
    }

    #[test]
    fn clusters_are_checked_against_target_and_grid() {
        let cl = |v: &[&str]| {
            Some(
                v.iter()
                    .map(|x| ExprField(Expr::parse(x).unwrap()))
                    .collect(),
            )
        };
        // Only mlx-cuda has clusters, and they take three extents.
        let mut c = scan_expert(|_| {}).1;
        c.plan.launch[0].cluster = cl(&["2"]);
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("three extents")
        );
        c.plan.target = Target::MlxMetal;
        c.plan.launch[0].shared_memory = None;
        c.plan.launch[0].cluster = cl(&["2", "1", "1"]);
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("launch[0].cluster") && err.contains("CUDA's"),
            "{err}"
        );
        // Resolved: the grid's blocks must tile into clusters of at most 8 blocks.
        let (task, c) = scan_expert(|p| p.launch[0].cluster = cl(&["1", "1", "1"]));
        let mut plan = resolve_named(&task, &c, "ks_d768_l512").unwrap();
        assert_eq!(plan.launches[0].cluster, Some(vec![1, 1, 1]));
        assert_eq!(plan.oversized_threadgroup("w"), None);
        let (grid, tg) = (
            plan.launches[0].grid.clone().unwrap(),
            plan.launches[0].threadgroup.clone().unwrap(),
        );
        let blocks_y = (grid[1] + tg[1] - 1) / tg[1];
        let c_y = (2..=8).find(|c| blocks_y % c != 0).unwrap();
        plan.launches[0].cluster = Some(vec![1, c_y, 1]);
        let err = plan.oversized_threadgroup("w").unwrap();
        assert!(err.contains("do not tile into clusters"), "{err}");
        for c in [
            vec![16, 1, 1],
            vec![4, 4, 1],
            vec![1 << 40, 1 << 40, 1 << 40],
            vec![0, 1, 1],
        ] {
            plan.launches[0].cluster = Some(c);
            let err = plan.oversized_threadgroup("w").unwrap();
            assert!(err.contains("at most 8 blocks"), "{err}");
        }
    }

    #[test]
    fn template_may_name_a_dim() {
        let (task, c) = scan_expert(|p| p.launch[0].template.push("N".into()));
        let r = resolve_named(&task, &c, "ks_d768_l512").unwrap();
        let t = r.launches[0].template.as_ref().unwrap();
        assert_eq!(t["N"], 16);
        assert_eq!(t["NS"], c.params()["NS"]);
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tasks/mamba-scan");
        let task = Task::load(&root).unwrap();
        let mut c = Candidate::load(&root.join("seeds/mlx-cuda/expert")).unwrap();
        c.plan.launch[0].template.push("NOPE".into());
        let err = c.check_against(&task).unwrap_err();
        assert!(
            err.contains("`NOPE` is neither a [tunable] nor a dim"),
            "{err}"
        );
    }

    #[test]
    fn load_refuses_a_file_name_a_compiler_would_read_as_options() {
        let dir = tempfile::tempdir().unwrap();
        let text = toml::to_string(&plan("").plan)
            .unwrap()
            .replace("\"k.c\"", "\"@x.c\"");
        assert!(text.contains("source = \"@x.c\""), "{text}");
        std::fs::write(dir.path().join("plan.toml"), text).unwrap();
        // The file exists, so the refusal is the name's, not a missing file's.
        std::fs::write(dir.path().join("@x.c"), "-o /tmp/owned").unwrap();
        let err = Candidate::load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("field `kernel[0].source`")
                && err.contains("`@x.c`")
                && err.contains("a file name is"),
            "{err}"
        );
    }

    #[test]
    fn validate_checks_every_file_name_of_a_candidate_built_in_memory() {
        let mut c = plan("");
        c.plan.kernel[0].header = Some("-include".into());
        c.files.insert("-include".into(), String::new());
        let err = c.validate().unwrap_err();
        assert!(
            err.contains("field `kernel[0].header`") && err.contains("starts with `-`"),
            "{err}"
        );
        let mut c = plan("");
        c.plan.kernel[0].source = "a/b.c".into();
        let err = c.validate().unwrap_err();
        assert!(err.contains("field `kernel[0].source`"), "{err}");
        // A file the plan does not name is still written to the build folder, so it is checked too.
        let mut c = plan("");
        c.files.insert("../x.c".into(), String::new());
        assert!(c.validate().unwrap_err().contains("`../x.c`"));
        let dir = tempfile::tempdir().unwrap();
        let err = c.write_dir(&dir.path().join("c")).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert!(!dir.path().join("c").exists(), "nothing is written");
        assert!(plan("").validate().is_ok());
    }

    #[test]
    fn gpu_fields_on_cpu_are_rejected() {
        let mut c = plan("");
        c.plan.launch[0].template = vec!["B".into()];
        assert!(c.validate().unwrap_err().contains("GPU targets"));
    }

    #[test]
    fn a_kernel_launched_twice_must_take_the_same_types_and_names_may_differ() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tasks/softmax");
        let task = Task::load(&root).unwrap();
        let mut c = Candidate::load(&root.join("seeds/cpu/naive")).unwrap();
        let one = c.c_signatures(&task, None).unwrap();
        assert_eq!(one.len(), 1);
        let types: Vec<_> = one[0].params.iter().map(|p| p.ty.as_str()).collect();
        assert_eq!(&types[..2], ["const float*", "float*"]);
        // The same launch again under other scalar names: still one signature.
        let mut again = c.plan.launch[0].clone();
        for (i, s) in again.scalars.iter_mut().enumerate() {
            s.0 = Expr::parse(&format!("{} + {i}", s.0.src())).unwrap();
        }
        c.plan.launch.push(again);
        assert_eq!(c.c_signatures(&task, None).unwrap().len(), 1);
        // A launch passing one pointer fewer: refused, with both type lists.
        let mut fewer = c.plan.launch[0].clone();
        fewer.inputs.clear();
        c.plan.launch.push(fewer);
        let err = c.c_signatures(&task, None).unwrap_err();
        assert!(
            err.contains("two different signatures") && err.contains("(float*"),
            "{err}"
        );
    }
}
