use super::print_json;
use crate::task::Task;
use crate::{builtin, report};
use anyhow::Result;
use serde_json::json;

pub(super) fn tasks(json: bool) -> Result<u8> {
    let mut rows = Vec::new();
    for name in builtin::task_names() {
        // One broken task folder is reported, not fatal to the listing.
        let task = match builtin::task_dir(&name).and_then(|d| Ok(Task::load(&d)?)) {
            Ok(t) => t,
            Err(e) => {
                rows.push(json!({"name": name, "error": format!("{e:#}"), "targets": [], "workloads": 0, "held_out": 0, "baselines": []}));
                continue;
            }
        };
        rows.push(json!({
            "name": task.name(),
            "description": task.toml.description,
            "targets": task.targets().iter().map(|t| t.name()).collect::<Vec<_>>(),
            "workloads": task.workloads(false).count(),
            "held_out": task.workloads(true).count(),
            "baselines": task.toml.baseline.iter().map(|b| b.name.clone()).collect::<Vec<_>>(),
            "seeds": task.seeds.iter().map(|(t, s)| (t.name().to_string(), s.iter().map(|s| s.name.clone()).collect::<Vec<_>>())).collect::<std::collections::BTreeMap<_, _>>(),
        }));
    }
    if json {
        print_json(&json!(rows));
    } else {
        println!("{}", report::tasks_table(&rows));
    }
    Ok(0)
}
