//! Shared helpers of the integration tests: run the real `ksearch` binary against a private store.
#![allow(dead_code)]

pub mod server;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures").join(name)
}

/// Every shipped seed folder of `target` as (task name, seed folder), sorted.
pub fn shipped_seeds(target: &str) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(repo().join("tasks")).unwrap().flatten() {
        if let Ok(seeds) = std::fs::read_dir(task.path().join("seeds").join(target)) {
            for s in seeds
                .flatten()
                .filter(|s| s.path().join("plan.toml").is_file())
            {
                out.push((task.file_name().to_string_lossy().to_string(), s.path()));
            }
        }
    }
    out.sort();
    out
}

pub fn ksearch(store: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ksearch"));
    c.arg("--store").arg(store).env_remove("KSEARCH_STORE");
    c
}

pub fn run(store: &Path, args: &[&str]) -> Output {
    ksearch(store).args(args).output().expect("ksearch starts")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// The JSON object on the last stdout line (the `--json` contract).
pub fn last_json(o: &Output) -> Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no stdout; stderr:\n{}", stderr(o)));
    serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "last line is not JSON ({e}): {line}\nstderr:\n{}",
            stderr(o)
        )
    })
}

/// Fast settings for tests: one input check and a short timing budget (speed is not under test).
pub const QUICK: &[&str] = &["--checks", "1", "--timing-budget", "0.1"];

/// Kills (SIGKILL) and reaps the child however the test leaves the scope.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every stored evaluation of a run, by id, as text: what must survive kills unchanged.
pub fn snapshot(store: &Path, run_id: &str) -> std::collections::BTreeMap<i64, String> {
    ksearch::store::Store::open(store)
        .unwrap()
        .evaluations(run_id)
        .unwrap()
        .into_iter()
        .map(|(id, phase, cand, r)| {
            (
                id,
                format!("{phase}/{cand}/{}/{:?}", r.workload, r.median_s()),
            )
        })
        .collect()
}

/// Compiles the C++ file `driver` with the system C++ compiler (C++20, `CXX` overrides) and the CPU
/// emulation of CUDA in tests/back_translate_cpu on the include path, plus `include`; puts the executable
/// in `exe_dir`, runs it and returns its standard output (a failed compile or run fails the test).
pub fn run_cuda_cpu_driver(driver: &Path, include: &Path, exe_dir: &Path) -> String {
    let name = driver.file_stem().unwrap().to_string_lossy().to_string();
    let exe = exe_dir.join(&name);
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = Command::new(&cxx)
        // cuda_cpu.h switches fibers with _longjmp, which glibc's fortified build refuses between stacks.
        .args([
            "-std=c++20",
            "-O1",
            "-U_FORTIFY_SOURCE",
            "-pthread",
            "-w",
            "-I",
        ])
        .arg(repo().join("tests/back_translate_cpu"))
        .arg("-I")
        .arg(include)
        .arg(driver)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("{cxx}: {e} (a C++20 compiler is needed; set CXX)"));
    assert!(
        out.status.success(),
        "{name} does not compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    let text = String::from_utf8_lossy(&run.stdout).to_string();
    assert!(run.status.success(), "{name}:\n{text}");
    text
}

/// The public code corpus of `scripts/corpus.sh` (KSEARCH_CORPUS, set by `scripts/test`); None, with a
/// note, where it is not set outside CI.
pub fn corpus() -> Option<PathBuf> {
    match std::env::var("KSEARCH_CORPUS") {
        Ok(c) if !c.is_empty() => Some(PathBuf::from(c)),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "KSEARCH_CORPUS is not set: CI must run the tests through scripts/test"
            );
            eprintln!(
                "skipped: no corpus (run the tests through scripts/test, or set KSEARCH_CORPUS=$(scripts/corpus.sh))"
            );
            None
        }
    }
}

/// Runs `work` over `items` on two threads (the machine has two cores), results in order.
pub fn in_parallel<T: Sync, R: Send>(items: &[T], work: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let half = items.len().div_ceil(2);
    std::thread::scope(|s| {
        let parts: Vec<_> = items
            .chunks(half.max(1))
            .map(|chunk| s.spawn(|| chunk.iter().map(&work).collect::<Vec<R>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|h| h.join().expect("a worker thread"))
            .collect()
    })
}

/// A copy of the shipped matmul seed with its loop order fixed to i-k-j, for tests of stopping and resuming
/// runs, where what the kernels compute does not matter: the seed's textbook default (i-j-k) takes 0.26 s a
/// call on sq512 and 3-5 s an evaluation here, an i-k-j candidate about a second, so the same number of
/// evaluations (and of kills) costs a fraction of the time. Keep it alive while the run (or a resume of it)
/// needs the folder.
pub struct QuickSeed(tempfile::TempDir);

impl QuickSeed {
    pub fn new() -> QuickSeed {
        let dir = tempfile::tempdir().unwrap();
        let seed = repo().join("tasks/matmul/seeds/cpu/naive");
        for f in std::fs::read_dir(&seed).unwrap().flatten() {
            std::fs::copy(f.path(), dir.path().join(f.file_name())).unwrap();
        }
        let plan = dir.path().join("plan.toml");
        let text = std::fs::read_to_string(&plan).unwrap();
        let at = text
            .find("[tunable.LOOP_ORDER]")
            .expect("the matmul seed has a LOOP_ORDER tunable");
        let (head, tail) = text.split_at(at);
        let pinned = tail.replacen(
            "values = [0, 1]\ndefault = 0",
            "values = [1]\ndefault = 1",
            1,
        );
        assert_ne!(
            pinned, tail,
            "the matmul seed's LOOP_ORDER is no longer values [0, 1], default 0"
        );
        std::fs::write(&plan, format!("{head}{pinned}")).unwrap();
        QuickSeed(dir)
    }

    /// The flags that start a run from it.
    pub fn flags(&self) -> [&str; 2] {
        ["--candidate", self.0.path().to_str().unwrap()]
    }
}
