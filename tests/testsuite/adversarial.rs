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
//! Further expectations, for cheats that are contained rather than failed, or that cheat the clock:
//!
//! ```toml
//! status = "refused"         # `ksearch eval` refuses the candidate itself (exit non-zero), `reason` in stderr
//! twin = "honest_twin"       # a timing cheat: timed no faster than this honest candidate (fastest samples)
//! baseline_twin = "honest_twin" # the baselines' times match those measured in the twin's evaluation
//! forbid = "KSEARCH-CANARY"  # this text (of the root-only canary the test plants) appears in no output
//! survivors = "marker"       # after the evaluation no process whose command line holds `marker` is alive
//! run_budget = 3             # a tune search over the candidate's tunables: the first attempt passes, each
//!                            # later one fails with `status` and `reason`
//! ```
//!
//! Every expectation is checked and the test fails once, at the end, with the list of misses, after
//! printing a table (name, status, message head) of the whole suite. `ADVERSARIAL_ONLY=a,b` runs only
//! the named candidates.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Flags of every evaluation and search: two input checks (the first run twice by the determinism rule), a
/// short timing budget (speed is not under test), and a deadline short enough for the hanging candidate.
// A 10 s deadline: an honest candidate's run takes about a second here, and a loaded machine must not make
// it a timeout; the hang candidate waits it out once.
const FLAGS: &[&str] = &["--timeout", "10", "--checks", "2", "--timing-budget", "0.1"];

/// The file the `escape` candidate writes outside its directory when nothing stops it.
const PWNED: &str = "/tmp/ksearch-pwned";
/// A root-only file (0600) the test plants, standing for the config file that holds API keys.
const CANARY: &str = "/tmp/ksearch-adversarial-canary.txt";
const CANARY_TEXT: &str = "KSEARCH-CANARY-5f1d0c";
/// How much faster than its honest twin a timing cheat may measure (fastest samples, geometric mean over the
/// workloads) before it counts as a win: the evaluations run one after the other on a shared machine.
const TWIN_MARGIN: f64 = 1.3;
/// How many back-to-back pairs (twin, candidate) may be timed before a margin exceeded counts as a miss.
const TWIN_PAIRS: usize = 3;

struct Expect {
    task: String,
    status: String,
    reason: Option<String>,
    workload: Option<String>,
    twin: Option<String>,
    baseline_twin: Option<String>,
    forbid: Option<String>,
    survivors: Option<String>,
    run_budget: Option<i64>,
}

