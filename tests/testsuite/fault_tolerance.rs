//! Fault tolerance of runs: kill -9 at many moments, then resume, loses nothing that was finished; a full
//! disk stops a run with a clear error and loses nothing; two runs sharing one store do not disturb each
//! other. (A locked store: `store::tests::a_store_locked_too_long_says_so`.)

use crate::common::*;
use ksearch::store::Store;
use std::process::Stdio;
use std::time::{Duration, Instant};

#[test]
fn kill_9_at_20_random_moments_then_resume_loses_no_finished_evaluation() {
    // 40 evaluations: 20 kills, each 0.15-3 s after a restart, leave most of them to the final resume.
    kill_9_at_random_moments(&[], 40, 20);
}

/// The same with a tune search proposing batches of 4 over two CPU workers, each pinned to its own core
/// (one where the machine has one): a kill lands while both devices evaluate, or between a batch's
/// results and its attempts.
#[test]
fn kill_9_during_batches_over_two_devices_then_resume_loses_no_finished_evaluation() {
    let devices = if ksearch::devices::available_cores().len() >= 2 {
        "2"
    } else {
        "1"
    };
    kill_9_at_random_moments(&["--parallel", "4", "--devices", devices], 24, 10);
}

/// A tune run of matmul with `budget` evaluations and `extra` flags, killed with SIGKILL at `kills` random
/// moments and resumed after each, then resumed to the end: no stored evaluation ever changes or vanishes.
fn kill_9_at_random_moments(extra: &[&str], budget: usize, kills: usize) {
    // Random moments, not moments tied to stored evaluations: a kill lands inside compiles, checks,
    // timing, store writes or the worker's start, wherever the process happens to be. The seed is
    // printed; KSEARCH_TEST_SEED replays a failing sequence.
    let seed = std::env::var("KSEARCH_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("KSEARCH_TEST_SEED={seed}");
    let mut rng = ksearch::rng::Rng::new(seed);
    let store = tempfile::tempdir().unwrap();
    let mut args = vec![
        "run".to_string(),
        "matmul".into(),
        "--budget".into(),
        budget.to_string(),
    ];
    args.extend(QUICK.iter().map(|s| s.to_string()));
    let quick = QuickSeed::new();
    args.extend(quick.flags().map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut run_id: Option<String> = None;
    let mut kept = std::collections::BTreeMap::new();
    let mut mid_run = 0;
    for _ in 0..kills {
        let mut cmd = ksearch(store.path());
        match &run_id {
            None => cmd.args(&args),
            Some(id) => cmd.args(["resume", id]),
        };
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if run_id.is_none() {
            // The first kill comes after the run exists, so later ones have a run to resume.
            let start = Instant::now();
            while run_id.is_none() {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "the run never appeared"
                );
                std::thread::sleep(Duration::from_millis(20));
                run_id = Store::open(store.path())
                    .ok()
                    .and_then(|s| s.runs().ok())
                    .and_then(|r| r.first().map(|r| r.run_id.clone()));
            }
        }
        std::thread::sleep(Duration::from_millis(150 + rng.below(2850) as u64));
        if child.try_wait().unwrap().is_none() {
            mid_run += 1;
        }
        drop(Killed(child));
        let now = snapshot(store.path(), run_id.as_ref().unwrap());
        for (id, e) in &kept {
            assert_eq!(
                now.get(id),
                Some(e),
                "evaluation {id} changed or vanished after a kill (KSEARCH_TEST_SEED={seed})"
            );
        }
        kept = now;
    }
    assert!(
        mid_run * 4 >= kills * 3,
        "only {mid_run} of {kills} kills hit a running process"
    );
    assert!(
        kept.len() < budget,
        "the kills should interrupt the run, not follow it"
    );
    let id = run_id.unwrap();
    let v = last_json(&run(store.path(), &["resume", &id, "--json"]));
    assert_eq!(v["status"], "completed", "{v} (KSEARCH_TEST_SEED={seed})");
    assert_eq!(v["evaluations"], budget);
    let end = snapshot(store.path(), &id);
    for (k, e) in &kept {
        assert_eq!(
            end.get(k),
            Some(e),
            "evaluation {k} lost by the final resume (KSEARCH_TEST_SEED={seed})"
        );
    }
    // Every search attempt finished, numbered without a gap.
    let attempts = Store::open(store.path())
        .unwrap()
        .attempts(&id, Some(ksearch::store::Phase::Search))
        .unwrap();
    assert_eq!(attempts.len(), budget);
    assert!(
        attempts
            .iter()
            .enumerate()
            .all(|(i, a)| a.finished && a.seq == i as i64)
    );
}

/// A small tmpfs: a disk that can really fill up. Unmounted on drop.
struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    fn mount(bytes: u64) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallDisk(dir))
    }

    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.0.path().join("filler")).unwrap();
        let chunk = vec![0u8; 64 << 10];
        while f.write_all(&chunk).and_then(|_| f.flush()).is_ok() {}
        // The last partial chunk may leave a few bytes: take them too.
        while f.write_all(&[0u8; 512]).is_ok() {}
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.0.path())
            .status();
    }
}

