//! Fault tolerance of runs: kill -9 at many moments, then resume, loses nothing that was finished; two
//! runs sharing one store do not disturb each other.

mod common;
use common::*;
use ksearch::store::Store;
use std::process::Stdio;
use std::time::{Duration, Instant};

#[test]
fn kill_9_at_many_moments_then_resume_loses_no_finished_evaluation() {
    let store = tempfile::tempdir().unwrap();
    let mut args = vec!["run", "matmul", "--budget", "14"];
    args.extend_from_slice(QUICK);
    let mut run_id: Option<String> = None;
    let mut kept = std::collections::BTreeMap::new();
    // Kill after 1, 3, 2, 4, 1, 3, 2 more stored evaluations: inside compiles, checks, timing and
    // between attempts, wherever the process happens to be.
    for step in [1usize, 3, 2, 4, 1, 3, 2] {
        let child = match &run_id {
            None => ksearch(store.path())
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
            Some(id) => ksearch(store.path())
                .args(["resume", id])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        };
        let child = Killed(child);
        let target = kept.len() + step;
        let start = Instant::now();
        loop {
            assert!(
                start.elapsed() < Duration::from_secs(180),
                "no progress to {target} evaluations"
            );
            std::thread::sleep(Duration::from_millis(50));
            let Ok(s) = Store::open(store.path()) else {
                continue;
            };
            if run_id.is_none() {
                run_id = s.runs().unwrap().first().map(|r| r.run_id.clone());
            }
            let Some(id) = &run_id else { continue };
            if s.evaluations(id).unwrap().len() >= target {
                break;
            }
        }
        drop(child);
        let now = snapshot(store.path(), run_id.as_ref().unwrap());
        for (id, e) in &kept {
            assert_eq!(
                now.get(id),
                Some(e),
                "evaluation {id} changed or vanished after a kill"
            );
        }
        kept = now;
    }
    let id = run_id.unwrap();
    let v = last_json(&run(store.path(), &["resume", &id, "--json"]));
    assert_eq!(v["status"], "completed");
    assert_eq!(v["evaluations"], 14);
    let end = snapshot(store.path(), &id);
    for (k, e) in &kept {
        assert_eq!(
            end.get(k),
            Some(e),
            "evaluation {k} lost by the final resume"
        );
    }
}

#[test]
fn two_runs_on_one_store_do_not_disturb_each_other() {
    let store = tempfile::tempdir().unwrap();
    let spawn = |task: &str| {
        let mut args = vec!["run", task, "--budget", "4", "--json"];
        args.extend_from_slice(QUICK);
        ksearch(store.path())
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("softmax"), spawn("scan"));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    for out in [&a, &b] {
        let v = last_json(out);
        assert_eq!(v["status"], "completed", "{}", stderr(out));
        assert_eq!(v["evaluations"], 4);
    }
    let runs = last_json(&run(store.path(), &["runs", "--json"]));
    assert_eq!(runs.as_array().unwrap().len(), 2);
    for r in runs.as_array().unwrap() {
        assert_eq!(r["status"], "completed", "{r}");
        let shown = last_json(&run(
            store.path(),
            &["show", r["run_id"].as_str().unwrap(), "--json"],
        ));
        let evals = shown["evaluations"].as_array().unwrap();
        assert!(evals.len() >= 4, "{r}");
    }
}
