//! Runs end to end: the tune strategy, the store, kill -9 and resume, bad task folders.

use crate::common::*;
use ksearch::candidate::Candidate;
use ksearch::store::Store;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

#[test]
fn tasks_lists_the_builtin_cpu_tasks() {
    let store = tempfile::tempdir().unwrap();
    let out = run(store.path(), &["tasks", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = last_json(&out);
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for t in ["matmul", "softmax", "scan"] {
        assert!(names.contains(&t), "{names:?}");
    }
    for t in v.as_array().unwrap() {
        assert!(
            t.get("error").is_none(),
            "a built-in task does not load: {t}"
        );
        let targets = t["targets"].as_array().unwrap();
        match t["name"].as_str().unwrap() {
            "matmul" | "softmax" | "scan" => assert!(targets.contains(&"cpu".into()), "{t}"),
            "mamba-scan" => {
                assert!(
                    targets.contains(&"mlx-metal".into()) && targets.contains(&"mlx-cuda".into()),
                    "{t}"
                )
            }
            _ => {}
        }
        assert!(t["held_out"].as_u64().unwrap() >= 1, "{t}");
    }
}

#[test]
fn a_tune_run_finds_a_faster_passing_kernel_and_scores_held_out_workloads() {
    let store = tempfile::tempdir().unwrap();
    let mut args = vec!["run", "softmax", "--budget", "6", "--json"];
    args.extend_from_slice(QUICK);
    let out = run(store.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = last_json(&out);
    assert_eq!(v["status"], "completed");
    assert_eq!(v["evaluations"], 6);
    let best = &v["best"];
    assert_eq!(best["held_out_passed"], true, "{best}");
    assert!(best["speedup_vs_seed"].as_f64().unwrap() > 0.0);
    assert!(best["speedup_vs_baseline"].as_f64().unwrap() > 0.0);
    let run_id = v["run_id"].as_str().unwrap();

    // The store agrees, through `runs` and `show`.
    let runs = last_json(&run(store.path(), &["runs", "--json"]));
    let row = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == run_id)
        .unwrap();
    assert_eq!(row["status"], "completed");
    assert_eq!(row["evaluations"], 6);
    let out_dir = store.path().join("best");
    let shown = run(
        store.path(),
        &["show", run_id, "--json", "--out", out_dir.to_str().unwrap()],
    );
    let shown = last_json(&shown);
    let evals = shown["evaluations"].as_array().unwrap();
    assert!(
        evals.len() >= 6 + 2,
        "search evaluations plus held-out ones: {}",
        evals.len()
    );
    assert!(evals.iter().any(|e| e["phase"] == "final"));
    // The run's input secret stays in the store: every input set derives from it.
    assert!(
        shown["config"].is_object() && shown["config"].get("input_secret").is_none(),
        "{}",
        shown["config"]
    );
    assert!(!shown.to_string().contains("input_secret"));
    // The exported best candidate is exactly what was measured.
    let exported = Candidate::load(&out_dir).unwrap();
    assert_eq!(exported.hash(), best["candidate"].as_str().unwrap());
}

#[test]
fn a_hang_costs_one_candidate_and_the_run_goes_on() {
    let store = tempfile::tempdir().unwrap();
    let cand = fixture("matmul").join("hang_sometimes");
    let mut args = vec![
        "run",
        "matmul",
        "--candidate",
        cand.to_str().unwrap(),
        "--budget",
        "2",
        // A deadline an honest workload meets however loaded the machine (2 s did not, with four tests
        // at once on two cores); the hanging candidate waits it out once, on its first workload.
        "--timeout",
        "10",
        "--json",
    ];
    args.extend_from_slice(QUICK);
    let out = run(store.path(), &args);
    let v = last_json(&out);
    assert_eq!(v["status"], "completed", "{}", stderr(&out));
    assert_eq!(v["evaluations"], 2);
    assert_eq!(v["best"]["params"]["HANG"], 0);
    let shown = last_json(&run(
        store.path(),
        &["show", v["run_id"].as_str().unwrap(), "--json"],
    ));
    let timeouts: Vec<&Value> = shown["evaluations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["status"] == "timeout")
        .collect();
    assert_eq!(
        timeouts.len(),
        1,
        "the search stops evaluating a candidate at its first failure"
    );
    // Stopped at its deadline, not long after (the kill and the report may take a while under load).
    let elapsed = timeouts[0]["elapsed_s"].as_f64().unwrap();
    assert!((10.0..10.0 + 45.0).contains(&elapsed), "{elapsed} s");
}

/// Starts a run, kills it with SIGKILL once `kill_after` evaluations are stored, returns the run id.
fn start_and_kill(
    store: &Path,
    args: &[&str],
    kill_after: usize,
    resume_of: Option<&str>,
) -> String {
    let child = Killed(
        ksearch(store)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "the run never stored {kill_after} evaluations"
        );
        std::thread::sleep(Duration::from_millis(100));
        let Ok(s) = Store::open(store) else { continue };
        let run_id = match resume_of {
            Some(id) => id.to_string(),
            None => match s.runs().unwrap().first() {
                Some(r) => r.run_id.clone(),
                None => continue,
            },
        };
        if s.evaluations(&run_id).unwrap().len() >= kill_after {
            drop(child);
            return run_id;
        }
    }
}

#[test]
fn a_run_killed_with_sigkill_resumes_and_loses_no_finished_evaluation() {
    let store = tempfile::tempdir().unwrap();
    let seed = QuickSeed::new();
    let mut args = vec!["run", "matmul", "--budget", "8"];
    args.extend_from_slice(&seed.flags());
    args.extend_from_slice(QUICK);
    let run_id = start_and_kill(store.path(), &args, 4, None);
    let before = snapshot(store.path(), &run_id);
    let runs = last_json(&run(store.path(), &["runs", "--json"]));
    assert_eq!(runs[0]["status"], "interrupted");
    // The killed run's evaluator left its build folder; no live evaluator holds it, so gc takes it.
    let workers = || -> Vec<String> {
        std::fs::read_dir(ksearch::eval::build_root(store.path()))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(ksearch::eval::BUILD_PREFIX)
            })
            .map(|e| e.path().display().to_string())
            .collect()
    };
    let left = workers();
    assert!(!left.is_empty(), "the killed run left no build folder");
    let home = tempfile::tempdir().unwrap();
    let gc = ksearch(store.path())
        .env("KSEARCH_HOME", home.path())
        .args(["gc", "--json"])
        .output()
        .unwrap();
    assert!(gc.status.success(), "{}", stderr(&gc));
    let removed: Vec<String> = last_json(&gc)["removed"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "build")
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(removed, left);
    assert!(workers().is_empty(), "{:?}", workers());

    // Kill the resumed run too, at a later point.
    let resume = ["resume", run_id.as_str()];
    let _ = start_and_kill(store.path(), &resume, before.len() + 3, Some(&run_id));
    let middle = snapshot(store.path(), &run_id);
    for (id, e) in &before {
        assert_eq!(
            middle.get(id),
            Some(e),
            "evaluation {id} changed or vanished after the second kill"
        );
    }

    let out = run(store.path(), &["resume", &run_id, "--json"]);
    let v = last_json(&out);
    assert_eq!(v["status"], "completed", "{}", stderr(&out));
    assert_eq!(v["evaluations"], 8);
    let after = snapshot(store.path(), &run_id);
    for (id, e) in &middle {
        assert_eq!(
            after.get(id),
            Some(e),
            "evaluation {id} changed or vanished after resume"
        );
    }
    // No candidate was evaluated twice on the same workload in the search phase.
    let mut seen = std::collections::BTreeSet::new();
    for key in after.values() {
        let (phase, rest) = key.split_once('/').unwrap();
        let (cand, rest) = rest.split_once('/').unwrap();
        let w = rest.split_once('/').unwrap().0;
        assert!(
            seen.insert((phase, cand, w)),
            "{cand} on {w} measured twice"
        );
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.path().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn a_misspelt_field_is_named_with_its_file() {
    let tmp = tempfile::tempdir().unwrap();
    let task = tmp.path().join("mytask");
    copy_dir(&repo().join("tasks/matmul"), &task);
    let toml = std::fs::read_to_string(task.join("task.toml")).unwrap();
    std::fs::write(
        task.join("task.toml"),
        toml.replacen("held_out = true", "held_oot = true", 1),
    )
    .unwrap();
    let out = run(
        tmp.path(),
        &["run", task.to_str().unwrap(), "--budget", "1"],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("mytask/task.toml") && err.contains("held_oot") && err.contains("held_out"),
        "{err}"
    );

    // The same for a candidate's plan.
    let seed = task.join("seeds/cpu/naive/plan.toml");
    std::fs::write(task.join("task.toml"), toml).unwrap();
    let plan = std::fs::read_to_string(&seed).unwrap();
    std::fs::write(&seed, plan.replacen("scalars =", "scalar =", 1)).unwrap();
    let out = run(
        tmp.path(),
        &["run", task.to_str().unwrap(), "--budget", "1"],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("naive/plan.toml") && err.contains("scalar"),
        "{err}"
    );
}

#[test]
fn semantic_task_errors_name_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let task = tmp.path().join("t");
    copy_dir(&repo().join("tasks/matmul"), &task);
    let toml = std::fs::read_to_string(task.join("task.toml")).unwrap();
    let cases = [
        (
            toml.replacen("shape = [\"M\", \"K\"]", "shape = [\"M\", \"Q\"]", 1),
            "input[0].shape",
        ),
        (
            toml.replacen(
                "dims = { M = 512, K = 512, N = 512 }",
                "dims = { M = 512, K = 512 }",
                1,
            ),
            "workload[2].dims",
        ),
        (
            toml.replacen("[tolerance.float32]", "[tolerance.float64]", 1),
            "tolerance",
        ),
        (
            toml.replacen("init = \"uniform(-1, 1)\"", "init = \"gauss(0, 1)\"", 1),
            "input[0].init",
        ),
        (
            toml.replacen("flops = \"2 * M * N * K\"", "flops = \"2 * M * N * Z\"", 1),
            "roofline.flops",
        ),
    ];
    for (text, field) in cases {
        assert_ne!(text, toml, "the replacement for {field} applied");
        std::fs::write(task.join("task.toml"), &text).unwrap();
        let err = ksearch::task::Task::load(&task).unwrap_err().to_string();
        assert!(
            err.contains("task.toml") && err.contains(field),
            "{field}: {err}"
        );
    }
}

/// A seed that does not compile ends the run after its own evaluation, with the compiler's reason, instead
/// of spending the budget on variants that meet the same failure.
#[test]
fn a_seed_that_does_not_compile_stops_the_run_with_the_reason() {
    let store = tempfile::tempdir().unwrap();
    let seed = fixture("matmul/syntax");
    let mut args = vec![
        "run",
        "matmul",
        "--candidate",
        seed.to_str().unwrap(),
        "--budget",
        "10",
        "--json",
    ];
    args.extend_from_slice(QUICK);
    let out = run(store.path(), &args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let v = last_json(&out);
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(v["evaluations"], 1, "{v}");
    let row = &last_json(&run(store.path(), &["runs", "--json"]))[0];
    let shown = last_json(&run(
        store.path(),
        &["show", row["run_id"].as_str().unwrap(), "--json"],
    ));
    assert!(
        shown["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("the seed did not pass") && e.contains("compile")),
        "{shown:#}"
    );
}

/// A run whose evaluator cannot start (here: the task's reference fails to import) is refused before
/// anything is measured, and leaves no empty `interrupted` run in the store.
#[test]
fn a_run_that_cannot_start_leaves_no_run_behind() {
    let store = tempfile::tempdir().unwrap();
    let task = tempfile::tempdir().unwrap();
    copy_dir(&repo().join("tasks/softmax"), task.path());
    std::fs::write(
        task.path().join("reference.py"),
        "raise RuntimeError('this reference is broken')\n",
    )
    .unwrap();
    let out = run(
        store.path(),
        &[
            "run",
            task.path().to_str().unwrap(),
            "--budget",
            "3",
            "--json",
        ],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("this reference is broken") && stderr(&out).contains("was not kept"),
        "{}",
        stderr(&out)
    );
    let runs = last_json(&run(store.path(), &["runs", "--json"]));
    assert_eq!(runs.as_array().unwrap().len(), 0, "{runs}");
}

/// Run management: ids by unique prefix or `last`, an ambiguous prefix named as such, two runs compared
/// per workload, and `runs rm` deleting a run with everything stored for it.
#[test]
fn runs_are_named_by_prefix_or_last_compared_and_removed() {
    let store = tempfile::tempdir().unwrap();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let mut args = vec!["run", "softmax", "--budget", "2", "--json"];
        args.extend_from_slice(QUICK);
        let v = last_json(&run(store.path(), &args));
        ids.push(v["run_id"].as_str().unwrap().to_string());
    }
    let shown = last_json(&run(store.path(), &["show", "last", "--json"]));
    assert_eq!(shown["run_id"], ids[1].as_str());
    // The ids differ in their time or nonce: the shortest prefix that tells them apart names one.
    let split = ids[0]
        .chars()
        .zip(ids[1].chars())
        .take_while(|(a, b)| a == b)
        .count();
    let prefix = &ids[0][..=split];
    let shown = last_json(&run(store.path(), &["show", prefix, "--json"]));
    assert_eq!(shown["run_id"], ids[0].as_str());
    let out = run(store.path(), &["show", "softmax-", "--json"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("names 2 runs"), "{}", stderr(&out));

    let c = last_json(&run(store.path(), &["compare", &ids[0], "last", "--json"]));
    let ws = c["workloads"].as_array().unwrap();
    assert!(!ws.is_empty(), "{c}");
    for w in ws {
        assert!(
            w["a_s"].as_f64().unwrap() > 0.0 && w["b_s"].as_f64().unwrap() > 0.0,
            "{w}"
        );
        assert!(w["b_speedup_over_a"].as_f64().unwrap() > 0.0, "{w}");
    }
    let text = String::from_utf8_lossy(&run(store.path(), &["compare", &ids[0], &ids[1]]).stdout)
        .to_string();
    assert!(text.contains("B over A"), "{text}");

    // A typo deletes nothing; then the first run goes with all it stored.
    assert!(
        !run(store.path(), &["runs", "rm", &ids[0], "no-such-run"])
            .status
            .success()
    );
    assert_eq!(
        last_json(&run(store.path(), &["runs", "--json"]))
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert!(run(store.path(), &["runs", "rm", &ids[0]]).status.success());
    let left = last_json(&run(store.path(), &["runs", "--json"]));
    assert_eq!(left.as_array().unwrap().len(), 1);
    assert_eq!(left[0]["run_id"], ids[1].as_str());
    assert!(!run(store.path(), &["show", &ids[0]]).status.success());
}

/// `run --json` streams progress events on stderr (docs/formats.md §6), one per evaluation, while stdout's
/// last line stays the result.
#[test]
fn a_json_run_streams_progress_events_on_stderr() {
    let store = tempfile::tempdir().unwrap();
    let mut args = vec!["run", "softmax", "--budget", "3", "--json"];
    args.extend_from_slice(QUICK);
    let out = run(store.path(), &args);
    let v = last_json(&out);
    assert_eq!(v["status"], "completed");
    let events: Vec<Value> = stderr(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e.get("event").is_some())
        .collect();
    assert_eq!(events[0]["event"], "started", "{events:?}");
    let evaluated: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "evaluated")
        .collect();
    assert_eq!(evaluated.len(), 3, "{events:?}");
    assert_eq!(evaluated[0]["origin"], "seed");
    for (i, e) in evaluated.iter().enumerate() {
        assert_eq!(e["run_id"], v["run_id"]);
        assert_eq!(e["budget"]["used"], i as u64 + 1, "{e}");
        assert_eq!(e["budget"]["unit"], "evaluations");
        assert!(e["time"].as_f64().unwrap() > 0.0);
    }
    assert!(
        events.iter().any(|e| e["event"] == "final_phase"),
        "{events:?}"
    );
    // What the run was doing between those: each phase of an evaluation, in order for the seed.
    let phases: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "phase")
        .map(|e| e["phase"].as_str().unwrap())
        .collect();
    let first = |p: &str| phases.iter().position(|q| *q == p);
    let order = [
        "evaluating",
        "preparing",
        "compiling",
        "checking",
        "timing",
        "rechecking",
    ];
    let at: Vec<Option<usize>> = order.iter().map(|p| first(p)).collect();
    assert!(at.iter().all(Option::is_some), "{phases:?}");
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{phases:?}");
    let e = events.iter().find(|e| e["phase"] == "evaluating").unwrap();
    assert_eq!(e["index"], 1, "{e}");
    assert!(e["count"].as_u64().unwrap() >= 1, "{e}");
}

/// `doctor` is a checklist: each item passed, missing (with the fix) or a fact; which MLX targets can run
/// here; the hardware facts as prompts state them; a missing interpreter is a failed item with its fix.
#[test]
fn doctor_is_a_checklist_with_fixes() {
    let store = tempfile::tempdir().unwrap();
    let v = last_json(&run(store.path(), &["doctor", "--json"]));
    let checks = v["checks"].as_array().unwrap();
    let item = |name: &str| {
        checks
            .iter()
            .find(|c| c["check"].as_str().unwrap().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {v:#}"))
    };
    assert_eq!(item("python")["ok"], true);
    assert_eq!(item("store")["ok"], true);
    assert!(item("target mlx-cuda")["available"].is_boolean());
    // The cuda target: a fact too, with what it needs where it cannot run (this machine has no NVIDIA GPU).
    let cuda = item("target cuda");
    assert!(
        cuda["ok"].is_null() && cuda["available"].is_boolean(),
        "{cuda}"
    );
    if cuda["available"] == false {
        assert!(
            cuda["fix"].as_str().unwrap().contains("NVIDIA GPU"),
            "{cuda}"
        );
    }
    // Ray is a fact (installed or not), never a failure.
    assert!(item("Ray")["ok"].is_null(), "{}", item("Ray"));
    assert!(
        item("hardware")["detail"]
            .as_str()
            .unwrap()
            .contains("cores")
    );
    assert_eq!(v["ok"], true);
    let text = String::from_utf8_lossy(&run(store.path(), &["doctor"]).stdout).to_string();
    assert!(text.lines().any(|l| l.starts_with("✓ store")), "{text}");

    let out = run(
        store.path(),
        &["--python", "/nonexistent/python3", "doctor"],
    );
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("✗ python") && text.contains("fix: install Python 3.11"),
        "{text}"
    );
}

/// A `resume` that fails before evaluating anything (here: an LLM spec no provider knows) leaves the run
/// as it was: a completed run stays completed, not `interrupted`.
#[test]
fn a_resume_that_fails_early_leaves_the_run_as_it_was() {
    let store = tempfile::tempdir().unwrap();
    let mut args = vec!["run", "softmax", "--budget", "2", "--json"];
    args.extend_from_slice(QUICK);
    let v = last_json(&run(store.path(), &args));
    assert_eq!(v["status"], "completed");
    let id = v["run_id"].as_str().unwrap();
    let out = run(store.path(), &["resume", id, "--llm", "no-such-provider:x"]);
    assert!(!out.status.success());
    let runs = last_json(&run(store.path(), &["runs", "--json"]));
    assert_eq!(runs[0]["status"], "completed", "{runs}");
}

/// A project's `ksearch.toml`, found from a subfolder, sets the task, the budget and the store (relative to
/// the file); a flag overrides it; `ksearch config` says where each value came from.
#[test]
fn a_project_config_file_sets_defaults_that_flags_override() {
    let project = tempfile::tempdir().unwrap();
    let user = tempfile::tempdir().unwrap();
    std::fs::write(
        project.path().join("ksearch.toml"),
        "store = \"st\"\ntask = \"softmax\"\nbudget = 2\nparallel = 2\n",
    )
    .unwrap();
    let sub = project.path().join("a/b");
    std::fs::create_dir_all(&sub).unwrap();
    let cmd = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_ksearch"))
            .current_dir(&sub)
            .env_remove("KSEARCH_STORE")
            .env_remove("KSEARCH_CONFIG")
            .env("XDG_CONFIG_HOME", user.path())
            .args(args)
            .output()
            .unwrap()
    };
    let mut args = vec!["run", "--json"];
    args.extend_from_slice(QUICK);
    let v = last_json(&cmd(&args));
    assert_eq!(v["task"], "softmax", "{v}");
    assert_eq!(v["evaluations"], 2, "{v}");
    assert!(project.path().join("st/ksearch.db").is_file());
    let stored = Store::open(&project.path().join("st"))
        .unwrap()
        .run(v["run_id"].as_str().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.config["parallel"], 2,
        "the file's parallel is the run's"
    );
    let mut args = vec!["run", "--budget", "3", "--json"];
    args.extend_from_slice(QUICK);
    assert_eq!(last_json(&cmd(&args))["evaluations"], 3);
    let c = last_json(&cmd(&["config", "--json"]));
    let budget = c["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "budget")
        .unwrap();
    assert_eq!(budget["value"], 2);
    assert!(
        budget["source"].as_str().unwrap().ends_with("ksearch.toml"),
        "{c}"
    );
    // A misspelt field is named with its file.
    std::fs::write(project.path().join("ksearch.toml"), "budgett = 2\n").unwrap();
    let out = cmd(&["runs"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("budgett") && stderr(&out).contains("ksearch.toml"),
        "{}",
        stderr(&out)
    );
}

/// `--quiet` leaves stderr to errors and warnings: no per-workload lines, no run notice, no progress.
#[test]
fn quiet_leaves_stderr_empty_on_success() {
    let store = tempfile::tempdir().unwrap();
    let seed = repo().join("tasks/softmax/seeds/cpu/naive");
    let mut args = vec!["--quiet", "eval", "softmax", seed.to_str().unwrap()];
    args.extend_from_slice(QUICK);
    let out = run(store.path(), &args);
    assert!(out.status.success());
    assert_eq!(stderr(&out), "");
    let mut args = vec!["-q", "run", "softmax", "--budget", "2"];
    args.extend_from_slice(QUICK);
    let out = run(store.path(), &args);
    assert!(out.status.success());
    assert_eq!(stderr(&out), "");
    assert!(String::from_utf8_lossy(&out.stdout).contains("status completed"));
}

/// Reading commands open the store read-only: a store its reader may not write (a shared results folder)
/// is listed, shown and compared, and nothing is created beside it.
#[test]
fn a_store_its_reader_may_not_write_is_listed_shown_and_compared() {
    use std::os::unix::fs::PermissionsExt;
    let store = tempfile::tempdir().unwrap();
    let mut args = vec!["run", "softmax", "--budget", "2", "--json"];
    args.extend_from_slice(QUICK);
    let out = run(store.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = last_json(&out)["run_id"].as_str().unwrap().to_string();
    let before: Vec<_> = std::fs::read_dir(store.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    // As root, permission bits bind nobody: read as an unprivileged user instead (a copy of the binary
    // it may run; the store folder readable, not writable, by it).
    let root = unsafe { libc::geteuid() } == 0;
    let bin_dir = tempfile::tempdir().unwrap();
    let bin = bin_dir.path().join("ksearch");
    std::fs::copy(env!("CARGO_BIN_EXE_ksearch"), &bin).unwrap();
    for (p, mode) in [
        (bin_dir.path(), 0o755),
        (&bin, 0o755),
        (store.path(), 0o555),
    ] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    for e in std::fs::read_dir(store.path()).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o444)).unwrap();
        }
    }
    let read = |args: &[&str]| {
        let mut c = if root {
            let mut c = std::process::Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&bin);
            c
        } else {
            std::process::Command::new(&bin)
        };
        c.arg("--store")
            .arg(store.path())
            .args(args)
            .env_remove("KSEARCH_STORE")
            .output()
            .unwrap()
    };
    let listed = read(&["runs", "--json"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert_eq!(last_json(&listed)[0]["run_id"], id.as_str());
    let shown = read(&["show", "last", "--json"]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    assert_eq!(last_json(&shown)["run_id"], id.as_str());
    let compared = read(&["compare", &id, "last", "--json"]);
    assert!(compared.status.success(), "{}", stderr(&compared));
    // A writing command is refused with what to do.
    let rm = read(&["runs", "rm", "last"]);
    assert!(!rm.status.success());
    assert!(stderr(&rm).contains("cannot be written"), "{}", stderr(&rm));
    std::fs::set_permissions(store.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let after: Vec<_> = std::fs::read_dir(store.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        before, after,
        "a reading command created files in the store"
    );
    // A folder with no store is not made one by a reading command.
    let empty = tempfile::tempdir().unwrap();
    let out = run(&empty.path().join("none"), &["runs", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(last_json(&out), serde_json::json!([]));
    assert!(!empty.path().join("none").exists());
    let out = run(&empty.path().join("none"), &["show", "last"]);
    assert!(stderr(&out).contains("no store here"), "{}", stderr(&out));
}

/// `gc` removes the candidates `runs rm` left behind (`--dry-run` only lists them) and cache entries of
/// other versions unused for longer than `--older-than`; what is young or in use stays.
#[test]
fn gc_collects_orphaned_candidates_and_old_cache_entries_only() {
    let store = tempfile::tempdir().unwrap();
    let mut args = vec!["run", "softmax", "--budget", "2", "--json"];
    args.extend_from_slice(QUICK);
    let out = run(store.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let home = tempfile::tempdir().unwrap();
    let old = home.path().join("venv-000000000000");
    let young = home.path().join("python-111111111111");
    let other = home.path().join("llama");
    for d in [&old, &young, &other] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("f"), b"0123456789").unwrap();
    }
    let month_ago = std::time::SystemTime::now() - Duration::from_secs(30 * 86_400);
    for d in [&old, &other] {
        std::fs::File::open(d)
            .unwrap()
            .set_modified(month_ago)
            .unwrap();
    }
    let gc = |extra: &[&str]| {
        let mut a = vec!["gc", "--json"];
        a.extend_from_slice(extra);
        let out = ksearch(store.path())
            .env("KSEARCH_HOME", home.path())
            .args(&a)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        last_json(&out)
    };
    // Nothing of the store is orphaned while its run is kept.
    let v = gc(&["--dry-run"]);
    let kinds = |v: &Value, k: &str| {
        v["removed"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["kind"] == k)
            .map(|i| i["name"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert!(kinds(&v, "candidate").is_empty(), "{v}");
    assert_eq!(kinds(&v, "version"), [old.display().to_string()], "{v}");
    assert!(old.exists(), "--dry-run removed something");
    assert!(run(store.path(), &["runs", "rm", "last"]).status.success());
    let v = gc(&["--dry-run"]);
    let orphans = kinds(&v, "candidate");
    assert!(orphans.len() >= 2, "the seed and its variant: {v}");
    let v = gc(&[]);
    assert_eq!(kinds(&v, "candidate"), orphans);
    assert!(v["bytes"].as_u64().unwrap() >= 10, "{v}");
    assert!(!old.exists() && young.exists() && other.exists());
    let v = gc(&[]);
    assert!(v["removed"].as_array().unwrap().is_empty(), "{v}");
    // A threshold of 0 days takes young entries of other versions too.
    let v = gc(&["--older-than", "0"]);
    assert_eq!(kinds(&v, "version"), [young.display().to_string()], "{v}");
}

/// `--color`: status words are coloured on a terminal (`auto`), never when piped or with NO_COLOR set,
/// and always with `--color always`, even piped; `--color never` wins on a terminal. Tables fit the
/// terminal's width; piped, they are left whole.
#[test]
fn color_and_width_follow_the_flag_the_terminal_and_no_color() {
    let store = tempfile::tempdir().unwrap();
    let mut args = vec!["run", "softmax", "--budget", "2", "--json"];
    args.extend_from_slice(QUICK);
    assert!(run(store.path(), &args).status.success());
    let escapes = |o: &[u8]| String::from_utf8_lossy(o).matches("\u{1b}[").count();
    let piped = run(store.path(), &["runs"]);
    assert_eq!(escapes(&piped.stdout), 0);
    let forced = run(store.path(), &["runs", "--color", "always"]);
    assert!(escapes(&forced.stdout) > 0);
    assert!(String::from_utf8_lossy(&forced.stdout).contains("completed"));
    // On a terminal (util-linux's `script` gives the command a pseudo-terminal).
    let on_tty = |extra: &str, no_color: bool| {
        let cmd = format!(
            "{} --store {} runs {extra}",
            env!("CARGO_BIN_EXE_ksearch"),
            store.path().display()
        );
        let mut c = std::process::Command::new("script");
        c.args(["-qec", &cmd, "/dev/null"])
            .env_remove("KSEARCH_STORE")
            .env("COLUMNS", "200");
        if no_color {
            c.env("NO_COLOR", "1");
        } else {
            c.env_remove("NO_COLOR");
        }
        let out = c.output().expect("util-linux `script` runs");
        assert!(out.status.success(), "{}", stderr(&out));
        escapes(&out.stdout)
    };
    // Tables fit the terminal's width there, and piped output is left whole.
    let cmd = format!(
        "stty cols 60; {} --store {} runs --color never",
        env!("CARGO_BIN_EXE_ksearch"),
        store.path().display()
    );
    let narrow = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env_remove("KSEARCH_STORE")
        .output()
        .unwrap();
    let widest = |o: &[u8]| {
        String::from_utf8_lossy(o)
            .replace('\r', "")
            .lines()
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0)
    };
    assert!(
        widest(&narrow.stdout) <= 60,
        "{}",
        String::from_utf8_lossy(&narrow.stdout)
    );
    assert!(
        widest(&piped.stdout) > 60,
        "{}",
        String::from_utf8_lossy(&piped.stdout)
    );
    assert!(on_tty("", false) > 0);
    assert_eq!(on_tty("", true), 0);
    assert_eq!(on_tty("--color never", false), 0);
    assert!(on_tty("--color always", true) > 0);
}

/// `--devices 2` on the CPU target: two workers, each pinned to its own core (the workers themselves see
/// one core), a tune batch evaluated over both, the devices named in the result. On a machine with fewer
/// than two cores the flag is refused with the count it has.
#[test]
fn cpu_devices_are_workers_pinned_to_their_own_cores() {
    let store = tempfile::tempdir().unwrap();
    let cores = ksearch::devices::available_cores();
    let seed = QuickSeed::new();
    let mut args = vec![
        "run",
        "matmul",
        "--budget",
        "5",
        "--parallel",
        "2",
        "--devices",
        "2",
        "--json",
    ];
    args.extend_from_slice(&seed.flags());
    args.extend_from_slice(QUICK);
    let out = run(store.path(), &args);
    if cores.len() < 2 {
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("give 1 to 1 workers"),
            "{}",
            stderr(&out)
        );
        return;
    }
    assert!(out.status.success(), "{}", stderr(&out));
    let v = last_json(&out);
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["evaluations"], 5);
    let labels: Vec<&str> = v["devices"]
        .as_array()
        .expect("the devices in the result")
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert_eq!(labels.len(), 2, "{labels:?}");
    let store = ksearch::store::Store::open(store.path()).unwrap();
    let hello = store
        .run(v["run_id"].as_str().unwrap())
        .unwrap()
        .unwrap()
        .hello;
    let devices = hello["devices"].as_array().expect("every worker's device");
    let mut pinned: Vec<u64> = Vec::new();
    for d in devices {
        let own = d["device"]["cores"].as_array().expect("pinned cores");
        assert_eq!(
            d["cores"],
            own.len() as u64,
            "the worker sees only its cores: {d}"
        );
        pinned.extend(own.iter().map(|c| c.as_u64().unwrap()));
    }
    let distinct: std::collections::BTreeSet<&u64> = pinned.iter().collect();
    assert_eq!(distinct.len(), pinned.len(), "no core shared: {pinned:?}");
}
