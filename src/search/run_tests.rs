//! The runner through a scripted evaluator (`eval::Evaluate`): the run loop, its phases, its budget
//! and its resume, without Python or a worker. A candidate's time is a function of its tunable values, so
//! which candidate is best is known here.

use super::*;
use crate::eval::{EvalOptions, Hardware, Status, Timing, TimingSettings, WorkloadResult};
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;

/// One call the runner made: the candidate's hash, the workload, and whether baselines were re-timed.
type Call = (String, String, bool);

/// Every candidate passes; its time on any workload is `1 ms * (1 + sum of its tunable values / 100)`, plus
/// a picosecond-scale term from its hash so no two candidates tie.
/// With `die_at`, the call of that index panics, as a run killed mid-evaluation stops.
struct Scripted {
    hello: Value,
    timing: TimingSettings,
    calls: Rc<RefCell<Vec<Call>>>,
    die_at: Option<usize>,
}

fn time_of(c: &Candidate) -> f64 {
    let sum: i64 = c.params().values().sum();
    1e-3 * (1.0 + sum as f64 / 100.0) + (crate::rng::hash64(&c.hash()) % 1000) as f64 * 1e-12
}

impl Evaluate for Scripted {
    fn hello(&self) -> &Value {
        &self.hello
    }
    fn precompile(&mut self, _: &Candidate, _: &[&Workload]) {}
    fn evaluate_workload_with(
        &mut self,
        cand: &Candidate,
        w: &Workload,
        opts: EvalOptions<'_>,
    ) -> WorkloadResult {
        let n = self.calls.borrow().len();
        if self.die_at == Some(n) {
            panic!("killed at call {n}");
        }
        self.calls
            .borrow_mut()
            .push((cand.hash(), w.name.clone(), opts.retime_baselines));
        let t = time_of(cand);
        WorkloadResult {
            workload: w.name.clone(),
            status: Status::Passed,
            timing: Some(Timing {
                median_s: t,
                min_s: t,
                max_s: t,
                samples: 5,
                reps: 1,
                ..Default::default()
            }),
            ..Default::default()
        }
    }
    fn timing(&self) -> &TimingSettings {
        &self.timing
    }
    fn hardware(&self) -> Hardware {
        Hardware::from_hello(&self.hello)
    }
    fn worker_restarts(&self) -> u32 {
        0
    }
}

fn matmul() -> (Task, Candidate) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks/matmul");
    let task = Task::load(&dir).unwrap();
    let seed = Candidate::load(&task.find_seed(Target::Cpu, None).unwrap().dir).unwrap();
    (task, seed)
}

fn new_tune_run(store: &Store, task: &Task, seed: &Candidate, budget: usize) -> String {
    create(
        store,
        NewRun {
            task,
            target: Target::Cpu,
            seed: Some(seed),
            seed_name: "naive".into(),
            settings: Settings::for_task(task, Target::Cpu),
            strategy: StrategyKind::Tune,
            budget,
            llm: None,
            tune_budget: 0,
            tune_total: None,
            world_model: WorldModelConfig::default(),
        },
    )
    .unwrap()
}

fn open_scripted<'a>(
    store: &'a Store,
    run_id: &str,
    calls: &Rc<RefCell<Vec<Call>>>,
    die_at: Option<usize>,
) -> Runner<'a> {
    let calls = calls.clone();
    Runner::open_with(store, run_id, None, move |_, _, config| {
        Ok(Box::new(Scripted {
            hello: json!({"hardware": {"name": "scripted", "cores": 2, "peak_gflops": 10.0}}),
            timing: config.timing.clone(),
            calls,
            die_at,
        }) as Box<dyn Evaluate>)
    })
    .unwrap()
}

