//! The worker protocol, typed (`docs/formats.md` §3): what the Rust side sends in a `run` request and what
//! it reads back. The Python side's definition is `python/ksearch_worker/wire.py`; a test on each side keeps
//! both in step with the document's field tables.

use crate::candidate::{ResolvedBuffer, ResolvedLaunch};
use crate::task::ResolvedWorkload;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// A `run` request, fully resolved (the worker evaluates no expression).
#[derive(Debug, Clone, Serialize)]
pub struct RunRequest<'a> {
    pub key: &'a str,
    pub workload: &'a ResolvedWorkload,
    pub buffers: &'a [ResolvedBuffer],
    pub launches: &'a [ResolvedLaunch],
    pub inputs: InputSeeds,
    pub timing: &'a TimingSettings,
    pub baselines: &'a [String],
    /// A compiled candidate to time side by side with this one, on the same inputs, for a verdict.
    pub incumbent: Option<BuildRef<'a>>,
}

/// A `precompile` request: a build's kernel modules for several workloads at once, before its first `run`
/// (mlx-cuda: each compiled in the jail, all in parallel; a module that does not compile fails the `run`
/// that launches it).
#[derive(Debug, Clone, Serialize)]
pub struct PrecompileRequest<'a> {
    pub key: &'a str,
    pub workloads: Vec<PrecompileWorkload<'a>>,
}

/// One workload of a `precompile` request: what its `run` request would say of the build.
#[derive(Debug, Clone, Serialize)]
pub struct PrecompileWorkload<'a> {
    pub workload: &'a ResolvedWorkload,
    pub buffers: &'a [ResolvedBuffer],
    pub launches: &'a [ResolvedLaunch],
}

/// A `precompile` result.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct PrecompileReply {
    #[serde(default)]
    pub modules: u32,
    #[serde(default)]
    pub compiled: u32,
    #[serde(default)]
    pub seconds: f64,
    #[serde(default)]
    pub longest_s: f64,
    #[serde(default)]
    pub in_worker: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_error: Option<String>,
}

/// A `prepare` request: the run's own work for a workload (references, timing supply, baselines), under a
/// deadline of its own, before a candidate meets it. Sent before every `run`; cheap once done.
#[derive(Debug, Clone, Serialize)]
pub struct PrepareRequest<'a> {
    pub workload: &'a ResolvedWorkload,
    pub inputs: PoolSeeds,
    pub timing: &'a TimingSettings,
    pub baselines: &'a [String],
    /// Time the baselines now even if the worker has their times from earlier in the run.
    pub retime_baselines: bool,
}

/// A workload's whole pool of reference sets and its timing supply.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct PoolSeeds {
    pub pool: String,
    pub seeds: Vec<u64>,
    pub supply: u64,
}

/// A `prepare` result.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct PrepareReply {
    #[serde(default)]
    pub baselines: BTreeMap<String, Timing>,
    #[serde(default)]
    pub baselines_timed_now: bool,
    /// Baselines that cannot run on this machine, with why (a library they need is missing).
    #[serde(default)]
    pub baselines_unavailable: BTreeMap<String, String>,
    #[serde(default)]
    pub split: Split,
}

/// Which input sets a candidate meets, by seed: reference sets (inputs and the reference's outputs, made
/// once per run and shared by every candidate, in roles drawn per candidate) and the supply of inputs for
/// timed calls.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct InputSeeds {
    /// The task's fingerprint: reference outputs are cached under it, so a changed task computes them again.
    pub pool: String,
    /// Checks before timing; the first set runs twice (a difference is a race).
    pub checks: Vec<u64>,
    /// The set written into timed buffers after timing.
    pub recheck: u64,
    /// Sets placed among the timed calls, whose outputs are compared after timing.
    pub timed_checks: Vec<u64>,
    /// Base seed of the supply sets (inputs without outputs) of the timed calls.
    pub supply: u64,
    /// Where the timed-check sets go among the timed calls.
    pub order: u64,
}

