//! Hybrid search: when an LLM-generated candidate passes and exposes tunables, tune them (the tune
//! strategy, on a small sub-budget) before spending another LLM call. Wraps any LLM strategy; the
//! wrapped strategy sees the tuned variants in the history like any other evaluation.
//!
//! Tuning variants are not rounds: the run's budget counts rounds, and tuning has its own run-wide cap
//! (`Budget::tune_total`), so the last round's candidate is still tuned when the rounds are spent.

use super::tune::Tune;
use super::{Budget, Next, Observation, Proposal, Strategy, TUNE_ORIGIN};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Tuning {
    base: String,
    tried: Vec<String>,
    remaining: usize,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct State {
    tuning: Option<Tuning>,
    /// Every candidate whose tunables were already tuned (or that were tuning variants).
    done: Vec<String>,
    seen: usize,
    /// Passing candidates that arrived while another was being tuned, tuned after it in their order.
    #[serde(default)]
    waiting: Vec<String>,
}

pub struct Hybrid<S> {
    pub inner: S,
    /// Evaluations per tuned candidate.
    budget: usize,
    seed: u64,
    st: State,
}

impl<S: Strategy> Hybrid<S> {
    pub fn new(inner: S, budget: usize, seed: u64) -> Self {
        Hybrid {
            inner,
            budget,
            seed,
            st: State::default(),
        }
    }

    fn watch(&mut self, history: &[Observation]) {
        for obs in &history[self.st.seen.min(history.len())..] {
            let variant = self
                .st
                .tuning
                .as_ref()
                .is_some_and(|t| t.tried.contains(&obs.hash));
            if variant || self.st.done.contains(&obs.hash) || obs.origin == super::SEED_ORIGIN {
                continue;
            }
            if self.st.tuning.is_some() {
                // A batch's later candidates (`--parallel`) wait for the one being tuned.
                if obs.summary.passed && !obs.origin.starts_with(TUNE_ORIGIN) {
                    self.st.waiting.push(obs.hash.clone());
                }
                continue;
            }
            self.consider(obs);
        }
        self.st.seen = history.len();
    }

    /// Starts tuning `obs` if it passed and has tunables to tune.
    fn consider(&mut self, obs: &Observation) {
        let space: usize = obs
            .candidate
            .plan
            .tunable
            .values()
            .map(|t| t.values.len())
            .product();
        if obs.summary.passed && space > 1 && self.budget > 0 {
            self.st.done.push(obs.hash.clone());
            self.st.tuning = Some(Tuning {
                base: obs.hash.clone(),
                tried: Vec::new(),
                remaining: self.budget.min(space - 1),
            });
        }
    }

    fn tune_step(&mut self, history: &[Observation], budget: &Budget) -> Option<Proposal> {
        if budget.tune_left() == 0 {
            self.st.tuning = None;
            return None;
        }
        let t = self.st.tuning.as_mut()?;
        let base = history
            .iter()
            .find(|o| o.hash == t.base)
            .map(|o| o.candidate.clone());
        let (Some(base), true) = (base, t.remaining > 0) else {
            self.st.tuning = None;
            return None;
        };
        let sub: Vec<Observation> = history
            .iter()
            .filter(|o| o.hash == t.base || t.tried.contains(&o.hash))
            .cloned()
            .collect();
        let mut tuner = Tune::new(
            base,
            sub.len() + t.remaining,
            self.seed ^ crate::rng::hash64(&t.base),
        );
        match tuner.next(&sub) {
            Some(p) => {
                let hash = p.candidate.hash();
                t.tried.push(hash.clone());
                self.st.done.push(hash);
                t.remaining -= 1;
                Some(Proposal {
                    candidate: p.candidate,
                    parent: Some(t.base.clone()),
                    origin: format!("{TUNE_ORIGIN} {}", t.base),
                    compare_with: None,
                })
            }
            None => {
                self.st.tuning = None;
                None
            }
        }
    }
}

impl<S: Strategy> Strategy for Hybrid<S> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn propose(&mut self, history: &[Observation], budget: &Budget) -> Next {
        self.propose_batch(history, budget, 1)
            .into_iter()
            .next()
            .expect("a batch holds one answer at least")
    }

    fn propose_batch(&mut self, history: &[Observation], budget: &Budget, k: usize) -> Vec<Next> {
        self.watch(history);
        loop {
            if let Some(p) = self.tune_step(history, budget) {
                return vec![Next::Propose(p)];
            }
            if self.st.waiting.is_empty() || budget.tune_left() == 0 {
                break;
            }
            // The next waiting candidate, as `watch` would have taken it had it come alone.
            let hash = self.st.waiting.remove(0);
            if let Some(obs) = history.iter().find(|o| o.hash == hash)
                && !self.st.done.contains(&hash)
            {
                self.consider(obs);
            }
        }
        if budget.left() == 0 {
            return vec![Next::BudgetSpent];
        }
        self.inner.propose_batch(history, budget, k)
    }

    fn propose_ahead(
        &mut self,
        history: &[Observation],
        budget: &Budget,
        k: usize,
        in_flight: &[String],
    ) -> Vec<Next> {
        // Tuning comes first, from results not in yet: with tuning on, the search waits for them.
        if budget.tune_total > 0 {
            return Vec::new();
        }
        self.inner.propose_ahead(history, budget, k, in_flight)
    }

    fn finish(&mut self, history: &[Observation]) {
        self.inner.finish(history)
    }

    fn unmeasured_rounds(&self) -> usize {
        self.inner.unmeasured_rounds()
    }

    fn state(&self) -> Value {
        let mut v = self.inner.state();
        v["hybrid"] = serde_json::to_value(&self.st).unwrap_or(json!(null));
        v
    }

    fn restore(&mut self, state: &Value) -> Result<(), String> {
        if let Some(h) = state.get("hybrid") {
            self.st =
                serde_json::from_value(h.clone()).map_err(|e| format!("hybrid state: {e}"))?;
        }
        self.inner.restore(state)
    }

    fn take_snapshots(&mut self) -> Vec<Value> {
        self.inner.take_snapshots()
    }

    fn tree(&self) -> Option<Value> {
        self.inner.tree()
    }
}
