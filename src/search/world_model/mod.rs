//! The world-model strategy (K-Search): the LLM keeps a tree of optimisation hypotheses; each cycle
//! takes the most useful open action, implements it on its parent's candidate (ACTION, then DEBUG until
//! something passes, then IMPROVE), stops after a stagnation window, attaches the cycle's best candidate
//! to the node even if it is slower than its parent, and lets the LLM edit the tree with validated
//! operations. Tuned variants of its candidates (the hybrid search, `search::hybrid`) count for the
//! cycle's best without being rounds.
//!
//! Departures from K-Search, on purpose (its weaknesses, `research/ksearch.md` §8): selection is a real
//! utility with exploration; an action that never passed is retired and never selected again; edits are
//! validated (up to three tries with the errors fed back) with a deterministic fallback; the tree is typed.

pub mod ops;
pub mod select;
pub mod tree;
pub mod wire;

use super::agent::{self, Agent, Stop};
use super::{Next, Observation, Proposal, Strategy};
use crate::candidate::Candidate;
use ops::Requirements;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tree::{ROOT, Solution, Status, WorldModel};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorldModelConfig {
    /// Rounds without improvement that end a cycle (K-Search's stagnation window W).
    pub window: u32,
    /// Hard cap on rounds per cycle.
    pub max_cycle_rounds: u32,
    /// LLM calls per edit or generation before giving up on it (errors are fed back each time).
    pub tries: u32,
}