/// Another compiled build named by a run request (the incumbent).
#[derive(Debug, Clone, Serialize)]
pub struct BuildRef<'a> {
    pub key: String,
    pub launches: &'a [ResolvedLaunch],
    pub buffers: &'a [ResolvedBuffer],
}

/// The device a worker measures on, from its hello's `hardware` (`docs/formats.md` §3): the fields
/// ksearch reads are typed; the rest, which differs per target (ISA and caches on a CPU, device
/// attributes on a GPU), is kept as the worker gave it. A field of an unexpected type reads as absent.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Hardware {
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub kind: Option<String>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub name: Option<String>,
    /// CPU cores (CPU targets).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub cores: Option<u64>,
    /// Measured peaks, the roofline's ceilings.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub peak_bandwidth_gbs: Option<f64>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub peak_gflops: Option<f64>,
    /// What the peaks cover: `one core` or `whole device`.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub peak_scope: Option<String>,
    #[serde(flatten)]
    pub details: serde_json::Map<String, Value>,
}

impl Hardware {
    /// The hardware a worker's hello describes; empty when it describes none.
    pub fn from_hello(hello: &Value) -> Hardware {
        serde_json::from_value(hello["hardware"].clone()).unwrap_or_default()
    }
}

/// A field that does not read (of the wrong type, or a float serde wrote as `null` for being NaN or
/// infinite) reads as its default instead of failing the whole record: the worker's hardware, and run
/// results stored by older versions (`run_result`).
pub(crate) fn lenient<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned + Default,
{
    let v = Value::deserialize(d)?;
    Ok(serde_json::from_value(v).unwrap_or_default())
}

/// How a run request times (`timing`); `enabled: false` checks only.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TimingSettings {
    pub enabled: bool,
    pub warmup_s: f64,
    pub min_samples: u64,
    pub max_samples: u64,
    /// Seconds of sampling per workload (past `min_samples`).
    pub budget_s: f64,
    pub min_sample_s: f64,
    /// Spread (IQR over median) above which a figure is flagged `noisy`.
    pub noisy_iqr: f64,
    /// Standard errors a paired difference must exceed to be called faster or slower.
    pub verdict_z: f64,
    /// ... and the relative difference (of the median log-ratio) it must exceed: below it, what tells two
    /// entries apart may be where each runs rather than its code.
    #[serde(default = "TimingSettings::default_min_effect")]
    pub min_effect: f64,
    /// A comparison still within noise goes on to this many rounds, or this many seconds.
    pub max_rounds: u64,
    pub compare_budget_s: f64,
    /// Bytes of timed inputs the worker may hold for one workload (beyond them, inputs repeat).
    pub supply_bytes: u64,
    /// MLX: also report the old clock's figures (independent calls, one call alone), named as such.
    #[serde(default)]
    pub throughput: bool,
}

impl TimingSettings {
    /// Defaults per target: the CPU's calls are cheap and its machine shared, so its budget is short; an
    /// MLX evaluation carries a fixed cost of tens of microseconds and the GPU has memory for more inputs.
    pub fn for_target(gpu: bool) -> TimingSettings {
        if gpu {
            TimingSettings {
                enabled: true,
                // The candidate's calls ran in its checks and in the probe that sets the chain's length just
                // before (modules loaded, memory touched, one evaluation lasting about 2 ms): the warm-up only
                // sizes the samples, from its two batches. Kept going for 20 ms for each of three to five
                // entries it took 0.06 s of every workload's timing on the H200; without, the same budget
                // takes a fifth more rounds (bench/results/h200-adversarial-and-cost-20261204-evening.json).
                warmup_s: 0.0,
                min_samples: 5,
                max_samples: 25,
                budget_s: 0.3,
                min_sample_s: 0.0002,
                noisy_iqr: 0.1,
                verdict_z: 3.0,
                min_effect: TimingSettings::default_min_effect(),
                max_rounds: 40,
                compare_budget_s: 0.6,
                supply_bytes: 1 << 30,
                throughput: false,
            }
        } else {
            TimingSettings {
                enabled: true,
                warmup_s: 0.02,
                min_samples: 5,
                max_samples: 15,
                budget_s: 0.15,
                min_sample_s: 0.0002,
                noisy_iqr: 0.1,
                verdict_z: 3.0,
                // Identical code in two kernel hosts differed by up to 5% here, steadily, under load
                // (`bench/verdict_noise.sh`): a smaller difference says nothing about the code.
                min_effect: 0.05,
                max_rounds: 30,
                compare_budget_s: 0.3,
                supply_bytes: 256 << 20,
                throughput: false,
            }
        }
    }

