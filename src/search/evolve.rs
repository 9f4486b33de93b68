//! The `evolve` baseline: an island model with an elite archive, with OpenEvolve's defaults as K-Search's
//! paper configured them (3 islands, archive of 12, exploration 0.35 / exploitation 0.65, full rewrites,
//! ring migration), so strategies can be compared on the same budget and evaluator.

use super::agent::{self, Agent, Stop};
use super::{Next, Observation, Proposal, Strategy};
use crate::rng::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvolveConfig {
    pub islands: usize,
    /// Programs kept per island.
    pub population: usize,
    pub archive: usize,
    pub exploration: f64,
    /// Proposals between migrations (the best of each island is copied to the next, in a ring).
    pub migration_interval: usize,
    pub inspirations: usize,
    pub tries: u32,
    pub rng_seed: u64,
}

impl EvolveConfig {
    pub fn new(rng_seed: u64) -> Self {
        // OpenEvolve as configured by K-Search's baselines: population 25 over 3 islands, archive 12.
        EvolveConfig {
            islands: 3,
            population: 9,
            archive: 12,
            exploration: 0.35,
            migration_interval: 10,
            inspirations: 2,
            tries: 3,
            rng_seed,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct State {
    islands: Vec<Vec<String>>,
    /// Which island each proposal belongs to, by candidate hash.
    home: Vec<(String, usize)>,
    proposals: usize,
    seen: usize,
    log: Vec<String>,
}

pub struct Evolve {
    agent: Agent,
    cfg: EvolveConfig,
    st: State,
    /// The last step's proposal repeated a candidate already evaluated (not persisted: it only tells a
    /// converged search from a failing one within one `propose`).
    repeated: bool,
}

impl Evolve {
    pub fn new(agent: Agent, cfg: EvolveConfig) -> Self {
        Evolve {
            agent,
            cfg,
            repeated: false,
            st: State::default(),
        }
    }

    fn cost(history: &[Observation], h: &str) -> Option<f64> {
        history
            .iter()
            .find(|o| o.hash == h)
            .and_then(Observation::cost)
    }

    fn absorb(&mut self, history: &[Observation]) {
        if self.st.islands.is_empty() {
            let seed = history[0].hash.clone();
            self.st.islands = vec![vec![seed]; self.cfg.islands.max(1)];
        }
        for obs in &history[self.st.seen.min(history.len())..] {
            let Some(i) = self
                .st
                .home
                .iter()
                .find(|(h, _)| *h == obs.hash)
                .map(|(_, i)| *i)
            else {
                continue;
            };
            if obs.cost().is_some() && !self.st.islands[i].contains(&obs.hash) {
                self.st.islands[i].push(obs.hash.clone());
            }
            // Keep the island's best programs.
            let pop = self.cfg.population;
            let isl = &mut self.st.islands[i];
            isl.sort_by(|a, b| {
                let ca = Self::cost(history, a).unwrap_or(f64::INFINITY);
                let cb = Self::cost(history, b).unwrap_or(f64::INFINITY);
                ca.total_cmp(&cb).then_with(|| a.cmp(b))
            });
            isl.truncate(pop);
        }
        self.st.seen = history.len();
    }

    /// The best programs over all islands.
    fn archive(&self, history: &[Observation]) -> Vec<String> {
        let mut all: Vec<String> = self.st.islands.iter().flatten().cloned().collect();
        all.sort();
        all.dedup();
        all.sort_by(|a, b| {
            Self::cost(history, a)
                .unwrap_or(f64::INFINITY)
                .total_cmp(&Self::cost(history, b).unwrap_or(f64::INFINITY))
                .then_with(|| a.cmp(b))
        });
        all.truncate(self.cfg.archive);
        all
    }

    fn migrate(&mut self, history: &[Observation]) {
        let k = self.st.islands.len();
        let bests: Vec<Option<String>> =
            self.st.islands.iter().map(|i| i.first().cloned()).collect();
        for (i, b) in bests.into_iter().enumerate() {
            if let Some(b) = b {
                let dest = &mut self.st.islands[(i + 1) % k];
                if !dest.contains(&b) {
                    dest.push(b);
                }
            }
        }
        self.absorb(history);
    }

    fn step(&mut self, history: &[Observation]) -> Result<Option<Proposal>, Stop> {
        self.absorb(history);
        if self.st.proposals > 0
            && self
                .st
                .proposals
                .is_multiple_of(self.cfg.migration_interval)
        {
            self.migrate(history);
        }
        let mut rng = Rng::new(self.cfg.rng_seed ^ crate::rng::splitmix(self.st.proposals as u64));
        let island = self.st.proposals % self.st.islands.len();
        let archive = self.archive(history);
        let explore = rng.unit() < self.cfg.exploration;
        let pool = if explore || archive.is_empty() {
            self.st.islands[island].clone()
        } else {
            archive.clone()
        };
        let parent_hash = pool[rng.below(pool.len())].clone();
        let parent = history
            .iter()
            .find(|o| o.hash == parent_hash)
            .expect("programs come from the history")
            .clone();
        let inspirations: Vec<Value> = archive
            .iter()
            .filter(|h| **h != parent_hash)
            .take(self.cfg.inspirations)
            .filter_map(|h| history.iter().find(|o| o.hash == *h))
            .map(|o| json!({"label": o.hash, "perf": agent::perf(o, history.first()), "code": agent::code(&o.candidate)}))
            .collect();
        let mut ctx = self.agent.ctx(json!({
            "parent_code": agent::code(&parent.candidate), "parent_perf": agent::perf(&parent, history.first()),
            "inspirations": inspirations, "exploration": explore,
        }));
        if let (Some(o), Value::Object(h)) =
            (ctx.as_object_mut(), agent::source_hint(&parent.candidate))
        {
            o.extend(h);
        }
        let prompt = crate::prompts::render("evolve.j2", ctx).map_err(Stop)?;
        self.st.proposals += 1;
        match self
            .agent
            .candidate("evolve", prompt, &parent.candidate, self.cfg.tries)?
        {
            Ok((c, _)) => {
                let hash = c.hash();
                if history.iter().any(|o| o.hash == hash) {
                    self.st.log.push(format!(
                        "proposal {}: identical to {hash}",
                        self.st.proposals
                    ));
                    self.repeated = true;
                    return Ok(None);
                }
                self.st.home.push((hash, island));
                Ok(Some(Proposal {
                    candidate: c,
                    parent: Some(parent_hash),
                    origin: format!(
                        "evolve: island {island}{}",
                        if explore { ", explore" } else { "" }
                    ),
                    compare_with: None,
                }))
            }
            Err(e) => {
                // A reply that still repeats its parent after the repair prompts brings nothing new, as a
                // repeat of a measured candidate does: the LLM answers, with nothing left to try.
                if e.contains(&crate::reply::ReplyError::Unchanged.to_string()) {
                    self.repeated = true;
                }
                self.st
                    .log
                    .push(format!("proposal {}: {e}", self.st.proposals));
                Ok(None)
            }
        }
    }
}

/// Proposals one `propose` may ask for before it gives up.
const PROPOSALS_PER_STEP: usize = 16;

impl Strategy for Evolve {
    fn name(&self) -> &'static str {
        "evolve"
    }

    fn propose(&mut self, history: &[Observation], budget: &super::Budget) -> Next {
        self.agent.budget = budget.describe();
        // An unusable reply costs an LLM call, not an evaluation; the agent stops on repeated failures.
        let mut repeats = 0;
        for _ in 0..PROPOSALS_PER_STEP {
            self.repeated = false;
            match self.step(history) {
                Ok(Some(p)) => return Next::Propose(p),
                Ok(None) => repeats += usize::from(self.repeated),
                Err(stop) => return stop.next(),
            }
        }
        if 2 * repeats >= PROPOSALS_PER_STEP {
            // Most replies were kernels already measured: the LLM answers, with nothing new to try.
            Next::Done(format!(
                "{PROPOSALS_PER_STEP} proposals in a row brought nothing new ({repeats} repeated candidates already evaluated)"
            ))
        } else {
            Next::Stopped(format!(
                "{PROPOSALS_PER_STEP} proposals in a row were unusable ({} unusable replies, {repeats} repeats)",
                PROPOSALS_PER_STEP - repeats
            ))
        }
    }

    fn state(&self) -> Value {
        let mut v = serde_json::to_value(&self.st).expect("state");
        v["strategy"] = json!("evolve");
        v["config"] = serde_json::to_value(&self.cfg).expect("config");
        v["llm"] = serde_json::to_value(self.agent.llm.meter()).unwrap_or(Value::Null);
        v
    }

    fn restore(&mut self, state: &Value) -> Result<(), String> {
        self.st =
            serde_json::from_value(state.clone()).map_err(|e| format!("evolve state: {e}"))?;
        Ok(())
    }
}