impl Default for WorldModelConfig {
    fn default() -> Self {
        WorldModelConfig {
            window: 3,
            max_cycle_rounds: 8,
            tries: 3,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Cycle {
    node: String,
    parent: String,
    round: u32,
    attempts: u32,
    best: Option<(String, f64)>,
    streak: u32,
    streak_base: u32,
    last: Option<String>,
    last_failure: Option<String>,
    /// Candidates this cycle asked the LLM for (others in the history are tuned variants).
    proposed: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct PendingProposal {
    hash: String,
    origin: String,
    parent: Option<String>,
    candidate: Value,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct State {
    wm: Option<WorldModel>,
    cycle: Option<Cycle>,
    /// Cycles finished.
    round: u32,
    /// History entries already absorbed.
    seen: usize,
    pending: Option<PendingProposal>,
    /// What happened, in words, for `show` and debugging.
    log: Vec<String>,
    /// Tree snapshots taken at the end of each cycle and not yet stored.
    #[serde(default)]
    snapshots: Vec<Value>,
}

pub struct WorldModelStrategy {
    agent: Agent,
    cfg: WorldModelConfig,
    st: State,
}

impl WorldModelStrategy {
    pub fn new(agent: Agent, cfg: WorldModelConfig) -> Self {
        WorldModelStrategy {
            agent,
            cfg,
            st: State::default(),
        }
    }

    pub fn tree(&self) -> Option<&WorldModel> {
        self.st.wm.as_ref()
    }

    fn log(&mut self, s: String) {
        tracing::info!("world model: {s}");
        self.st.log.push(s);
    }

    fn find<'h>(history: &'h [Observation], hash: &str) -> Option<&'h Observation> {
        history.iter().find(|o| o.hash == hash)
    }

    fn wm(&self) -> &WorldModel {
        self.st.wm.as_ref().expect("initialised")
    }

    fn wm_mut(&mut self) -> &mut WorldModel {
        self.st.wm.as_mut().expect("initialised")
    }

    /// What a round of the cycle is timed beside for its verdict: the cycle's best so far, else its parent.
    fn compare_with(&self) -> Option<String> {
        let cyc = self.st.cycle.as_ref()?;
        Some(
            cyc.best
                .as_ref()
                .map_or_else(|| cyc.parent.clone(), |b| b.0.clone()),
        )
    }

    /// Folds an evaluation into the current cycle. Candidates the cycle did not ask for are tuned variants
    /// of its candidates (the hybrid search): they can become the cycle's best but are not rounds.
    fn absorb(&mut self, obs: &Observation, history: &[Observation]) {
        let parent_cost = self
            .st
            .cycle
            .as_ref()
            .and_then(|c| Self::find(history, &c.parent))
            .and_then(Observation::cost);
        let Some(cyc) = self.st.cycle.as_mut() else {
            return;
        };
        let own = cyc.proposed.contains(&obs.hash);
        // Better than the cycle's best: by the verdict of the two timed side by side where this round was
        // compared with it (a difference within noise is no improvement), else by their medians.
        let improved = match (obs.cost(), &cyc.best) {
            (Some(c), Some((h, b))) => match &obs.summary.verdict {
                Some(v) if &v.incumbent == h => v.verdict == crate::eval::Verdict::Faster,
                _ => c < *b,
            },
            (Some(_), None) => true,
            _ => false,
        };
        if improved {
            cyc.best = Some((obs.hash.clone(), obs.cost().unwrap()));
        }
        if !own {
            return;
        }
        cyc.attempts += 1;
        cyc.last = Some(obs.hash.clone());
        if improved {
            cyc.streak = 0;
            cyc.last_failure = None;
        } else {
            cyc.streak += 1;
            cyc.last_failure = Some(if obs.summary.passed {
                format!(
                    "it passed but was not faster than the cycle's best{} ({})",
                    match &obs.summary.verdict {
                        Some(v) => format!(
                            ": timed side by side, {} ({:.3}x)",
                            v.verdict.name(),
                            v.speedup
                        ),
                        None => String::new(),
                    },
                    agent::perf(obs, history.first())
                )
            } else {
                agent::perf(obs, history.first())
            });
        }
        if let (Some((_, best)), Some(pc)) = (&cyc.best, parent_cost) {
            cyc.streak_base = if *best < pc { 0 } else { cyc.streak_base + 1 };
        }
    }

    fn insert_spec(wm: &mut WorldModel, spec: wire::NodeSpec, parent: String) {
        let id = match &spec.id {
            Some(id) if !wm.nodes.contains_key(id) && id != ROOT => id.clone(),
            _ => wm.fresh_id("n"),
        };
        wm.nodes.insert(id.clone(), spec.into_node(id, parent, 0));
    }

    fn init(&mut self, history: &[Observation]) -> Result<(), Stop> {
        let seed = &history[0];
        let ctx = self.agent.ctx(json!({
            "seed_code": agent::code(&seed.candidate),
            "seed_perf": agent::perf(seed, None),
        }));
        let prompt = crate::prompts::render("wm_init.j2", ctx).map_err(Stop)?;
        let reply = self
            .agent
            .json("wm-init", prompt, self.cfg.tries, wire::parse_init)?;
        let mut wm;
        match reply {
            Ok(init) => {
                wm = WorldModel::new(&init.summary);
                wm.open_questions = init.questions;
                // Insert in dependency order; a dangling parent goes under the root (K-Search's rule).
                let mut pending = init.nodes;
                while !pending.is_empty() {
                    let before = pending.len();
                    let mut rest = Vec::new();
                    for spec in pending {
                        let parent = spec.parent.clone().unwrap_or_else(|| ROOT.into());
                        if wm.nodes.contains_key(&parent) {
                            Self::insert_spec(&mut wm, spec, parent);
                        } else {
                            rest.push(spec);
                        }
                    }
                    if rest.len() == before {
                        for spec in rest {
                            Self::insert_spec(&mut wm, spec, ROOT.into());
                        }
                        break;
                    }
                    pending = rest;
                }
                self.log(format!("initial world model: {} nodes", wm.nodes.len()));
            }
            Err(e) => {
                wm = WorldModel::new("(the LLM's initial analysis was unusable)");
                ops::fallback(
                    &mut wm,
                    &Requirements {
                        solved: None,
                        promising_frontier: true,
                    },
                    0,
                );
                self.log(format!(
                    "initial world model unusable ({e}); deterministic fallback"
                ));
            }
        }
        if let Some(cost) = seed.cost() {
            let root = wm.nodes.get_mut(ROOT).expect("root");
            root.solution = Some(Solution {
                candidate: seed.hash.clone(),
                cost_s: cost,
                round: 0,
            });
            root.status = Status::Solved;
        }
        // The frontier must offer something promising from the start.
        let req = Requirements {
            solved: None,
            promising_frontier: true,
        };
        if ops::apply(&mut wm.clone(), &[], &req, 0).is_err() {
            ops::fallback(&mut wm, &req, 0);
        }
        self.st.snapshots.push(wire::tree_json(&wm));
        self.st.wm = Some(wm);
        Ok(())
    }

    /// One validated edit of the tree by the LLM, with the fallback when every try fails.
    fn edit(
        &mut self,
        mode: &str,
        node: Option<&str>,
        evidence: String,
        code: Option<String>,
        req: Requirements,
    ) -> Result<(), Stop> {
        let round = self.st.round;
        let node_view = node.and_then(|id| self.wm().get(id)).map(|n| json!({"id": n.id, "title": n.action.as_ref().map(|a| a.title.clone()).unwrap_or_default()}));
        let attempts = self.st.cycle.as_ref().map_or(0, |c| c.attempts);
        let ctx = self.agent.ctx(json!({
            "mode": mode, "node": node_view.unwrap_or(json!({"id": "", "title": ""})), "attempts": attempts,
            "tree": wire::prompt_json(self.wm(), 400), "evidence": evidence, "code": code.unwrap_or_default(),
        }));
        let prompt = crate::prompts::render("wm_edit.j2", ctx).map_err(Stop)?;
        let base = self.wm().clone();
        let r = req.clone();
        let reply = self
            .agent
            .json(&format!("wm-{mode}"), prompt, self.cfg.tries, move |v| {
                let ops = wire::parse_ops(v)?;
                let mut next = base.clone();
                ops::apply(&mut next, &ops, &r, round).map_err(|errs| errs.join("\n"))?;
                Ok((next, ops.len()))
            })?;
        match reply {
            Ok((next, n)) => {
                *self.wm_mut() = next;
                self.log(format!("{mode} edit applied ({n} ops)"));
            }
            Err(e) => {
                let added = ops::fallback(self.wm_mut(), &req, round);
                self.log(format!(
                    "{mode} edit unusable ({e}); fallback added {added:?}"
                ));
            }
        }
        Ok(())
    }

    fn end_cycle(&mut self, history: &[Observation]) -> Result<(), Stop> {
        let cyc = self.st.cycle.take().expect("a cycle");
        self.st.round += 1;
        let round = self.st.round;
        if let Some(n) = self.wm_mut().nodes.get_mut(&cyc.node) {
            n.cycles += 1;
        }
        let parent = Self::find(history, &cyc.parent);
        let title = self
            .wm()
            .get(&cyc.node)
            .and_then(|n| n.action.as_ref())
            .map(|a| a.title.clone())
            .unwrap_or_default();
        match &cyc.best {
            Some((hash, cost)) => {
                let best = Self::find(history, hash).expect("cycle best is in the history");
                let n = self.wm_mut().nodes.get_mut(&cyc.node).expect("node");
                n.solution = Some(Solution {
                    candidate: hash.clone(),
                    cost_s: *cost,
                    round,
                });
                n.status = Status::Solved;
                let vs_parent =
                    parent.and_then(|p| crate::eval::speedup(&p.results, &best.results));
                let evidence = format!(
                    "Action: {title}\nRounds spent: {}\nParent: {}\nCycle best ({hash}): {}\nSpeedup over the parent: {}",
                    cyc.attempts,
                    parent
                        .map(|p| agent::perf(p, history.first()))
                        .unwrap_or_default(),
                    agent::perf(best, history.first()),
                    vs_parent
                        .map(|x| format!("{x:.2}x"))
                        .unwrap_or_else(|| "unknown".into()),
                );
                let lacking = self.agent.lacking(best);
                let evidence = if lacking.is_empty() {
                    evidence
                } else {
                    format!(
                        "{evidence}\nExpert-kernel properties the cycle best lacks (static checks of its source, dynamic ones of its measurements):\n{lacking}"
                    )
                };
                self.log(format!("cycle {round}: `{}` solved by {hash}", cyc.node));
                let code = agent::code(&best.candidate);
                self.edit(
                    "refine",
                    Some(&cyc.node.clone()),
                    evidence,
                    Some(code),
                    Requirements {
                        solved: Some(cyc.node.clone()),
                        promising_frontier: true,
                    },
                )?;
            }
            None => {
                let why = cyc
                    .last_failure
                    .clone()
                    .unwrap_or_else(|| "no attempt passed".into());
                ops::retire(self.wm_mut(), &cyc.node, round, &why);
                self.log(format!(
                    "cycle {round}: `{}` never passed; retired",
                    cyc.node
                ));
                let evidence = format!(
                    "Action: {title}\nRounds spent: {}\nLast failure: {why}",
                    cyc.attempts
                );
                let code = cyc
                    .last
                    .as_ref()
                    .and_then(|h| Self::find(history, h))
                    .map(|o| agent::code(&o.candidate));
                self.edit(
                    "too_hard",
                    Some(&cyc.node.clone()),
                    evidence,
                    code,
                    Requirements {
                        solved: None,
                        promising_frontier: true,
                    },
                )?;
            }
        }
        self.st.snapshots.push(wire::tree_json(self.wm()));
        Ok(())
    }

    fn cycle_done(&self) -> bool {
        let Some(c) = &self.st.cycle else { return true };
        c.streak >= self.cfg.window
            || c.streak_base >= self.cfg.window
            || c.attempts >= self.cfg.max_cycle_rounds
    }

    /// Asks the LLM for the cycle's next attempt; `None` when the reply was unusable (a failed round).
    fn generate(&mut self, history: &[Observation]) -> Result<Option<Proposal>, Stop> {
        let cyc = self.st.cycle.clone().expect("a cycle");
        let node = self.wm().get(&cyc.node).cloned().expect("cycle node");
        let action = node.action.clone().expect("an open node has an action");
        let parent = Self::find(history, &cyc.parent)
            .expect("parent is in the history")
            .clone();
        let seed = history.first();
        let action_view = json!({"title": action.title, "description": action.description, "difficulty": action.difficulty, "rationale": action.rationale});
        let hint = agent::source_hint(&parent.candidate);
        let (template, purpose, base, extra) = if cyc.attempts == 0 {
            (
                "action.j2",
                "action",
                parent.candidate.clone(),
                json!({
                    "tree": wire::prompt_json(self.wm(), 300), "action": action_view,
                    "parent_code": agent::code(&parent.candidate), "parent_perf": agent::perf(&parent, seed),
                }),
            )
        } else if let Some((best_hash, _)) = &cyc.best {
            let best = Self::find(history, best_hash).expect("best").clone();
            (
                "improve.j2",
                "improve",
                best.candidate.clone(),
                json!({
                    "best_code": agent::code(&best.candidate), "best_perf": agent::perf(&best, seed),
                    "failure": cyc.last_failure.clone().unwrap_or_default(), "round": cyc.attempts + 1, "window": self.cfg.window,
                }),
            )
        } else {
            let current = cyc
                .last
                .as_ref()
                .and_then(|h| Self::find(history, h))
                .map(|o| agent::code(&o.candidate))
                .unwrap_or_else(|| "(no usable code yet)".into());
            (
                "debug.j2",
                "debug",
                parent.candidate.clone(),
                json!({
                    "action": action_view, "parent_code": agent::code(&parent.candidate), "parent_perf": agent::perf(&parent, seed),
                    "failure": cyc.last_failure.clone().unwrap_or_else(|| "the previous reply was unusable".into()),
                    "current_code": current, "round": cyc.attempts + 1, "window": self.cfg.window,
                }),
            )
        };
        let mut ctx = self.agent.ctx(extra);
        if let (Some(o), Value::Object(h)) = (ctx.as_object_mut(), hint) {
            o.extend(h);
        }
        let prompt = crate::prompts::render(template, ctx).map_err(Stop)?;
        match self
            .agent
            .candidate(purpose, prompt, &base, self.cfg.tries)?
        {
            Ok(c) => {
                let hash = c.hash();
                if history.iter().any(|o| o.hash == hash) {
                    self.fail_round(format!(
                        "the reply is identical to candidate {hash}, which was already measured"
                    ));
                    return Ok(None);
                }
                if let Some(cy) = self.st.cycle.as_mut() {
                    cy.proposed.push(hash);
                }
                Ok(Some(Proposal {
                    candidate: c,
                    parent: Some(cyc.parent.clone()),
                    origin: format!("world-model: {purpose} {}", cyc.node),
                    compare_with: self.compare_with(),
                }))
            }
            Err(e) => {
                self.fail_round(e);
                Ok(None)
            }
        }
    }

    /// A round that produced nothing to evaluate still counts toward the stagnation window.
    fn fail_round(&mut self, why: String) {
        if let Some(c) = self.st.cycle.as_mut() {
            c.attempts += 1;
            c.streak += 1;
            c.last_failure = Some(why.clone());
        }
        self.log(format!("round failed: {why}"));
    }

    fn start_cycle(&mut self, history: &[Observation]) -> Result<bool, Stop> {
        let seed_cost = history.first().and_then(Observation::cost);
        let cfg = select::SelectConfig::default();
        if select::select(self.wm(), seed_cost, &cfg).is_none() {
            // K-Search's "propose" step: ask for new actions when the frontier is empty.
            let evidence = format!(
                "Best so far: {}",
                super::run::best_of(history)
                    .map(|b| agent::perf(b, history.first()))
                    .unwrap_or_default()
            );
            self.edit(
                "propose",
                None,
                evidence,
                None,
                Requirements {
                    solved: None,
                    promising_frontier: true,
                },
            )?;
        }
        let Some(id) = select::select(self.wm(), seed_cost, &cfg) else {
            return Ok(false);
        };
        let node = self.wm().get(&id).expect("selected").clone();
        let parent_hash = match node.parent.as_deref() {
            Some(ROOT) | None => history[0].hash.clone(),
            Some(p) => self
                .wm()
                .get(p)
                .and_then(|p| p.solution.as_ref())
                .map(|s| s.candidate.clone())
                .unwrap_or_else(|| history[0].hash.clone()),
        };
        self.log(format!(
            "cycle {}: `{id}` — {}",
            self.st.round + 1,
            node.action.as_ref().map(|a| a.title.as_str()).unwrap_or("")
        ));
        self.st.cycle = Some(Cycle {
            node: id,
            parent: parent_hash,
            round: self.st.round + 1,
            attempts: 0,
            best: None,
            streak: 0,
            streak_base: 0,
            last: None,
            last_failure: None,
            proposed: Vec::new(),
        });
        Ok(true)
    }

    fn step(&mut self, history: &[Observation]) -> Result<Option<Proposal>, Stop> {
        if let Some(p) = &self.st.pending
            && !history.iter().any(|o| o.hash == p.hash)
        {
            // Resumed after a kill between proposing and finishing the evaluation: propose it again.
            let candidate = Candidate::from_json(&p.candidate).map_err(Stop)?;
            return Ok(Some(Proposal {
                candidate,
                parent: p.parent.clone(),
                origin: p.origin.clone(),
                compare_with: self.compare_with(),
            }));
        }
        self.st.pending = None;
        for i in self.st.seen..history.len() {
            let obs = history[i].clone();
            self.absorb(&obs, history);
        }
        self.st.seen = history.len();
        if self.st.wm.is_none() {
            self.init(history)?;
        }
        // Bounded: every pass either proposes, ends a cycle, or fails a round, and rounds are capped.
        for _ in 0..(4 * self.cfg.max_cycle_rounds as usize + 8) {
            if self.st.cycle.is_some() && self.cycle_done() {
                self.end_cycle(history)?;
            }
            if self.st.cycle.is_none() && !self.start_cycle(history)? {
                return Ok(None); // every action tried: the search converged
            }
            if let Some(p) = self.generate(history)? {
                return Ok(Some(p));
            }
        }
        Err(Stop(
            "no usable candidate after many rounds; see the run's log".into(),
        ))
    }
}

impl Strategy for WorldModelStrategy {
    fn name(&self) -> &'static str {
        "world-model"
    }

    fn propose(&mut self, history: &[Observation]) -> Next {
        match self.step(history) {
            Ok(Some(p)) => {
                self.st.pending = Some(PendingProposal {
                    hash: p.candidate.hash(),
                    origin: p.origin.clone(),
                    parent: p.parent.clone(),
                    candidate: p.candidate.to_json(),
                });
                Next::Propose(p)
            }
            Ok(None) => Next::Done("the world model has no open action left".into()),
            Err(stop) => {
                self.log(format!("stopped: {}", stop.0));
                stop.next()
            }
        }
    }

    fn state(&self) -> Value {
        let mut v = serde_json::to_value(&self.st).expect("state serialises");
        v["strategy"] = json!("world-model");
        v["config"] = serde_json::to_value(&self.cfg).expect("config");
        v["llm"] = serde_json::to_value(self.agent.llm.meter()).unwrap_or(Value::Null);
        v.as_object_mut().map(|o| o.remove("snapshots"));
        v
    }

    fn restore(&mut self, state: &Value) -> Result<(), String> {
        let mut st: State =
            serde_json::from_value(state.clone()).map_err(|e| format!("world-model state: {e}"))?;
        st.snapshots.clear();
        self.st = st;
        Ok(())
    }

    fn take_snapshots(&mut self) -> Vec<Value> {
        std::mem::take(&mut self.st.snapshots)
    }

    fn tree(&self) -> Option<Value> {
        self.st.wm.as_ref().map(wire::tree_json)
    }
}