    /// The smallest difference a verdict acts on where nothing else is known (half a percent).
    pub fn default_min_effect() -> f64 {
        0.005
    }

    /// Checks only, no timing.
    pub fn disabled() -> TimingSettings {
        TimingSettings {
            enabled: false,
            ..TimingSettings::for_target(false)
        }
    }
}

/// One timed figure. On MLX targets a call is one of `launches_per_eval` dependent calls of an
/// evaluation, less the cost of the links between them (`link_s`); on the CPU target a sample is one
/// request to the kernel host, less the round trip of a host that never ran candidate code (`rtt_s`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Timing {
    pub median_s: f64,
    /// Interquartile range of the samples' per-call times.
    pub iqr_s: f64,
    /// The fastest sample.
    pub min_s: f64,
    pub max_s: f64,
    pub samples: u64,
    pub reps: u64,
    /// Timed calls, and how many distinct input sets they ran on (equal: no call met inputs twice).
    #[serde(default)]
    pub calls: u64,
    #[serde(default)]
    pub distinct_inputs: u64,
    /// The spread exceeds the run's threshold: ranked with care.
    #[serde(default)]
    pub noisy: bool,
    /// Timed calls compared with the reference after timing.
    #[serde(default)]
    pub sampled_checks: u64,
    /// MLX: dependent calls per evaluation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launches_per_eval: Option<u64>,
    /// MLX: the cost of one link, taken off each call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_s: Option<f64>,
    /// CPU: the trusted round trip taken off each sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_s: Option<f64>,
    /// A baseline's time measured earlier in the run (baselines are timed once per run).
    #[serde(default)]
    pub cached: bool,
    /// MLX, when asked: per call, of independent calls in one evaluation (a throughput, not a latency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub independent_s: Option<f64>,
    /// MLX, when asked: one call per evaluation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alone_s: Option<f64>,
}

impl Timing {
    /// IQR over median: the figure's relative spread.
    pub fn spread(&self) -> f64 {
        if self.median_s > 0.0 {
            self.iqr_s / self.median_s
        } else {
            0.0
        }
    }
}

/// Faster, slower or within noise: a challenger against the incumbent it was timed beside.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum Verdict {
    #[serde(rename = "faster")]
    Faster,
    #[serde(rename = "slower")]
    Slower,
    #[serde(rename = "within noise")]
    WithinNoise,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Faster => "faster",
            Verdict::Slower => "slower",
            Verdict::WithinNoise => "within noise",
        }
    }
}

/// The verdict of one workload, from the per-round ratios of the pair.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PairVerdict {
    pub verdict: Verdict,
    /// Incumbent time over challenger time (the median of the rounds).
    pub speedup: f64,
    /// The median log-ratio in standard errors.
    pub z: f64,
    pub rounds: u64,
    pub log_ratio_iqr: f64,
    /// Decided, or known to lie within the equal band (3%, or the target's `min_effect` when larger).
    pub settled: bool,
}

