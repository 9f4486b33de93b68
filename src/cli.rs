//! The command line. Each command prints a readable report, or with `--json` one JSON object as its
//! last stdout line (progress goes to stderr), so scripts and people read the same run.

use crate::candidate::Candidate;
use crate::eval::{self, Evaluator, Settings};
use crate::search::StrategyKind;
use crate::search::run::{self, Event, Runner};
use crate::store::{self, Store};
use crate::target::Target;
use crate::task::{Task, Workload};
use crate::{builtin, pyenv, report};
use anyhow::{Context, Result, anyhow, bail};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
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
    Run {
        #[arg(default_value = DEFAULT_TASK)]
        task: String,
        #[arg(long, default_value = "cpu")]
        target: Target,
        /// Default: `world-model` when an LLM is given, else `tune`.
        #[arg(long, value_enum)]
        strategy: Option<StrategyKind>,
        /// LLM strategies: rounds (one code generation and its evaluation, as K-Search counts; the seed and
        /// tuning variants are not rounds). `tune`: evaluations (the seed counts as one).
        #[arg(long, default_value_t = 30, value_parser = flags::at_least_one::<usize>)]
        budget: usize,
        /// Seed candidate name under seeds/<target>/ (default: `naive`, else the first).
        #[arg(long, conflicts_with = "candidate")]
        seed: Option<String>,
        /// Start from this candidate folder instead of a task seed.
        #[arg(long)]
        candidate: Option<PathBuf>,
        /// Start from the task's specification alone, with no seed candidate (K-Search's SPEC+ACTION):
        /// the first round writes the whole candidate. `--strategy world-model` only.
        #[arg(long)]
        from_spec: bool,
        /// Deadline of one workload evaluation, seconds (default: the task's timeout_s).
        #[arg(long, value_parser = flags::seconds)]
        timeout: Option<f64>,
        /// Fresh random inputs checked per workload.
        #[arg(long, default_value_t = 3, value_parser = flags::at_least_one::<usize>)]
        checks: usize,
        /// Seconds of timing per workload (more samples, tighter medians; default 0.15 on the CPU, 0.3 on GPUs).
        #[arg(long, value_parser = flags::seconds)]
        timing_budget: Option<f64>,
        /// Evaluations spent tuning the tunables of each generated candidate (hybrid search; 0: none;
        /// default 6, 0 under `--preset k-search`).
        #[arg(long)]
        tune_budget: Option<usize>,
        /// Evaluations the hybrid search may spend tuning in the whole run (default: twice --budget).
        #[arg(long)]
        tune_total: Option<usize>,
        #[command(flatten)]
        wm: WorldModelArgs,
        #[command(flatten)]
        llm: LlmArgs,
        #[arg(long)]
        json: bool,
    },
    /// Continue a run that was interrupted (killed, crashed, Ctrl-C).
    Resume {
        run: String,
        /// Use this LLM instead of the one the run was started with.
        #[command(flatten)]
        llm: LlmArgs,
        #[arg(long)]
        json: bool,
    },
    /// List the runs in the store (`runs rm RUN…` deletes runs). A RUN argument anywhere is a run id,
    /// a unique prefix of one, or `last`.
    Runs {
        #[command(subcommand)]
        action: Option<RunsAction>,
        #[arg(long)]
        json: bool,
    },
    /// Two runs side by side: per workload, each run's best candidate's time and the ratio.
    Compare {
        a: String,
        b: String,
        #[arg(long)]
        json: bool,
    },
    /// Show one run: configuration, best candidate, every evaluation.
    Show {
        run: String,
        #[arg(long)]
        json: bool,
        /// Write the best candidate (tunables set to the chosen values) into this folder.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print the world model (the JSON holds its `nodes`).
        #[arg(long)]
        tree: bool,
        /// Write the run's LLM exchanges as a cassette (JSON lines) for `--llm replay:FILE`.
        #[arg(long)]
        cassette: Option<PathBuf>,
        /// Replace files already in the output folder (refused otherwise: hand edits there would be lost).
        #[arg(long)]
        force: bool,
    },
    /// Evaluate candidate folders against the reference and the baselines on every workload (several
    /// candidates share one worker and the same input sets).
    Eval {
        task: String,
        #[arg(required = true, num_args = 1..)]
        candidate: Vec<PathBuf>,
        #[arg(long)]
        target: Option<Target>,
        #[arg(long, value_parser = flags::seconds)]
        timeout: Option<f64>,
        #[arg(long, default_value_t = 3, value_parser = flags::at_least_one::<usize>)]
        checks: usize,
        /// Seconds of timing per workload (default 0.15 on the CPU, 0.3 on GPUs).
        #[arg(long, value_parser = flags::seconds)]
        timing_budget: Option<f64>,
        /// Evaluate with this tunable value instead of its default (repeatable), e.g. `--set U=4`.
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
        /// Evaluate only this workload (repeatable); default: every workload, held-out ones included.
        #[arg(long = "workload", value_name = "NAME")]
        workloads: Vec<String>,
        /// MLX targets: also report independent calls' throughput and one call alone, beside the latency.
        #[arg(long)]
        throughput: bool,
        /// Time each candidate side by side with this one (a candidate folder), on the same inputs, and give
        /// the verdict: faster, slower or within noise.
        #[arg(long, value_name = "DIR")]
        incumbent: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Export a kernel as a Python module for MLX programs (with its test): the best candidate of RUN,
    /// or the candidate in a folder (then name its task with --task).
    Export {
        source: String,
        #[arg(long)]
        task: Option<String>,
        #[arg(long, default_value = "mlx-python")]
        format: String,
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// Replace files already in the output folder (refused otherwise: hand edits there would be lost).
        #[arg(long)]
        force: bool,
    },
    /// Rewrite an mlx-metal candidate folder into an mlx-cuda one (Metal built-ins emulated in CUDA), so
    /// that the Metal kernel's logic can be checked on an NVIDIA GPU.
    BackTranslate {
        candidate: PathBuf,
        /// Output folder (default: `<candidate folder>-mlx-cuda` in the current directory).
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long)]
        json: bool,
        /// Replace files already in the output folder (refused otherwise: hand edits there would be lost).
        #[arg(long)]
        force: bool,
    },
    /// Remove what nothing needs any more: candidates no run refers to (left by `runs rm`), and in the
    /// cache folder the unpacked worker, tasks and Python environments of other ksearch versions and
    /// reference outputs not used for a while. All of it is made again on demand; no result is lost.
    Gc {
        /// List what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// Cache entries (other versions, references) must have gone unused (their date not renewed by a
        /// use) for this many days.
        #[arg(long, default_value_t = 7.0, value_parser = flags::days)]
        older_than: f64,
        #[arg(long)]
        json: bool,
    },
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
    /// with coded diagnostics for what cannot be translated (docs/translate.md).
    Translate {
        file: PathBuf,
        /// mlx-metal or mlx-cuda.
        #[arg(long)]
        to: Target,
        /// Output folder (default: <file stem>-<target> next to the current directory).
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long)]
        json: bool,
        /// Replace files already in the output folder (refused otherwise: hand edits there would be lost).
        #[arg(long)]
        force: bool,
        /// A folder to search for the file's own headers (after the including file's folder); repeatable.
        /// Headers are read in; the translation carries what its kernels use.
        #[arg(short = 'I', long = "include", value_name = "DIR")]
        include: Vec<PathBuf>,
    },
    /// Check a Metal kernel for what would fail on a Mac (docs/check.md): a complete .metal file, or an
    /// mlx-metal candidate folder (its task is found above it, or named with --task). Exit 1 on errors.
    Check {
        path: PathBuf,
        #[arg(long)]
        task: Option<String>,
        /// A folder to search for a complete file's local includes (after the file's own folder); repeatable.
        #[arg(short = 'I', long = "include", value_name = "DIR")]
        include: Vec<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum RunsAction {
    /// Delete runs and everything stored for them (refused for a run in progress).
    Rm {
        #[arg(required = true)]
        runs: Vec<String>,
    },
}

/// Published algorithms `--preset` reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Preset {
    /// K-Search's rules as its code runs them (docs/world-model.md lists each and ksearch's default).
    KSearch,
}

