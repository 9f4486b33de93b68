//! A run's status, the phases of its evaluations, and its result: the last line of `run --json`, kept with the run in the store and read back typed by
//! `show`, `runs`, `compare` and the summary table. A result stored by an older ksearch reads with the
//! fields it lacks empty.

use crate::candidate::Params;
use crate::eval::{Hardware, OverallVerdict, Split, Status, Verdict, WorkloadResult};
use crate::protocol::lenient;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Values the store keeps as text (it implements their SQL conversion), typed here: each knows its one
/// spelling.
macro_rules! stored_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $s)] $v),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$v),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$v => $s),+ }
            }

            pub fn parse(s: &str) -> Option<$name> {
                match s { $($s => Some($name::$v),)+ _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

    };
}

stored_enum!(
    /// Where a run stands.
    RunStatus {
        /// A process holds its lease (shown `interrupted` once that process is gone).
        Running = "running",
        Completed = "completed",
        /// No candidate passed every feedback workload.
        Failed = "failed",
        /// The search could not do its job (the LLM unusable, a seed that does not pass).
        Stopped = "stopped",
        /// Killed while running: `resume` goes on.
        Interrupted = "interrupted",
    }
);

stored_enum!(
    /// What an attempt and its evaluations were for.
    Phase {
        /// The search's own: the seed, the rounds, tuning (feedback workloads).
        Search = "search",
        /// Held-out workloads scored mid-run for the strategy (`Next::HeldOut`).
        HeldOut = "held-out",
        /// Held-out workloads scored on the best candidates at the end, baselines re-timed beside them.
        Final = "final",
        /// The chosen candidate's feedback workloads re-timed with the baselines at the end.
        Confirm = "confirm",
    }
);

