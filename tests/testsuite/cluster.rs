//! `--cluster`: the workers as Ray actors on a real local Ray head (`ray start --head` with two worker
//! slots), started inside the test from the worker's managed environment (Ray installed into it as
//! `--cluster` installs it). A search through the cluster makes the choices a local one makes.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A Ray head on this machine, stopped (with everything Ray started) however the test leaves.
struct RayHead {
    ray: PathBuf,
    address: String,
    _temp: tempfile::TempDir,
}

impl Drop for RayHead {
    fn drop(&mut self) {
        let _ = Command::new(&self.ray).args(["stop", "--force"]).output();
    }
}

/// A port no one listens on now (the OS picks it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_head() -> RayHead {
    let env = ksearch::pyenv::ensure(None).expect("the managed worker environment");
    env.ensure_ray().expect("Ray installs into it");
    let ray = env.python.parent().unwrap().join("ray");
    // Short: Ray's socket paths live under it.
    let temp = tempfile::Builder::new()
        .prefix("ksr")
        .tempdir_in("/tmp")
        .unwrap();
    let port = free_port();
    let mut args: Vec<String> = [
        "start",
        "--head",
        "--num-cpus",
        "2",
        "--include-dashboard=false",
        "--disable-usage-stats",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Every port Ray would otherwise take from its defaults, free ones, so no fixed port is shared.
    for (flag, p) in [
        ("--port", port),
        ("--ray-client-server-port", free_port()),
        ("--dashboard-agent-listen-port", free_port()),
        ("--dashboard-agent-grpc-port", free_port()),
        ("--metrics-export-port", free_port()),
        ("--runtime-env-agent-port", free_port()),
    ] {
        args.push(format!("{flag}={p}"));
    }
    args.push(format!("--temp-dir={}", temp.path().display()));
    let head = RayHead {
        ray: ray.clone(),
        address: format!("127.0.0.1:{port}"),
        _temp: temp,
    };
    let out = Command::new(&ray).args(&args).output().unwrap();
    assert!(
        out.status.success(),
        "ray start --head failed: {}",
        stderr(&out)
    );
    head
}

/// The search attempts of a run: (candidate, passed), in order.
fn attempts(store: &Path, run_id: &str) -> Vec<(String, bool)> {
    ksearch::store::Store::open(store)
        .unwrap()
        .attempts(run_id, Some(ksearch::store::Phase::Search))
        .unwrap()
        .into_iter()
        .map(|a| (a.candidate, a.summary.is_some_and(|s| s.passed)))
        .collect()
}

#[test]
fn a_search_through_a_local_ray_cluster_makes_the_choices_of_a_local_one() {
    let head = start_head();
    let search = |extra: &[&str]| -> (tempfile::TempDir, Value) {
        let store = tempfile::tempdir().unwrap();
        let mut args = vec![
            "run",
            "scan",
            "--strategy",
            "tune",
            "--budget",
            "3",
            "--parallel",
            "2",
            "--rng-seed",
            "7",
            "--json",
        ];
        args.extend_from_slice(QUICK);
        args.extend_from_slice(extra);
        let out = run(store.path(), &args);
        assert!(out.status.success(), "{}", stderr(&out));
        let v = last_json(&out);
        (store, v)
    };
    let (cluster_store, on_cluster) = search(&["--cluster", &head.address, "--devices", "2"]);
    let (local_store, local) = search(&[]);
    for v in [&on_cluster, &local] {
        assert_eq!(v["status"], "completed", "{v}");
        assert_eq!(v["evaluations"], 3);
    }
    let labels = on_cluster["devices"].as_array().expect("the actors");
    assert_eq!(labels.len(), 2);
    assert!(
        labels
            .iter()
            .all(|l| l.as_str().unwrap().starts_with("ray actor at"))
    );
    // Everything but timings: the same candidates in the same order, each with the same verdict.
    let (c, l) = (
        attempts(cluster_store.path(), on_cluster["run_id"].as_str().unwrap()),
        attempts(local_store.path(), local["run_id"].as_str().unwrap()),
    );
    assert_eq!(c, l);
    assert!(c.iter().all(|(_, passed)| *passed), "{c:?}");
    // The workers ran in the actors, confined there: their own network namespace, no secrets.
    let hello = ksearch::store::Store::open(cluster_store.path())
        .unwrap()
        .run(on_cluster["run_id"].as_str().unwrap())
        .unwrap()
        .unwrap()
        .hello;
    assert_eq!(hello["remote"]["network_isolated"], true, "{hello}");
    assert_eq!(hello["sandbox"]["network_isolated"], true, "{hello}");
    assert_ne!(
        hello["remote"]["pid"].as_u64(),
        None,
        "the worker's pid on its node: {hello}"
    );
}

#[test]
fn a_cluster_address_that_does_not_parse_is_refused_before_anything_starts() {
    let store = tempfile::tempdir().unwrap();
    let out = run(store.path(), &["run", "scan", "--cluster", "nowhere"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("ray://HOST:PORT"), "{}", stderr(&out));
    assert!(
        !store.path().join("ksearch.db").exists() || {
            let s = ksearch::store::Store::open(store.path()).unwrap();
            s.runs().unwrap().is_empty()
        }
    );
}
