//! What every LLM-driven strategy shares: the prompt context of the task, asking for a candidate or a
//! JSON object, answering an unusable reply with the precise error, and the rules for giving up.

use super::Observation;
use crate::candidate::Candidate;
use crate::llm::{Llm, LlmError, Message, Request};
use crate::target::Target;
use crate::task::Task;
use crate::units::fmt_time;
use serde_json::{Value, json};

/// A reason to end the search early (the LLM budget is spent, the provider keeps failing).
#[derive(Debug, Clone, PartialEq)]
pub struct Stop(pub String);

/// How a stop for a spent LLM cap begins: a cap the user set ends the search as its budget does.
const CAP_SPENT: &str = "LLM budget spent: ";

impl Stop {
    /// What the run is told: a spent cap ends the search (`Done`); anything else (an unusable or failing
    /// LLM, replies that never became a candidate) means it could not do its job (`Stopped`).
    pub fn next(self) -> super::Next {
        if self.0.starts_with(CAP_SPENT) {
            super::Next::Done(self.0)
        } else {
            super::Next::Stopped(self.0)
        }
    }
}

/// How the reason for a failed provider call begins (as opposed to an unusable reply).
pub const CALL_FAILED: &str = "LLM call failed: ";

/// Consecutive provider failures (after the client's own retries) that end a run.
pub const MAX_CONSECUTIVE_FAILURES: u32 = 3;

pub struct Agent {
    pub llm: Llm,
    pub task: Value,
    pub target: Value,
    pub hardware: String,
    /// The knowledge section for the MLX targets (empty on the CPU).
    pub knowledge: String,
    /// The analysis of the task's CUDA kernel, when it has one (MLX targets).
    pub cuda_brief: String,
    /// The task itself, for judging candidates against its family's expert properties (MLX targets).
    assess: Option<Task>,
    pub max_output_tokens: Option<u32>,
    /// The run's budget, used and left, in one line (set by the strategy before each proposal).
    pub budget: String,
    /// Passing candidates with tunables are tuned by the hybrid search (the prompts say so).
    pub auto_tune: bool,
    /// What a prompt with no base candidate (a run started from the specification) shows of the answer's
    /// form: the source file's name and language, and a plan skeleton for the task.
    pub from_spec: Value,
    /// The task's held-out workloads (name and dims), for the results a world model may be shown.
    pub held_out: Vec<Value>,
    target_kind: Target,
    consecutive_failures: u32,
    /// Calls answered by this agent (a lane's, for `merge_lanes`).
    answered: u32,
}

/// What prompts show where a run started from the specification has no base candidate (K-Search's words).
pub const NO_BASE: &str = "(no base code; start from spec)";

/// A lane's answer: a candidate with its described change, why there is none, or why the search stops.
pub type LaneAnswer = Result<Attempt<(Candidate, String)>, Stop>;

/// One candidate asked of the LLM in a lane of a batch ([`Agent::candidates_at_once`]).
pub struct Ask {
    /// The lane's name, unique in the run.
    pub lane: String,
    pub purpose: &'static str,
    pub prompt: String,
    /// The candidate the reply's changes apply to.
    pub base: Candidate,
}

/// One generation's outcome: a usable answer, or why not (the caller records it as a failed attempt).
pub type Attempt<T> = Result<T, String>;

impl Agent {
    /// `hello` is the worker's hello (its `hardware` and `compiler`).
    pub fn new(llm: Llm, task: &Task, target: Target, hello: &Value) -> Agent {
        let workloads: Vec<Value> = task
            .workloads(false)
            .map(|w| json!({"name": w.name, "dims": w.dims}))
            .collect();
        Agent {
            llm,
            task: json!({"name": task.name(), "description": task.toml.description, "spec": task.spec, "workloads": workloads}),
            target: json!({"name": target.name(), "notes": target_notes(target)}),
            hardware: hardware_line(hello),
            knowledge: crate::knowledge::prompt_section(
                target,
                task.toml.family.as_deref(),
                &task.toml.not_applicable,
            ),
            cuda_brief: crate::translate::task_brief(task, target),
            assess: target.is_gpu().then(|| task.clone()),
            max_output_tokens: None,
            budget: String::new(),
            auto_tune: false,
            from_spec: from_spec_view(task, target),
            held_out: task
                .workloads(true)
                .map(|w| json!({"name": w.name, "dims": w.dims}))
                .collect(),
            target_kind: target,
            consecutive_failures: 0,
            answered: 0,
        }
    }