/// What `--budget` counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetUnit {
    /// LLM strategies: code generations with their evaluation.
    Rounds,
    /// `tune`, and runs stored before rounds were counted.
    #[default]
    Evaluations,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    pub run_id: String,
    pub task: String,
    pub target: String,
    pub strategy: String,
    pub status: RunStatus,
    #[serde(default)]
    pub budget: usize,
    #[serde(default)]
    pub budget_unit: BudgetUnit,
    /// Rounds spent (LLM strategies), and those whose reply gave nothing to evaluate.
    #[serde(default)]
    pub rounds: Option<usize>,
    #[serde(default)]
    pub rounds_without_candidate: Option<usize>,
    /// Evaluations the hybrid search spent tuning, and its cap (None: no tuning).
    #[serde(default)]
    pub tuning_evaluations: Option<usize>,
    #[serde(default)]
    pub tuning_cap: Option<usize>,
    #[serde(default)]
    pub evaluations: usize,
    /// Held-out workloads scored mid-run and shown to the model (then a validation set, not unseen shapes).
    #[serde(default)]
    pub held_out_checks: usize,
    #[serde(default, deserialize_with = "lenient")]
    pub hardware: Hardware,
    /// The devices evaluations went to when there were several (`--devices`), as people read them
    /// (`cores 0`, `gpu 1`); `hardware` is the first one's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    #[serde(default)]
    pub worker_restarts: u32,
    /// Why the search ended before its budget, if it did.
    #[serde(default)]
    pub stopped: Option<String>,
    #[serde(default)]
    pub llm: Option<LlmUse>,
    #[serde(default)]
    pub world_model_nodes: Option<usize>,
    #[serde(default, deserialize_with = "lenient")]
    pub elapsed_s: f64,
    /// None for a run started from the specification.
    #[serde(default)]
    pub seed: Option<SeedResult>,
    /// None when no candidate passed every feedback workload.
    #[serde(default)]
    pub best: Option<BestResult>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LlmUse {
    pub spec: String,
    #[serde(default)]
    pub exchanges: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SeedResult {
    pub candidate: String,
    pub passed: bool,
    #[serde(default)]
    pub geomean_s: Option<f64>,
    #[serde(default)]
    pub failure: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BestResult {
    pub candidate: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub params: Params,
    #[serde(default)]
    pub geomean_s: Option<f64>,
    #[serde(default)]
    pub speedup_vs_seed: Option<f64>,
    /// Over the task's first baseline on this target; all of them in `speedup_vs_baselines`.
    #[serde(default)]
    pub speedup_vs_baseline: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub speedup_vs_baselines: BTreeMap<String, f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub verdict: Option<OverallVerdict>,
    /// The workloads whose timing was noisy.
    #[serde(default)]
    pub noisy: Vec<String>,
    #[serde(default)]
    pub held_out_passed: bool,
    #[serde(default)]
    pub held_out: Vec<HeldOutRow>,
    /// Its feedback workloads as the search measured them.
    #[serde(default)]
    pub workloads: Vec<WorkloadRow>,
    /// The same, timed again with the baselines beside it at the end.
    #[serde(default)]
    pub confirmed: Option<Vec<WorkloadRow>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeldOutRow {
    pub workload: String,
    pub status: Status,
    #[serde(default)]
    pub message: String,
}

/// One workload's evaluation as results show it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkloadRow {
    pub workload: String,
    pub status: Option<Status>,
    pub median_s: Option<f64>,
    pub iqr_s: Option<f64>,
    pub min_s: Option<f64>,
    pub noisy: Option<bool>,
    pub distinct_inputs: Option<u64>,
    pub sampled_checks: Option<u64>,
    pub launches_per_eval: Option<u64>,
    /// Each baseline's median, its spread, and its calls per timed evaluation.
    #[serde(deserialize_with = "lenient")]
    pub baselines: BTreeMap<String, f64>,
    #[serde(deserialize_with = "lenient")]
    pub baselines_iqr_s: BTreeMap<String, f64>,
    pub baselines_launches_per_eval: BTreeMap<String, u64>,
    pub comparison: Option<ComparisonRow>,
    pub roofline_fraction: Option<f64>,
    pub beats_roofline: Option<bool>,
    pub max_abs: Option<f64>,
    pub max_rel: Option<f64>,
    pub message: String,
    #[serde(deserialize_with = "lenient")]
    pub elapsed_s: f64,
    #[serde(deserialize_with = "lenient")]
    pub prepare_s: f64,
    #[serde(deserialize_with = "lenient")]
    pub compile_s: f64,
    #[serde(deserialize_with = "lenient")]
    pub split: Split,
    #[serde(deserialize_with = "lenient")]
    pub overhead_s: f64,
}

/// A candidate timed beside an incumbent on the same inputs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ComparisonRow {
    pub incumbent: String,
    #[serde(default, deserialize_with = "lenient")]
    pub incumbent_median_s: f64,
    pub verdict: Verdict,
    #[serde(default, deserialize_with = "lenient")]
    pub speedup: f64,
    #[serde(default)]
    pub rounds: u64,
}

impl From<&WorkloadResult> for WorkloadRow {
    fn from(r: &WorkloadResult) -> WorkloadRow {
        let t = r.timing.as_ref();
        WorkloadRow {
            workload: r.workload.clone(),
            status: Some(r.status),
            median_s: r.median_s(),
            iqr_s: t.map(|t| t.iqr_s),
            min_s: t.map(|t| t.min_s),
            noisy: t.map(|t| t.noisy),
            distinct_inputs: t.map(|t| t.distinct_inputs),
            sampled_checks: t.map(|t| t.sampled_checks),
            launches_per_eval: t.and_then(|t| t.launches_per_eval),
            baselines: r
                .baselines
                .iter()
                .map(|(k, t)| (k.clone(), t.median_s))
                .collect(),
            baselines_iqr_s: r
                .baselines
                .iter()
                .map(|(k, t)| (k.clone(), t.iqr_s))
                .collect(),
            baselines_launches_per_eval: r
                .baselines
                .iter()
                .filter_map(|(k, t)| t.launches_per_eval.map(|n| (k.clone(), n)))
                .collect(),
            comparison: r.comparison.as_ref().map(|c| ComparisonRow {
                incumbent: c.incumbent.clone(),
                incumbent_median_s: c.timing.median_s,
                verdict: c.verdict.verdict,
                speedup: c.verdict.speedup,
                rounds: c.verdict.rounds,
            }),
            roofline_fraction: r.roofline.as_ref().map(|f| f.fraction),
            beats_roofline: r.roofline.as_ref().map(|f| f.beats_roofline),
            max_abs: r.max_abs,
            max_rel: r.max_rel,
            message: r.message.clone(),
            elapsed_s: r.elapsed_s,
            prepare_s: r.prepare_s,
            compile_s: r.compile_s,
            split: r.split.clone(),
            overhead_s: r.overhead_s(),
        }
    }
}

impl RunResult {
    /// A stored result, read leniently: None where it is absent or not a result (a run in progress).
    pub fn from_stored(v: &Value) -> Option<RunResult> {
        if v.is_null() {
            return None;
        }
        serde_json::from_value(v.clone())
            .map_err(|e| tracing::warn!("a stored run result does not read: {e}"))
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A float serde wrote as `null` (NaN or infinite) costs that field, not the result; a result of
    /// before `held_out_checks` and `budget_unit` reads with them empty.
    #[test]
    fn a_stored_result_with_null_floats_or_missing_fields_still_reads() {
        let v = json!({
            "run_id": "r", "task": "t", "target": "cpu", "strategy": "tune", "status": "completed",
            "elapsed_s": null,
            "best": {"candidate": "h", "speedup_vs_baselines": {"numpy": null},
                     "workloads": [{"workload": "w", "status": "passed", "elapsed_s": null, "median_s": null,
                                    "baselines": {"numpy": null}, "split": {"kernel_s": null}}]},
        });
        let r = RunResult::from_stored(&v).expect("reads");
        assert_eq!(r.held_out_checks, 0);
        assert_eq!(r.budget_unit, BudgetUnit::Evaluations);
        let best = r.best.unwrap();
        assert_eq!(best.workloads[0].workload, "w");
        assert_eq!(best.workloads[0].elapsed_s, 0.0);
        assert!(best.workloads[0].baselines.is_empty());
        assert!(RunResult::from_stored(&json!({"run_id": "r"})).is_none());
    }
}
