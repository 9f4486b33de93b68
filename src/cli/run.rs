use super::{DEFAULT_TASK, flags, load_candidate, print_json, quiet, settings_for};
use crate::candidate::Candidate;
use crate::search::StrategyKind;
use crate::search::run::{self, Event, Runner};
use crate::store::{self, Store};
use crate::target::Target;
use crate::task::Task;
use crate::{builtin, pyenv, report};
use anyhow::{Result, anyhow, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub(super) struct RunArgs {
    #[arg(default_value = DEFAULT_TASK)]
    pub(super) task: String,
    #[arg(long, default_value = "cpu")]
    pub(super) target: Target,
    /// Default: `world-model` when an LLM is given, else `tune`.
    #[arg(long, value_enum)]
    pub(super) strategy: Option<StrategyKind>,
    /// LLM strategies: rounds (one code generation and its evaluation, as K-Search counts; the seed and
    /// tuning variants are not rounds). `tune`: evaluations (the seed counts as one).
    #[arg(long, default_value_t = 30, value_parser = flags::at_least_one::<usize>)]
    pub(super) budget: usize,
    /// Seed candidate name under seeds/<target>/ (default: `naive`, else the first).
    #[arg(long, conflicts_with = "candidate")]
    pub(super) seed: Option<String>,
    /// Start from this candidate folder instead of a task seed.
    #[arg(long)]
    pub(super) candidate: Option<PathBuf>,
    /// Start from the task's specification alone, with no seed candidate (K-Search's SPEC+ACTION):
    /// the first round writes the whole candidate. `--strategy world-model` only.
    #[arg(long)]
    pub(super) from_spec: bool,
    /// Deadline of one workload evaluation, seconds (default: the task's timeout_s).
    #[arg(long, value_parser = flags::seconds)]
    pub(super) timeout: Option<f64>,
    /// Fresh random inputs checked per workload.
    #[arg(long, default_value_t = 3, value_parser = flags::at_least_one::<usize>)]
    pub(super) checks: usize,
    /// Seconds of timing per workload (more samples, tighter medians; default 0.15 on the CPU, 0.3 on GPUs).
    #[arg(long, value_parser = flags::seconds)]
    pub(super) timing_budget: Option<f64>,
    /// Evaluations spent tuning the tunables of each generated candidate (hybrid search; 0: none;
    /// default 6, 0 under `--preset k-search`).
    #[arg(long)]
    pub(super) tune_budget: Option<usize>,
    /// Evaluations the hybrid search may spend tuning in the whole run (default: twice --budget).
    #[arg(long)]
    pub(super) tune_total: Option<usize>,
    /// Proposals whose LLM calls run at once, each in a lane of its own (docs/parallel.md); `evolve`
    /// only for now. 1: one at a time.
    #[arg(long, default_value_t = 1, value_parser = flags::at_least_one::<usize>)]
    pub(super) parallel: usize,
    /// Devices the evaluations go to, one worker each, one evaluation at a time on each
    /// (docs/parallel.md): on the cpu target a number of workers, each pinned to its own cores
    /// (`--devices 2`); on mlx-cuda a number of GPUs or their indices (`--devices 0,1`).
    #[arg(long)]
    pub(super) devices: Option<String>,
    /// Run the workers as Ray actors on a cluster (docs/parallel.md): ray://HOST:PORT, the head's
    /// HOST:PORT, or `auto` for the cluster running on this machine; `--devices N` actors (default 1),
    /// each holding one GPU, or one CPU on the cpu target. The nodes must see the task and the store's
    /// build folder at the same paths as this machine.
    #[arg(long)]
    pub(super) cluster: Option<String>,
    /// Seeds the strategy's random choices (default: drawn from the run's id), so two runs can make the
    /// same choices, e.g. one on a cluster and one here.
    #[arg(long)]
    pub(super) rng_seed: Option<u64>,
    #[command(flatten)]
    pub(super) wm: WorldModelArgs,
    #[command(flatten)]
    pub(super) llm: LlmArgs,
    #[arg(long)]
    pub(super) json: bool,
}

#[derive(clap::Args)]
pub(super) struct ResumeArgs {
    pub(super) run: String,
    /// Use this LLM instead of the one the run was started with.
    #[command(flatten)]
    pub(super) llm: LlmArgs,
    #[arg(long)]
    pub(super) json: bool,
}

/// Published algorithms `--preset` reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Preset {
    /// K-Search's rules as its code runs them (docs/world-model.md lists each and ksearch's default).
    KSearch,
}

