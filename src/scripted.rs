//! A scripted evaluator: the `eval::Evaluate` seam answered by functions of the candidate instead of a
//! worker. The runner, the strategies and the benchmarks of the search itself use it to run whole
//! searches in-process in milliseconds, with outcomes the test chose. It never measures anything: a
//! result from it names it (`hardware.name` is `scripted`) and must not be reported as a kernel's time.

use crate::candidate::Candidate;
use crate::eval::{
    EvalOptions, Evaluate, Hardware, Status, Timing, TimingSettings, WorkloadResult,
};
use crate::task::Workload;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// What the scripted evaluator says of one candidate on one workload: passed in this many seconds, or
/// failed with this status and message.
pub type Outcome = Result<f64, (Status, String)>;

/// The message of a scripted `crash` that stands for the worker process dying mid-evaluation (the result
/// is marked `worker_died`, as `Evaluator` marks a worker's death).
pub const WORKER_DIED: &str = "scripted: the worker died";

/// One evaluation the runner asked for: the candidate's hash, the workload, whether the baselines were
/// timed again (the final and confirming phases).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub candidate: String,
    pub workload: String,
    pub retime_baselines: bool,
}

type Script = Box<dyn FnMut(&Candidate, &Workload) -> Outcome + Send>;

pub struct ScriptedEvaluator {
    hello: Value,
    timing: TimingSettings,
    script: Script,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl ScriptedEvaluator {
    /// An evaluator whose every answer is `script`'s; `timing` is the run's (verdicts read it).
    pub fn new(
        timing: TimingSettings,
        script: impl FnMut(&Candidate, &Workload) -> Outcome + Send + 'static,
    ) -> ScriptedEvaluator {
        ScriptedEvaluator {
            hello: json!({"hardware": {"kind": "scripted", "name": "scripted"}}),
            timing,
            script: Box::new(script),
            calls: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The same evaluator reporting `name` as its hardware (a device unlike the others of a pool).
    pub fn named(mut self, name: &str) -> ScriptedEvaluator {
        self.hello["hardware"]["name"] = json!(name);
        self
    }

    /// The calls made so far, shared: it stays readable after the evaluator is handed to a runner.
    pub fn calls(&self) -> Arc<Mutex<Vec<Call>>> {
        self.calls.clone()
    }
}

impl Evaluate for ScriptedEvaluator {
    fn hello(&self) -> &Value {
        &self.hello
    }

    fn precompile(&mut self, _: &Candidate, _: &[&Workload]) {}

    fn evaluate_workload_with(
        &mut self,
        cand: &Candidate,
        w: &Workload,
        opts: EvalOptions<'_>,
    ) -> WorkloadResult {
        self.calls.lock().unwrap().push(Call {
            candidate: cand.hash(),
            workload: w.name.clone(),
            retime_baselines: opts.retime_baselines,
        });
        let mut r = WorkloadResult {
            workload: w.name.clone(),
            ..Default::default()
        };
        match (self.script)(cand, w) {
            Ok(t) => {
                r.status = Status::Passed;
                r.timing = Some(Timing {
                    median_s: t,
                    min_s: t,
                    max_s: t,
                    samples: 1,
                    reps: 1,
                    ..Default::default()
                });
            }
            Err((status, message)) => {
                r.worker_died = status == Status::Crash && message == WORKER_DIED;
                r.status = status;
                r.message = message;
            }
        }
        r
    }

    fn timing(&self) -> &TimingSettings {
        &self.timing
    }

    fn hardware(&self) -> Hardware {
        Hardware::from_hello(&self.hello)
    }

    fn worker_restarts(&self) -> u32 {
        0
    }
}
