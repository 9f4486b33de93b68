//! `ksearch report RUN --html FILE`: one run as one self-contained HTML page (inline CSS and SVG, no script,
//! nothing fetched), to attach to a pull request or a paper: what was measured on which target and
//! hardware, the best time against evaluations and wall time, every evaluation with its per-workload
//! times, the best candidate against every baseline and the roofline, the world-model tree, the best
//! candidate's changes from its parent, and the LLM calls with their tokens and cost.
//!
//! Everything shown comes from the store, read-only. Candidate sources, node titles and LLM-written text are
//! written by an attacker as far as a reader's browser is concerned: the template escapes every value
//! (minijinja's HTML auto-escaping), the charts escape their own text (`svg::esc`), and the input secret
//! and LLM keys are never read (the store keeps no key).

use super::svg::{self, Bars, Chart, Series, Style, TreeNode};
use crate::eval::{Status, WorkloadResult};
use crate::run_result::Phase;
use crate::store::{Attempt, Store};
use crate::units::fmt_time;
use anyhow::{Context, Result, anyhow};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

const TEMPLATE: &str = include_str!("../../templates/report.html");
const CSS: &str = include_str!("../../templates/report.css");

/// The self-contained page for `run_id` (`report --html`).
pub fn render(store: &Store, run_id: &str) -> Result<String> {
    page(store, run_id, None, &[])
}

/// The same page served live by `ksearch serve`: its style and script from the server's assets, candidates
/// linked to their diffs, `mark` (the store's state it was drawn from) for the script to compare, and what a
/// running run's slots are doing `now` (`progress::read_live`).
pub fn render_live(
    store: &Store,
    run_id: &str,
    mark: &str,
    now: &[(String, String)],
) -> Result<String> {
    page(store, run_id, Some(mark), now)
}

fn page(
    store: &Store,
    run_id: &str,
    live: Option<&str>,
    now: &[(String, String)],
) -> Result<String> {
    let row = store
        .run(run_id)?
        .ok_or_else(|| anyhow!("no run `{run_id}` in {}", store.path().display()))?;
    let attempts = store.attempts(run_id, None)?;
    let evals = store.evaluations(run_id)?;
    let exchanges = store.exchanges(run_id)?;
    let result = row.result.as_ref();
    let hw = row.hardware();
    // (phase, candidate) -> workload -> result, as stored.
    let mut by_attempt: BTreeMap<(String, String), BTreeMap<String, WorkloadResult>> =
        BTreeMap::new();
    for (_, phase, cand, r) in &evals {
        by_attempt
            .entry((phase.to_string(), cand.clone()))
            .or_default()
            .insert(r.workload.clone(), r.clone());
    }
    let search: Vec<&Attempt> = attempts
        .iter()
        .filter(|a| a.phase == Phase::Search)
        .collect();
    let workloads: Vec<String> = {
        let mut seen = BTreeSet::new();
        let mut w = Vec::new();
        for (_, phase, _, r) in &evals {
            if *phase == Phase::Search && seen.insert(r.workload.clone()) {
                w.push(r.workload.clone());
            }
        }
        w
    };
    let best = result.and_then(|r| r.best.as_ref());
    let seed_time = result
        .and_then(|r| r.seed.as_ref())
        .and_then(|s| s.geomean_s);

    let ctx = json!({
        "css": CSS,
        "live": live.is_some(),
        "mark": live,
        "now": now.iter().map(|(slot, phase)| json!({"slot": slot, "phase": phase})).collect::<Vec<_>>(),
        "run": {
            "id": row.run_id, "task": row.task, "target": row.target, "strategy": row.strategy,
            "status": row.status.as_str(), "budget": row.budget,
            "rounds": result.and_then(|r| r.rounds),
            "evaluations": result.map(|r| r.evaluations as i64).unwrap_or(row.evaluations),
            "elapsed": result.map(|r| fmt_duration(r.elapsed_s)),
            "stopped": result.and_then(|r| r.stopped.clone()), "error": row.error,
            "llm": result.and_then(|r| r.llm.as_ref()).map(|l| l.spec.clone()),
            "devices": result.map(|r| r.devices.join(", ")).filter(|d| !d.is_empty()),
            "worker_restarts": result.map(|r| r.worker_restarts),
        },
        "measured_on": format!(
            "{} on {}",
            row.target,
            [hw.name.clone(), hw.kind.clone()].into_iter().flatten().next().unwrap_or_else(|| "hardware the worker did not name".into())
        ),
        "best_so_far": best_so_far(&search),
        "best": best.map(|b| json!({
            "candidate": b.candidate, "name": b.name,
            "geomean": fmt_time(b.geomean_s),
            "vs_seed": b.speedup_vs_seed.map(|x| format!("{x:.2}x")),
            "vs_baselines": b.speedup_vs_baselines.iter().map(|(k, v)| json!({"name": k, "x": format!("{v:.2}x")})).collect::<Vec<_>>(),
            "held_out_passed": b.held_out_passed,
            "params": b.params.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", "),
        })),
        "charts": {
            "progress": progress_chart(&search, seed_time, &by_attempt, false),
            "wall": progress_chart(&search, seed_time, &by_attempt, true),
            "workloads": best.and_then(workload_bars),
            "roofline": best.and_then(roofline_bars),
            "roofline_chart": best.and_then(|b| roofline_chart(&hw, &b.candidate, &evals)),
            "llm": llm_chart(&exchanges),
        },
        "workloads": workloads,
        "attempts": attempt_rows(&attempts, &by_attempt, &workloads),
        "baselines": baseline_rows(&evals, &workloads),
        "tree": tree_view(store, run_id)?,
        "diff": match best {
            Some(b) => candidate_diff(store, &attempts, &b.candidate)?,
            None => Value::Null,
        },
        "exchanges": exchange_rows(&exchanges),
    });
    let mut env = minijinja::Environment::new();
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
    env.add_template("report.html", TEMPLATE)
        .context("the report's template")?;
    env.get_template("report.html")?
        .render(minijinja::value::Serde(&ctx))
        .context("rendering the report")
}