/// The world model's rules: a preset, then each rule given explicitly over it.
#[derive(clap::Args, Clone, Default)]
struct WorldModelArgs {
    /// `k-search`: window 7, no tuning, K-Search's selection, proposals every cycle, cumulative edits,
    /// too-hard actions kept open, IMPROVE on the last attempt, held-out results at the end only. Flags
    /// given explicitly win.
    #[arg(long, value_enum)]
    preset: Option<Preset>,
    /// World model: rounds in a row without improvement that end a cycle (default 3; 7 in the preset).
    #[arg(long, value_parser = flags::at_least_one::<u32>)]
    window: Option<u32>,
    /// World model: a cap on rounds per cycle (none by default).
    #[arg(long, value_parser = flags::at_least_one::<u32>)]
    max_cycle_rounds: Option<u32>,
    /// World model: how the next action is chosen.
    #[arg(long, value_enum)]
    selection: Option<crate::search::world_model::Selection>,
    /// World model: what becomes of an action whose cycle never passed.
    #[arg(long, value_enum)]
    too_hard: Option<crate::search::world_model::TooHard>,
    /// World model: how the LLM's tree edits are applied.
    #[arg(long, value_enum)]
    edits: Option<crate::search::world_model::Edits>,
    /// World model: what an IMPROVE round edits.
    #[arg(long, value_enum)]
    improve_from: Option<crate::search::world_model::ImproveFrom>,
    /// World model: when the LLM is asked for new actions.
    #[arg(long, value_enum)]
    propose: Option<crate::search::world_model::Propose>,
    /// World model: when the model sees the held-out workloads' results (`cycle`: each cycle's best is
    /// scored on them before its tree update; `final`: only the run's best, at the end).
    #[arg(long, value_enum)]
    held_out_evidence: Option<crate::search::world_model::HeldOutEvidence>,
}

impl WorldModelArgs {
    fn config(&self) -> crate::search::world_model::WorldModelConfig {
        use crate::search::world_model::WorldModelConfig;
        let mut c = match self.preset {
            Some(Preset::KSearch) => WorldModelConfig::k_search(),
            None => WorldModelConfig::default(),
        };
        if let Some(w) = self.window {
            c.window = w;
        }
        c.max_cycle_rounds = self.max_cycle_rounds.or(c.max_cycle_rounds);
        c.selection = self.selection.unwrap_or(c.selection);
        c.too_hard = self.too_hard.unwrap_or(c.too_hard);
        c.edits = self.edits.unwrap_or(c.edits);
        c.improve_from = self.improve_from.unwrap_or(c.improve_from);
        c.propose = self.propose.unwrap_or(c.propose);
        c.held_out = self.held_out_evidence.unwrap_or(c.held_out);
        c
    }
}

/// Which LLM to use and how much of it.
#[derive(clap::Args, Clone, Default)]
struct LlmArgs {
    /// PROVIDER:MODEL with PROVIDER one of openai, openai-responses, anthropic, gemini, llamacpp, ollama,
    /// lmstudio, vllm, mlx-lm, openrouter; or command:CMDLINE (prompt on stdin, reply on stdout); or
    /// replay:RUN / replay:FILE.jsonl to replay recorded exchanges.
    #[arg(long, env = "KSEARCH_LLM")]
    llm: Option<String>,
    /// Base URL of an OpenAI-compatible server (overrides OPENAI_BASE_URL and the provider's default).
    #[arg(long)]
    llm_base_url: Option<String>,
    /// Seconds per LLM request.
    #[arg(long, default_value_t = 300.0, value_parser = flags::seconds)]
    llm_timeout: f64,
    /// Retries of a failed request (timeouts, 429, 5xx), with backoff.
    #[arg(long, default_value_t = 3)]
    llm_retries: u32,
    /// Reasoning effort for models that take one (low, medium, high).
    #[arg(long)]
    reasoning_effort: Option<String>,
    #[arg(long, value_parser = flags::temperature)]
    temperature: Option<f32>,
    /// Cap on the tokens of each reply.
    #[arg(long, value_parser = flags::at_least_one::<u32>)]
    llm_max_output: Option<u32>,
    /// Caps, checked before each call. Default calls cap: 6 per evaluation in the budget, plus 20.
    #[arg(long)]
    max_llm_calls: Option<u64>,
    #[arg(long)]
    max_llm_tokens: Option<u64>,
    /// US dollars, from the prices in data/prices.toml (or your own prices file).
    #[arg(long, value_parser = flags::dollars)]
    max_llm_cost: Option<f64>,
    /// Seconds of wall time for all LLM calls together.
    #[arg(long, value_parser = flags::seconds)]
    max_llm_time: Option<f64>,
}

