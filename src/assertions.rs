//! Expert-kernel properties (`knowledge/assertions.toml`) checked on a candidate: statically, by the
//! regexes each assertion carries, on the candidate's own source; dynamically, where the evaluation's
//! measurements decide it (causal vs non-causal time, roofline fraction, speed against a baseline,
//! correctness on the awkward shapes). The findings are part of `ksearch eval --json` and of the evidence
//! the world model reads after a cycle, so a missing property becomes the next hypothesis.

use crate::candidate::Candidate;
use crate::eval::{Status, WorkloadResult};
use crate::knowledge::Assertion;
use crate::task::Task;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Finding {
    pub id: String,
    pub severity: String,
    pub property: String,
    /// `static` (the source) or `dynamic` (the measurements).
    pub kind: &'static str,
    pub holds: bool,
    /// What was looked at, with numbers for dynamic checks.
    pub detail: String,
}

/// Every finding that can be decided for `cand` of `task` (whose `family` selects the assertions);
/// `results` may be empty (static checks only).
pub fn assess(task: &Task, cand: &Candidate, results: &[WorkloadResult]) -> Vec<Finding> {
    let Some(family) = task.toml.family.as_deref() else {
        return Vec::new();
    };
    let source: String = cand.files.values().cloned().collect::<Vec<_>>().join("\n");
    let mut out = Vec::new();
    for a in crate::knowledge::get()
        .assertions
        .iter()
        .filter(|a| a.family == family && !task.toml.not_applicable.contains(&a.id))
    {
        if let Some(f) = static_check(a, &source) {
            out.push(f);
        }
        if let Some((holds, detail)) = dynamic_check(&a.id, task, results) {
            out.push(finding(a, "dynamic", holds, detail));
        }
    }
    out
}

