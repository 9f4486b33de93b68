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
    new_pool_run(store, task, seed, budget, 0)
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
        Ok(vec![Box::new(ev) as Box<dyn Evaluate + Send>])
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

/// A tune run with `--parallel 4` over `devices` scripted devices; with `die_at`, device 0's call of that
/// index panics and so does every call after it on any device, as a killed process stops. Each
/// evaluation sleeps a little, device 0 twice as long as the others, so devices overlap and a later
/// proposal of a batch often finishes before an earlier one. Returns the runner, a log of finished calls
/// (device, candidate, workload), and the most evaluations ever in flight at once.
#[allow(clippy::type_complexity)]
fn open_pool<'a>(
    store: &'a Store,
    run_id: &str,
    devices: usize,
    die_at: Option<usize>,
) -> (
    Runner<'a>,
    Arc<Mutex<Vec<(usize, String, String)>>>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    let log = Arc::new(Mutex::new(Vec::new()));
    let most = Arc::new(AtomicUsize::new(0));
    let (in_flight, dead) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let (log2, most2) = (log.clone(), most.clone());
    let runner = Runner::open_with(store, run_id, None, move |_, _, config| {
        Ok((0..devices)
            .map(|d| {
                let busy = AtomicBool::new(false);
                let mut calls = 0;
                let (log, most, in_flight, dead) =
                    (log2.clone(), most2.clone(), in_flight.clone(), dead.clone());
                let ev = ScriptedEvaluator::new(config.timing.clone(), move |c, w| {
                    if dead.load(SeqCst) || (d == 0 && die_at == Some(calls)) {
                        dead.store(true, SeqCst);
                        panic!("killed at device {d}'s call {calls}");
                    }
                    calls += 1;
                    assert!(
                        !busy.swap(true, SeqCst),
                        "two evaluations at once on device {d}"
                    );
                    most.fetch_max(in_flight.fetch_add(1, SeqCst) + 1, SeqCst);
                    let ms = if d == 0 { 20 } else { 10 };
                    std::thread::sleep(std::time::Duration::from_millis(ms));
                    in_flight.fetch_sub(1, SeqCst);
                    busy.store(false, SeqCst);
                    log.lock().unwrap().push((d, c.hash(), w.name.clone()));
                    Ok(time_of(c))
                });
                Box::new(ev) as Box<dyn Evaluate + Send>
            })
            .collect())
    })
    .unwrap();
    (runner, log, most)
}

/// A tune run; with `devices` above 0, proposing 4 at a time over that many devices (scripted ones in
/// `open_pool`, each named by a core of its own).
fn new_pool_run(
    store: &Store,
    task: &Task,
    seed: &Candidate,
    budget: usize,
    devices: usize,
) -> String {
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
            parallel: if devices == 0 { 1 } else { 4 },
            devices: (0..devices)
                .map(|d| Device {
                    cores: Some(vec![d]),
                    ..Device::default()
                })
                .collect(),
            rng_seed: None,
        },
    )
    .unwrap()
}

#[test]
fn a_batch_over_two_devices_runs_two_evaluations_at_once_and_keeps_the_order_of_one() {
    let (task, seed) = matmul();
    let feedback = task.workloads(false).count();
    let search_attempts = |store: &Store, run_id: &str| -> Vec<String> {
        let a = store.attempts(run_id, Some(Phase::Search)).unwrap();
        assert!(a.iter().all(|a| a.finished));
        a.into_iter().map(|a| a.candidate).collect()
    };
    // Two runs of one configuration (the same random seed), on one device and on two.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let one = new_pool_run(&store, &task, &seed, 9, 1);
    let row = store.run(&one).unwrap().unwrap();
    let mut config = row.config.clone();
    config["devices"] = serde_json::json!([{"cores": [0]}, {"cores": [1]}]);
    let two = format!("{one}-two-devices");
    let task_dir = std::path::PathBuf::from(&row.task_dir);
    store
        .create_run(
            &two,
            &row.task,
            &task_dir,
            &row.target,
            &row.strategy,
            row.budget,
            &config,
        )
        .unwrap();
    let mut orders = Vec::new();
    for (run_id, devices) in [(&one, 1), (&two, 2)] {
        let (mut runner, log, most) = open_pool(&store, run_id, devices, None);
        let result = runner.execute(|_| {}).unwrap();
        drop(runner);
        assert_eq!(result.status, RunStatus::Completed);
        assert_eq!(result.evaluations, 9);
        let log = log.lock().unwrap();
        let used: std::collections::BTreeSet<usize> = log.iter().map(|c| c.0).collect();
        assert_eq!(used.len(), devices, "every device evaluated: {used:?}");
        assert_eq!(
            most.load(std::sync::atomic::Ordering::SeqCst),
            devices,
            "as many evaluations in flight as devices, never more"
        );
        // Nothing of the search phase evaluated twice.
        let search: Vec<&(usize, String, String)> = log.iter().take(9 * feedback).collect();
        let distinct: std::collections::BTreeSet<(&String, &String)> =
            search.iter().map(|c| (&c.1, &c.2)).collect();
        assert_eq!(distinct.len(), 9 * feedback);
        let hello = store.run(run_id).unwrap().unwrap().hello;
        assert_eq!(
            hello["devices"].as_array().map(Vec::len),
            (devices > 1).then_some(devices),
            "{hello}"
        );
        orders.push(search_attempts(&store, run_id));
    }
    // Scripted times do not depend on the device, so the strategy saw the same history either way.
    assert_eq!(orders[0], orders[1]);
}

