use super::{best_candidate, print_json};
use crate::report;
use crate::store::Store;
use anyhow::Result;
use serde_json::{Value, json};
use std::path::Path;

#[derive(clap::Args)]
pub(super) struct CompareArgs {
    pub(super) a: String,
    pub(super) b: String,
    #[arg(long)]
    pub(super) json: bool,
}

pub(super) fn compare(store_dir: &Path, a: &str, b: &str, json: bool) -> Result<u8> {
    let store = Store::open_existing(store_dir)?;
    let mut rows = Vec::new();
    for name in [a, b] {
        let id = store.resolve_run(name)?;
        let row = store.run(&id)?.expect("resolved");
        rows.push(row);
    }
    // Each run's best, timed beside its baselines at the end where it was (`confirmed`), else as searched.
    let times = |r: &crate::store::RunRow| -> Vec<(String, Option<f64>)> {
        let Some(best) = r.result.as_ref().and_then(|x| x.best.as_ref()) else {
            return Vec::new();
        };
        best.confirmed
            .as_ref()
            .unwrap_or(&best.workloads)
            .iter()
            .map(|w| (w.workload.clone(), w.median_s))
            .collect()
    };
    let (ta, tb) = (times(&rows[0]), times(&rows[1]));
    let mut names: Vec<String> = ta.iter().map(|(n, _)| n.clone()).collect();
    for (n, _) in &tb {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    let get =
        |t: &[(String, Option<f64>)], n: &str| t.iter().find(|(m, _)| m == n).and_then(|x| x.1);
    let per: Vec<Value> = names
        .iter()
        .map(|n| {
            let (x, y) = (get(&ta, n), get(&tb, n));
            json!({"workload": n, "a_s": x, "b_s": y, "b_speedup_over_a": x.zip(y).map(|(x, y)| x / y)})
        })
        .collect();
    let summary = |r: &crate::store::RunRow| {
        json!({"run_id": r.run_id, "task": r.task, "target": r.target, "strategy": r.strategy, "status": r.status,
               "hardware": r.hardware().name,
               "best": best_candidate(r),
               "speedup_vs_seed": r.result.as_ref().and_then(|x| x.best.as_ref()).and_then(|b| b.speedup_vs_seed)})
    };
    let v = json!({"a": summary(&rows[0]), "b": summary(&rows[1]), "workloads": per});
    if json {
        print_json(&v);
        return Ok(0);
    }
    if rows[0].task != rows[1].task {
        eprintln!(
            "ksearch: the runs are of different tasks ({} and {}): workloads are compared by name",
            rows[0].task, rows[1].task
        );
    }
    println!("{}", report::compare_table(&v));
    Ok(0)
}
