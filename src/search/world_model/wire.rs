//! The JSON boundary of the world model. LLM replies use K-Search's field names
//! (`node_id`, `parent_id`, `action.score_0_to_1`, `overall_rating_0_to_10`, …); they are read leniently
//! (numbers as strings, missing fields defaulted, values clamped to their ranges) into typed values, and
//! nothing past this module sees JSON.

use super::ops::EditOp;
use super::tree::{Action, Impact, Impacts, Node, ROOT, Status, WorldModel};
use serde_json::{Map, Value, json};

/// A node as the LLM describes it (before it gets an id and a place in the tree).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpec {
    pub id: Option<String>,
    pub parent: Option<String>,
    pub decision: String,
    pub choice: String,
    pub action: Option<Action>,
    pub impacts: Impacts,
    pub rating: f64,
    pub confidence: f64,
    pub notes: String,
}

/// Fields an `update` may change; `None` leaves the field as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Patch {
    pub decision: Option<String>,
    pub choice: Option<String>,
    pub title: Option<String>,
    pub description: Option<String>,
    pub difficulty: Option<u8>,
    pub priority: Option<f64>,
    pub expected_gain: Option<Option<f64>>,
    pub rating: Option<f64>,
    pub confidence: Option<f64>,
    pub notes: Option<String>,
    pub impacts: Option<Impacts>,
}

fn num(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().trim_end_matches('x').parse().ok(),
        _ => None,
    }
    .filter(|x: &f64| x.is_finite())
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        Value::Array(a) => Some(a.iter().filter_map(text).collect::<Vec<_>>().join("\n")),
        other => Some(other.to_string()),
    }
}

fn field<'a>(o: &'a Map<String, Value>, names: &[&str]) -> Option<&'a Value> {
    names
        .iter()
        .find_map(|n| o.get(*n))
        .filter(|v| !v.is_null())
}

fn clamp(x: f64, lo: f64, hi: f64) -> f64 {
    x.clamp(lo, hi)
}

fn parse_impact(v: Option<&Value>) -> Impact {
    let Some(Value::Object(o)) = v else {
        return Impact::default();
    };
    Impact {
        rating: field(o, &["rating_0_to_10", "rating"])
            .and_then(num)
            .map_or(0.0, |x| clamp(x, 0.0, 10.0)),
        risk: field(o, &["risk"]).and_then(text).unwrap_or_default(),
        notes: field(o, &["notes", "hw_notes"])
            .and_then(text)
            .unwrap_or_default(),
    }
}

fn parse_impacts(v: Option<&Value>) -> Option<Impacts> {
    let Some(Value::Object(o)) = v else {
        return None;
    };
    Some(Impacts {
        memory_bandwidth: parse_impact(o.get("memory_bandwidth")),
        register_pressure: parse_impact(o.get("register_pressure")),
        compute: parse_impact(field(o, &["compute_intensity_and_hw_fit", "compute"])),
    })
}

fn parse_difficulty(v: &Value) -> Option<u8> {
    num(v).map(|d| clamp(d.round(), 1.0, 5.0) as u8)
}

fn parse_action(v: Option<&Value>, rating: f64) -> Option<Action> {
    let Some(Value::Object(o)) = v else {
        return None;
    };
    let title = field(o, &["title", "name"])
        .and_then(text)
        .unwrap_or_default();
    if title.trim().is_empty() {
        return None;
    }
    Some(Action {
        title: title.trim().to_string(),
        description: field(o, &["description"])
            .and_then(text)
            .unwrap_or_default(),
        difficulty: field(o, &["difficulty_1_to_5", "difficulty"])
            .and_then(parse_difficulty)
            .unwrap_or(3),
        // K-Search: a missing score defaults to the node's rating / 10.
        priority: field(o, &["score_0_to_1", "priority", "score"])
            .and_then(num)
            .map_or(rating / 10.0, |x| clamp(x, 0.0, 1.0)),
        expected_gain: field(o, &["expected_vs_baseline_factor", "expected_gain"])
            .and_then(num)
            .filter(|x| *x > 0.0),
        rationale: field(o, &["rationale"]).and_then(text).unwrap_or_default(),
    })
}

