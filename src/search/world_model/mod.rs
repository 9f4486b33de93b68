//! The world-model strategy (K-Search): the LLM keeps a tree of optimisation hypotheses; each cycle
//! takes the most useful open action, implements it on its parent's candidate (ACTION, then DEBUG until
//! something passes, then IMPROVE), stops after a stagnation window, attaches the cycle's best candidate
//! to the node even if it is slower than its parent, and lets the LLM edit the tree with validated
//! operations. Tuned variants of its candidates (the hybrid search, `search::hybrid`) count for the
//! cycle's best without being rounds.
//!
//! Departures from K-Search, on purpose: each is a flag and `--preset k-search` turns them all off;
//! `docs/world-model.md` gives each with its reason (selection by a utility with exploration, retired
//! actions, validated edits, IMPROVE from the cycle's best, proposals when the frontier is empty, the
//! held-out results of each cycle's best in its tree update, hybrid tuning). The tree is typed.

mod lanes;
pub mod ops;
pub mod select;
pub mod tree;
pub mod wire;

use super::agent::{self, Agent, Stop};
use super::run::seed_of;
use super::{Next, Observation, Proposal, Strategy};
use crate::candidate::Candidate;
use ops::Requirements;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tree::{ROOT, Solution, Status, WorldModel};

/// How the next action is chosen (`docs/world-model.md` gives the reasons for the default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Selection {
    /// A utility: priority, the parent's speed, confidence, rating, difficulty and depth, and an
    /// exploration bonus per branch.
    #[default]
    Utility,
    /// K-Search's: difficulty at most 4 first, then score, difficulty, rating, id.
    KSearch,
}

/// What becomes of an action whose cycle never passed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TooHard {
    /// Retired: never selected again (smaller steps under it stay selectable).
    #[default]
    Retire,
    /// K-Search's: it stays open unless the LLM lowers its score or deletes it.
    Keep,
}

/// How the LLM's tree edits are applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Edits {
    /// Each try's edit applies whole or not at all; the errors go back for the next try.
    #[default]
    Validated,
    /// K-Search's: the ops that apply are kept across tries, a validation-failed block lists the rest.
    Cumulative,
}

/// What an IMPROVE round edits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ImproveFrom {
    /// The cycle's best candidate.
    #[default]
    Best,
    /// K-Search's: the last attempt, with the cycle's best shown beside it.
    Last,
}

/// When the LLM is asked for new actions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Propose {
    /// Only when nothing on the frontier can be selected.
    #[default]
    WhenEmpty,
    /// K-Search's: before every cycle, unless three open actions wait and the best node has an open child.
    EveryCycle,
}

/// When the model sees the held-out workloads' results.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum HeldOutEvidence {
    /// The cycle's best is scored on them when its cycle ends and the tree update shows the results: a
    /// kernel slow or wrong on a shape no round is timed on is seen while the search can still act on it.
    /// They then serve as a validation set (the run's result counts these checks).
    #[default]
    Cycle,
    /// K-Search's: only the final best is scored on them, at the end; the model never sees them.
    Final,
}

/// Runs stored before the held-out evidence existed keep their behaviour on resume.
fn held_out_before() -> HeldOutEvidence {
    HeldOutEvidence::Final
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorldModelConfig {
    /// Rounds without improvement that end a cycle (K-Search's stagnation window W).
    pub window: u32,
    /// A cap on rounds per cycle, if the user set one (none by default: the window alone ends cycles).
    #[serde(default)]
    pub max_cycle_rounds: Option<u32>,
    /// LLM calls per edit or generation before giving up on it (errors are fed back each time).
    pub tries: u32,
    #[serde(default)]
    pub selection: Selection,
    #[serde(default)]
    pub too_hard: TooHard,
    #[serde(default)]
    pub edits: Edits,
    #[serde(default)]
    pub improve_from: ImproveFrom,
    #[serde(default)]
    pub propose: Propose,
    #[serde(default = "held_out_before")]
    pub held_out: HeldOutEvidence,
}

impl Default for WorldModelConfig {
    fn default() -> Self {
        WorldModelConfig {
            window: 3,
            max_cycle_rounds: None,
            tries: 3,
            selection: Selection::default(),
            too_hard: TooHard::default(),
            edits: Edits::default(),
            improve_from: ImproveFrom::default(),
            propose: Propose::default(),
            held_out: HeldOutEvidence::default(),
        }
    }
}

impl WorldModelConfig {
    /// K-Search's algorithm as its code runs it (`--preset k-search`): the paper's window of 7 and every
    /// rule of its own.
    pub fn k_search() -> Self {
        WorldModelConfig {
            window: 7,
            max_cycle_rounds: None,
            tries: 3,
            selection: Selection::KSearch,
            too_hard: TooHard::Keep,
            edits: Edits::Cumulative,
            improve_from: ImproveFrom::Last,
            propose: Propose::EveryCycle,
            held_out: HeldOutEvidence::Final,
        }
    }
}

/// One round of a cycle as later prompts show it: what the model said it changed, and what came of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RoundNote {
    /// `action`, `debug` or `improve`.
    purpose: String,
    change: String,
    /// The candidate it produced, if the reply was usable.
    candidate: Option<String>,
    /// The measured outcome, or why there was nothing to measure.
    result: String,
}