#[test]
fn a_batch_killed_over_two_devices_resumes_without_evaluating_a_finished_workload_twice() {
    let (task, seed) = matmul();
    let feedback = task.workloads(false).count();
    // Device 0 takes the seed, then the first proposal of each batch, while device 1 runs through the
    // others: killed on device 0 mid-proposal, later proposals of its batch are finished.
    for die_at in [feedback + 1, feedback + 2, 2 * feedback + 1, 3 * feedback] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let run_id = new_pool_run(&store, &task, &seed, 9, 2);
        let (mut runner, first, _) = open_pool(&store, &run_id, 2, Some(die_at));
        let killed =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runner.execute(|_| {})));
        assert!(killed.is_err(), "the scripted kill happened");
        drop(runner);
        let (mut runner, second, _) = open_pool(&store, &run_id, 2, None);
        let result = runner.execute(|_| {}).unwrap();
        drop(runner);
        assert_eq!(result.status, RunStatus::Completed);
        assert_eq!(result.evaluations, 9);
        let stored = store.attempts(&run_id, Some(Phase::Search)).unwrap();
        assert_eq!(stored.len(), 9);
        assert!(stored.iter().all(|a| a.finished));
        // Every search-phase workload that finished before the kill was stored and not run again.
        let searched: std::collections::BTreeSet<&String> =
            stored.iter().map(|a| &a.candidate).collect();
        let (first, second) = (first.lock().unwrap(), second.lock().unwrap());
        let both: Vec<(&String, &String)> = first
            .iter()
            .chain(second.iter())
            .filter(|c| searched.contains(&c.1))
            .map(|c| (&c.1, &c.2))
            .collect();
        let distinct: std::collections::BTreeSet<&(&String, &String)> = both.iter().collect();
        // The chosen candidate's feedback workloads run again in the confirming phase; nothing else twice.
        assert_eq!(
            both.len() - distinct.len(),
            feedback,
            "die_at {die_at}: {both:?}"
        );
    }
}

#[test]
fn devices_whose_hardware_differs_are_marked_in_the_runs_hello() {
    let (task, seed) = matmul();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for (names, differ) in [(["a", "a"], false), (["a", "b"], true)] {
        let run_id = new_pool_run(&store, &task, &seed, 1, 2);
        let runner = Runner::open_with(&store, &run_id, None, |_, _, config| {
            Ok(names
                .iter()
                .map(|n| {
                    let ev = ScriptedEvaluator::new(config.timing.clone(), |c, _| Ok(time_of(c)));
                    Box::new(ev.named(n)) as Box<dyn Evaluate + Send>
                })
                .collect())
        })
        .unwrap();
        drop(runner);
        let hello = store.run(&run_id).unwrap().unwrap().hello;
        assert_eq!(hello["devices"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            hello["devices_differ"] == true,
            differ,
            "{names:?}: {hello}"
        );
    }
}

/// A run opened over `devices` scripted devices, device `d` answering with `script(d)`.
fn open_devices<'a, S>(
    store: &'a Store,
    run_id: &str,
    devices: usize,
    script: impl Fn(usize) -> S,
) -> Runner<'a>
where
    S: FnMut(&Candidate, &Workload) -> crate::scripted::Outcome + Send + 'static,
{
    Runner::open_with(store, run_id, None, |_, _, config| {
        Ok((0..devices)
            .map(|d| {
                let ev = ScriptedEvaluator::new(config.timing.clone(), script(d));
                Box::new(ev) as Box<dyn Evaluate + Send>
            })
            .collect())
    })
    .unwrap()
}