pub fn parse_node(v: &Value) -> Result<NodeSpec, String> {
    let Value::Object(o) = v else {
        return Err(format!("a node must be a JSON object, got `{}`", short(v)));
    };
    let rating = field(o, &["overall_rating_0_to_10", "rating"])
        .and_then(num)
        .map_or(5.0, |x| clamp(x, 0.0, 10.0));
    Ok(NodeSpec {
        id: field(o, &["node_id", "id"])
            .and_then(text)
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty()),
        parent: field(o, &["parent_id", "parent"])
            .and_then(text)
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty()),
        decision: field(o, &["decision"]).and_then(text).unwrap_or_default(),
        choice: field(o, &["choice"]).and_then(text).unwrap_or_default(),
        action: parse_action(o.get("action"), rating),
        impacts: parse_impacts(o.get("impacts")).unwrap_or_default(),
        rating,
        confidence: field(o, &["confidence_0_to_1", "confidence"])
            .and_then(num)
            .map_or(0.5, |x| clamp(x, 0.0, 1.0)),
        notes: field(o, &["notes"]).and_then(text).unwrap_or_default(),
    })
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        format!("{}…", &s[..s.floor_char_boundary(80)])
    } else {
        s
    }
}

/// The initial world model reply: `{kernel_summary, open_questions, decision_tree: {nodes: [...]}}`.
pub struct InitReply {
    pub summary: String,
    pub questions: Vec<String>,
    pub nodes: Vec<NodeSpec>,
}

pub fn parse_init(v: &Value) -> Result<InitReply, String> {
    let Value::Object(o) = v else {
        return Err("the reply must be one JSON object with kernel_summary, open_questions and decision_tree.nodes".into());
    };
    let nodes_v = o
        .get("decision_tree")
        .and_then(|t| t.get("nodes"))
        .or_else(|| o.get("nodes"))
        .ok_or("missing `decision_tree.nodes`: list the tree's nodes, each with node_id, parent_id, decision, choice and an action")?;
    let Value::Array(list) = nodes_v else {
        return Err("`decision_tree.nodes` must be a list of node objects".into());
    };
    let mut nodes = Vec::new();
    for (i, n) in list.iter().enumerate() {
        let spec = parse_node(n).map_err(|e| format!("decision_tree.nodes[{i}]: {e}"))?;
        if spec.id.as_deref() == Some(ROOT) || (spec.parent.is_none() && spec.action.is_none()) {
            continue; // the root is ours
        }
        nodes.push(spec);
    }
    if !nodes.iter().any(|n| n.action.is_some()) {
        return Err("the tree has no open action: give at least three nodes with an `action` {title, description, difficulty_1_to_5, score_0_to_1}".into());
    }
    Ok(InitReply {
        summary: o.get("kernel_summary").and_then(text).unwrap_or_default(),
        questions: match o.get("open_questions") {
            Some(Value::Array(a)) => a.iter().filter_map(text).take(8).collect(),
            _ => Vec::new(),
        },
        nodes,
    })
}

fn parse_patch(v: &Value) -> Result<Patch, String> {
    let Value::Object(o) = v else {
        return Err(format!("`patch` must be an object, got `{}`", short(v)));
    };
    let action = match o.get("action") {
        Some(Value::Object(a)) => Some(a),
        _ => None,
    };
    let af = |names: &[&str]| action.and_then(|a| field(a, names));
    Ok(Patch {
        decision: field(o, &["decision"]).and_then(text),
        choice: field(o, &["choice"]).and_then(text),
        title: af(&["title"]).and_then(text),
        description: af(&["description"]).and_then(text),
        difficulty: af(&["difficulty_1_to_5", "difficulty"]).and_then(parse_difficulty),
        priority: af(&["score_0_to_1", "priority", "score"])
            .and_then(num)
            .map(|x| clamp(x, 0.0, 1.0)),
        expected_gain: af(&["expected_vs_baseline_factor", "expected_gain"])
            .map(|v| num(v).filter(|x| *x > 0.0)),
        rating: field(o, &["overall_rating_0_to_10", "rating"])
            .and_then(num)
            .map(|x| clamp(x, 0.0, 10.0)),
        confidence: field(o, &["confidence_0_to_1", "confidence"])
            .and_then(num)
            .map(|x| clamp(x, 0.0, 1.0)),
        notes: field(o, &["notes"]).and_then(text),
        impacts: parse_impacts(o.get("impacts")),
    })
}

