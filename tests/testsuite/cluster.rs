//! `--cluster`: the workers as Ray actors on a real local Ray head (`ray start --head` with two worker
//! slots), started inside the test from the worker's managed environment (Ray installed into it as
//! `--cluster` installs it). A search through the cluster makes the choices a local one makes.

use crate::common::*;
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// A Ray head on this machine, run in the foreground (`--block`) in a process group of its own, so that
/// dropping it kills this head and everything it started, and no other Ray on the machine.
struct RayHead {
    head: Killed,
    address: String,
    _temp: tempfile::TempDir,
}

impl Drop for RayHead {
    fn drop(&mut self) {
        // SAFETY: a signal to a process group this test created.
        unsafe {
            libc::killpg(self.head.0.id() as i32, libc::SIGKILL);
        }
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
    args.push("--block".into());
    let mut child = Command::new(&ray)
        .args(&args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let address = format!("127.0.0.1:{port}");
    // Up when its GCS port answers.
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(&address).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err);
            panic!("ray start --head ended ({status}): {err}");
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "the Ray head never listened on {address}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    RayHead {
        head: Killed(child),
        address,
        _temp: temp,
    }
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

/// One head for both scenarios, one after the other: two heads at once would share the machine's Ray
/// processes (`ray::Holder` actors) and each other's kills.
#[test]
fn searches_through_a_local_ray_cluster() {
    let head = start_head();
    a_search_through_the_cluster_makes_the_choices_of_a_local_one(&head);
    actors_lost_mid_run_are_replaced_and_the_evaluation_asked_again(&head);
}

/// `run scan`: a tune search of 3 evaluations, 2 at a time, then `extra`.
fn tune_search<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "run",
        "scan",
        "--strategy",
        "tune",
        "--budget",
        "3",
        "--parallel",
        "2",
        "--json",
    ];
    args.extend_from_slice(QUICK);
    args.extend_from_slice(extra);
    args
}

fn a_search_through_the_cluster_makes_the_choices_of_a_local_one(head: &RayHead) {
    let search = |extra: &[&str]| -> (tempfile::TempDir, Value) {
        let store = tempfile::tempdir().unwrap();
        let mut args = tune_search(&["--rng-seed", "7"]);
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
    // The workers ran in the actors, each in a network namespace of its own.
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

/// Ray actors killed mid-run (as a node is lost): each bridge replaces its actor, gives it the requests that
/// set the old one up, and asks again; the run completes with every candidate passing, none charged a crash.
fn actors_lost_mid_run_are_replaced_and_the_evaluation_asked_again(head: &RayHead) {
    let store = tempfile::tempdir().unwrap();
    let mut args = vec!["-vv"];
    args.extend(tune_search(&["--devices", "2", "--cluster", &head.address]));
    let mut child = ksearch(store.path())
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once the first evaluation is stored, every actor holding a worker is killed.
    let started = std::time::Instant::now();
    let mut killed = 0;
    while killed == 0 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(240),
            "no evaluation was stored"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before an actor could be killed"
        );
        let stored = ksearch::store::Store::open(store.path())
            .ok()
            .and_then(|s| {
                let run = s.runs().ok()?.first()?.run_id.clone();
                Some(s.evaluations(&run).ok()?.len())
            })
            .unwrap_or(0);
        if stored == 0 {
            continue;
        }
        // This head's actors only: they are in its process group.
        let pids = Command::new("pgrep")
            .args(["-g", &head.head.0.id().to_string(), "-f", "ray::Holder"])
            .output()
            .unwrap();
        for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
            if Command::new("kill")
                .args(["-9", pid])
                .status()
                .unwrap()
                .success()
            {
                killed += 1;
            }
        }
    }
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let v = last_json(&out);
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["evaluations"], 3);
    assert!(err.contains("was lost"), "no actor was replaced: {err}");
    let run_id = v["run_id"].as_str().unwrap();
    let done = attempts(store.path(), run_id);
    assert!(done.iter().all(|(_, passed)| *passed), "{done:?}");
    assert_eq!(
        v["worker_restarts"], 0,
        "a lost actor is no worker crash: {v}"
    );
}
