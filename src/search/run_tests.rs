//! The runner through a scripted evaluator (`scripted::ScriptedEvaluator`): the run loop, its phases, its budget
//! and its resume, without Python or a worker. A candidate's time is a function of its tunable values, so
//! which candidate is best is known here.

use super::*;
use crate::scripted::{Call, ScriptedEvaluator};
use std::sync::{Arc, Mutex};

/// A candidate's scripted time on any workload: `1 ms * (1 + sum of its tunable values / 100)`, plus a
/// picosecond-scale term from its hash so no two candidates tie.
fn time_of(c: &Candidate) -> f64 {
    let sum: i64 = c.params().values().sum();
    1e-3 * (1.0 + sum as f64 / 100.0) + (crate::rng::hash64(&c.hash()) % 1000) as f64 * 1e-12
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
            parallel: 1,
        },
    )
    .unwrap()
}

/// The run opened with a scripted evaluator; with `die_at`, its call of that index panics, as a run
/// killed mid-evaluation stops. Returns the runner and the calls it will make.
fn open_scripted<'a>(
    store: &'a Store,
    run_id: &str,
    die_at: Option<usize>,
) -> (Runner<'a>, Arc<Mutex<Vec<Call>>>) {
    let mut calls = None;
    let runner = Runner::open_with(store, run_id, None, |_, _, config| {
        let mut n = 0;
        let ev = ScriptedEvaluator::new(config.timing.clone(), move |c, _| {
            if die_at == Some(n) {
                panic!("killed at call {n}");
            }
            n += 1;
            Ok(time_of(c))
        });
        calls = Some(ev.calls());
        Ok(Box::new(ev) as Box<dyn Evaluate>)
    })
    .unwrap();
    (runner, calls.unwrap())
}

/// (candidate, workload, baselines re-timed) of each call.
fn triples(calls: &[Call]) -> Vec<(String, String, bool)> {
    calls
        .iter()
        .map(|c| (c.candidate.clone(), c.workload.clone(), c.retime_baselines))
        .collect()
}

#[test]
fn a_tune_run_spends_its_budget_chooses_the_fastest_and_confirms_it_with_the_baselines() {
    let (task, seed) = matmul();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let run_id = new_tune_run(&store, &task, &seed, 6);
    let (mut runner, calls) = open_scripted(&store, &run_id, None);
    let result = runner.execute(|_| {}).unwrap();

    let feedback: Vec<String> = task.workloads(false).map(|w| w.name.clone()).collect();
    let held_out: Vec<String> = task.workloads(true).map(|w| w.name.clone()).collect();
    assert!(!feedback.is_empty() && !held_out.is_empty());
    assert_eq!(result.status, RunStatus::Completed);
    assert_eq!(result.evaluations, 6, "tune's budget counts evaluations");
    assert_eq!(result.hardware.name.as_deref(), Some("scripted"));
    assert_eq!(
        store
            .run(&run_id)
            .unwrap()
            .unwrap()
            .hardware()
            .kind
            .as_deref(),
        Some("scripted")
    );
    let calls = triples(&calls.lock().unwrap());
    let search: Vec<&(String, String, bool)> = calls.iter().take(6 * feedback.len()).collect();
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
    let tail: Vec<&(String, String, bool)> = calls.iter().skip(6 * feedback.len()).collect();
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
    let (mut runner, first) = open_scripted(&store, &run_id, Some(die_at));
    let killed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runner.execute(|_| {})));
    assert!(killed.is_err(), "the scripted kill happened");
    drop(runner);
    // The call that was killed never finished: only those before it count.
    let first = triples(&first.lock().unwrap()[..die_at]);

    let (mut runner, second) = open_scripted(&store, &run_id, None);
    let result = runner.execute(|_| {}).unwrap();
    let second = triples(&second.lock().unwrap());
    assert_eq!(result.status, RunStatus::Completed);
    assert_eq!(result.evaluations, 5);
    // Every (candidate, workload) of the search phase evaluated exactly once over both processes.
    let both: Vec<(String, String)> = first
        .iter()
        .chain(second.iter())
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
    assert_eq!(second[0].0, first[die_at - 1].0);
}
