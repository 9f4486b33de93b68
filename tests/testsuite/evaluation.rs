//! The evaluator's verdicts on candidates built to fail in specific ways (tests/fixtures/matmul).
//! Each goes through the real binary, worker and compiler.

use crate::common::*;
use serde_json::Value;

fn eval(name: &str, extra: &[&str]) -> (Value, std::process::Output) {
    let store = tempfile::tempdir().unwrap();
    let dir = fixture("matmul").join(name);
    let mut args = vec!["eval", "matmul", dir.to_str().unwrap(), "--json"];
    args.extend_from_slice(QUICK);
    args.extend_from_slice(extra);
    let out = run(store.path(), &args);
    (last_json(&out), out)
}

fn statuses(v: &Value) -> Vec<String> {
    v["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["status"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_correct_kernel_passes_every_workload_with_timings_and_baseline() {
    let (v, out) = eval("correct", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(v["passed"], true);
    let ws = v["workloads"].as_array().unwrap();
    assert_eq!(ws.len(), 5, "every workload, held-out ones included");
    assert_eq!(ws.iter().filter(|w| w["held_out"] == true).count(), 2);
    for w in ws {
        assert_eq!(w["status"], "passed", "{w}");
        let median = w["median_s"].as_f64().unwrap();
        assert!(median > 0.0);
        assert!(
            w["baselines"]["numpy"].as_f64().unwrap() > 0.0,
            "baseline timed in the same worker"
        );
        assert!(w["roofline_fraction"].as_f64().unwrap() > 0.0);
        assert_eq!(w["seeds"].as_array().unwrap().len(), 1);
    }
    assert!(v["hardware"]["peak_gflops"].as_f64().unwrap() > 0.0);
}

#[test]
fn a_kernel_that_writes_nothing_is_wrong() {
    let (v, out) = eval("nothing", &[]);
    assert!(!out.status.success());
    assert_eq!(v["passed"], false);
    assert!(statuses(&v).iter().all(|s| s == "wrong"), "{v}");
    assert!(
        v["workloads"][0]["message"]
            .as_str()
            .unwrap()
            .contains("unwritten"),
        "{v}"
    );
}

#[test]
fn a_kernel_that_writes_half_the_output_is_wrong() {
    let (v, _) = eval("partial", &[]);
    // gemv1x512x1000 has M = 1: M/2 = 0 rows written.
    assert!(statuses(&v).iter().all(|s| s == "wrong"), "{v}");
    let msg = v["workloads"][0]["message"].as_str().unwrap();
    assert!(msg.contains("unwritten"), "{msg}");
}

#[test]
fn a_kernel_that_loops_forever_times_out_within_its_deadline() {
    // The suite's 10 s floor for deadlines; --fail-fast: the first workload's timeout ends the evaluation, as
    // in a search (a fresh kernel host per workload after a failure is a_crashing_kernel_costs_only_itself's).
    let (v, out) = eval("hang", &["--timeout", "10", "--fail-fast"]);
    assert!(!out.status.success());
    let ws = v["workloads"].as_array().unwrap();
    assert_eq!(ws.len(), 1, "{v}");
    assert_eq!(ws[0]["status"], "timeout", "{v}");
    // At its deadline, not before; the kill and the report may take a while on a loaded machine.
    let elapsed = ws[0]["elapsed_s"].as_f64().unwrap();
    assert!(
        (10.0..10.0 + 45.0).contains(&elapsed),
        "reported after {elapsed} s"
    );
}

#[test]
fn a_crashing_kernel_costs_only_itself() {
    let (v, _) = eval("crash", &[]);
    let ws = v["workloads"].as_array().unwrap();
    // Every workload got a fresh kernel host after the previous one died; the worker went on serving.
    assert_eq!(ws.len(), 5);
    for w in ws {
        assert_eq!(w["status"], "crash", "{w}");
        assert!(w["message"].as_str().unwrap().contains("SIGSEGV"), "{w}");
    }
    // With --fail-fast the evaluation ends at the first workload that does not pass, as a search's does.
    let (v, out) = eval("crash", &["--fail-fast"]);
    assert_eq!(statuses(&v), ["crash"], "{v}");
    assert_eq!(v["passed"], false);
    assert!(!out.status.success());
}

#[test]
fn compiler_errors_come_back_with_the_compilers_message() {
    let (v, _) = eval("syntax", &[]);
    assert!(statuses(&v).iter().all(|s| s == "compile_error"), "{v}");
    // For people the compiler's message is printed once, naming every workload it came from.
    let store = tempfile::tempdir().unwrap();
    let dir = fixture("matmul").join("syntax");
    let mut args = vec!["eval", "matmul", dir.to_str().unwrap()];
    args.extend_from_slice(QUICK);
    let text = String::from_utf8_lossy(&run(store.path(), &args).stdout).to_string();
    assert_eq!(text.matches("error: expected").count(), 1, "{text}");
    assert!(text.contains("sq256, rect384x320x512, sq512"), "{text}");
    assert!(
        v["workloads"][0]["message"]
            .as_str()
            .unwrap()
            .contains("error"),
        "{v}"
    );
    // A definition that disagrees with the plan's generated prototype does not compile.
    let (v, _) = eval("badsig", &[]);
    assert!(statuses(&v).iter().all(|s| s == "compile_error"), "{v}");
    assert!(
        v["workloads"][0]["message"]
            .as_str()
            .unwrap()
            .contains("conflicting types"),
        "{v}"
    );
}

#[test]
fn eval_takes_tunable_values_and_a_subset_of_workloads() {
    let store = tempfile::tempdir().unwrap();
    let seed = repo().join("tasks/matmul/seeds/cpu/naive");
    let seed = seed.to_str().unwrap();
    let mut args = vec![
        "eval", "matmul", seed, "--json", "--set", "BM=32", "--set", "BN=64",
    ];
    args.extend_from_slice(&["--workload", "sq256", "--workload", "gemv1x512x1000"]);
    args.extend_from_slice(QUICK);
    let out = run(store.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = last_json(&out);
    assert_eq!(v["params"]["BM"], 32, "{v}");
    assert_eq!(v["params"]["BN"], 64, "{v}");
    let names: Vec<&str> = v["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["workload"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sq256", "gemv1x512x1000"], "in the task's order");
    let defaults = run(
        store.path(),
        &["eval", "matmul", seed, "--json", "--workload", "sq256"],
    );
    assert_ne!(
        last_json(&defaults)["candidate"],
        v["candidate"],
        "other tunable values are another candidate"
    );

    for (bad, says) in [
        (vec!["--set", "BM=33"], "BM = 33 is not one of"),
        (
            vec!["--set", "NOPE=1"],
            "`NOPE` is not a tunable of `naive` (its tunables: BK, BM, BN,",
        ),
        (vec!["--set", "BM"], "expected NAME=VALUE"),
        (vec!["--set", "=4"], "expected NAME=VALUE"),
        (
            vec!["--set", "BM=32", "--set", "BM=64"],
            "--set BM is given twice",
        ),
        (vec!["--set", "MR=2"], "break a constraint of"),
        (
            vec!["--workload", "sq257"],
            "has no such workload (it has: sq256,",
        ),
    ] {
        let mut args = vec!["eval", "matmul", seed];
        args.extend_from_slice(&bad);
        let out = run(store.path(), &args);
        assert!(!out.status.success(), "{bad:?}");
        assert!(stderr(&out).contains(says), "{bad:?}: {}", stderr(&out));
    }
}
