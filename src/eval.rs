//! Evaluation: compile a candidate, check it against the reference on fresh random inputs, time it
//! next to the baselines, and say what happened on every workload (`docs/design.md`, evaluation rules).
//!
//! The worker does the measuring; this module decides what to ask, with which seeds and deadlines, and
//! turns every outcome (a wrong answer, a compiler error, a hang, a crash) into a recorded fate.

use crate::candidate::Candidate;
use crate::pyenv::PythonEnv;
use crate::target::Target;
use crate::task::{ResolvedWorkload, Task, Workload};
use crate::worker::{Reply, Worker, WorkerFailure};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
pub struct Timing {
    pub median_s: f64,
    pub iqr_s: f64,
    pub min_s: f64,
    pub max_s: f64,
    pub samples: u64,
    pub reps: u64,
    /// MLX: calls sharing one `mx.eval`, so that its fixed cost is not charged to a short kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launches_per_eval: Option<u64>,
}

impl Timing {
    fn from_json(v: &Value) -> Option<Timing> {
        serde_json::from_value(v.clone()).ok()
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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    pub seeds: Vec<u64>,
    /// Wall time this evaluation took, compile included (a hang shows here as the deadline).
    #[serde(default)]
    pub elapsed_s: f64,
}

impl WorkloadResult {
    pub fn median_s(&self) -> Option<f64> {
        self.timing.as_ref().map(|t| t.median_s)
    }
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub checks: usize,
    pub timeout_s: f64,
    pub compile_timeout_s: f64,
    pub timing: Value,
}

impl Settings {
    pub fn for_task(task: &Task) -> Settings {
        Settings {
            checks: 3,
            timeout_s: task.timeout_s(),
            compile_timeout_s: 120.0,
            timing: json!({
                "enabled": true, "warmup_s": 0.05, "min_samples": 5, "max_samples": 25,
                "budget_s": 1.0, "min_sample_s": 0.0002
            }),
        }
    }
}

/// One device's evaluator: a worker with the task loaded.
pub struct Evaluator {
    pub task: Task,
    pub target: Target,
    pub settings: Settings,
    pub hello: Value,
    worker: Worker,
    build_root: PathBuf,
    /// Mixed into every check's seeds; drawn fresh each time an evaluator starts, never stored.
    secret: u64,
    compiled: BTreeSet<String>,
}

const HELLO_DEADLINE: Duration = Duration::from_secs(180);

impl Evaluator {
    pub fn start(
        task: Task,
        target: Target,
        env: PythonEnv,
        build_root: PathBuf,
        settings: Settings,
    ) -> anyhow::Result<Evaluator> {
        // Absolute: the worker runs in a private directory of its own.
        std::fs::create_dir_all(&build_root)?;
        let build_root = build_root.canonicalize()?;
        let mut worker = Worker::new(env, target);
        worker.writable = vec![build_root.clone()];
        let mut hello = match worker.request("hello", json!({}), HELLO_DEADLINE)? {
            Reply::Ok(v) => v,
            Reply::Err { kind, message } => anyhow::bail!("worker hello failed: {kind}: {message}"),
        };
        hello["sandbox"] = worker.sandbox.clone();
        hello["sandbox"]["landlock_abi"] = hello["landlock_abi"].clone();
        remember_peaks(&mut hello["hardware"]);
        let body = json!({"dir": task.dir.canonicalize().unwrap_or_else(|_| task.dir.clone()), "task": task.worker_json(target)});
        match worker.preamble("load_task", body, HELLO_DEADLINE)? {
            Reply::Ok(_) => {}
            Reply::Err { kind, message } => anyhow::bail!(
                "the worker could not load task `{}` from {}: {kind}: {message}",
                task.name(),
                task.dir.display()
            ),
        }
        Ok(Evaluator {
            task,
            target,
            settings,
            hello,
            worker,
            build_root,
            secret: fresh_secret(),
            compiled: BTreeSet::new(),
        })
    }

    pub fn worker_restarts(&self) -> u32 {
        self.worker.restarts
    }

    pub fn hardware(&self) -> Value {
        self.hello["hardware"].clone()
    }

    fn seeds(&self, cand_hash: &str, workload: &str) -> Vec<u64> {
        let base = crate::rng::hash64(&format!("{cand_hash}/{workload}")) ^ self.secret;
        (0..self.settings.checks as u64)
            .map(|i| crate::rng::splitmix(base.wrapping_add(i)) >> 1)
            .collect()
    }

