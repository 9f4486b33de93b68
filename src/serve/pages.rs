//! The dashboard's pages, drawn from the store on each request: the runs, one run (the report's page, served
//! live), a candidate against its parent, and two runs side by side. Every value goes through minijinja's
//! HTML escaping: candidate sources, node titles and LLM replies are written by an attacker.

use crate::report::html;
use crate::report::svg::Bars;
use crate::run_result::{Phase, RunStatus};
use crate::search::{InFlight, SEED_ORIGIN};
use crate::store::{RunRow, Store};
use crate::units::fmt_time;
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

const LAYOUT: &str = include_str!("../../templates/dashboard/layout.html");
const RUNS: &str = include_str!("../../templates/dashboard/runs.html");
const DIFF: &str = include_str!("../../templates/dashboard/diff.html");
const COMPARE: &str = include_str!("../../templates/dashboard/compare.html");

/// A page the server answers with: the page, or a not-found with what was asked.
pub enum Page {
    Found(String),
    NotFound(String),
}

fn render(name: &str, ctx: Value) -> Result<String> {
    let mut env = minijinja::Environment::new();
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
    for (n, t) in [
        ("layout.html", LAYOUT),
        ("runs.html", RUNS),
        ("diff.html", DIFF),
        ("compare.html", COMPARE),
    ] {
        env.add_template(n, t)
            .with_context(|| format!("the dashboard's template {n}"))?;
    }
    env.get_template(name)?
        .render(minijinja::value::Serde(&ctx))
        .with_context(|| format!("rendering {name}"))
}

/// The best a run has so far: its stored result's once it finished, else its fastest search attempt that
/// passed every feedback workload, with the seed's time to compare.
struct Best {
    candidate: String,
    geomean_s: Option<f64>,
    vs_seed: Option<f64>,
    vs_baselines: BTreeMap<String, f64>,
}

fn best_of(store: &Store, r: &RunRow) -> Result<Option<Best>> {
    if let Some(b) = r.result.as_ref().and_then(|x| x.best.as_ref()) {
        return Ok(Some(Best {
            candidate: b.candidate.clone(),
            geomean_s: b.geomean_s,
            vs_seed: b.speedup_vs_seed,
            vs_baselines: b.speedup_vs_baselines.clone(),
        }));
    }
    let attempts = store.attempts(&r.run_id, Some(Phase::Search))?;
    let passed = |a: &&crate::store::Attempt| {
        a.summary
            .as_ref()
            .is_some_and(|s| s.passed && s.geomean_s.is_some())
    };
    let time = |a: &crate::store::Attempt| a.summary.as_ref().and_then(|s| s.geomean_s);
    let seed = attempts
        .iter()
        .filter(passed)
        .find(|a| a.origin == SEED_ORIGIN)
        .and_then(time);
    let best = attempts
        .iter()
        .filter(passed)
        .min_by(|a, b| time(a).partial_cmp(&time(b)).unwrap());
    Ok(best.map(|a| Best {
        candidate: a.candidate.clone(),
        geomean_s: time(a),
        vs_seed: seed.zip(time(a)).map(|(s, t)| s / t),
        vs_baselines: a
            .summary
            .as_ref()
            .map(|s| s.speedup_vs_baseline.clone())
            .unwrap_or_default(),
    }))
}

fn fmt_x(x: Option<f64>) -> String {
    x.map(|x| format!("{x:.2}x")).unwrap_or_default()
}

/// How long ago a Unix time was, for people.
fn ago(t: f64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(t);
    let s = (now - t).max(0.0);
    match s {
        s if s < 90.0 => format!("{s:.0} s ago"),
        s if s < 5400.0 => format!("{:.0} min ago", s / 60.0),
        s if s < 172_800.0 => format!("{:.1} h ago", s / 3600.0),
        s => format!("{:.0} days ago", s / 86_400.0),
    }
}

/// The LLM's calls and what they cost (where the provider priced them).
fn llm_spend(store: &Store, run_id: &str) -> Result<String> {
    let (n, cost) = store.llm_spend(run_id)?;
    let calls = format!("{n} call{}", if n == 1 { "" } else { "s" });
    Ok(match (n, cost) {
        (0, _) => String::new(),
        (_, Some(c)) => format!("{calls} · ${c:.3}"),
        (_, None) => calls,
    })
}

fn in_flight(store: &Store, r: &RunRow) -> Result<String> {
    if !matches!(r.status, RunStatus::Running | RunStatus::Interrupted) {
        return Ok(String::new());
    }
    let Some(state) = store.strategy_state(&r.run_id)? else {
        return Ok(String::new());
    };
    let done: BTreeSet<String> = store
        .attempts(&r.run_id, None)?
        .into_iter()
        .filter(|a| a.finished)
        .map(|a| a.candidate)
        .collect();
    Ok(InFlight::of(&state, |h| done.contains(h)).describe())
}

