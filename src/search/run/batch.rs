//! The search phase's evaluations: proposals evaluated on the feedback workloads, at once over the run's
//! devices (`--devices`, docs/parallel.md); with one device, one proposal at a time.
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
use crate::search::{Observation, Proposal};
use crate::store::Phase;
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

/// What a device's worker tells the store's thread.
enum Report {
    /// Job `.0` has this result for its next workload; `.2`: it is new (not read from the store).
    Result(usize, Box<WorkloadResult>, bool),
    /// Job `.0` is evaluated (every workload, or up to its first failure).
    Done(usize),
}

impl Runner<'_> {
    /// Evaluates `proposals` at once, one per device, each up to its first failing workload (the candidate
    /// is out either way), and adds them to the history in their order.
    pub(super) fn evaluate_proposals(
        &mut self,
        history: &mut Vec<Observation>,
        proposals: Vec<Proposal>,
        feedback: &[Workload],
    ) -> Result<()> {
        let incumbent = best_of(history).map(|o| (o.hash.clone(), o.candidate.clone()));
        let mut jobs = Vec::new();
        for (i, p) in proposals.into_iter().enumerate() {
            let seq = (history.len() + i) as i64;
            let hash = self.store.put_candidate(&p.candidate)?;
            self.store.begin_attempt(
                &self.run_id,
                Phase::Search,
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
                        .evaluation(&self.run_id, Phase::Search, &hash, &w.name)
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
        let evaluated = self.run_jobs(&jobs, feedback)?;
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
        Ok(())
    }

    /// The jobs spread over the devices; each job's results in workload order, and its summary.
    fn run_jobs(
        &mut self,
        jobs: &[Job],
        feedback: &[Workload],
    ) -> Result<Vec<(Vec<WorkloadResult>, eval::Summary)>> {
        let queue = Mutex::new(
            (0..jobs.len())
                .filter(|&j| jobs[j].same_as.is_none())
                .collect::<VecDeque<usize>>(),
        );
        // Set when the store fails: workers stop taking jobs, the batch ends with the error.
        let stop = AtomicBool::new(false);
        let (tx, rx) = mpsc::channel::<Report>();
        let mut results: Vec<Vec<WorkloadResult>> = vec![Vec::new(); jobs.len()];
        let mut done = vec![false; jobs.len()];
        let mut summaries = Vec::new();
        let mut failure: Option<anyhow::Error> = None;
        let (store, run_id) = (self.store, self.run_id.clone());
        let evaluators = &mut self.evaluators;
        let timing = evaluators[0].timing().clone();
        std::thread::scope(|s| {
            for ev in evaluators.iter_mut() {
                let (tx, queue, stop) = (tx.clone(), &queue, &stop);
                s.spawn(move || {
                    loop {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let Some(j) = queue.lock().unwrap().pop_front() else {
                            return;
                        };
                        evaluate_job(ev.as_mut(), &jobs[j], j, feedback, &tx, stop);
                        if tx.send(Report::Done(j)).is_err() {
                            return;
                        }
                    }
                });
            }
            drop(tx);
            for report in rx {
                match report {
                    Report::Result(j, r, fresh) => {
                        if fresh
                            && failure.is_none()
                            && let Err(e) =
                                store.put_evaluation(&run_id, Phase::Search, &jobs[j].hash, &r)
                        {
                            failure = Some(e.into());
                            stop.store(true, Ordering::Relaxed);
                        }
                        results[j].push(*r);
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
                        store.finish_attempt(&run_id, Phase::Search, jobs[i].seq, &summary)
                    {
                        failure = Some(e.into());
                        stop.store(true, Ordering::Relaxed);
                    }
                    summaries.push(summary);
                }
            }
        });
        match failure {
            Some(e) => Err(e),
            None => Ok(results.into_iter().zip(summaries).collect()),
        }
    }
}

/// One job on one device: its modules compiled at once, then each feedback workload (the stored result
/// where the store has one), up to the first that fails.
fn evaluate_job(
    ev: &mut (dyn Evaluate + Send),
    job: &Job,
    j: usize,
    feedback: &[Workload],
    tx: &mpsc::Sender<Report>,
    stop: &AtomicBool,
) {
    let cand = &job.proposal.candidate;
    let left: Vec<&Workload> = feedback
        .iter()
        .zip(&job.stored)
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
    for (i, (w, stored)) in feedback.iter().zip(&job.stored).enumerate() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let (r, fresh) = match stored {
            Some(r) => (r.clone(), false),
            None => {
                crate::progress::report(crate::progress::Phase::Evaluating {
                    candidate: job.hash.clone(),
                    workload: w.name.clone(),
                    index: i + 1,
                    count: feedback.len(),
                });
                (ev.evaluate_workload_with(cand, w, opts), true)
            }
        };
        let failed = r.status != Status::Passed;
        if tx.send(Report::Result(j, Box::new(r), fresh)).is_err() || failed {
            return;
        }
    }
}