fn fmt_duration(s: f64) -> String {
    if s >= 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else if s >= 60.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{s:.1} s")
    }
}

/// A run without a result yet (still going, or killed): its fastest search evaluation that passed so far.
fn best_so_far(search: &[&Attempt]) -> Value {
    let time = |a: &&&Attempt| {
        a.summary
            .as_ref()
            .filter(|s| s.passed)
            .and_then(|s| s.geomean_s)
    };
    search
        .iter()
        .filter(|a| time(a).is_some())
        .min_by(|a, b| {
            time(a)
                .partial_cmp(&time(b))
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .map(|a| json!({"candidate": a.candidate, "geomean": fmt_time(time(&a))}))
        .unwrap_or(Value::Null)
}

/// The geometric mean of (median - IQR/2, median + IQR/2) over an attempt's workloads: its spread.
fn spread(results: Option<&BTreeMap<String, WorkloadResult>>) -> Option<(f64, f64)> {
    let rs: Vec<&WorkloadResult> = results?.values().collect();
    let (mut lo, mut hi) = (0.0, 0.0);
    for r in &rs {
        let t = r.timing.as_ref()?;
        let half = t.iqr_s / 2.0;
        lo += (t.median_s - half).max(t.median_s * 1e-3).ln();
        hi += (t.median_s + half).ln();
    }
    let n = rs.len() as f64;
    (n > 0.0).then(|| ((lo / n).exp(), (hi / n).exp()))
}

/// Each search evaluation's time (its geometric mean over the feedback workloads, with its spread), the
/// best so far, and the seed's time, against the evaluation's number or (`wall`) the minutes since the run
/// began; failed evaluations marked on the axis.
fn progress_chart(
    search: &[&Attempt],
    seed_time: Option<f64>,
    by_attempt: &BTreeMap<(String, String), BTreeMap<String, WorkloadResult>>,
    wall: bool,
) -> Option<String> {
    let start = search
        .iter()
        .filter_map(|a| a.started_at)
        .reduce(f64::min)?;
    // Wall time in minutes, or in seconds for a run shorter than two minutes (whose minutes would all read 0.0).
    let span = search
        .iter()
        .filter_map(|a| a.finished_at)
        .fold(0.0, |m: f64, t| m.max(t - start));
    let unit = if span < 120.0 { 1.0 } else { 60.0 };
    let x_of = |a: &Attempt| -> Option<f64> {
        if wall {
            Some((a.finished_at? - start) / unit)
        } else {
            Some(a.seq as f64)
        }
    };
    let (mut dots, mut best, mut whiskers, mut marks) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut so_far = f64::INFINITY;
    // An evaluation still going is neither a point nor a failure yet.
    for a in search.iter().filter(|a| a.finished) {
        let Some(x) = x_of(a) else { continue };
        match a
            .summary
            .as_ref()
            .filter(|s| s.passed)
            .and_then(|s| s.geomean_s)
        {
            Some(t) => {
                dots.push((x, t));
                if let Some((lo, hi)) =
                    spread(by_attempt.get(&(Phase::Search.to_string(), a.candidate.clone())))
                {
                    whiskers.push((x, lo, hi));
                }
                if t < so_far {
                    so_far = t;
                    best.push((x, t));
                }
            }
            None => marks.push(x),
        }
    }
    if dots.is_empty() {
        return None;
    }
    let mut series = vec![
        Series {
            name: "each evaluation (geomean, IQR)".into(),
            points: dots,
            style: Style::Dots,
            class: "c0",
        },
        Series {
            name: "best so far".into(),
            points: best,
            style: Style::Steps,
            class: "best",
        },
    ];
    if let Some(t) = seed_time {
        let xs: Vec<f64> = series[0].points.iter().map(|p| p.0).collect();
        let first = xs.iter().copied().fold(f64::INFINITY, f64::min);
        series.push(Series {
            name: "seed".into(),
            points: vec![(first, t)],
            style: Style::Steps,
            class: "seed",
        });
    }
    Some(
        Chart {
            x_label: match (wall, unit == 1.0) {
                (true, true) => "seconds since the run began".into(),
                (true, false) => "minutes since the run began".into(),
                (false, _) => "evaluation".into(),
            },
            y_label: "time (geomean over workloads)".into(),
            log_y: true,
            x_fmt: match (wall, unit == 1.0) {
                (true, true) if span < 10.0 => |x| format!("{x:.1}"),
                (true, true) => |x| format!("{x:.0}"),
                (true, false) => |x| format!("{x:.1}"),
                (false, _) => |x| format!("{x:.0}"),
            },
            y_fmt: |y| fmt_time(Some(y)),
            series,
            whiskers,
            marks,
        }
        .svg(),
    )
}

/// The best candidate's time on each workload beside every baseline's (the confirming measurement where
/// there is one).
fn workload_bars(best: &crate::run_result::BestResult) -> Option<String> {
    let rows = best.confirmed.as_ref().unwrap_or(&best.workloads);
    let groups: Vec<(String, Vec<(String, f64)>)> = rows
        .iter()
        .filter_map(|w| {
            let mut bars = vec![("best candidate".to_string(), w.median_s?)];
            bars.extend(w.baselines.iter().map(|(k, v)| (k.clone(), *v)));
            Some((w.workload.clone(), bars))
        })
        .collect();
    (!groups.is_empty()).then(|| {
        Bars {
            groups,
            log: true,
            fmt: |v| fmt_time(Some(v)),
            x_label: "median time (log scale)".into(),
            reference: None,
        }
        .svg()
    })
}

/// The best candidate's fraction of the roofline on each workload (1.0: the measured peaks' floor).
fn roofline_bars(best: &crate::run_result::BestResult) -> Option<String> {
    let rows = best.confirmed.as_ref().unwrap_or(&best.workloads);
    let groups: Vec<(String, Vec<(String, f64)>)> = rows
        .iter()
        .filter_map(|w| {
            Some((
                w.workload.clone(),
                vec![("fraction of the roofline".to_string(), w.roofline_fraction?)],
            ))
        })
        .collect();
    (!groups.is_empty()).then(|| {
        Bars {
            groups,
            log: false,
            fmt: |v| format!("{:.0}%", v * 100.0),
            x_label: "floor time / measured time (the roofline at 100%)".into(),
            reference: Some(1.0),
        }
        .svg()
    })
}

/// The best candidate and every baseline on the classic roofline of the measured peaks: each workload at its
/// arithmetic intensity (from the confirming measurement where there is one). None without both peaks or
/// without a workload whose task counts flops.
fn roofline_chart(
    hw: &crate::eval::Hardware,
    best: &str,
    evals: &[(i64, Phase, String, WorkloadResult)],
) -> Option<String> {
    let bandwidth = hw.peak_bandwidth_gbs.filter(|v| *v > 0.0)? * 1e9;
    let compute = hw.peak_gflops.filter(|v| *v > 0.0)? * 1e9;
    let of = |phase: Phase| -> Vec<&WorkloadResult> {
        evals
            .iter()
            .filter(|(_, p, c, _)| *p == phase && c == best)
            .map(|(_, _, _, r)| r)
            .collect()
    };
    let confirmed = of(Phase::Confirm);
    let rows = if confirmed.is_empty() {
        of(Phase::Search)
    } else {
        confirmed
    };
    const CLASSES: [&str; 5] = ["c1", "c2", "c3", "c4", "c5"];
    let mut baselines: Vec<String> = Vec::new();
    let mut points = Vec::new();
    for r in rows {
        let Some(rf) = r
            .roofline
            .as_ref()
            .filter(|f| f.flops > 0.0 && f.bytes > 0.0)
        else {
            continue;
        };
        let mut point = |series: &str, class, t: f64| {
            points.push(svg::RooflinePoint {
                series: series.to_string(),
                class,
                workload: r.workload.clone(),
                intensity: rf.flops / rf.bytes,
                flops_per_s: rf.flops / t,
            })
        };
        if let Some(t) = r.timing.as_ref().map(|t| t.median_s).filter(|t| *t > 0.0) {
            point("best candidate", "c0", t);
        }
        for (name, t) in &r.baselines {
            if !baselines.contains(name) {
                baselines.push(name.clone());
            }
            let i = baselines.iter().position(|b| b == name).unwrap_or(0);
            if t.median_s > 0.0 {
                point(name, CLASSES[i % CLASSES.len()], t.median_s);
            }
        }
    }
    (!points.is_empty()).then(|| {
        svg::Roofline {
            bandwidth,
            compute,
            points,
        }
        .svg()
    })
}

/// Points, their label and how their values read.
type Curve = (Vec<(f64, f64)>, &'static str, fn(f64) -> String);

/// The LLM's cost summed over the run's calls in order where the provider priced them, else its tokens,
/// else the calls themselves (a server that reports neither).
fn llm_chart(exchanges: &[crate::llm::Exchange]) -> Option<String> {
    let start = exchanges.iter().map(|e| e.started_at).reduce(f64::min)?;
    let (mut cost, mut tokens, mut calls) = (0.0, 0.0, 0.0);
    let (mut cost_pts, mut token_pts, mut call_pts) = (Vec::new(), Vec::new(), Vec::new());
    for e in exchanges {
        if let crate::llm::Outcome::Ok {
            usage,
            cost_usd,
            latency_s,
            ..
        } = &e.outcome
        {
            let x = (e.started_at + latency_s - start) / 60.0;
            calls += 1.0;
            call_pts.push((x, calls));
            if let Some(u) = usage.filter(|u| u.total() > 0) {
                tokens += u.total() as f64;
                token_pts.push((x, tokens));
            }
            if let Some(c) = cost_usd {
                cost += c;
                cost_pts.push((x, cost));
            }
        }
    }
    let (points, label, fmt): Curve = if !cost_pts.is_empty() {
        (cost_pts, "cost (USD), summed", |v| format!("${v:.3}"))
    } else if !token_pts.is_empty() {
        (token_pts, "tokens, summed", |v| format!("{v:.0}"))
    } else {
        (call_pts, "calls answered, summed", |v| format!("{v:.0}"))
    };
    (!points.is_empty()).then(|| {
        Chart {
            x_label: "minutes since the first call".into(),
            y_label: label.into(),
            log_y: false,
            x_fmt: |x| format!("{x:.1}"),
            y_fmt: fmt,
            series: vec![Series {
                name: label.into(),
                points,
                style: Style::Steps,
                class: "c1",
            }],
            whiskers: Vec::new(),
            marks: Vec::new(),
        }
        .svg()
    })
}

fn status_word(s: Status) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Every attempt: its phase, number, candidate, why it was evaluated, its verdict and its time on each
/// workload (blank where it did not reach one).
fn attempt_rows(
    attempts: &[Attempt],
    by_attempt: &BTreeMap<(String, String), BTreeMap<String, WorkloadResult>>,
    workloads: &[String],
) -> Vec<Value> {
    attempts
        .iter()
        .map(|a| {
            let rs = by_attempt.get(&(a.phase.to_string(), a.candidate.clone()));
            let cells: Vec<Value> = workloads
                .iter()
                .map(|w| match rs.and_then(|r| r.get(w)) {
                    Some(r) if r.status == Status::Passed => json!({
                        "text": fmt_time(r.timing.as_ref().map(|t| t.median_s)),
                        "title": r.timing.as_ref().map(|t| format!("IQR {}", fmt_time(Some(t.iqr_s)))),
                        "class": "ok",
                    }),
                    Some(r) => json!({"text": status_word(r.status), "title": crate::units::head_line(&r.message, 200), "class": "bad"}),
                    None => json!({"text": "", "title": null, "class": ""}),
                })
                .collect();
            let s = a.summary.as_ref();
            json!({
                "phase": a.phase.to_string(), "seq": a.seq, "candidate": a.candidate,
                "short": &a.candidate[..a.candidate.len().min(10)], "origin": a.origin,
                "result": match s {
                    None => "in progress".to_string(),
                    Some(s) if s.passed => "passed".to_string(),
                    Some(s) => crate::units::head_line(s.first_failure.as_deref().unwrap_or("failed"), 80),
                },
                "passed": s.is_some_and(|s| s.passed),
                "geomean": fmt_time(s.and_then(|s| s.geomean_s)),
                "verdict": s.and_then(|s| s.verdict.as_ref()).map(|v| format!("{} ({:.2}x)", v.verdict.name(), v.speedup)),
                "cells": cells,
            })
        })
        .collect()
}

/// Each baseline's time per workload, as last measured in the run.
fn baseline_rows(
    evals: &[(i64, Phase, String, WorkloadResult)],
    workloads: &[String],
) -> Vec<Value> {
    let mut times: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for (_, _, _, r) in evals {
        for (b, t) in &r.baselines {
            times
                .entry(b.clone())
                .or_default()
                .insert(r.workload.clone(), t.median_s);
        }
    }
    times
        .into_iter()
        .map(|(b, per)| {
            json!({"name": b, "cells": workloads.iter().map(|w| fmt_time(per.get(w).copied())).collect::<Vec<_>>()})
        })
        .collect()
}

/// The world-model tree as stored last (None for strategies that keep none): drawn, and as a table.
fn tree_view(store: &Store, run_id: &str) -> Result<Value> {
    let state = store.strategy_state(run_id)?;
    let tree = state
        .as_ref()
        .and_then(|s| s.get("wm").cloned().filter(|w| !w.is_null()))
        .and_then(|wm| {
            serde_json::from_value::<crate::search::world_model::tree::WorldModel>(wm).ok()
        })
        .map(|wm| crate::search::world_model::wire::tree_json(&wm));
    let Some(tree) = tree else {
        return Ok(Value::Null);
    };
    let in_flight: Vec<String> = state
        .iter()
        .flat_map(|s| crate::search::InFlight::of(s, |_| false).cycles)
        .map(|(_, node)| node)
        .collect();
    let nodes: Vec<&Value> = tree["nodes"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    let drawn: Vec<TreeNode> = nodes
        .iter()
        .map(|n| {
            let id = text(&n["node_id"]);
            let title = n["action"]["title"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| text(&n["choice"]));
            let class = if in_flight.contains(&id) {
                "node-flight".to_string()
            } else {
                format!("node-{}", text(&n["status"]))
            };
            TreeNode {
                parent: n["parent_id"].as_str().map(str::to_string),
                label: format!("{id}: {title}"),
                title: format!("{id} ({}): {title}", text(&n["status"])),
                class,
                id,
            }
        })
        .collect();
    let rows: Vec<Value> = nodes
        .iter()
        .map(|n| {
            json!({
                "id": n["node_id"], "parent": n["parent_id"], "status": n["status"],
                "in_flight": in_flight.iter().any(|f| Some(f.as_str()) == n["node_id"].as_str()),
                "decision": n["decision"], "choice": n["choice"],
                "action": n["action"]["title"], "description": n["action"]["description"],
                "priority": n["action"]["score_0_to_1"], "difficulty": n["action"]["difficulty_1_to_5"],
                "rating": n["overall_rating_0_to_10"], "confidence": n["confidence_0_to_1"],
                "solution": n["solution"]["candidate"], "solution_time": n["solution"]["cost_s"].as_f64().map(|t| fmt_time(Some(t))),
                "notes": n["notes"],
            })
        })
        .collect();
    Ok(json!({
        "svg": svg::tree(&drawn, "root (the starting candidate)"),
        "summary": tree["kernel_summary"],
        "nodes": rows,
    }))
}

/// A candidate's files against its parent's in the run (nothing where it has no parent), line by line, with
/// its whole source beside.
pub fn candidate_diff(store: &Store, attempts: &[Attempt], hash: &str) -> Result<Value> {
    let Some(cand) = store.candidate(hash)? else {
        return Ok(Value::Null);
    };
    let parent_hash = attempts
        .iter()
        .find(|a| a.candidate == hash)
        .and_then(|a| a.parent.clone());
    let parent = match &parent_hash {
        Some(h) => store.candidate(h)?,
        None => None,
    };
    let plan =
        |c: &crate::candidate::Candidate| toml::to_string_pretty(&c.plan).unwrap_or_default();
    let mut files: BTreeMap<String, (String, String)> = BTreeMap::new();
    files.insert(
        "plan.toml".into(),
        (parent.as_ref().map(plan).unwrap_or_default(), plan(&cand)),
    );
    for (name, text) in &cand.files {
        let old = parent
            .as_ref()
            .and_then(|p| p.files.get(name))
            .cloned()
            .unwrap_or_default();
        files.insert(name.clone(), (old, text.clone()));
    }
    if let Some(p) = &parent {
        for (name, text) in &p.files {
            files
                .entry(name.clone())
                .or_insert_with(|| (text.clone(), String::new()));
        }
    }
    let files: Vec<Value> = files
        .into_iter()
        .map(|(name, (old, new))| {
            let diff = similar::TextDiff::from_lines(&old, &new);
            let mut lines = Vec::new();
            for group in diff.grouped_ops(3) {
                lines.push(json!({"class": "hunk", "text": "…"}));
                for op in group {
                    for change in diff.iter_changes(&op) {
                        let (class, sign) = match change.tag() {
                            similar::ChangeTag::Delete => ("del", "-"),
                            similar::ChangeTag::Insert => ("ins", "+"),
                            similar::ChangeTag::Equal => ("ctx", " "),
                        };
                        lines.push(json!({"class": class, "text": format!("{sign} {}", change.value().trim_end_matches('\n'))}));
                    }
                }
            }
            json!({"name": name, "changed": !lines.is_empty(), "lines": lines, "source": new})
        })
        .collect();
    Ok(json!({"candidate": hash, "name": cand.plan.name, "parent": parent_hash, "files": files}))
}

/// Each LLM call: its number, lane, purpose, model, tokens, cost, latency, outcome (never a prompt's key:
/// the store keeps none).
fn exchange_rows(exchanges: &[crate::llm::Exchange]) -> Vec<Value> {
    exchanges
        .iter()
        .map(|e| {
            let (ok, usage, cost, latency, outcome) = match &e.outcome {
                crate::llm::Outcome::Ok { usage, cost_usd, latency_s, attempts, .. } => {
                    (true, *usage, *cost_usd, Some(*latency_s), format!("ok ({attempts} request{})", if *attempts == 1 { "" } else { "s" }))
                }
                crate::llm::Outcome::Err { kind, message, .. } => {
                    (false, None, None, None, crate::units::head_line(&format!("{kind}: {message}"), 120))
                }
            };
            json!({
                "seq": e.seq, "lane": e.lane, "purpose": e.purpose, "model": format!("{}:{}", e.provider, e.model),
                "input_tokens": usage.map(|u| u.input_tokens), "output_tokens": usage.map(|u| u.output_tokens),
                "cost": cost.map(|c| format!("${c:.4}")), "latency": latency.map(|l| format!("{l:.1} s")),
                "ok": ok, "outcome": outcome,
            })
        })
        .collect()
}