/// `/`: every run, newest last, with the compare form.
pub fn runs(store: Option<&Store>, store_label: &str, mark: &str) -> Result<Page> {
    let mut rows = Vec::new();
    for r in store.map(Store::runs).transpose()?.unwrap_or_default() {
        let store = store.expect("runs come from a store");
        let best = best_of(store, &r)?;
        rows.push(json!({
            "id": r.run_id, "status": r.status.as_str(), "task": r.task, "target": r.target,
            "strategy": r.strategy, "budget": r.budget,
            "evaluations": r.result.as_ref().map(|x| x.evaluations as i64).unwrap_or(r.evaluations),
            "in_flight": in_flight(store, &r)?,
            "best_time": fmt_time(best.as_ref().and_then(|b| b.geomean_s)),
            "vs_seed": fmt_x(best.as_ref().and_then(|b| b.vs_seed)),
            "vs_baselines": best.as_ref().map(|b| b.vs_baselines.iter()
                .map(|(k, v)| format!("{k} {v:.2}x")).collect::<Vec<_>>().join(", ")).unwrap_or_default(),
            "llm": llm_spend(store, &r.run_id)?,
            "started": ago(r.created_at),
        }));
    }
    render(
        "runs.html",
        json!({"runs": rows, "store": store_label, "mark": mark}),
    )
    .map(Page::Found)
}

/// `/run/ID` (a run id, a unique prefix of one, or `last`): the report's page for the run, live.
pub fn run(store: Option<&Store>, run_id: &str, mark: &str) -> Result<Page> {
    let Some(store) = store else {
        return Ok(Page::NotFound("no store yet".into()));
    };
    match store.resolve_run(run_id) {
        Ok(id) => {
            let running = store
                .run(&id)?
                .is_some_and(|r| r.status == RunStatus::Running);
            let now = match store.path().parent() {
                Some(dir) if running => crate::progress::read_live(dir, &id),
                _ => Vec::new(),
            };
            html::render_live(store, &id, mark, &now).map(Page::Found)
        }
        Err(e) => Ok(Page::NotFound(e.to_string())),
    }
}

/// `/run/ID/diff/CANDIDATE`: a candidate of the run against its parent.
pub fn diff(
    store: Option<&Store>,
    store_label: &str,
    run_id: &str,
    hash: &str,
    mark: &str,
) -> Result<Page> {
    let Some(store) = store else {
        return Ok(Page::NotFound("no store yet".into()));
    };
    if store.run(run_id)?.is_none() {
        return Ok(Page::NotFound(format!("no run `{run_id}` in this store")));
    }
    let attempts = store.attempts(run_id, None)?;
    // Only the run's own candidates: the page is about this run.
    if !attempts.iter().any(|a| a.candidate == hash) {
        return Ok(Page::NotFound(format!(
            "run `{run_id}` evaluated no candidate `{hash}`"
        )));
    }
    let diff = html::candidate_diff(store, &attempts, hash)?;
    let parent_in_run = diff["parent"]
        .as_str()
        .is_some_and(|p| attempts.iter().any(|a| a.candidate == p));
    render(
        "diff.html",
        json!({"run": run_id, "diff": diff, "parent_in_run": parent_in_run, "store": store_label, "mark": mark}),
    )
    .map(Page::Found)
}

/// Per workload: the best candidate's median time and each baseline's.
type Times = BTreeMap<String, (Option<f64>, BTreeMap<String, f64>)>;

/// A run's best candidate per feedback workload (the confirming measurement where there is one) and each
/// baseline's time there.
fn per_workload(store: &Store, r: &RunRow, best: Option<&Best>) -> Result<Times> {
    let mut out = BTreeMap::new();
    if let Some(b) = r.result.as_ref().and_then(|x| x.best.as_ref()) {
        for w in b.confirmed.as_ref().unwrap_or(&b.workloads) {
            out.insert(w.workload.clone(), (w.median_s, w.baselines.clone()));
        }
        return Ok(out);
    }
    let Some(best) = best else { return Ok(out) };
    for (_, phase, cand, w) in store.evaluations(&r.run_id)? {
        if phase == Phase::Search && cand == best.candidate {
            let baselines = w
                .baselines
                .iter()
                .map(|(k, t)| (k.clone(), t.median_s))
                .collect();
            out.insert(
                w.workload.clone(),
                (w.timing.as_ref().map(|t| t.median_s), baselines),
            );
        }
    }
    Ok(out)
}

