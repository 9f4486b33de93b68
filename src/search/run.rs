//! Drives a strategy through a run: the seed first, then proposals until the budget is spent, then the
//! held-out workloads on the best candidates. Every finished workload evaluation is in the store before
//! the next one starts; `resume` rebuilds the history from the store and carries on.

use super::agent::Agent;
use super::evolve::{Evolve, EvolveConfig};
use super::hybrid::Hybrid;
use super::once::Once;
use super::tune::Tune;
use super::world_model::{WorldModelConfig, WorldModelStrategy};
use super::{Budget, Next, Observation, Proposal, SEED_ORIGIN, Strategy, StrategyKind};
use crate::candidate::Candidate;
use crate::devices::Device;
use crate::eval::{
    self, EvalOptions, Evaluate, Evaluator, Settings, Status, Verdict, WorkloadResult,
};
use crate::llm::{Exchange, Llm, LlmConfig};
use crate::pyenv::PythonEnv;
use crate::run_result::{
    BestResult, BudgetUnit, HeldOutRow, LlmUse, RunResult, SeedResult, WorkloadRow,
};
use crate::store::{Phase, RunStatus, Store};
use crate::target::Target;
use crate::task::{Task, Workload};
use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

mod batch;

/// What a run was started with; stored with the run so `resume` needs nothing else.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunConfig {
    /// The seed's hash; empty for a run started from the task's specification alone (`from_spec`).
    pub seed_candidate: String,
    pub seed_name: String,
    /// Started from the specification alone (`--from-spec`): no seed is evaluated, the first round writes
    /// the whole candidate (K-Search's SPEC+ACTION).
    #[serde(default)]
    pub from_spec: bool,
    pub strategy: StrategyKind,
    /// Rounds for LLM strategies (`budget_counts_rounds`), evaluations for `tune` and for runs stored
    /// before rounds were counted.
    pub budget: usize,
    #[serde(default)]
    pub budget_counts_rounds: bool,
    /// Evaluations the hybrid search may spend tuning over the whole run (None: twice the budget).
    #[serde(default)]
    pub tune_total: Option<usize>,
    /// Seeds the strategy's choices (not the inputs: those get a fresh secret every start).
    pub rng_seed: u64,
    pub checks: usize,
    pub timeout_s: f64,
    /// Runs stored before the timing settings were typed carry fewer fields: the missing ones get the
    /// CPU target's defaults.
    #[serde(deserialize_with = "timing_settings")]
    pub timing: crate::protocol::TimingSettings,
    /// The run's input secret: every input set of the run derives from it, so the references computed for
    /// them serve every candidate and a resumed run.
    #[serde(default = "crate::eval::fresh_secret")]
    pub input_secret: u64,
    /// The LLM provider spec (`openai:gpt-5.2`, `replay:RUN`, …) and its settings; never a key.
    #[serde(default)]
    pub llm: Option<LlmSettings>,
    /// Evaluations the hybrid search spends tuning one generated candidate.
    #[serde(default = "default_tune_budget")]
    pub tune_budget: usize,
    /// World-model stagnation window (runs stored before `world_model` was).
    #[serde(default = "default_window")]
    pub window: u32,
    /// The world model's rules.
    #[serde(default)]
    pub world_model: Option<WorldModelConfig>,
    /// Proposals whose LLM work runs at once (`--parallel`, docs/parallel.md); 1 for runs stored before.
    #[serde(default = "one")]
    pub parallel: usize,
    /// The devices evaluations go to, one worker each (`--devices`); empty: one worker, the machine as it is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
}

fn one() -> usize {
    1
}

fn timing_settings<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<crate::protocol::TimingSettings, D::Error> {
    let given = Value::deserialize(d)?;
    let mut full = serde_json::to_value(crate::protocol::TimingSettings::for_target(false))
        .map_err(serde::de::Error::custom)?;
    if let (Some(full), Some(given)) = (full.as_object_mut(), given.as_object()) {
        for (k, v) in given {
            full.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(full).map_err(serde::de::Error::custom)
}

fn default_tune_budget() -> usize {
    6
}

fn default_window() -> u32 {
    3
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LlmSettings {
    pub spec: String,
    pub config: LlmConfig,
    /// Cap on the tokens of each reply (the provider's default when unset).
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
}

/// Progress, for the terminal.
pub enum Event<'a> {
    Started {
        budget: usize,
        done: usize,
    },
    Evaluated {
        obs: &'a Observation,
        best: Option<&'a Observation>,
        budget: &'a Budget,
    },
    FinalPhase {
        candidate: &'a str,
    },
    /// A candidate is scored on the held-out workloads mid-run, for the strategy (`Next::HeldOut`).
    HeldOutCheck {
        candidate: &'a str,
    },
}

const MAX_FINAL_CANDIDATES: usize = 3;

pub struct Runner<'a> {
    pub store: &'a Store,
    pub run_id: String,
    pub task: Task,
    pub target: Target,
    pub config: RunConfig,
    /// One evaluator per device (`config.devices`), never empty. The first also runs what is not a
    /// batch: held-out checks, the final phase, the confirmation.
    evaluators: Vec<Box<dyn Evaluate + Send>>,
    strategy: Box<dyn Strategy + Send>,
    /// Exchanges recorded by the LLM client since the last drain into the store.
    exchanges: Arc<Mutex<Vec<Exchange>>>,
}

/// Everything needed to start a run.
pub struct NewRun<'a> {
    pub task: &'a Task,
    pub target: Target,
    /// None: the run starts from the task's specification alone (`--from-spec`).
    pub seed: Option<&'a Candidate>,
    pub seed_name: String,
    pub settings: Settings,
    pub strategy: StrategyKind,
    pub budget: usize,
    pub llm: Option<LlmSettings>,
    pub tune_budget: usize,
    pub tune_total: Option<usize>,
    pub world_model: WorldModelConfig,
    pub parallel: usize,
    pub devices: Vec<Device>,
    /// Seeds the strategy's random choices (`--rng-seed`); None: drawn from the run's id.
    pub rng_seed: Option<u64>,
}

