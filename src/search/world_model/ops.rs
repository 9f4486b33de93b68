//! Edits the LLM may make to the world model, applied and validated here. A batch is applied to a copy;
//! if any rule fails, the tree is left untouched and the errors go back to the LLM verbatim.

use super::tree::{ROOT, Status, WorldModel};
use super::wire::{NodeSpec, Patch};

/// At most this many new nodes per edit (K-Search's `max_new_nodes_per_edit`).
pub const MAX_NEW_NODES: usize = 3;

#[derive(Debug, Clone, PartialEq)]
pub enum EditOp {
    Update {
        id: String,
        patch: Patch,
    },
    Insert {
        parent: String,
        node: NodeSpec,
    },
    /// Replaces an open action by 2–3 more specific alternatives under it.
    Split {
        id: String,
        into: Vec<NodeSpec>,
    },
    Delete {
        id: String,
    },
}

/// What the edit must leave true besides the structural rules.
#[derive(Debug, Clone, Default)]
pub struct Requirements {
    /// A node solved this cycle must keep at least one open follow-up child.
    pub solved: Option<String>,
    /// The frontier must hold an action with priority above 0.5.
    pub promising_frontier: bool,
    /// The follow-up under `solved` must be at most this hard (K-Search's continuation rule: below 5).
    pub follow_up_max_difficulty: Option<u8>,
    /// A `propose` edit made for this many cycles starting at once (`--parallel`): it may add as many new
    /// nodes, when that is more than `MAX_NEW_NODES`, so that one edit can give every cycle its action.
    pub new_actions: usize,
}

