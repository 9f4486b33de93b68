//! Evaluation: compile a candidate, check it against the reference on fresh random inputs, time it
//! next to the baselines, and say what happened on every workload (`docs/sandbox.md`, "The clock and the checks").
//!
//! The worker does the measuring; this module decides what to ask, with which seeds and deadlines, and
//! turns every outcome (a wrong answer, a compiler error, a hang, a crash) into a recorded fate.

use crate::candidate::{Candidate, ResolvedPlan};
use crate::protocol::{
    BuildRef, InputSeeds, PoolSeeds, PrecompileReply, PrecompileRequest, PrecompileWorkload,
    PrepareReply, PrepareRequest, RunReply, RunRequest,
};
pub use crate::protocol::{Hardware, PairVerdict, Split, Timing, TimingSettings, Verdict};
use crate::pyenv::PythonEnv;
use crate::target::Target;
use crate::task::{ResolvedWorkload, Task, Workload};
use crate::worker::{Reply, Worker, WorkerFailure};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Passed,
    /// Ran, but an output differs from the reference, an element was left unwritten, or an input changed.
    Wrong,
    CompileError,
    Timeout,
    Crash,
    /// The plan cannot be resolved for this workload (a constraint fails, a shape is not positive).
    Invalid,
    /// The worker reported an error of its own while running the candidate.
    #[default]
    Error,
    /// Passed every check but measured faster than the roofline floor allows: a measurement problem or
    /// work skipped, never a win.
    Implausible,
    /// The target's device is not on this machine (mlx-metal off a Mac); what was checked instead is in
    /// the result (the generated Metal source).
    Unavailable,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Wrong => "wrong",
            Status::CompileError => "compile_error",
            Status::Timeout => "timeout",
            Status::Crash => "crash",
            Status::Invalid => "invalid",
            Status::Error => "error",
            Status::Unavailable => "unavailable",
            Status::Implausible => "implausible",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RooflineFigure {
    pub bytes: f64,
    pub flops: f64,
    /// Lower bound on the time: max(bytes / peak bandwidth, flops / peak compute).
    pub floor_s: f64,
    /// floor / measured: 1.0 is the roofline.
    pub fraction: f64,
    /// Faster than the floor: a measurement problem or a kernel skipping work, never a win.
    pub beats_roofline: bool,
    /// So far past the floor that it cannot be real: more useful flops than the measured compute peak
    /// allows, or twice the bytes the measured bandwidth allows (caches can beat the bandwidth floor a
    /// little, never by that much). Such a result is rejected.
    #[serde(default)]
    pub implausible: bool,
}

/// What happened to one candidate on one workload.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct WorkloadResult {
    pub workload: String,
    pub status: Status,
    pub message: String,
    #[serde(default)]
    pub max_abs: Option<f64>,
    #[serde(default)]
    pub max_rel: Option<f64>,
    #[serde(default)]
    pub timing: Option<Timing>,
    #[serde(default)]
    pub baselines: BTreeMap<String, Timing>,
    #[serde(default)]
    pub roofline: Option<RooflineFigure>,
    /// The worker's per-check details (errors per output, unwritten counts, modified inputs).
    #[serde(default)]
    pub checks: Value,
    #[serde(default)]
    pub compile: Value,
    /// mlx-metal without Metal: the source MLX generated for each launch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metal_sources: Vec<String>,
    /// The check seeds (kept for results stored before `inputs`).
    #[serde(default)]
    pub seeds: Vec<u64>,
    /// Which input sets the candidate met, by role.
    #[serde(default)]
    pub inputs: InputSeeds,
    /// Wall time this evaluation took, compile included (a hang shows here as the deadline).
    #[serde(default)]
    pub elapsed_s: f64,
    /// The candidate timed beside the incumbent on the same inputs, and the verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparison: Option<Comparison>,
    /// Where the worker's time went; `compile_s` is the compile done for this evaluation (0 when reused).
    #[serde(default)]
    pub split: Split,
    #[serde(default)]
    pub compile_s: f64,
    /// The baselines were timed for this evaluation (not reused from earlier in the run).
    #[serde(default)]
    pub baselines_timed_now: bool,
    /// Baselines that could not run on this machine, with why (e.g. FlashInfer missing).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub baselines_unavailable: BTreeMap<String, String>,
    /// Seconds the run's own work for this workload took before the candidate ran (`prepare`: references,
    /// inputs, baselines); part of `elapsed_s`, not the candidate's cost.
    #[serde(default)]
    pub prepare_s: f64,
    /// The worker process itself died during this evaluation (not a timeout, not a crash its kernel host
    /// reported): the search evaluates it once more, on the next free device, before the verdict stands.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub worker_died: bool,
}

impl WorkloadResult {
    /// A workload's result before anything ran: an `error` until the evaluation says otherwise.
    fn unfinished(workload: &str, inputs: &InputSeeds) -> WorkloadResult {
        WorkloadResult {
            workload: workload.to_string(),
            status: Status::Error,
            message: String::new(),
            max_abs: None,
            max_rel: None,
            timing: None,
            baselines: BTreeMap::new(),
            roofline: None,
            checks: Value::Null,
            compile: Value::Null,
            metal_sources: Vec::new(),
            seeds: inputs.checks.clone(),
            inputs: inputs.clone(),
            elapsed_s: 0.0,
            comparison: None,
            split: Split::default(),
            compile_s: 0.0,
            baselines_timed_now: false,
            baselines_unavailable: BTreeMap::new(),
            prepare_s: 0.0,
            worker_died: false,
        }
    }
}