    /// Compiles (once per worker) the build of `cand` for the dtypes of `rw`; returns the build key.
    fn compile(
        &mut self,
        cand: &Candidate,
        rw: &ResolvedWorkload,
    ) -> Result<String, (Status, String, Value)> {
        let header = match self.target {
            Target::Cpu => cand
                .c_header(&self.task, rw)
                .map_err(|m| (Status::Invalid, m, Value::Null))?,
            _ => String::new(),
        };
        let key = blake3::hash(format!("{}\0{header}", cand.hash()).as_bytes()).to_hex()[..16]
            .to_string();
        if self.compiled.contains(&key) {
            return Ok(key);
        }
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
            // MLX compiles kernel bodies itself, at their first launch; the worker records them.
            let kernels: Vec<Value> = cand
                .plan
                .kernel
                .iter()
                .map(|k| {
                    json!({"name": k.name, "source": cand.mlx_source(k),
                           "header": cand.mlx_header(k), "header_name": k.header})
                })
                .collect();
            return match self.worker.request(
                "compile",
                json!({"key": key, "kernels": kernels}),
                deadline,
            ) {
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
        let dir = self.build_root.join(&key);
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

    /// Evaluates `cand` on one workload.
    pub fn evaluate_workload(&mut self, cand: &Candidate, w: &Workload) -> WorkloadResult {
        let start = std::time::Instant::now();
        let mut r = self.evaluate_workload_inner(cand, w);
        r.elapsed_s = start.elapsed().as_secs_f64();
        r
    }

    fn evaluate_workload_inner(&mut self, cand: &Candidate, w: &Workload) -> WorkloadResult {
        let hash = cand.hash();
        let seeds = self.seeds(&hash, &w.name);
        let mut result = WorkloadResult {
            workload: w.name.clone(),
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
            seeds: seeds.clone(),
            elapsed_s: 0.0,
        };
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
        let deadline = Duration::from_secs_f64(self.settings.timeout_s);
        // A restarted worker has forgotten its builds: compile again and retry once.
        for _ in 0..2 {
            let key = match self.compile(cand, &rw) {
                Ok(k) => k,
                Err(e) => return fail(result, e),
            };
            let body = json!({
                "key": key, "workload": rw, "buffers": plan.buffers, "launches": plan.launches,
                "seeds": seeds, "timing": self.settings.timing, "baselines": baselines,
            });
            match self.worker.request("run", body, deadline) {
                Ok(Reply::Ok(r)) => {
                    self.fill(&mut result, &rw, &r);
                    return result;
                }
                Ok(Reply::Err { kind, .. }) if kind == "not_compiled" => {
                    self.compiled.remove(&key);
                }
                Ok(Reply::Err { kind, message }) => {
                    return fail(
                        result,
                        (Status::Error, format!("{kind}: {message}"), Value::Null),
                    );
                }
                Err(f) => {
                    self.compiled.clear();
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

    fn fill(&self, out: &mut WorkloadResult, rw: &ResolvedWorkload, r: &Value) {
        out.status = match r["status"].as_str() {
            Some("passed") => Status::Passed,
            Some("wrong") => Status::Wrong,
            Some("compile_error") => Status::CompileError,
            Some("unavailable") => Status::Unavailable,
            // The worker refuses this configuration on this machine (a launch in clusters under CUDA graphs).
            Some("invalid") => Status::Invalid,
            // A kernel fault that broke the device context (the worker restarts after it).
            Some("crash") => Status::Crash,
            _ => Status::Error,
        };
        out.metal_sources = r["metal_sources"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        out.message = r["message"].as_str().unwrap_or("").to_string();
        out.checks = r["checks"].clone();
        let worst = |key: &str| {
            r["checks"]
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
        out.timing = Timing::from_json(&r["timing"]);
        if let Some(b) = r["baselines"].as_object() {
            out.baselines = b
                .iter()
                .filter_map(|(k, v)| Timing::from_json(v).map(|t| (k.clone(), t)))
                .collect();
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

/// A measured peak can only come out low (a busy machine, a cold clock), never high: keep the best ever
/// measured on this machine (in the cache, by hardware name) and use the larger of it and today's.
fn remember_peaks(hw: &mut Value) {
    let Some(name) = hw["name"].as_str().map(str::to_string) else {
        return;
    };
    let path = crate::builtin::cache_root().join("peaks.json");
    let mut all: serde_json::Map<String, Value> = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let known = all.entry(name).or_insert_with(|| json!({}));
    for key in ["peak_bandwidth_gbs", "peak_gflops"] {
        let now = hw[key].as_f64().unwrap_or(0.0);
        let best = known[key].as_f64().unwrap_or(0.0).max(now);
        if best > 0.0 {
            known[key] = json!(best);
            if best > now {
                hw[format!("{key}_measured_now")] = json!(now);
                hw[key] = json!(best);
            }
        }
    }
    // Best effort: a read-only cache only means today's measurement is used alone.
    let _ = std::fs::create_dir_all(crate::builtin::cache_root());
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, serde_json::to_string_pretty(&all).unwrap_or_default()).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
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

fn fresh_secret() -> u64 {
    let mut buf = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut buf);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    u64::from_le_bytes(buf) ^ crate::rng::splitmix(t ^ std::process::id() as u64)
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
