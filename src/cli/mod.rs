//! The command line. Each command prints a readable report, or with `--json` one JSON object as its
//! last stdout line (progress goes to stderr), so scripts and people read the same run.
//!
//! One file per command (`run.rs` holds `run` and `resume`, which share the progress display).

mod back_translate;
mod check;
mod compare;
mod config;
mod doctor;
mod eval;
mod export;
mod flags;
mod gc;
mod report_html;
mod run;
mod runs;
mod serve;
mod show;
mod tasks;
mod translate;

use crate::candidate::Candidate;
use crate::eval::Settings;
use crate::report;
use crate::search::StrategyKind;
use crate::store::{self};
use crate::target::Target;
use crate::task::Task;
use anyhow::{Result, anyhow, bail};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};

/// The built-in task `ksearch run` uses when none is named.
pub const DEFAULT_TASK: &str = "matmul";

#[derive(Parser)]
#[command(
    name = "ksearch",
    version,
    about = "Search for fast kernels: K-Search's world model, MLX targets, honest evaluation"
)]
pub struct Cli {
    /// Store folder (SQLite database and build products).
    #[arg(long, global = true, env = "KSEARCH_STORE")]
    store: Option<PathBuf>,
    /// Python interpreter for the worker (must have the packages of python/requirements.txt).
    /// Default: a virtual environment ksearch creates and manages.
    #[arg(long, global = true, env = "KSEARCH_PYTHON")]
    python: Option<PathBuf>,
    /// More logging on stderr (-v, -vv).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// No progress bar and no notices on stderr (errors and warnings still print).
    #[arg(short, long, global = true)]
    quiet: bool,
    /// Colour in what people read: `auto` (on a terminal, unless NO_COLOR is set), `always`, `never`.
    #[arg(long, global = true, value_enum, default_value = "auto")]
    color: report::ColorChoice,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the built-in tasks and their targets.
    Tasks {
        #[arg(long)]
        json: bool,
    },
    /// Search for a faster kernel for TASK (a built-in name or a task folder).
    Run(Box<run::RunArgs>),
    /// Continue a run that was interrupted (killed, crashed, Ctrl-C).
    Resume(run::ResumeArgs),
    /// List the runs in the store (`runs rm RUN…` deletes runs). A RUN argument anywhere is a run id,
    /// a unique prefix of one, or `last`.
    Runs(runs::RunsArgs),
    /// Two runs side by side: per workload, each run's best candidate's time and the ratio.
    Compare(compare::CompareArgs),
    /// Show one run: configuration, best candidate, every evaluation.
    Show(show::ShowArgs),
    /// Write one run as a self-contained HTML page (charts, every evaluation, the world model, the best
    /// candidate's changes, the LLM calls): `ksearch report RUN --html FILE`
    Report(report_html::ReportArgs),
    /// A local web dashboard over the store (read-only, on 127.0.0.1): the runs, each run live (its
    /// evaluations, the world-model tree, diffs, LLM calls), two runs compared. Prints its address.
    Serve(serve::ServeArgs),
    /// Evaluate candidate folders against the reference and the baselines on every workload (several
    /// candidates share one worker and the same input sets).
    Eval(eval::EvalArgs),
    /// Export a kernel as a Python module for MLX programs (with its test): the best candidate of RUN,
    /// or the candidate in a folder (then name its task with --task).
    Export(export::ExportArgs),
    /// Rewrite an mlx-metal candidate folder into an mlx-cuda one (Metal built-ins emulated in CUDA), so
    /// that the Metal kernel's logic can be checked on an NVIDIA GPU.
    BackTranslate(back_translate::BackTranslateArgs),
    /// Remove what nothing needs any more: candidates no run refers to (left by `runs rm`), and in the
    /// cache folder the unpacked worker, tasks and Python environments of other ksearch versions and
    /// reference outputs not used for a while. All of it is made again on demand; no result is lost.
    Gc(gc::GcArgs),
    /// Check the installation: Python environment, compiler, worker, hardware, store.
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// The settings config files give (a project's ksearch.toml found upward, then
    /// ~/.config/ksearch/config.toml's [defaults]) and where each comes from; flags override them.
    Config {
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script: `ksearch completions bash > ~/.local/share/bash-completion/completions/ksearch`.
    Completions { shell: clap_complete::Shell },
    /// Translate the kernels of a CUDA file into an MLX candidate folder (plan.toml + kernel bodies),
    /// with coded diagnostics for what cannot be translated (docs/translate.md); a cuda candidate folder is
    /// translated under its own plan.
    Translate(translate::TranslateArgs),
    /// Check a Metal kernel for what would fail on a Mac (docs/check.md): a complete .metal file, or an
    /// mlx-metal candidate folder (its task is found above it, or named with --task). Exit 1 on errors.
    Check(check::CheckArgs),
}

/// Fills what the command line left unset from the config files (`defaults.rs`); flags and the environment
/// win. Only values clap took from its own defaults (or none) are replaced.
fn apply_defaults(
    cli: &mut Cli,
    matches: &clap::ArgMatches,
    d: &crate::defaults::Defaults,
) -> Result<()> {
    use clap::ValueEnum;
    use clap::parser::ValueSource;
    if cli.store.is_none() {
        cli.store = d.store.clone();
    }
    let Command::Run(args) = &mut cli.command else {
        return Ok(());
    };
    let run::RunArgs {
        task,
        target,
        strategy,
        budget,
        parallel,
        devices,
        llm,
        ..
    } = args.as_mut();
    let Some(m) = matches.subcommand_matches("run") else {
        return Ok(());
    };
    let unset = |id: &str| {
        !matches!(
            m.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
    };
    if let (true, Some(t)) = (unset("task"), &d.task) {
        *task = t.clone();
    }
    if let (true, Some(t)) = (unset("target"), &d.target) {
        *target = t
            .parse()
            .map_err(|e: String| anyhow!("config: target `{t}`: {e}"))?;
    }
    if let (true, Some(s)) = (unset("strategy"), &d.strategy) {
        *strategy = Some(
            StrategyKind::from_str(s, true).map_err(|e| anyhow!("config: strategy `{s}`: {e}"))?,
        );
    }
    if let (true, Some(b)) = (unset("budget"), d.budget) {
        if b == 0 {
            bail!("config: budget must be at least 1");
        }
        *budget = b;
    }
    if let (true, Some(k)) = (unset("parallel"), d.parallel) {
        if k == 0 {
            bail!("config: parallel must be at least 1");
        }
        *parallel = k;
    }
    if devices.is_none() {
        devices.clone_from(&d.devices);
    }
    if unset("llm") && llm.llm.is_none() {
        llm.llm = d.llm.clone();
    }
    llm.max_llm_calls = llm.max_llm_calls.or(d.max_llm_calls);
    llm.max_llm_tokens = llm.max_llm_tokens.or(d.max_llm_tokens);
    llm.max_llm_cost = llm.max_llm_cost.or(d.max_llm_cost);
    llm.max_llm_time = llm.max_llm_time.or(d.max_llm_time);
    Ok(())
}

pub fn main() -> std::process::ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().get_matches();
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let cwd = std::env::current_dir().unwrap_or_default();
    let layers = crate::defaults::load(&cwd).and_then(|l| {
        apply_defaults(&mut cli, &matches, &l.merged().0)?;
        Ok(l)
    });
    let layers = match layers {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ksearch: error: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Command::Config { json } = &cli.command {
        return std::process::ExitCode::from(config::config(&cli, &layers, *json));
    }
    let filter = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KSEARCH_LOG")
                .unwrap_or_else(|_| filter.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match dispatch(cli) {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("ksearch: error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

fn print_json(v: &impl serde::Serialize) {
    println!("{}", serde_json::to_string(v).expect("json"));
}

/// The hash of a finished run's best candidate, if it has one.
fn best_candidate(row: &crate::store::RunRow) -> Option<&str> {
    row.result
        .as_ref()?
        .best
        .as_ref()
        .map(|b| b.candidate.as_str())
}

/// `--quiet`, for the places that print progress and notices.
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn quiet() -> bool {
    QUIET.load(std::sync::atomic::Ordering::Relaxed)
}

/// Each command is a file of this folder: `dispatch` only hands a command its arguments.
fn dispatch(cli: Cli) -> Result<u8> {
    QUIET.store(cli.quiet, std::sync::atomic::Ordering::Relaxed);
    report::set_color(cli.color);
    let store_dir = store::default_dir(cli.store.as_deref());
    let python = cli.python.clone();
    let python = python.as_deref();
    match cli.command {
        Command::Tasks { json } => tasks::tasks(json),
        Command::Run(a) => run::run(*a, &store_dir, python),
        Command::Resume(a) => run::resume(a, &store_dir, python),
        Command::Runs(a) => runs::runs(a, &store_dir),
        Command::Compare(a) => compare::compare(&store_dir, &a.a, &a.b, a.json),
        Command::Show(a) => show::show(a, &store_dir),
        Command::Report(a) => report_html::report(a, &store_dir),
        Command::Serve(a) => serve::serve(a, &store_dir),
        Command::Eval(a) => eval::eval(a, python),
        Command::Doctor { json } => doctor::doctor(&store_dir, python, json),
        Command::Gc(a) => gc::gc(&store_dir, a.dry_run, a.older_than, a.json),
        Command::Config { .. } => unreachable!("answered in main"),
        Command::Completions { shell } => completions(shell),
        Command::Check(a) => check::check(&a.path, a.task, &a.include, a.json),
        Command::Translate(a) => {
            translate::translate(&a.file, a.to, a.out, a.json, a.force, &a.include)
        }
        Command::BackTranslate(a) => back_translate::back_translate(a),
        Command::Export(a) => export::export(a, &store_dir),
    }
}

/// `ksearch completions SHELL`.
fn completions(shell: clap_complete::Shell) -> Result<u8> {
    use clap::CommandFactory;
    // Into a buffer: the generator panics on a closed pipe (`| head`); a write error here does not.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "ksearch", &mut script);
    use std::io::Write;
    match std::io::stdout().write_all(&script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(0),
    }
}

fn load_candidate(dir: &Path, task: &Task, target: Target) -> Result<Candidate> {
    let c = Candidate::load(dir)?;
    c.check_against(task)
        .map_err(|m| anyhow!("{}: {m}", dir.join("plan.toml").display()))?;
    if c.plan.target != target {
        bail!(
            "{}: the candidate is for target {}, not {target} (use --target {})",
            dir.join("plan.toml").display(),
            c.plan.target,
            c.plan.target
        );
    }
    Ok(c)
}

fn settings_for(
    task: &Task,
    target: Target,
    checks: usize,
    timeout: Option<f64>,
    timing_budget: Option<f64>,
) -> Result<Settings> {
    let mut settings = Settings::for_task(task, target);
    if checks == 0 {
        bail!("--checks must be at least 1");
    }
    settings.checks = checks;
    if let Some(t) = timeout {
        if t.is_nan() || t <= 0.0 {
            bail!("--timeout must be a positive number of seconds");
        }
        settings.timeout_s = t;
    }
    if let Some(budget) = timing_budget {
        if !(budget.is_finite() && budget > 0.0) {
            bail!("--timing-budget must be a positive number of seconds");
        }
        settings.timing.budget_s = budget;
        // A comparison with the incumbent may take twice as long again while its verdict is open.
        settings.timing.compare_budget_s = 2.0 * budget;
    }
    Ok(settings)
}

/// Refuses to replace files a command would write where some already exist, unless `force`: a hand-edited
/// plan or kernel there would be lost without a word.
fn refuse_overwrite(dir: &Path, paths: Vec<PathBuf>, force: bool) -> Result<()> {
    let existing: Vec<String> = paths
        .iter()
        .filter(|p| p.exists())
        .map(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .collect();
    if force || existing.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = existing.iter().take(4).map(String::as_str).collect();
    let more = existing.len().saturating_sub(shown.len());
    bail!(
        "{}: would replace {}{}; pass --force to replace them, or give another --out",
        dir.display(),
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )
}