impl Requirements {
    /// The most new nodes one edit may add.
    pub fn max_new_nodes(&self) -> usize {
        MAX_NEW_NODES.max(self.new_actions)
    }
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct ApplyReport {
    pub inserted: Vec<String>,
    pub updated: Vec<String>,
    pub deleted: Vec<String>,
}

/// Applies `ops` to a copy of `wm`; on success replaces `wm` and reports what changed.
pub fn apply(
    wm: &mut WorldModel,
    ops: &[EditOp],
    req: &Requirements,
    round: u32,
) -> Result<ApplyReport, Vec<String>> {
    let mut next = wm.clone();
    let mut errors = Vec::new();
    let mut report = ApplyReport::default();
    let new_nodes: usize = ops
        .iter()
        .map(|op| match op {
            EditOp::Insert { .. } => 1,
            EditOp::Split { into, .. } => into.len(),
            _ => 0,
        })
        .sum();
    let cap = req.max_new_nodes();
    if new_nodes > cap {
        errors.push(format!(
            "the edit adds {new_nodes} nodes; at most {cap} new nodes per edit"
        ));
    }
    for (i, op) in ops.iter().enumerate() {
        if let Err(e) = apply_one(&mut next, op, round, &mut report) {
            errors.push(format!("ops[{i}]: {e}"));
        }
    }
    errors.extend(unmet(&next, req));
    if errors.is_empty() {
        *wm = next;
        Ok(report)
    } else {
        Err(errors)
    }
}

/// K-Search's way: each op that applies is kept (the tree accumulates them across tries), the ones that
/// do not and the new nodes beyond the cap (`new_nodes` counts them across the tries of one edit) are
/// skipped. Returns the skipped ops' errors and the requirements still unmet, for the next try's
/// validation-failed block; the edit is done when nothing is unmet.
pub fn apply_cumulative(
    wm: &mut WorldModel,
    ops: &[EditOp],
    req: &Requirements,
    round: u32,
    new_nodes: &mut usize,
) -> (Vec<String>, Vec<String>) {
    let mut errors = Vec::new();
    let mut report = ApplyReport::default();
    for (i, op) in ops.iter().enumerate() {
        let adds = match op {
            EditOp::Insert { .. } => 1,
            EditOp::Split { into, .. } => into.len(),
            _ => 0,
        };
        if *new_nodes + adds > req.max_new_nodes() {
            errors.push(format!(
                "ops[{i}]: skipped, it would exceed {} new nodes per edit",
                req.max_new_nodes()
            ));
            continue;
        }
        let mut next = wm.clone();
        match apply_one(&mut next, op, round, &mut report).and_then(|()| next.check()) {
            Ok(()) => {
                *wm = next;
                *new_nodes += adds;
            }
            Err(e) => errors.push(format!("ops[{i}]: skipped: {e}")),
        }
    }
    (errors, unmet(wm, req))
}

/// The requirements `wm` does not meet, each as an error for the LLM.
fn unmet(wm: &WorldModel, req: &Requirements) -> Vec<String> {
    let mut errors = Vec::new();
    if let Some(solved) = &req.solved
        && wm.get(solved).is_some()
        && !wm.children(solved).any(|c| {
            c.is_open()
                && c.action
                    .as_ref()
                    .is_some_and(|a| a.difficulty <= req.follow_up_max_difficulty.unwrap_or(5))
        })
    {
        errors.push(match req.follow_up_max_difficulty {
            Some(d) => format!(
                "node `{solved}` was just solved: keep at least one open follow-up child under it with difficulty_1_to_5 at most {d} (insert_node with parent_id \"{solved}\")"
            ),
            None => format!(
                "node `{solved}` was just solved: keep at least one open follow-up child under it (insert_node with parent_id \"{solved}\")"
            ),
        });
    }
    if req.promising_frontier
        && !wm
            .frontier()
            .iter()
            .any(|n| n.action.as_ref().is_some_and(|a| a.priority > 0.5))
    {
        errors.push("the frontier needs at least one open action with score_0_to_1 > 0.5 whose parent is solved or the root".into());
    }
    if let Err(e) = wm.check() {
        errors.push(e);
    }
    errors
}

fn apply_one(
    wm: &mut WorldModel,
    op: &EditOp,
    round: u32,
    report: &mut ApplyReport,
) -> Result<(), String> {
    match op {
        EditOp::Update { id, patch } => update(wm, id, patch, round, report),
        EditOp::Insert { parent, node } => insert(wm, parent, node, round, report),
        EditOp::Split { id, into } => split(wm, id, into, round, report),
        EditOp::Delete { id } => delete(wm, id, report),
    }
}

/// A node's fields changed; its action's only where it has one (the root has none).
fn update(
    wm: &mut WorldModel,
    id: &String,
    patch: &Patch,
    round: u32,
    report: &mut ApplyReport,
) -> Result<(), String> {
    let node = wm
        .nodes
        .get_mut(id)
        .ok_or_else(|| format!("update: no node `{id}`"))?;
    if id == ROOT && (patch.title.is_some() || patch.description.is_some()) {
        return Err("update: the root has no action".into());
    }
    let p = patch.clone();
    if let Some(v) = p.decision {
        node.decision = v;
    }
    if let Some(v) = p.choice {
        node.choice = v;
    }
    if let Some(v) = p.rating {
        node.rating = v;
    }
    if let Some(v) = p.confidence {
        node.confidence = v;
    }
    if let Some(v) = p.notes {
        node.notes = v;
    }
    if let Some(v) = p.impacts {
        node.impacts = v;
    }
    let touches_action = p.title.is_some()
        || p.description.is_some()
        || p.difficulty.is_some()
        || p.priority.is_some()
        || p.expected_gain.is_some();
    if touches_action {
        let a = node.action.as_mut().ok_or_else(|| {
            format!("update: node `{id}` has no action; insert a child with one instead")
        })?;
        if let Some(v) = p.title {
            a.title = v;
        }
        if let Some(v) = p.description {
            a.description = v;
        }
        if let Some(v) = p.difficulty {
            a.difficulty = v;
        }
        if let Some(v) = p.priority {
            a.priority = v;
        }
        if let Some(v) = p.expected_gain {
            a.expected_gain = v;
        }
    }
    node.updated_round = round;
    report.updated.push(id.clone());
    Ok(())
}

/// A new node with an action under an existing one.
fn insert(
    wm: &mut WorldModel,
    parent: &String,
    node: &NodeSpec,
    round: u32,
    report: &mut ApplyReport,
) -> Result<(), String> {
    if !wm.nodes.contains_key(parent) {
        return Err(format!("insert: no parent `{parent}`"));
    }
    if node.action.is_none() {
        return Err("insert: a new node needs an `action` with a title".into());
    }
    let id = match &node.id {
        Some(id) if wm.nodes.contains_key(id) => {
            return Err(format!("insert: node id `{id}` already exists"));
        }
        Some(id) if id.len() > 64 || id.is_empty() => {
            return Err("insert: node ids are 1–64 characters".into());
        }
        Some(id) => id.clone(),
        None => wm.fresh_id("n"),
    };
    let n = node.clone().into_node(id.clone(), parent.clone(), round);
    wm.nodes.insert(id.clone(), n);
    report.inserted.push(id);
    Ok(())
}

/// An open leaf replaced by 2 or 3 alternatives under its parent.
fn split(
    wm: &mut WorldModel,
    id: &String,
    into: &[NodeSpec],
    round: u32,
    report: &mut ApplyReport,
) -> Result<(), String> {
    let n = wm
        .nodes
        .get(id)
        .ok_or_else(|| format!("split: no node `{id}`"))?;
    if !n.is_open() {
        return Err(format!("split: node `{id}` is not an open action"));
    }
    if wm.children(id).next().is_some() {
        return Err(format!(
            "split: node `{id}` has children; only an open leaf can be split"
        ));
    }
    if !(2..=3).contains(&into.len()) {
        return Err(format!(
            "split: `into` must hold 2 or 3 nodes, got {}",
            into.len()
        ));
    }
    if into.iter().any(|s| s.action.is_none()) {
        return Err("split: every part needs an `action` with a title".into());
    }
    // The parts replace the node as alternatives under the same parent, so they stay on the frontier.
    let old = wm.nodes.remove(id).expect("checked");
    let parent = old
        .parent
        .clone()
        .expect("only the root has no parent, and it has no action");
    for spec in into {
        let cid = match &spec.id {
            Some(c) if !wm.nodes.contains_key(c) && c != id => c.clone(),
            _ => wm.fresh_id("n"),
        };
        let mut child = spec.clone().into_node(cid.clone(), parent.clone(), round);
        if child.decision.is_empty() {
            child.decision = old.decision.clone();
        }
        wm.nodes.insert(cid.clone(), child);
        report.inserted.push(cid);
    }
    report.deleted.push(id.clone());
    Ok(())
}

/// A subtree removed, unless it holds or leads to a measured candidate.
fn delete(wm: &mut WorldModel, id: &String, report: &mut ApplyReport) -> Result<(), String> {
    if id == ROOT {
        return Err("delete: the root cannot be deleted".into());
    }
    if !wm.nodes.contains_key(id) {
        return Err(format!("delete: no node `{id}`"));
    }
    if wm.has_solution_below(id) {
        return Err(format!(
            "delete: `{id}` holds or leads to a measured candidate; lower its score instead"
        ));
    }
    let mut doomed = vec![id.clone()];
    let mut i = 0;
    while i < doomed.len() {
        let kids: Vec<String> = wm.children(&doomed[i]).map(|c| c.id.clone()).collect();
        doomed.extend(kids);
        i += 1;
    }
    for d in doomed {
        wm.nodes.remove(&d);
        report.deleted.push(d);
    }
    Ok(())
}

/// The deterministic fallback when the LLM cannot produce a valid edit: a follow-up under the solved
/// node (K-Search's "refine best solution") so the search always has somewhere to go.
pub fn fallback(wm: &mut WorldModel, req: &Requirements, round: u32) -> Vec<String> {
    fallback_scored(wm, req, round, 0.6)
}

/// [`fallback`] with the follow-up's priority given (K-Search's refine fallback scores it 0.35).
pub fn fallback_scored(
    wm: &mut WorldModel,
    req: &Requirements,
    round: u32,
    priority: f64,
) -> Vec<String> {
    let mut added = Vec::new();
    let target = req
        .solved
        .clone()
        .or_else(|| wm.best().map(|n| n.id.clone()))
        .unwrap_or_else(|| ROOT.into());
    let max = req.follow_up_max_difficulty.unwrap_or(5);
    let needs_child = !wm
        .children(&target)
        .any(|c| c.is_open() && c.action.as_ref().is_some_and(|a| a.difficulty <= max));
    let needs_promise = req.promising_frontier
        && !wm
            .frontier()
            .iter()
            .any(|n| n.action.as_ref().is_some_and(|a| a.priority > 0.5));
    if needs_child || needs_promise {
        let id = wm.fresh_id("refine");
        let (rating, confidence) = wm
            .get(&target)
            .map_or((5.0, 0.5), |n| (n.rating, n.confidence.max(0.2)));
        let spec = NodeSpec {
            id: None,
            parent: Some(target.clone()),
            decision: "next refinement".into(),
            choice: "target the top bottleneck".into(),
            action: Some(super::tree::Action {
                title: "Refine the best candidate: target its top bottleneck".into(),
                description: "Profile-guided refinement of the current best candidate: pick its largest remaining cost (memory traffic, latency chains, redundant work) and remove it.".into(),
                difficulty: 2,
                priority,
                expected_gain: None,
                rationale: "deterministic fallback after an invalid world-model edit".into(),
            }),
            impacts: Default::default(),
            rating,
            confidence,
            notes: String::new(),
        };
        wm.nodes
            .insert(id.clone(), spec.into_node(id.clone(), target, round));
        added.push(id);
    }
    added
}

/// K-Search's "too hard" edit when the LLM's own edit is unusable: the action is retired, never
/// selected again; its siblings and any smaller actions remain.
pub fn retire(wm: &mut WorldModel, id: &str, round: u32, why: &str) {
    if let Some(n) = wm.nodes.get_mut(id) {
        n.status = Status::TooHard;
        n.updated_round = round;
        if let Some(a) = n.action.as_mut() {
            a.priority = (a.priority * 0.3).min(0.2);
        }
        n.notes = format!("{}\nTOO_HARD (round {round}): {why}", n.notes)
            .trim()
            .to_string();
    }
}

#[cfg(test)]
mod tests {
    use super::super::tree::Solution;
    use super::super::wire::parse_ops;
    use super::*;
    use serde_json::json;

