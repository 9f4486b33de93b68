//! What a run is doing right now: the phase of the evaluation in flight (compiling, preparing a workload,
//! checking, timing) or of the LLM call (waiting for a reply, a retry), for the progress line and for `--json`
//! phase events (`docs/formats.md` §6). The command line sets a sink for the length of a run; the evaluator,
//! the worker's stderr reader and the LLM client report to it as they go, from any thread, each phase in its
//! **slot**: what the reporting thread works for (a device of the run, an LLM lane, `llm` for the run's own
//! calls), so that with `--parallel` and `--devices` every slot's phase can be shown at once. Observation only:
//! nothing decides on a phase (the worker's phases come from a stderr candidate code shares, so they inform a
//! person, never the search).

use serde_json::{Value, json};
use std::cell::RefCell;
use std::sync::RwLock;

thread_local! {
    /// The slot this thread reports in (a device's thread sets it); empty: derived from the phase.
    static SLOT: RefCell<String> = const { RefCell::new(String::new()) };
}

/// The slot of the queue of proposals waiting for a device.
pub const QUEUE: &str = "queue";

/// `, lane NAME` for a call made in a lane, else nothing.
fn in_lane(lane: &str) -> String {
    if lane.is_empty() {
        String::new()
    } else {
        format!(", lane {lane}")
    }
}

/// The event with its `lane`, when the call was made in one.
fn with_lane(mut v: Value, lane: &str) -> Value {
    if !lane.is_empty() {
        v["lane"] = json!(lane);
    }
    v
}

/// One phase of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    /// Waiting for the LLM's reply to a call made for `purpose` (`attempt` 2 and on are retries), by
    /// `lane` when several calls are in flight (`--parallel`; empty otherwise).
    Llm {
        purpose: String,
        attempt: u32,
        lane: String,
    },
    /// An LLM call failed and is retried after `wait_s`.
    LlmRetry {
        purpose: String,
        attempt: u32,
        wait_s: f64,
        lane: String,
    },
    /// Compiling a candidate (its short hash).
    Compiling { candidate: String },
    /// The run's own work for a workload (references, timing supply, baselines), once per run.
    Preparing { workload: String },
    /// Evaluating a candidate on workload `index` (from 1) of `count`.
    Evaluating {
        candidate: String,
        workload: String,
        index: usize,
        count: usize,
    },
    /// A step inside the worker's evaluation of a workload: `checking`, `timing` or `rechecking`.
    Worker { step: String, workload: String },
    /// Proposals waiting for a device (`count` may be 0: none left).
    Queued { count: usize },
    /// Nothing in flight in this slot: its LLM call answered, its device has no evaluation left.
    Idle,
}

impl Phase {
    /// The phase as people read it, after the run's progress bar.
    pub fn describe(&self) -> String {
        match self {
            Phase::Llm {
                purpose,
                attempt,
                lane,
            } => {
                let retry = if *attempt > 1 {
                    format!(", attempt {attempt}")
                } else {
                    String::new()
                };
                format!("waiting for the LLM ({purpose}{retry}{})", in_lane(lane))
            }
            Phase::LlmRetry {
                purpose,
                attempt,
                wait_s,
                lane,
            } => format!(
                "LLM call ({purpose}{}) failed, retry {attempt} in {wait_s:.1} s",
                in_lane(lane)
            ),
            Phase::Compiling { candidate } => format!("compiling {}", short(candidate)),
            Phase::Preparing { workload } => format!("preparing {workload} (once per run)"),
            Phase::Evaluating {
                candidate,
                workload,
                index,
                count,
            } => format!(
                "evaluating {} on {workload} ({index}/{count})",
                short(candidate)
            ),
            Phase::Worker { step, workload } => format!("{step} {workload}"),
            Phase::Queued { count } => format!("{count} queued for a device"),
            Phase::Idle => "idle".to_string(),
        }
    }

    /// The slot a phase reported from a thread that set none belongs to: an LLM call's lane (`llm` for
    /// the run's own client), else the run.
    pub fn slot(&self) -> String {
        match self {
            Phase::Llm { lane, .. } | Phase::LlmRetry { lane, .. } => llm_slot(lane),
            Phase::Queued { .. } => QUEUE.to_string(),
            _ => "run".to_string(),
        }
    }

    /// The phase as a `--json` progress event's fields.
    pub fn to_json(&self) -> Value {
        match self {
            Phase::Llm {
                purpose,
                attempt,
                lane,
            } => with_lane(
                json!({"phase": "llm", "purpose": purpose, "attempt": attempt}),
                lane,
            ),
            Phase::LlmRetry {
                purpose,
                attempt,
                wait_s,
                lane,
            } => with_lane(
                json!({"phase": "llm_retry", "purpose": purpose, "attempt": attempt, "wait_s": wait_s}),
                lane,
            ),
            Phase::Compiling { candidate } => json!({"phase": "compiling", "candidate": candidate}),
            Phase::Preparing { workload } => json!({"phase": "preparing", "workload": workload}),
            Phase::Evaluating {
                candidate,
                workload,
                index,
                count,
            } => json!({"phase": "evaluating", "candidate": candidate, "workload": workload,
                        "index": index, "count": count}),
            Phase::Worker { step, workload } => json!({"phase": step, "workload": workload}),
            Phase::Queued { count } => json!({"phase": "queued", "count": count}),
            Phase::Idle => json!({"phase": "idle"}),
        }
    }

