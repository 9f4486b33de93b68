use super::print_json;
use crate::report;
use crate::search::InFlight;
use crate::store::{RunStatus, Store};
use anyhow::Result;
use clap::Subcommand;
use serde_json::json;
use std::path::Path;

#[derive(clap::Args)]
pub(super) struct RunsArgs {
    #[command(subcommand)]
    pub(super) action: Option<RunsAction>,
    #[arg(long)]
    pub(super) json: bool,
}

#[derive(Subcommand)]
pub(super) enum RunsAction {
    /// Delete runs and everything stored for them (refused for a run in progress).
    Rm {
        #[arg(required = true)]
        runs: Vec<String>,
    },
}

/// `ksearch runs`: the runs in the store, or `runs rm` deleting some.
pub(super) fn runs(args: RunsArgs, store_dir: &Path) -> Result<u8> {
    let RunsArgs { action, json } = args;
    if let Some(RunsAction::Rm { runs }) = action {
        return remove(&runs, store_dir);
    }
    let store = Store::open_read(store_dir)?;
    let runs = match &store {
        Some(s) => s.runs()?,
        None => Vec::new(),
    };
    // What each unfinished run has in flight (its cycles, its proposals not yet evaluated).
    let mut in_flight = std::collections::BTreeMap::new();
    if let Some(store) = &store {
        for r in runs
            .iter()
            .filter(|r| matches!(r.status, RunStatus::Running | RunStatus::Interrupted))
        {
            if let Some(state) = store.strategy_state(&r.run_id)? {
                let done: Vec<String> = store
                    .attempts(&r.run_id, None)?
                    .into_iter()
                    .filter(|a| a.finished)
                    .map(|a| a.candidate)
                    .collect();
                let f = InFlight::of(&state, |h| done.iter().any(|d| d == h));
                in_flight.insert(r.run_id.clone(), f);
            }
        }
    }
    if json {
        print_json(&json!(
            runs.iter()
                .map(|r| json!({
                    "run_id": r.run_id, "task": r.task, "target": r.target, "strategy": r.strategy,
                    "status": r.status, "evaluations": r.evaluations, "budget": r.budget,
                    "created_at": r.created_at, "updated_at": r.updated_at,
                    "best": r.result.as_ref().and_then(|x| x.best.as_ref()),
                    "in_flight": in_flight.get(&r.run_id).map(|f| json!({
                        "cycles": f.cycles.iter().map(|(n, node)| json!({"cycle": n, "node": node}))
                            .collect::<Vec<_>>(),
                        "pending": f.pending,
                    })),
                }))
                .collect::<Vec<_>>()
        ));
    } else if runs.is_empty() {
        println!("no runs in {}", store_dir.join("ksearch.db").display());
    } else {
        println!("{}", report::runs_table(&runs, &in_flight));
    }
    Ok(0)
}

/// `ksearch runs rm RUN…`.
fn remove(runs: &[String], store_dir: &Path) -> Result<u8> {
    let store = Store::open(store_dir)?;
    // Every name resolved before anything is deleted: a typo deletes nothing.
    let mut ids = runs
        .iter()
        .map(|r| store.resolve_run(r))
        .collect::<Result<Vec<_>, _>>()?;
    ids.sort();
    ids.dedup();
    for id in ids {
        store.remove_run(&id)?;
        println!("removed {id}");
    }
    Ok(0)
}