/// A worker that dies under an evaluation (the process, not the candidate's kernel host) costs that
/// workload one more evaluation on the next free device, not the candidate: the first candidate proposed
/// loses its worker once and still passes; the second loses it every time, and after the retry its
/// `crash` stands. Nothing else is evaluated twice.
#[test]
fn a_worker_dying_mid_evaluation_costs_the_evaluation_a_retry_not_the_candidate() {
    use crate::scripted::WORKER_DIED;
    let (task, seed) = matmul();
    let first_workload = task.workloads(false).next().unwrap().name.clone();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let run_id = new_pool_run(&store, &task, &seed, 6, 2);
    // Candidates other than the seed, in the order a device first met them; (candidate, workload) calls.
    let met: Arc<Mutex<Vec<String>>> = Arc::default();
    let log: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let seed_hash = seed.hash();
    let mut runner = open_devices(&store, &run_id, 2, |_| {
        let (met, log, seed_hash, first_workload) = (
            met.clone(),
            log.clone(),
            seed_hash.clone(),
            first_workload.clone(),
        );
        move |c: &Candidate, w: &Workload| {
            let hash = c.hash();
            let tries = {
                let mut log = log.lock().unwrap();
                log.push((hash.clone(), w.name.clone()));
                log.iter()
                    .filter(|(h, n)| *h == hash && *n == w.name)
                    .count()
            };
            let role = {
                let mut met = met.lock().unwrap();
                if hash != seed_hash && !met.contains(&hash) {
                    met.push(hash.clone());
                }
                met.iter().position(|h| *h == hash)
            };
            std::thread::sleep(std::time::Duration::from_millis(5));
            let dies = match role {
                Some(0) => tries == 1, // once
                Some(1) => true,       // every time
                _ => false,
            };
            if dies && w.name == first_workload {
                return Err((Status::Crash, WORKER_DIED.into()));
            }
            Ok(time_of(c))
        }
    });
    let result = runner.execute(|_| {}).unwrap();
    drop(runner);
    assert_eq!(result.status, RunStatus::Completed);
    assert_eq!(result.evaluations, 6);
    let (met, log) = (met.lock().unwrap(), log.lock().unwrap());
    let attempt = |hash: &str| {
        store
            .attempts(&run_id, Some(Phase::Search))
            .unwrap()
            .into_iter()
            .find(|a| a.candidate == hash)
            .unwrap()
    };
    let once = attempt(&met[0]);
    assert!(once.summary.as_ref().unwrap().passed, "{once:?}");
    let always = attempt(&met[1]);
    assert!(!always.summary.as_ref().unwrap().passed);
    let stored = store
        .evaluation(&run_id, Phase::Search, &met[1], &first_workload)
        .unwrap()
        .unwrap();
    assert_eq!(
        (stored.status, stored.message.as_str()),
        (Status::Crash, WORKER_DIED)
    );
    // The search phase: each died-under workload twice, nothing else.
    let searched: Vec<&(String, String)> = log
        .iter()
        .filter(|(h, _)| result.best.as_ref().is_none_or(|b| &b.candidate != h))
        .collect();
    let twice: std::collections::BTreeSet<&(String, String)> = searched
        .iter()
        .filter(|c| searched.iter().filter(|d| d == c).count() > 1)
        .copied()
        .collect();
    let want: std::collections::BTreeSet<&(String, String)> = log
        .iter()
        .filter(|(h, n)| (*h == met[0] || *h == met[1]) && *n == first_workload)
        .collect();
    assert_eq!(twice, want, "{log:?}");
    assert_eq!(want.len(), 2);
}