    /// This agent for the lane `name` of a batch: the same prompts' context, an LLM client of the lane's
    /// own (`Llm::lane`). Its calls and failures come back with [`Agent::merge_lanes`].
    pub fn lane(&self, name: &str) -> Result<Agent, Stop> {
        let llm = self
            .llm
            .lane(name)
            .map_err(|e| Stop(format!("LLM unusable: {e}")))?;
        Ok(Agent {
            llm,
            task: self.task.clone(),
            target: self.target.clone(),
            hardware: self.hardware.clone(),
            knowledge: self.knowledge.clone(),
            cuda_brief: self.cuda_brief.clone(),
            assess: self.assess.clone(),
            max_output_tokens: self.max_output_tokens,
            budget: self.budget.clone(),
            auto_tune: self.auto_tune,
            from_spec: self.from_spec.clone(),
            held_out: self.held_out.clone(),
            target_kind: self.target_kind,
            consecutive_failures: self.consecutive_failures,
            answered: 0,
        })
    }

    /// Asks for one candidate per ask at once, each in its lane (`docs/parallel.md`), and folds the lanes
    /// back in order; a single ask goes through this agent's own client, as a run without lanes does. The
    /// answers come back in the asks' order.
    pub fn candidates_at_once(
        &mut self,
        asks: &[Ask],
        tries: u32,
    ) -> Result<Vec<LaneAnswer>, Stop> {
        if let [one] = asks {
            return Ok(vec![self.candidate(
                one.purpose,
                one.prompt.clone(),
                &one.base,
                tries,
            )]);
        }
        let mut lanes = asks
            .iter()
            .map(|a| self.lane(&a.lane))
            .collect::<Result<Vec<_>, _>>()?;
        let answers = std::thread::scope(|scope| {
            let running: Vec<_> = lanes
                .iter_mut()
                .zip(asks)
                .map(|(lane, a)| {
                    scope.spawn(move || lane.candidate(a.purpose, a.prompt.clone(), &a.base, tries))
                })
                .collect();
            running
                .into_iter()
                .map(|h| h.join().expect("a lane panicked"))
                .collect()
        });
        self.merge_lanes(lanes);
        Ok(answers)
    }

    /// Folds finished lanes back in lane order: their LLM spending and exchanges, and the calls failed in
    /// a row, counted over the lanes in lane order (a lane that had a call answered starts the count anew).
    pub fn merge_lanes(&mut self, lanes: Vec<Agent>) {
        let start = self.consecutive_failures;
        for lane in &lanes {
            if lane.answered > 0 {
                self.consecutive_failures = lane.consecutive_failures;
            } else {
                self.consecutive_failures += lane.consecutive_failures - start;
            }
        }
        self.llm
            .merge_lanes(lanes.into_iter().map(|a| a.llm).collect());
    }

    /// The expert properties (knowledge/assertions.toml) a measured candidate lacks, one per line; empty
    /// on the CPU target or when nothing is missing.
    pub fn lacking(&self, o: &super::Observation) -> String {
        self.assess
            .as_ref()
            .map(|t| {
                crate::assertions::missing_text(&crate::assertions::assess(
                    t,
                    &o.candidate,
                    &o.results,
                ))
            })
            .unwrap_or_default()
    }