/// A challenger's workload timed side by side with the incumbent's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Comparison {
    /// The incumbent candidate's hash.
    pub incumbent: String,
    pub timing: Timing,
    pub verdict: PairVerdict,
}

impl WorkloadResult {
    pub fn median_s(&self) -> Option<f64> {
        self.timing.as_ref().map(|t| t.median_s)
    }

    /// Wall time not spent compiling, preparing the run's inputs, in the worker's accounted parts or
    /// running kernels: the evaluator's own cost for this workload (the worker's `overhead_s` plus the
    /// protocol's).
    pub fn overhead_s(&self) -> f64 {
        let worker_parts = self.split.total_s - self.split.overhead_s;
        (self.elapsed_s - self.compile_s - self.prepare_s - worker_parts).max(0.0)
    }
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub checks: usize,
    pub timeout_s: f64,
    pub compile_timeout_s: f64,
    pub timing: TimingSettings,
    /// Measure the device's peaks at the worker's start even where they are remembered (`peaks`).
    pub measure_peaks: bool,
    /// The device the worker holds alone (`--devices`); the default is the machine as it is.
    pub device: crate::devices::Device,
}

impl Settings {
    pub fn for_task(task: &Task, target: Target) -> Settings {
        Settings {
            checks: 3,
            timeout_s: task.timeout_s(),
            compile_timeout_s: 120.0,
            timing: TimingSettings::for_target(target.is_gpu()),
            measure_peaks: false,
            device: Default::default(),
        }
    }
}

/// What one workload evaluation is asked besides the candidate.
#[derive(Debug, Clone, Copy, Default)]
pub struct EvalOptions<'a> {
    /// Time the candidate beside this one (hash, candidate) on the same inputs, for a verdict.
    pub incumbent: Option<(&'a str, &'a Candidate)>,
    /// Time the baselines again now rather than reuse their times from earlier in the run.
    pub retime_baselines: bool,
}

/// Reference sets placed among a candidate's timed calls and compared after timing, per workload.
pub const TIMED_CHECKS: usize = 4;

/// What a run needs of an evaluator: the seam between the runner and the worker. `Evaluator` is the one
/// that measures; the runner's unit tests give a scripted one, so the run loop, its budget, its phases
/// and its resume are tested without Python.
pub trait Evaluate {
    /// The worker's hello: hardware and sandbox facts, stored with the run and stated in prompts.
    fn hello(&self) -> &Value;
    /// Compiles what `cand` needs for these workloads at once, before its first evaluation.
    fn precompile(&mut self, cand: &Candidate, workloads: &[&Workload]);
    /// One candidate on one workload: checked, timed (beside an incumbent if given), rechecked.
    fn evaluate_workload_with(
        &mut self,
        cand: &Candidate,
        w: &Workload,
        opts: EvalOptions<'_>,
    ) -> WorkloadResult;
    /// How this evaluator times, for verdicts over several workloads.
    fn timing(&self) -> &TimingSettings;
    /// The hardware description reported with the run.
    fn hardware(&self) -> Hardware;
    /// How often the worker was started again after a crash or a hang.
    fn worker_restarts(&self) -> u32;
}

impl Evaluate for Evaluator {
    fn hello(&self) -> &Value {
        &self.hello
    }
    fn precompile(&mut self, cand: &Candidate, workloads: &[&Workload]) {
        Evaluator::precompile(self, cand, workloads)
    }
    fn evaluate_workload_with(
        &mut self,
        cand: &Candidate,
        w: &Workload,
        opts: EvalOptions<'_>,
    ) -> WorkloadResult {
        Evaluator::evaluate_workload_with(self, cand, w, opts)
    }
    fn timing(&self) -> &TimingSettings {
        &self.settings.timing
    }
    fn hardware(&self) -> Hardware {
        Evaluator::hardware(self)
    }
    fn worker_restarts(&self) -> u32 {
        Evaluator::worker_restarts(self)
    }
}

/// One device's evaluator: a worker with the task loaded.
pub struct Evaluator {
    pub task: Task,
    pub target: Target,
    pub settings: Settings,
    pub hello: Value,
    worker: Worker,
    /// This evaluator's own folder under the build root (absolute; removed when it is dropped): two workers
    /// building one candidate at once (the devices of a run sharing a candidate's workloads, two runs on one
    /// store starting from one seed) would otherwise rewrite and compile into one folder together.
    build: tempfile::TempDir,
    /// The lock that says the build folder is in use (`BUILD_OWNER`); released with the process, however it
    /// ends, so `ksearch gc` can tell a killed run's folder from a live one's.
    _owner: std::fs::File,
    /// The run's input secret: every input set a candidate meets derives from it (and the task's fingerprint).
    secret: u64,
    fingerprint: String,
    compiled: BTreeSet<String>,
    /// Kernel modules (build, kernel, template arguments, dtypes) MLX has compiled in this worker.
    modules: BTreeSet<String>,
    /// Workloads this evaluator has prepared (the progress line says "preparing" only the first time).
    prepared: BTreeSet<String>,
    /// Seconds the last `compile` took when it compiled (0 when the build was already there).
    last_compile_s: f64,
    /// Seconds the last `precompile` took, charged to the candidate's next workload evaluation.
    precompile_s: f64,
}

/// What one kernel module's compile may add to a GPU run's deadline (see `Evaluator::compile_allowance`):
/// generous, since the deadline only guards against hangs.
const MODULE_COMPILE_ALLOWANCE_S: f64 = 15.0;