#[test]
fn a_full_disk_stops_the_run_with_a_clear_error_and_resume_finishes_it() {
    let Some(disk) = SmallDisk::mount(4 << 20) else {
        // Mounting needs CAP_SYS_ADMIN (root in this project's CI); say so rather than pass quietly.
        eprintln!("SKIPPED: cannot mount a tmpfs here, so no disk can be filled");
        return;
    };
    let store = disk.0.path();
    let seed = QuickSeed::new();
    let mut args = vec!["run", "matmul", "--budget", "8"];
    args.extend_from_slice(&seed.flags());
    args.extend_from_slice(QUICK);
    let child = ksearch(store)
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let id = loop {
        assert!(start.elapsed() < Duration::from_secs(120), "no progress");
        std::thread::sleep(Duration::from_millis(50));
        let Ok(s) = Store::open(store) else { continue };
        let Some(r) = s.runs().unwrap().first().cloned() else {
            continue;
        };
        if s.evaluations(&r.run_id).unwrap().len() >= 3 {
            break r.run_id;
        }
    };
    disk.fill();
    let before = snapshot(store, &id);
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(!out.status.success(), "the run went on with a full disk");
    assert!(
        err.contains("ksearch.db")
            && err.contains("disk holding the store is full")
            && err.contains("ksearch resume"),
        "{err}"
    );
    std::fs::remove_file(store.join("filler")).unwrap();
    let v = last_json(&run(store, &["resume", &id, "--json"]));
    assert_eq!(v["status"], "completed");
    assert_eq!(v["evaluations"], 8);
    let end = snapshot(store, &id);
    for (k, e) in &before {
        assert_eq!(end.get(k), Some(e), "evaluation {k} lost to the full disk");
    }
}