/// Where a `run` request's time went (seconds). `kernel_s` is what the clock saw of candidate calls;
/// `reference_s` and `draw_s` are the run's (references and inputs made once per run); `overhead_s` is
/// the evaluator's own: everything else.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Split {
    #[serde(default)]
    pub kernel_s: f64,
    #[serde(default)]
    pub setup_s: f64,
    #[serde(default)]
    pub checks_s: f64,
    #[serde(default)]
    pub timing_s: f64,
    #[serde(default)]
    pub recheck_s: f64,
    #[serde(default)]
    pub baselines_s: f64,
    #[serde(default)]
    pub warm_s: f64,
    #[serde(default)]
    pub reference_s: f64,
    #[serde(default)]
    pub draw_s: f64,
    #[serde(default)]
    pub total_s: f64,
    #[serde(default)]
    pub overhead_s: f64,
}

/// A `run` result. Statuses the worker gives: `passed`, `wrong`, `compile_error`, `unavailable`,
/// `invalid`, `crash`, `error`.
#[derive(Debug, Clone, Deserialize)]
pub struct RunReply {
    pub status: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub checks: Value,
    #[serde(default)]
    pub timing: Option<Timing>,
    #[serde(default)]
    pub incumbent: Option<Timing>,
    #[serde(default)]
    pub verdict: Option<PairVerdict>,
    #[serde(default)]
    pub baselines: BTreeMap<String, Timing>,
    #[serde(default)]
    pub split: Split,
    #[serde(default)]
    pub metal_sources: Vec<String>,
    #[serde(default)]
    pub restart_worker: bool,
}

/// The error kinds a worker reply may carry (`error.kind`).
pub const ERROR_KINDS: &[&str] = &[
    "bad_request",
    "bad_task",
    "not_compiled",
    "unsupported_dtype",
    "compiler_missing",
    "backend_unavailable",
    "device_lost",
    "internal",
];