const HELLO_DEADLINE: Duration = Duration::from_secs(180);
/// The run's own work for a workload (references of large workloads take minutes in float64 on a CPU) gets
/// at least this long, whatever the candidates' deadline.
const PREPARE_DEADLINE: Duration = Duration::from_secs(1800);

/// Where the evaluators of a store's runs build candidates (`ksearch gc` collects what killed ones left).
pub fn build_root(store_dir: &Path) -> PathBuf {
    store_dir.join("build")
}

/// An evaluator's build folder under the build root is `worker-XXXXXX`, holding `BUILD_OWNER`, a file
/// locked (exclusively) for as long as the evaluator lives.
pub const BUILD_PREFIX: &str = "worker-";
pub const BUILD_OWNER: &str = ".owner";

/// Locks `folder`'s owner file for the caller's lifetime (the lock goes with the process, a kill included).
/// The file is locked under another name and renamed into place, so `gc` never finds it unlocked while its
/// evaluator lives (the lock belongs to the file, not its name).
fn claim_build_folder(folder: &Path) -> std::io::Result<std::fs::File> {
    let claiming = folder.join(".owner-claiming");
    let file = std::fs::File::create(&claiming)?;
    file.lock()?;
    std::fs::rename(&claiming, folder.join(BUILD_OWNER))?;
    Ok(file)
}

impl Evaluator {
    /// Starts a worker for `task` on `target`. `secret` is the run's input secret (a fresh one from
    /// `fresh_secret` for a one-off evaluation): with the task's fingerprint it fixes the run's input sets, so
    /// the references computed for them are reused by every candidate and by a resumed run.
    pub fn start(
        task: Task,
        target: Target,
        env: PythonEnv,
        build_root: PathBuf,
        settings: Settings,
        secret: u64,
    ) -> anyhow::Result<Evaluator> {
        // Absolute: the worker runs in a private directory of its own.
        std::fs::create_dir_all(&build_root)?;
        let build = tempfile::Builder::new()
            .prefix(BUILD_PREFIX)
            .tempdir_in(build_root.canonicalize()?)?;
        let owner = claim_build_folder(build.path())?;
        let references = crate::builtin::cache_root().join("references");
        let _ = std::fs::create_dir_all(&references);
        let mut worker = Worker::new(env, target);
        worker.writable = vec![build.path().to_path_buf(), references.clone()];
        worker.reference_cache = Some(references);
        worker.device = settings.device.clone();
        let remembered = if settings.measure_peaks {
            json!({})
        } else {
            crate::peaks::remembered()
        };
        let mut hello =
            match worker.request("hello", json!({ "remembered": remembered }), HELLO_DEADLINE)? {
                Reply::Ok(v) => v,
                Reply::Err { kind, message } => {
                    anyhow::bail!("worker hello failed: {kind}: {message}")
                }
            };
        hello["sandbox"] = worker.sandbox.clone();
        hello["sandbox"]["landlock_abi"] = hello["landlock_abi"].clone();
        if let Some(remote) = hello.get("remote").cloned() {
            hello["sandbox"]["network_isolated"] = remote["network_isolated"].clone();
        }
        crate::peaks::record(&mut hello["hardware"]);
        if settings.device != crate::devices::Device::default() {
            hello["device"] = serde_json::to_value(&settings.device)?;
        }
        let body = json!({"dir": task.dir.canonicalize().unwrap_or_else(|_| task.dir.clone()), "task": task.worker_json(target)});
        match worker.preamble("load_task", body, HELLO_DEADLINE)? {
            Reply::Ok(_) => {}
            Reply::Err { kind, message } => anyhow::bail!(
                "the worker could not load task `{}` from {}: {kind}: {message}",
                task.name(),
                task.dir.display()
            ),
        }
        let fingerprint = task.fingerprint();
        Ok(Evaluator {
            task,
            target,
            settings,
            hello,
            worker,
            build,
            _owner: owner,
            secret,
            fingerprint,
            compiled: BTreeSet::new(),
            modules: BTreeSet::new(),
            prepared: BTreeSet::new(),
            last_compile_s: 0.0,
            precompile_s: 0.0,
        })
    }

    pub fn worker_restarts(&self) -> u32 {
        self.worker.restarts
    }

    pub fn hardware(&self) -> Hardware {
        Hardware::from_hello(&self.hello)
    }

    /// The workload's whole pool (every reference seed, the supply), for `prepare`.
    fn pool(&self, workload: &str) -> PoolSeeds {
        let all = self.inputs("", workload);
        let mut seeds: Vec<u64> = all
            .checks
            .iter()
            .chain(std::iter::once(&all.recheck))
            .chain(&all.timed_checks)
            .copied()
            .collect();
        seeds.sort_unstable();
        PoolSeeds {
            pool: all.pool,
            seeds,
            supply: all.supply,
        }
    }

