//! The adversarial suite: candidates built to cheat (tests/adversarial/cpu/<name>/), each with ONE planted
//! cheat, run through the real binary, worker and compiler with `ksearch eval`. Each folder holds a
//! plan.toml, the kernel source (its header comment explains the cheat) and an `expect.toml`:
//!
//! ```toml
//! task = "matmul"            # the built-in task it runs against
//! status = "wrong"           # expected `workloads[].status`, or "any_failure", or "passed" (a control)
//! reason = "outside atol"    # a substring the message must contain (optional)
//! workload = "odd300x129x257" # optional: where; default: the first workload that did not pass
//! ```
//!
//! Every expectation is checked and the test fails once, at the end, with the list of misses, after
//! printing a table (name, status, message head) of the whole suite. `ADVERSARIAL_ONLY=a,b` runs only
//! the named candidates.

mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Flags of every evaluation: two input checks (the first run twice by the determinism rule), a short
/// timing budget (speed is not under test), and a deadline short enough for the hanging candidate.
const FLAGS: &[&str] = &["--timeout", "5", "--checks", "2", "--timing-budget", "0.1"];

/// The file the `escape` candidate writes outside its directory when nothing stops it.
const PWNED: &str = "/tmp/ksearch-pwned";

struct Expect {
    task: String,
    status: String,
    reason: Option<String>,
    workload: Option<String>,
}

fn load_expect(dir: &Path) -> Expect {
    let path = dir.join("expect.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let t: toml::Table =
        toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for key in t.keys() {
        assert!(
            ["task", "status", "reason", "workload"].contains(&key.as_str()),
            "{}: unknown field `{key}`",
            path.display()
        );
    }
    let s = |k: &str| {
        t.get(k).map(|v| {
            v.as_str()
                .unwrap_or_else(|| panic!("{}: `{k}` is not a string", path.display()))
                .to_string()
        })
    };
    let e = Expect {
        task: s("task").unwrap_or_else(|| panic!("{}: no `task`", path.display())),
        status: s("status").unwrap_or_else(|| panic!("{}: no `status`", path.display())),
        reason: s("reason").filter(|r| !r.is_empty()),
        workload: s("workload"),
    };
    let statuses = [
        "wrong",
        "timeout",
        "crash",
        "compile_error",
        "error",
        "implausible",
        "passed",
        "any_failure",
    ];
    assert!(
        statuses.contains(&e.status.as_str()),
        "{}: status `{}` is not one of {statuses:?}",
        path.display(),
        e.status
    );
    e
}

fn candidates() -> Vec<PathBuf> {
    let root = repo().join("tests/adversarial/cpu");
    let only: Option<Vec<String>> = std::env::var("ADVERSARIAL_ONLY")
        .ok()
        .filter(|s| !s.is_empty())
        .map(|s| s.split(',').map(str::to_string).collect());
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .filter(|p| {
            only.as_ref().is_none_or(|o| {
                o.iter()
                    .any(|n| p.file_name().unwrap().to_str() == Some(n.as_str()))
            })
        })
        .collect();
    dirs.sort();
    dirs
}

/// Each kernel source opens with a comment that says what its cheat is.
fn check_documented(dir: &Path) -> Result<(), String> {
    let sources: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    if sources.is_empty() {
        return Err("no .c kernel".into());
    }
    for s in sources {
        let text = std::fs::read_to_string(&s).unwrap();
        if !text.trim_start().starts_with("/*") {
            return Err(format!(
                "{} does not open with a comment explaining its cheat",
                s.display()
            ));
        }
    }
    Ok(())
}

fn head(msg: &str, n: usize) -> String {
    let one: String = msg.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() <= n {
        one
    } else {
        one.chars().take(n).collect::<String>() + "…"
    }
}

/// The verdict against the expectation: Ok(row) or Err(why it missed).
fn judge(name: &str, e: &Expect, v: &Value) -> Result<(), String> {
    let ws = v["workloads"]
        .as_array()
        .ok_or("no `workloads` in the JSON")?;
    let passed = v["passed"].as_bool().ok_or("no `passed` in the JSON")?;
    if e.status == "passed" {
        if !passed {
            let w = ws.iter().find(|w| w["status"] != "passed");
            return Err(format!(
                "control {name} must pass; got {}",
                w.map(|w| w.to_string()).unwrap_or_default()
            ));
        }
        return Ok(());
    }
    if passed {
        return Err("the cheat PASSED every workload".into());
    }
    let w = match &e.workload {
        Some(n) => ws
            .iter()
            .find(|w| w["workload"] == n.as_str())
            .ok_or_else(|| format!("no workload `{n}` in the result"))?,
        None => ws
            .iter()
            .find(|w| w["status"] != "passed")
            .ok_or("not passed overall, yet no workload failed")?,
    };
    let status = w["status"].as_str().unwrap_or("?");
    let message = w["message"].as_str().unwrap_or("");
    if e.status != "any_failure" && status != e.status {
        return Err(format!(
            "expected status {} on {}, got {status}: {}",
            e.status,
            w["workload"],
            head(message, 300)
        ));
    }
    if e.status == "any_failure" && status == "passed" {
        return Err(format!(
            "expected a failure on {}, it passed",
            w["workload"]
        ));
    }
    if let Some(r) = &e.reason
        && !message.contains(r.as_str())
    {
        return Err(format!(
            "expected the message on {} to contain {r:?}, got: {}",
            w["workload"],
            head(message, 300)
        ));
    }
    Ok(())
}

#[test]
fn every_adversarial_candidate_is_caught() {
    let dirs = candidates();
    assert!(!dirs.is_empty(), "no adversarial candidates found");
    let mut rows: Vec<(String, String, String, String)> = Vec::new();
    let mut misses: Vec<String> = Vec::new();
    for dir in &dirs {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let e = load_expect(dir);
        if let Err(m) = check_documented(dir) {
            misses.push(format!("{name}: {m}"));
        }
        let escape = name == "escape";
        if escape {
            let _ = std::fs::remove_file(PWNED);
        }
        let store = tempfile::tempdir().unwrap();
        let mut args = vec!["eval", e.task.as_str(), dir.to_str().unwrap(), "--json"];
        args.extend_from_slice(FLAGS);
        let started = std::time::Instant::now();
        let out = run(store.path(), &args);
        let secs = started.elapsed().as_secs_f64();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let v: Option<Value> = stdout
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok());
        let Some(v) = v else {
            misses.push(format!(
                "{name}: no JSON verdict (exit {:?}); stderr:\n{}",
                out.status.code(),
                head(&stderr(&out), 1000)
            ));
            rows.push((name, "-".into(), "NO VERDICT".into(), String::new()));
            continue;
        };
        // The first workload that did not pass tells the story; a control shows its first workload.
        let ws = v["workloads"].as_array().cloned().unwrap_or_default();
        let shown = e
            .workload
            .as_ref()
            .and_then(|n| ws.iter().find(|w| w["workload"] == n.as_str()))
            .or_else(|| ws.iter().find(|w| w["status"] != "passed"))
            .or(ws.first())
            .cloned()
            .unwrap_or(Value::Null);
        let verdict = judge(&name, &e, &v);
        let mut note = format!("{:.1}s", secs);
        if escape {
            if Path::new(PWNED).exists() {
                note += &format!(", {PWNED} was written");
                let _ = std::fs::remove_file(PWNED);
            } else {
                note += &format!(", {PWNED} not written");
            }
        }
        rows.push((
            name.clone(),
            format!(
                "{} ({})",
                shown["status"].as_str().unwrap_or("?"),
                shown["workload"].as_str().unwrap_or("?")
            ),
            if verdict.is_ok() {
                "ok".into()
            } else {
                "MISS".into()
            },
            format!(
                "[{note}] {}",
                head(shown["message"].as_str().unwrap_or(""), 110)
            ),
        ));
        if let Err(m) = verdict {
            misses.push(format!(
                "{name} (expected {} / {:?}): {m}",
                e.status,
                e.reason.as_deref().unwrap_or("")
            ));
        }
    }
    let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(4);
    let swidth = rows.iter().map(|r| r.1.len()).max().unwrap_or(6);
    println!(
        "\n{:width$}  {:swidth$}  {:4}  message head",
        "name", "status (workload)", ""
    );
    for (n, s, ok, m) in &rows {
        println!("{n:width$}  {s:swidth$}  {ok:4}  {m}");
    }
    let ok = rows.iter().filter(|r| r.2 == "ok").count();
    println!("{} candidates, {ok} as expected", rows.len());
    assert!(
        misses.is_empty(),
        "{} adversarial expectation(s) missed:\n{}",
        misses.len(),
        misses.join("\n")
    );
}

