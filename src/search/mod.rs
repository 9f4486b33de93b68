//! Strategies choose the next candidate to evaluate; `run` drives one through a budget, with the
//! store underneath so a killed run resumes where it stopped.
//!
//! A strategy proposes from the run's history alone (plus its recorded seed). Resume therefore needs no
//! saved strategy internals: it reloads the history from the store and asks again.

pub mod agent;
pub mod evolve;
pub mod hybrid;
pub mod once;
pub mod run;
pub mod tune;
pub mod world_model;

use crate::candidate::Candidate;
use crate::eval::{Summary, WorkloadResult};

/// One finished evaluation of the run, as strategies see it.
#[derive(Debug, Clone)]
pub struct Observation {
    pub hash: String,
    pub candidate: Candidate,
    pub summary: Summary,
    pub results: Vec<WorkloadResult>,
}

impl Observation {
    /// Lower is better; `None` unless every feedback workload passed.
    pub fn cost(&self) -> Option<f64> {
        self.summary.geomean_s.filter(|_| self.summary.passed)
    }
}

/// What a strategy wants evaluated next.
#[derive(Debug, Clone)]
pub struct Proposal {
    pub candidate: Candidate,
    pub parent: Option<String>,
    /// Why: shown in `show` and kept in the store.
    pub origin: String,
    /// The candidate to time this one beside for its verdict (its hash); None: the run's best so far.
    pub compare_with: Option<String>,
}

/// A strategy's answer: evaluate this, or stop (and why).
#[allow(clippy::large_enum_variant)] // one per evaluation; boxing would buy nothing
pub enum Next {
    Propose(Proposal),
    /// The search ended as searches end: the space is exhausted, the strategy has nothing left to try.
    Done(String),
    /// The search could not go on (the LLM is unusable, failed, or its caps are spent; its replies kept
    /// being unusable): the run did not do its job, and says so with its own status.
    Stopped(String),
}

pub trait Strategy {
    fn name(&self) -> &'static str;
    /// The next candidate given every finished evaluation of the run, or why the search should stop.
    fn propose(&mut self, history: &[Observation]) -> Next;
    /// A snapshot for the store, saved after every proposal and evaluation.
    fn state(&self) -> serde_json::Value;
    /// Restores a snapshot on resume. Strategies that propose from history alone ignore it.
    fn restore(&mut self, _state: &serde_json::Value) -> Result<(), String> {
        Ok(())
    }
    /// World-model snapshots taken since the last call (one per finished cycle), for the store.
    fn take_snapshots(&mut self) -> Vec<serde_json::Value> {
        Vec::new()
    }
    /// The current world model, if the strategy keeps one.
    fn tree(&self) -> Option<serde_json::Value> {
        None
    }
}

/// Strategies a user can name. Only `tune` needs no LLM.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum StrategyKind {
    Tune,
    WorldModel,
    Evolve,
    Once,
}

impl StrategyKind {
    pub fn name(self) -> &'static str {
        match self {
            StrategyKind::Tune => "tune",
            StrategyKind::WorldModel => "world-model",
            StrategyKind::Evolve => "evolve",
            StrategyKind::Once => "once",
        }
    }
}
