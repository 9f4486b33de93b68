//! Strategies choose the next candidate to evaluate; `run` drives one through a budget, with the
//! store underneath so a killed run resumes where it stopped.
//!
//! A strategy proposes from the run's history and its own state, which the runner stores after every
//! proposal and evaluation (`Strategy::state`, `restore`): resume reloads both and asks again. Strategies
//! that need no memory beyond the history (tune) keep none.

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
    /// Why it was evaluated (`seed`, `hybrid: tune …`, `world-model: action n3`, …), as stored.
    pub origin: String,
    pub candidate: Candidate,
    pub summary: Summary,
    pub results: Vec<WorkloadResult>,
    /// Its results on the task's held-out workloads where a strategy asked for them during the search
    /// ([`Next::HeldOut`]); None: not scored on them (yet).
    pub held_out: Option<Vec<WorkloadResult>>,
}

impl Observation {
    /// Lower is better; `None` unless every feedback workload passed.
    pub fn cost(&self) -> Option<f64> {
        self.summary.geomean_s.filter(|_| self.summary.passed)
    }

    /// A round: a candidate an LLM wrote (or the tuner proposed, for `tune`), not the seed and not a
    /// tuning variant of the hybrid search.
    pub fn is_round(&self) -> bool {
        is_round(&self.origin)
    }

    /// Wall time its evaluation took (compile, checks, timing), over the workloads it reached.
    pub fn wall_s(&self) -> f64 {
        self.results.iter().map(|r| r.elapsed_s).sum()
    }
}

/// Whether an attempt of this origin is a round of the search (see [`Observation::is_round`]).
pub fn is_round(origin: &str) -> bool {
    origin != SEED_ORIGIN && !origin.starts_with(TUNE_ORIGIN)
}

/// The origin of the run's first evaluation.
pub const SEED_ORIGIN: &str = "seed";
/// How the origins of the hybrid search's tuning variants begin.
pub const TUNE_ORIGIN: &str = "hybrid: tune";

/// What the run has spent and has left, as strategies (and the prompts they write) see it. LLM strategies
/// count rounds, as K-Search does (one code generation and its evaluation; the seed and tuning variants
/// are not rounds); tuning has a cap of its own. `tune` counts evaluations.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Budget {
    /// Rounds (LLM strategies) or evaluations (`tune`) the run may spend.
    pub total: usize,
    pub used: usize,
    /// Evaluations the hybrid search may spend tuning, over the whole run, and those spent.
    pub tune_total: usize,
    pub tune_used: usize,
    /// Median wall time of one candidate's evaluation so far (every workload it reached).
    pub eval_s: Option<f64>,
    /// Whether `total` counts rounds (else evaluations).
    pub rounds: bool,
}

impl Budget {
    pub fn left(&self) -> usize {
        self.total.saturating_sub(self.used)
    }

    pub fn tune_left(&self) -> usize {
        self.tune_total.saturating_sub(self.tune_used)
    }

    /// The budget in one line for a prompt.
    pub fn describe(&self) -> String {
        let unit = if self.rounds {
            "rounds (a round is one code generation and its evaluation)"
        } else {
            "evaluations"
        };
        let mut s = format!(
            "{} of {} {unit} used, {} left",
            self.used,
            self.total,
            self.left()
        );
        if self.tune_total > 0 {
            s.push_str(&format!(
                "; automatic tuning of the tunables of each passing candidate: {} of {} evaluations used",
                self.tune_used, self.tune_total
            ));
        }
        if let Some(t) = self.eval_s {
            s.push_str(&format!(
                "; one candidate's evaluation takes about {}",
                crate::units::fmt_time(Some(t))
            ));
        }
        s
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

/// A proposal kept in a strategy's stored state until its evaluation is stored: a run killed in between
/// proposes it again on resume, with no LLM call.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Pending {
    pub hash: String,
    pub origin: String,
    pub parent: Option<String>,
    pub candidate: serde_json::Value,
    /// The candidate it was to be timed beside, when the strategy named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare_with: Option<String>,
}

impl Pending {
    pub fn of(p: &Proposal) -> Pending {
        Pending {
            hash: p.candidate.hash(),
            origin: p.origin.clone(),
            parent: p.parent.clone(),
            candidate: p.candidate.to_json(),
            compare_with: p.compare_with.clone(),
        }
    }

