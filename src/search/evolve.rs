//! The `evolve` baseline: an island model with an elite archive, with OpenEvolve's defaults as K-Search's
//! paper configured them (3 islands, archive of 12, exploration 0.35 / exploitation 0.65, full rewrites,
//! ring migration), so strategies can be compared on the same budget and evaluator.

use super::agent::{self, Agent, Stop};
use super::{Next, Observation, Proposal, Strategy};
use crate::candidate::Candidate;
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
    /// The last batch's proposals, kept until evaluated: a resumed run proposes them again.
    #[serde(default)]
    pending: Vec<super::Pending>,
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

    /// Everything one proposal needs, drawn from the state and the history, and the state advanced past
    /// it: a batch fixes its lanes one after another, as if they ran in turn.
    fn plan(&mut self, history: &[Observation]) -> Result<LanePlan, Stop> {
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
        Ok(LanePlan {
            number: self.st.proposals,
            island,
            explore,
            parent: parent.candidate,
            parent_hash,
            prompt,
        })
    }

    /// A lane's answer folded into the state: a proposal, or nothing (an unusable reply, a repeat).
    fn apply(
        &mut self,
        plan: LanePlan,
        answer: agent::Attempt<(Candidate, String)>,
        history: &[Observation],
        taken: &mut Vec<String>,
    ) -> Option<Proposal> {
        match answer {
            Ok((c, _)) => {
                let hash = c.hash();
                if history.iter().any(|o| o.hash == hash) || taken.contains(&hash) {
                    self.st
                        .log
                        .push(format!("proposal {}: identical to {hash}", plan.number));
                    self.repeated = true;
                    return None;
                }
                taken.push(hash.clone());
                self.st.home.push((hash, plan.island));
                Some(Proposal {
                    candidate: c,
                    parent: Some(plan.parent_hash),
                    origin: format!(
                        "evolve: island {}{}",
                        plan.island,
                        if plan.explore { ", explore" } else { "" }
                    ),
                    compare_with: None,
                })
            }
            Err(e) => {
                // A reply that still repeats its parent after the repair prompts brings nothing new, as a
                // repeat of a measured candidate does: the LLM answers, with nothing left to try.
                if e.contains(&crate::reply::ReplyError::Unchanged.to_string()) {
                    self.repeated = true;
                }
                self.st.log.push(format!("proposal {}: {e}", plan.number));
                None
            }
        }
    }

    /// Up to `k` proposals whose LLM calls run at once, one lane each (`docs/parallel.md`); with `k` = 1
    /// the run's own client asks, as a run without lanes always did. The answers are applied in lane order.
    fn batch(
        &mut self,
        history: &[Observation],
        k: usize,
        in_flight: &[String],
    ) -> Result<(Vec<Proposal>, usize), Stop> {
        let mut plans = Vec::new();
        for _ in 0..k.max(1) {
            plans.push(self.plan(history)?);
        }
        let asks: Vec<agent::Ask> = plans
            .iter()
            .map(|p| agent::Ask {
                lane: format!("proposal {}", p.number),
                purpose: "evolve",
                prompt: p.prompt.clone(),
                base: p.parent.clone(),
            })
            .collect();
        let answers = self.agent.candidates_at_once(&asks, self.cfg.tries)?;
        let mut proposals = Vec::new();
        let mut taken = in_flight.to_vec();
        let mut repeats = 0;
        let mut stop = None;
        for (plan, answer) in plans.into_iter().zip(answers) {
            match answer {
                Ok(answer) => {
                    self.repeated = false;
                    if let Some(p) = self.apply(plan, answer, history, &mut taken) {
                        proposals.push(p);
                    }
                    repeats += usize::from(self.repeated);
                }
                Err(s) => {
                    stop.get_or_insert(s);
                }
            }
        }
        match stop {
            Some(s) if proposals.is_empty() => Err(s),
            _ => Ok((proposals, repeats)),
        }
    }
}