/// Creates a run in the store and returns its id.
pub fn create(store: &Store, new: NewRun<'_>) -> Result<String> {
    let NewRun {
        task,
        target,
        seed,
        seed_name,
        settings: config_base,
        strategy,
        budget,
        llm,
        tune_budget,
        tune_total,
        world_model,
        parallel,
        devices,
        rng_seed,
    } = new;
    strategy.allow_parallel(parallel).map_err(|e| anyhow!(e))?;
    if seed.is_none() && strategy != StrategyKind::WorldModel {
        bail!(
            "--from-spec works with `--strategy world-model` (and its `--preset k-search`) only, not `{}`: \
             drop --from-spec to start from a seed",
            strategy.name()
        );
    }
    let run_id = new_run_id(task.name());
    let hash = match seed {
        Some(seed) => store.put_candidate(seed)?,
        None => String::new(),
    };
    let config = RunConfig {
        seed_candidate: hash,
        seed_name,
        from_spec: seed.is_none(),
        strategy,
        budget,
        budget_counts_rounds: strategy != StrategyKind::Tune,
        tune_total,
        window: world_model.window,
        world_model: Some(world_model),
        rng_seed: rng_seed.unwrap_or_else(|| crate::rng::hash64(&run_id)),
        checks: config_base.checks,
        timeout_s: config_base.timeout_s,
        timing: config_base.timing.clone(),
        input_secret: crate::eval::fresh_secret(),
        llm,
        tune_budget,
        parallel,
        devices,
    };
    let dir = task.dir.canonicalize().unwrap_or_else(|_| task.dir.clone());
    store.create_run(
        &run_id,
        task.name(),
        &dir,
        target.name(),
        strategy.name(),
        budget as i64,
        &serde_json::to_value(&config)?,
    )?;
    Ok(run_id)
}

