//! K-Search's world model as a typed tree: every node is a hypothesis about the kernel (a decision and
//! the choice made), optionally an action still to try, and once tried, the candidate that realised it.
//!
//! Paths from the root are composed optimisation plans; siblings are alternatives. A node with an
//! action and no solution is *open*; the *frontier* is the open nodes with a candidate to build on: their
//! parent is solved or is the root, or their parent was too hard and its own parent has one (smaller steps
//! toward a too-hard goal build on the candidate the too-hard action was tried on).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const ROOT: &str = "root";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Action {
    pub title: String,
    pub description: String,
    /// 1 (a parameter change) … 5 (a new algorithm).
    pub difficulty: u8,
    /// The LLM's estimate that this is worth doing next, 0..1 (K-Search's `score_0_to_1`).
    pub priority: f64,
    /// Expected speedup of this node's candidate over the starting candidate (the root), if the LLM gave
    /// one (K-Search's `expected_vs_baseline_factor`).
    pub expected_gain: Option<f64>,
    pub rationale: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Impact {
    /// 0..10: how much this node improves the dimension.
    pub rating: f64,
    pub risk: String,
    pub notes: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Impacts {
    pub memory_bandwidth: Impact,
    pub register_pressure: Impact,
    pub compute: Impact,
}

/// The evaluated candidate attached to a node.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Solution {
    pub candidate: String,
    /// Geometric-mean time over the feedback workloads.
    pub cost_s: f64,
    pub round: u32,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Not tried yet (or a decision node without an action).
    Open,
    /// Tried and realised: a solution is attached.
    Solved,
    /// Tried and never passed: never selected again; the LLM may add smaller actions below or beside it.
    TooHard,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Node {
    pub id: String,
    pub parent: Option<String>,
    pub decision: String,
    pub choice: String,
    pub action: Option<Action>,
    pub solution: Option<Solution>,
    pub impacts: Impacts,
    /// 0..10: quality of the plan from the root to here.
    pub rating: f64,
    /// 0..1: how much the LLM believes its estimates for this node.
    pub confidence: f64,
    pub notes: String,
    pub status: Status,
    /// Cycles spent on this node's action.
    pub cycles: u32,
    pub updated_round: u32,
}

impl Node {
    pub fn is_open(&self) -> bool {
        self.status == Status::Open && self.action.is_some() && self.solution.is_none()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WorldModel {
    pub kernel_summary: String,
    pub open_questions: Vec<String>,
    pub nodes: BTreeMap<String, Node>,
    /// Counter for ids the model gives nodes the LLM left unnamed.
    pub serial: u64,
}

impl WorldModel {
    /// A tree with only the root; the root stands for the seed candidate once it is evaluated.
    pub fn new(summary: &str) -> WorldModel {
        let root = Node {
            id: ROOT.into(),
            parent: None,
            decision: String::new(),
            choice: "seed".into(),
            action: None,
            solution: None,
            impacts: Impacts::default(),
            rating: 5.0,
            confidence: 0.5,
            notes: String::new(),
            status: Status::Open,
            cycles: 0,
            updated_round: 0,
        };
        WorldModel {
            kernel_summary: summary.into(),
            open_questions: Vec::new(),
            nodes: [(ROOT.to_string(), root)].into(),
            serial: 0,
        }
    }

    pub fn root(&self) -> &Node {
        &self.nodes[ROOT]
    }

    pub fn get(&self, id: &str) -> Option<&Node> {
        self.nodes.get(id)
    }

    pub fn children(&self, id: &str) -> impl Iterator<Item = &Node> {
        let id = id.to_string();
        self.nodes
            .values()
            .filter(move |n| n.parent.as_deref() == Some(id.as_str()))
    }

    pub fn depth(&self, id: &str) -> usize {
        let mut d = 0;
        let mut cur = self.nodes.get(id).and_then(|n| n.parent.clone());
        while let Some(p) = cur {
            d += 1;
            if d > self.nodes.len() {
                break; // a cycle; `check` reports it
            }
            cur = self.nodes.get(&p).and_then(|n| n.parent.clone());
        }
        d
    }

    /// Root to `id`, inclusive.
    pub fn path(&self, id: &str) -> Vec<&Node> {
        let mut out = Vec::new();
        let mut cur = self.nodes.get(id);
        while let Some(n) = cur {
            if out.len() > self.nodes.len() {
                break;
            }
            out.push(n);
            cur = n.parent.as_ref().and_then(|p| self.nodes.get(p));
        }
        out.reverse();
        out
    }

    /// The node whose candidate `id` builds on: its parent if solved (or the root: the seed), else, through
    /// parents tried without passing (too hard, or kept open after a failed cycle), the nearest such
    /// ancestor; None when an untried or missing ancestor is in the way.
    pub fn base_of(&self, id: &str) -> Option<&Node> {
        let mut cur = self.nodes.get(id)?.parent.as_deref();
        for _ in 0..=self.nodes.len() {
            let p = self.nodes.get(cur?)?;
            if p.id == ROOT || p.solution.is_some() {
                return Some(p);
            }
            // Through a parent that was tried and never passed (retired, or kept open with cycles spent).
            if p.status != Status::TooHard && p.cycles == 0 {
                return None;
            }
            cur = p.parent.as_deref();
        }
        None
    }

    /// Whether a node has a candidate to build on (see [`WorldModel::base_of`]).
    pub fn parent_ready(&self, n: &Node) -> bool {
        self.base_of(&n.id).is_some()
    }

    pub fn frontier(&self) -> Vec<&Node> {
        self.nodes
            .values()
            .filter(|n| n.is_open() && self.parent_ready(n))
            .collect()
    }

    /// The solved node with the fastest candidate.
    pub fn best(&self) -> Option<&Node> {
        self.nodes
            .values()
            .filter_map(|n| n.solution.as_ref().map(|s| (n, s.cost_s)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(n, _)| n)
    }

    /// A fresh id with a prefix, unique in this tree.
    pub fn fresh_id(&mut self, prefix: &str) -> String {
        loop {
            self.serial += 1;
            let id = format!("{prefix}{}", self.serial);
            if !self.nodes.contains_key(&id) {
                return id;
            }
        }
    }

    /// The subtree under `id` holds a solved node (such subtrees are never deleted).
    pub fn has_solution_below(&self, id: &str) -> bool {
        self.nodes.get(id).is_some_and(|n| n.solution.is_some())
            || self.children(id).any(|c| self.has_solution_below(&c.id))
    }

    /// Structural invariants; the edit operations keep them, this checks they did.
    pub fn check(&self) -> Result<(), String> {
        if self.root().parent.is_some() {
            return Err("the root has a parent".into());
        }
        for n in self.nodes.values() {
            if n.id != ROOT {
                let Some(p) = &n.parent else {
                    return Err(format!("node `{}` has no parent", n.id));
                };
                if !self.nodes.contains_key(p) {
                    return Err(format!("node `{}` has a missing parent `{p}`", n.id));
                }
                if self.depth(&n.id) > self.nodes.len() {
                    return Err(format!("node `{}` is in a cycle", n.id));
                }
            }
        }
        Ok(())
    }
}