    /// A phase line the worker writes on its stderr (`ksearch-worker: phase STEP WORKLOAD`), if `line` is
    /// one with a step it has and a plain workload name. Candidate code shares that stderr: anything else
    /// (escape sequences for the terminal, a line of 64 KiB) is not shown.
    pub fn from_worker_line(line: &str) -> Option<Phase> {
        let rest = line.strip_prefix("ksearch-worker: phase ")?;
        let (step, workload) = rest.split_once(' ')?;
        let plain = (1..=64).contains(&workload.len())
            && workload
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
        (plain && matches!(step, "checking" | "timing" | "rechecking")).then(|| Phase::Worker {
            step: step.to_string(),
            workload: workload.to_string(),
        })
    }
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}

/// Where phases go: the slot and the phase.
type Sink = Box<dyn Fn(&str, &Phase) + Send + Sync>;

static SINK: RwLock<Option<Sink>> = RwLock::new(None);

/// Sets where phases go (`None`: nowhere), for the length of a run.
pub fn set_sink(sink: Option<Sink>) {
    *SINK.write().unwrap_or_else(|e| e.into_inner()) = sink;
}

/// The slot of an LLM call made in `lane` (`llm` for the run's own client).
pub fn llm_slot(lane: &str) -> String {
    if lane.is_empty() {
        "llm".to_string()
    } else {
        lane.to_string()
    }
}

/// Names the slot this thread's phases are reported in (empty: derived from each phase).
pub fn set_slot(slot: &str) {
    SLOT.with(|s| *s.borrow_mut() = slot.to_string());
}

/// The slot this thread reports in, if it set one.
pub fn slot() -> String {
    SLOT.with(|s| s.borrow().clone())
}

/// Reports a phase to the sink, if one is set, in this thread's slot.
pub fn report(phase: Phase) {
    report_in(&slot(), phase)
}

/// Reports a phase in `slot` (empty: derived from the phase), as a thread reporting for another does (the
/// worker's stderr reader, for the device whose request it serves).
pub fn report_in(slot: &str, phase: Phase) {
    if let Some(sink) = SINK.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        if slot.is_empty() {
            sink(&phase.slot(), &phase);
        } else {
            sink(slot, &phase);
        }
    }
}

/// Every slot's phase at once, for the progress line: each slot keeps its last phase until it reports
/// `Idle` (or a queue of 0).
#[derive(Debug, Default)]
pub struct Slots {
    phases: std::collections::BTreeMap<String, String>,
}

impl Slots {
    /// Takes a phase; returns the line to show: the one slot's phase alone, else `slot: phase` for each, in
    /// the slots' order (devices, lanes, the queue).
    pub fn update(&mut self, slot: &str, phase: &Phase) -> String {
        match phase {
            Phase::Idle | Phase::Queued { count: 0 } => {
                self.phases.remove(slot);
            }
            _ => {
                self.phases.insert(slot.to_string(), phase.describe());
            }
        }
        match self.phases.len() {
            0 => String::new(),
            1 => self.phases.values().next().cloned().unwrap_or_default(),
            _ => self
                .phases
                .iter()
                .map(|(s, p)| format!("{s}: {p}"))
                .collect::<Vec<_>>()
                .join(" · "),
        }
    }
}

impl Slots {
    /// Each slot and its phase, in the slots' order.
    pub fn entries(&self) -> Vec<(String, String)> {
        self.phases
            .iter()
            .map(|(s, p)| (s.clone(), p.clone()))
            .collect()
    }
}

/// Where a running run keeps its slots' phases for `ksearch serve`: `live/RUN.json` in the store folder.
pub fn live_path(store_dir: &std::path::Path, run_id: &str) -> std::path::PathBuf {
    store_dir.join("live").join(format!("{run_id}.json"))
}

/// A running run's slots' phases, written to `live_path` at every change (a small file replaced whole, so
/// a reader never sees half of one) and removed when the run's progress ends. What the dashboard shows as
/// a run's "now"; the store keeps only what is finished.
pub struct LiveFile {
    path: std::path::PathBuf,
    slots: Slots,
}

impl LiveFile {
    pub fn new(store_dir: &std::path::Path, run_id: &str) -> LiveFile {
        LiveFile {
            path: live_path(store_dir, run_id),
            slots: Slots::default(),
        }
    }