#[test]
fn a_proposal_alone_is_shared_out_over_the_devices_and_ends_at_its_first_failure() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let (task, seed) = matmul();
    let names: Vec<String> = task.workloads(false).map(|w| w.name.clone()).collect();
    assert!(names.len() >= 3, "the test needs three feedback workloads");
    let seed_hash = seed.hash();
    // `fail`: the seed's workload of that index fails. The first workload is slow: whichever device takes it,
    // the other evaluates the later ones meanwhile. Returns the run's result, the seed's calls (device,
    // candidate, workload), its attempt, the most evaluations at once, the seed's observation as a
    // reopened runner reads it back, and how many search-phase results the store holds for the seed.
    let run = |fail: Option<usize>| {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let run_id = new_pool_run(&store, &task, &seed, 3, 2);
        let log: Arc<Mutex<Vec<(usize, String, String)>>> = Arc::default();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut runner = open_devices(&store, &run_id, 2, |d| {
            let (log, names, in_flight, most) =
                (log.clone(), names.clone(), in_flight.clone(), most.clone());
            move |c: &Candidate, w: &Workload| {
                let now = in_flight.fetch_add(1, SeqCst) + 1;
                most.fetch_max(now, SeqCst);
                // The first call of a device waits for the other's (however loaded the machine),
                // so both devices start on the seed.
                let waited = std::time::Instant::now();
                while most.load(SeqCst) < 2 && waited.elapsed().as_secs() < 30 {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                // Held-out workloads (the final phase) are none of the feedback ones.
                let i = names
                    .iter()
                    .position(|n| *n == w.name)
                    .unwrap_or(names.len());
                std::thread::sleep(std::time::Duration::from_millis(if i == 0 {
                    60
                } else {
                    20
                }));
                in_flight.fetch_sub(1, SeqCst);
                log.lock().unwrap().push((d, c.hash(), w.name.clone()));
                if fail == Some(i) {
                    return Err((Status::Wrong, "scripted failure".into()));
                }
                Ok(time_of(c))
            }
        });
        let result = runner.execute(|_| {}).unwrap();
        drop(runner);
        let seed_calls: Vec<(usize, String, String)> = log
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.1 == seed_hash)
            .cloned()
            .collect();
        let attempt = store
            .attempts(&run_id, Some(Phase::Search))
            .unwrap()
            .into_iter()
            .find(|a| a.candidate == seed_hash)
            .unwrap();
        let reopened = open_devices(&store, &run_id, 2, |_| {
            |_: &Candidate, _: &Workload| -> crate::scripted::Outcome { unreachable!() }
        });
        let history = reopened.history().unwrap();
        let read_back = history.into_iter().find(|o| o.hash == seed_hash).unwrap();
        let stored = names
            .iter()
            .filter(|n| {
                store
                    .evaluation(&run_id, Phase::Search, &seed_hash, n)
                    .unwrap()
                    .is_some()
            })
            .count();
        let most = most.load(SeqCst);
        (result, seed_calls, attempt, most, read_back, stored)
    };
    // Passing: both devices took part in the seed's evaluation, each workload evaluated once.
    let (result, calls, attempt, most, _, _) = run(None);
    assert_eq!(result.status, RunStatus::Completed);
    let devices: std::collections::BTreeSet<usize> =
        calls.iter().take(names.len()).map(|c| c.0).collect();
    let evaluated: std::collections::BTreeSet<&String> =
        calls.iter().take(names.len()).map(|c| &c.2).collect();
    assert_eq!(
        evaluated.len(),
        names.len(),
        "each workload once: {calls:?}"
    );
    assert_eq!(
        devices.len(),
        2,
        "the seed's workloads on both devices: {calls:?}"
    );
    assert_eq!(most, 2);
    let summary = attempt.summary.unwrap();
    assert!(summary.passed, "{summary:?}");
    // The seed failing its first workload (the slow one, on device 0): device 1 has meanwhile evaluated
    // later workloads, but the result ends at the failure, as one device would have left it.
    let (result, calls, attempt, _, read_back, stored) = run(Some(0));
    assert_eq!(result.status, RunStatus::Failed, "{result:?}");
    let summary = attempt.summary.unwrap();
    assert!(!summary.passed);
    assert!(
        calls.len() >= 2,
        "the other device worked meanwhile: {calls:?}"
    );
    assert_eq!(
        summary.statuses.len(),
        1,
        "the observation ends at the failure: {summary:?}"
    );
    // The workload the other device held when the failure came is stored, yet a resumed run reads the
    // same observation back.
    assert!(stored >= 2, "{stored} results stored");
    assert_eq!(read_back.results.len(), 1, "{:?}", read_back.results);
    let seed_obs = result.seed.unwrap();
    assert!(
        seed_obs
            .failure
            .as_deref()
            .unwrap_or("")
            .contains("scripted failure"),
        "{seed_obs:?}"
    );
}