/// An edit reply: `{ops: [...]}`; each op names its kind in `op`.
pub fn parse_ops(v: &Value) -> Result<Vec<EditOp>, String> {
    let ops = v
        .get("ops")
        .or_else(|| v.get("operations"))
        .ok_or("missing `ops`: the reply must be {\"ops\": [...]}")?;
    let Value::Array(list) = ops else {
        return Err("`ops` must be a list".into());
    };
    let mut out = Vec::new();
    for (i, op) in list.iter().enumerate() {
        let Value::Object(o) = op else {
            return Err(format!("ops[{i}] must be an object"));
        };
        let kind = o
            .get("op")
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim()
            .to_lowercase();
        let id = || -> Result<String, String> {
            field(o, &["node_id", "id"])
                .and_then(text)
                .ok_or(format!("ops[{i}] ({kind}) needs `node_id`"))
        };
        out.push(match kind.trim_end_matches("_node") {
            "update" => EditOp::Update {
                id: id()?,
                patch: parse_patch(o.get("patch").unwrap_or(&Value::Object(o.clone()))).map_err(|e| format!("ops[{i}]: {e}"))?,
            },
            "insert" => {
                let node = o.get("node").ok_or(format!("ops[{i}] (insert) needs `node`"))?;
                let mut spec = parse_node(node).map_err(|e| format!("ops[{i}]: {e}"))?;
                if let Some(p) = field(o, &["parent_id", "parent"]).and_then(text) {
                    spec.parent = Some(p);
                }
                let parent = spec.parent.clone().ok_or(format!("ops[{i}] (insert) needs `parent_id`"))?;
                EditOp::Insert { parent, node: spec }
            }
            "split" => {
                let Some(Value::Array(parts)) = field(o, &["into", "children", "nodes"]) else {
                    return Err(format!("ops[{i}] (split) needs `into`: a list of 2 or 3 node objects"));
                };
                let into = parts.iter().map(parse_node).collect::<Result<Vec<_>, _>>().map_err(|e| format!("ops[{i}]: {e}"))?;
                EditOp::Split { id: id()?, into }
            }
            "delete" | "prune" => EditOp::Delete { id: id()? },
            other => {
                return Err(format!(
                    "ops[{i}]: unknown op `{other}`; use update_node, insert_node, split_node or delete_node"
                ));
            }
        });
    }
    Ok(out)
}

fn impact_json(i: &Impact) -> Value {
    json!({"rating_0_to_10": i.rating, "risk": i.risk, "notes": i.notes})
}

/// A node in K-Search's field names (for prompts and `show --tree --json`).
pub fn node_json(n: &Node, wm: &WorldModel) -> Value {
    json!({
        "node_id": n.id,
        "parent_id": n.parent,
        "depth": wm.depth(&n.id),
        "status": n.status,
        "frontier": n.is_open() && wm.parent_ready(n),
        "decision": n.decision,
        "choice": n.choice,
        "action": n.action.as_ref().map(|a| json!({
            "title": a.title, "description": a.description, "difficulty_1_to_5": a.difficulty,
            "score_0_to_1": a.priority, "expected_vs_baseline_factor": a.expected_gain, "rationale": a.rationale,
        })),
        "solution": n.solution.as_ref().map(|s| json!({"candidate": s.candidate, "cost_s": s.cost_s, "round": s.round})),
        "impacts": {
            "memory_bandwidth": impact_json(&n.impacts.memory_bandwidth),
            "register_pressure": impact_json(&n.impacts.register_pressure),
            "compute_intensity_and_hw_fit": impact_json(&n.impacts.compute),
        },
        "overall_rating_0_to_10": n.rating,
        "confidence_0_to_1": n.confidence,
        "cycles": n.cycles,
        "notes": n.notes,
    })
}