/// One line per finding that does not hold, for prompts (empty when every decided property holds).
pub fn missing_text(findings: &[Finding]) -> String {
    findings
        .iter()
        .filter(|f| !f.holds)
        .map(|f| {
            format!(
                "- {} ({}, {}): {} — {}",
                f.id, f.kind, f.severity, f.property, f.detail
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn finding(a: &Assertion, kind: &'static str, holds: bool, detail: String) -> Finding {
    let severity = a
        .rest
        .get("severity")
        .and_then(|v| v.as_str())
        .unwrap_or("info")
        .to_string();
    Finding {
        id: a.id.clone(),
        severity,
        property: a.property.clone(),
        kind,
        holds,
        detail,
    }
}

fn patterns(t: &toml::Table, key: &str) -> Vec<regex::Regex> {
    t.get(key)
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .filter_map(|p| p.as_str())
        // The knowledge tests compile every pattern, so a bad one cannot ship.
        .filter_map(|p| regex::Regex::new(p).ok())
        .collect()
}

fn static_check(a: &Assertion, source: &str) -> Option<Finding> {
    let check = a.rest.get("static_check")?.as_table()?;
    let (all, any, none) = (
        patterns(check, "patterns_all"),
        patterns(check, "patterns_any"),
        patterns(check, "patterns_none"),
    );
    if all.is_empty() && any.is_empty() && none.is_empty() {
        return None; // description-only: for the model to review, not for a regex
    }
    let mut why = Vec::new();
    if let Some(p) = all.iter().find(|p| !p.is_match(source)) {
        why.push(format!("no match for `{p}`"));
    }
    if !any.is_empty() && !any.iter().any(|p| p.is_match(source)) {
        why.push("none of its alternative patterns matches".to_string());
    }
    if let Some(p) = none.iter().find(|p| p.is_match(source)) {
        why.push(format!("`{p}` matches"));
    }
    let description = check
        .get("description")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    let heuristic = check
        .get("heuristic")
        .and_then(|v| v.as_bool())
        .unwrap_or(true);
    let detail = if why.is_empty() {
        format!("source has it: {description}")
    } else {
        format!(
            "{}: {}{}",
            description,
            why.join("; "),
            if heuristic { " (a heuristic)" } else { "" }
        )
    };
    Some(finding(a, "static", why.is_empty(), detail))
}

struct Measured<'a> {
    name: &'a str,
    dims: &'a BTreeMap<String, i64>,
    types: &'a BTreeMap<String, String>,
    r: &'a WorkloadResult,
}

impl Measured<'_> {
    fn dim(&self, d: &str) -> Option<i64> {
        self.dims.get(d).copied()
    }
    fn time(&self) -> Option<f64> {
        self.r.median_s()
    }
    fn fraction(&self) -> Option<f64> {
        self.r.roofline.as_ref().map(|f| f.fraction)
    }
    /// The candidate's speed relative to the fastest baseline (> 1: faster).
    fn vs_best_baseline(&self) -> Option<f64> {
        let t = self.time()?;
        let b = self
            .r
            .baselines
            .values()
            .map(|b| b.median_s)
            .fold(f64::INFINITY, f64::min);
        b.is_finite().then(|| b / t)
    }
    fn vs_slowest_baseline(&self) -> Option<f64> {
        let t = self.time()?;
        let b = self
            .r
            .baselines
            .values()
            .map(|b| b.median_s)
            .fold(0.0, f64::max);
        (b > 0.0).then(|| b / t)
    }
}

/// The assertions whose `dynamic_check` the evaluation's own numbers can decide; None when the task's
/// workloads or the results cannot say (e.g. no causal/non-causal pair).
fn dynamic_check(id: &str, task: &Task, results: &[WorkloadResult]) -> Option<(bool, String)> {
    let measured: Vec<Measured> = results
        .iter()
        .filter(|r| r.status == Status::Passed)
        .filter_map(|r| {
            let w = task.toml.workload.iter().find(|w| w.name == r.workload)?;
            Some(Measured {
                name: &w.name,
                dims: &w.dims,
                types: &w.types,
                r,
            })
        })
        .collect();
    let all_passed = !results.is_empty() && results.iter().all(|r| r.status == Status::Passed);
    let worst = |xs: Vec<(f64, String)>, holds: &dyn Fn(f64) -> bool, what: &str| {
        let (v, name) = xs.into_iter().min_by(|a, b| a.0.total_cmp(&b.0))?;
        Some((holds(v), format!("{what} {v:.2} on `{name}`")))
    };
    match id {
        "attn_causal_skip" => {
            // Time per (query, key) pair, causal against non-causal, on workloads alike in everything
            // but the lengths and the mask; skipping the blocks above the diagonal makes it about 0.5.
            let per_pair = |m: &Measured| Some(m.time()? / (m.dim("Tq")? * m.dim("Tk")?) as f64);
            let alike = |a: &Measured, b: &Measured| {
                ["B", "Hq", "Hkv", "D"].iter().all(|d| a.dim(d) == b.dim(d)) && a.types == b.types
            };
            let long = |m: &&Measured| m.dim("Tq") >= Some(2048);
            let mut ratios = Vec::new();
            for c in measured
                .iter()
                .filter(long)
                .filter(|m| m.dim("CAUSAL") == Some(1))
            {
                for n in measured
                    .iter()
                    .filter(long)
                    .filter(|m| m.dim("CAUSAL") == Some(0) && alike(c, m))
                {
                    if let (Some(pc), Some(pn)) = (per_pair(c), per_pair(n)) {
                        ratios.push((pc / pn, format!("`{}` vs `{}`", c.name, n.name)));
                    }
                }
            }
            let (v, which) = ratios.into_iter().max_by(|a, b| a.0.total_cmp(&b.0))?;
            Some((
                v <= 0.65,
                format!(
                    "causal / non-causal time per (query, key) pair {v:.2} ({which}); expert <= 0.65"
                ),
            ))
        }
        "attn_decode_kv_read_once" => worst(
            measured
                .iter()
                .filter(|m| m.dim("Tq") == Some(1) && m.dim("Tk") >= Some(4096))
                .filter_map(|m| Some((m.fraction()?, m.name.to_string())))
                .collect(),
            &|v| v >= 0.7,
            "roofline fraction (expert >= 0.70):",
        ),
        "attn_mma_tiles" => worst(
            measured
                .iter()
                .filter(|m| m.dim("Tq") >= Some(1024) && m.dim("D") == Some(128))
                .filter_map(|m| Some((m.vs_best_baseline()?, m.name.to_string())))
                .collect(),
            &|v| v >= 0.5,
            "speed vs the fastest baseline (expert >= 0.50):",
        ),
        "scan_associative_combine" => worst(
            measured
                .iter()
                .filter(|m| m.dim("L") >= Some(4096))
                .filter_map(|m| Some((m.vs_slowest_baseline()?, m.name.to_string())))
                .collect(),
            &|v| v >= 10.0,
            "speedup over the per-token baseline (expert >= 10):",
        ),
        "scan_enough_parallelism" | "red_single_pass" | "mm_matrix_units" => {
            // Judged on the largest workload, where launch overheads matter least.
            let m = measured
                .iter()
                .max_by_key(|m| m.dims.values().product::<i64>())?;
            let f = m.fraction()?;
            let need = match id {
                "red_single_pass" => 0.7,
                _ => 0.5,
            };
            Some((
                f >= need,
                format!(
                    "roofline fraction {f:.2} on `{}` (expert >= {need})",
                    m.name
                ),
            ))
        }
        "scan_chunk_carry"
        | "red_barrier_uniform"
        | "mm_edge_handling"
        | "red_fp32_accumulate"
        | "mm_float_accumulate"
        | "red_atomics_after_simd" => (!results.is_empty()).then(|| (
            all_passed,
            if all_passed {
                format!(
                    "all {} evaluated workloads passed (odd sizes and the run-twice check included)",
                    results.len()
                )
            } else {
                "a workload failed its checks".to_string()
            },
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::{RooflineFigure, Timing};
    use std::path::Path;

    fn task(name: &str) -> Task {
        Task::load(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tasks")
                .join(name),
        )
        .unwrap()
    }

    fn seed(task: &str, target: &str, name: &str) -> Candidate {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tasks")
            .join(task)
            .join("seeds")
            .join(target)
            .join(name);
        Candidate::load(&dir).unwrap()
    }

    /// A task's `not_applicable` properties (a decode task's causal skip) name properties of its family, and are
    /// neither judged on its candidates nor put in its prompts; the family's others still are.
    #[test]
    fn properties_a_task_marks_not_applicable_are_neither_judged_nor_prompted() {
        let tasks = Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks");
        let k = crate::knowledge::get();
        for dir in std::fs::read_dir(&tasks)
            .unwrap()
            .map(|e| e.unwrap().path())
        {
            let t = Task::load_spec(&dir).unwrap();
            for id in &t.toml.not_applicable {
                assert!(
                    k.assertions
                        .iter()
                        .any(|a| &a.id == id && Some(a.family.as_str()) == t.toml.family.as_deref()),
                    "{}: not_applicable `{id}` is no property of its family",
                    dir.display()
                );
            }
        }
        let t = task("gqa-paged-decode");
        assert!(
            t.toml
                .not_applicable
                .contains(&"attn_causal_skip".to_string())
        );
        let ids: Vec<String> = assess(&t, &seed("gqa-paged-decode", "cuda", "expert"), &[])
            .into_iter()
            .map(|f| f.id)
            .collect();
        assert!(ids.iter().any(|i| i == "attn_online_softmax"), "{ids:?}");
        assert!(
            ids.iter().all(|i| !t.toml.not_applicable.contains(i)),
            "{ids:?}"
        );
        let prompt = crate::knowledge::prompt_section(
            crate::target::Target::Cuda,
            Some("attention"),
            &t.toml.not_applicable,
        );
        let property = |id: &str| {
            k.assertions
                .iter()
                .find(|a| a.id == id)
                .unwrap()
                .property
                .clone()
        };
        assert!(
            prompt.contains(&property("attn_online_softmax")),
            "{prompt}"
        );
        assert!(!prompt.contains(&property("attn_causal_skip")), "{prompt}");
    }

    fn result(workload: &str, status: Status, time_s: f64, fraction: f64) -> WorkloadResult {
        let t = Timing {
            median_s: time_s,
            iqr_s: 0.0,
            min_s: time_s,
            max_s: time_s,
            samples: 5,
            reps: 1,
            ..Default::default()
        };
        WorkloadResult {
            workload: workload.into(),
            status,
            message: String::new(),
            max_abs: None,
            max_rel: None,
            timing: Some(t.clone()),
            baselines: [(
                "slow".to_string(),
                Timing {
                    median_s: time_s * 20.0,
                    ..t
                },
            )]
            .into(),
            roofline: Some(RooflineFigure {
                bytes: 1.0,
                flops: 1.0,
                floor_s: time_s * fraction,
                fraction,
                beats_roofline: false,
                implausible: false,
            }),
            checks: serde_json::Value::Null,
            compile: serde_json::Value::Null,
            metal_sources: vec![],
            seeds: vec![1],
            elapsed_s: time_s,
            ..Default::default()
        }
    }

    fn get<'a>(fs: &'a [Finding], id: &str, kind: &str) -> Option<&'a Finding> {
        fs.iter().find(|f| f.id == id && f.kind == kind)
    }

    #[test]
    fn static_checks_tell_the_expert_scan_from_the_naive_one() {
        let t = task("mamba-scan");
        let expert = assess(&t, &seed("mamba-scan", "mlx-cuda", "expert"), &[]);
        let naive = assess(&t, &seed("mamba-scan", "mlx-cuda", "naive"), &[]);
        assert!(!expert.is_empty() && expert.iter().all(|f| f.kind == "static"));
        let differs: Vec<&str> = expert
            .iter()
            .filter(|e| e.holds && get(&naive, &e.id, "static").is_some_and(|n| !n.holds))
            .map(|e| e.id.as_str())
            .collect();
        assert!(
            !differs.is_empty(),
            "no property separates them:\nexpert {expert:#?}\nnaive {naive:#?}"
        );
        assert!(!missing_text(&naive).is_empty());
    }

    #[test]
    fn causal_skipping_is_judged_per_query_key_pair() {
        let t = task("attention");
        let c = seed("attention", "mlx-cuda", "naive");
        // prefill_causal_4k has 4x the pairs of prefill_2k: at 2x the time, half the work per pair.
        let skips = [
            result("prefill_causal_4k", Status::Passed, 2e-3, 0.5),
            result("prefill_2k", Status::Passed, 1e-3, 0.5),
        ];
        let f = assess(&t, &c, &skips);
        let skip = get(&f, "attn_causal_skip", "dynamic").expect("a causal/non-causal pair");
        assert!(skip.holds, "{skip:?}");
        assert!(skip.detail.contains("0.50"), "{}", skip.detail);
        let masks_all = [
            result("prefill_causal_4k", Status::Passed, 4e-3, 0.5),
            result("prefill_2k", Status::Passed, 1e-3, 0.5),
        ];
        let f = assess(&t, &c, &masks_all);
        assert!(!get(&f, "attn_causal_skip", "dynamic").unwrap().holds);
        // Decode read at 30% of the roofline: the K/V-once property is reported missing.
        let f = assess(
            &t,
            &c,
            &[result("decode_gqa_8k", Status::Passed, 1e-4, 0.3)],
        );
        let once = get(&f, "attn_decode_kv_read_once", "dynamic").unwrap();
        assert!(!once.holds && once.detail.contains("0.30"), "{once:?}");
    }

    #[test]
    fn correctness_properties_need_every_workload_to_pass() {
        let t = task("softmax");
        let c = seed("softmax", "mlx-cuda", "naive");
        let names: Vec<String> = t.toml.workload.iter().map(|w| w.name.clone()).collect();
        let ok: Vec<WorkloadResult> = names
            .iter()
            .map(|n| result(n, Status::Passed, 1e-4, 0.8))
            .collect();
        let f = assess(&t, &c, &ok);
        assert!(get(&f, "red_barrier_uniform", "dynamic").unwrap().holds);
        assert!(get(&f, "red_single_pass", "dynamic").unwrap().holds);
        let mut bad = ok.clone();
        bad[0].status = Status::Wrong;
        let f = assess(&t, &c, &bad);
        assert!(!get(&f, "red_barrier_uniform", "dynamic").unwrap().holds);
        // The CPU tasks have a family too, but no results means no dynamic finding.
        assert!(assess(&t, &c, &[]).iter().all(|f| f.kind == "static"));
    }
}