    /// The run's own work for a workload, before the candidate meets it (reference outputs, inputs,
    /// baselines): their times, or why it failed (never the candidate's fault).
    fn prepare(
        &mut self,
        rw: &ResolvedWorkload,
        baselines: &[String],
        retime: bool,
    ) -> Result<PrepareReply, String> {
        let body = PrepareRequest {
            workload: rw,
            inputs: self.pool(&rw.name),
            timing: &self.settings.timing,
            baselines,
            retime_baselines: retime,
        };
        let body = serde_json::to_value(&body).expect("a prepare request serialises");
        if self.prepared.insert(rw.name.clone()) || retime {
            crate::progress::report(crate::progress::Phase::Preparing {
                workload: rw.name.clone(),
            });
        }
        // A device an earlier candidate left faulted is found here (`device_lost`: the worker is killed on
        // that reply); the fresh worker's prepare is the answer.
        for _ in 0..2 {
            match self
                .worker
                .request("prepare", body.clone(), PREPARE_DEADLINE)
            {
                Ok(Reply::Ok(v)) => {
                    return serde_json::from_value(v)
                        .map_err(|e| format!("the worker's prepare result is malformed: {e}"));
                }
                Ok(Reply::Err { kind, .. }) if kind == "device_lost" => {
                    self.compiled.clear();
                    self.modules.clear();
                }
                Ok(Reply::Err { kind, message }) => return Err(format!("{kind}: {message}")),
                Err(f) => {
                    self.compiled.clear();
                    self.modules.clear();
                    return Err(f.to_string());
                }
            }
        }
        Err("device_lost: a fresh worker could not run the worker's own kernels either".into())
    }

    /// The input sets `cand_hash` meets on `workload`. The workload's pool of reference sets is the run's
    /// (from the secret, the task's fingerprint and the workload): their references are computed once and
    /// shared. Each candidate gets them in roles of its own (which check, which recheck, which sampled
    /// among the timed calls, where), so none can tell in advance which of its calls will be compared.
    pub fn inputs(&self, cand_hash: &str, workload: &str) -> InputSeeds {
        use crate::rng::{hash64, splitmix};
        let checks = self.settings.checks.max(1);
        let base = hash64(&format!("{}/{workload}", self.fingerprint)) ^ self.secret;
        let mut pool: Vec<u64> = (0..(checks + 1 + TIMED_CHECKS) as u64)
            .map(|j| splitmix(base.wrapping_add(j)) >> 1)
            .collect();
        let mut state = hash64(&format!("{cand_hash}/{workload}")) ^ self.secret.rotate_left(17);
        for i in (1..pool.len()).rev() {
            state = splitmix(state);
            pool.swap(i, (state % (i as u64 + 1)) as usize);
        }
        InputSeeds {
            pool: self.fingerprint.clone(),
            checks: pool[..checks].to_vec(),
            recheck: pool[checks],
            timed_checks: pool[checks + 1..].to_vec(),
            supply: splitmix(base ^ 0x5355_5050_4c59) >> 1,
            order: splitmix(state ^ 0x004f_5244_4552) >> 1,
        }
    }

    /// Compiles (once per worker) the build of `cand` for the dtypes of `rw`; returns the build key.
    fn compile(
        &mut self,
        cand: &Candidate,
        rw: &ResolvedWorkload,
    ) -> Result<String, (Status, String, Value)> {
        let header = match self.target {
            Target::Cpu => crate::codegen::c_header(cand, &self.task, rw)
                .map_err(|m| (Status::Invalid, m, Value::Null))?,
            _ => String::new(),
        };
        let key = blake3::hash(format!("{}\0{header}", cand.hash()).as_bytes()).to_hex()[..16]
            .to_string();
        if self.compiled.contains(&key) {
            return Ok(key);
        }
        crate::progress::report(crate::progress::Phase::Compiling {
            candidate: cand.hash(),
        });
        let started = std::time::Instant::now();
        let compiled = self.compile_new(cand, key, header);
        self.last_compile_s += started.elapsed().as_secs_f64();
        compiled
    }