    /// Keeps the pending proposals the history has no evaluation of yet, and proposes them again (a run
    /// killed after proposing a batch resumes with them, with no LLM call); empty when there are none.
    pub fn outstanding(
        pending: &mut Vec<Pending>,
        history: &[Observation],
    ) -> Result<Vec<Next>, String> {
        Self::outstanding_besides(pending, history, &[])
    }

    /// [`Pending::outstanding`] while `in_flight` are being evaluated: those stay pending and are not
    /// proposed again.
    pub fn outstanding_besides(
        pending: &mut Vec<Pending>,
        history: &[Observation],
        in_flight: &[String],
    ) -> Result<Vec<Next>, String> {
        pending.retain(|p| !history.iter().any(|o| o.hash == p.hash));
        pending
            .iter()
            .filter(|p| !in_flight.contains(&p.hash))
            .map(|p| p.proposal(None).map(Next::Propose))
            .collect()
    }

    /// The proposal again, timed beside the candidate it named, else beside `compare_with`.
    pub fn proposal(&self, compare_with: Option<String>) -> Result<Proposal, String> {
        Ok(Proposal {
            candidate: Candidate::from_json(&self.candidate)?,
            parent: self.parent.clone(),
            origin: self.origin.clone(),
            compare_with: self.compare_with.clone().or(compare_with),
        })
    }
}

/// A strategy's answer: evaluate this, or stop (and why).
#[allow(clippy::large_enum_variant)] // one per evaluation; boxing would buy nothing
pub enum Next {
    Propose(Proposal),
    /// The search ended as searches end: the space is exhausted, the strategy has nothing left to try.
    Done(String),
    /// The budget is spent and nothing outside it (tuning with its own cap) is left to evaluate.
    BudgetSpent,
    /// Score this evaluated candidate (its hash) on the task's held-out workloads before proposing again:
    /// no round and no tuning, its results come back in its observation's `held_out`. The world model asks
    /// for it once per cycle, for the cycle's best, to show the model how its kernel does on shapes it was
    /// never timed on.
    HeldOut(String),
    /// The search could not go on (the LLM is unusable, failed, or its caps are spent; its replies kept
    /// being unusable): the run did not do its job, and says so with its own status.
    Stopped(String),
}

pub trait Strategy {
    fn name(&self) -> &'static str;
    /// The next candidate given every finished evaluation of the run and the budget, or why the search
    /// should stop. The runner asks only while the budget has something left, except for the hybrid search,
    /// whose tuning has a cap of its own.
    fn propose(&mut self, history: &[Observation], budget: &Budget) -> Next;
    /// Up to `k` proposals whose LLM work runs at once (`docs/parallel.md`), in the order they are to be
    /// evaluated; a strategy that cannot split its work answers one. Only what `propose` would answer
    /// (a proposal or why not) is returned, a stop only last.
    fn propose_batch(&mut self, history: &[Observation], budget: &Budget, k: usize) -> Vec<Next> {
        let _ = k;
        vec![self.propose(history, budget)]
    }
    /// Proposals made while `in_flight` (hashes proposed and not yet evaluated, in the history's coming
    /// order) are evaluated, so their LLM work overlaps the evaluations (`--parallel`, docs/parallel.md):
    /// only work that does not need those results, from a budget that already counts them. The history
    /// lacks them; the next call sees them. Empty: nothing can be proposed before they are in (the
    /// runner waits for them and asks again). Strategies that do not look ahead answer empty.
    fn propose_ahead(
        &mut self,
        history: &[Observation],
        budget: &Budget,
        k: usize,
        in_flight: &[String],
    ) -> Vec<Next> {
        let _ = (history, budget, k, in_flight);
        Vec::new()
    }
    /// The budget is spent: close what is open (the world model attaches its cycle's best), no LLM call.
    fn finish(&mut self, _history: &[Observation]) {}
    /// Rounds that produced nothing to evaluate (counted in a budget of rounds with the evaluated ones).
    fn unmeasured_rounds(&self) -> usize {
        0
    }
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