#[test]
fn a_tune_run_spends_its_budget_chooses_the_fastest_and_confirms_it_with_the_baselines() {
    let (task, seed) = matmul();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let run_id = new_tune_run(&store, &task, &seed, 6);
    let calls = Rc::new(RefCell::new(Vec::new()));
    let result = open_scripted(&store, &run_id, &calls, None)
        .execute(|_| {})
        .unwrap();

    let feedback: Vec<String> = task.workloads(false).map(|w| w.name.clone()).collect();
    let held_out: Vec<String> = task.workloads(true).map(|w| w.name.clone()).collect();
    assert!(!feedback.is_empty() && !held_out.is_empty());
    assert_eq!(result.status, RunStatus::Completed);
    assert_eq!(result.evaluations, 6, "tune's budget counts evaluations");
    assert_eq!(result.hardware.name.as_deref(), Some("scripted"));
    assert_eq!(
        store.run(&run_id).unwrap().unwrap().hardware().cores,
        Some(2)
    );
    let calls = calls.borrow();
    let search: Vec<&Call> = calls.iter().take(6 * feedback.len()).collect();
    let candidates: Vec<&String> = search.iter().map(|c| &c.0).collect();
    let distinct: std::collections::BTreeSet<&&String> = candidates.iter().collect();
    assert_eq!(distinct.len(), 6, "six distinct candidates evaluated");
    assert_eq!(search[0].0, seed.hash(), "the seed first");
    // The best is the fastest measured candidate; the scripted times make it known here.
    let stored = store.attempts(&run_id, Some(Phase::Search)).unwrap();
    assert_eq!(stored.len(), 6);
    let fastest = stored
        .iter()
        .min_by(|a, b| {
            let (x, y) = (a.summary.as_ref().unwrap(), b.summary.as_ref().unwrap());
            x.geomean_s.partial_cmp(&y.geomean_s).unwrap()
        })
        .unwrap();
    let best = result.best.as_ref().expect("a best candidate");
    assert_eq!(best.candidate, fastest.candidate);
    assert!(best.held_out_passed);
    // Then the held-out workloads on the best, and its feedback workloads again with the baselines re-timed.
    let tail: Vec<&Call> = calls.iter().skip(6 * feedback.len()).collect();
    let expected: Vec<(String, String, bool)> = held_out
        .iter()
        .map(|w| (best.candidate.clone(), w.clone(), true))
        .chain(
            feedback
                .iter()
                .map(|w| (best.candidate.clone(), w.clone(), true)),
        )
        .collect();
    assert_eq!(tail.into_iter().cloned().collect::<Vec<_>>(), expected);
    assert!(best.confirmed.is_some());
    // The seed's speedup is the ratio of the scripted times.
    let speedup = best.speedup_vs_seed.unwrap();
    let seed_time = time_of(&seed);
    let best_time = fastest.summary.as_ref().unwrap().geomean_s.unwrap();
    assert!((speedup - seed_time / best_time).abs() < 1e-9, "{speedup}");
}

#[test]
fn a_run_killed_mid_evaluation_resumes_without_evaluating_anything_twice() {
    let (task, seed) = matmul();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let run_id = new_tune_run(&store, &task, &seed, 5);
    let feedback = task.workloads(false).count();
    // Killed during the third candidate's second workload.
    let die_at = 2 * feedback + 1;
    let first = Rc::new(RefCell::new(Vec::new()));
    let killed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        open_scripted(&store, &run_id, &first, Some(die_at)).execute(|_| {})
    }));
    assert!(killed.is_err(), "the scripted kill happened");
    assert_eq!(first.borrow().len(), die_at);

    let second = Rc::new(RefCell::new(Vec::new()));
    let result = open_scripted(&store, &run_id, &second, None)
        .execute(|_| {})
        .unwrap();
    assert_eq!(result.status, RunStatus::Completed);
    assert_eq!(result.evaluations, 5);
    // Every (candidate, workload) of the search phase evaluated exactly once over both processes.
    let both: Vec<(String, String)> = first
        .borrow()
        .iter()
        .chain(second.borrow().iter())
        .filter(|c| !c.2)
        .map(|c| (c.0.clone(), c.1.clone()))
        .collect();
    let distinct: std::collections::BTreeSet<&(String, String)> = both.iter().collect();
    assert_eq!(
        distinct.len(),
        both.len(),
        "nothing evaluated twice: {both:?}"
    );
    assert_eq!(both.len(), 5 * feedback);
    // The resumed process went on from the interrupted candidate, whose first workload it reused.
    assert_eq!(second.borrow()[0].0, first.borrow()[die_at - 1].0);
}