    fn compile_new(
        &mut self,
        cand: &Candidate,
        key: String,
        header: String,
    ) -> Result<String, (Status, String, Value)> {
        let deadline = Duration::from_secs_f64(self.settings.compile_timeout_s);
        if self.target == Target::MlxMetal {
            // What would fail on a Mac fails here too (docs/check.md); a checker that cannot run (no C++
            // compiler) does not block the evaluation.
            match crate::check::check_loaded(cand, Some(&self.task)) {
                Ok(f) if crate::check::has_errors(&f) => {
                    let summary = crate::check::summary(&f);
                    return Err((Status::CompileError, summary, json!({ "findings": f })));
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("ksearch check could not run: {e}"),
            }
        }
        if self.target.is_gpu() {
            // GPU kernels compile per launch (template values, dtypes): the worker records them now. MLX is
            // handed bodies (compacted); the cuda target whole files, every one of the candidate's
            // includable by name.
            let kernels: Vec<Value> = cand
                .plan
                .kernel
                .iter()
                .map(|k| {
                    if self.target == Target::Cuda {
                        json!({"name": k.name, "source": cand.files[&k.source], "source_name": k.source,
                               "header": k.header.as_ref().map(|h| cand.files[h].as_str()).unwrap_or(""),
                               "header_name": k.header})
                    } else {
                        json!({"name": k.name, "source": crate::codegen::mlx_source(cand, k),
                               "header": crate::codegen::mlx_header(cand, k), "header_name": k.header})
                    }
                })
                .collect();
            let mut body = json!({"key": key, "kernels": kernels});
            if self.target == Target::Cuda {
                body["files"] = json!(cand.files);
            }
            return match self.worker.request("compile", body, deadline) {
                Ok(Reply::Ok(r)) if r["status"] == "compiled" => {
                    self.compiled.insert(key.clone());
                    Ok(key)
                }
                Ok(Reply::Ok(r)) => Err((
                    Status::CompileError,
                    r["log"].as_str().unwrap_or("").to_string(),
                    r,
                )),
                Ok(Reply::Err { kind, message }) => {
                    Err((Status::Error, format!("{kind}: {message}"), Value::Null))
                }
                Err(f) => {
                    self.compiled.clear();
                    Err(failure_status(&f))
                }
            };
        }
        let dir = self.build.path().join(&key);
        cand.write_dir(&dir)
            .and_then(|_| std::fs::write(dir.join("ksearch_plan.h"), &header))
            .map_err(|e| {
                (
                    Status::Error,
                    format!("cannot write {}: {e}", dir.display()),
                    Value::Null,
                )
            })?;
        let sources: Vec<&str> = {
            let mut s: Vec<&str> = cand.plan.kernel.iter().map(|k| k.source.as_str()).collect();
            s.dedup();
            s
        };
        let body = json!({"key": key, "dir": dir, "sources": sources, "include": "ksearch_plan.h"});
        match self.worker.request("compile", body, deadline) {
            Ok(Reply::Ok(r)) if r["status"] == "compiled" => {
                self.compiled.insert(key.clone());
                Ok(key)
            }
            Ok(Reply::Ok(r)) => Err((
                Status::CompileError,
                r["log"]
                    .as_str()
                    .unwrap_or("compilation failed")
                    .to_string(),
                r,
            )),
            Ok(Reply::Err { kind, message }) => {
                Err((Status::Error, format!("{kind}: {message}"), Value::Null))
            }
            Err(f) => {
                self.compiled.clear();
                Err(failure_status(&f))
            }
        }
    }

    /// Has the worker compile, all at once, every kernel module `cand` will launch on `workloads` (mlx-cuda:
    /// each in the jail, in parallel, before the first check; elsewhere nothing to do). Best effort: a
    /// failure here is met again, and reported, by the workload's own evaluation.
    pub fn precompile(&mut self, cand: &Candidate, workloads: &[&Workload]) {
        self.precompile_s = 0.0;
        if !self.target.is_cuda_dialect() {
            return;
        }
        let resolved: Vec<(ResolvedWorkload, ResolvedPlan)> = workloads
            .iter()
            .filter_map(|w| {
                let rw = self.task.resolve(w).ok()?;
                let plan = cand.resolve(&self.task, &rw).ok()?;
                Some((rw, plan))
            })
            .collect();
        let Some((first, _)) = resolved.first() else {
            return;
        };
        let started = std::time::Instant::now();
        let key = match self.compile(cand, first) {
            Ok(k) => k,
            Err(_) => return, // the workload's evaluation reports it
        };
        let request = PrecompileRequest {
            key: &key,
            workloads: resolved
                .iter()
                .map(|(rw, plan)| PrecompileWorkload {
                    workload: rw,
                    buffers: &plan.buffers,
                    launches: &plan.launches,
                })
                .collect(),
        };
        let body = serde_json::to_value(&request).expect("a precompile request serialises");
        // The worker gives each module's compile 100 s (nvrtc.py, COMPILE_TIMEOUT_S) and reports one that
        // runs longer as the candidate's compile error: the request ends before this deadline.
        let deadline = Duration::from_secs_f64(self.settings.compile_timeout_s.max(100.0) + 30.0);
        match self.worker.request("precompile", body, deadline) {
            Ok(Reply::Ok(r)) => {
                let got: PrecompileReply = serde_json::from_value(r).unwrap_or_default();
                tracing::info!(
                    "precompile {}: {} modules, {} compiled in {:.2} s (longest {:.2} s){}",
                    cand.hash(),
                    got.modules,
                    got.compiled,
                    got.seconds,
                    got.longest_s,
                    if got.in_worker {
                        "; MLX compiles inside the worker"
                    } else {
                        ""
                    }
                );
            }
            Ok(Reply::Err { kind, message }) => {
                if kind == "not_compiled" {
                    self.compiled.remove(&key);
                }
                tracing::warn!("precompile failed ({kind}): {message}");
            }
            Err(f) => {
                self.compiled.clear();
                self.modules.clear();
                tracing::warn!("precompile failed: {}", failure_status(&f).1);
            }
        }
        self.precompile_s = started.elapsed().as_secs_f64();
    }

    /// Evaluates `cand` on one workload.
    pub fn evaluate_workload(&mut self, cand: &Candidate, w: &Workload) -> WorkloadResult {
        self.evaluate_workload_with(cand, w, EvalOptions::default())
    }

    /// Evaluates `cand` on one workload, timed beside an incumbent or with the baselines timed again.
    pub fn evaluate_workload_with(
        &mut self,
        cand: &Candidate,
        w: &Workload,
        opts: EvalOptions<'_>,
    ) -> WorkloadResult {
        let start = std::time::Instant::now();
        self.last_compile_s = 0.0;
        let mut r = self.evaluate_workload_inner(cand, w, opts);
        // A precompile just before is part of this candidate's evaluation: charged to its first workload.
        let precompiled = std::mem::take(&mut self.precompile_s);
        r.elapsed_s = start.elapsed().as_secs_f64() + precompiled;
        r.compile_s = self.last_compile_s + precompiled;
        r
    }

    fn evaluate_workload_inner(
        &mut self,
        cand: &Candidate,
        w: &Workload,
        opts: EvalOptions<'_>,
    ) -> WorkloadResult {
        let hash = cand.hash();
        let inputs = self.inputs(&hash, &w.name);
        let mut result = WorkloadResult::unfinished(&w.name, &inputs);
        let fail = |mut r: WorkloadResult, (status, message, compile): (Status, String, Value)| {
            r.status = status;
            r.message = message;
            r.compile = compile;
            r
        };
        let rw = match self.task.resolve(w) {
            Ok(rw) => rw,
            Err(m) => return fail(result, (Status::Invalid, m, Value::Null)),
        };
        let plan = match cand.resolve(&self.task, &rw) {
            Ok(p) => p,
            Err(m) => return fail(result, (Status::Invalid, m, Value::Null)),
        };
        if let Some(m) = plan.oversized_threadgroup(&rw.name) {
            return fail(result, (Status::Invalid, m, Value::Null));
        }
        let baselines: Vec<String> = self
            .task
            .baselines_for(self.target)
            .iter()
            .map(|b| b.name.clone())
            .collect();
        // The incumbent's plan for this workload; an incumbent that cannot run here is simply not compared.
        let incumbent = opts
            .incumbent
            .filter(|(h, _)| *h != hash && self.settings.timing.enabled && self.can_time())
            .and_then(|(h, c)| Some((h, c, c.resolve(&self.task, &rw).ok()?)));
        let mut baselines_timed =
            match self.prepare_for(&rw, &baselines, opts.retime_baselines, &mut result) {
                Ok(b) => b,
                Err(m) => return fail(result, (Status::Error, m, Value::Null)),
            };
        // A restarted worker has forgotten its builds: compile again and retry once.
        for _ in 0..2 {
            let key = match self.compile(cand, &rw) {
                Ok(k) => k,
                Err(e) => return fail(result, e),
            };
            let deadline = Duration::from_secs_f64(
                self.settings.timeout_s + self.compile_allowance(&key, &plan, &rw),
            );
            let incumbent_key = incumbent
                .as_ref()
                .and_then(|(_, c, _)| self.compile_incumbent(c, &rw));
            let request = RunRequest {
                key: &key,
                workload: &rw,
                buffers: &plan.buffers,
                launches: &plan.launches,
                inputs: inputs.clone(),
                timing: &self.settings.timing,
                baselines: &baselines,
                incumbent: incumbent
                    .as_ref()
                    .zip(incumbent_key.as_ref())
                    .map(|((_, _, p), k)| BuildRef {
                        key: k.clone(),
                        launches: &p.launches,
                        buffers: &p.buffers,
                    }),
            };
            let body = serde_json::to_value(&request).expect("a run request serialises");
            match self.worker.request("run", body, deadline) {
                Ok(Reply::Ok(r)) => {
                    return match serde_json::from_value::<RunReply>(r) {
                        Ok(reply) => {
                            let times = std::mem::take(&mut baselines_timed);
                            self.fill(&mut result, &rw, reply, times, incumbent.map(|x| x.0));
                            result
                        }
                        Err(e) => {
                            let m = format!("the worker's run result is malformed: {e}");
                            fail(result, (Status::Error, m, Value::Null))
                        }
                    };
                }
                Ok(Reply::Err { kind, .. }) if kind == "not_compiled" => {
                    self.modules.clear();
                    self.compiled.remove(&key);
                    if let Some(k) = incumbent_key {
                        self.compiled.remove(&k);
                    }
                }
                Ok(Reply::Err { kind, message }) => {
                    return fail(
                        result,
                        (Status::Error, format!("{kind}: {message}"), Value::Null),
                    );
                }
                Err(f) => {
                    self.compiled.clear();
                    self.modules.clear();
                    result.worker_died = matches!(f, WorkerFailure::Crashed { .. });
                    return fail(result, failure_status(&f));
                }
            }
        }
        fail(
            result,
            (
                Status::Error,
                "the worker keeps losing the build".into(),
                Value::Null,
            ),
        )
    }

    /// The run's own work for the workload (`prepare`; nothing where nothing runs, as mlx-metal off a Mac),
    /// its time noted in `result`; the baselines' times it gave, reported beside a candidate that passes.
    fn prepare_for(
        &mut self,
        rw: &ResolvedWorkload,
        baselines: &[String],
        retime: bool,
        result: &mut WorkloadResult,
    ) -> Result<BTreeMap<String, Timing>, String> {
        let prepared_at = std::time::Instant::now();
        let prepared = if self.can_time() {
            self.prepare(rw, baselines, retime)
        } else {
            Ok(PrepareReply::default())
        };
        result.prepare_s = prepared_at.elapsed().as_secs_f64();
        let p = prepared
            .map_err(|m| format!("preparing workload {} for the run failed: {m}", rw.name))?;
        result.baselines_timed_now = p.baselines_timed_now;
        result.baselines_unavailable = p.baselines_unavailable;
        Ok(p.baselines)
    }

    /// The incumbent's build for this workload; None (so it is not compared) when it no longer compiles.
    fn compile_incumbent(&mut self, c: &Candidate, rw: &ResolvedWorkload) -> Option<String> {
        match self.compile(c, rw) {
            Ok(k) => Some(k),
            Err((_, m, _)) => {
                tracing::warn!("the incumbent no longer compiles, so it is not compared: {m}");
                None
            }
        }
    }

    /// Seconds a run's deadline grows by for the kernel modules it may compile. A module (a kernel, its
    /// template values and dtypes) not compiled yet in this worker is compiled inside `run`: by MLX at its
    /// first launch (Metal; CUDA where the jailed compile is unavailable: about 1.7 s each for a small kernel
    /// on the H200, serially), or in the jail at the session's first call when `precompile` did not get
    /// to it. A candidate's deadline covers its kernels running, not that. Capped by the compile deadline;
    /// 0 on the CPU target (compiled before `run`).
    fn compile_allowance(&mut self, key: &str, plan: &ResolvedPlan, rw: &ResolvedWorkload) -> f64 {
        if !self.target.is_gpu() {
            return 0.0;
        }
        let dtype = |n: &String| {
            rw.dtypes
                .get(n)
                .copied()
                .or_else(|| plan.buffers.iter().find(|b| &b.name == n).map(|b| b.dtype))
                .map(|d| d.name().to_string())
                .unwrap_or_default()
        };
        let new = plan
            .launches
            .iter()
            .filter(|l| {
                let dtypes: Vec<String> = l.inputs.iter().chain(&l.outputs).map(dtype).collect();
                self.modules.insert(format!(
                    "{key}|{}|{:?}|{:?}|{:?}|{dtypes:?}",
                    l.kernel, l.template, l.type_args, l.cluster
                ))
            })
            .count();
        (new as f64 * MODULE_COMPILE_ALLOWANCE_S).min(self.settings.compile_timeout_s)
    }

    /// Whether this machine times candidates of the target (mlx-metal needs a Mac).
    fn can_time(&self) -> bool {
        self.target != Target::MlxMetal
            || self.hello["hardware"]["backend_available"].as_bool() == Some(true)
    }

    fn fill(
        &self,
        out: &mut WorkloadResult,
        rw: &ResolvedWorkload,
        r: RunReply,
        baselines: BTreeMap<String, Timing>,
        incumbent: Option<&str>,
    ) {
        out.status = match r.status.as_str() {
            "passed" => Status::Passed,
            "wrong" => Status::Wrong,
            "compile_error" => Status::CompileError,
            "unavailable" => Status::Unavailable,
            // The worker refuses this configuration on this machine (a launch in clusters under CUDA graphs).
            "invalid" => Status::Invalid,
            // The candidate crashed, or broke the device context (the worker restarts after it).
            "crash" => Status::Crash,
            _ => Status::Error,
        };
        out.metal_sources = r.metal_sources;
        out.message = r.message;
        out.checks = r.checks;
        let worst = |key: &str| {
            out.checks
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|c| {
                    c["outputs"]
                        .as_object()
                        .into_iter()
                        .flat_map(|o| o.values())
                })
                .filter_map(|o| o[key].as_f64())
                .fold(None, |acc: Option<f64>, x| {
                    Some(acc.map_or(x, |a| a.max(x)))
                })
        };
        out.max_abs = worst("max_abs");
        out.max_rel = worst("max_rel");
        out.timing = r.timing;
        // As `prepare` timed them (the run reply's copy, marked cached, says no more), beside a pass only.
        if out.status == Status::Passed {
            out.baselines = baselines;
        }
        out.split = r.split;
        if let (Some(hash), Some(timing), Some(verdict)) = (incumbent, r.incumbent, r.verdict) {
            out.comparison = Some(Comparison {
                incumbent: hash.to_string(),
                timing,
                verdict,
            });
        }
        if let Some(t) = &out.timing {
            out.roofline = Some(self.roofline(rw, t.median_s));
            if out.status == Status::Passed && out.roofline.as_ref().is_some_and(|r| r.implausible)
            {
                out.status = Status::Implausible;
                out.message = format!(
                    "implausible: {:.3e} s is far below the roofline floor of {:.3e} s; rejected",
                    t.median_s,
                    out.roofline.as_ref().unwrap().floor_s
                );
            }
        }
    }