fn new_run_id(task: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as i64;
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    let nonce = crate::rng::splitmix(now.as_nanos() as u64 ^ std::process::id() as u64) & 0xffff;
    format!(
        "{task}-{y:04}{m:02}{d:02}-{:02}{:02}{:02}-{nonce:04x}",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Days since 1970-01-01 to a (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + if m <= 2 { 1 } else { 0 }, m, d)
}

impl<'a> Runner<'a> {
    /// Loads a stored run and starts its evaluator (a fresh worker and a fresh secret seed).
    /// `llm` replaces the run's recorded provider (e.g. to resume with another key or a replay).
    pub fn open(
        store: &'a Store,
        run_id: &str,
        env: PythonEnv,
        llm: Option<Llm>,
    ) -> Result<Runner<'a>> {
        let build =
            crate::eval::build_root(store.path().parent().unwrap_or(std::path::Path::new(".")));
        Runner::open_with(store, run_id, llm, |task, target, config| {
            // The task's defaults, with what the run was started with, on each device.
            let settings = |device: &Device| Settings {
                checks: config.checks,
                timeout_s: config.timeout_s,
                timing: config.timing.clone(),
                device: device.clone(),
                ..Settings::for_task(task, target)
            };
            let start = |device: &Device| -> Result<Box<dyn Evaluate + Send>> {
                let ev = Evaluator::start(
                    task.clone(),
                    target,
                    env.clone(),
                    build.clone(),
                    settings(device),
                    config.input_secret,
                )
                .with_context(|| format!("starting the worker on device {}", device.label()))?;
                Ok(Box::new(ev))
            };
            let one = [Device::default()];
            let devices = if config.devices.is_empty() {
                &one[..]
            } else {
                &config.devices[..]
            };
            // Workers start at once: each hello may measure its device for a second or more.
            std::thread::scope(|s| {
                let started: Vec<_> = devices.iter().map(|d| s.spawn(move || start(d))).collect();
                started
                    .into_iter()
                    .map(|h| h.join().expect("a worker start panicked"))
                    .collect()
            })
        })
    }

    /// `open` with the evaluators `start` gives for the run's task, target and configuration, one per
    /// device (at least one): the workers' in a run, scripted ones in the runner's tests.
    pub fn open_with(
        store: &'a Store,
        run_id: &str,
        llm: Option<Llm>,
        start: impl FnOnce(&Task, Target, &RunConfig) -> Result<Vec<Box<dyn Evaluate + Send>>>,
    ) -> Result<Runner<'a>> {
        let row = store.run(run_id)?.ok_or_else(|| {
            anyhow!(
                "no run `{run_id}` in {}; `ksearch runs` lists them",
                store.path().display()
            )
        })?;
        let config: RunConfig = serde_json::from_value(row.config.clone())
            .with_context(|| format!("run {run_id}: unreadable config"))?;
        let task = Task::load(&PathBuf::from(&row.task_dir))
            .with_context(|| format!("run {run_id}: loading its task"))?;
        let target: Target = row.target.parse().map_err(|e: String| anyhow!(e))?;
        let llm = match (llm, &config.llm) {
            (Some(l), _) => Some(l),
            (None, Some(s)) => Some(make_llm(store, &s.spec, &s.config)?),
            (None, None) => None,
        };
        config
            .strategy
            .require_llm(llm.is_some())
            .map_err(|e| anyhow!(e))?;
        let evaluators = start(&task, target, &config)?;
        let evaluator = evaluators
            .first()
            .ok_or_else(|| anyhow!("run {run_id}: no evaluator was started"))?;
        store.claim_run(run_id)?;
        let hello = pool_hello(&evaluators);
        if hello["devices_differ"] == true {
            tracing::warn!(
                "the devices of run {run_id} differ ({}): a candidate's time is compared with others measured \
                 on other devices as it is (each verdict against its incumbent is measured side by side on \
                 one device)",
                hello["devices"]
            );
        }
        store.set_hello(run_id, &hello)?;
        let seed = load_seed(store, &config)?;
        if config.from_spec && config.strategy != StrategyKind::WorldModel {
            bail!(
                "run {run_id} started from the specification, which only `--strategy world-model` supports"
            );
        }
        let exchanges = Arc::new(Mutex::new(Vec::new()));
        let mut strategy: Box<dyn Strategy + Send> = match (config.strategy, llm) {
            (StrategyKind::Tune, _) => Box::new(Tune::new(
                seed.ok_or_else(|| anyhow!("`tune` needs a seed candidate"))?,
                config.budget,
                config.rng_seed,
            )),
            (kind, Some(mut llm)) => {
                let sink = exchanges.clone();
                llm.set_recorder(Box::new(move |ex: &Exchange| {
                    sink.lock().unwrap().push(ex.clone())
                }));
                let mut agent = Agent::new(llm, &task, target, evaluator.hello());
                agent.max_output_tokens = config.llm.as_ref().and_then(|l| l.max_output_tokens);
                agent.auto_tune = config.tune_budget > 0;
                let (tb, rs) = (config.tune_budget, config.rng_seed);
                match kind {
                    StrategyKind::WorldModel => {
                        let cfg = config.world_model.clone().unwrap_or(WorldModelConfig {
                            window: config.window.max(1),
                            ..Default::default()
                        });
                        Box::new(Hybrid::new(WorldModelStrategy::new(agent, cfg), tb, rs))
                    }
                    StrategyKind::Evolve => Box::new(Hybrid::new(
                        Evolve::new(agent, EvolveConfig::new(rs)),
                        tb,
                        rs,
                    )),
                    StrategyKind::Once => Box::new(Hybrid::new(Once::new(agent, 3), tb, rs)),
                    StrategyKind::Tune => unreachable!(),
                }
            }
            (_, None) => unreachable!("checked above"),
        };
        if let Some(state) = store.strategy_state(run_id)? {
            strategy
                .restore(&state)
                .map_err(|e| anyhow!("run {run_id}: {e}"))?;
        }
        Ok(Runner {
            store,
            run_id: run_id.to_string(),
            task,
            target,
            config,
            evaluators,
            strategy,
            exchanges,
        })
    }

    /// Moves what the strategy produced since the last call into the store: LLM exchanges, tree
    /// snapshots and its state.
    fn persist_strategy(&mut self) -> Result<()> {
        let snapshots = self.strategy.take_snapshots();
        batch::persist(
            self.store,
            &self.run_id,
            &self.exchanges,
            &self.strategy.state(),
            &snapshots,
        )
    }

    /// Evaluates a candidate on every one of `workloads`, reusing what the store already has for this run
    /// (the held-out, final and confirming phases). See `evaluate_spread`.
    fn evaluate(
        &mut self,
        cand: &Candidate,
        hash: &str,
        workloads: &[Workload],
        phase: Phase,
        opts: EvalOptions<'_>,
    ) -> Result<Vec<WorkloadResult>> {
        let each: Vec<(Phase, &Workload)> = workloads.iter().map(|w| (phase, w)).collect();
        self.evaluate_spread(cand, hash, &each, opts, false)
    }

    /// Evaluates one candidate on `workloads`, each in its phase (what the store holds for this run reused).
    /// With several
    /// devices the workloads left are shared out, each evaluated whole on one device (the candidate and
    /// its baselines timed there, side by side), one at a time per device; each result is stored the
    /// moment it arrives. With `upto_failure` (a search proposal evaluated alone, the seed among them) no
    /// workload is taken once every one before a failure has passed, and the results end at that failure,
    /// as one device evaluating them in turn would have left them: one that finished past it on another
    /// device is stored but not part of the result, here and when `history` reads it back, so a resumed
    /// or replayed run sees the same observation.
    fn evaluate_spread(
        &mut self,
        cand: &Candidate,
        hash: &str,
        workloads: &[(Phase, &Workload)],
        opts: EvalOptions<'_>,
        upto_failure: bool,
    ) -> Result<Vec<WorkloadResult>> {
        let mut out = workloads
            .iter()
            .map(|(phase, w)| self.store.evaluation(&self.run_id, *phase, hash, &w.name))
            .collect::<Result<Vec<_>, _>>()?;
        let failed =
            |r: &Option<WorkloadResult>| r.as_ref().is_some_and(|r| r.status != Status::Passed);
        // A search evaluation needs nothing past a stored failure.
        let needed = match out.iter().position(failed) {
            Some(f) if upto_failure => f,
            _ => workloads.len(),
        };
        let left: Vec<usize> = (0..needed).filter(|&i| out[i].is_none()).collect();
        // How far the results are known to pass, in workload order.
        let mut prefix = out.iter().take_while(|r| r.is_some() && !failed(r)).count();
        if !left.is_empty() {
            let devices = self.evaluators.len().min(left.len());
            let slots = self.device_slots();
            let queue = Mutex::new(left.iter().copied().collect::<VecDeque<usize>>());
            let (tx, rx) = std::sync::mpsc::channel::<(usize, WorkloadResult)>();
            let (store, run_id) = (self.store, self.run_id.as_str());
            let mut failure = None;
            std::thread::scope(|s| {
                for (ev, slot) in self.evaluators.iter_mut().zip(&slots).take(devices) {
                    let (tx, queue, left) = (tx.clone(), &queue, &left);
                    s.spawn(move || {
                        crate::progress::set_slot(slot);
                        // What is left to evaluate has its kernel modules compiled at once first (mlx-cuda).
                        let mine: Vec<&Workload> = left.iter().map(|&i| workloads[i].1).collect();
                        ev.precompile(cand, &mine);
                        loop {
                            let Some(i) = queue.lock().unwrap().pop_front() else {
                                break;
                            };
                            let w = workloads[i].1;
                            crate::progress::report(crate::progress::Phase::Evaluating {
                                candidate: hash.to_string(),
                                workload: w.name.clone(),
                                index: i + 1,
                                count: workloads.len(),
                            });
                            let mut r = ev.evaluate_workload_with(cand, w, opts);
                            if r.worker_died {
                                // The worker died under it (restarted since): once more, as a batch does.
                                tracing::warn!(
                                    "the worker died evaluating {hash} on {}: evaluated again",
                                    w.name
                                );
                                r = ev.evaluate_workload_with(cand, w, opts);
                            }
                            if tx.send((i, r)).is_err() {
                                break;
                            }
                        }
                    });
                }
                drop(tx);
                for (i, r) in rx {
                    if failure.is_none()
                        && let Err(e) = store.put_evaluation(run_id, workloads[i].0, hash, &r)
                    {
                        failure = Some(e);
                        // The other devices finish the workload they hold; nothing more is taken.
                        queue.lock().unwrap().clear();
                    }
                    out[i] = Some(r);
                    // A search evaluation ends at its first failure in workload order: nothing more is
                    // taken once every workload before it has passed.
                    while upto_failure && prefix < out.len() && out[prefix].is_some() {
                        if failed(&out[prefix]) {
                            queue.lock().unwrap().clear();
                            break;
                        }
                        prefix += 1;
                    }
                }
            });
            if let Some(e) = failure {
                return Err(e.into());
            }
        }
        if upto_failure {
            return Ok(upto_first_failure(out.into_iter().flatten()));
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// The progress display's slot for each device's phases: one device reports in the run's own slot.
    pub(super) fn device_slots(&self) -> Vec<String> {
        match self.evaluators.len() {
            1 => vec![String::new()],
            n => (0..n)
                .map(|i| {
                    self.config
                        .devices
                        .get(i)
                        .map_or_else(|| format!("device {i}"), Device::label)
                })
                .collect(),
        }
    }

    fn history(&self) -> Result<Vec<Observation>> {
        let mut hist = Vec::new();
        for a in self.store.attempts(&self.run_id, Some(Phase::Search))? {
            if !a.finished {
                continue;
            }
            let candidate = self
                .store
                .candidate(&a.candidate)?
                .ok_or_else(|| anyhow!("candidate {} missing from the store", a.candidate))?;
            let results = self
                .task
                .workloads(false)
                .filter_map(|w| {
                    self.store
                        .evaluation(&self.run_id, Phase::Search, &a.candidate, &w.name)
                        .transpose()
                })
                .collect::<Result<Vec<_>, _>>()?;
            let results = upto_first_failure(results);
            hist.push(Observation {
                hash: a.candidate.clone(),
                origin: a.origin.clone(),
                candidate,
                summary: a.summary.unwrap_or_default(),
                results,
                held_out: None,
            });
        }
        for a in self.store.attempts(&self.run_id, Some(Phase::HeldOut))? {
            let Some(obs) = hist.iter_mut().find(|o| o.hash == a.candidate) else {
                continue;
            };
            if a.finished {
                obs.held_out = Some(
                    self.task
                        .workloads(true)
                        .filter_map(|w| {
                            self.store
                                .evaluation(&self.run_id, Phase::HeldOut, &a.candidate, &w.name)
                                .transpose()
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                );
            }
        }
        Ok(hist)
    }

    /// Scores an evaluated candidate on the held-out workloads mid-run (`Next::HeldOut`): an attempt of a
    /// phase of its own, neither a round nor tuning, every workload run (a failure on one shape says
    /// nothing of the others). A check killed half-way is finished on resume from what the store holds.
    fn held_out_check(
        &mut self,
        history: &mut [Observation],
        hash: &str,
        held_out: &[Workload],
    ) -> Result<()> {
        let i = history
            .iter()
            .position(|o| o.hash == hash && o.held_out.is_none())
            .ok_or_else(|| {
                anyhow!(
                    "the strategy asked for held-out results of {hash}, which is no evaluation of run {} \
                     still without them (a bug in the strategy; `ksearch resume` retries)",
                    self.run_id
                )
            })?;
        let attempts = self.store.attempts(&self.run_id, Some(Phase::HeldOut))?;
        let seq = attempts
            .iter()
            .find(|a| a.candidate == hash)
            .map_or(attempts.len() as i64, |a| a.seq);
        self.store.begin_attempt(
            &self.run_id,
            Phase::HeldOut,
            seq,
            hash,
            None,
            "held-out check for the strategy",
        )?;
        let cand = history[i].candidate.clone();
        let opts = EvalOptions {
            incumbent: None,
            retime_baselines: false,
        };
        let results = self.evaluate(&cand, hash, held_out, Phase::HeldOut, opts)?;
        self.store.finish_attempt(
            &self.run_id,
            Phase::HeldOut,
            seq,
            &eval::summarize(&results),
        )?;
        history[i].held_out = Some(results);
        Ok(())
    }

    /// What the run has spent of its budget, from its history.
    fn budget(&self, history: &[Observation]) -> Budget {
        let c = &self.config;
        let mut walls: Vec<f64> = history
            .iter()
            .map(Observation::wall_s)
            .filter(|t| *t > 0.0)
            .collect();
        walls.sort_by(f64::total_cmp);
        let tune_used = history.iter().filter(|o| !o.is_round()).count()
            - history.iter().filter(|o| o.origin == SEED_ORIGIN).count();
        let llm = c.strategy != StrategyKind::Tune;
        Budget {
            total: c.budget,
            used: if c.budget_counts_rounds {
                history.iter().filter(|o| o.is_round()).count() + self.strategy.unmeasured_rounds()
            } else {
                history.len()
            },
            tune_total: match (llm && c.tune_budget > 0, c.budget_counts_rounds) {
                (false, _) => 0,
                (true, true) => c.tune_total.unwrap_or(2 * c.budget),
                // Runs stored before rounds were counted: tuning spent the one budget of evaluations.
                (true, false) => c.budget,
            },
            tune_used,
            eval_s: walls.get(walls.len() / 2).copied(),
            rounds: c.budget_counts_rounds,
        }
    }

    /// Runs (or resumes) to the end; returns the result, also stored with the run. Three phases: the
    /// search (the seed, then proposals up to the budget), the held-out workloads on the best candidates,
    /// and the chosen one's feedback workloads timed again beside the baselines.
    pub fn execute(&mut self, mut progress: impl FnMut(Event<'_>)) -> Result<RunResult> {
        let started = Instant::now();
        let feedback: Vec<Workload> = self.task.workloads(false).cloned().collect();
        let held_out: Vec<Workload> = self.task.workloads(true).cloned().collect();
        let seed = load_seed(self.store, &self.config)?;
        let mut history = self.history()?;
        progress(Event::Started {
            budget: self.config.budget,
            done: self.budget(&history).used,
        });
        let end = self.search(&mut history, seed, &feedback, &held_out, &mut progress)?;
        if !end.cut_short {
            // A cycle cut short by the budget still attaches its best to its node.
            self.strategy.finish(&history);
            self.persist_strategy()?;
        }
        let chosen = self.final_phase(&history, &held_out, &feedback, &mut progress)?;
        // The chosen candidate's feedback workloads timed again with the baselines beside it: the reported
        // speedups over the baselines come from one measurement of both, not from times taken hours apart.
        let confirmed: Option<Vec<WorkloadResult>> = match &chosen {
            Some(c) => {
                let retime = EvalOptions {
                    incumbent: None,
                    retime_baselines: true,
                };
                let (cand, hash) = (c.obs.candidate.clone(), c.obs.hash.clone());
                Some(self.evaluate(&cand, &hash, &feedback, Phase::Confirm, retime)?)
            }
            None => None,
        };
        let (status, error) = self.status(&history, chosen.as_ref(), &end);
        let result = self.result(&history, status, chosen.as_ref(), confirmed, &end, started);
        self.store
            .finish_run(&self.run_id, status, &result, error.as_deref())?;
        Ok(result)
    }

    /// The search phase: the seed's evaluation, then the strategy's proposals until the budget is spent or
    /// the strategy ends the search.
    fn search(
        &mut self,
        history: &mut Vec<Observation>,
        seed: Option<Candidate>,
        feedback: &[Workload],
        held_out: &[Workload],
        progress: &mut impl FnMut(Event<'_>),
    ) -> Result<SearchEnd> {
        // Evaluations outside the rounds and the tuning cap: the seed's, when the run has one.
        let seeded = usize::from(seed.is_some());
        // The rest of the strategy's last batch, evaluated in its order before it is asked again.
        let mut batch = std::collections::VecDeque::new();
        loop {
            let budget = self.budget(history);
            // Evaluations are bounded whatever the strategy does: the seed, the rounds, the tuning cap.
            let room = if budget.rounds {
                (seeded + budget.total + budget.tune_total).saturating_sub(history.len())
            } else {
                budget.left()
            };
            let spent =
                room == 0 || (budget.rounds && budget.left() == 0 && budget.tune_left() == 0);
            // A seed that does not compile, or that the evaluator could not run (the target is missing
            // here), ends the run with its reason: every later candidate would meet the same failure. For
            // LLM strategies any failing seed does: their prompts build on a correct starting candidate.
            // `tune` goes on after other failures: another configuration of the seed may pass.
            let seed_stops = seed_of(history).is_some_and(|s| {
                !s.summary.passed
                    && (self.config.strategy != StrategyKind::Tune
                        || s.results
                            .iter()
                            .any(|r| matches!(r.status, Status::CompileError | Status::Error)))
            });
            if spent || seed_stops {
                return Ok(SearchEnd::default());
            }
            let proposal = if let (true, Some(seed)) = (history.is_empty(), &seed) {
                Proposal {
                    candidate: seed.clone(),
                    parent: None,
                    origin: SEED_ORIGIN.to_string(),
                    compare_with: None,
                }
            } else {
                let next = match batch.pop_front() {
                    Some(next) => next,
                    None => {
                        // A batch never holds more proposals than the budget has rounds left for.
                        let k = self.config.parallel.clamp(1, budget.left().max(1));
                        batch.extend(self.strategy.propose_batch(history, &budget, k));
                        self.persist_strategy()?;
                        batch.pop_front().unwrap_or_else(|| {
                            Next::Stopped("the strategy answered nothing".into())
                        })
                    }
                };
                match next {
                    Next::Propose(p) => p,
                    Next::BudgetSpent => return Ok(SearchEnd::default()),
                    Next::HeldOut(hash) => {
                        progress(Event::HeldOutCheck { candidate: &hash });
                        self.held_out_check(history, &hash, held_out)?;
                        self.persist_strategy()?;
                        continue;
                    }
                    Next::Done(why) => {
                        return Ok(SearchEnd {
                            stopped: Some(why),
                            cut_short: false,
                        });
                    }
                    Next::Stopped(why) => {
                        return Ok(SearchEnd {
                            stopped: Some(why),
                            cut_short: true,
                        });
                    }
                }
            };
            // With several devices, the proposals at the head of the batch are evaluated at once, one per
            // device; they reach the history (and the strategy) in the batch's order.
            // No more at once than the budget has evaluations left for (`room`).
            let mut proposals = vec![proposal];
            while self.evaluators.len() > 1
                && proposals.len() < room
                && matches!(batch.front(), Some(Next::Propose(_)))
            {
                if let Some(Next::Propose(p)) = batch.pop_front() {
                    proposals.push(p);
                }
            }
            // With nothing of the batch left to evaluate after these, the strategy is asked for its next
            // proposals while they are evaluated (docs/parallel.md, "Looking ahead").
            // Never beside the seed's evaluation: every prompt builds on its result.
            let ahead = (self.config.parallel > 1
                && batch.is_empty()
                && room > proposals.len()
                && !proposals.iter().any(|p| p.origin == SEED_ORIGIN))
            .then(|| {
                let budget = spent_on(budget.clone(), &proposals);
                let k = self.config.parallel.clamp(1, budget.left().max(1));
                (budget.left() > 0).then_some(batch::Ahead { budget, k })
            })
            .flatten();
            let before = history.len();
            let next = self.evaluate_proposals(history, proposals, feedback, ahead)?;
            batch.extend(next);
            self.persist_strategy()?;
            for i in before..history.len() {
                progress(Event::Evaluated {
                    obs: &history[i],
                    best: best_of(&history[..=i]),
                    budget: &self.budget(&history[..=i]),
                });
            }
        }
    }

    /// Held-out workloads, scored only now: the best candidates in order until one passes them all (the
    /// baselines timed again beside them). None when no candidate passed the feedback workloads. With
    /// several devices the first candidate's confirmation (`execute`) is evaluated beside its held-out
    /// workloads, on the devices they leave free, and read back from the store when it is chosen; if it
    /// is not, those evaluations stay in the store unused.
    fn final_phase<'h>(
        &mut self,
        history: &'h [Observation],
        held_out: &[Workload],
        feedback: &[Workload],
        progress: &mut impl FnMut(Event<'_>),
    ) -> Result<Option<Chosen<'h>>> {
        let mut chosen: Option<Chosen<'h>> = None;
        for (i, obs) in ranked(history)
            .into_iter()
            .take(MAX_FINAL_CANDIDATES)
            .enumerate()
        {
            progress(Event::FinalPhase {
                candidate: &obs.hash,
            });
            self.store.begin_attempt(
                &self.run_id,
                Phase::Final,
                i as i64,
                &obs.hash,
                None,
                "held-out check",
            )?;
            let retime = EvalOptions {
                incumbent: None,
                retime_baselines: true,
            };
            let mut each: Vec<(Phase, &Workload)> =
                held_out.iter().map(|w| (Phase::Final, w)).collect();
            if i == 0 && self.evaluators.len() > 1 {
                each.extend(feedback.iter().map(|w| (Phase::Confirm, w)));
            }
            let mut results =
                self.evaluate_spread(&obs.candidate, &obs.hash, &each, retime, false)?;
            results.truncate(held_out.len());
            let summary = eval::summarize(&results);
            self.store
                .finish_attempt(&self.run_id, Phase::Final, i as i64, &summary)?;
            let passed = summary.passed || held_out.is_empty();
            if chosen.is_none() || passed {
                chosen = Some(Chosen {
                    obs,
                    held_out_passed: passed,
                    held_out: results,
                });
            }
            if passed {
                break;
            }
        }
        Ok(chosen)
    }

    /// The run's status, and its error when it did not complete.
    fn status(
        &self,
        history: &[Observation],
        chosen: Option<&Chosen<'_>>,
        end: &SearchEnd,
    ) -> (RunStatus, Option<String>) {
        let spent = self.budget(history);
        let stopped = &end.stopped;
        let cut_short = end.cut_short;
        // None for a run started from the specification.
        let seed_obs = seed_of(history);
        match chosen {
            _ if cut_short => (
                RunStatus::Stopped,
                Some(format!(
                    "the search stopped after {} of {} {}: {}",
                    spent.used,
                    spent.total,
                    if spent.rounds {
                        "rounds"
                    } else {
                        "evaluations"
                    },
                    stopped.as_deref().unwrap_or("")
                )),
            ),
            Some(_) => (RunStatus::Completed, None),
            None => (
                RunStatus::Failed,
                Some(
                    match seed_obs.and_then(|o| o.summary.first_failure.clone()) {
                        Some(f) if history.len() == 1 && seed_obs.is_some() => {
                            format!("the seed did not pass: {f}")
                        }
                        _ => "no candidate passed every feedback workload".to_string(),
                    },
                ),
            ),
        }
    }

    /// The run's result as `run --json` prints it and the store keeps it.
    fn result(
        &self,
        history: &[Observation],
        status: RunStatus,
        chosen: Option<&Chosen<'_>>,
        confirmed: Option<Vec<WorkloadResult>>,
        end: &SearchEnd,
        started: Instant,
    ) -> RunResult {
        let spent = self.budget(history);
        let stopped = &end.stopped;
        // None for a run started from the specification: no speedup over a seed is reported.
        let seed_obs = seed_of(history);
        RunResult {
            run_id: self.run_id.clone(),
            task: self.task.name().to_string(),
            target: self.target.name().to_string(),
            strategy: self.config.strategy.name().to_string(),
            status,
            budget: self.config.budget,
            budget_unit: if spent.rounds {
                BudgetUnit::Rounds
            } else {
                BudgetUnit::Evaluations
            },
            rounds: spent.rounds.then_some(spent.used),
            rounds_without_candidate: spent.rounds.then(|| self.strategy.unmeasured_rounds()),
            tuning_evaluations: (spent.tune_total > 0).then_some(spent.tune_used),
            tuning_cap: (spent.tune_total > 0).then_some(spent.tune_total),
            evaluations: history.len(),
            held_out_checks: history.iter().filter(|o| o.held_out.is_some()).count(),
            hardware: self.evaluators[0].hardware(),
            devices: if self.evaluators.len() > 1 {
                self.config.devices.iter().map(Device::label).collect()
            } else {
                Vec::new()
            },
            worker_restarts: self.evaluators.iter().map(|e| e.worker_restarts()).sum(),
            stopped: stopped.clone(),
            llm: self.config.llm.as_ref().map(|l| LlmUse {
                spec: l.spec.clone(),
                exchanges: self
                    .store
                    .exchanges(&self.run_id)
                    .map(|e| e.len())
                    .unwrap_or(0),
            }),
            world_model_nodes: self
                .strategy
                .tree()
                .and_then(|t| t["nodes"].as_array().map(Vec::len)),
            elapsed_s: started.elapsed().as_secs_f64(),
            seed: seed_obs.map(|o| SeedResult {
                candidate: o.hash.clone(),
                passed: o.summary.passed,
                geomean_s: o.summary.geomean_s,
                failure: o.summary.first_failure.clone(),
            }),
            best: chosen.map(|c| {
                let (obs, held_ok, held) = (c.obs, &c.held_out_passed, &c.held_out);
                let vs_seed = seed_obs.and_then(|s| eval::speedup(&s.results, &obs.results));
                // From the confirmation (candidate and baselines timed together) where it passed throughout.
                let confirm = confirmed
                    .as_ref()
                    .map(|c| eval::summarize(c))
                    .filter(|s| s.passed);
                let vs_baselines = confirm
                    .as_ref()
                    .map_or(&obs.summary.speedup_vs_baseline, |s| &s.speedup_vs_baseline);
                let primary = self
                    .task
                    .baselines_for(self.target)
                    .first()
                    .and_then(|b| vs_baselines.get(&b.name).copied());
                BestResult {
                    candidate: obs.hash.clone(),
                    name: obs.candidate.plan.name.clone(),
                    params: obs.candidate.params(),
                    geomean_s: obs.summary.geomean_s,
                    speedup_vs_seed: vs_seed,
                    speedup_vs_baseline: primary,
                    speedup_vs_baselines: vs_baselines.clone(),
                    verdict: obs.summary.verdict.clone(),
                    noisy: obs.summary.noisy.clone(),
                    held_out_passed: *held_ok,
                    held_out: held
                        .iter()
                        .map(|r| HeldOutRow {
                            workload: r.workload.clone(),
                            status: r.status,
                            message: r.message.clone(),
                        })
                        .collect(),
                    workloads: obs.results.iter().map(WorkloadRow::from).collect(),
                    confirmed: confirmed
                        .as_ref()
                        .map(|c| c.iter().map(WorkloadRow::from).collect()),
                }
            }),
        }
    }
}

/// How the search phase ended: `stopped` says why when it ended before its budget; `cut_short` when for
/// another reason than a converged search (`Next::Stopped`).
#[derive(Default)]
struct SearchEnd {
    stopped: Option<String>,
    cut_short: bool,
}

/// The candidate the final phase chose, and its held-out results.
struct Chosen<'h> {
    obs: &'h Observation,
    held_out_passed: bool,
    held_out: Vec<WorkloadResult>,
}

/// The run's seed candidate; None for a run started from the specification.
/// The search phase's summary of a candidate's results: failed unless each of the `workloads` ran and
/// passed, with the verdict over them against its incumbent.
/// `budget` with `proposals` (not evaluated yet) counted as spent: rounds, or tuning variants, or
/// evaluations for a budget of evaluations.
fn spent_on(mut budget: Budget, proposals: &[Proposal]) -> Budget {
    for p in proposals {
        match (budget.rounds, crate::search::is_round(&p.origin)) {
            (false, _) | (true, true) => budget.used += 1,
            (true, false) => budget.tune_used += 1,
        }
    }
    budget
}

/// A search evaluation's results, ending at its first failure (one evaluated past it on another device
/// is not part of the observation).
fn upto_first_failure(results: impl IntoIterator<Item = WorkloadResult>) -> Vec<WorkloadResult> {
    let mut out = Vec::new();
    for r in results {
        let failed = r.status != Status::Passed;
        out.push(r);
        if failed {
            break;
        }
    }
    out
}

fn search_summary(
    results: &[WorkloadResult],
    workloads: usize,
    timing: &crate::protocol::TimingSettings,
) -> eval::Summary {
    let mut summary = eval::summarize(results);
    if results.len() < workloads {
        summary.passed = false;
        summary.workloads = workloads;
    }
    if summary.passed {
        summary.verdict = eval::overall_verdict(results, timing);
    }
    summary
}

/// The hello stored with the run: the first worker's, with every worker's device beside it when there
/// are several, and `devices_differ` when their hardware (name, cores) is not the same.
fn pool_hello(evaluators: &[Box<dyn Evaluate + Send>]) -> Value {
    let mut hello = evaluators[0].hello().clone();
    if evaluators.len() > 1 {
        let devices: Vec<Value> = evaluators
            .iter()
            .map(|e| {
                let h = e.hello();
                serde_json::json!({
                    "device": h["device"],
                    "hardware": h["hardware"]["name"],
                    "cores": h["hardware"]["cores"],
                })
            })
            .collect();
        let kinds: std::collections::BTreeSet<String> = devices
            .iter()
            .map(|d| format!("{} ({} cores)", d["hardware"], d["cores"]))
            .collect();
        if kinds.len() > 1 {
            hello["devices_differ"] = Value::Bool(true);
        }
        hello["devices"] = Value::Array(devices);
    }
    hello
}

fn load_seed(store: &Store, config: &RunConfig) -> Result<Option<Candidate>> {
    if config.from_spec {
        return Ok(None);
    }
    store
        .candidate(&config.seed_candidate)?
        .map(Some)
        .ok_or_else(|| anyhow!("seed candidate missing from the store"))
}

/// The seed's evaluation: the history's first, where the run had a seed.
pub fn seed_of(history: &[Observation]) -> Option<&Observation> {
    history.first().filter(|o| o.origin == SEED_ORIGIN)
}

/// Builds the LLM for a spec; `replay:X` replays run X of this store, or the cassette file X.
pub fn make_llm(store: &Store, spec: &str, cfg: &LlmConfig) -> Result<Llm> {
    if let Some(src) = spec.strip_prefix("replay:") {
        let path = std::path::Path::new(src);
        let exchanges = if path.is_file() {
            Llm::load_cassette(path)?
        } else if let Some(text) = crate::builtin::recording(src) {
            Llm::parse_cassette(text, &format!("built-in recording {src}"))?
        } else {
            let ex = store.exchanges(src)?;
            if ex.is_empty() {
                bail!(
                    "replay:{src}: neither a cassette file, a built-in recording ({}) nor a run with recorded LLM exchanges in {}",
                    crate::builtin::recording_names().join(", "),
                    store.path().display()
                );
            }
            ex
        };
        return Ok(Llm::replay(exchanges, spec));
    }
    Ok(Llm::from_spec(spec, cfg)?)
}

/// The run's best: the first passing candidate, replaced by each later one that beat it. Where a candidate
/// was timed beside the best of its time, the verdict of that comparison decides (within noise keeps the
/// best); otherwise their medians do.
pub fn best_of(history: &[Observation]) -> Option<&Observation> {
    let mut best: Option<&Observation> = None;
    for o in history.iter().filter(|o| o.cost().is_some()) {
        best = Some(match best {
            Some(b) if !beats(o, b) => b,
            _ => o,
        });
    }
    best
}

fn beats(o: &Observation, b: &Observation) -> bool {
    match &o.summary.verdict {
        Some(v) if v.incumbent == b.hash => v.verdict == Verdict::Faster,
        _ => o.cost() < b.cost(),
    }
}

/// The passing candidates best first: the run's best, then the others by median.
fn ranked(history: &[Observation]) -> Vec<&Observation> {
    let best = best_of(history).map(|o| o.hash.clone());
    let mut out: Vec<&Observation> = history.iter().filter(|o| o.cost().is_some()).collect();
    out.sort_by(|a, b| {
        (Some(&b.hash) == best.as_ref())
            .cmp(&(Some(&a.hash) == best.as_ref()))
            .then(a.cost().partial_cmp(&b.cost()).unwrap())
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_786), (2026, 11, 29));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod scripted_tests;
