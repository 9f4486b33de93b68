//! The search phase's evaluations: proposals evaluated on the feedback workloads, at once over the run's
//! devices (`--devices`, docs/parallel.md); with one device, one proposal at a time. A proposal alone
//! (the seed) has its workloads shared out over the devices instead (`Runner::evaluate_spread`).
//!
//! Each device's worker takes the next proposal not yet taken and evaluates it alone, so two evaluations
//! never time on one device at once. What each proposal is timed beside (the candidate the strategy names,
//! else the run's best before the proposals) and its attempt's number are fixed before any starts. Only this thread touches the store: workers send
//! each workload's result here, where it is stored the moment it arrives (a killed run loses only the
//! workloads in flight), and attempts are finished in the batch's order, so the history a resumed run reads
//! never has a gap before a finished attempt.

use super::{Runner, best_of, search_summary};
use crate::candidate::Candidate;
use crate::eval::{self, EvalOptions, Evaluate, Status, WorkloadResult};
use crate::progress::{Phase, QUEUE};
use crate::search::{Budget, Next, Observation, Proposal};
use crate::store::Phase as StorePhase;
use crate::task::Workload;
use anyhow::Result;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

/// One proposal of the batch, as fixed before the evaluations start.
struct Job {
    seq: i64,
    hash: String,
    proposal: Proposal,
    incumbent: Option<(String, Candidate)>,
    /// What the store already holds for each feedback workload (a resumed batch).
    stored: Vec<Option<WorkloadResult>>,
    /// An earlier job of the batch with the same candidate: this one takes its results (as one device would
    /// read them back from the store) instead of evaluating it again at the same time.
    same_as: Option<usize>,
}

/// What a device's worker (or the look-ahead) tells the store's thread.
enum Report {
    /// Job `.0` has this result for its next workload; `.2`: it is new (not read from the store).
    Result(usize, Box<WorkloadResult>, bool),
    /// Job `.0` is evaluated (every workload, or up to its first failure).
    Done(usize),
    /// The look-ahead's proposals are made: the strategy's state with them pending, and its new tree
    /// snapshots, stored at once (its LLM replies are not lost to a kill during the evaluations).
    Ahead(Box<serde_json::Value>, Vec<serde_json::Value>),
}

/// The strategy asked for its next proposals while a batch is evaluated (`Strategy::propose_ahead`).
pub(super) struct Ahead {
    /// The budget with the batch's proposals counted as spent.
    pub budget: Budget,
    pub k: usize,
}