/// The mlx-cuda suite runs only on an NVIDIA GPU (`bench/adversarial_mlx.sh`, results under
/// bench/results/); here every candidate must at least be a valid mlx-cuda candidate of its task, say
/// what its cheat is, and expect a failure (all but the control).
#[test]
fn the_mlx_cuda_suite_is_well_formed() {
    let root = repo().join("tests/adversarial/mlx-cuda");
    let mut cheats = 0;
    for dir in std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().path()) {
        let e = load_expect(&dir);
        let task = ksearch::task::Task::load(&repo().join("tasks").join(&e.task)).unwrap();
        let c = ksearch::candidate::Candidate::load(&dir)
            .unwrap_or_else(|err| panic!("{}: {err}", dir.display()));
        assert_eq!(
            c.plan.target,
            ksearch::target::Target::MlxCuda,
            "{}",
            dir.display()
        );
        c.validate().unwrap();
        c.check_against(&task)
            .unwrap_or_else(|err| panic!("{}: {err}", dir.display()));
        for k in &c.plan.kernel {
            let text = &c.files[&k.source];
            assert!(
                text.starts_with("// Cheat: "),
                "{}: the kernel must open with `// Cheat: ...`",
                dir.display()
            );
        }
        if e.status != "passed" {
            cheats += 1;
        }
    }
    assert!(cheats >= 15, "only {cheats} cheats in the mlx-cuda suite");
}