    /// Takes a phase and writes every slot's. Best effort: the file informs a person, and a run never
    /// fails for it.
    pub fn update(&mut self, slot: &str, phase: &Phase) {
        self.slots.update(slot, phase);
        let body = json!({
            "pid": std::process::id(),
            "time": crate::clock::now(),
            "slots": self.slots.entries().into_iter()
                .map(|(slot, phase)| json!({"slot": slot, "phase": phase})).collect::<Vec<_>>(),
        });
        let Some(dir) = self.path.parent() else {
            return;
        };
        let tmp = self
            .path
            .with_extension(format!("{}.tmp", std::process::id()));
        let _ = std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&tmp, body.to_string()))
            .and_then(|()| std::fs::rename(&tmp, &self.path));
    }
}

impl Drop for LiveFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The slots' phases a running run last wrote (empty when it wrote none, or its file is gone).
pub fn read_live(store_dir: &std::path::Path, run_id: &str) -> Vec<(String, String)> {
    let Ok(text) = std::fs::read_to_string(live_path(store_dir, run_id)) else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(&text).unwrap_or_default();
    v["slots"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e["slot"].as_str()?.to_string(),
                e["phase"].as_str()?.to_string(),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_file_holds_every_busy_slot_and_goes_with_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = live_path(dir.path(), "r1");
        {
            let mut live = LiveFile::new(dir.path(), "r1");
            assert!(read_live(dir.path(), "r1").is_empty());
            live.update(
                "cores 0",
                &Phase::Compiling {
                    candidate: "abc".into(),
                },
            );
            live.update(
                "lane-1",
                &Phase::Llm {
                    purpose: "improve".into(),
                    attempt: 1,
                    lane: "lane-1".into(),
                },
            );
            let now = read_live(dir.path(), "r1");
            assert_eq!(now.len(), 2, "{now:?}");
            assert_eq!(now[0].0, "cores 0");
            assert!(now[0].1.contains("abc"), "{now:?}");
            live.update("cores 0", &Phase::Idle);
            assert_eq!(read_live(dir.path(), "r1").len(), 1);
            assert!(path.is_file());
            // Only the file itself is left in the folder (each write replaces it whole).
            assert_eq!(
                std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
                1
            );
        }
        assert!(!path.exists(), "removed when the run's progress ends");
    }

    #[test]
    fn worker_lines_become_phases_and_other_lines_do_not() {
        assert_eq!(
            Phase::from_worker_line("ksearch-worker: phase timing sq256"),
            Some(Phase::Worker {
                step: "timing".into(),
                workload: "sq256".into()
            })
        );
        assert_eq!(
            Phase::from_worker_line("ksearch-worker: run sq256 passed 0.1s"),
            None
        );
        assert_eq!(
            Phase::from_worker_line("ksearch-worker: phase exfiltrating x"),
            None
        );
        // Candidate code shares the worker's stderr: no control sequence reaches the terminal.
        assert_eq!(
            Phase::from_worker_line("ksearch-worker: phase timing sq\u{1b}]0;pwned\u{7}"),
            None
        );
        let p = Phase::LlmRetry {
            purpose: "improve".into(),
            attempt: 2,
            wait_s: 4.0,
            lane: String::new(),
        };
        assert_eq!(p.describe(), "LLM call (improve) failed, retry 2 in 4.0 s");
        assert_eq!(p.to_json()["phase"], "llm_retry");
        assert!(p.to_json().get("lane").is_none());
        let p = Phase::Llm {
            purpose: "action".into(),
            attempt: 1,
            lane: "cycle 3 round 1".into(),
        };
        assert_eq!(
            p.describe(),
            "waiting for the LLM (action, lane cycle 3 round 1)"
        );
        assert_eq!(p.to_json()["lane"], "cycle 3 round 1");
    }

    #[test]
    fn each_slot_keeps_its_phase_until_it_is_idle() {
        let mut slots = Slots::default();
        let llm = |lane: &str| Phase::Llm {
            purpose: "improve".into(),
            attempt: 1,
            lane: lane.into(),
        };
        assert_eq!(llm("cycle 2 round 1").slot(), "cycle 2 round 1");
        assert_eq!(llm("").slot(), "llm");
        let timing = Phase::Worker {
            step: "timing".into(),
            workload: "sq256".into(),
        };
        // One slot: its phase alone, as a run of one thing at a time always showed.
        assert_eq!(slots.update("device 0", &timing), "timing sq256");
        slots.update("cycle 2 round 1", &llm("cycle 2 round 1"));
        let line = slots.update(QUEUE, &Phase::Queued { count: 2 });
        assert_eq!(
            line,
            "cycle 2 round 1: waiting for the LLM (improve, lane cycle 2 round 1) · device 0: timing sq256 · \
             queue: 2 queued for a device"
        );
        slots.update(QUEUE, &Phase::Queued { count: 0 });
        assert_eq!(
            slots.update("cycle 2 round 1", &Phase::Idle),
            "timing sq256"
        );
        assert_eq!(slots.update("device 0", &Phase::Idle), "");
    }
}
