//! Choosing the next action, deterministically, from the frontier.
//!
//! K-Search sorts the frontier lexicographically by the LLM's score and ignores the utility weights it
//! defines; here the choice is a real utility: the LLM's priority, the quality of the candidate the
//! action builds on, the LLM's confidence and rating, a cost for difficulty and depth, and an
//! exploration bonus (UCB-style) for branches (the subtrees under the root's children, the end-to-end
//! strategies) that have had few cycles, so a search does not sink all its budget into one branch.
//! Retired (too-hard) nodes are never on the frontier; smaller actions under them are.

use super::tree::{Node, ROOT, WorldModel};

#[derive(Debug, Clone)]
pub struct SelectConfig {
    /// Actions harder than this wait until nothing easier is left.
    pub max_difficulty: u8,
    pub exploration: f64,
}

impl Default for SelectConfig {
    fn default() -> Self {
        SelectConfig {
            max_difficulty: 4,
            exploration: 0.15,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub id: String,
    pub utility: f64,
}

/// Cycles spent anywhere in the subtree under `id`.
fn subtree_cycles(wm: &WorldModel, id: &str) -> u32 {
    wm.get(id).map_or(0, |n| n.cycles)
        + wm.children(id)
            .map(|c| subtree_cycles(wm, &c.id))
            .sum::<u32>()
}

/// How good the candidate under `n` is, relative to the best so far (1.0 = it is the best).
fn parent_quality(wm: &WorldModel, n: &Node, seed_cost: Option<f64>) -> f64 {
    let best = wm
        .best()
        .and_then(|b| b.solution.as_ref().map(|s| s.cost_s))
        .or(seed_cost);
    let parent_cost = wm.base_of(&n.id).and_then(|b| {
        b.solution
            .as_ref()
            .map(|s| s.cost_s)
            .or(if b.id == ROOT { seed_cost } else { None })
    });
    match (best, parent_cost) {
        (Some(b), Some(p)) if p > 0.0 => (b / p).clamp(0.0, 1.0),
        _ => 0.5,
    }
}

/// The frontier ranked by utility, best first (ties broken by id, so the order is deterministic).
pub fn rank(wm: &WorldModel, seed_cost: Option<f64>, cfg: &SelectConfig) -> Vec<Scored> {
    let total: u32 = wm.nodes.values().map(|n| n.cycles).sum();
    let frontier = wm.frontier();
    let easy_left = frontier.iter().any(|n| {
        n.action
            .as_ref()
            .is_some_and(|a| a.difficulty <= cfg.max_difficulty)
    });
    let mut out: Vec<Scored> = frontier
        .iter()
        .filter(|n| {
            !easy_left
                || n.action
                    .as_ref()
                    .is_some_and(|a| a.difficulty <= cfg.max_difficulty)
        })
        .map(|n| {
            let a = n.action.as_ref().expect("frontier nodes have actions");
            // The node's branch: its ancestor just below the root (itself at depth 1).
            let path = wm.path(&n.id);
            let branch = path.get(1).map_or(n.id.as_str(), |b| b.id.as_str());
            let explore = cfg.exploration
                * ((1.0 + total as f64).ln() / (1.0 + subtree_cycles(wm, branch) as f64)).sqrt();
            let utility = 0.45 * a.priority
                + 0.15 * parent_quality(wm, n, seed_cost)
                + 0.15 * n.confidence
                + 0.10 * n.rating / 10.0
                - 0.10 * (a.difficulty.saturating_sub(1)) as f64 / 4.0
                - 0.03 * wm.depth(&n.id) as f64
                + explore;
            Scored {
                id: n.id.clone(),
                utility,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.utility
            .total_cmp(&a.utility)
            .then_with(|| a.id.cmp(&b.id))
    });
    out
}

pub fn select(wm: &WorldModel, seed_cost: Option<f64>, cfg: &SelectConfig) -> Option<String> {
    rank(wm, seed_cost, cfg).into_iter().next().map(|s| s.id)
}

/// K-Search's choice (`--selection k-search`): the frontier's actions of difficulty at most
/// `max_difficulty` (all of them if none is), sorted by score descending, difficulty ascending, rating
/// descending, then id.
pub fn select_ksearch(wm: &WorldModel, cfg: &SelectConfig) -> Option<String> {
    let frontier = wm.frontier();
    let easy: Vec<&Node> = frontier
        .iter()
        .copied()
        .filter(|n| {
            n.action
                .as_ref()
                .is_some_and(|a| a.difficulty <= cfg.max_difficulty)
        })
        .collect();
    let pool = if easy.is_empty() { frontier } else { easy };
    pool.into_iter()
        .min_by(|a, b| {
            let (x, y) = (a.action.as_ref().unwrap(), b.action.as_ref().unwrap());
            y.priority
                .total_cmp(&x.priority)
                .then(x.difficulty.cmp(&y.difficulty))
                .then(b.rating.total_cmp(&a.rating))
                .then(a.id.cmp(&b.id))
        })
        .map(|n| n.id.clone())
}

#[cfg(test)]
mod tests {
    use super::super::ops::{Requirements, apply};
    use super::super::tree::{Solution, Status};
    use super::super::wire::parse_ops;
    use super::*;
    use serde_json::json;

    fn wm(nodes: serde_json::Value) -> WorldModel {
        let mut wm = WorldModel::new("k");
        let ops = parse_ops(&json!({"ops": nodes.as_array().unwrap().iter().map(|n| json!({"op": "insert_node", "parent_id": n["parent_id"].clone(), "node": n})).collect::<Vec<_>>()})).unwrap();
        // One insert per edit: the 3-new-nodes cap is for the LLM, not for building fixtures.
        for op in ops {
            apply(&mut wm, &[op], &Requirements::default(), 0).unwrap();
        }
        wm
    }

    /// Marks `id` solved by a candidate of `cost` after `cycles` cycles.
    fn solve(w: &mut WorldModel, id: &str, cost: f64, cycles: u32) {
        let n = w.nodes.get_mut(id).unwrap();
        n.solution = Some(Solution {
            candidate: format!("c{id}"),
            cost_s: cost,
            round: 1,
        });
        n.status = Status::Solved;
        n.cycles = cycles;
    }

    #[test]
    fn priority_dominates_when_all_else_is_equal() {
        let w = wm(json!([
            {"node_id": "low", "parent_id": "root", "action": {"title": "l", "score_0_to_1": 0.3, "difficulty_1_to_5": 2}},
            {"node_id": "high", "parent_id": "root", "action": {"title": "h", "score_0_to_1": 0.9, "difficulty_1_to_5": 2}},
        ]));
        assert_eq!(
            select(&w, Some(1.0), &SelectConfig::default()).as_deref(),
            Some("high")
        );
    }

    #[test]
    fn hard_actions_wait_and_retired_ones_never_return() {
        let mut w = wm(json!([
            {"node_id": "hard", "parent_id": "root", "action": {"title": "h", "score_0_to_1": 1.0, "difficulty_1_to_5": 5}},
            {"node_id": "easy", "parent_id": "root", "action": {"title": "e", "score_0_to_1": 0.2, "difficulty_1_to_5": 1}},
        ]));
        let cfg = SelectConfig::default();
        assert_eq!(select(&w, None, &cfg).as_deref(), Some("easy"));
        w.nodes.get_mut("easy").unwrap().status = Status::TooHard;
        assert_eq!(
            select(&w, None, &cfg).as_deref(),
            Some("hard"),
            "nothing easier is left"
        );
        w.nodes.get_mut("hard").unwrap().status = Status::TooHard;
        assert_eq!(select(&w, None, &cfg), None);
    }

    #[test]
    fn exploration_pulls_toward_unvisited_subtrees() {
        // Two solved branches with equal follow-ups; one branch already had many cycles.
        let mut w = wm(json!([
            {"node_id": "a", "parent_id": "root", "action": {"title": "a"}},
            {"node_id": "b", "parent_id": "root", "action": {"title": "b"}},
            {"node_id": "a1", "parent_id": "a", "action": {"title": "a1", "score_0_to_1": 0.6}},
            {"node_id": "b1", "parent_id": "b", "action": {"title": "b1", "score_0_to_1": 0.6}},
        ]));
        for (id, cycles) in [("a", 6), ("b", 1)] {
            solve(&mut w, id, 1.0, cycles);
        }
        let r = rank(&w, Some(2.0), &SelectConfig::default());
        assert_eq!(r[0].id, "b1", "{r:?}");
        assert!(r[0].utility > r[1].utility);
    }

    #[test]
    fn smaller_steps_under_a_too_hard_action_are_selectable_and_build_on_its_base() {
        let mut w = wm(json!([
            {"node_id": "a", "parent_id": "root", "action": {"title": "a", "score_0_to_1": 0.4}},
            {"node_id": "hard", "parent_id": "a", "action": {"title": "h", "score_0_to_1": 0.9}},
            {"node_id": "step", "parent_id": "hard", "action": {"title": "s", "score_0_to_1": 0.9}},
        ]));
        let cfg = SelectConfig::default();
        assert_eq!(select(&w, None, &cfg).as_deref(), Some("a"));
        solve(&mut w, "a", 1.0, 0);
        assert_eq!(select(&w, None, &cfg).as_deref(), Some("hard"));
        w.nodes.get_mut("hard").unwrap().status = Status::TooHard;
        assert_eq!(select(&w, None, &cfg).as_deref(), Some("step"));
        assert_eq!(w.base_of("step").map(|n| n.id.as_str()), Some("a"));
        // An open (untried) parent is still in the way.
        w.nodes.get_mut("hard").unwrap().status = Status::Open;
        assert_eq!(w.base_of("step").map(|n| n.id.as_str()), None);
        // Kept open after a failed cycle (`--too-hard keep`): steps under it build on its base.
        w.nodes.get_mut("hard").unwrap().cycles = 1;
        assert_eq!(w.base_of("step").map(|n| n.id.as_str()), Some("a"));
    }

    #[test]
    fn exploration_favours_a_fresh_branch_over_a_deep_step_in_a_busy_one() {
        // Equal in everything but the branch's history: `fresh` is a root child nothing was spent on,
        // `deep` a follow-up in a branch that had four cycles.
        let mut w = wm(json!([
            {"node_id": "busy", "parent_id": "root", "action": {"title": "b"}},
            {"node_id": "fresh", "parent_id": "root", "action": {"title": "f", "score_0_to_1": 0.6}},
            {"node_id": "deep", "parent_id": "busy", "action": {"title": "d", "score_0_to_1": 0.6}},
        ]));
        solve(&mut w, "busy", 1.0, 4);
        let r = rank(&w, Some(1.0), &SelectConfig::default());
        let u = |id: &str| r.iter().find(|s| s.id == id).unwrap().utility;
        // Depth costs `deep` 0.03; the exploration bonus must account for more than that.
        assert!(u("fresh") - u("deep") > 0.05, "{r:?}");
    }

    #[test]
    fn k_search_selection_is_lexicographic_after_the_difficulty_gate() {
        let w = wm(json!([
            {"node_id": "hard", "parent_id": "root", "action": {"title": "h", "score_0_to_1": 0.99, "difficulty_1_to_5": 5}},
            {"node_id": "b", "parent_id": "root", "overall_rating_0_to_10": 9, "action": {"title": "b", "score_0_to_1": 0.7, "difficulty_1_to_5": 3}},
            {"node_id": "a", "parent_id": "root", "overall_rating_0_to_10": 2, "action": {"title": "a", "score_0_to_1": 0.7, "difficulty_1_to_5": 2}},
            {"node_id": "c", "parent_id": "root", "overall_rating_0_to_10": 9, "action": {"title": "c", "score_0_to_1": 0.7, "difficulty_1_to_5": 2}},
        ]));
        let cfg = SelectConfig::default();
        // Score ties at 0.7: the easier first (a, c at 2), then the higher rating (c).
        assert_eq!(select_ksearch(&w, &cfg).as_deref(), Some("c"));
        let mut only_hard = w.clone();
        for id in ["a", "b", "c"] {
            only_hard.nodes.remove(id);
        }
        assert_eq!(select_ksearch(&only_hard, &cfg).as_deref(), Some("hard"));
        // A kept too-hard node (status open) stays selectable; a retired one does not.
        let mut kept = only_hard.clone();
        kept.nodes.get_mut("hard").unwrap().status = Status::TooHard;
        assert_eq!(select_ksearch(&kept, &cfg), None);
    }

    #[test]
    fn a_faster_parent_makes_its_children_more_attractive() {
        let mut w = wm(json!([
            {"node_id": "fast", "parent_id": "root", "action": {"title": "f"}},
            {"node_id": "slow", "parent_id": "root", "action": {"title": "s"}},
            {"node_id": "f1", "parent_id": "fast", "action": {"title": "f1", "score_0_to_1": 0.6}},
            {"node_id": "s1", "parent_id": "slow", "action": {"title": "s1", "score_0_to_1": 0.6}},
        ]));
        for (id, cost) in [("fast", 1.0), ("slow", 4.0)] {
            solve(&mut w, id, cost, 0);
        }
        assert_eq!(
            select(&w, Some(8.0), &SelectConfig::default()).as_deref(),
            Some("f1")
        );
    }
}