    fn roofline(&self, rw: &ResolvedWorkload, median_s: f64) -> RooflineFigure {
        let (bytes, flops) = self.task.roofline(rw);
        let hw = &self.hello["hardware"];
        let bw = hw["peak_bandwidth_gbs"].as_f64().unwrap_or(0.0) * 1e9;
        let fl = hw["peak_gflops"].as_f64().unwrap_or(0.0) * 1e9;
        let t_bytes = if bw > 0.0 { bytes / bw } else { 0.0 };
        let t_flops = if fl > 0.0 { flops / fl } else { 0.0 };
        let floor_s = t_bytes.max(t_flops);
        RooflineFigure {
            bytes,
            flops,
            floor_s,
            fraction: if median_s > 0.0 {
                floor_s / median_s
            } else {
                0.0
            },
            // The peaks are measured, so they carry noise: only a result well past the floor is flagged.
            beats_roofline: floor_s > 0.0 && median_s * ROOFLINE_MARGIN < floor_s,
            implausible: (t_flops > 0.0 && median_s * ROOFLINE_MARGIN < t_flops)
                || (t_bytes > 0.0 && median_s * 2.0 < t_bytes),
        }
    }
}

/// How far past the measured roofline floor a time must be to be flagged.
pub const ROOFLINE_MARGIN: f64 = 1.2;