    fn tree() -> WorldModel {
        let mut wm = WorldModel::new("k");
        let ops = parse_ops(&json!({"ops": [
            {"op": "insert_node", "parent_id": "root", "node": {"node_id": "a", "action": {"title": "A", "score_0_to_1": 0.8}}},
            {"op": "insert_node", "parent_id": "root", "node": {"node_id": "b", "action": {"title": "B", "score_0_to_1": 0.4}}},
            {"op": "insert_node", "parent_id": "a", "node": {"node_id": "a1", "action": {"title": "A1"}}},
        ]}))
        .unwrap();
        apply(&mut wm, &ops, &Requirements::default(), 0).unwrap();
        wm
    }

    #[test]
    fn frontier_follows_solutions() {
        let mut wm = tree();
        let ids = |wm: &WorldModel| {
            wm.frontier()
                .iter()
                .map(|n| n.id.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&wm), vec!["a", "b"], "a1's parent is not solved yet");
        let a = wm.nodes.get_mut("a").unwrap();
        a.solution = Some(Solution {
            candidate: "h".into(),
            cost_s: 1.0,
            round: 1,
        });
        a.status = Status::Solved;
        assert_eq!(ids(&wm), vec!["a1", "b"]);
    }

    #[test]
    fn a_failing_batch_leaves_the_tree_untouched() {
        let mut wm = tree();
        let before = wm.clone();
        let ops = parse_ops(&json!({"ops": [
            {"op": "update_node", "node_id": "a", "patch": {"overall_rating_0_to_10": 9}},
            {"op": "delete_node", "node_id": "root"},
        ]}))
        .unwrap();
        let errs = apply(&mut wm, &ops, &Requirements::default(), 1).unwrap_err();
        assert!(
            errs[0].contains("ops[1]") && errs[0].contains("root"),
            "{errs:?}"
        );
        assert_eq!(wm, before);
    }