impl LlmArgs {
    fn settings(&self, budget: usize) -> Option<run::LlmSettings> {
        let spec = self.llm.clone()?;
        let mut config = crate::llm::LlmConfig {
            timeout_s: self.llm_timeout,
            max_retries: self.llm_retries,
            base_url: self.llm_base_url.clone(),
            reasoning_effort: self.reasoning_effort.clone(),
            temperature: self.temperature,
            ..Default::default()
        };
        config.budget.max_calls = Some(self.max_llm_calls.unwrap_or(6 * budget as u64 + 20));
        config.budget.max_tokens = self.max_llm_tokens;
        config.budget.max_cost_usd = self.max_llm_cost;
        config.budget.max_wall_s = self.max_llm_time;
        Some(run::LlmSettings {
            spec,
            config,
            max_output_tokens: self.llm_max_output,
        })
    }
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
    let Command::Run {
        task,
        target,
        strategy,
        budget,
        llm,
        ..
    } = &mut cli.command
    else {
        return Ok(());
    };
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
        return std::process::ExitCode::from(cmd_config(&cli, &layers, *json));
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

/// `--from-spec` with the flags it excludes: each refusal names the flag and the fix.
fn check_from_spec(
    strategy: StrategyKind,
    seed: Option<&str>,
    candidate: Option<&Path>,
) -> Result<()> {
    if let Some(s) = seed {
        bail!(
            "--from-spec starts without a seed candidate, so it cannot be used with --seed {s}: drop one of the two"
        );
    }
    if let Some(c) = candidate {
        bail!(
            "--from-spec starts without a seed candidate, so it cannot be used with --candidate {}: drop one of the two",
            c.display()
        );
    }
    match strategy {
        StrategyKind::WorldModel => Ok(()),
        StrategyKind::Tune => bail!(
            "--from-spec needs an LLM to write the first candidate, and `tune` only varies a seed's tunables: \
             use `--strategy world-model --llm PROVIDER:MODEL`, or drop --from-spec"
        ),
        other => bail!(
            "--from-spec works with `--strategy world-model` (and its `--preset k-search`) only, not `{}`: \
             use `--strategy world-model`, or drop --from-spec",
            other.name()
        ),
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

fn dispatch(cli: Cli) -> Result<u8> {
    QUIET.store(cli.quiet, std::sync::atomic::Ordering::Relaxed);
    report::set_color(cli.color);
    let store_dir = store::default_dir(cli.store.as_deref());
    let python = cli.python.clone();
    match cli.command {
        Command::Tasks { json } => cmd_tasks(json),
        Command::Run {
            task,
            target,
            strategy,
            budget,
            seed,
            candidate,
            from_spec,
            timeout,
            checks,
            timing_budget,
            tune_budget,
            tune_total,
            wm,
            llm,
            json,
        } => {
            let llm_settings = llm.settings(budget);
            let strategy = strategy.unwrap_or(if llm_settings.is_some() {
                StrategyKind::WorldModel
            } else {
                StrategyKind::Tune
            });
            if strategy != StrategyKind::Tune && llm_settings.is_none() {
                bail!(
                    "strategy `{}` needs an LLM: pass --llm PROVIDER:MODEL (e.g. openai:gpt-5.2, llamacpp:gemma, replay:RUN); \
                     `--strategy tune` searches the seed's tunables without one",
                    strategy.name()
                );
            }
            if budget == 0 {
                bail!("--budget must be at least 1 (the seed's own evaluation)");
            }
            if from_spec {
                check_from_spec(strategy, seed.as_deref(), candidate.as_deref())?;
            }
            let task = Task::load(&builtin::task_dir(&task)?)?;
            let (seed_cand, seed_name) = match candidate {
                _ if from_spec => (None, "(from the specification)".to_string()),
                Some(dir) => (
                    Some(load_candidate(&dir, &task, target)?),
                    dir.display().to_string(),
                ),
                None => {
                    let s = task.find_seed(target, seed.as_deref()).ok_or_else(|| {
                        anyhow!(
                            "task `{}` has no seed{} for target {target} (it has: {})",
                            task.name(),
                            seed.as_ref().map(|s| format!(" `{s}`")).unwrap_or_default(),
                            describe_seeds(&task)
                        )
                    })?;
                    (Some(Candidate::load(&s.dir)?), s.name.clone())
                }
            };
            let settings = settings_for(&task, target, checks, timeout, timing_budget)?;
            let store = Store::open(&store_dir)?;
            // Built before the run exists, so a bad spec or a missing key is reported with nothing to clean up.
            let client = match &llm_settings {
                Some(l) if strategy != StrategyKind::Tune => {
                    Some(run::make_llm(&store, &l.spec, &l.config)?)
                }
                _ => None,
            };
            let run_id = run::create(
                &store,
                run::NewRun {
                    task: &task,
                    target,
                    seed: seed_cand.as_ref(),
                    seed_name,
                    settings,
                    strategy,
                    budget,
                    llm: llm_settings.filter(|_| strategy != StrategyKind::Tune),
                    tune_budget: tune_budget.unwrap_or(if wm.preset.is_some() { 0 } else { 6 }),
                    tune_total,
                    world_model: wm.config(),
                },
            )?;
            if !json && !quiet() {
                eprintln!(
                    "ksearch: run {run_id} (resume with `ksearch resume {run_id}` if interrupted)"
                );
            }
            match execute(&store, &run_id, python.as_deref(), client, json) {
                // The evaluator could not start (Python, the target, the task's reference): the run never
                // began, so it is not kept as an empty `interrupted` run.
                Err(e) if store.forget_unstarted_run(&run_id).unwrap_or(false) => {
                    Err(e.context(format!("run {run_id} could not start; it was not kept")))
                }
                r => r,
            }
        }
        Command::Resume { run, llm, json } => {
            let store = Store::open(&store_dir)?;
            let run = store.resolve_run(&run)?;
            let before = store
                .run(&run)?
                .ok_or_else(|| anyhow!("no run `{run}` in {}", store.path().display()))?;
            let attempts = store.attempts(&run, None)?.len();
            // The lease first, before anything slow: a second `resume` of the run is refused now.
            store.claim_run(&run)?;
            let result = match llm.settings(before.budget as usize) {
                Some(l) => run::make_llm(&store, &l.spec, &l.config).map(Some),
                None => Ok(None),
            }
            .and_then(|client| execute(&store, &run, python.as_deref(), client, json));
            // Failed before evaluating anything (a bad LLM spec, no Python, a worker that cannot
            // start): the run is left as it was, its status and error included.
            if result.is_err() && store.attempts(&run, None)?.len() == attempts {
                store.release_run(&run, before.status, before.error.as_deref())?;
            }
            result
        }
        Command::Runs {
            action: Some(RunsAction::Rm { runs }),
            json: _,
        } => {
            let store = Store::open(&store_dir)?;
            // Every name resolved before anything is deleted: a typo deletes nothing.
            let mut ids = runs
                .iter()
                .map(|r| store.resolve_run(r))
                .collect::<Result<Vec<_>, _>>()?;
            ids.sort();
            ids.dedup();
            for id in ids {
                store.remove_run(&id)?;
                println!("removed {id}");
            }
            Ok(0)
        }
        Command::Compare { a, b, json } => cmd_compare(&store_dir, &a, &b, json),
        Command::Runs { action: None, json } => {
            let store = Store::open_read(&store_dir)?;
            let runs = match &store {
                Some(s) => s.runs()?,
                None => Vec::new(),
            };
            if json {
                print_json(&json!(runs.iter().map(|r| json!({
                    "run_id": r.run_id, "task": r.task, "target": r.target, "strategy": r.strategy,
                    "status": r.status, "evaluations": r.evaluations, "budget": r.budget,
                    "created_at": r.created_at, "updated_at": r.updated_at,
                    "best": r.result.as_ref().and_then(|x| x.best.as_ref()),
                })).collect::<Vec<_>>()));
            } else if runs.is_empty() {
                println!("no runs in {}", store_dir.join("ksearch.db").display());
            } else {
                println!("{}", report::runs_table(&runs));
            }
            Ok(0)
        }
        Command::Show {
            run,
            json,
            out,
            tree,
            cassette,
            force,
        } => {
            let run = Store::open_existing(&store_dir)?.resolve_run(&run)?;
            if let Some(path) = cassette {
                write_cassette(&store_dir, &run, &path)?;
            }
            if tree {
                cmd_tree(&store_dir, &run, json)
            } else {
                cmd_show(&store_dir, &run, json, out.as_deref(), force)
            }
        }
        Command::Eval {
            task,
            candidate,
            target,
            timeout,
            checks,
            timing_budget,
            set,
            workloads,
            throughput,
            incumbent,
            json,
        } => {
            let task = Task::load(&builtin::task_dir(&task)?)?;
            let pick = EvalPick {
                set: parse_sets(&set)?,
                workloads,
                throughput,
                incumbent,
            };
            cmd_eval(
                task,
                &candidate,
                target,
                (checks, timeout, timing_budget),
                &pick,
                python.as_deref(),
                json,
            )
        }
        Command::Doctor { json } => cmd_doctor(&store_dir, python.as_deref(), json),
        Command::Gc {
            dry_run,
            older_than,
            json,
        } => cmd_gc(&store_dir, dry_run, older_than, json),
        Command::Config { .. } => unreachable!("answered in main"),
        Command::Completions { shell } => {
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
        Command::Check {
            path,
            task,
            include,
            json,
        } => cmd_check(&path, task, &include, json),
        Command::Translate {
            file,
            to,
            out,
            json,
            force,
            include,
        } => cmd_translate(&file, to, out, json, force, &include),
        Command::BackTranslate {
            candidate,
            out,
            json,
            force,
        } => {
            let bt = crate::back_translate::back_translate_dir(&candidate)?;
            let out = out.unwrap_or_else(|| {
                let base = candidate
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned());
                PathBuf::from(format!(
                    "{}-mlx-cuda",
                    base.unwrap_or_else(|| bt.report.name.clone())
                ))
            });
            // Writing over the Metal candidate itself is refused by `write`, with its own reason.
            let itself = candidate.canonicalize().ok() == out.canonicalize().ok()
                && out.canonicalize().is_ok();
            if !itself {
                refuse_overwrite(&out, bt.candidate.written_paths(&out), force)?;
            }
            bt.write(&candidate, &out)?;
            if json {
                print_json(&json!({"out": out, "hash": bt.candidate.hash(), "report": bt.report}));
            } else {
                print!("{}", crate::back_translate::report_text(&bt.report, &out));
            }
            Ok(0)
        }
        Command::Export {
            source,
            task,
            format,
            out,
            force,
        } => {
            if format != "mlx-python" {
                bail!("--format {format}: the only export format is mlx-python");
            }
            let dir = Path::new(&source);
            let (task, cand) = if dir.join("plan.toml").is_file() {
                let task =
                    task.ok_or_else(|| anyhow!("exporting a candidate folder needs --task TASK"))?;
                let task = Task::load(&builtin::task_dir(&task)?)?;
                let c = Candidate::load(dir)?;
                c.check_against(&task)
                    .map_err(|m| anyhow!("{}: {m}", dir.join("plan.toml").display()))?;
                (task, c)
            } else {
                let store = Store::open_existing(&store_dir)?;
                let row = store.run(&source)?.ok_or_else(|| {
                    anyhow!(
                        "`{source}` is neither a candidate folder nor a run in {}",
                        store.path().display()
                    )
                })?;
                let hash = best_candidate(&row)
                    .ok_or_else(|| anyhow!("run {source} has no best candidate"))?
                    .to_string();
                let c = store
                    .candidate(&hash)?
                    .ok_or_else(|| anyhow!("candidate {hash} missing from the store"))?;
                (Task::load(Path::new(&row.task_dir))?, c)
            };
            let function = crate::export::function_name(&task);
            refuse_overwrite(
                &out,
                vec![
                    out.join(format!("{function}.py")),
                    out.join(format!("{function}_test.py")),
                ],
                force,
            )?;
            let (module, test) = crate::export::mlx_python(&task, &cand, &out)?;
            println!("{}\n{}", module.display(), test.display());
            Ok(0)
        }
    }
}

fn describe_seeds(task: &Task) -> String {
    let all: Vec<String> = task
        .seeds
        .iter()
        .flat_map(|(t, s)| s.iter().map(move |s| format!("{t}/{}", s.name)))
        .collect();
    if all.is_empty() {
        "none".into()
    } else {
        all.join(", ")
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

fn execute(
    store: &Store,
    run_id: &str,
    python: Option<&Path>,
    llm: Option<crate::llm::Llm>,
    json: bool,
) -> Result<u8> {
    let env = pyenv::ensure(python)?;
    if let Some(row) = store.run(run_id)? {
        env.ensure_target(row.target.parse().map_err(|e: String| anyhow!(e))?)?;
    }
    let mut runner = Runner::open(store, run_id, env, llm)?;
    let bar = if json || quiet() {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(runner.config.budget as u64)
    };
    // The bar: budget spent, an estimate of the time left (from the rate so far), the last and best
    // results (prefix) and what the run is doing now (message: the phase of the evaluation or LLM call).
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} ({left}) {prefix} {wide_msg}",
        )
        .expect("template")
        .with_key(
            "left",
            |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                // An estimate needs one finished step to go on.
                let _ = if s.pos() == 0 {
                    write!(w, "estimating")
                } else {
                    write!(w, "~{} left", indicatif::HumanDuration(s.eta()))
                };
            },
        )
        .progress_chars("=> "),
    );
    if !bar.is_hidden() {
        bar.enable_steady_tick(std::time::Duration::from_millis(250));
    }
    let run_id = runner.run_id.clone();
    {
        let bar = bar.clone();
        let run_id = run_id.clone();
        crate::progress::set_sink(Some(Box::new(move |p| {
            if json {
                eprintln!(
                    "{}",
                    with_fields(progress_json(&run_id, "phase"), p.to_json())
                );
            }
            bar.set_message(p.describe());
        })));
    }
    let result = runner.execute(|e| {
        if json {
            // Progress as JSON lines on stderr, for scripts (docs/formats.md §6); stdout keeps the result.
            eprintln!("{}", progress_event(&run_id, &e));
        }
        progress_bar(&bar, e)
    });
    crate::progress::set_sink(None);
    bar.finish_and_clear();
    let result = result?;
    if json {
        print_json(&result);
    } else {
        print!("{}", report::run_summary(&result));
    }
    Ok(if result.status == store::RunStatus::Completed {
        0
    } else {
        1
    })
}

/// The fields every progress event carries.
fn progress_json(run_id: &str, event: &str) -> Value {
    json!({"event": event, "run_id": run_id, "time": crate::clock::now()})
}

/// One progress event as a JSON line (`docs/formats.md` §6).
fn progress_event(run_id: &str, e: &Event<'_>) -> Value {
    let (event, fields) = match e {
        Event::Started { budget, done } => ("started", json!({"budget": budget, "done": done})),
        Event::Evaluated { obs, best, budget } => (
            "evaluated",
            json!({
                "candidate": obs.hash, "origin": obs.origin,
                "passed": obs.summary.passed, "geomean_s": obs.summary.geomean_s,
                "failure": obs.summary.first_failure, "wall_s": obs.wall_s(),
                "best": best.map(|b| json!({"candidate": b.hash, "geomean_s": b.summary.geomean_s})),
                "budget": {"unit": if budget.rounds { "rounds" } else { "evaluations" }, "used": budget.used,
                           "total": budget.total, "tuning_used": budget.tune_used, "tuning_total": budget.tune_total},
            }),
        ),
        Event::FinalPhase { candidate } => ("final_phase", json!({"candidate": candidate})),
        Event::HeldOutCheck { candidate } => ("held_out_check", json!({"candidate": candidate})),
    };
    with_fields(progress_json(run_id, event), fields)
}

/// `base` with the fields of the object `more` added.
fn with_fields(mut base: Value, more: Value) -> Value {
    if let (Some(b), Value::Object(m)) = (base.as_object_mut(), more) {
        b.extend(m);
    }
    base
}

fn progress_bar(bar: &ProgressBar, e: Event<'_>) {
    match e {
        Event::Started { budget, done } => {
            bar.set_length(budget as u64);
            bar.set_position(done as u64);
        }
        Event::Evaluated { obs, best, budget } => {
            bar.set_position(budget.used as u64);
            let status = if obs.summary.passed {
                crate::units::fmt_time(obs.summary.geomean_s)
            } else {
                crate::units::head_line(obs.summary.first_failure.as_deref().unwrap_or(""), 60)
            };
            bar.set_prefix(format!(
                "last {status} | best {} |",
                best.map(|b| crate::units::fmt_time(b.summary.geomean_s))
                    .unwrap_or_else(|| "–".into())
            ));
        }
        Event::FinalPhase { candidate } => {
            bar.set_prefix(format!("held-out workloads on {candidate} |"))
        }
        Event::HeldOutCheck { candidate } => {
            bar.set_prefix(format!("held-out check of {candidate} |"))
        }
    }
}

fn cmd_tasks(json: bool) -> Result<u8> {
    let mut rows = Vec::new();
    for name in builtin::task_names() {
        // One broken task folder is reported, not fatal to the listing.
        let task = match builtin::task_dir(&name).and_then(|d| Ok(Task::load(&d)?)) {
            Ok(t) => t,
            Err(e) => {
                rows.push(json!({"name": name, "error": format!("{e:#}"), "targets": [], "workloads": 0, "held_out": 0, "baselines": []}));
                continue;
            }
        };
        rows.push(json!({
            "name": task.name(),
            "description": task.toml.description,
            "targets": task.targets().iter().map(|t| t.name()).collect::<Vec<_>>(),
            "workloads": task.workloads(false).count(),
            "held_out": task.workloads(true).count(),
            "baselines": task.toml.baseline.iter().map(|b| b.name.clone()).collect::<Vec<_>>(),
            "seeds": task.seeds.iter().map(|(t, s)| (t.name().to_string(), s.iter().map(|s| s.name.clone()).collect::<Vec<_>>())).collect::<std::collections::BTreeMap<_, _>>(),
        }));
    }
    if json {
        print_json(&json!(rows));
    } else {
        println!("{}", report::tasks_table(&rows));
    }
    Ok(0)
}

fn write_cassette(store_dir: &Path, run_id: &str, path: &Path) -> Result<()> {
    let store = Store::open_existing(store_dir)?;
    let ex = store.exchanges(run_id)?;
    if ex.is_empty() {
        bail!("run {run_id} has no recorded LLM exchanges");
    }
    let mut text = String::new();
    for e in &ex {
        text.push_str(&serde_json::to_string(e)?);
        text.push('\n');
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "ksearch: wrote {} exchanges to {}",
        ex.len(),
        path.display()
    );
    Ok(())
}

/// The latest world model of a run: the strategy's live state, else the last snapshot.
fn cmd_config(cli: &Cli, layers: &crate::defaults::Layers, json: bool) -> u8 {
    let (_, mut origins) = layers.merged();
    let store = store::default_dir(cli.store.as_deref());
    if !origins.iter().any(|o| o.key == "store") {
        let source = if std::env::var_os("KSEARCH_STORE").is_some() {
            "environment (KSEARCH_STORE)"
        } else {
            "built-in default"
        };
        origins.insert(
            0,
            crate::defaults::Origin {
                key: "store",
                value: json!(store),
                source: source.into(),
            },
        );
    }
    if json {
        print_json(
            &json!({"settings": origins, "files": layers.layers.iter().map(|(s, _)| s).collect::<Vec<_>>()}),
        );
    } else if origins.is_empty() {
        println!(
            "no config file found (ksearch.toml upward from here, or [defaults] in ~/.config/ksearch/config.toml)"
        );
    } else {
        for o in &origins {
            println!("{} = {}    # {}", o.key, o.value, o.source);
        }
    }
    0
}

fn cmd_compare(store_dir: &Path, a: &str, b: &str, json: bool) -> Result<u8> {
    let store = Store::open_existing(store_dir)?;
    let mut rows = Vec::new();
    for name in [a, b] {
        let id = store.resolve_run(name)?;
        let row = store.run(&id)?.expect("resolved");
        rows.push(row);
    }
    // Each run's best, timed beside its baselines at the end where it was (`confirmed`), else as searched.
    let times = |r: &crate::store::RunRow| -> Vec<(String, Option<f64>)> {
        let Some(best) = r.result.as_ref().and_then(|x| x.best.as_ref()) else {
            return Vec::new();
        };
        best.confirmed
            .as_ref()
            .unwrap_or(&best.workloads)
            .iter()
            .map(|w| (w.workload.clone(), w.median_s))
            .collect()
    };
    let (ta, tb) = (times(&rows[0]), times(&rows[1]));
    let mut names: Vec<String> = ta.iter().map(|(n, _)| n.clone()).collect();
    for (n, _) in &tb {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    let get =
        |t: &[(String, Option<f64>)], n: &str| t.iter().find(|(m, _)| m == n).and_then(|x| x.1);
    let per: Vec<Value> = names
        .iter()
        .map(|n| {
            let (x, y) = (get(&ta, n), get(&tb, n));
            json!({"workload": n, "a_s": x, "b_s": y, "b_speedup_over_a": x.zip(y).map(|(x, y)| x / y)})
        })
        .collect();
    let summary = |r: &crate::store::RunRow| {
        json!({"run_id": r.run_id, "task": r.task, "target": r.target, "strategy": r.strategy, "status": r.status,
               "hardware": r.hardware["name"],
               "best": best_candidate(r),
               "speedup_vs_seed": r.result.as_ref().and_then(|x| x.best.as_ref()).and_then(|b| b.speedup_vs_seed)})
    };
    let v = json!({"a": summary(&rows[0]), "b": summary(&rows[1]), "workloads": per});
    if json {
        print_json(&v);
        return Ok(0);
    }
    if rows[0].task != rows[1].task {
        eprintln!(
            "ksearch: the runs are of different tasks ({} and {}): workloads are compared by name",
            rows[0].task, rows[1].task
        );
    }
    println!("{}", report::compare_table(&v));
    Ok(0)
}

fn cmd_tree(store_dir: &Path, run_id: &str, json: bool) -> Result<u8> {
    let store = Store::open_existing(store_dir)?;
    store
        .run(run_id)?
        .ok_or_else(|| anyhow!("no run `{run_id}` in {}", store.path().display()))?;
    let tree = store
        .strategy_state(run_id)?
        .and_then(|s| s.get("wm").cloned().filter(|w| !w.is_null()))
        .and_then(|wm| {
            serde_json::from_value::<crate::search::world_model::tree::WorldModel>(wm).ok()
        })
        .map(|wm| crate::search::world_model::wire::tree_json(&wm))
        .or_else(|| store.snapshots(run_id).ok().and_then(|s| s.last().cloned()))
        .ok_or_else(|| {
            anyhow!("run {run_id} has no world model (only the world-model strategy keeps one)")
        })?;
    if json {
        print_json(&tree);
    } else {
        print!("{}", report::tree_text(&tree));
    }
    Ok(0)
}

fn cmd_show(
    store_dir: &Path,
    run_id: &str,
    json: bool,
    out: Option<&Path>,
    force: bool,
) -> Result<u8> {
    let store = Store::open_existing(store_dir)?;
    let row = store
        .run(run_id)?
        .ok_or_else(|| anyhow!("no run `{run_id}` in {}", store.path().display()))?;
    let attempts = store.attempts(run_id, None)?;
    let evals = store.evaluations(run_id)?;
    if let Some(dir) = out {
        let hash = best_candidate(&row)
            .ok_or_else(|| anyhow!("run {run_id} has no best candidate yet"))?;
        let c = store
            .candidate(hash)?
            .ok_or_else(|| anyhow!("candidate {hash} missing"))?;
        refuse_overwrite(dir, c.written_paths(dir), force)?;
        c.write_dir(dir)
            .with_context(|| format!("writing {}", dir.display()))?;
        eprintln!("ksearch: wrote best candidate {hash} to {}", dir.display());
    }
    if json {
        print_json(&json!({
            "run_id": row.run_id, "task": row.task, "target": row.target, "strategy": row.strategy,
            "status": row.status, "budget": row.budget, "evaluations": evals.iter().map(|(id, phase, cand, r)| {
                let mut v = serde_json::to_value(r).unwrap();
                v["id"] = json!(id); v["phase"] = json!(phase); v["candidate"] = json!(cand);
                v
            }).collect::<Vec<_>>(),
            "attempts": attempts, "config": shown_config(&row.config), "hardware": row.hardware,
            "result": row.result, "error": row.error, "created_at": row.created_at, "updated_at": row.updated_at,
            "evaluated_candidates": row.evaluations,
            "strategy_state": store.strategy_state(run_id)?,
        }));
        return Ok(0);
    }
    println!(
        "run {}  task {}  target {}  strategy {}  status {}  evaluations {}/{}",
        row.run_id, row.task, row.target, row.strategy, row.status, row.evaluations, row.budget
    );
    if let Some(e) = &row.error {
        println!("error: {e}");
    }
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_header(vec![
            "phase",
            "#",
            "candidate",
            "origin",
            "result",
            "geomean",
        ]);
    for a in &attempts {
        let s = a.summary.as_ref();
        t.add_row(vec![
            a.phase.to_string(),
            a.seq.to_string(),
            a.candidate.clone(),
            a.origin.clone(),
            match s {
                None => "in progress".into(),
                Some(s) if s.passed => "passed".into(),
                Some(s) => crate::units::head_line(s.first_failure.as_deref().unwrap_or(""), 70),
            },
            crate::units::fmt_time(s.and_then(|s| s.geomean_s)),
        ]);
    }
    println!("{t}");
    if let Some(result) = &row.result {
        print!("{}", report::run_summary(result));
    }
    Ok(0)
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

/// What `ksearch eval` measures besides the candidate's defaults: tunable values, a subset of workloads, and
/// the old clock's figures beside the new.
struct EvalPick {
    set: crate::candidate::Params,
    workloads: Vec<String>,
    throughput: bool,
    incumbent: Option<PathBuf>,
}

/// `--set NAME=VALUE` arguments as tunable values.
fn parse_sets(args: &[String]) -> Result<crate::candidate::Params> {
    let mut out = crate::candidate::Params::new();
    for a in args {
        let (k, v) = a
            .split_once('=')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| anyhow!("--set {a}: expected NAME=VALUE, e.g. --set U=4"))?;
        let k = k.trim();
        let v: i64 = v
            .trim()
            .parse()
            .map_err(|_| anyhow!("--set {a}: the value of `{k}` must be an integer"))?;
        if out.insert(k.to_string(), v).is_some() {
            bail!("--set {k} is given twice: keep one");
        }
    }
    Ok(out)
}

/// `--checks`, `--timeout` and `--timing-budget` as given (settings depend on the target, known later).
type SettingsArgs = (usize, Option<f64>, Option<f64>);

fn cmd_eval(
    task: Task,
    dirs: &[PathBuf],
    target: Option<Target>,
    settings: SettingsArgs,
    pick: &EvalPick,
    python: Option<&Path>,
    json: bool,
) -> Result<u8> {
    let probe = Candidate::load(&dirs[0])?;
    let target = target.unwrap_or(probe.plan.target);
    let mut settings = settings_for(&task, target, settings.0, settings.1, settings.2)?;
    settings.timing.throughput = pick.throughput;
    let mut cands = Vec::new();
    for dir in dirs {
        let cand = load_candidate(dir, &task, target)?
            .with_params(&pick.set)
            .map_err(|m| anyhow!("--set: {m} (see {})", dir.join("plan.toml").display()))?;
        if !pick.set.is_empty()
            && !cand
                .satisfies_constraints(&Default::default())
                .map_err(|m| anyhow!("{}: {m}", dir.join("plan.toml").display()))?
        {
            let rules: Vec<&str> = cand.plan.constraints.iter().map(|c| c.0.src()).collect();
            bail!(
                "--set: these tunable values break a constraint of {} ({}); pick others",
                dir.join("plan.toml").display(),
                rules.join(", ")
            );
        }
        cands.push(cand);
    }
    let names: Vec<&str> = task.toml.workload.iter().map(|w| w.name.as_str()).collect();
    if let Some(w) = pick.workloads.iter().find(|w| !names.contains(&w.as_str())) {
        bail!(
            "--workload {w}: task {} has no such workload (it has: {})",
            task.name(),
            names.join(", ")
        );
    }
    let incumbent = match &pick.incumbent {
        Some(dir) => {
            let c = load_candidate(dir, &task, target)?;
            Some((c.hash(), c))
        }
        None => None,
    };
    let env = pyenv::ensure(python)?;
    env.ensure_target(target)?;
    let build = std::env::temp_dir().join(format!("ksearch-eval-{}", std::process::id()));
    // One evaluator for every candidate: they meet the same input sets, whose references are computed once.
    let mut ev = Evaluator::start(
        task.clone(),
        target,
        env,
        build.clone(),
        settings,
        eval::fresh_secret(),
    )?;
    let mut reports = Vec::new();
    let mut all_passed = true;
    for cand in &cands {
        let mut results = Vec::new();
        let picked: Vec<&Workload> = task
            .toml
            .workload
            .iter()
            .filter(|w| pick.workloads.is_empty() || pick.workloads.contains(&w.name))
            .collect();
        ev.precompile(cand, &picked);
        for w in picked {
            let opts = eval::EvalOptions {
                incumbent: incumbent.as_ref().map(|(h, c)| (h.as_str(), c)),
                retime_baselines: false,
            };
            let r = ev.evaluate_workload_with(cand, w, opts);
            if !json && !quiet() {
                eprintln!(
                    "{}{}: {}",
                    w.name,
                    if w.held_out { " (held out)" } else { "" },
                    r.status.name()
                );
            }
            results.push(r);
        }
        let mut summary = eval::summarize(&results);
        all_passed &= summary.passed;
        if summary.passed {
            summary.verdict = eval::overall_verdict(&results, &ev.settings.timing);
        }
        if json {
            reports.push(json!({
                "task": task.name(), "target": target.name(), "candidate": cand.hash(), "name": cand.plan.name,
                "params": cand.params(), "passed": summary.passed, "hardware": ev.hardware(), "sandbox": ev.hello["sandbox"],
                "speedup_vs_baselines": summary.speedup_vs_baseline,
                "verdict": summary.verdict,
                "elapsed_s": results.iter().map(|r| r.elapsed_s).sum::<f64>(),
                "assertions": crate::assertions::assess(&task, cand, &results),
                "workloads": results.iter().map(|r| {
                    let mut v = json!(crate::run_result::WorkloadRow::from(r));
                    v["held_out"] = json!(task.toml.workload.iter().any(|w| w.name == r.workload && w.held_out));
                    v["seeds"] = json!(r.seeds);
                    if let Some(t) = &r.timing {
                        v["independent_s"] = json!(t.independent_s);
                        v["alone_s"] = json!(t.alone_s);
                        v["launches_per_eval"] = json!(t.launches_per_eval);
                        v["link_s"] = json!(t.link_s);
                    }
                    // Every baseline's full timing (spread, and with --throughput the old clock's figures).
                    v["baselines_timing"] = json!(r.baselines);
                    if !r.metal_sources.is_empty() {
                        v["metal_sources"] = json!(r.metal_sources);
                    }
                    v
                }).collect::<Vec<_>>(),
            }));
        } else {
            println!(
                "candidate {} ({}) on task {} / {target}",
                cand.hash(),
                cand.plan.name,
                task.name()
            );
            println!("{}", report::workloads_table(&results));
            if let Some(v) = &summary.verdict {
                println!(
                    "against {}: {} ({:.3}x over every workload, {:.1} standard errors)",
                    v.incumbent,
                    v.verdict.name(),
                    v.speedup,
                    v.z.abs()
                );
            }
            if target.is_gpu() {
                let lacking = crate::assertions::missing_text(&crate::assertions::assess(
                    &task, cand, &results,
                ));
                if !lacking.is_empty() {
                    println!(
                        "\nExpert-kernel properties not found (knowledge/assertions.toml):\n{lacking}"
                    );
                }
            }
            if let Some(r) = results.iter().find(|r| !r.metal_sources.is_empty()) {
                println!(
                    "\nThe Metal source MLX generates for workload {} (checked instead of running):",
                    r.workload
                );
                for s in &r.metal_sources {
                    println!("{s}\n");
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&build);
    if json {
        if reports.len() == 1 {
            print_json(&reports[0]);
        } else {
            print_json(&json!({ "candidates": reports }));
        }
    }
    Ok(if all_passed { 0 } else { 1 })
}

/// One line of `doctor`'s checklist: passed (`Some(true)`), missing (`Some(false)`, with the fix) or a fact
/// (`None`: neither, such as which LLM keys are set).
fn check_item(name: &str, ok: Option<bool>, detail: String, fix: &str) -> Value {
    json!({"check": name, "ok": ok, "detail": detail, "fix": if ok == Some(false) { Some(fix) } else { None }})
}

/// MLX's version and backends as the worker's Python sees them, without installing anything.
fn probe_mlx(python: &Path) -> std::result::Result<(String, bool, bool), String> {
    let code = "import mlx.core as mx\n\
                m = getattr(mx, 'metal', None); c = getattr(mx, 'cuda', None)\n\
                print(mx.__version__, bool(m and m.is_available()), bool(c and c.is_available()))";
    let out = std::process::Command::new(python)
        .args(["-c", code])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err.lines().last().unwrap_or("import failed").to_string());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let w: Vec<&str> = text.split_whitespace().collect();
    match w.as_slice() {
        [v, metal, cuda] => Ok((v.to_string(), *metal == "True", *cuda == "True")),
        _ => Err(format!("unexpected answer `{}`", text.trim())),
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

fn cmd_doctor(store_dir: &Path, python: Option<&Path>, json: bool) -> Result<u8> {
    let mut report = serde_json::Map::new();
    let mut checks: Vec<Value> = Vec::new();
    report.insert("ksearch".into(), json!(env!("CARGO_PKG_VERSION")));
    report.insert("cache".into(), json!(builtin::cache_root()));
    report.insert("builtin_tasks".into(), json!(builtin::task_names()));
    // The interpreter must run: `--python` is taken as given.
    let runs = |env: &pyenv::PythonEnv| {
        answer_of(&env.python, &["--version"])
            .ok_or_else(|| anyhow!("{} does not run", env.python.display()))
    };
    match pyenv::ensure(python).and_then(|env| runs(&env).map(|v| (env, v))) {
        Ok((env, version)) => {
            checks.push(check_item(
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
            report.insert(
                "python".into(),
                json!({"path": env.python, "managed": env.managed, "worker": env.worker_path, "version": version}),
            );
            let task = Task::load(&builtin::task_dir(DEFAULT_TASK)?)?;
            let build = std::env::temp_dir().join(format!("ksearch-doctor-{}", std::process::id()));
            let settings = Settings::for_task(&task, Target::Cpu);
            match Evaluator::start(
                task,
                Target::Cpu,
                env.clone(),
                build.clone(),
                settings,
                eval::fresh_secret(),
            ) {
                Ok(ev) => {
                    checks.push(check_item(
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
                    checks.push(check_item(
                        "C compiler (cpu target)",
                        Some(!version.is_empty() && !version.starts_with("unavailable")),
                        format!("{}: {version}", compiler["name"].as_str().unwrap_or("cc")),
                        "install gcc or clang, or set CC",
                    ));
                    // The hardware facts as the prompts state them.
                    let facts = crate::search::agent::hardware_line(&ev.hello);
                    checks.push(check_item("hardware", None, facts.clone(), ""));
                    report.insert("hardware_facts".into(), json!(facts));
                    report.insert("worker".into(), ev.hello.clone());
                }
                Err(e) => {
                    checks.push(check_item(
                        "worker (numpy, the sandbox)",
                        Some(false),
                        format!("{e:#}"),
                        "see the error; `--python PATH` picks another interpreter (3.11 or newer)",
                    ));
                    report.insert("worker".into(), json!({"error": format!("{e:#}")}));
                }
            }
            let _ = std::fs::remove_dir_all(&build);
            // Which MLX targets can run here (nothing is installed to find out).
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
                checks.push(json!({"check": name, "ok": None::<bool>, "available": ok, "detail": detail, "fix": if ok { None } else { Some(fix) }}));
            }
            // A fact, not a requirement: ksearch evaluates on this machine's devices only today.
            let ray = answer_of(&env.python, &["-c", "import ray; print(ray.__version__)"]);
            checks.push(check_item(
                "Ray",
                None,
                match ray {
                    Some(v) => format!("ray {v} in the worker's Python (ksearch evaluates on this machine's devices only; it does not use Ray yet)"),
                    None => "not installed in the worker's Python (not needed: ksearch evaluates on this machine's devices only)".into(),
                },
                "",
            ));
        }
        Err(e) => {
            checks.push(check_item(
                "python",
                Some(false),
                format!("{e:#}"),
                "install Python 3.11 or newer with venv, or pass --python PATH",
            ));
            report.insert("python".into(), json!({"error": format!("{e:#}")}));
        }
    }
    let gpu = answer_of("nvidia-smi", &["--query-gpu=name", "--format=csv,noheader"]);
    checks.push(check_item(
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
    checks.push(check_item(
        "LLM keys in the environment",
        None,
        if keys.is_empty() {
            "none (a config file, a local server, command: or replay: need none)".into()
        } else {
            keys.join(", ")
        },
        "",
    ));
    match Store::open_read(store_dir) {
        Ok(None) => {
            let path = store_dir.join("ksearch.db");
            checks.push(check_item(
                "store",
                Some(true),
                format!("{} (none yet: the first run creates it)", path.display()),
                "",
            ));
            report.insert("store".into(), json!({"path": path, "runs": 0}));
        }
        Ok(Some(s)) => {
            let runs = s.runs()?.len();
            checks.push(check_item(
                "store",
                Some(true),
                format!("{} ({runs} runs, integrity ok)", s.path().display()),
                "",
            ));
            report.insert(
                "store".into(),
                json!({"path": s.path(), "journal_mode": "wal", "runs": runs}),
            );
        }
        Err(e) => {
            checks.push(check_item(
                "store",
                Some(false),
                e.to_string(),
                "see the error; --store DIR uses another folder",
            ));
            report.insert("store".into(), json!({"error": e.to_string()}));
        }
    }
    let ok = checks.iter().all(|c| c["ok"] != json!(false));
    report.insert("checks".into(), json!(checks));
    report.insert("ok".into(), json!(ok));
    let v = Value::Object(report);
    if json {
        print_json(&v);
    } else {
        for c in &checks {
            let mark = match (c["ok"].as_bool(), c["available"].as_bool()) {
                (Some(true), _) | (None, Some(true)) => "✓",
                (Some(false), _) | (None, Some(false)) => "✗",
                _ => "·",
            };
            let mark = report::paint(mark, report::Tone::of(mark));
            println!(
                "{mark} {}: {}",
                c["check"].as_str().unwrap_or("?"),
                c["detail"].as_str().unwrap_or("")
            );
            if let Some(fix) = c["fix"].as_str() {
                println!("    fix: {fix}");
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
    Ok(if ok { 0 } else { 1 })
}

fn cmd_translate(
    file: &Path,
    to: Target,
    out: Option<PathBuf>,
    json: bool,
    force: bool,
    include: &[PathBuf],
) -> Result<u8> {
    let t = crate::translate::translate_and_check(file, to, include)?;
    let dir = out.unwrap_or_else(|| {
        let stem = file.file_stem().unwrap_or_default().to_string_lossy();
        PathBuf::from(format!("{stem}-{to}"))
    });
    if let Some(c) = &t.candidate {
        refuse_overwrite(&dir, c.written_paths(&dir), force)?;
        c.write_dir(&dir)
            .with_context(|| format!("writing {}", dir.display()))?;
    }
    if json {
        let mut v = serde_json::to_value(&t)?;
        v["out"] = json!(t.candidate.as_ref().map(|_| dir.display().to_string()));
        print_json(&v);
    } else {
        print!("{}", crate::translate::report(&t, file));
        match &t.candidate {
            Some(_) if t.errors() > 0 => println!(
                "wrote {}, incomplete: {} error diagnostic(s) above (constructs marked `TODO(Txxx)`, not translated, or checker errors): finish them by hand",
                dir.display(),
                t.errors()
            ),
            Some(_) => println!("wrote {}", dir.display()),
            None => println!(
                "nothing written: the result could not be made meaningful (see the errors)"
            ),
        }
    }
    // 1 when the result is incomplete (a construct marked, not translated) or missing, so scripts notice.
    Ok(if t.candidate.is_some() && t.errors() == 0 {
        0
    } else {
        1
    })
}

fn cmd_check(path: &Path, task: Option<String>, include: &[PathBuf], json: bool) -> Result<u8> {
    let findings = if path.is_dir() {
        if !include.is_empty() {
            anyhow::bail!(
                "{}: -I applies to a complete Metal file; a candidate's kernel is compiled by MLX, where only Metal's own headers exist (drop -I)",
                path.display()
            );
        }
        let task = match task {
            Some(t) => Some(Task::load(&builtin::task_dir(&t)?)?),
            None => None,
        };
        let mut f = crate::check::check_candidate(path, task.as_ref())?;
        for x in &mut f {
            x.file = path.join(&x.file).display().to_string();
        }
        f
    } else {
        if task.is_some() {
            anyhow::bail!(
                "{}: --task applies to a candidate folder; a complete Metal file carries its own signature (drop --task)",
                path.display()
            );
        }
        crate::check::check_file(path, include)?
    };
    if json {
        print_json(&crate::check::to_json(
            &path.display().to_string(),
            &findings,
        ));
    } else if findings.is_empty() {
        println!("{}: no findings", path.display());
    } else {
        print!("{}", crate::check::render_text(&findings));
    }
    Ok(if crate::check::has_errors(&findings) {
        1
    } else {
        0
    })
}

/// Validators of numeric flags: a value no run can honour (negative, zero where one is needed, NaN, infinite,
/// beyond any deadline) is refused with its flag's name, before anything starts (`inf` once reached a
/// `Duration` and panicked).
mod flags {
    /// The longest deadline or budget a flag may give: 30 days.
    const MAX_SECONDS: f64 = 30.0 * 86_400.0;

    pub fn seconds(s: &str) -> Result<f64, String> {
        let v: f64 = s
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not a number of seconds"))?;
        if !(v.is_finite() && v > 0.0 && v <= MAX_SECONDS) {
            return Err(format!(
                "`{s}`: give a positive number of seconds, at most {MAX_SECONDS} (30 days)"
            ));
        }
        Ok(v)
    }

    /// Days, 0 or more (0: whatever its age), at most ten years.
    pub fn days(s: &str) -> Result<f64, String> {
        let v: f64 = s
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not a number of days"))?;
        if !(v.is_finite() && (0.0..=3650.0).contains(&v)) {
            return Err(format!("`{s}`: give a number of days, 0 to 3650"));
        }
        Ok(v)
    }

    pub fn dollars(s: &str) -> Result<f64, String> {
        let v: f64 = s
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not an amount of US dollars"))?;
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!("`{s}`: give an amount of US dollars, 0 or more"));
        }
        Ok(v)
    }

    pub fn temperature(s: &str) -> Result<f32, String> {
        let v: f32 = s
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not a number"))?;
        if !(v.is_finite() && (0.0..=2.0).contains(&v)) {
            return Err(format!(
                "`{s}`: a sampling temperature lies between 0 and 2"
            ));
        }
        Ok(v)
    }

    /// A whole number, 1 or more (`usize` for counts, `u32` for the narrower flags).
    pub fn at_least_one<T: std::str::FromStr + PartialOrd + From<u8>>(
        s: &str,
    ) -> Result<T, String> {
        match s.trim().parse::<T>() {
            Ok(v) if v >= T::from(1) => Ok(v),
            _ => Err(format!("`{s}`: give a whole number, 1 or more")),
        }
    }
}

/// `ksearch gc`: see `gc.rs`.
fn cmd_gc(store_dir: &Path, dry_run: bool, older_than_days: f64, json: bool) -> Result<u8> {
    let older_than = std::time::Duration::from_secs_f64(older_than_days * 86_400.0);
    let report = crate::gc::collect(store_dir, &builtin::cache_root(), older_than, dry_run)?;
    let code = if report.failed.is_empty() { 0 } else { 1 };
    if json {
        print_json(&serde_json::to_value(&report)?);
        return Ok(code);
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    for it in &report.removed {
        println!(
            "{verb} {} {} ({})",
            it.kind,
            it.name,
            crate::units::fmt_bytes(it.bytes)
        );
    }
    if report.removed.is_empty() {
        println!("nothing to collect");
    } else {
        println!(
            "{verb} {} item(s), {}",
            report.removed.len(),
            crate::units::fmt_bytes(report.bytes)
        );
    }
    for f in &report.failed {
        eprintln!("ksearch: gc could not remove {f}");
    }
    Ok(code)
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

/// A run's configuration as `show` prints it: without the input secret, from which every input set of the
/// run derives (a reader of the output, a dashboard or a prompt built from it, must not be able to predict
/// the inputs of the run's later evaluations). The store keeps it, for `resume`.
fn shown_config(config: &Value) -> Value {
    let mut c = config.clone();
    if let Some(o) = c.as_object_mut() {
        o.remove("input_secret");
    }
    c
}