fn failure_status(f: &WorkerFailure) -> (Status, String, Value) {
    let status = match f {
        WorkerFailure::Timeout(_) => Status::Timeout,
        WorkerFailure::Crashed { .. } => Status::Crash,
        WorkerFailure::Spawn(_) | WorkerFailure::Protocol(_) => Status::Error,
    };
    (status, f.to_string(), Value::Null)
}

/// A fresh input secret, for an evaluator that belongs to no run (a run keeps its own in its config).
pub fn fresh_secret() -> u64 {
    crate::rng::os_random_u64() >> 1
}

/// Summary of a candidate over a set of workloads: the objective the strategies compare.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Summary {
    pub passed: bool,
    pub workloads: usize,
    pub passed_workloads: usize,
    /// Geometric mean of median times over the workloads, when all passed.
    pub geomean_s: Option<f64>,
    /// Per baseline: geometric mean of baseline time / candidate time.
    pub speedup_vs_baseline: BTreeMap<String, f64>,
    pub statuses: BTreeMap<String, Status>,
    /// The first failure's message, for people and for prompts.
    pub first_failure: Option<String>,
    /// Against the incumbent it was timed beside, over every workload: faster, slower or within noise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<OverallVerdict>,
    /// Workloads whose timing's spread passed the noise threshold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub noisy: Vec<String>,
}