    /// Context every prompt template gets.
    pub fn ctx(&self, extra: Value) -> Value {
        let mut v = json!({"task": self.task, "target": self.target, "hardware": self.hardware, "knowledge": self.knowledge, "cuda_brief": self.cuda_brief, "budget": self.budget, "auto_tune": self.auto_tune});
        if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
            o.extend(e);
        }
        v
    }

    fn call(&mut self, purpose: &str, messages: Vec<Message>) -> Result<Attempt<String>, Stop> {
        let req = Request {
            purpose: purpose.to_string(),
            messages,
            max_tokens: self.max_output_tokens,
            temperature: None,
        };
        match self.llm.complete(req) {
            Ok(r) => {
                self.consecutive_failures = 0;
                self.answered += 1;
                Ok(Ok(r.text))
            }
            Err(LlmError::Budget(m)) => Err(Stop(format!("{CAP_SPENT}{m}"))),
            Err(e @ (LlmError::Config(_) | LlmError::Replay(_))) => {
                Err(Stop(format!("LLM unusable: {e}")))
            }
            Err(e) => {
                self.consecutive_failures += 1;
                if self.consecutive_failures >= MAX_CONSECUTIVE_FAILURES {
                    Err(Stop(format!(
                        "the LLM failed {MAX_CONSECUTIVE_FAILURES} calls in a row; last: {e}"
                    )))
                } else {
                    Ok(Err(format!("{CALL_FAILED}{e}")))
                }
            }
        }
    }

    /// Asks with `prompt`, parses with `parse`; an unusable reply is answered with the parser's error,
    /// up to `tries` calls in one conversation.
    pub fn ask<T>(
        &mut self,
        purpose: &str,
        prompt: String,
        tries: u32,
        mut parse: impl FnMut(&str) -> Result<T, String>,
    ) -> Result<Attempt<T>, Stop> {
        let mut messages = vec![Message::user(prompt)];
        let mut last = String::from("no reply");
        for _ in 0..tries.max(1) {
            let text = match self.call(purpose, messages.clone())? {
                Ok(t) => t,
                Err(e) => return Ok(Err(e)),
            };
            match parse(&text) {
                Ok(v) => return Ok(Ok(v)),
                Err(e) => {
                    tracing::info!("unusable {purpose} reply: {e}");
                    let feedback = crate::prompts::render("reply_error.j2", json!({"error": e}))
                        .map_err(Stop)?;
                    messages.push(Message::assistant(text));
                    messages.push(Message::user(feedback));
                    last = e;
                }
            }
        }
        Ok(Err(format!("the reply could not be used: {last}")))
    }

    /// The base of a reply written with no candidate to build on: a plan with nothing in it, so the reply
    /// must give the whole plan and every file (see [`Agent::candidate`]).
    pub fn no_base(&self) -> Candidate {
        Candidate {
            plan: crate::candidate::Plan {
                name: String::new(),
                target: self.target_kind,
                description: String::new(),
                constraints: Vec::new(),
                kernel: Vec::new(),
                buffer: Vec::new(),
                launch: Vec::new(),
                tunable: Default::default(),
            },
            files: Default::default(),
        }
    }

    /// Asks for a candidate derived from `parent`; with it, the change as the reply describes it. A
    /// parent with no kernel ([`Agent::no_base`]) asks for a whole candidate: a reply without plan.toml is
    /// refused with the reason (`ReplyError::NoPlanWithoutBase`).
    pub fn candidate(
        &mut self,
        purpose: &str,
        prompt: String,
        parent: &Candidate,
        tries: u32,
    ) -> Result<Attempt<(Candidate, String)>, Stop> {
        self.ask(purpose, prompt, tries, |text| {
            crate::reply::candidate_from_reply(text, parent)
                .map(|r| (r.candidate, crate::reply::described_change(text)))
                .map_err(|e| e.to_string())
        })
    }

    /// Asks for a JSON object, then validates it with `parse`.
    pub fn json<T>(
        &mut self,
        purpose: &str,
        prompt: String,
        tries: u32,
        mut parse: impl FnMut(&Value) -> Result<T, String>,
    ) -> Result<Attempt<T>, Stop> {
        self.ask(purpose, prompt, tries, |text| {
            let v = crate::reply::first_json_object(text).map_err(|e| e.to_string())?;
            parse(&v)
        })
    }
}