    #[test]
    fn rules_new_node_cap_solved_follow_up_and_promising_frontier() {
        let mut wm = tree();
        let four = parse_ops(&json!({"ops": (0..4).map(|i| json!({"op": "insert_node", "parent_id": "root", "node": {"action": {"title": format!("x{i}")}}})).collect::<Vec<_>>()})).unwrap();
        let errs = apply(&mut wm, &four, &Requirements::default(), 1).unwrap_err();
        assert!(errs.iter().any(|e| e.contains("at most 3")), "{errs:?}");
        // An edit for four cycles starting at once (`--parallel 4`) may give each its action.
        let for_four = Requirements {
            new_actions: 4,
            ..Default::default()
        };
        assert!(apply(&mut wm.clone(), &four, &for_four, 1).is_ok());
        let five = parse_ops(&json!({"ops": (0..5).map(|i| json!({"op": "insert_node", "parent_id": "root", "node": {"action": {"title": format!("y{i}")}}})).collect::<Vec<_>>()})).unwrap();
        let errs = apply(&mut wm.clone(), &five, &for_four, 1).unwrap_err();
        assert!(errs.iter().any(|e| e.contains("at most 4")), "{errs:?}");

        let a = wm.nodes.get_mut("a").unwrap();
        a.solution = Some(Solution {
            candidate: "h".into(),
            cost_s: 1.0,
            round: 1,
        });
        a.status = Status::Solved;
        let req = Requirements {
            solved: Some("a".into()),
            promising_frontier: true,
            ..Default::default()
        };
        let del = parse_ops(&json!({"ops": [{"op": "delete_node", "node_id": "a1"}]})).unwrap();
        let errs = apply(&mut wm, &del, &req, 1).unwrap_err();
        assert!(errs.iter().any(|e| e.contains("follow-up")), "{errs:?}");
        assert!(
            errs.iter().any(|e| e.contains("score_0_to_1 > 0.5")),
            "{errs:?}"
        );
        // Solved subtrees are never deleted.
        let del_a = parse_ops(&json!({"ops": [{"op": "delete_node", "node_id": "a"}]})).unwrap();
        assert!(
            apply(&mut wm, &del_a, &Requirements::default(), 1).unwrap_err()[0]
                .contains("measured")
        );
        // The fallback always restores both requirements.
        let mut wm2 = wm.clone();
        wm2.nodes.remove("a1");
        let added = fallback(&mut wm2, &req, 2);
        assert_eq!(added.len(), 1);
        assert!(apply(&mut wm2, &[], &req, 2).is_ok());
    }