/// A challenger against its incumbent over every workload: the per-workload log-ratios averaged (a
/// geometric-mean speedup), with their standard errors combined; faster or slower only when the mean lies
/// more than `z` combined standard errors from zero, and by more than the target's smallest effect
/// (`TimingSettings::min_effect`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OverallVerdict {
    pub incumbent: String,
    pub verdict: Verdict,
    /// Geometric mean of the workloads' speedups over the incumbent.
    pub speedup: f64,
    pub z: f64,
    pub workloads: BTreeMap<String, Verdict>,
}

/// The overall verdict of `results` (every one passed and compared with the same incumbent), else None.
pub fn overall_verdict(
    results: &[WorkloadResult],
    timing: &TimingSettings,
) -> Option<OverallVerdict> {
    let (z, min_effect) = (timing.verdict_z, timing.min_effect);
    let first = results.first()?.comparison.as_ref()?;
    let mut logs = Vec::new();
    let mut var = 0.0;
    let mut workloads = BTreeMap::new();
    for r in results {
        let c = r.comparison.as_ref()?;
        if c.incumbent != first.incumbent || r.status != Status::Passed {
            return None;
        }
        let m = -c.verdict.speedup.ln();
        // The worker's z is m / se: its standard error back (a z of 0 says nothing of it: take 1e-4).
        let se = if c.verdict.z.abs() > 1e-9 {
            (m / c.verdict.z).abs().max(1e-4)
        } else {
            1e-4f64.max(m.abs())
        };
        logs.push(m);
        var += se * se;
        workloads.insert(r.workload.clone(), c.verdict.verdict);
    }
    let n = logs.len() as f64;
    let mean = logs.iter().sum::<f64>() / n;
    let se = var.sqrt() / n;
    let score = mean / se;
    let verdict = if score < -z && mean < -min_effect {
        Verdict::Faster
    } else if score > z && mean > min_effect {
        Verdict::Slower
    } else {
        Verdict::WithinNoise
    };
    Some(OverallVerdict {
        incumbent: first.incumbent.clone(),
        verdict,
        speedup: (-mean).exp(),
        z: score,
        workloads,
    })
}

pub fn geomean(xs: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (mut s, mut n) = (0.0, 0usize);
    for x in xs {
        if !(x > 0.0 && x.is_finite()) {
            return None;
        }
        s += x.ln();
        n += 1;
    }
    (n > 0).then(|| (s / n as f64).exp())
}

pub fn summarize(results: &[WorkloadResult]) -> Summary {
    let passed_workloads = results
        .iter()
        .filter(|r| r.status == Status::Passed)
        .count();
    let passed = !results.is_empty() && passed_workloads == results.len();
    let geomean_s = if passed {
        geomean(results.iter().filter_map(|r| r.median_s()))
    } else {
        None
    };
    let mut speedup_vs_baseline = BTreeMap::new();
    if passed {
        let names: BTreeSet<&String> = results.iter().flat_map(|r| r.baselines.keys()).collect();
        for n in names {
            let ratios = results
                .iter()
                .filter_map(|r| Some(r.baselines.get(n)?.median_s / r.median_s()?));
            if let Some(g) = geomean(ratios) {
                speedup_vs_baseline.insert(n.clone(), g);
            }
        }
    }
    Summary {
        passed,
        workloads: results.len(),
        passed_workloads,
        geomean_s,
        speedup_vs_baseline,
        statuses: results
            .iter()
            .map(|r| (r.workload.clone(), r.status))
            .collect(),
        first_failure: results
            .iter()
            .find(|r| r.status != Status::Passed)
            .map(|r| format!("{}: {}: {}", r.workload, r.status.name(), r.message)),
        verdict: None,
        noisy: results
            .iter()
            .filter(|r| r.timing.as_ref().is_some_and(|t| t.noisy))
            .map(|r| r.workload.clone())
            .collect(),
    }
}

/// Geometric-mean speedup of `cand` over `base`, per workload present in both with timings.
pub fn speedup(base: &[WorkloadResult], cand: &[WorkloadResult]) -> Option<f64> {
    let ratios: Vec<f64> = cand
        .iter()
        .filter_map(|c| {
            let b = base.iter().find(|b| b.workload == c.workload)?;
            Some(b.median_s()? / c.median_s()?)
        })
        .collect();
    if ratios.len() != cand.len() {
        return None;
    }
    geomean(ratios)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geomean_rejects_non_positive() {
        assert_eq!(geomean([]), None);
        assert!((geomean([1.0, 4.0]).unwrap() - 2.0).abs() < 1e-12);
        assert_eq!(geomean([1.0, 0.0]), None);
        assert_eq!(geomean([1.0, f64::NAN]), None);
    }
}