/// The statuses of a `run` result.
pub const RUN_STATUSES: &[&str] = &[
    "passed",
    "wrong",
    "compile_error",
    "unavailable",
    "invalid",
    "crash",
    "error",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardware_reads_its_typed_fields_leniently_and_keeps_the_rest() {
        let hello = serde_json::json!({"hardware": {
            "kind": "cpu", "name": "AMD EPYC", "cores": "eight", "peak_gflops": 117.3,
            "isa": ["avx2", "fma"], "caches": {"l1d": 32768}
        }});
        let hw = Hardware::from_hello(&hello);
        assert_eq!(hw.name.as_deref(), Some("AMD EPYC"));
        assert_eq!(hw.cores, None, "a field of the wrong type reads as absent");
        assert_eq!(hw.peak_gflops, Some(117.3));
        assert_eq!(hw.details["isa"], serde_json::json!(["avx2", "fma"]));
        let back = serde_json::to_value(&hw).unwrap();
        assert_eq!(back["caches"]["l1d"], 32768);
        assert_eq!(back["kind"], "cpu");
        assert_eq!(
            Hardware::from_hello(&serde_json::Value::Null),
            Hardware::default()
        );
    }

    /// Field names of a serialisable struct, from a value with every optional field set.
    fn fields(v: Value) -> Vec<String> {
        v.as_object().unwrap().keys().cloned().collect()
    }

    /// The field names listed in the table under a `#### heading` of docs/formats.md (first column).
    fn documented(heading: &str) -> Vec<String> {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/formats.md"))
            .unwrap();
        let start = doc
            .find(&format!("#### {heading}\n"))
            .unwrap_or_else(|| panic!("docs/formats.md has no `#### {heading}`"));
        doc[start..]
            .lines()
            .skip(1)
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .filter_map(|l| l.split('|').nth(1))
            .map(|c| c.trim().trim_matches('`').to_string())
            .collect()
    }

    fn same(heading: &str, mut code: Vec<String>) {
        let mut doc = documented(heading);
        code.sort();
        doc.sort();
        assert_eq!(
            code, doc,
            "docs/formats.md `{heading}` and src/protocol.rs disagree"
        );
    }

    #[test]
    fn the_document_lists_every_field_of_the_protocol() {
        let w = ResolvedWorkload {
            name: "w".into(),
            dims: Default::default(),
            shapes: Default::default(),
            dtypes: Default::default(),
            held_out: false,
        };
        let timing = TimingSettings::for_target(false);
        let req = RunRequest {
            key: "k",
            workload: &w,
            buffers: &[],
            launches: &[],
            inputs: InputSeeds::default(),
            timing: &timing,
            baselines: &[],
            incumbent: Some(BuildRef {
                key: "i".into(),
                launches: &[],
                buffers: &[],
            }),
        };
        same("run request", fields(serde_json::to_value(&req).unwrap()));
        let prep = PrepareRequest {
            workload: &w,
            inputs: PoolSeeds::default(),
            timing: &timing,
            baselines: &[],
            retime_baselines: false,
        };
        same(
            "prepare request",
            fields(serde_json::to_value(&prep).unwrap()),
        );
        let pre = PrecompileRequest {
            key: "k",
            workloads: vec![PrecompileWorkload {
                workload: &w,
                buffers: &[],
                launches: &[],
            }],
        };
        same(
            "precompile request",
            fields(serde_json::to_value(&pre).unwrap()),
        );
        let got = PrecompileReply {
            compile_error: Some(String::new()),
            ..Default::default()
        };
        same(
            "precompile result",
            fields(serde_json::to_value(got).unwrap()),
        );
        same(
            "prepare.inputs",
            fields(serde_json::to_value(PoolSeeds::default()).unwrap()),
        );
        same(
            "prepare result",
            fields(serde_json::to_value(PrepareReply::default()).unwrap()),
        );
        same(
            "run.inputs",
            fields(serde_json::to_value(InputSeeds::default()).unwrap()),
        );
        same("run.timing", fields(serde_json::to_value(&timing).unwrap()));
        let full = Timing {
            launches_per_eval: Some(1),
            link_s: Some(0.0),
            rtt_s: Some(0.0),
            independent_s: Some(0.0),
            alone_s: Some(0.0),
            ..Default::default()
        };
        same("timing result", fields(serde_json::to_value(full).unwrap()));
        same(
            "split",
            fields(serde_json::to_value(Split::default()).unwrap()),
        );
        let v = PairVerdict {
            verdict: Verdict::Faster,
            speedup: 1.0,
            z: 0.0,
            rounds: 1,
            log_ratio_iqr: 0.0,
            settled: true,
        };
        same("verdict", fields(serde_json::to_value(v).unwrap()));
        same(
            "run result",
            [
                "status",
                "message",
                "checks",
                "timing",
                "incumbent",
                "verdict",
                "baselines",
                "split",
                "metal_sources",
                "restart_worker",
            ]
            .map(String::from)
            .to_vec(),
        );
        same(
            "run statuses",
            RUN_STATUSES.iter().map(|s| s.to_string()).collect(),
        );
        same(
            "error kinds",
            ERROR_KINDS.iter().map(|s| s.to_string()).collect(),
        );
    }

    #[test]
    fn a_reply_reads_every_documented_result_field() {
        // The `run result` list above is the struct's own: a reply carrying each field parses into it.
        let reply: RunReply = serde_json::from_value(serde_json::json!({
            "status": "passed", "message": "m", "checks": [], "timing": {"median_s": 1.0, "iqr_s": 0.1,
            "min_s": 0.9, "max_s": 1.2, "samples": 5, "reps": 2}, "incumbent": null, "verdict": {"verdict":
            "within noise", "speedup": 1.0, "z": 0.1, "rounds": 5, "log_ratio_iqr": 0.01, "settled": false},
            "baselines": {}, "split": {"total_s": 1.0}, "metal_sources": [],
            "restart_worker": false
        }))
        .unwrap();
        assert_eq!(reply.verdict.unwrap().verdict, Verdict::WithinNoise);
        assert_eq!(reply.timing.unwrap().samples, 5);
    }
}
