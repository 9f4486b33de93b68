use super::{flags, load_candidate, print_json, quiet, settings_for};
use crate::candidate::Candidate;
use crate::eval::{self, Evaluator};
use crate::target::Target;
use crate::task::{Task, Workload};
use crate::{builtin, pyenv, report};
use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub(super) struct EvalArgs {
    pub(super) task: String,
    #[arg(required = true, num_args = 1..)]
    pub(super) candidate: Vec<PathBuf>,
    #[arg(long)]
    pub(super) target: Option<Target>,
    #[arg(long, value_parser = flags::seconds)]
    pub(super) timeout: Option<f64>,
    #[arg(long, default_value_t = 3, value_parser = flags::at_least_one::<usize>)]
    pub(super) checks: usize,
    /// Seconds of timing per workload (default 0.15 on the CPU, 0.3 on GPUs).
    #[arg(long, value_parser = flags::seconds)]
    pub(super) timing_budget: Option<f64>,
    /// Evaluate with this tunable value instead of its default (repeatable), e.g. `--set U=4`.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub(super) set: Vec<String>,
    /// Evaluate only this workload (repeatable); default: every workload, held-out ones included.
    #[arg(long = "workload", value_name = "NAME")]
    pub(super) workloads: Vec<String>,
    /// MLX targets: also report independent calls' throughput and one call alone, beside the latency.
    #[arg(long)]
    pub(super) throughput: bool,
    /// Time each candidate side by side with this one (a candidate folder), on the same inputs, and give
    /// the verdict: faster, slower or within noise.
    #[arg(long, value_name = "DIR")]
    pub(super) incumbent: Option<PathBuf>,
    /// Stop a candidate's evaluation at its first workload that does not pass, as a search does (the rest
    /// are not run: a kernel that hangs would otherwise wait out the deadline on every workload).
    #[arg(long)]
    pub(super) fail_fast: bool,
    #[arg(long)]
    pub(super) json: bool,
}

/// `ksearch eval`: candidate folders measured against the reference and the baselines.
pub(super) fn eval(args: EvalArgs, python: Option<&Path>) -> Result<u8> {
    let EvalArgs {
        task,
        candidate,
        target,
        timeout,
        checks,
        timing_budget,
        set,
        workloads,
        throughput,
        incumbent,
        fail_fast,
        json,
    } = args;
    let task = Task::load(&builtin::task_dir(&task)?)?;
    let pick = EvalPick {
        set: parse_sets(&set)?,
        workloads,
        throughput,
        incumbent,
        fail_fast,
    };
    evaluate(
        task,
        &candidate,
        target,
        (checks, timeout, timing_budget),
        &pick,
        python,
        json,
    )
}

/// What `ksearch eval` measures besides the candidate's defaults: tunable values, a subset of workloads, and
/// the old clock's figures beside the new.
struct EvalPick {
    set: crate::candidate::Params,
    workloads: Vec<String>,
    throughput: bool,
    incumbent: Option<PathBuf>,
    fail_fast: bool,
}

/// `--set NAME=VALUE` arguments as tunable values.
fn parse_sets(args: &[String]) -> Result<crate::candidate::Params> {
    let mut out = crate::candidate::Params::new();
    for a in args {
        let (k, v) = a
            .split_once('=')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| anyhow!("--set {a}: expected NAME=VALUE, e.g. --set U=4"))?;
        let k = k.trim();
        let v: i64 = v
            .trim()
            .parse()
            .map_err(|_| anyhow!("--set {a}: the value of `{k}` must be an integer"))?;
        if out.insert(k.to_string(), v).is_some() {
            bail!("--set {k} is given twice: keep one");
        }
    }
    Ok(out)
}

/// `--checks`, `--timeout` and `--timing-budget` as given (settings depend on the target, known later).
type SettingsArgs = (usize, Option<f64>, Option<f64>);

fn evaluate(
    task: Task,
    dirs: &[PathBuf],
    target: Option<Target>,
    settings: SettingsArgs,
    pick: &EvalPick,
    python: Option<&Path>,
    json: bool,
) -> Result<u8> {
    let probe = Candidate::load(&dirs[0])?;
    let target = target.unwrap_or(probe.plan.target);
    let mut settings = settings_for(&task, target, settings.0, settings.1, settings.2)?;
    settings.timing.throughput = pick.throughput;
    let cands = load_candidates(&task, dirs, target, pick)?;
    let names: Vec<&str> = task.toml.workload.iter().map(|w| w.name.as_str()).collect();
    if let Some(w) = pick.workloads.iter().find(|w| !names.contains(&w.as_str())) {
        bail!(
            "--workload {w}: task {} has no such workload (it has: {})",
            task.name(),
            names.join(", ")
        );
    }
    let incumbent = match &pick.incumbent {
        Some(dir) => {
            let c = load_candidate(dir, &task, target)?;
            Some((c.hash(), c))
        }
        None => None,
    };
    let env = pyenv::ensure(python)?;
    env.ensure_target(target)?;
    let build = std::env::temp_dir().join(format!("ksearch-eval-{}", std::process::id()));
    // One evaluator for every candidate: they meet the same input sets, whose references are computed once.
    let mut ev = Evaluator::start(
        task.clone(),
        target,
        env,
        build.clone(),
        settings,
        eval::fresh_secret(),
    )?;
    let mut reports = Vec::new();
    let mut all_passed = true;
    for cand in &cands {
        let mut results = Vec::new();
        let picked: Vec<&Workload> = task
            .toml
            .workload
            .iter()
            .filter(|w| pick.workloads.is_empty() || pick.workloads.contains(&w.name))
            .collect();
        ev.precompile(cand, &picked);
        for w in picked {
            let opts = eval::EvalOptions {
                incumbent: incumbent.as_ref().map(|(h, c)| (h.as_str(), c)),
                retime_baselines: false,
            };
            let r = ev.evaluate_workload_with(cand, w, opts);
            if !json && !quiet() {
                eprintln!(
                    "{}{}: {}",
                    w.name,
                    if w.held_out { " (held out)" } else { "" },
                    r.status.name()
                );
            }
            let failed = r.status != eval::Status::Passed;
            results.push(r);
            if failed && pick.fail_fast {
                break;
            }
        }
        let mut summary = eval::summarize(&results);
        all_passed &= summary.passed;
        if summary.passed {
            summary.verdict = eval::overall_verdict(&results, &ev.settings.timing);
        }
        if json {
            reports.push(report_json(&task, target, cand, &summary, &ev, &results));
        } else {
            print_report(&task, target, cand, &summary, &results);
        }
    }
    let _ = std::fs::remove_dir_all(&build);
    if json {
        if reports.len() == 1 {
            print_json(&reports[0]);
        } else {
            print_json(&json!({ "candidates": reports }));
        }
    }
    Ok(if all_passed { 0 } else { 1 })
}