impl Runner<'_> {
    /// Evaluates `proposals` at once, one per device, each up to its first failing workload (the candidate
    /// is out either way), and adds them to the history in their order. With `ahead`, the strategy is
    /// asked for its next proposals meanwhile, from the history without these (what it answers).
    pub(super) fn evaluate_proposals(
        &mut self,
        history: &mut Vec<Observation>,
        proposals: Vec<Proposal>,
        feedback: &[Workload],
        ahead: Option<Ahead>,
    ) -> Result<Vec<Next>> {
        let incumbent = best_of(history).map(|o| (o.hash.clone(), o.candidate.clone()));
        let mut jobs = Vec::new();
        for (i, p) in proposals.into_iter().enumerate() {
            let seq = (history.len() + i) as i64;
            let hash = self.store.put_candidate(&p.candidate)?;
            self.store.begin_attempt(
                &self.run_id,
                StorePhase::Search,
                seq,
                &hash,
                p.parent.as_deref(),
                &p.origin,
            )?;
            // Beside the candidate the strategy names, else the run's best before these proposals: the verdict
            // the strategy is told comes from the two measured side by side on the same inputs.
            let incumbent = p
                .compare_with
                .as_ref()
                .and_then(|h| history.iter().find(|o| &o.hash == h && o.cost().is_some()))
                .map(|o| (o.hash.clone(), o.candidate.clone()))
                .or_else(|| incumbent.clone());
            let stored = feedback
                .iter()
                .map(|w| {
                    self.store
                        .evaluation(&self.run_id, StorePhase::Search, &hash, &w.name)
                })
                .collect::<Result<Vec<_>, _>>()?;
            let same_as = jobs.iter().position(|j: &Job| j.hash == hash);
            jobs.push(Job {
                seq,
                hash,
                proposal: p,
                incumbent,
                stored,
                same_as,
            });
        }
        let (evaluated, next) =
            if let ([job], 2.., None) = (&jobs[..], self.evaluators.len(), &ahead) {
                // One proposal alone (the seed, whose result every prompt waits for): its workloads are shared
                // out over the devices instead of one device evaluating them in turn while the others idle.
                let opts = EvalOptions {
                    incumbent: job.incumbent.as_ref().map(|(h, c)| (h.as_str(), c)),
                    retime_baselines: false,
                };
                let (cand, hash) = (&job.proposal.candidate, job.hash.as_str());
                let each: Vec<(StorePhase, &Workload)> =
                    feedback.iter().map(|w| (StorePhase::Search, w)).collect();
                let results = self.evaluate_spread(cand, hash, &each, opts, true)?;
                let summary = search_summary(&results, feedback.len(), self.evaluators[0].timing());
                self.store
                    .finish_attempt(&self.run_id, StorePhase::Search, job.seq, &summary)?;
                (vec![(results, summary)], Vec::new())
            } else {
                self.run_jobs(&jobs, feedback, history, ahead)?
            };
        for (job, (results, summary)) in jobs.into_iter().zip(evaluated) {
            history.push(Observation {
                hash: job.hash,
                origin: job.proposal.origin,
                candidate: job.proposal.candidate,
                summary,
                results,
                held_out: None,
            });
        }
        Ok(next)
    }

    /// The jobs spread over the devices; each job's results in workload order, and its summary; and the
    /// look-ahead's answer.
    #[allow(clippy::type_complexity)]
    fn run_jobs(
        &mut self,
        jobs: &[Job],
        feedback: &[Workload],
        history: &[Observation],
        ahead: Option<Ahead>,
    ) -> Result<(Vec<(Vec<WorkloadResult>, eval::Summary)>, Vec<Next>)> {
        // (job, the workload it starts from, whether it is a retry after a worker's death)
        let queue = Mutex::new(
            (0..jobs.len())
                .filter(|&j| jobs[j].same_as.is_none())
                .map(|j| (j, 0, false))
                .collect::<VecDeque<(usize, usize, bool)>>(),
        );
        // Set when the store fails: workers stop taking jobs, the batch ends with the error.
        let stop = AtomicBool::new(false);
        let (tx, rx) = mpsc::channel::<Report>();
        let mut results: Vec<Vec<WorkloadResult>> = vec![Vec::new(); jobs.len()];
        let mut done = vec![false; jobs.len()];
        let mut summaries = Vec::new();
        let mut failure: Option<anyhow::Error> = None;
        let (store, run_id) = (self.store, self.run_id.clone());
        let slots = self.device_slots();
        let evaluators = &mut self.evaluators;
        let (strategy, exchanges) = (&mut self.strategy, &self.exchanges);
        let timing = evaluators[0].timing().clone();
        let in_flight: Vec<String> = jobs.iter().map(|j| j.hash.clone()).collect();
        let mut next = Vec::new();
        let queued = |count| crate::progress::report_in(QUEUE, Phase::Queued { count });
        queued(queue.lock().unwrap().len());
        std::thread::scope(|s| {
            // The look-ahead: the strategy's LLM work for its next proposals, beside the evaluations. It
            // touches only the strategy; its state reaches the store through this thread.
            let looking = ahead.map(|a| {
                let (tx, in_flight) = (tx.clone(), &in_flight);
                s.spawn(move || {
                    let next = strategy.propose_ahead(history, &a.budget, a.k, in_flight);
                    let snapshots = strategy.take_snapshots();
                    let _ = tx.send(Report::Ahead(Box::new(strategy.state()), snapshots));
                    next
                })
            });
            for (ev, slot) in evaluators.iter_mut().zip(&slots) {
                let (tx, queue, stop) = (tx.clone(), &queue, &stop);
                s.spawn(move || {
                    crate::progress::set_slot(slot);
                    loop {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let taken = {
                            let mut q = queue.lock().unwrap();
                            q.pop_front().map(|j| (j, q.len()))
                        };
                        let Some(((j, from, retry), left)) = taken else {
                            break;
                        };
                        queued(left);
                        let job = &jobs[j];
                        if let Some(at) =
                            evaluate_job(ev.as_mut(), job, j, from, retry, feedback, &tx, stop)
                        {
                            // The worker died under this evaluation (its restart is the device's): once
                            // more, first in line, on the next free device; a second death stands.
                            queue.lock().unwrap().push_front((j, at, true));
                            continue;
                        }
                        if tx.send(Report::Done(j)).is_err() {
                            break;
                        }
                    }
                    crate::progress::report(Phase::Idle);
                });
            }
            drop(tx);
            for report in rx {
                match report {
                    Report::Result(j, r, fresh) => {
                        if fresh
                            && failure.is_none()
                            && let Err(e) =
                                store.put_evaluation(&run_id, StorePhase::Search, &jobs[j].hash, &r)
                        {
                            failure = Some(e.into());
                            stop.store(true, Ordering::Relaxed);
                        }
                        results[j].push(*r);
                    }
                    Report::Ahead(state, snapshots) => {
                        if failure.is_none()
                            && let Err(e) = persist(store, &run_id, exchanges, &state, &snapshots)
                        {
                            failure = Some(e);
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                    Report::Done(j) => {
                        done[j] = true;
                        for d in (0..jobs.len()).filter(|&d| jobs[d].same_as == Some(j)) {
                            results[d] = results[j].clone();
                            done[d] = true;
                        }
                    }
                }
                // Attempts finish in the batch's order, each once all before it have.
                while failure.is_none() && summaries.len() < jobs.len() && done[summaries.len()] {
                    let i = summaries.len();
                    let summary = search_summary(&results[i], feedback.len(), &timing);
                    if let Err(e) =
                        store.finish_attempt(&run_id, StorePhase::Search, jobs[i].seq, &summary)
                    {
                        failure = Some(e.into());
                        stop.store(true, Ordering::Relaxed);
                    }
                    summaries.push(summary);
                }
            }
            if let Some(h) = looking {
                next = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            }
        });
        match failure {
            Some(e) => Err(e),
            None => Ok((results.into_iter().zip(summaries).collect(), next)),
        }
    }
}

/// The strategy's state, its new tree snapshots and the LLM exchanges recorded since the last drain,
/// into the store (as `Runner::persist_strategy`, from a state taken on another thread).
pub(super) fn persist(
    store: &crate::store::Store,
    run_id: &str,
    exchanges: &std::sync::Mutex<Vec<crate::llm::Exchange>>,
    state: &serde_json::Value,
    snapshots: &[serde_json::Value],
) -> Result<()> {
    let drained: Vec<_> = std::mem::take(&mut *exchanges.lock().unwrap());
    for ex in &drained {
        store.put_exchange(run_id, ex)?;
    }
    for snap in snapshots {
        store.put_snapshot(run_id, snap)?;
    }
    store.set_strategy_state(run_id, state)?;
    Ok(())
}

/// One job on one device, from workload `from`: its modules compiled at once, then each feedback workload
/// (the stored result where the store has one), up to the first that fails. The workload to evaluate again
/// when the worker died under it and this is not already the retry (its result is then not reported).
#[allow(clippy::too_many_arguments)]
fn evaluate_job(
    ev: &mut (dyn Evaluate + Send),
    job: &Job,
    j: usize,
    from: usize,
    retry: bool,
    feedback: &[Workload],
    tx: &mpsc::Sender<Report>,
    stop: &AtomicBool,
) -> Option<usize> {
    let cand = &job.proposal.candidate;
    let left: Vec<&Workload> = feedback
        .iter()
        .zip(&job.stored)
        .skip(from)
        .filter(|(_, s)| s.is_none())
        .map(|(w, _)| w)
        .collect();
    if !left.is_empty() {
        ev.precompile(cand, &left);
    }
    let opts = EvalOptions {
        incumbent: job.incumbent.as_ref().map(|(h, c)| (h.as_str(), c)),
        retime_baselines: false,
    };
    for (i, (w, stored)) in feedback.iter().zip(&job.stored).enumerate().skip(from) {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        let (r, fresh) = match stored {
            Some(r) => (r.clone(), false),
            None => {
                crate::progress::report(Phase::Evaluating {
                    candidate: job.hash.clone(),
                    workload: w.name.clone(),
                    index: i + 1,
                    count: feedback.len(),
                });
                (ev.evaluate_workload_with(cand, w, opts), true)
            }
        };
        if fresh && r.worker_died && !retry {
            tracing::warn!(
                "the worker died evaluating {} on {}: evaluated again",
                job.hash,
                w.name
            );
            return Some(i);
        }
        let failed = r.status != Status::Passed;
        if tx.send(Report::Result(j, Box::new(r), fresh)).is_err() || failed {
            return None;
        }
    }
    None
}
