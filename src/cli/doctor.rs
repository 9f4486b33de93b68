use super::{DEFAULT_TASK, print_json};
use crate::eval::{self, Evaluator, Settings};
use crate::store::Store;
use crate::target::Target;
use crate::task::Task;
use crate::{builtin, pyenv, report};
use anyhow::{Result, anyhow};
use serde_json::{Value, json};
use std::path::Path;

/// One line of `doctor`'s checklist: passed (`Some(true)`), missing (`Some(false)`, with the fix) or a fact
/// (`None`: neither, such as which LLM keys are set).
fn check_item(name: &str, ok: Option<bool>, detail: String, fix: &str) -> Value {
    json!({"check": name, "ok": ok, "detail": detail, "fix": if ok == Some(false) { Some(fix) } else { None }})
}

/// The words `code` prints in the worker's Python, or the last line of its error.
fn python_words(python: &Path, code: &str) -> std::result::Result<Vec<String>, String> {
    let out = std::process::Command::new(python)
        .args(["-c", code])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err.lines().last().unwrap_or("import failed").to_string());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect())
}

/// MLX's version and backends as the worker's Python sees them, without installing anything.
fn probe_mlx(python: &Path) -> std::result::Result<(String, bool, bool), String> {
    let code = "import mlx.core as mx\n\
                m = getattr(mx, 'metal', None); c = getattr(mx, 'cuda', None)\n\
                print(mx.__version__, bool(m and m.is_available()), bool(c and c.is_available()))";
    match python_words(python, code)?.as_slice() {
        [v, metal, cuda] => Ok((v.clone(), metal == "True", cuda == "True")),
        w => Err(format!("unexpected answer `{}`", w.join(" "))),
    }
}

/// CuPy's version and the CUDA devices it sees, as the worker's Python has them, without installing anything.
fn probe_cupy(python: &Path) -> std::result::Result<(String, i64), String> {
    let code = "import cupy\n\
                try:\n    n = cupy.cuda.runtime.getDeviceCount()\n\
                except Exception:\n    n = 0\n\
                print(cupy.__version__, n)";
    match python_words(python, code)?.as_slice() {
        [v, n] => Ok((v.clone(), n.parse().unwrap_or(0))),
        w => Err(format!("unexpected answer `{}`", w.join(" "))),
    }
}