/// A round's question to the LLM (`round_prompt`).
struct RoundPrompt {
    /// `action`, `debug` or `improve`.
    purpose: &'static str,
    prompt: String,
    /// The candidate the reply's changes apply to.
    base: Candidate,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Cycle {
    node: String,
    /// The candidate the cycle builds on; None where there is none yet: the root of a run started from the
    /// specification, which the first action writes whole.
    parent: Option<String>,
    round: u32,
    attempts: u32,
    best: Option<(String, f64)>,
    streak: u32,
    streak_base: u32,
    last: Option<String>,
    last_failure: Option<String>,
    /// Candidates this cycle asked the LLM for (others in the history are tuned variants).
    proposed: Vec<String>,
    /// Every round of the cycle, in order.
    #[serde(default)]
    rounds: Vec<RoundNote>,
}

impl Cycle {
    /// A cycle starting on `node` from `parent` (None: from the specification), numbered `round`.
    fn new(node: String, parent: Option<String>, round: u32) -> Cycle {
        Cycle {
            node,
            parent,
            round,
            attempts: 0,
            best: None,
            streak: 0,
            streak_base: 0,
            last: None,
            last_failure: None,
            proposed: Vec::new(),
            rounds: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct State {
    wm: Option<WorldModel>,
    cycle: Option<Cycle>,
    /// Cycles finished.
    round: u32,
    /// History entries already absorbed.
    seen: usize,
    pending: Option<super::Pending>,
    /// What happened, in words, for `show` and debugging.
    log: Vec<String>,
    /// Tree snapshots taken at the end of each cycle and not yet stored.
    #[serde(default)]
    snapshots: Vec<Value>,
    /// The node whose cycle produced each candidate (its own rounds and their tuned variants).
    #[serde(default)]
    homes: std::collections::BTreeMap<String, String>,
    /// Rounds whose generation gave nothing to evaluate (an unusable reply, a candidate already
    /// measured): rounds all the same, counted in the budget.
    #[serde(default)]
    unmeasured_rounds: usize,
    /// With `--parallel`: the cycles in flight, in lane order (`lanes.rs`); `cycle` then holds the one being
    /// worked on, swapped in from here.
    #[serde(default)]
    lanes: Vec<Cycle>,
    /// With `--parallel`: the last batch's proposals, kept until evaluated (resume proposes them again).
    #[serde(default)]
    batch: Vec<super::Pending>,
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
        cyc.best
            .as_ref()
            .map(|b| b.0.clone())
            .or_else(|| cyc.parent.clone())
    }

    /// Folds an evaluation into the current cycle. Candidates the cycle did not ask for are tuned variants
    /// of its candidates (the hybrid search): they can become the cycle's best but are not rounds.
    fn absorb(&mut self, obs: &Observation, history: &[Observation]) {
        let parent_cost = self
            .st
            .cycle
            .as_ref()
            .and_then(|c| Self::find(history, c.parent.as_deref()?))
            .and_then(Observation::cost);
        let Some(cyc) = self.st.cycle.as_mut() else {
            return;
        };
        self.st.homes.insert(obs.hash.clone(), cyc.node.clone());
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
        let parent = cyc.parent.clone();
        let result = outcome(obs, parent.and_then(|p| Self::find(history, &p)));
        if let Some(r) = cyc
            .rounds
            .iter_mut()
            .rev()
            .find(|r| r.candidate.as_deref() == Some(&obs.hash))
        {
            r.result = result;
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
                    agent::perf(obs, seed_of(history))
                )
            } else {
                agent::perf(obs, seed_of(history))
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
        // A run started from the specification has no seed: the root stays unsolved, and the first action
        // writes the whole candidate.
        let seed = seed_of(history);
        let ctx = self.agent.ctx(json!({
            "seed_code": seed.map(|s| agent::code(&s.candidate)).unwrap_or_default(),
            "seed_perf": seed.map(|s| agent::perf(s, None)).unwrap_or_default(),
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
                        ..Default::default()
                    },
                    0,
                );
                self.log(format!(
                    "initial world model unusable ({e}); deterministic fallback"
                ));
            }
        }
        if seed.is_none() {
            wm.nodes.get_mut(ROOT).expect("root").choice = "the specification".into();
        }
        if let Some((seed, cost)) = seed.and_then(|s| Some((s, s.cost()?))) {
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
            ..Default::default()
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
        if self.cfg.edits == Edits::Cumulative {
            return self.edit_cumulative(mode, node, evidence, code, req);
        }
        let round = self.st.round;
        let prompt = self.edit_prompt(mode, node, &evidence, code.as_deref(), &req)?;
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

    fn edit_prompt(
        &self,
        mode: &str,
        node: Option<&str>,
        evidence: &str,
        code: Option<&str>,
        req: &Requirements,
    ) -> Result<String, Stop> {
        let node_view = node.and_then(|id| self.wm().get(id)).map(|n| json!({"id": n.id, "title": n.action.as_ref().map(|a| a.title.clone()).unwrap_or_default()}));
        let attempts = self.st.cycle.as_ref().map_or(0, |c| c.attempts);
        let ctx = self.agent.ctx(json!({
            "mode": mode, "node": node_view.unwrap_or(json!({"id": "", "title": ""})), "attempts": attempts,
            "retired": self.cfg.too_hard == TooHard::Retire,
            "tree": wire::prompt_json(self.wm(), 400), "evidence": evidence, "code": code.unwrap_or_default(),
            "starting": req.new_actions, "max_new": req.max_new_nodes(),
        }));
        crate::prompts::render("wm_edit.j2", ctx).map_err(Stop)
    }

    /// K-Search's edits (`--edits cumulative`): each try's ops that apply are kept; what failed goes back
    /// in a validation-failed block; refine requires an open follow-up of difficulty below 5 under the
    /// solved node and falls back to one scored 0.35; a too-hard edit is applied as it comes, unvalidated.
    fn edit_cumulative(
        &mut self,
        mode: &str,
        node: Option<&str>,
        evidence: String,
        code: Option<String>,
        mut req: Requirements,
    ) -> Result<(), Stop> {
        let round = self.st.round;
        let too_hard = mode == "too_hard";
        if mode == "refine" {
            req.follow_up_max_difficulty = Some(4);
            req.promising_frontier = false;
        }
        if too_hard {
            req = Requirements::default();
        }
        let mut problems: Vec<String> = Vec::new();
        let mut added = 0;
        let tries = if too_hard { 1 } else { self.cfg.tries.max(1) };
        for _ in 0..tries {
            let shown = if problems.is_empty() {
                evidence.clone()
            } else {
                format!(
                    "{evidence}\n\n[REFINE_VALIDATION_FAILED] Your previous edit was applied as far as it went (the tree above includes it); still wrong:\n- {}",
                    problems.join("\n- ")
                )
            };
            let prompt = self.edit_prompt(mode, node, &shown, code.as_deref(), &req)?;
            match self.agent.json(
                &format!("wm-{mode}"),
                prompt,
                self.cfg.tries,
                wire::parse_ops,
            )? {
                Ok(ops) => {
                    let (skipped, unmet) =
                        ops::apply_cumulative(self.wm_mut(), &ops, &req, round, &mut added);
                    self.log(format!(
                        "{mode} edit applied cumulatively ({} ops, {} skipped, {} requirements unmet)",
                        ops.len(),
                        skipped.len(),
                        unmet.len()
                    ));
                    if unmet.is_empty() || too_hard {
                        return Ok(());
                    }
                    problems = skipped.into_iter().chain(unmet).collect();
                }
                // An unparsable reply ends the edit with the tree as it is.
                Err(e) => {
                    problems.push(e);
                    break;
                }
            }
        }
        let priority = if mode == "refine" { 0.35 } else { 0.6 };
        let added = ops::fallback_scored(self.wm_mut(), &req, round, priority);
        self.log(format!(
            "{mode} edit left problems ({}); fallback added {added:?}",
            problems.join("; ")
        ));
        Ok(())
    }

    /// Folds the evaluations finished since the last call into the cycle that asked for them (with
    /// `--parallel`, the lane's; else the one cycle).
    fn catch_up(&mut self, history: &[Observation]) {
        for i in self.st.seen..history.len() {
            let obs = history[i].clone();
            match self.lane_of(&obs) {
                Some(j) => self.in_lane(j, |s| s.absorb(&obs, history)),
                None => self.absorb(&obs, history),
            }
        }
        self.st.seen = history.len();
    }

    /// Attaches a candidate to a node as its solution.
    fn attach(&mut self, node: &str, hash: &str, cost: f64, round: u32) {
        if let Some(n) = self.wm_mut().nodes.get_mut(node) {
            n.solution = Some(Solution {
                candidate: hash.to_string(),
                cost_s: cost,
                round,
            });
            n.status = Status::Solved;
        }
    }

    /// The budget is spent: the cycle in flight attaches its best (no LLM edit: nothing would use it), and
    /// the run's best, if no node holds it yet, is attached to the node whose cycle produced it; where that
    /// node already holds another candidate (the cycle's verdicts and the run's disagreed: a node's
    /// candidate is never replaced, its children were built on it), to a new solved child of that node.
    fn close(&mut self, history: &[Observation]) {
        self.catch_up(history);
        if self.st.wm.is_none() {
            return;
        }
        let mut changed = false;
        let in_flight: Vec<Cycle> = self
            .st
            .cycle
            .take()
            .into_iter()
            .chain(std::mem::take(&mut self.st.lanes))
            .collect();
        for cyc in in_flight {
            changed = true;
            self.st.round += 1;
            // Its number as it started (with `--parallel` cycles end in another order than they start).
            let round = cyc.round;
            if let Some(n) = self.wm_mut().nodes.get_mut(&cyc.node) {
                n.cycles += 1;
            }
            match &cyc.best {
                Some((hash, cost)) => {
                    self.attach(&cyc.node, hash, *cost, round);
                    self.log(format!(
                        "cycle {round}: cut short by the budget; `{}` solved by {hash}",
                        cyc.node
                    ));
                }
                // Not retired: the action did not get its window.
                None => self.log(format!(
                    "cycle {round}: cut short by the budget before `{}` passed",
                    cyc.node
                )),
            }
        }
        if let Some(best) = super::run::best_of(history) {
            let held = self.wm().nodes.values().any(|n| {
                n.solution
                    .as_ref()
                    .is_some_and(|s| s.candidate == best.hash)
            });
            // A candidate no cycle produced (none is, today) goes to a new child of the root.
            let home = self
                .st
                .homes
                .get(&best.hash)
                .filter(|h| self.wm().get(h).is_some())
                .cloned();
            if let (false, Some(cost)) = (held, best.cost()) {
                let round = self.st.round;
                // Only onto a node with no candidate yet: a solved node's children were built on its own.
                match home {
                    Some(node) if self.wm().get(&node).is_some_and(|n| n.solution.is_none()) => {
                        self.attach(&node, &best.hash, cost, round);
                        self.log(format!("the run's best {} attached to `{node}`", best.hash));
                    }
                    home => {
                        let home = home.unwrap_or_else(|| ROOT.to_string());
                        let id = run_best_child(self.wm_mut(), &home, &best.hash, cost, round);
                        self.log(format!(
                            "the run's best {} attached to `{id}`, a new child of `{home}`",
                            best.hash
                        ));
                    }
                }
                changed = true;
            }
        }
        if changed {
            self.st.snapshots.push(wire::tree_json(self.wm()));
        }
    }

    fn end_cycle(&mut self, history: &[Observation]) -> Result<(), Stop> {
        let cyc = self.st.cycle.take().expect("a cycle");
        self.st.round += 1;
        // Its number as it started (with `--parallel` cycles end in another order than they start).
        let round = cyc.round;
        if let Some(n) = self.wm_mut().nodes.get_mut(&cyc.node) {
            n.cycles += 1;
        }
        let parent = cyc.parent.as_deref().and_then(|p| Self::find(history, p));
        let title = self
            .wm()
            .get(&cyc.node)
            .and_then(|n| n.action.as_ref())
            .map(|a| a.title.clone())
            .unwrap_or_default();
        let rounds = trajectory(&cyc, history);
        match &cyc.best {
            Some((hash, cost)) => {
                let best = Self::find(history, hash).expect("cycle best is in the history");
                self.attach(&cyc.node, hash, *cost, round);
                let vs_parent =
                    parent.and_then(|p| crate::eval::speedup(&p.results, &best.results));
                let run_best = super::run::best_of(history)
                    .map(|b| format!("{} ({})", b.hash, agent::perf(b, seed_of(history))))
                    .unwrap_or_default();
                let evidence = format!(
                    "Action: {title}\nParent ({}): {}\nCycle best ({hash}): {}\nSpeedup of the cycle best over the parent: {}\n\
                     Rounds of the cycle ({}; each change as the model described it, and its measured result):\n{rounds}\n\
                     The run's best so far: {run_best}",
                    cyc.parent
                        .as_deref()
                        .unwrap_or("none: the cycle started from the specification"),
                    parent
                        .map(|p| agent::perf(p, seed_of(history)))
                        .unwrap_or_default(),
                    agent::perf(best, seed_of(history)),
                    vs_parent
                        .map(|x| format!("{x:.2}x"))
                        .unwrap_or_else(|| "unknown".into()),
                    cyc.attempts,
                );
                let evidence = match &best.held_out {
                    Some(held) => format!(
                        "{evidence}\nHeld-out workloads (shapes no round is timed on; the run's result is judged on them too), the cycle best on each:\n{}",
                        held_out_lines(held, &self.agent.held_out)
                    ),
                    None => evidence,
                };
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
                        ..Default::default()
                    },
                )?;
            }
            None => {
                let why = cyc
                    .last_failure
                    .clone()
                    .unwrap_or_else(|| "no attempt passed".into());
                match self.cfg.too_hard {
                    TooHard::Retire => {
                        ops::retire(self.wm_mut(), &cyc.node, round, &why);
                        self.log(format!(
                            "cycle {round}: `{}` never passed; retired",
                            cyc.node
                        ));
                    }
                    TooHard::Keep => {
                        if let Some(n) = self.wm_mut().nodes.get_mut(&cyc.node) {
                            n.notes = format!("{}\nTOO_HARD (round {round}): {why}", n.notes)
                                .trim()
                                .to_string();
                            n.updated_round = round;
                        }
                        self.log(format!(
                            "cycle {round}: `{}` never passed; kept open",
                            cyc.node
                        ));
                    }
                }
                let evidence = format!(
                    "Action: {title}\nRounds of the cycle ({}; each change as the model described it, and its result):\n{rounds}\nLast failure: {why}",
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
                        ..Default::default()
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
            || self.cfg.max_cycle_rounds.is_some_and(|m| c.attempts >= m)
    }

    /// Asks the LLM for the cycle's next attempt; `None` when the reply was unusable (a failed round).
    fn generate(&mut self, history: &[Observation]) -> Result<Option<Proposal>, Stop> {
        let round = self.round_prompt(history)?;
        let reply =
            self.agent
                .candidate(round.purpose, round.prompt, &round.base, self.cfg.tries)?;
        let cyc = self.st.cycle.clone().expect("a cycle");
        Ok(self.take_reply(history, &cyc, round.purpose, reply))
    }

    /// The cycle's next round as the LLM is to be asked it: ACTION, DEBUG or IMPROVE, its prompt and the
    /// candidate the reply's changes apply to.
    fn round_prompt(&self, history: &[Observation]) -> Result<RoundPrompt, Stop> {
        let cyc = self.st.cycle.clone().expect("a cycle");
        let node = self.wm().get(&cyc.node).cloned().expect("cycle node");
        let action = node.action.clone().expect("an open node has an action");
        // None: the cycle starts from the specification (no seed, nothing solved above the action).
        let parent = cyc.parent.as_deref().map(|p| {
            Self::find(history, p)
                .expect("parent is in the history")
                .clone()
        });
        let seed = seed_of(history);
        let action_view = json!({"title": action.title, "description": action.description, "difficulty": action.difficulty, "rationale": action.rationale});
        let hint = match &parent {
            Some(p) => agent::source_hint(&p.candidate),
            None => self.agent.from_spec.clone(),
        };
        let (parent_hash, parent_perf, parent_code, parent_candidate) = match &parent {
            Some(p) => (
                p.hash.clone(),
                agent::perf(p, seed),
                agent::code(&p.candidate),
                p.candidate.clone(),
            ),
            None => (
                "none".to_string(),
                agent::NO_BASE.to_string(),
                agent::NO_BASE.to_string(),
                self.agent.no_base(),
            ),
        };
        let run_best = super::run::best_of(history);
        // What every prompt of a cycle shows besides its own part: the rounds so far, the parent, the run's best.
        let common = json!({
            "rounds": trajectory(&cyc, history), "round": cyc.attempts + 1, "window": self.cfg.window,
            "parent_perf": parent_perf, "parent_hash": parent_hash, "no_base": parent.is_none(),
            "run_best_perf": run_best.map(|b| agent::perf(b, seed)).unwrap_or_default(),
            "run_best_hash": run_best.map(|b| b.hash.clone()).unwrap_or_default(),
            "action": action_view, "path": wire::path_view(self.wm(), &cyc.node),
        });
        let (template, purpose, base, extra) = if cyc.attempts == 0 {
            (
                "action.j2",
                "action",
                parent_candidate.clone(),
                json!({
                    "parent_code": parent_code,
                }),
            )
        } else if let Some((best_hash, _)) = &cyc.best {
            let (base, extra) = self.improve_prompt(history, &cyc, best_hash, &parent_hash, seed);
            ("improve.j2", "improve", base, extra)
        } else {
            let (base, extra) = Self::debug_prompt(
                history,
                &cyc,
                parent.is_none(),
                parent_candidate,
                parent_code,
            );
            ("debug.j2", "debug", base, extra)
        };
        let mut ctx = self.agent.ctx(common);
        for extra in [extra, hint] {
            if let (Some(o), Value::Object(h)) = (ctx.as_object_mut(), extra) {
                o.extend(h);
            }
        }
        let prompt = crate::prompts::render(template, ctx).map_err(Stop)?;
        Ok(RoundPrompt {
            purpose,
            prompt,
            base,
        })
    }

    /// An IMPROVE round's base and prompt parts: the cycle's best (and by K-Search's rule its last attempt)
    /// with their code and performance.
    fn improve_prompt(
        &self,
        history: &[Observation],
        cyc: &Cycle,
        best_hash: &str,
        parent_hash: &str,
        seed: Option<&Observation>,
    ) -> (Candidate, Value) {
        let best = Self::find(history, best_hash).expect("best").clone();
        // K-Search edits the last attempt (the cycle's best beside it); the default climbs from the best.
        let last = cyc
            .last
            .as_ref()
            .and_then(|h| Self::find(history, h))
            .filter(|l| self.cfg.improve_from == ImproveFrom::Last && l.hash != best.hash)
            .cloned();
        let mut extra = json!({
            "best_code": agent::code(&best.candidate), "best_perf": agent::perf(&best, seed),
            "best_hash": best.hash, "best_is_parent": best.hash == parent_hash,
            "failure": cyc.last_failure.clone().unwrap_or_default(), "last_code": "",
        });
        if let Some(l) = &last {
            extra["last_code"] = json!(agent::code(&l.candidate));
            extra["last_perf"] = json!(agent::perf(l, seed));
            extra["last_hash"] = json!(l.hash);
        }
        (last.map_or(best.candidate, |l| l.candidate), extra)
    }

    /// A DEBUG round's base and prompt parts: the last attempt's code and why it failed.
    fn debug_prompt(
        history: &[Observation],
        cyc: &Cycle,
        no_parent: bool,
        parent_candidate: Candidate,
        parent_code: String,
    ) -> (Candidate, Value) {
        let last = cyc.last.as_ref().and_then(|h| Self::find(history, h));
        let current = last
            .map(|o| agent::code(&o.candidate))
            .unwrap_or_else(|| "(no usable code yet)".into());
        // From the specification, a fix builds on the last attempt (else, with none, it is whole).
        let base = match (no_parent, last) {
            (true, Some(l)) => l.candidate.clone(),
            _ => parent_candidate,
        };
        (
            base,
            json!({
                "parent_code": parent_code,
                "failure": cyc.last_failure.clone().unwrap_or_else(|| "the previous reply was unusable".into()),
                "current_code": current,
            }),
        )
    }

    /// The LLM's candidate for this round, proposed; None (a failed round) for an unusable or already
    /// measured one.
    fn take_reply(
        &mut self,
        history: &[Observation],
        cyc: &Cycle,
        purpose: &str,
        reply: Result<(Candidate, String), String>,
    ) -> Option<Proposal> {
        match reply {
            Ok((c, change)) => {
                let hash = c.hash();
                if history.iter().any(|o| o.hash == hash) {
                    self.fail_round(
                        purpose,
                        change,
                        format!(
                            "the reply is identical to candidate {hash}, which was already measured"
                        ),
                    );
                    return None;
                }
                if let Some(cy) = self.st.cycle.as_mut() {
                    cy.proposed.push(hash.clone());
                    cy.rounds.push(RoundNote {
                        purpose: purpose.into(),
                        change,
                        candidate: Some(hash),
                        result: "(being measured)".into(),
                    });
                }
                Some(Proposal {
                    candidate: c,
                    parent: cyc.parent.clone(),
                    origin: format!("world-model: {purpose} {}", cyc.node),
                    compare_with: self.compare_with(),
                })
            }
            Err(e) => {
                self.fail_round(purpose, String::new(), e);
                None
            }
        }
    }

    /// A round that produced nothing to evaluate still counts toward the stagnation window.
    fn fail_round(&mut self, purpose: &str, change: String, why: String) {
        // A provider's failed call wrote no code: it is no round of the budget (the agent stops the run
        // after repeated failures), though it counts toward the cycle's window.
        if !why.starts_with(agent::CALL_FAILED) {
            self.st.unmeasured_rounds += 1;
        }
        if let Some(c) = self.st.cycle.as_mut() {
            c.attempts += 1;
            c.streak += 1;
            c.last_failure = Some(why.clone());
            c.rounds.push(RoundNote {
                purpose: purpose.into(),
                change,
                candidate: None,
                result: format!("nothing measured: {why}"),
            });
        }
        self.log(format!("round failed: {why}"));
    }

    /// The next action by the configured rule.
    fn choose(&self, seed_cost: Option<f64>) -> Option<String> {
        let cfg = select::SelectConfig::default();
        // Actions whose cycles are in flight (`--parallel`) are not chosen again, nor anything under them.
        let busy;
        let wm = if self.st.lanes.is_empty() {
            self.wm()
        } else {
            busy = lanes::without_cycles_in_flight(self.wm(), &self.st.lanes);
            &busy
        };
        match self.cfg.selection {
            Selection::Utility => select::select(wm, seed_cost, &cfg),
            Selection::KSearch => select::select_ksearch(wm, &cfg),
        }
    }

    /// Whether to ask for new actions before this cycle, and the node that must get an open child.
    /// `when-empty`: only when nothing can be selected. `every-cycle` (K-Search): unless three open
    /// actions wait on the frontier and the best node already has an open child.
    fn propose_needed(&self, seed_cost: Option<f64>) -> Option<Option<String>> {
        needs_proposal(
            self.wm(),
            self.cfg.propose,
            self.choose(seed_cost).is_some(),
        )
    }

    /// Starts a cycle on the action selection picks, asking the LLM for new actions first when the frontier
    /// needs them. `starting`: how many cycles start now (`--parallel`), so that the one edit asks for an
    /// action for each of them rather than one edit per cycle, one after another.
    fn start_cycle(&mut self, history: &[Observation], starting: usize) -> Result<bool, Stop> {
        let seed_cost = seed_of(history).and_then(Observation::cost);
        if let Some(needs_child) = self.propose_needed(seed_cost) {
            let evidence = format!(
                "Best so far: {}",
                super::run::best_of(history)
                    .map(|b| agent::perf(b, seed_of(history)))
                    .unwrap_or_default()
            );
            self.edit(
                "propose",
                needs_child.clone().as_deref(),
                evidence,
                None,
                Requirements {
                    solved: needs_child,
                    promising_frontier: true,
                    new_actions: starting,
                    ..Default::default()
                },
            )?;
        }
        let Some(id) = self.choose(seed_cost) else {
            return Ok(false);
        };
        let node = self.wm().get(&id).expect("selected").clone();
        // The nearest ancestor with a candidate: its parent, or above a too-hard parent, its parent's.
        let parent_hash = self
            .wm()
            .base_of(&id)
            .and_then(|n| n.solution.as_ref())
            .map(|s| s.candidate.clone())
            .or_else(|| seed_of(history).map(|s| s.hash.clone()));
        // Cycles are numbered as they start; those in flight beside this one (`--parallel`) came first.
        let number = self.st.round + 1 + self.st.lanes.len() as u32;
        self.log(format!(
            "cycle {number}: `{id}` — {}",
            node.action.as_ref().map(|a| a.title.as_str()).unwrap_or("")
        ));
        self.st.cycle = Some(Cycle::new(id, parent_hash, number));
        Ok(true)
    }

    /// The cycle's best, when the tree update should show its held-out results and they are not known yet.
    fn held_out_wanted(&self, history: &[Observation]) -> Option<String> {
        if self.cfg.held_out != HeldOutEvidence::Cycle || self.agent.held_out.is_empty() {
            return None;
        }
        let (hash, _) = self.st.cycle.as_ref()?.best.as_ref()?;
        Self::find(history, hash)
            .filter(|o| o.held_out.is_none())
            .map(|o| o.hash.clone())
    }

    /// What comes next: a proposal, the held-out results of the cycle's best before its tree update, or
    /// the end (the search converged, or the budget ran out in rounds that gave nothing to evaluate).
    fn step(&mut self, history: &[Observation], budget: &super::Budget) -> Result<Next, Stop> {
        let unmeasured_before = self.st.unmeasured_rounds;
        if let Some(p) = &self.st.pending
            && !history.iter().any(|o| o.hash == p.hash)
        {
            // Resumed after a kill between proposing and finishing the evaluation: propose it again.
            return Ok(Next::Propose(
                p.proposal(self.compare_with()).map_err(Stop)?,
            ));
        }
        self.st.pending = None;
        self.catch_up(history);
        if self.st.wm.is_none() {
            self.init(history)?;
        }
        // Bounded: every pass either proposes, ends a cycle, or fails a round; failed rounds end a cycle
        // within its window, so many passes without a proposal mean the replies keep being unusable.
        for _ in 0..(4 * self.cfg.window as usize + 16) {
            let unmeasured = if budget.rounds {
                self.st.unmeasured_rounds - unmeasured_before
            } else {
                0 // runs stored before rounds were counted spend evaluations only
            };
            if budget.used + unmeasured >= budget.total {
                return Ok(Next::BudgetSpent);
            }
            if self.st.cycle.is_some() && self.cycle_done() {
                if let Some(hash) = self.held_out_wanted(history) {
                    return Ok(Next::HeldOut(hash));
                }
                self.end_cycle(history)?;
            }
            if self.st.cycle.is_none() && !self.start_cycle(history, 1)? {
                return Ok(Next::Done("the world model has no open action left".into()));
            }
            if let Some(p) = self.generate(history)? {
                return Ok(Next::Propose(p));
            }
        }
        Err(Stop(
            "no usable candidate after many rounds; see the run's log".into(),
        ))
    }
}

/// The title of the node that holds the run's best where the node whose cycle produced it holds another
/// candidate.
pub const RUN_BEST_CHOICE: &str = "run's best of this cycle";

/// Adds a solved child under `parent` holding the run's best, `hash`, which `parent`'s cycle produced but
/// did not keep as its best (the verdicts against the cycle's best and against the run's best disagreed).
/// It has no action: nothing is left to try on it. Returns its id.
fn run_best_child(wm: &mut WorldModel, parent: &str, hash: &str, cost: f64, round: u32) -> String {
    let id = wm.fresh_id("best");
    let kept = wm
        .get(parent)
        .and_then(|n| n.solution.as_ref())
        .map(|s| format!(" (which keeps {})", s.candidate))
        .unwrap_or_default();
    let node = tree::Node {
        id: id.clone(),
        parent: Some(parent.to_string()),
        decision: "the run's best".into(),
        choice: RUN_BEST_CHOICE.into(),
        action: None,
        solution: Some(Solution {
            candidate: hash.to_string(),
            cost_s: cost,
            round,
        }),
        impacts: tree::Impacts::default(),
        rating: 5.0,
        confidence: 0.5,
        notes: format!(
            "The run's best, {hash}, came from the cycle of `{parent}`{kept} but was not that cycle's best \
             (the comparison against the cycle's best and the one against the run's best disagreed). \
             Attached here, as a node's candidate is never replaced."
        ),
        status: Status::Solved,
        cycles: 0,
        updated_round: round,
    };
    wm.nodes.insert(id.clone(), node);
    id
}

/// Whether to ask for new actions (see `WorldModelStrategy::propose_needed`), and the node that must get
/// an open child; `selectable`: the configured rule can choose an action now.
fn needs_proposal(wm: &WorldModel, rule: Propose, selectable: bool) -> Option<Option<String>> {
    match rule {
        Propose::WhenEmpty => (!selectable).then_some(None),
        Propose::EveryCycle => {
            let open = wm.frontier().len();
            let childless = wm
                .best()
                .map(|b| b.id.clone())
                .filter(|b| !wm.children(b).any(|c| c.is_open()));
            (open < 3 || childless.is_some()).then_some(childless)
        }
    }
}

/// A round's measured outcome in one line: its time with the spread, against the cycle's parent, and the
/// side-by-side verdict where it was timed beside another candidate.
fn outcome(obs: &Observation, parent: Option<&Observation>) -> String {
    if !obs.summary.passed {
        return agent::perf(obs, None);
    }
    let mut s = format!("passed, {}", agent::time_with_spread(obs));
    if let Some(x) = parent.and_then(|p| crate::eval::speedup(&p.results, &obs.results)) {
        s.push_str(&format!(", {x:.2}x the parent"));
    }
    if let Some(v) = &obs.summary.verdict {
        s.push_str(&format!(
            "; timed side by side with {}: {} ({:.3}x)",
            v.incumbent,
            v.verdict.name(),
            v.speedup
        ));
    }
    s
}

/// The tuner's variants of `base` in the history: the values tried and what each measured.
fn tuning_lines(base: &str, history: &[Observation]) -> Vec<String> {
    let tag = format!("{} {base}", super::TUNE_ORIGIN);
    history
        .iter()
        .filter(|o| o.origin == tag)
        .map(|o| {
            let result = if o.summary.passed {
                agent::time_with_spread(o)
            } else {
                agent::perf(o, None)
            };
            format!(
                "{} → {result}",
                crate::units::fmt_params(&o.candidate.params())
            )
        })
        .collect()
}

/// A candidate's results on the held-out workloads, a line each: the shape, and its time with the spread
/// and against each baseline timed there, or why it failed. `shapes`: each workload's name and dims.
fn held_out_lines(results: &[crate::eval::WorkloadResult], shapes: &[Value]) -> String {
    results
        .iter()
        .map(|r| {
            let dims = shapes
                .iter()
                .find(|s| s["name"] == r.workload.as_str())
                .and_then(|s| s["dims"].as_object())
                .map(|d| {
                    let d: Vec<String> = d.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    format!(" ({})", d.join(" "))
                })
                .unwrap_or_default();
            let outcome = match (&r.status, &r.timing) {
                (crate::eval::Status::Passed, Some(t)) => {
                    let mut s = format!(
                        "passed, {} ±{} IQR{}",
                        crate::units::fmt_time(Some(t.median_s)),
                        crate::units::fmt_time(Some(t.iqr_s)),
                        if t.noisy { ", NOISY" } else { "" }
                    );
                    for (b, bt) in &r.baselines {
                        if t.median_s > 0.0 {
                            s.push_str(&format!(", {:.2}x {b}", bt.median_s / t.median_s));
                        }
                    }
                    s
                }
                (crate::eval::Status::Passed, None) => "passed (not timed)".into(),
                (status, _) => format!(
                    "FAILED ({}) — {}",
                    status.name(),
                    crate::units::head_line(&r.message, 300)
                ),
            };
            format!("- {}{dims}: {outcome}", r.workload)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every round of a cycle, each with its change and result, and the tuner's variants of its candidates.
fn trajectory(cyc: &Cycle, history: &[Observation]) -> String {
    let mut out = Vec::new();
    for (i, r) in cyc.rounds.iter().enumerate() {
        let made = r
            .candidate
            .as_ref()
            .map(|h| format!(", candidate {h}"))
            .unwrap_or_default();
        let change = if r.change.is_empty() {
            "(not described)"
        } else {
            &r.change
        };
        out.push(format!(
            "- round {} ({}{made}): change: {change}\n  result: {}",
            i + 1,
            r.purpose,
            r.result
        ));
        if let Some(h) = &r.candidate {
            let base = history.iter().find(|o| &o.hash == h);
            let tuned = tuning_lines(h, history);
            if let (Some(b), false) = (base, tuned.is_empty()) {
                out.push(format!(
                    "  tuned automatically from {}: {}",
                    crate::units::fmt_params(&b.candidate.params()),
                    tuned.join("; ")
                ));
            }
        }
    }
    if out.is_empty() {
        "(no round yet)".into()
    } else {
        out.join("\n")
    }
}

impl Strategy for WorldModelStrategy {
    fn name(&self) -> &'static str {
        "world-model"
    }

    fn propose(&mut self, history: &[Observation], budget: &super::Budget) -> Next {
        self.agent.budget = budget.describe();
        match self.step(history, budget) {
            Ok(Next::Propose(p)) => {
                self.st.pending = Some(super::Pending::of(&p));
                Next::Propose(p)
            }
            Ok(next) => next,
            Err(stop) => {
                self.log(format!("stopped: {}", stop.0));
                stop.next()
            }
        }
    }

    fn propose_batch(
        &mut self,
        history: &[Observation],
        budget: &super::Budget,
        k: usize,
    ) -> Vec<Next> {
        if k <= 1 && self.st.lanes.is_empty() && self.st.batch.is_empty() {
            return vec![self.propose(history, budget)];
        }
        self.agent.budget = budget.describe();
        match self.batch(history, budget, k, &[]) {
            Ok(next) => next,
            Err(stop) => {
                self.log(format!("stopped: {}", stop.0));
                vec![stop.next()]
            }
        }
    }

    /// Rounds of the cycles not waiting for an evaluation in flight, and new cycles on other open actions,
    /// asked while those evaluations run: with `--parallel K`, K more cycles than are waiting may be in
    /// flight. A run of one cycle at a time (`--parallel 1`) does not look ahead.
    fn propose_ahead(
        &mut self,
        history: &[Observation],
        budget: &super::Budget,
        k: usize,
        in_flight: &[String],
    ) -> Vec<Next> {
        if self.st.lanes.is_empty() && self.st.batch.is_empty() {
            return Vec::new();
        }
        self.agent.budget = budget.describe();
        match self.batch(history, budget, k, in_flight) {
            Ok(next) => next,
            Err(stop) => {
                self.log(format!("stopped: {}", stop.0));
                vec![stop.next()]
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

    fn finish(&mut self, history: &[Observation]) {
        self.close(history);
    }

    fn unmeasured_rounds(&self) -> usize {
        self.st.unmeasured_rounds
    }

    fn tree(&self) -> Option<Value> {
        self.st.wm.as_ref().map(wire::tree_json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(open_under_root: usize, best_has_child: bool) -> WorldModel {
        let mut wm = WorldModel::new("k");
        let spec = |id: &str, parent: &str| {
            wire::parse_node(&json!({"node_id": id, "parent_id": parent, "action": {"title": id}}))
                .unwrap()
                .into_node(id.into(), parent.into(), 0)
        };
        for i in 0..open_under_root {
            let id = format!("o{i}");
            wm.nodes.insert(id.clone(), spec(&id, ROOT));
        }
        let mut best = spec("best", ROOT);
        best.solution = Some(Solution {
            candidate: "c".into(),
            cost_s: 1.0,
            round: 1,
        });
        best.status = Status::Solved;
        wm.nodes.insert("best".into(), best);
        if best_has_child {
            wm.nodes.insert("next".into(), spec("next", "best"));
        }
        wm
    }

    fn strategy() -> WorldModelStrategy {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks/matmul");
        let task = crate::task::Task::load(&dir).unwrap();
        let llm = crate::llm::Llm::replay(Vec::new(), "none");
        let agent = Agent::new(llm, &task, crate::target::Target::Cpu, &json!({}));
        WorldModelStrategy::new(agent, WorldModelConfig::default())
    }

    /// With `--parallel`: no cycle is started on an action in flight or under one, and a cycle whose
    /// action another cycle's tree update removed ends instead of asking for a round of it.
    #[test]
    fn actions_in_flight_are_not_chosen_and_a_removed_one_ends_its_cycle() {
        let mut s = strategy();
        let mut wm = tree(2, true);
        wm.nodes.get_mut("best").unwrap().solution = None;
        wm.nodes.get_mut("best").unwrap().status = Status::Open;
        s.st.wm = Some(wm);
        s.st.lanes = vec![Cycle::new("best".into(), None, 1)];
        let masked = lanes::without_cycles_in_flight(s.wm(), &s.st.lanes);
        assert!(masked.nodes["best"].action.is_none() && masked.nodes["next"].action.is_none());
        assert!(masked.nodes["o0"].action.is_some());
        let chosen = s.choose(None).expect("an open action");
        assert!(chosen.starts_with('o'), "{chosen}");

        s.st.lanes.push(Cycle::new("o1".into(), None, 2));
        s.wm_mut().nodes.get_mut("o1").unwrap().action = None; // split by another cycle's edit
        s.drop_orphaned_cycles();
        assert_eq!(
            s.st.lanes
                .iter()
                .map(|c| c.node.as_str())
                .collect::<Vec<_>>(),
            ["best"]
        );
        assert!(
            s.st.log.last().unwrap().contains("`o1` ended"),
            "{:?}",
            s.st.log
        );
    }

    /// Cycles starting together (`--parallel`) are asked for in one propose edit, which may add an action
    /// for each; one cycle's edit reads as it always has (recordings replay).
    #[test]
    fn a_propose_edit_asks_for_every_cycle_starting_together() {
        let mut s = strategy();
        s.st.wm = Some(tree(0, true));
        let req = |n| Requirements {
            promising_frontier: true,
            new_actions: n,
            ..Default::default()
        };
        let four = s
            .edit_prompt("propose", None, "evidence", None, &req(4))
            .unwrap();
        assert!(
            four.contains("Before the next 4 cycles, which start at once"),
            "{four}"
        );
        assert!(four.contains("(at least 4 open actions in all)"), "{four}");
        assert!(four.contains("at most 4 new nodes in total"), "{four}");
        let one = s
            .edit_prompt("propose", None, "evidence", None, &req(1))
            .unwrap();
        assert!(
            one.contains("Before the next cycle, make sure the frontier offers promising actions: propose new ones."),
            "{one}"
        );
        assert!(
            one.contains("at most 3 new nodes in total") && !one.contains("(at least"),
            "{one}"
        );
    }

    /// A passing observation of a distinct candidate, timed beside `beside` with `verdict` if given.
    fn observed(
        name: &str,
        cost: f64,
        beside: Option<(&str, crate::eval::Verdict)>,
    ) -> Observation {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks/matmul/seeds/cpu/naive");
        let mut candidate = Candidate::load(&dir).unwrap();
        candidate.plan.name = name.into();
        Observation {
            hash: candidate.hash(),
            origin: format!("world-model: action {name}"),
            candidate,
            summary: crate::eval::Summary {
                passed: true,
                geomean_s: Some(cost),
                verdict: beside.map(|(h, v)| crate::eval::OverallVerdict {
                    incumbent: h.into(),
                    verdict: v,
                    speedup: 1.0,
                    z: 0.0,
                    workloads: Default::default(),
                }),
                ..Default::default()
            },
            results: vec![],
            held_out: None,
        }
    }

    /// The cycle of `n` kept `a` (its first passing round, slower than the seed); its next round `b` was
    /// within noise of `a` but, by the medians, faster than the seed, so it is the run's best though not
    /// the cycle's. At the end it is attached to a new child of `n`, and `n` keeps `a`.
    #[test]
    fn the_runs_best_is_attached_even_when_its_cycle_kept_another_candidate() {
        use crate::eval::Verdict;
        let seed = observed("seed", 1.0, None);
        let a = observed("a", 1.2, Some((&seed.hash, Verdict::Slower)));
        let b = observed("b", 0.9, Some((&a.hash, Verdict::WithinNoise)));
        let history = vec![seed.clone(), a.clone(), b.clone()];
        assert_eq!(
            crate::search::run::best_of(&history).map(|o| o.hash.clone()),
            Some(b.hash.clone())
        );
        let mut s = strategy();
        let mut wm = tree(0, false);
        let mut n = wm.nodes.remove("best").unwrap();
        n.id = "n".into();
        n.solution = Some(Solution {
            candidate: a.hash.clone(),
            cost_s: 1.2,
            round: 1,
        });
        wm.nodes.insert("n".into(), n);
        wm.nodes.get_mut(ROOT).unwrap().solution = Some(Solution {
            candidate: seed.hash.clone(),
            cost_s: 1.0,
            round: 0,
        });
        s.st.wm = Some(wm);
        s.st.round = 1;
        s.st.seen = history.len();
        for h in [&a.hash, &b.hash] {
            s.st.homes.insert(h.clone(), "n".into());
        }
        s.finish(&history);
        let wm = s.tree().unwrap();
        assert_eq!(
            wm.get("n").unwrap().solution.as_ref().unwrap().candidate,
            a.hash,
            "the node keeps its candidate"
        );
        let holder = wm
            .nodes
            .values()
            .find(|n| n.solution.as_ref().is_some_and(|s| s.candidate == b.hash))
            .expect("the run's best is attached");
        assert_eq!(holder.parent.as_deref(), Some("n"));
        assert_eq!(holder.choice, RUN_BEST_CHOICE);
        assert_eq!(holder.status, Status::Solved);
        assert_eq!(holder.solution.as_ref().unwrap().cost_s, 0.9);
        assert_eq!(holder.solution.as_ref().unwrap().round, 1);
        assert!(!holder.is_open());
        wm.check().unwrap();
        // A snapshot records the tree with it; closing again adds nothing.
        assert_eq!(s.take_snapshots().len(), 1);
        let nodes = s.tree().unwrap().nodes.len();
        s.finish(&history);
        assert_eq!(s.tree().unwrap().nodes.len(), nodes);
    }

    /// A cycle that ended with a best asks for the best's held-out results before its tree update (no LLM
    /// call: the replay holds none), once; with `--held-out-evidence final`, or once they are known, it
    /// goes on to the update.
    #[test]
    fn a_finished_cycle_asks_for_its_bests_held_out_results_before_the_tree_update() {
        let seed = observed("seed", 1.0, None);
        let a = observed("a", 0.8, None);
        let mut history = vec![seed.clone(), a.clone()];
        let budget = crate::search::Budget {
            total: 10,
            used: 1,
            rounds: true,
            ..Default::default()
        };
        let start = |cfg: WorldModelConfig| {
            let mut s = strategy();
            s.cfg = cfg;
            s.st.wm = Some(tree(1, false));
            s.st.seen = 2;
            s.st.cycle = Some(Cycle {
                node: "o0".into(),
                parent: Some(seed.hash.clone()),
                round: 1,
                attempts: 4,
                best: Some((a.hash.clone(), 0.8)),
                streak: 3,
                streak_base: 0,
                last: Some(a.hash.clone()),
                last_failure: None,
                proposed: vec![a.hash.clone()],
                rounds: Vec::new(),
            });
            s
        };
        let asked = |next: &Next| match next {
            Next::HeldOut(h) => Some(h.clone()),
            _ => None,
        };
        let mut s = start(WorldModelConfig::default());
        assert_eq!(asked(&s.propose(&history, &budget)), Some(a.hash.clone()));
        assert!(s.st.cycle.is_some(), "the cycle waits for the results");
        // Known now: the update goes ahead (and meets the empty replay, which stops the run here).
        history[1].held_out = Some(Vec::new());
        assert_eq!(asked(&s.propose(&history, &budget)), None);
        let mut s = start(WorldModelConfig {
            held_out: HeldOutEvidence::Final,
            ..Default::default()
        });
        history[1].held_out = None;
        assert_eq!(asked(&s.propose(&history, &budget)), None);
    }

    #[test]
    fn k_search_proposes_every_cycle_unless_three_actions_wait_and_the_best_has_a_follow_up() {
        let every = Propose::EveryCycle;
        assert_eq!(needs_proposal(&tree(3, true), every, true), None);
        // Too few open actions: propose, no child demanded (the best has one).
        assert_eq!(needs_proposal(&tree(1, true), every, true), Some(None));
        // The best node has no open child: propose, demanding one under it.
        assert_eq!(
            needs_proposal(&tree(4, false), every, true),
            Some(Some("best".into()))
        );
        // The default asks only when nothing can be selected.
        assert_eq!(
            needs_proposal(&tree(1, false), Propose::WhenEmpty, true),
            None
        );
        assert_eq!(
            needs_proposal(&tree(0, false), Propose::WhenEmpty, false),
            Some(None)
        );
    }
}