/// `/compare?a=RUN&b=RUN`: two runs' facts and their best candidates per workload, B's speedup over A.
pub fn compare(
    store: Option<&Store>,
    store_label: &str,
    a: &str,
    b: &str,
    mark: &str,
) -> Result<Page> {
    let Some(store) = store else {
        return Ok(Page::NotFound("no store yet".into()));
    };
    let (Some(ra), Some(rb)) = (store.run(a)?, store.run(b)?) else {
        let missing = if store.run(a)?.is_none() { a } else { b };
        return Ok(Page::NotFound(format!("no run `{missing}` in this store")));
    };
    let (ba, bb) = (best_of(store, &ra)?, best_of(store, &rb)?);
    let (wa, wb) = (
        per_workload(store, &ra, ba.as_ref())?,
        per_workload(store, &rb, bb.as_ref())?,
    );
    let hw = |r: &RunRow| {
        let h = r.hardware();
        [h.name, h.kind]
            .into_iter()
            .flatten()
            .next()
            .unwrap_or_default()
    };
    let mut warning = Vec::new();
    if ra.task != rb.task {
        warning.push("the runs are of different tasks");
    }
    if ra.target != rb.target {
        warning.push("the runs measured different targets");
    }
    if hw(&ra) != hw(&rb) {
        warning.push("the runs measured on different hardware");
    }
    let fact = |name: &str, f: &dyn Fn(&RunRow, Option<&Best>) -> String| json!({"name": name, "a": f(&ra, ba.as_ref()), "b": f(&rb, bb.as_ref())});
    let facts = vec![
        fact("task", &|r, _| r.task.clone()),
        fact("target", &|r, _| r.target.clone()),
        fact("hardware", &|r, _| hw(r)),
        fact("strategy", &|r, _| r.strategy.clone()),
        fact("status", &|r, _| r.status.to_string()),
        fact("evaluations", &|r, _| {
            let n = r
                .result
                .as_ref()
                .map(|x| x.evaluations as i64)
                .unwrap_or(r.evaluations);
            format!("{n} of {}", r.budget)
        }),
        fact("best candidate", &|_, b| {
            b.map(|b| b.candidate.clone()).unwrap_or_default()
        }),
        fact("best time (geomean)", &|_, b| {
            fmt_time(b.and_then(|b| b.geomean_s))
        }),
        fact("best vs its seed", &|_, b| fmt_x(b.and_then(|b| b.vs_seed))),
    ];
    let workloads: BTreeSet<&String> = wa.keys().chain(wb.keys()).collect();
    let baselines: BTreeSet<String> = wa
        .values()
        .chain(wb.values())
        .flat_map(|(_, bs)| bs.keys().cloned())
        .collect();
    let mut rows = Vec::new();
    let mut bars = Vec::new();
    for w in &workloads {
        let ta = wa.get(*w).and_then(|x| x.0);
        let tb = wb.get(*w).and_then(|x| x.0);
        let speedup = ta.zip(tb).map(|(a, b)| a / b);
        let base = |n: &String| {
            wa.get(*w)
                .and_then(|x| x.1.get(n))
                .or_else(|| wb.get(*w).and_then(|x| x.1.get(n)))
                .copied()
        };
        let mut group = Vec::new();
        group.extend(ta.map(|t| ("A".to_string(), t)));
        group.extend(tb.map(|t| ("B".to_string(), t)));
        for n in &baselines {
            group.extend(base(n).map(|t| (n.clone(), t)));
        }
        bars.push(((*w).clone(), group));
        rows.push(json!({
            "workload": w, "a": fmt_time(ta), "b": fmt_time(tb), "speedup": fmt_x(speedup),
            // Within 2% reads as even: no colour claims a difference the timing's noise could make.
            "class": match speedup { Some(x) if x > 1.02 => "faster", Some(x) if x < 0.98 => "slower", _ => "" },
            "baselines": baselines.iter().map(|n| fmt_time(base(n))).collect::<Vec<_>>(),
        }));
    }
    let chart = (!bars.is_empty()).then(|| {
        Bars {
            groups: bars,
            log: true,
            fmt: |v| fmt_time(Some(v)),
            x_label: "median time (log scale)".into(),
            reference: None,
        }
        .svg()
    });
    render(
        "compare.html",
        json!({
            "a": {"id": ra.run_id}, "b": {"id": rb.run_id}, "facts": facts, "rows": rows,
            "baselines": baselines, "chart": chart, "store": store_label, "mark": mark,
            "warning": (!warning.is_empty()).then(|| format!("Read with care: {}; their times may not compare.", warning.join(", "))),
        }),
    )
    .map(Page::Found)
}