/// The candidate folders, with `--set`'s tunable values, each checked against the task and its constraints.
fn load_candidates(
    task: &Task,
    dirs: &[PathBuf],
    target: Target,
    pick: &EvalPick,
) -> Result<Vec<Candidate>> {
    let mut cands = Vec::new();
    for dir in dirs {
        let cand = load_candidate(dir, task, target)?
            .with_params(&pick.set)
            .map_err(|m| anyhow!("--set: {m} (see {})", dir.join("plan.toml").display()))?;
        if !pick.set.is_empty()
            && !cand
                .satisfies_constraints(&Default::default())
                .map_err(|m| anyhow!("{}: {m}", dir.join("plan.toml").display()))?
        {
            let rules: Vec<&str> = cand.plan.constraints.iter().map(|c| c.0.src()).collect();
            bail!(
                "--set: these tunable values break a constraint of {} ({}); pick others",
                dir.join("plan.toml").display(),
                rules.join(", ")
            );
        }
        cands.push(cand);
    }
    Ok(cands)
}

/// One candidate's evaluation as `--json` prints it.
fn report_json(
    task: &Task,
    target: Target,
    cand: &Candidate,
    summary: &eval::Summary,
    ev: &Evaluator,
    results: &[eval::WorkloadResult],
) -> Value {
    json!({
        "task": task.name(), "target": target.name(), "candidate": cand.hash(), "name": cand.plan.name,
        "params": cand.params(), "passed": summary.passed, "hardware": ev.hardware(), "sandbox": ev.hello["sandbox"],
        "speedup_vs_baselines": summary.speedup_vs_baseline,
        "verdict": summary.verdict,
        "elapsed_s": results.iter().map(|r| r.elapsed_s).sum::<f64>(),
        "assertions": crate::assertions::assess(task, cand, results),
        "workloads": results.iter().map(|r| {
            let mut v = json!(crate::run_result::WorkloadRow::from(r));
            v["held_out"] = json!(task.toml.workload.iter().any(|w| w.name == r.workload && w.held_out));
            v["seeds"] = json!(r.seeds);
            if let Some(t) = &r.timing {
                v["independent_s"] = json!(t.independent_s);
                v["alone_s"] = json!(t.alone_s);
                v["launches_per_eval"] = json!(t.launches_per_eval);
                v["link_s"] = json!(t.link_s);
            }
            // Every baseline's full timing (spread, and with --throughput the old clock's figures).
            v["baselines_timing"] = json!(r.baselines);
            if !r.baselines_unavailable.is_empty() {
                v["baselines_unavailable"] = json!(r.baselines_unavailable);
            }
            if !r.metal_sources.is_empty() {
                v["metal_sources"] = json!(r.metal_sources);
            }
            v
        }).collect::<Vec<_>>(),
    })
}

/// One candidate's evaluation for people: the workloads table, the verdict, what an expert kernel would
/// show that this one does not, and on Metal off a Mac the source MLX generates.
fn print_report(
    task: &Task,
    target: Target,
    cand: &Candidate,
    summary: &eval::Summary,
    results: &[eval::WorkloadResult],
) {
    println!(
        "candidate {} ({}) on task {} / {target}",
        cand.hash(),
        cand.plan.name,
        task.name()
    );
    println!("{}", report::workloads_table(results));
    if let Some(v) = &summary.verdict {
        println!(
            "against {}: {} ({:.3}x over every workload, {:.1} standard errors)",
            v.incumbent,
            v.verdict.name(),
            v.speedup,
            v.z.abs()
        );
    }
    if target.is_gpu() {
        let lacking =
            crate::assertions::missing_text(&crate::assertions::assess(task, cand, results));
        if !lacking.is_empty() {
            println!(
                "\nExpert-kernel properties not found (knowledge/assertions.toml):\n{lacking}"
            );
        }
    }
    if let Some(r) = results.iter().find(|r| !r.metal_sources.is_empty()) {
        println!(
            "\nThe Metal source MLX generates for workload {} (checked instead of running):",
            r.workload
        );
        for s in &r.metal_sources {
            println!("{s}\n");
        }
    }
}