pub fn tree_json(wm: &WorldModel) -> Value {
    json!({
        "kernel_summary": wm.kernel_summary,
        "open_questions": wm.open_questions,
        "nodes": wm.nodes.values().map(|n| node_json(n, wm)).collect::<Vec<_>>(),
    })
}

/// The tree as the LLM sees it in prompts: every node but with notes cut short, so the prompt stays
/// bounded as the tree grows (K-Search projects onto the active path for the same reason).
pub fn prompt_json(wm: &WorldModel, max_notes: usize) -> String {
    let nodes: Vec<Value> = wm
        .nodes
        .values()
        .map(|n| {
            let mut v = node_json(n, wm);
            if let Some(notes) = v.get_mut("notes") {
                let s = n.notes.as_str();
                *notes = json!(if s.len() > max_notes {
                    format!("{}…", &s[..s.floor_char_boundary(max_notes)])
                } else {
                    s.to_string()
                });
            }
            v.as_object_mut().map(|o| o.remove("impacts"));
            v
        })
        .collect();
    serde_json::to_string_pretty(&json!({"kernel_summary": wm.kernel_summary, "open_questions": wm.open_questions, "nodes": nodes}))
        .expect("json")
}

/// One node in a line of text: id, its action or choice, its state and what it measured.
fn node_line(n: &Node) -> String {
    let what = n
        .action
        .as_ref()
        .map(|a| format!("\"{}\"", a.title))
        .unwrap_or_else(|| {
            if n.choice.is_empty() {
                "(no action)".into()
            } else {
                n.choice.clone()
            }
        });
    let state = match (&n.status, &n.solution) {
        (_, Some(s)) => format!(
            "solved by {} ({}, round {})",
            s.candidate,
            crate::units::fmt_time(Some(s.cost_s)),
            s.round
        ),
        (Status::TooHard, None) => "too hard (never passed)".into(),
        _ => match &n.action {
            Some(a) => format!(
                "open: score {:.2}, difficulty {}/5, rating {:.1}/10",
                a.priority, a.difficulty, n.rating
            ),
            None => "decision".into(),
        },
    };
    format!("`{}` {what}: {state}", n.id)
}

fn short_notes(notes: &str, max: usize) -> String {
    let one = notes.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.len() > max {
        format!("{}…", &one[..one.floor_char_boundary(max)])
    } else {
        one
    }
}

/// What an action prompt shows of the tree (K-Search projects onto the active path): the kernel summary,
/// the path from the root to the node with each step's measurement and notes, and the node's siblings
/// with their states, so the model knows what was tried beside it. Smaller than the whole tree, which
/// the tree-editing prompts keep.
pub fn path_view(wm: &WorldModel, id: &str) -> String {
    let mut out = format!("Kernel summary: {}\n", wm.kernel_summary);
    out.push_str("Path from the root (the starting candidate) to this action:\n");
    let path = wm.path(id);
    for (depth, n) in path.iter().enumerate() {
        let here = if n.id == id { "  ← this action" } else { "" };
        out.push_str(&format!("{}- {}{here}\n", "  ".repeat(depth), node_line(n)));
        if !n.notes.is_empty() && n.id != id {
            out.push_str(&format!(
                "{}  notes: {}\n",
                "  ".repeat(depth),
                short_notes(&n.notes, 300)
            ));
        }
    }
    let parent = wm.get(id).and_then(|n| n.parent.clone());
    let siblings: Vec<&Node> = parent
        .as_deref()
        .map(|p| wm.children(p).filter(|c| c.id != id).collect())
        .unwrap_or_default();
    if !siblings.is_empty() {
        out.push_str("Alternatives beside it (its siblings):\n");
        for s in siblings {
            out.push_str(&format!("- {}\n", node_line(s)));
        }
    }
    out
}