    /// `--parallel K` above 1: refused for `once`, whose one generation has nothing to run beside it.
    pub fn allow_parallel(self, k: usize) -> Result<(), String> {
        if k <= 1 || self != StrategyKind::Once {
            return Ok(());
        }
        Err(format!(
            "--parallel {k}: strategy `once` makes one generation, nothing to run at once (`world-model` runs \
             its cycles as lanes, `evolve` its islands' proposals, `tune` batches of configurations, \
             docs/parallel.md); use --parallel 1"
        ))
    }

    /// Every strategy but `tune` asks an LLM; the one refusal when none is given, for `run` and `resume`.
    pub fn require_llm(self, has_llm: bool) -> Result<(), String> {
        if self == StrategyKind::Tune || has_llm {
            return Ok(());
        }
        Err(format!(
            "strategy `{}` needs an LLM: pass --llm PROVIDER:MODEL (e.g. openai:gpt-5.2, llamacpp:gemma, \
             replay:RUN); only `tune` (which searches the seed's tunables) runs without one",
            self.name()
        ))
    }
}

/// What a run has in flight, read from its stored strategy state (`runs`, `show`): the world model's cycles
/// (their numbers and nodes) and the proposals made and not yet evaluated (`evaluated` tells which are).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct InFlight {
    /// (cycle number, node) of each world-model cycle in flight, in lane order.
    pub cycles: Vec<(u64, String)>,
    /// Hashes of the proposals waiting for (or in) their evaluation.
    pub pending: Vec<String>,
}

impl InFlight {
    pub fn of(state: &serde_json::Value, evaluated: impl Fn(&str) -> bool) -> InFlight {
        let cycle =
            |c: &serde_json::Value| Some((c["round"].as_u64()?, c["node"].as_str()?.to_string()));
        let cycles = state["cycle"]
            .as_object()
            .map(|_| &state["cycle"])
            .into_iter()
            .chain(state["lanes"].as_array().into_iter().flatten())
            .filter_map(cycle)
            .collect();
        // The world model keeps a batch (`batch`) or one proposal (`pending`); evolve a list (`pending`).
        let lists = [&state["batch"], &state["pending"]];
        let pending = lists
            .iter()
            .flat_map(|l| match l {
                serde_json::Value::Array(a) => a.iter().collect::<Vec<_>>(),
                serde_json::Value::Object(_) => vec![*l],
                _ => Vec::new(),
            })
            .filter_map(|p| p["hash"].as_str())
            .filter(|h| !evaluated(h))
            .map(str::to_string)
            .collect();
        InFlight { cycles, pending }
    }

    pub fn is_empty(&self) -> bool {
        self.cycles.is_empty() && self.pending.is_empty()
    }

    /// In words, for a table: `cycles 4 (n3), 5 (n7); 2 proposals pending`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.cycles.is_empty() {
            let list: Vec<String> = self
                .cycles
                .iter()
                .map(|(n, node)| format!("{n} ({node})"))
                .collect();
            let word = if list.len() == 1 { "cycle" } else { "cycles" };
            parts.push(format!("{word} {}", list.join(", ")));
        }
        match self.pending.len() {
            0 => {}
            1 => parts.push("1 proposal pending".into()),
            n => parts.push(format!("{n} proposals pending")),
        }
        parts.join("; ")
    }
}

#[cfg(test)]
mod in_flight_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cycles_and_unevaluated_proposals_are_read_from_a_stored_state() {
        let state = json!({
            "strategy": "world-model",
            "cycle": null,
            "lanes": [{"node": "n3", "round": 4}, {"node": "n7", "round": 5}],
            "batch": [{"hash": "aa"}, {"hash": "bb"}, {"hash": "cc"}],
            "pending": null,
        });
        let f = InFlight::of(&state, |h| h == "aa");
        assert_eq!(f.cycles, vec![(4, "n3".into()), (5, "n7".into())]);
        assert_eq!(f.pending, vec!["bb".to_string(), "cc".to_string()]);
        assert_eq!(f.describe(), "cycles 4 (n3), 5 (n7); 2 proposals pending");
        let one = json!({"cycle": {"node": "n1", "round": 2}, "pending": {"hash": "dd"}});
        assert_eq!(
            InFlight::of(&one, |_| false).describe(),
            "cycle 2 (n1); 1 proposal pending"
        );
        let evolve = json!({"strategy": "evolve", "pending": [{"hash": "ee"}]});
        assert_eq!(InFlight::of(&evolve, |_| true), InFlight::default());
    }
}