/// What `program ARGS` prints on stdout, trimmed, when it runs and succeeds.
fn answer_of<S: AsRef<std::ffi::OsStr>>(program: S, args: &[&str]) -> Option<String> {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// `doctor`'s findings: the checklist, and the report `--json` prints (the checklist under `checks`).
#[derive(Default)]
struct Findings {
    report: serde_json::Map<String, Value>,
    checks: Vec<Value>,
}

pub(super) fn doctor(store_dir: &Path, python: Option<&Path>, json: bool) -> Result<u8> {
    let mut f = Findings::default();
    f.report
        .insert("ksearch".into(), json!(env!("CARGO_PKG_VERSION")));
    f.report
        .insert("cache".into(), json!(builtin::cache_root()));
    f.report
        .insert("builtin_tasks".into(), json!(builtin::task_names()));
    // The interpreter must run: `--python` is taken as given.
    let runs = |env: &pyenv::PythonEnv| {
        answer_of(&env.python, &["--version"])
            .ok_or_else(|| anyhow!("{} does not run", env.python.display()))
    };
    match pyenv::ensure(python).and_then(|env| runs(&env).map(|v| (env, v))) {
        Ok((env, version)) => {
            f.python(&env, &version);
            f.worker(&env)?;
            f.mlx_targets(&env);
            f.ray(&env);
        }
        Err(e) => f.no_python(&e),
    }
    f.gpu_and_keys();
    f.store(store_dir)?;
    Ok(f.print(json))
}

impl Findings {
    fn python(&mut self, env: &pyenv::PythonEnv, version: &str) {
        self.checks.push(check_item(
            "python",
            Some(true),
            format!(
                "{} ({version}{})",
                env.python.display(),
                if env.managed {
                    ", managed environment"
                } else {
                    ""
                }
            ),
            "",
        ));
        self.report.insert(
            "python".into(),
            json!({"path": env.python, "managed": env.managed, "worker": env.worker_path, "version": version}),
        );
    }

    /// The worker started on the default task: the sandbox, the C compiler, the hardware.
    fn worker(&mut self, env: &pyenv::PythonEnv) -> Result<()> {
        let task = Task::load(&builtin::task_dir(DEFAULT_TASK)?)?;
        let build = std::env::temp_dir().join(format!("ksearch-doctor-{}", std::process::id()));
        // The doctor measures the peaks anew (a search may reuse remembered ones: `peaks`).
        let settings = Settings {
            measure_peaks: true,
            ..Settings::for_task(&task, Target::Cpu)
        };
        match Evaluator::start(
            task,
            Target::Cpu,
            env.clone(),
            build.clone(),
            settings,
            eval::fresh_secret(),
        ) {
            Ok(ev) => {
                self.checks.push(check_item(
                    "worker (numpy, the sandbox)",
                    Some(true),
                    format!(
                        "started; sandbox: {}",
                        ev.hello["sandbox"]
                            .as_object()
                            .map(|o| o
                                .iter()
                                .filter(|(_, v)| v.as_bool() == Some(true))
                                .map(|(k, _)| k.replace('_', " "))
                                .collect::<Vec<_>>()
                                .join(", "))
                            .unwrap_or_default()
                    ),
                    "",
                ));
                let compiler = &ev.hello["compiler"];
                let version = compiler["version"].as_str().unwrap_or("");
                self.checks.push(check_item(
                    "C compiler (cpu target)",
                    Some(!version.is_empty() && !version.starts_with("unavailable")),
                    format!("{}: {version}", compiler["name"].as_str().unwrap_or("cc")),
                    "install gcc or clang, or set CC",
                ));
                // The hardware facts as the prompts state them.
                let facts = crate::search::agent::hardware_line(&ev.hello);
                self.checks
                    .push(check_item("hardware", None, facts.clone(), ""));
                self.report.insert("hardware_facts".into(), json!(facts));
                self.report.insert("worker".into(), ev.hello.clone());
            }
            Err(e) => {
                self.checks.push(check_item(
                    "worker (numpy, the sandbox)",
                    Some(false),
                    format!("{e:#}"),
                    "see the error; `--python PATH` picks another interpreter (3.11 or newer)",
                ));
                self.report
                    .insert("worker".into(), json!({"error": format!("{e:#}")}));
            }
        }
        let _ = std::fs::remove_dir_all(&build);
        Ok(())
    }

    /// Which MLX targets can run here (nothing is installed to find out).
    fn mlx_targets(&mut self, env: &pyenv::PythonEnv) {
        let (metal, cuda, detail) = match probe_mlx(&env.python) {
            Ok((v, metal, cuda)) => (metal, cuda, format!("MLX {v}")),
            Err(e) => (false, false, format!("MLX not importable: {e}")),
        };
        for (name, ok, fix) in [
            (
                "target mlx-metal",
                metal,
                "needs a Mac with Apple silicon and MLX",
            ),
            (
                "target mlx-cuda",
                cuda,
                "needs an NVIDIA GPU and MLX's CUDA build (`pip install mlx[cuda]` into the worker's Python)",
            ),
        ] {
            // Not a failure of the installation: the CPU target is what every machine must run.
            let detail = format!(
                "{detail}{}",
                if ok {
                    ""
                } else {
                    "; its backend is not available here"
                }
            );
            self.checks.push(json!({"check": name, "ok": None::<bool>, "available": ok, "detail": detail, "fix": if ok { None } else { Some(fix) }}));
        }
        // The cuda target: CuPy in the worker's Python and a device it sees (the managed environment installs
        // CuPy at the target's first use).
        let (ok, detail) = match probe_cupy(&env.python) {
            Ok((v, n)) => (n > 0, format!("CuPy {v}, {n} CUDA device(s)")),
            Err(e) => (false, format!("CuPy not importable: {e}")),
        };
        self.checks.push(json!({"check": "target cuda", "ok": None::<bool>, "available": ok, "detail": detail,
            "fix": if ok { None } else { Some("needs an NVIDIA GPU; CuPy is installed into the managed environment at the cuda target's first use (python/requirements-cuda.txt)") }}));
    }

    fn ray(&mut self, env: &pyenv::PythonEnv) {
        // A fact, not a requirement: ksearch evaluates on this machine's devices only today.
        let ray = answer_of(&env.python, &["-c", "import ray; print(ray.__version__)"]);
        self.checks.push(check_item(
            "Ray",
            None,
            match ray {
                Some(v) => format!("ray {v} in the worker's Python (used by `--cluster`)"),
                None => "not installed in the worker's Python (installed at the first `--cluster` run; not needed on one machine)".into(),
            },
            "",
        ));
    }

    fn no_python(&mut self, e: &anyhow::Error) {
        self.checks.push(check_item(
            "python",
            Some(false),
            format!("{e:#}"),
            "install Python 3.11 or newer with venv, or pass --python PATH",
        ));
        self.report
            .insert("python".into(), json!({"error": format!("{e:#}")}));
    }

    /// An NVIDIA GPU, and which LLM keys are set (never their values).
    fn gpu_and_keys(&mut self) {
        let gpu = answer_of("nvidia-smi", &["--query-gpu=name", "--format=csv,noheader"]);
        self.checks.push(check_item(
            "NVIDIA GPU",
            None,
            gpu.unwrap_or_else(|| "none found (nvidia-smi)".into()),
            "",
        ));
        // Which LLM keys are set (never their values).
        let keys: Vec<&str> = [
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "GEMINI_API_KEY",
            "OPENROUTER_API_KEY",
        ]
        .into_iter()
        .filter(|k| std::env::var(k).is_ok_and(|v| !v.is_empty()))
        .collect();
        self.checks.push(check_item(
            "LLM keys in the environment",
            None,
            if keys.is_empty() {
                "none (a config file, a local server, command: or replay: need none)".into()
            } else {
                keys.join(", ")
            },
            "",
        ));
    }

    fn store(&mut self, store_dir: &Path) -> Result<()> {
        match Store::open_read(store_dir) {
            Ok(None) => {
                let path = store_dir.join("ksearch.db");
                self.checks.push(check_item(
                    "store",
                    Some(true),
                    format!("{} (none yet: the first run creates it)", path.display()),
                    "",
                ));
                self.report
                    .insert("store".into(), json!({"path": path, "runs": 0}));
            }
            Ok(Some(s)) => {
                let runs = s.runs()?.len();
                self.checks.push(check_item(
                    "store",
                    Some(true),
                    format!("{} ({runs} runs, integrity ok)", s.path().display()),
                    "",
                ));
                self.report.insert(
                    "store".into(),
                    json!({"path": s.path(), "journal_mode": "wal", "runs": runs}),
                );
            }
            Err(e) => {
                self.checks.push(check_item(
                    "store",
                    Some(false),
                    e.to_string(),
                    "see the error; --store DIR uses another folder",
                ));
                self.report
                    .insert("store".into(), json!({"error": e.to_string()}));
            }
        }
        Ok(())
    }

    /// The checklist for people, or the report for scripts; the exit code (1: something is missing).
    fn print(self, json: bool) -> u8 {
        let Findings { mut report, checks } = self;
        let ok = checks.iter().all(|c| c["ok"] != json!(false));
        report.insert("checks".into(), json!(checks));
        report.insert("ok".into(), json!(ok));
        let v = Value::Object(report);
        if json {
            print_json(&v);
        } else {
            for c in &checks {
                // A target this machine has no device for is a fact (·, and what using it takes), not a
                // failure (✗, and its fix): only the CPU target is needed everywhere.
                let optional = c["ok"].is_null() && c["available"] == json!(false);
                let mark = match (c["ok"].as_bool(), c["available"].as_bool()) {
                    (Some(true), _) | (None, Some(true)) => "✓",
                    (Some(false), _) => "✗",
                    _ => "·",
                };
                let mark = report::paint(mark, report::Tone::of(mark));
                println!(
                    "{mark} {}: {}",
                    c["check"].as_str().unwrap_or("?"),
                    c["detail"].as_str().unwrap_or("")
                );
                if let Some(fix) = c["fix"].as_str() {
                    println!("    {}: {fix}", if optional { "to use it" } else { "fix" });
                }
            }
            println!(
                "{}",
                if ok {
                    "everything needed is here"
                } else {
                    "something is missing: see the fixes above"
                }
            );
        }
        if ok { 0 } else { 1 }
    }
}