fn load_expect(dir: &Path) -> Expect {
    let path = dir.join("expect.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let t: toml::Table =
        toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for key in t.keys() {
        assert!(
            [
                "task",
                "status",
                "reason",
                "workload",
                "twin",
                "baseline_twin",
                "forbid",
                "survivors",
                "run_budget",
                // mlx-cuda only (bench/adversarial_mlx.sh): a timing cheat its checks may also reject.
                "may_be_rejected"
            ]
            .contains(&key.as_str()),
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
        twin: s("twin"),
        baseline_twin: s("baseline_twin"),
        forbid: s("forbid"),
        survivors: s("survivors"),
        run_budget: t.get("run_budget").and_then(|v| v.as_integer()),
    };
    let statuses = [
        "refused",
        "wrong",
        "timeout",
        "crash",
        "compile_error",
        "invalid",
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
        .filter(|p| p.extension().is_some_and(|x| x == "c" || x == "cu"))
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

/// Plants the canary: readable by its owner only.
fn plant_canary() {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(CANARY, format!("{CANARY_TEXT}\n")).unwrap();
    std::fs::set_permissions(CANARY, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Processes alive whose command line holds `marker`, after waiting up to 20 s for them to end (a loaded
/// machine reaps slowly; the wait ends as soon as none is left).
fn survivors(marker: &str) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let mut found = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if !name.chars().all(|c| c.is_ascii_digit()) {
                continue;
            }
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            let zombie = std::fs::read_to_string(e.path().join("status"))
                .unwrap_or_default()
                .lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'));
            if cmd.contains(marker) && !zombie {
                found.push(format!("{name}: {cmd}"));
            }
        }
        if found.is_empty() || std::time::Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Geometric mean of a per-workload figure over the workloads where it is a positive number.
fn geomean_of(v: &Value, f: impl Fn(&Value) -> Option<f64>) -> Option<f64> {
    let xs: Vec<f64> = v["workloads"]
        .as_array()?
        .iter()
        .filter_map(f)
        .filter(|x| *x > 0.0)
        .collect();
    (!xs.is_empty()).then(|| (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp())
}

/// How far a candidate's evaluation `v` beats its honest twin's `t` where a cheat would: for `twin`, the
/// twin's fastest samples over the candidate's; for `baseline_twin`, the baselines timed beside the candidate
/// over those timed beside the twin (geometric means over the workloads).
fn twin_gain(field: &str, v: &Value, t: &Value) -> Option<f64> {
    if field == "twin" {
        let fastest = |w: &Value| w["min_s"].as_f64();
        Some(geomean_of(t, fastest)? / geomean_of(v, fastest)?)
    } else {
        let base = |w: &Value| {
            let b = w["baselines"].as_object()?;
            let xs: Vec<f64> = b.values().filter_map(|x| x.as_f64()).collect();
            (!xs.is_empty()).then(|| xs.iter().product::<f64>().powf(1.0 / xs.len() as f64))
        };
        Some(geomean_of(v, base)? / geomean_of(t, base)?)
    }
}

fn eval_json(task: &str, dir: &Path) -> (Option<Value>, std::process::Output) {
    let store = tempfile::tempdir().unwrap();
    // Each evaluation ends at its candidate's first failing workload, as in a search (a cheat is judged
    // there, or at the workload its expectation names, which follows only passing ones).
    let mut args = vec!["eval", task, dir.to_str().unwrap(), "--json", "--fail-fast"];
    args.extend_from_slice(FLAGS);
    let out = run(store.path(), &args);
    let v = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok());
    (v, out)
}

/// A tune search over the candidate's tunables (`run_budget` attempts): the first attempt must pass, each
/// later one fail with the expected status and reason.
fn judge_run(dir: &Path, e: &Expect) -> Result<String, String> {
    let store = tempfile::tempdir().unwrap();
    let budget = e.run_budget.unwrap().to_string();
    let mut args = vec![
        "run",
        e.task.as_str(),
        "--candidate",
        dir.to_str().unwrap(),
        "--strategy",
        "tune",
        "--budget",
        budget.as_str(),
        "--json",
    ];
    args.extend_from_slice(FLAGS);
    let out = run(store.path(), &args);
    let v: Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| {
            format!(
                "no JSON from the run; stderr:\n{}",
                head(&stderr(&out), 800)
            )
        })?;
    let run_id = v["run_id"].as_str().ok_or("no run_id")?.to_string();
    let shown = run(store.path(), &["show", &run_id, "--json"]);
    let s: Value = String::from_utf8_lossy(&shown.stdout)
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or("no JSON from show")?;
    let attempts: Vec<&Value> = s["attempts"]
        .as_array()
        .ok_or("show has no attempts")?
        .iter()
        .filter(|a| a["phase"] == "search")
        .collect();
    if attempts.len() < 2 {
        return Err(format!(
            "{} search attempt(s): nothing to compare",
            attempts.len()
        ));
    }
    let passed = |a: &Value| a["summary"]["passed"].as_bool() == Some(true);
    if !passed(attempts[0]) {
        return Err(format!(
            "the first attempt did not pass: {}",
            head(&attempts[0].to_string(), 300)
        ));
    }
    for a in &attempts[1..] {
        if passed(a) {
            return Err(format!(
                "a later attempt passed: {}",
                head(&a.to_string(), 300)
            ));
        }
        let failure = a["summary"]["first_failure"].as_str().unwrap_or("");
        if !failure.contains(&format!(": {}:", e.status))
            || e.reason
                .as_ref()
                .is_some_and(|r| !failure.contains(r.as_str()))
        {
            return Err(format!(
                "a later attempt failed otherwise: {}",
                head(failure, 300)
            ));
        }
    }
    Ok(format!(
        "{} attempts, the first passed, the rest failed",
        attempts.len()
    ))
}

#[test]
fn every_adversarial_candidate_is_caught() {
    let dirs = candidates();
    assert!(!dirs.is_empty(), "no adversarial candidates found");
    plant_canary();
    let root = repo().join("tests/adversarial/cpu");
    let mut twins: std::collections::BTreeMap<String, Value> = Default::default();
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
        let started = std::time::Instant::now();
        if let Some(budget) = e.run_budget {
            let verdict = judge_run(dir, &e);
            rows.push((
                name.clone(),
                format!("run of {budget}"),
                if verdict.is_ok() { "ok" } else { "MISS" }.into(),
                format!(
                    "[{:.1}s] {}",
                    started.elapsed().as_secs_f64(),
                    verdict.clone().unwrap_or_else(|m| m)
                ),
            ));
            if let Err(m) = verdict {
                misses.push(format!("{name}: {m}"));
            }
            continue;
        }
        let (v, out) = eval_json(&e.task, dir);
        let secs = started.elapsed().as_secs_f64();
        let everything = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
        let mut problems = Vec::new();
        if let Some(f) = &e.forbid
            && everything.contains(f.as_str())
        {
            problems.push(format!("`{f}` (the canary) appears in the output"));
        }
        if let Some(m) = &e.survivors {
            let alive = survivors(m);
            if !alive.is_empty() {
                problems.push(format!("processes outlived the evaluation: {alive:?}"));
            }
        }
        if e.status == "refused" {
            let reason = e.reason.as_deref().unwrap_or("");
            let ok = !out.status.success() && stderr(&out).contains(reason);
            if !ok {
                problems.push(format!(
                    "expected the candidate to be refused ({reason:?}); exit {:?}, stderr: {}",
                    out.status.code(),
                    head(&stderr(&out), 300)
                ));
            }
            rows.push((
                name.clone(),
                "refused".into(),
                if problems.is_empty() { "ok" } else { "MISS" }.into(),
                format!("[{secs:.1}s] {}", head(stderr(&out).trim(), 110)),
            ));
            if !problems.is_empty() {
                misses.push(format!("{name}: {}", problems.join("; ")));
            }
            continue;
        }
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
        if let Err(m) = judge(&name, &e, &v) {
            problems.push(m);
        }
        let mut note = format!("{secs:.1}s");
        for (field, twin) in [("twin", &e.twin), ("baseline_twin", &e.baseline_twin)] {
            let Some(twin) = twin else { continue };
            let mut t = twins
                .entry(twin.clone())
                .or_insert_with(|| {
                    eval_json(&e.task, &root.join(twin))
                        .0
                        .unwrap_or(Value::Null)
                })
                .clone();
            // Evaluations run one after the other on a shared machine, so one pair of timings can differ by
            // more than the margin through load alone. A cheat that pays does so every time: a miss needs the
            // margin exceeded in every pair, each retry a fresh twin and a fresh candidate timed back to back.
            let mut best = twin_gain(field, &v, &t);
            let mut pairs = 1;
            while best.is_some_and(|g| g > TWIN_MARGIN) && pairs < TWIN_PAIRS {
                t = eval_json(&e.task, &root.join(twin))
                    .0
                    .unwrap_or(Value::Null);
                let again = eval_json(&e.task, dir).0.unwrap_or(Value::Null);
                pairs += 1;
                if let Some(g) = twin_gain(field, &again, &t) {
                    best = best.map(|b| b.min(g));
                }
            }
            let tried = if pairs > 1 {
                format!(" (best of {pairs} pairs)")
            } else {
                String::new()
            };
            match (field, best) {
                (_, None) => problems.push(format!("no times to compare with the twin {twin}")),
                ("twin", Some(g)) => {
                    note += &format!(", {g:.2}x its twin{tried}");
                    if g > TWIN_MARGIN {
                        problems.push(format!(
                            "timed {g:.2}x faster than its honest twin {twin} (fastest samples){tried}: a cheat that paid"
                        ));
                    }
                }
                (_, Some(g)) => {
                    note += &format!(", baselines {g:.2}x the twin's{tried}");
                    if g > TWIN_MARGIN {
                        problems.push(format!(
                            "the baselines were timed {g:.2}x slower than beside its twin {twin}{tried}"
                        ));
                    }
                }
            }
        }
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
            if problems.is_empty() { "ok" } else { "MISS" }.into(),
            format!(
                "[{note}] {}",
                head(shown["message"].as_str().unwrap_or(""), 110)
            ),
        ));
        if !problems.is_empty() {
            misses.push(format!(
                "{name} (expected {} / {:?}): {}",
                e.status,
                e.reason.as_deref().unwrap_or(""),
                problems.join("; ")
            ));
        }
    }
    let _ = std::fs::remove_file(CANARY);
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
    gpu_suite_is_well_formed("mlx-cuda", ksearch::target::Target::MlxCuda);
}

/// The cuda target's twin of the mlx-cuda suite (the same cheats as whole `__global__` functions, scalars by
/// value; `SUITE=cuda bench/adversarial_mlx.sh` on the device): well formed here, and each compiles for sm_90a
/// (python/tests/test_cuda_target.py).
#[test]
fn the_cuda_suite_is_well_formed() {
    gpu_suite_is_well_formed("cuda", ksearch::target::Target::Cuda);
}

fn gpu_suite_is_well_formed(suite: &str, target: ksearch::target::Target) {
    let root = repo().join("tests/adversarial").join(suite);
    let mut cheats = 0;
    for dir in std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().path()) {
        let e = load_expect(&dir);
        let task = ksearch::task::Task::load(&repo().join("tasks").join(&e.task)).unwrap();
        if e.status == "refused" {
            // Refused before anything runs, here as on the device machine.
            let err = ksearch::candidate::Candidate::load(&dir)
                .err()
                .unwrap_or_else(|| panic!("{}: loaded, but must be refused", dir.display()));
            let reason = e.reason.as_deref().unwrap_or("");
            assert!(err.to_string().contains(reason), "{}: {err}", dir.display());
            cheats += 1;
            continue;
        }
        let c = ksearch::candidate::Candidate::load(&dir)
            .unwrap_or_else(|err| panic!("{}: {err}", dir.display()));
        assert_eq!(c.plan.target, target, "{}", dir.display());
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
    assert!(cheats >= 15, "only {cheats} cheats in the {suite} suite");
}