/// One lane of a batch, fixed before it runs.
struct LanePlan {
    /// The proposal's number in the run (its lane is named after it).
    number: usize,
    island: usize,
    explore: bool,
    parent: Candidate,
    parent_hash: String,
    prompt: String,
}

/// Proposals one `propose` may ask for before it gives up.
const PROPOSALS_PER_STEP: usize = 16;

impl Evolve {
    /// Keeps a batch's proposals pending until evaluated, after those still in flight.
    fn keep_pending(&mut self, next: &[Next]) {
        self.st.pending.extend(next.iter().filter_map(|n| match n {
            Next::Propose(p) => Some(super::Pending::of(p)),
            _ => None,
        }));
    }

    /// Up to `k` proposals besides `in_flight` (proposed, being evaluated): `propose_batch` and
    /// `propose_ahead` alike. An island's next proposal does not wait for its last one's result (the
    /// asynchronous evolution of OpenEvolve); a reply equal to a candidate in flight is a repeat.
    fn proposals(
        &mut self,
        history: &[Observation],
        budget: &super::Budget,
        k: usize,
        in_flight: &[String],
    ) -> Vec<Next> {
        self.agent.budget = budget.describe();
        // Proposals of the last batch a kill left unevaluated: proposed again, with no LLM call.
        match super::Pending::outstanding_besides(&mut self.st.pending, history, in_flight) {
            Ok(pending) if !pending.is_empty() => return pending,
            Ok(_) => {}
            Err(e) => {
                return vec![Next::Stopped(format!(
                    "a stored proposal does not read: {e}"
                ))];
            }
        }
        // An unusable reply costs an LLM call, not an evaluation; the agent stops on repeated failures.
        let (mut asked, mut repeats) = (0, 0);
        while asked < PROPOSALS_PER_STEP {
            let k = k.clamp(1, PROPOSALS_PER_STEP - asked);
            asked += k;
            match self.batch(history, k, in_flight) {
                Ok((proposals, _)) if !proposals.is_empty() => {
                    let next: Vec<Next> = proposals.into_iter().map(Next::Propose).collect();
                    self.keep_pending(&next);
                    return next;
                }
                Ok((_, r)) => repeats += r,
                Err(stop) => return vec![stop.next()],
            }
        }
        let next = if 2 * repeats >= PROPOSALS_PER_STEP && history.iter().any(|o| o.is_round()) {
            // Most replies were kernels already measured: the LLM answers, with nothing new to try. (A run
            // none of whose replies ever gave a new candidate did not search: that is a stop, below.)
            Next::Done(format!(
                "{PROPOSALS_PER_STEP} proposals in a row brought nothing new ({repeats} repeated candidates already evaluated)"
            ))
        } else {
            Next::Stopped(format!(
                "{PROPOSALS_PER_STEP} proposals in a row were unusable ({} unusable replies, {repeats} \
                 repeating an evaluated candidate or their parent){}",
                PROPOSALS_PER_STEP - repeats,
                if history.iter().any(|o| o.is_round()) {
                    ""
                } else {
                    "; no reply of the run gave a new candidate"
                }
            ))
        };
        vec![next]
    }
}

impl Strategy for Evolve {
    fn name(&self) -> &'static str {
        "evolve"
    }

    fn propose(&mut self, history: &[Observation], budget: &super::Budget) -> Next {
        self.propose_batch(history, budget, 1)
            .into_iter()
            .next()
            .expect("a batch holds one answer at least")
    }

    fn propose_batch(
        &mut self,
        history: &[Observation],
        budget: &super::Budget,
        k: usize,
    ) -> Vec<Next> {
        self.proposals(history, budget, k, &[])
    }

    fn propose_ahead(
        &mut self,
        history: &[Observation],
        budget: &super::Budget,
        k: usize,
        in_flight: &[String],
    ) -> Vec<Next> {
        self.proposals(history, budget, k, in_flight)
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