/// The world model's rules: a preset, then each rule given explicitly over it.
#[derive(clap::Args, Clone, Default)]
pub(super) struct WorldModelArgs {
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
pub(super) struct LlmArgs {
    /// PROVIDER:MODEL with PROVIDER one of openai, openai-responses, anthropic, gemini, llamacpp, ollama,
    /// lmstudio, vllm, mlx-lm, openrouter; or command:CMDLINE (prompt on stdin, reply on stdout); or
    /// replay:RUN / replay:FILE.jsonl to replay recorded exchanges.
    #[arg(long, env = "KSEARCH_LLM")]
    pub(super) llm: Option<String>,
    /// Base URL of an OpenAI-compatible server (overrides OPENAI_BASE_URL and the provider's default).
    #[arg(long)]
    pub(super) llm_base_url: Option<String>,
    /// Seconds per LLM request.
    #[arg(long, default_value_t = 300.0, value_parser = flags::seconds)]
    pub(super) llm_timeout: f64,
    /// Retries of a failed request (timeouts, 429, 5xx), with backoff.
    #[arg(long, default_value_t = 3)]
    pub(super) llm_retries: u32,
    /// Reasoning effort for models that take one (low, medium, high).
    #[arg(long)]
    pub(super) reasoning_effort: Option<String>,
    #[arg(long, value_parser = flags::temperature)]
    pub(super) temperature: Option<f32>,
    /// Cap on the tokens of each reply.
    #[arg(long, value_parser = flags::at_least_one::<u32>)]
    pub(super) llm_max_output: Option<u32>,
    /// Caps, checked before each call. Default calls cap: 6 per evaluation in the budget, plus 20.
    #[arg(long)]
    pub(super) max_llm_calls: Option<u64>,
    #[arg(long)]
    pub(super) max_llm_tokens: Option<u64>,
    /// US dollars, from the prices in data/prices.toml (or your own prices file).
    #[arg(long, value_parser = flags::dollars)]
    pub(super) max_llm_cost: Option<f64>,
    /// Seconds of wall time for all LLM calls together.
    #[arg(long, value_parser = flags::seconds)]
    pub(super) max_llm_time: Option<f64>,
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

/// `ksearch run`: a new run of the task, from a seed, a candidate folder or the specification.
pub(super) fn run(args: RunArgs, store_dir: &Path, python: Option<&Path>) -> Result<u8> {
    let RunArgs {
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
        parallel,
        devices,
        cluster,
        rng_seed,
        wm,
        llm,
        json,
    } = args;
    let llm_settings = llm.settings(budget);
    let strategy = strategy.unwrap_or(if llm_settings.is_some() {
        StrategyKind::WorldModel
    } else {
        StrategyKind::Tune
    });
    strategy
        .require_llm(llm_settings.is_some())
        .map_err(|e| anyhow!(e))?;
    strategy.allow_parallel(parallel).map_err(|e| anyhow!(e))?;
    let devices = match (&cluster, devices) {
        (Some(address), spec) => {
            crate::devices::on_cluster(address, spec.as_deref(), target).map_err(|e| anyhow!(e))?
        }
        (None, Some(spec)) => {
            crate::devices::parse(&spec, target, &crate::devices::available_cores())
                .map_err(|e| anyhow!(e))?
        }
        (None, None) => Vec::new(),
    };
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
    let store = Store::open(store_dir)?;
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
            parallel,
            devices,
            rng_seed,
        },
    )?;
    if !json && !quiet() {
        eprintln!("ksearch: run {run_id} (resume with `ksearch resume {run_id}` if interrupted)");
    }
    match execute(&store, &run_id, python, client, json) {
        // The evaluator could not start (Python, the target, the task's reference): the run never
        // began, so it is not kept as an empty `interrupted` run.
        Err(e) if store.forget_unstarted_run(&run_id).unwrap_or(false) => {
            Err(e.context(format!("run {run_id} could not start; it was not kept")))
        }
        r => r,
    }
}

/// `ksearch resume`: a run goes on where it stopped, its stored evaluations and LLM replies reused.
pub(super) fn resume(args: ResumeArgs, store_dir: &Path, python: Option<&Path>) -> Result<u8> {
    let ResumeArgs { run, llm, json } = args;
    let store = Store::open(store_dir)?;
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
    .and_then(|client| execute(&store, &run, python, client, json));
    // Failed before evaluating anything (a bad LLM spec, no Python, a worker that cannot
    // start): the run is left as it was, its status and error included.
    if result.is_err() && store.attempts(&run, None)?.len() == attempts {
        store.release_run(&run, before.status, before.error.as_deref())?;
    }
    result
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
        if row.config["devices"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d.get("ray").is_some()))
        {
            env.ensure_ray()?;
        }
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
        // Every slot's phase at once (devices, LLM lanes, the queue), each until it is idle; the same kept
        // in the store folder for `ksearch serve` (removed when the sink is).
        let slots = std::sync::Mutex::new(crate::progress::Slots::default());
        let store_dir = store.path().parent().unwrap_or(std::path::Path::new("."));
        let live = std::sync::Mutex::new(crate::progress::LiveFile::new(store_dir, &run_id));
        crate::progress::set_sink(Some(Box::new(move |slot, p| {
            live.lock()
                .unwrap_or_else(|e| e.into_inner())
                .update(slot, p);
            if json {
                let mut fields = p.to_json();
                fields["slot"] = json!(slot);
                eprintln!("{}", with_fields(progress_json(&run_id, "phase"), fields));
            }
            bar.set_message(slots.lock().unwrap().update(slot, p));
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