/// The answer's form for a candidate written from the specification: a source named after the task in
/// the target's language, and a plan naming the task's inputs, outputs and dims.
fn from_spec_view(task: &Task, target: Target) -> Value {
    let kernel: String = task
        .name()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let ext = match target {
        Target::Cpu => "c",
        Target::MlxMetal => "metal",
        Target::MlxCuda | Target::Cuda => "cu",
    };
    let source = format!("{kernel}.{ext}");
    let lang = crate::reply::lang_for_file(&source);
    let names = |ts: &[crate::task::TensorSpec]| {
        ts.iter()
            .map(|t| format!("\"{}\"", t.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let dims = task
        .toml
        .dims
        .keys()
        .map(|d| format!("\"{d}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let mut plan = format!(
        "name = \"{kernel}\"\ntarget = \"{}\"\ndescription = \"<what this candidate does>\"\n\n\
         [[kernel]]\nname = \"{kernel}\"\nsource = \"{source}\"\n\n\
         [[launch]]\nkernel = \"{kernel}\"\ninputs = [{}]\noutputs = [{}]\nscalars = [{dims}]\n",
        target.name(),
        names(&task.toml.input),
        names(&task.toml.output),
    );
    if target.is_gpu() {
        plan.push_str("grid = [\"<threads in x>\", \"<y>\", \"<z>\"]\nthreadgroup = [\"256\", \"1\", \"1\"]\n");
    }
    plan.push_str(
        "\n# optional: [tunable.NAME] with values = [...] and default = ... (a compile-time macro)\n",
    );
    json!({"source_name": source, "source_lang": lang, "plan_skeleton": plan})
}

fn target_notes(t: Target) -> &'static str {
    match t {
        Target::Cpu => {
            "C11 compiled with `cc -O3 -march=native -std=gnu11` (the compiler and ISA extensions are in the hardware line below), one call per launch, single-threaded; SIMD by auto-vectorisation, GCC vector extensions or the intrinsics of those extensions (<immintrin.h>, <arm_neon.h>)."
        }
        Target::MlxMetal => {
            "Metal kernel bodies run through mx.fast.metal_kernel (Apple GPU): 32-wide SIMD groups, at most 1024 threads and 32 KB threadgroup memory per threadgroup."
        }
        Target::MlxCuda => {
            "CUDA kernel bodies run through mx.fast.cuda_kernel (NVIDIA GPU, NVRTC, sm_90a): guard every index, MLX launches ceil(grid/threadgroup) blocks."
        }
        Target::Cuda => {
            "Whole CUDA C++ `__global__` functions (NVIDIA GPU, NVRTC for the device's architecture, sm_90a on Hopper: wgmma, TMA and clusters available), launched by the worker on a stream of its own: parameters are the launch's inputs (`const T*`), outputs (`T*`) and scalars (`int`, by value) in that order; `template` values then `type_args` are the template arguments in that order; ceil(grid/threadgroup) blocks, so guard every index."
        }
    }
}

/// The hardware facts a kernel writer asks for first, in one line: what the device is, its ISA
/// extensions or compute capability, caches by level, cores, the measured peaks and whether they are one
/// core's or the device's, and the compiler with its version and flags. Also shown by `ksearch doctor`.
pub fn hardware_line(hello: &Value) -> String {
    let hw = &hello["hardware"];
    let mut parts: Vec<String> = Vec::new();
    let text = |v: &Value| {
        v.as_str()
            .map(str::to_string)
            .unwrap_or_else(|| v.to_string())
    };
    let present = |k: &str| hw.get(k).filter(|v| !v.is_null());
    if let Some(v) = present("name") {
        parts.push(text(v));
    }
    if let Some(v) = present("compute_capability") {
        parts.push(format!("compute capability {}", text(v)));
    }
    if let Some(v) = present("architecture") {
        parts.push(format!("GPU architecture {}", text(v)));
    }
    if let Some(v) = present("sms") {
        parts.push(format!("{} SMs", text(v)));
    }
    if let Some(v) = present("cores") {
        parts.push(format!("{} cores", text(v)));
    }
    if let Some(isa) = hw["isa"].as_array().filter(|a| !a.is_empty()) {
        let names: Vec<String> = isa.iter().map(text).collect();
        parts.push(format!("ISA extensions {}", names.join(" ")));
    }
    let bytes = |n: u64| {
        if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
            format!("{} MiB", n >> 20)
        } else {
            format!("{} KiB", n >> 10)
        }
    };
    if let Some(cs) = hw["caches"].as_array().filter(|a| !a.is_empty()) {
        let levels: Vec<String> = cs
            .iter()
            .filter_map(|c| {
                let kind = if c["type"] == "Data" { "d" } else { "" };
                let shared = match c["shared_by"].as_u64() {
                    Some(n) if n > 1 => format!(" shared by {n} CPUs"),
                    _ => String::new(),
                };
                Some(format!(
                    "L{}{kind} {}{shared}",
                    c["level"].as_u64()?,
                    bytes(c["bytes"].as_u64()?)
                ))
            })
            .collect();
        parts.push(format!("caches {}", levels.join(", ")));
    } else if let Some(n) = hw["l2_cache_bytes"].as_u64() {
        parts.push(format!("L2 {}", bytes(n)));
    } else if let Some(n) = hw["cache_bytes"].as_u64() {
        parts.push(format!("largest cache {}", bytes(n)));
    }
    if let Some(n) = hw["shared_memory_per_block_optin_bytes"].as_u64() {
        parts.push(format!("shared memory per block up to {}", bytes(n)));
    }
    let scope = hw["peak_scope"].as_str().unwrap_or("measured");
    let peaks: Vec<String> = [("peak_bandwidth_gbs", "GB/s"), ("peak_gflops", "GFLOP/s")]
        .iter()
        .filter_map(|(k, unit)| hw[*k].as_f64().map(|v| format!("{v:.1} {unit}")))
        .collect();
    if !peaks.is_empty() {
        parts.push(format!("peaks ({scope}) {}", peaks.join(", ")));
    }
    let c = &hello["compiler"];
    if let Some(name) = c["name"].as_str() {
        let flags: Vec<String> = c["flags"]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        let version = c["version"].as_str().unwrap_or("");
        parts.push(format!(
            "compiler {name}{}{}",
            if version.is_empty() {
                String::new()
            } else {
                format!(" ({version})")
            },
            if flags.is_empty() {
                String::new()
            } else {
                format!(" {}", flags.join(" "))
            }
        ));
    }
    parts.join("; ")
}

/// How a measured candidate did, in one paragraph for a prompt.
pub fn perf(obs: &Observation, seed: Option<&Observation>) -> String {
    if !obs.summary.passed {
        return format!(
            "FAILED — {}",
            obs.summary
                .first_failure
                .clone()
                .unwrap_or_else(|| "did not pass".into())
        );
    }
    let mut s = format!(
        "passed; geometric-mean time {}",
        fmt_time(obs.summary.geomean_s)
    );
    if let Some(x) = seed.and_then(|s| crate::eval::speedup(&s.results, &obs.results)) {
        s.push_str(&format!(", {x:.2}x the starting candidate"));
    }
    for (b, x) in &obs.summary.speedup_vs_baseline {
        s.push_str(&format!(", {x:.2}x {b}"));
    }
    if let Some(v) = &obs.summary.verdict {
        s.push_str(&format!(
            "; timed side by side with {} on the same inputs: {} ({:.3}x)",
            v.incumbent,
            v.verdict.name(),
            v.speedup
        ));
    }
    // Each time with its spread (interquartile range) and fastest sample: differences inside the spread
    // are noise, and a figure flagged noisy is not to be trusted to a few percent.
    let per: Vec<String> = obs
        .results
        .iter()
        .map(|r| {
            let spread = r
                .timing
                .as_ref()
                .map(|t| {
                    format!(
                        " ±{} IQR, fastest {}{}",
                        fmt_time(Some(t.iqr_s)),
                        fmt_time(Some(t.min_s)),
                        if t.noisy { ", NOISY" } else { "" }
                    )
                })
                .unwrap_or_default();
            format!(
                "{} {}{spread}{}",
                r.workload,
                fmt_time(r.median_s()),
                r.roofline
                    .as_ref()
                    .map(|f| format!(" ({:.0}% of roofline)", f.fraction * 100.0))
                    .unwrap_or_default()
            )
        })
        .collect();
    if !per.is_empty() {
        s.push_str(&format!("; per workload: {}", per.join(", ")));
    }
    s
}

/// A passing candidate's time in a few words: the geometric mean over the workloads, the widest spread of
/// its workloads (interquartile range over the median) and a NOISY mark where the evaluator set one.
pub fn time_with_spread(obs: &Observation) -> String {
    let widest = obs
        .results
        .iter()
        .filter_map(|r| {
            let t = r.timing.as_ref()?;
            (t.median_s > 0.0).then(|| t.iqr_s / t.median_s)
        })
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
    let noisy = obs
        .results
        .iter()
        .any(|r| r.timing.as_ref().is_some_and(|t| t.noisy));
    format!(
        "geometric-mean time {}{}{}",
        fmt_time(obs.summary.geomean_s),
        widest
            .map(|w| format!(" (IQR up to {:.1}% of the median)", 100.0 * w))
            .unwrap_or_default(),
        if noisy { ", NOISY" } else { "" }
    )
}

/// A candidate as shown in prompts (the same format the LLM answers in).
pub fn code(c: &Candidate) -> String {
    crate::reply::render_candidate(c)
}

/// The file the LLM is most likely to edit, and its fence language, for the answer-format section.
pub fn source_hint(c: &Candidate) -> Value {
    let name = c
        .plan
        .kernel
        .first()
        .map(|k| k.source.clone())
        .unwrap_or_else(|| "kernel.c".into());
    let lang = match name.rsplit('.').next() {
        Some("cu") | Some("cuh") => "cuda",
        Some("metal") => "metal",
        _ => "c",
    };
    json!({"source_name": name, "source_lang": lang})
}