    #[test]
    fn cumulative_edits_keep_what_applies_and_name_what_did_not() {
        let mut wm = tree();
        wm.nodes.get_mut("b").unwrap().solution = Some(Solution {
            candidate: "cb".into(),
            cost_s: 1.0,
            round: 1,
        });
        wm.nodes.get_mut("b").unwrap().status = Status::Solved;
        let req = Requirements {
            solved: Some("b".into()),
            follow_up_max_difficulty: Some(4),
            ..Default::default()
        };
        // One good update, one op on a missing node, and a follow-up too hard for the continuation rule.
        let ops = parse_ops(&json!({"ops": [
            {"op": "update_node", "node_id": "b", "patch": {"notes": "CURRENT: kept"}},
            {"op": "update_node", "node_id": "ghost", "patch": {"notes": "x"}},
            {"op": "insert_node", "parent_id": "b", "node": {"node_id": "b_hard", "action": {"title": "t", "difficulty_1_to_5": 5}}},
        ]}))
        .unwrap();
        let mut added = 0;
        let (skipped, unmet) = apply_cumulative(&mut wm, &ops, &req, 2, &mut added);
        assert_eq!(
            wm.get("b").unwrap().notes,
            "CURRENT: kept",
            "the good op stays"
        );
        assert!(wm.get("b_hard").is_some(), "applied ops accumulate");
        assert!(skipped.iter().any(|e| e.contains("ops[1]")), "{skipped:?}");
        assert!(unmet.iter().any(|e| e.contains("at most 4")), "{unmet:?}");
        // The fallback honours the continuation rule: the too-hard child does not count.
        let mut fb = wm.clone();
        assert_eq!(fallback_scored(&mut fb, &req, 2, 0.35).len(), 1);
        // The next try adds an easier follow-up: nothing is left to complain about.
        let ops = parse_ops(&json!({"ops": [
            {"op": "insert_node", "parent_id": "b", "node": {"node_id": "b_next", "action": {"title": "t", "difficulty_1_to_5": 2}}},
        ]}))
        .unwrap();
        let (_, unmet) = apply_cumulative(&mut wm, &ops, &req, 2, &mut added);
        assert_eq!(unmet, Vec::<String>::new());
        assert_eq!(added, 2, "new nodes counted across the tries of one edit");
        assert!(wm.get("b_hard").is_some() && wm.get("b_next").is_some());
    }

    #[test]
    fn split_and_delete() {
        let mut wm = tree();
        let ops = parse_ops(&json!({"ops": [
            {"op": "split_node", "node_id": "b", "into": [{"action": {"title": "B1"}}, {"action": {"title": "B2"}}]},
            {"op": "delete_node", "node_id": "a"},
        ]}))
        .unwrap();
        let rep = apply(&mut wm, &ops, &Requirements::default(), 3).unwrap();
        assert_eq!(rep.deleted, vec!["b", "a", "a1"]);
        assert!(wm.get("b").is_none());
        assert_eq!(wm.children("root").count(), 2);
        assert_eq!(
            wm.frontier().len(),
            2,
            "the parts replace b on the frontier"
        );
        // Only an open leaf can be split.
        let mut wm = tree();
        let ops = parse_ops(&json!({"ops": [{"op": "split_node", "node_id": "a", "into": [{"action": {"title": "x"}}, {"action": {"title": "y"}}]}]})).unwrap();
        assert!(
            apply(&mut wm, &ops, &Requirements::default(), 3).unwrap_err()[0].contains("children")
        );
    }
}