/// Processes opening a fresh store together: turning it to WAL and creating the schema take locks SQLite
/// does not wait for, so without the store's open lock one of them failed at once with "database is
/// locked" (a clean-clone CI run failed on it). A writing command opens (and creates) the store: `resume`
/// of a run that does not exist, which then fails on the name, never on the store.
#[test]
fn processes_opening_a_fresh_store_together_all_succeed() {
    for _ in 0..16 {
        let store = tempfile::tempdir().unwrap();
        let children: Vec<_> = (0..6)
            .map(|_| {
                ksearch(store.path())
                    .args(["resume", "no-such-run"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(
                stderr(&out).contains("no run `no-such-run`"),
                "{}",
                stderr(&out)
            );
        }
        assert!(store.path().join("ksearch.db").is_file());
    }
}

#[test]
fn two_runs_on_one_store_do_not_disturb_each_other() {
    let store = tempfile::tempdir().unwrap();
    let spawn = |task: &str| {
        let mut args = vec!["run", task, "--budget", "4", "--json"];
        args.extend_from_slice(QUICK);
        ksearch(store.path())
            // Writers hold the store for milliseconds: a wait of 5 s (not the default 30) must never run out,
            // however loaded the machine.
            .env("KSEARCH_STORE_BUSY_MS", "5000")
            // Each run prints the longest it held the store's write lock (`Store::drop`).
            .env("KSEARCH_STORE_HOLDS", "1")
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
        // The longest write-lock hold, measured: milliseconds (bounded here at 1 s, far above what a
        // statement takes even on a loaded machine, far below any evaluation or LLM call).
        let err = stderr(out);
        let line = err
            .lines()
            .find(|l| l.starts_with("ksearch-store: longest write hold "))
            .unwrap_or_else(|| panic!("no hold measured: {err}"));
        let ms: f64 = line["ksearch-store: longest write hold ".len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        eprintln!("{line}");
        assert!(ms < 1000.0, "{line}");
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

/// The run's lease: while one `resume` works on a run, a second is refused with the holder's pid, and
/// the first finishes the run alone.
#[test]
fn a_second_resume_of_a_run_in_progress_is_refused_with_the_holders_pid() {
    let store = tempfile::tempdir().unwrap();
    let seed = QuickSeed::new();
    let mut args = vec!["run", "matmul", "--budget", "6"];
    args.extend_from_slice(&seed.flags());
    args.extend_from_slice(QUICK);
    let first = ksearch(store.path())
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run_id = wait_for_run(store.path());
    drop(Killed(first));
    let resume = |extra: &[&str]| {
        let mut c = ksearch(store.path());
        c.args(["resume", &run_id]).args(extra);
        c
    };
    let holder = resume(&["--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the resume holds the lease (the store names its pid), then try a second one.
    let start = Instant::now();
    loop {
        let row = Store::open(store.path())
            .unwrap()
            .run(&run_id)
            .unwrap()
            .unwrap();
        if row.status == ksearch::store::RunStatus::Running && row.pid == Some(holder.id() as i64) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no lease taken");
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = resume(&["--json"]).output().unwrap();
    assert!(!second.status.success(), "{}", stderr(&second));
    assert!(
        stderr(&second).contains(&format!("being worked on by process {}", holder.id())),
        "{}",
        stderr(&second)
    );
    let out = holder.wait_with_output().unwrap();
    let v = last_json(&out);
    assert_eq!(v["status"], "completed", "{}", stderr(&out));
    assert_eq!(v["evaluations"], 6);
}

fn wait_for_run(store: &std::path::Path) -> String {
    let start = Instant::now();
    loop {
        if let Some(id) = Store::open(store)
            .ok()
            .and_then(|s| s.runs().ok())
            .and_then(|r| r.first().map(|r| r.run_id.clone()))
        {
            return id;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the run never appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Damage in the middle of the store file is found when the store is opened, and nothing more is written
/// into it: every command refuses with what to do.
#[test]
fn a_damaged_store_is_refused_at_open_with_the_fix() {
    let store = tempfile::tempdir().unwrap();
    let mut args = vec!["run", "softmax", "--budget", "2", "--json"];
    args.extend_from_slice(QUICK);
    assert!(run(store.path(), &args).status.success());
    let db = store.path().join("ksearch.db");
    let before = std::fs::read(&db).unwrap();
    // Every page after the first gets a broken b-tree page header.
    let mut damaged = before.clone();
    for page in (4096..damaged.len()).step_by(4096) {
        damaged[page] = 0x0d;
        damaged[page + 1..page + 8].fill(0xff);
    }
    std::fs::write(&db, &damaged).unwrap();
    for cmd in [vec!["runs"], args.clone()] {
        let out = run(store.path(), &cmd);
        assert!(!out.status.success(), "{cmd:?}");
        assert!(
            stderr(&out).contains("the store file is damaged") && stderr(&out).contains("--store"),
            "{cmd:?}: {}",
            stderr(&out)
        );
    }
    assert_eq!(
        std::fs::read(&db).unwrap(),
        damaged,
        "nothing written into it"
    );
}