impl NodeSpec {
    /// Turns a spec into a node under `parent` with id `id`.
    pub fn into_node(self, id: String, parent: String, round: u32) -> Node {
        Node {
            id,
            parent: Some(parent),
            decision: self.decision,
            choice: self.choice,
            action: self.action,
            solution: None,
            impacts: self.impacts,
            rating: self.rating,
            confidence: self.confidence,
            notes: self.notes,
            status: Status::Open,
            cycles: 0,
            updated_round: round,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_read_leniently_and_clamped() {
        let v = json!({"node_id": " n1 ", "parent_id": "root", "decision": "tiling", "choice": "64x64",
            "action": {"title": "Tile C", "difficulty_1_to_5": "9", "score_0_to_1": 1.7, "expected_vs_baseline_factor": "1.5x"},
            "overall_rating_0_to_10": -3, "confidence_0_to_1": "0.25"});
        let n = parse_node(&v).unwrap();
        assert_eq!(n.id.as_deref(), Some("n1"));
        let a = n.action.unwrap();
        assert_eq!(a.difficulty, 5);
        assert_eq!(a.priority, 1.0);
        assert_eq!(a.expected_gain, Some(1.5));
        assert_eq!(n.rating, 0.0);
        assert_eq!(n.confidence, 0.25);
        // A missing score falls back to rating / 10, as in K-Search.
        let n =
            parse_node(&json!({"action": {"title": "x"}, "overall_rating_0_to_10": 7})).unwrap();
        assert!((n.action.unwrap().priority - 0.7).abs() < 1e-12);
        // An action without a title is no action.
        assert!(
            parse_node(&json!({"action": {"title": "  "}}))
                .unwrap()
                .action
                .is_none()
        );
    }

    #[test]
    fn init_requires_an_open_action() {
        let err = parse_init(&json!({"decision_tree": {"nodes": [{"node_id": "root"}]}}))
            .err()
            .unwrap();
        assert!(err.contains("no open action"), "{err}");
        let ok = parse_init(&json!({"kernel_summary": "k", "open_questions": ["q"],
            "decision_tree": {"nodes": [{"node_id": "root", "parent_id": null}, {"node_id": "a", "parent_id": "root", "action": {"title": "t"}}]}}))
        .unwrap();
        assert_eq!(ok.nodes.len(), 1);
        assert_eq!(ok.summary, "k");
    }

    #[test]
    fn ops_of_every_kind_parse_and_unknown_ones_are_named() {
        let ops = parse_ops(&json!({"ops": [
            {"op": "update_node", "node_id": "a", "patch": {"overall_rating_0_to_10": 7, "action": {"score_0_to_1": 0.4}}},
            {"op": "insert_node", "parent_id": "a", "node": {"decision": "d", "action": {"title": "t"}}},
            {"op": "split_node", "node_id": "b", "into": [{"action": {"title": "b1"}}, {"action": {"title": "b2"}}]},
            {"op": "delete_node", "node_id": "c"},
        ]}))
        .unwrap();
        assert_eq!(ops.len(), 4);
        match &ops[0] {
            EditOp::Update { id, patch } => {
                assert_eq!(id, "a");
                assert_eq!(patch.rating, Some(7.0));
                assert_eq!(patch.priority, Some(0.4));
                assert_eq!(patch.title, None);
            }
            other => panic!("{other:?}"),
        }
        let err = parse_ops(&json!({"ops": [{"op": "rename", "node_id": "a"}]})).unwrap_err();
        assert!(err.contains("unknown op `rename`"), "{err}");
        assert!(
            parse_ops(&json!({"ops": [{"op": "insert_node", "node": {}}]}))
                .unwrap_err()
                .contains("parent_id")
        );
        assert!(
            parse_ops(&json!({"nope": 1}))
                .unwrap_err()
                .contains("missing `ops`")
        );
    }
}
