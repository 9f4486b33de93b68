use super::{best_candidate, print_json, refuse_overwrite};
use crate::report;
use crate::store::Store;
use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub(super) struct ShowArgs {
    pub(super) run: String,
    #[arg(long)]
    pub(super) json: bool,
    /// Write the best candidate (tunables set to the chosen values) into this folder.
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
    /// Print the world model (the JSON holds its `nodes`).
    #[arg(long)]
    pub(super) tree: bool,
    /// Write the run's LLM exchanges as a cassette (JSON lines) for `--llm replay:FILE`.
    #[arg(long)]
    pub(super) cassette: Option<PathBuf>,
    /// Replace files already in the output folder (refused otherwise: hand edits there would be lost).
    #[arg(long)]
    pub(super) force: bool,
}

/// `ksearch show`: one run, its world model (`--tree`), its best candidate written out, its exchanges as a cassette.
pub(super) fn show(args: ShowArgs, store_dir: &Path) -> Result<u8> {
    let ShowArgs {
        run,
        json,
        out,
        tree,
        cassette,
        force,
    } = args;
    let run = Store::open_existing(store_dir)?.resolve_run(&run)?;
    if let Some(path) = cassette {
        write_cassette(store_dir, &run, &path)?;
    }
    if tree {
        show_tree(store_dir, &run, json)
    } else {
        show_run(store_dir, &run, json, out.as_deref(), force)
    }
}

fn write_cassette(store_dir: &Path, run_id: &str, path: &Path) -> Result<()> {
    let store = Store::open_existing(store_dir)?;
    let ex = store.exchanges(run_id)?;
    if ex.is_empty() {
        bail!("run {run_id} has no recorded LLM exchanges");
    }
    let mut text = String::new();
    for e in &ex {
        text.push_str(&serde_json::to_string(e)?);
        text.push('\n');
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "ksearch: wrote {} exchanges to {}",
        ex.len(),
        path.display()
    );
    Ok(())
}

fn show_tree(store_dir: &Path, run_id: &str, json: bool) -> Result<u8> {
    let store = Store::open_existing(store_dir)?;
    store
        .run(run_id)?
        .ok_or_else(|| anyhow!("no run `{run_id}` in {}", store.path().display()))?;
    let state = store.strategy_state(run_id)?;
    let mut tree = state
        .as_ref()
        .and_then(|s| s.get("wm").cloned().filter(|w| !w.is_null()))
        .and_then(|wm| {
            serde_json::from_value::<crate::search::world_model::tree::WorldModel>(wm).ok()
        })
        .map(|wm| crate::search::world_model::wire::tree_json(&wm))
        .or_else(|| store.snapshots(run_id).ok().and_then(|s| s.last().cloned()))
        .ok_or_else(|| {
            anyhow!("run {run_id} has no world model (only the world-model strategy keeps one)")
        })?;
    // The nodes whose cycles are in flight (one, or several with `--parallel`), as the state last stored.
    let in_flight: Vec<String> = state
        .iter()
        .flat_map(|s| crate::search::InFlight::of(s, |_| false).cycles)
        .map(|(_, node)| node)
        .collect();
    for n in tree["nodes"].as_array_mut().into_iter().flatten() {
        if n["node_id"]
            .as_str()
            .is_some_and(|id| in_flight.iter().any(|f| f == id))
        {
            n["in_flight"] = serde_json::json!(true);
        }
    }
    if json {
        print_json(&tree);
    } else {
        print!("{}", report::tree_text(&tree));
    }
    Ok(0)
}

fn show_run(
    store_dir: &Path,
    run_id: &str,
    json: bool,
    out: Option<&Path>,
    force: bool,
) -> Result<u8> {
    let store = Store::open_existing(store_dir)?;
    let row = store
        .run(run_id)?
        .ok_or_else(|| anyhow!("no run `{run_id}` in {}", store.path().display()))?;
    let attempts = store.attempts(run_id, None)?;
    let evals = store.evaluations(run_id)?;
    if let Some(dir) = out {
        let hash = best_candidate(&row)
            .ok_or_else(|| anyhow!("run {run_id} has no best candidate yet"))?;
        let c = store
            .candidate(hash)?
            .ok_or_else(|| anyhow!("candidate {hash} missing"))?;
        refuse_overwrite(dir, c.written_paths(dir), force)?;
        c.write_dir(dir)
            .with_context(|| format!("writing {}", dir.display()))?;
        eprintln!("ksearch: wrote best candidate {hash} to {}", dir.display());
    }
    if json {
        print_json(&json!({
            "run_id": row.run_id, "task": row.task, "target": row.target, "strategy": row.strategy,
            "status": row.status, "budget": row.budget, "evaluations": evals.iter().map(|(id, phase, cand, r)| {
                let mut v = serde_json::to_value(r).unwrap();
                v["id"] = json!(id); v["phase"] = json!(phase); v["candidate"] = json!(cand);
                v
            }).collect::<Vec<_>>(),
            "attempts": attempts, "config": shown_config(&row.config), "hardware": row.hardware(), "worker": row.hello,
            "result": row.result, "error": row.error, "created_at": row.created_at, "updated_at": row.updated_at,
            "evaluated_candidates": row.evaluations,
            "strategy_state": store.strategy_state(run_id)?,
        }));
        return Ok(0);
    }
    println!(
        "run {}  task {}  target {}  strategy {}  status {}  evaluations {}/{}",
        row.run_id, row.task, row.target, row.strategy, row.status, row.evaluations, row.budget
    );
    if let Some(e) = &row.error {
        println!("error: {e}");
    }
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_header(vec![
            "phase",
            "#",
            "candidate",
            "origin",
            "result",
            "geomean",
        ]);
    for a in &attempts {
        let s = a.summary.as_ref();
        t.add_row(vec![
            a.phase.to_string(),
            a.seq.to_string(),
            a.candidate.clone(),
            a.origin.clone(),
            match s {
                None => "in progress".into(),
                Some(s) if s.passed => "passed".into(),
                Some(s) => crate::units::head_line(s.first_failure.as_deref().unwrap_or(""), 70),
            },
            crate::units::fmt_time(s.and_then(|s| s.geomean_s)),
        ]);
    }
    println!("{t}");
    if let Some(result) = &row.result {
        print!("{}", report::run_summary(result));
    }
    Ok(0)
}

/// A run's configuration as `show` prints it: without the input secret, from which every input set of the
/// run derives (a reader of the output, a dashboard or a prompt built from it, must not be able to predict
/// the inputs of the run's later evaluations). The store keeps it, for `resume`.
fn shown_config(config: &Value) -> Value {
    let mut c = config.clone();
    if let Some(o) = c.as_object_mut() {
        o.remove("input_secret");
    }
    c
}
